# Shell functions the scripts share; source it: `. "$(dirname "$0")/lib.sh"`.

# install_missing NAME PACKAGE…: installs with apt-get, as root or through sudo, the Debian packages not installed
# yet, saying so on standard error as NAME; does nothing when every one is there.
install_missing() {
    local name=$1 package sudo=""
    shift
    local missing=()
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    echo "$name: installing ${missing[*]}" >&2
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# listening_address FILE PID: waits up to 30 s for the "listening on http://HOST:PORT" line that PID writes to FILE
# and prints HOST:PORT; when PID exits first or the time runs out, prints FILE on standard error and fails.
listening_address() {
    local file=$1 pid=$2 address
    for _ in $(seq 300); do
        address=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$file" 2>/dev/null | head -n 1 | sed 's|.*http://||') || true
        if [ -n "$address" ]; then echo "$address"; return 0; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "no 'listening on' line from pid $pid; its output:" >&2
    sed -e 's/^/  /' "$file" >&2
    return 1
}
