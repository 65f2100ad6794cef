#!/usr/bin/env bash
# `make dist`: a self-contained release build of `baton` and its Debian package, with no network.
#
#   scripts/dist.sh            build (swift build -c release --static-swift-stdlib), check, package
#   scripts/dist.sh --no-build package the binary already built
#
# The Swift runtime and Foundation are linked into the binary, so it runs on a Debian 12 machine without the
# toolchain: its only run-time dependencies are Debian 12 libraries (OpenSSL, libpq, libmicrohttpd, and libcurl
# for Foundation's URLSession). The package's Depends is read off the binary by dpkg-shlibdeps, not written by
# hand. Writes dist/baton_VERSION_ARCH.deb and dist/baton (the stripped binary) and prints a summary: sizes,
# the libraries, Depends, and the start time of `baton --help`.
#
# Environment: VERSION (default 0~gitYYYYMMDD.HASH of the last commit), SOURCE_DATE_EPOCH (default the last
# commit's time: the package's timestamps, so two builds of one commit pack the same files).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
export PATH=$PATH:/opt/swift/usr/bin

# What building and packaging need beyond scripts/install-deps.sh: libcurl's headers for the static
# FoundationNetworking, dpkg-dev for dpkg-shlibdeps, binutils for strip, man-db to check the page.
install_missing dist libcurl4-openssl-dev dpkg-dev binutils man-db

build=1
[ "${1:-}" = --no-build ] && build=0
flags=(-c release --static-swift-stdlib --product baton)
if [ $build = 1 ]; then
    swift build "${flags[@]}"
fi
bin_dir=$(swift build "${flags[@]}" --show-bin-path)
binary=$bin_dir/baton
resources=$bin_dir/Baton_Baton.resources
[ -x "$binary" ] || { echo "dist: no binary at $binary (run without --no-build)" >&2; exit 1; }
[ -d "$resources/Schema" ] || { echo "dist: no schema bundle at $resources" >&2; exit 1; }

# No toolchain library may be left to load at run time.
libraries=$(ldd "$binary")
if grep -E '/opt/swift|swift|not found|libFoundation|libdispatch|libBlocksRuntime' <<<"$libraries"; then
    echo "dist: the binary still needs the toolchain's libraries (above)" >&2
    exit 1
fi

commit_epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$commit_epoch}
version=${VERSION:-0~git$(date -u -d "@$commit_epoch" +%Y%m%d).$(git rev-parse --short=7 HEAD 2>/dev/null || echo unknown)}
arch=$(dpkg --print-architecture)

mkdir -p dist
stage=$(mktemp -d /tmp/baton-dist.XXXXXX)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -d "$root/usr/lib/baton" "$root/usr/bin" "$root/etc/baton/keys" "$root/lib/systemd/system" \
    "$root/usr/share/man/man1" "$root/usr/share/bash-completion/completions" "$root/usr/share/doc/baton/examples" \
    "$root/usr/share/baton/prometheus" "$root/DEBIAN"

# The binary lives beside its resource bundle (Baton's schema migrations, found next to the executable's
# real path); /usr/bin/baton is a link to it. Stripped of debug information and local symbols; the dynamic
# symbol table stays, so a crash's backtrace still names Swift functions.
install -m 0755 "$binary" "$root/usr/lib/baton/baton"
strip --strip-unneeded "$root/usr/lib/baton/baton"
cp -r "$resources" "$root/usr/lib/baton/"
chmod -R u=rwX,go=rX "$root/usr/lib/baton/Baton_Baton.resources"
ln -s ../lib/baton/baton "$root/usr/bin/baton"

# Configuration: the sample configuration (its relative key paths land in /etc/baton/keys) and the unit's
# environment file; both conffiles.
install -m 0644 sample-config/baton.json "$root/etc/baton/baton.json"
install -m 0640 packaging/baton.env "$root/etc/baton/baton.env"
install -m 0644 packaging/baton.service "$root/lib/systemd/system/baton.service"

# Generated from the commands' declarations by the binary itself.
"$root/usr/lib/baton/baton" completions bash >"$root/usr/share/bash-completion/completions/baton"
scripts/manpage.sh "$root/usr/lib/baton/baton" "$version" >"$stage/baton.1"
warnings=$(LC_ALL=C.UTF-8 MANWIDTH=100 man --warnings -E UTF-8 -l "$stage/baton.1" 2>&1 >/dev/null || true)
if [ -n "$warnings" ]; then
    echo "dist: the manual page has roff warnings:" >&2
    echo "$warnings" >&2
    exit 1
fi
gzip -9n <"$stage/baton.1" >"$root/usr/share/man/man1/baton.1.gz"
chmod 0644 "$root/usr/share/man/man1/baton.1.gz" "$root/usr/share/bash-completion/completions/baton"

install -m 0644 alerts/baton.rules.yml "$root/usr/share/baton/prometheus/baton.rules.yml"
install -m 0644 packaging/debian/copyright "$root/usr/share/doc/baton/copyright"
for doc in README.md docs/runbook.md docs/configuration.md docs/openapi.yaml docs/troubleshooting.md alerts/README.md; do
    name=$(basename "$doc"); [ "$doc" = alerts/README.md ] && name=alerts.md
    install -m 0644 "$doc" "$root/usr/share/doc/baton/$name"
done
install -m 0644 sample-config/*.json "$root/usr/share/doc/baton/examples/"

# Depends: the packages holding the libraries the binary links, with the versions their symbols need.
shlib=$stage/shlib
mkdir -p "$shlib/debian"
printf 'Source: baton\n\nPackage: baton\nArchitecture: any\n' >"$shlib/debian/control"
depends=$(cd "$shlib" && dpkg-shlibdeps -O -e"$root/usr/lib/baton/baton" 2>"$stage/shlibdeps.log" | sed -n 's/^shlibs:Depends=//p') \
    || { cat "$stage/shlibdeps.log" >&2; exit 1; }
[ -n "$depends" ] || { echo "dist: dpkg-shlibdeps found no dependencies" >&2; cat "$stage/shlibdeps.log" >&2; exit 1; }
# passwd: the postinst's useradd and groupadd; procps: /bin/kill, the unit's ExecReload (SIGHUP).
depends="$depends, passwd, procps"

installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@INSTALLED_SIZE@/$installed_size/" -e "s/@DEPENDS@/$depends/" \
    packaging/debian/control.in >"$root/DEBIAN/control"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$root/DEBIAN/"
printf '/etc/baton/baton.json\n/etc/baton/baton.env\n' >"$root/DEBIAN/conffiles"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

rm -f dist/baton_*.deb
deb=dist/baton_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
install -m 0755 "$root/usr/lib/baton/baton" dist/baton

start=$( { /usr/bin/time -f %e dist/baton --help >/dev/null; } 2>&1 )
echo "dist: $deb ($(du -k "$deb" | cut -f1) KiB; installed $installed_size KiB)"
echo "dist: binary $(stat -c %s dist/baton) bytes stripped ($(stat -c %s "$binary") as built); 'baton --help' in ${start} s"
echo "dist: Depends: $depends"
echo "dist: libraries the binary names (NEEDED): $(objdump -p dist/baton | awk '/NEEDED/ { print $2 }' | tr '\n' ' ')"
