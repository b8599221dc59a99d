#!/bin/sh
# check_coll.sh - the collectives' benchmark runs, and a dead rank ends a
# collective instead of hanging it.
#
# Against a pinshmd of the test's own (--user -f on a socket in a fresh
# folder, autostart off), with the plugin preloaded ($PINSHM_MPI_LIB) under
# $MPIRUN:
#  - pinshm-mpi-bench -m coll, in a quick run (2 samples, 8 B and 64 KiB),
#    at 2 ranks and at 4 (oversubscribed): a line per call and size (the
#    nonblocking ones too, each with its MPI_Wait), exit
#    0, every call carried by the plugin (PINSHM_MPI_STATS); then
#    pinshm-mpi-compare -M coll for one round: its table, and the cache
#    line's round trips it took with the build's pinshm-perf.  No speed is
#    asserted.
#  - tests/mpi/coll_dead at 3 ranks: the last rank kills itself (SIGKILL)
#    between two collectives, and mpirun runs with --enable-recovery, so
#    that Open MPI does not end the job for it: the survivors' call must
#    end with MPI_ERR_OTHER (MPI_ERRORS_RETURN) or abort them (the default
#    handler), well within the time limit, never hang; and its 18 blocking
#    calls one after another, each passing the error to the handler once.
#  - coll_dead's "zero" and "inhandler" at 3 ranks, and at 4 on 2 pretend
#    nodes (PINSHM_MPI_NODES=2, the dead rank on the second, not its
#    leader), errors returned: each survivor's call of a count of 0, made
#    before a death was found and after, returns MPI_SUCCESS without the
#    handler or MPI_ERR_OTHER through it once (pinshm-mpi-coll(7): a call with
#    no bytes to move may run no step), MPI_Barrier between them the error;
#    and where the handler makes collectives (an MPI_Allreduce on
#    MPI_COMM_SELF and on a communicator of the survivors, an MPI_Barrier
#    on the failed communicator), every outer call reports once, through
#    the handler given that communicator, the first two succeed, and the
#    Barrier returns the error and reports it once itself (nested).
# In an ASan build the ranks preload the libasan that the plugin links
# before it (the runtime must come first), with leak checking off in them
# (Open MPI's own allocations at exit are not ours to fix), as check_mpi
# does.
# Skipped (77) without mpirun.  Run by make check from the top build folder.
set -eu

run_s=120  # for one mpirun: generous (a loaded machine); a hang runs into it
start_s=15 # for the daemon to answer

mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null 2>&1 || { echo "SKIP: no mpirun"; exit 77; }
plugin=${PINSHM_MPI_LIB:-$PWD/src/mpi/.libs/libpinshm_mpi.so}
bench=$PWD/clients/pinshm-mpi-bench
perf=$PWD/clients/pinshm-perf
dead=$PWD/tests/mpi/coll_dead
compare=${PINSHM_MPI_COMPARE:-${srcdir:-.}/clients/pinshm-mpi-compare}

work=$(mktemp -d "${TMPDIR:-/tmp}/pinshm-coll.XXXXXX")
daemon=
cleanup() {
    if [ -n "$daemon" ]; then
        kill "$daemon" 2>/dev/null || true
        wait "$daemon" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in out err pinshmd.log; do
        if [ -s "$work/$f" ]; then
            echo "--- $f:" >&2
            tail -n 40 "$work/$f" >&2
        fi
    done
    exit 1
}

for f in "$plugin" "$bench" "$perf" "$dead"; do
    [ -e "$f" ] || fail "$f is not built"
done
asan=$(ldd "$plugin" 2>/dev/null | awk '$1 ~ /^libasan\.so/ && $3 ~ /^\// { print $3; exit }')
preload=$plugin
if [ -n "$asan" ]; then
    preload=$asan:$plugin
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-}
    export ASAN_OPTIONS UBSAN_OPTIONS
fi

. "${srcdir:-.}/tests/daemon.sh"
start_pinshmd "$work" "$start_s"

