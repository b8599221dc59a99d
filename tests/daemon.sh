# daemon.sh - sourced by the test scripts (tests/*.sh), which define
# fail MESSAGE.
#
# start_pinshmd DIR SECONDS [ARGS...]: start the pinshmd just built
# ($PINSHMD) in user mode, in the foreground, on DIR/sock, with ARGS
# before -s and its stderr in DIR/pinshmd.log; set $daemon to its pid and
# wait until it answers ($PINSHMCTL ls), at most SECONDS, or fail.
start_pinshmd() {
    sp_dir=$1
    sp_s=$2
    shift 2
    "${PINSHMD:-daemon/pinshmd}" --user -f "$@" -s "$sp_dir/sock" 2>"$sp_dir/pinshmd.log" &
    daemon=$!
    sp_i=0
    until "${PINSHMCTL:-clients/pinshmctl}" -s "$sp_dir/sock" ls >/dev/null 2>&1; do
        kill -0 "$daemon" 2>/dev/null || fail "pinshmd exited at start"
        sp_i=$((sp_i + 1))
        [ "$sp_i" -le $((sp_s * 10)) ] || fail "pinshmd does not answer on $sp_dir/sock"
        sleep 0.1
    done
}
