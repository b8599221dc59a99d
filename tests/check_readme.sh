#!/bin/sh
# check_readme.sh - the README's C example, built and run, so that it
# cannot rot.
#
# The example is the README's lines from "/* example.c - " to
# "/* end of example.c */", less their 4-space indent.  It is compiled with
# the build's compiler and flags ($PINSHM_CC, set by make check) against
# include/pinshm.h and the libpinshm.so just built, then run as a consumer
# and a producer against a pinshmd of the test's own (--user -f on a socket
# in a fresh folder, with shared names off; $PINSHMD, $PINSHMCTL), with
# autostart off so that nothing else can answer.  The consumer must print the ten messages in
# order and the count, and both must exit 0.  Run by make check from the
# top build folder; $srcdir is the top source folder.
set -eu

srcdir=${srcdir:-.}
run_s=60   # for each example process
start_s=15 # for the daemon to answer

work=$(mktemp -d "${TMPDIR:-/tmp}/pinshm-readme.XXXXXX")
daemon=
consumer=
cleanup() {
    for pid in $consumer $daemon; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in consumer.out consumer.err producer.err pinshmd.log; do
        if [ -s "$work/$f" ]; then
            echo "--- $f:" >&2
            cat "$work/$f" >&2
        fi
    done
    exit 1
}

sed -n '/^    \/\* example\.c - /,/^    \/\* end of example\.c \*\/$/s/^    //p' \
    "$srcdir/README" >"$work/example.c"
[ "$(grep -c -e '^/\* example\.c - ' -e '^/\* end of example\.c \*/$' "$work/example.c")" = 2 ] ||
    fail "the README has no example between '/* example.c - ' and '/* end of example.c */'"

# shellcheck disable=SC2086 # PINSHM_CC is a command line
${PINSHM_CC:-cc} -Werror -I"$srcdir/include" -o "$work/example" "$work/example.c" \
    -L"$PWD/src/.libs" -Wl,-rpath,"$PWD/src/.libs" -lpinshm ||
    fail "the README's example does not compile"

# Shared names off, as an administrator may turn them: the example must
# use its user's own name (for a user other than root, who may create any).
printf '[daemon]\nshared_names = no\n' >"$work/pinshmd.conf"
. "$srcdir/tests/daemon.sh"
start_pinshmd "$work" "$start_s" -c "$work/pinshmd.conf"

PINSHM_SOCKET=$work/sock
PINSHM_AUTOSTART=0
export PINSHM_SOCKET PINSHM_AUTOSTART
timeout "$run_s" "$work/example" consumer >"$work/consumer.out" 2>"$work/consumer.err" &
consumer=$!
timeout "$run_s" "$work/example" producer 2>"$work/producer.err" || fail "the producer exited $?"
wait "$consumer" || fail "the consumer exited $?"
consumer=

{
    for i in 0 1 2 3 4 5 6 7 8 9; do
        echo "received: hello $i"
    done
    echo "10 messages"
} >"$work/want"
cmp -s "$work/want" "$work/consumer.out" || fail "the consumer's output is not the ten messages in order"

kill "$daemon"
wait "$daemon" || fail "pinshmd exited $? at SIGTERM"
daemon=
echo "PASS: the README's example, a consumer and a producer through pinshmd"