PINSHM_SOCKET=$work/sock
PINSHM_AUTOSTART=0
export PINSHM_SOCKET PINSHM_AUTOSTART
if [ "$(id -u)" -eq 0 ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
fi

# mpi NP ARGS...: one mpirun with the plugin; its status in $rc.
mpi() {
    np=$1
    shift
    rc=0
    timeout -k 10 "$run_s" "$mpirun" -np "$np" --oversubscribe --mca pml ob1 --mca btl self,vader \
        -x LD_PRELOAD="$preload" -x PINSHM_SOCKET -x PINSHM_AUTOSTART -x PINSHM_MPI_STATS=1 \
        ${asan:+-x ASAN_OPTIONS -x UBSAN_OPTIONS} "$@" \
        >"$work/out" 2>"$work/err" </dev/null || rc=$?
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "mpirun -np $np $*: still running after $run_s s"
}

calls="barrier bcast reduce allreduce gather scatter allgather alltoall ibarrier ibcast ireduce iallreduce iallgather"
for np in 2 4; do
    mpi "$np" "$bench" -m coll -n 2 -t 0.01 -z 8,64K
    [ "$rc" -eq 0 ] || fail "pinshm-mpi-bench -m coll on $np ranks exited $rc"
    for c in $calls; do
        for b in 8 65536; do
            [ "$c" != barrier ] && [ "$c" != ibarrier ] || b=0
            line=$(grep "^coll bytes=$b call=$c ranks=$np us=[0-9.]* " "$work/out") ||
                fail "$np ranks: no line for $c of $b bytes"
            # Where the time went (not for a Barrier): a call and a barrier
            # timed, the ranks' skew, the rank first in one of the job's.
            # No relation between the times is asserted: a quick run's
            # samples are a few calls, and one rank's preemption on a busy
            # machine (the tests run two at a time) makes its mean what it
            # likes.
            if [ "$c" = barrier ]; then
                case $line in *cycle_us=* | *skew_us=*) fail "$np ranks: barrier: $line" ;; esac
            else
                echo "$line" | awk -v np="$np" '{
                    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                    exit !(v["cycle_us"] != "" && v["skew_us"] != "" && v["first_in"] != "" &&
                           v["first_in"] + 0 < np + 0 && v["skew_us"] + 0 >= 0 && v["cycle_us"] + 0 > 0) }' ||
                    fail "$np ranks: $c of $b bytes: $line"
            fi
        done
        n=$(sed -n "s/^pinshm-mpi coll stats: rank=[0-9]* call=$c pinshm_calls=\([0-9]*\) .*/\1/p" "$work/err" |
            awk '$1 > 0 { n++ } END { print n + 0 }')
        [ "$n" -eq "$np" ] || fail "$np ranks: $c went through pinshm at $n ranks of $np"
    done
done

rc=0
timeout -k 10 $((run_s * 3)) bash "$compare" -M coll -r 1 -R 2 -c barrier,allreduce -s 8 -X none -n 2 -t 0.01 \
    -b "$bench" -C "$perf" -p "$plugin" ${asan:+-L "$asan"} -m "$mpirun" -T "$run_s" \
    ${asan:+-- -x ASAN_OPTIONS -x UBSAN_OPTIONS} >"$work/out" 2>"$work/err" </dev/null || rc=$?
[ "$rc" -eq 0 ] || fail "pinshm-mpi-compare -M coll exited $rc"
grep -q "^collectives, time of one call" "$work/out" || fail "pinshm-mpi-compare -M coll: no table"
grep -Eq '^barrier +2 +0 +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$work/out" || fail "pinshm-mpi-compare: no barrier row"
grep -Eq '^allreduce +2 +8 +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$work/out" || fail "pinshm-mpi-compare: no allreduce row"
# The probe pins its two sides to CPUs 0 and 1, which this process may not have.
if "$perf" -t cacheline -p pingpong -s 64 -n 100 -f csv >/dev/null 2>&1 </dev/null; then
    grep -Eq '^cache line round trip before each variant and at the end of each round \(pinshm-perf, CPUs 0 and 1\): [0-9a-z]' "$work/out" ||
        fail "pinshm-mpi-compare: no cache line probe (the build's pinshm-perf)"
    ! grep -q 'cache line probe .* failed' "$work/err" || fail "pinshm-mpi-compare: a cache line probe failed"
