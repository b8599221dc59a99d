#!/bin/sh
# check_insn.sh - instructions per message of libpinshm's own code, counted
# by callgrind in one thread's send/receive loop (tests/insn_loop.c), 64 B
# and 4 KiB, copy and zero-copy, against tests/insn-baseline: a count more
# than 2% above its baseline fails.  Only the library's own instructions
# count (callgrind_annotate, by object): the C library's memcpy differs
# from one processor to another, the library's code does not.  The loop
# runs twice (N1 and N2 messages) and the difference is divided, so that
# attaching and closing do not count.
#
#     check_insn.sh [--print]     (--print: the figures, in the baseline's format)
#
# Skipped (77) without valgrind, or in a build other than the default one
# (sanitizers, no LTO, another compiler or CFLAGS: configure says which).
set -eu

loop=${PINSHM_INSN_LOOP:-tests/insn_loop}
baseline=${PINSHM_INSN_BASELINE:-$(dirname "$0")/insn-baseline}
n1=2000
n2=12000
tolerance_pct=2

if [ "${PINSHM_INSN_BUILD:-default}" != default ]; then
    echo "check_insn: not the default build (sanitizers, no LTO, another compiler or CFLAGS): skipped"
    exit 77
fi
if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_annotate >/dev/null 2>&1; then
    echo "check_insn: valgrind (callgrind) is not installed: skipped"
    exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# own_ir MODE SIZE N: the instructions run in libpinshm's object.
own_ir() {
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$loop" "$1" "$2" "$3" \
        >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    callgrind_annotate --inclusive=no --threshold=100 "$tmp/out" 2>/dev/null |
        awk '/libpinshm/ { gsub(",", "", $1); s += $1 } END { print s + 0 }'
}

status=0
for mode in copy zerocopy; do
    for size in 64 4096; do
        a=$(own_ir $mode $size $n1)
        b=$(own_ir $mode $size $n2)
        per=$(( (b - a) / (n2 - n1) ))
        if [ "${1:-}" = --print ]; then
            echo "$mode $size $per"
            continue
        fi
        base=$(awk -v m=$mode -v s=$size '$1 == m && $2 == s { print $3 }' "$baseline")
        if [ -z "$base" ]; then
            echo "check_insn: no baseline for $mode $size in $baseline"
            status=1
            continue
        fi
        limit=$(( base + base * tolerance_pct / 100 ))
        verdict=ok
        if [ "$per" -gt "$limit" ]; then
            verdict="FAIL: more than $tolerance_pct% above the baseline"
            status=1
        fi
        echo "check_insn: $mode $size B: $per instructions a message (baseline $base, limit $limit): $verdict"
    done
done
exit $status
