# Sourced by scripts/rehearse-scale.sh and scripts/scale.sh (from the repository's root, with $binary set): the
# Debian packages (time among them), the release build when $binary is missing, and a scratch PostgreSQL cluster
# ($dir, its URL in $url) with a work directory ($work), both removed on exit.
scripts/install-deps.sh
if [ ! -x "$binary" ]; then
    swift build -c release --product baton
fi
dir=$(mktemp -d /tmp/baton-pg.XXXXXX)
work=$(mktemp -d /tmp/baton-scale.XXXXXX)
trap 'scripts/pg.sh destroy "$dir"; rm -rf "$work"' EXIT
url=$(scripts/pg.sh start "$dir")
