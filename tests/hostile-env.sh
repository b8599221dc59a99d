#!/bin/sh
# hostile-env.sh - run a command (a `make check`) as on a machine where
# pinshm is deployed, to show that the tests choose their own daemon and
# environment:
#   - a private mount namespace (nothing below is seen outside it);
#   - /etc/pinshm/pinshmd.conf with a small budget and per-user quota, and
#     a system-mode pinshmd reading it, serving the default socket
#     /run/pinshm/socket (both folders are fresh tmpfs mounts);
#   - XDG_RUNTIME_DIR and PINSHM_SOCKET pointing elsewhere: an empty folder
#     and a socket path where nothing listens.
# A test that reaches the system daemon, or the caller's sockets, fails
# there (quota, wrong daemon, no daemon) instead of passing by luck.
#
# Usage (as root, from the build folder):
#   ../tests/hostile-env.sh make check TESTS=tests/check_mpi
# $PINSHMD names the daemon to run (default: daemon/pinshmd of the current
# folder).  Exits with the command's status; 77 (skip) where no mount
# namespace can be made.
set -eu

if [ "${1:-}" != --inside ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "hostile-env.sh: needs root (a mount namespace, a system daemon)" >&2
        exit 77
    fi
    if ! unshare -m --propagation private true 2>/dev/null; then
        echo "hostile-env.sh: cannot make a mount namespace here: skipped" >&2
        exit 77
    fi
    # The mount points: made here where missing, removed again after.
    made=""
    for d in /run/pinshm /etc/pinshm; do
        [ -e "$d" ] || { mkdir -p "$d" && made="$made $d"; }
    done
    set +e
    unshare -m --propagation private "$0" --inside "$@"
    rc=$?
    for d in $made; do rmdir "$d" 2>/dev/null; done
    exit "$rc"
fi
shift

pinshmd=$(readlink -f "${PINSHMD:-daemon/pinshmd}")
[ -x "$pinshmd" ] || { echo "hostile-env.sh: no daemon at $pinshmd (set PINSHMD)" >&2; exit 2; }

mount -t tmpfs -o mode=0755 tmpfs /run/pinshm
mount -t tmpfs -o mode=0755 tmpfs /etc/pinshm
cat >/etc/pinshm/pinshmd.conf <<'EOF'
# hostile-env.sh: a deployed machine's small limits
[daemon]
budget = 8M
default_user_quota = 1M
max_channels_per_user = 4
EOF
chmod 0644 /etc/pinshm/pinshmd.conf

elsewhere=$(mktemp -d /tmp/pinshm-hostile-XXXXXX)
mkdir -m 0700 "$elsewhere/xdg"
log="$elsewhere/system-pinshmd.log"
"$pinshmd" -f >"$log" 2>&1 &
daemon=$!
cleanup() {
    kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
    rm -rf "$elsewhere"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

i=0
until [ -S /run/pinshm/socket ]; do
    i=$((i + 1))
    if [ "$i" -gt 100 ] || ! kill -0 "$daemon" 2>/dev/null; then
        echo "hostile-env.sh: the system daemon did not start:" >&2
        cat "$log" >&2
        exit 2
    fi
    sleep 0.1
done
echo "hostile-env.sh: system pinshmd $daemon on /run/pinshm/socket (quota 1M, budget 8M)," \
    "XDG_RUNTIME_DIR=$elsewhere/xdg PINSHM_SOCKET=$elsewhere/nothing/socket"

export XDG_RUNTIME_DIR="$elsewhere/xdg"
export PINSHM_SOCKET="$elsewhere/nothing/socket"
set +e
"$@"
rc=$?
set -e
if ! kill -0 "$daemon" 2>/dev/null; then
    echo "hostile-env.sh: the system daemon died during the run:" >&2
    cat "$log" >&2
    [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