fi

# A dead rank: the two survivors' calls end with the error, or abort.
for c in allreduce barrier bcast iallreduce; do
    mpi 3 --enable-recovery "$dead" "$c" return
    n=$(grep -c "^coll_dead: rank [01]: $c returned [0-9]* (class [0-9]*: MPI_ERR_OTHER" "$work/out" || true)
    [ "$n" -eq 2 ] || fail "$c with a dead rank, errors returned: $n survivors of 2 got MPI_ERR_OTHER"
    grep -q "pinshm-mpi: .* died: the collective call cannot complete" "$work/err" ||
        fail "$c with a dead rank: no message"
done
# One call after another: the first finds the death, the later ones its
# error at once; each must pass it to the handler once.
mpi 3 --enable-recovery "$dead" blocking return
n=$(grep -c "^coll_dead: rank [01]: [a-z_0-9A-Z]* returned [0-9]* (class [0-9]*: MPI_ERR_OTHER.*, handler 1$" \
    "$work/out" || true)
[ "$n" -eq 36 ] || fail "the blocking calls with a dead rank: $n of 36 returned MPI_ERR_OTHER through the handler once"
# expect N PATTERN WHAT: $work/out has N lines matching PATTERN.
expect() {
    n=$(grep -c "$2" "$work/out" || true)
    [ "$n" -eq "$1" ] || fail "$3: $n lines of $1 like: $2"
}
err='returned [0-9]* (class [0-9]*: MPI_ERR_OTHER[^)]*), handler 1$'
ok='returned 0 (class 0: [^)]*), handler 0'
for np in 3 4; do
    nodes=
    [ "$np" -eq 3 ] || nodes="-x PINSHM_MPI_NODES=2"
    s=$((np - 1)) # survivors
    # shellcheck disable=SC2086 # $nodes: none or two words
    mpi "$np" --enable-recovery $nodes "$dead" zero return
    w="calls of a count of 0 with a dead rank, $np ranks"
    expect $((s * 36)) '^coll_dead: rank [0-9]*: zero ' "$w"
    n=$(grep -c -e "^coll_dead: rank [0-9]*: zero [a-z_0-9]* $err" \
        -e "^coll_dead: rank [0-9]*: zero [a-z_0-9]* $ok\$" "$work/out" || true)
    [ "$n" -eq $((s * 36)) ] || fail "$w: $n of $((s * 36)) returned MPI_SUCCESS, or MPI_ERR_OTHER through the handler once"
    expect "$s" "^coll_dead: rank [0-9]*: barrier $err" "$w"
    # shellcheck disable=SC2086 # the same
    mpi "$np" --enable-recovery $nodes "$dead" inhandler return
    w="collectives in the error handler with a dead rank, $np ranks"
    expect $((s * 24)) '^coll_dead: rank ' "$w"
    expect $((s * 6)) "^coll_dead: rank [0-9]*: [a-z_]* $err" "$w"
    expect $((s * 6)) "^coll_dead: rank [0-9]*: in handler: self $ok, ok\$" "$w"
    expect $((s * 6)) "^coll_dead: rank [0-9]*: in handler: survivors $ok, ok\$" "$w"
    expect $((s * 6)) "^coll_dead: rank [0-9]*: in handler: world $err" "$w"
done
mpi 3 --enable-recovery "$dead" allreduce
! grep -q "returned" "$work/out" || fail "allreduce with a dead rank, errors fatal: a survivor returned"
# coll_dead's own line: Open MPI's abort message may be lost when both abort at once.
n=$(grep -c "^coll_dead: rank [01]: the default handler ends the process" "$work/out" || true)
[ "$n" -eq 2 ] || fail "allreduce with a dead rank, errors fatal: $n survivors of 2 aborted"

kill "$daemon"
wait "$daemon" || fail "pinshmd exited $? at SIGTERM"
daemon=
echo "PASS: the collectives' benchmark at 2 and 4 ranks; a dead rank fails Allreduce, Barrier, Bcast and Iallreduce;" \
    "calls of no data and collectives in the error handler after a death"
