#!/bin/sh
# mutants.sh - do the tests that guard a property fail when it breaks?
#
# In a throw-away copy of the committed tree (git archive HEAD), each mutant
# below breaks one guard of src/ or daemon/ with a sed expression; the copy
# is rebuilt and the tests that guard that property run until one fails.
# One line a mutant: "caught by TEST", or "SURVIVED" (no guarding test
# failed: strengthen one).  The guarding tests first run on the unmutated
# copy: one that fails there judges nothing.  Slow: a build and some tests a
# mutant, one at a time; not part of make check.
#
# Usage: tests/mutants.sh [NAME...]    (from the source tree; no NAME: all)
# KEEP=1 keeps the copy, with each run's output in NAME.log.
set -u

top=$(git rev-parse --show-toplevel) || exit 1
tmp=$(mktemp -d) || exit 1
chmod 755 "$tmp" # tests run pinshmd as another user too
[ "${KEEP:-}" = 1 ] || trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
git -C "$top" archive HEAD | tar -x -C "$tmp" || exit 1
cd "$tmp" || exit 1
echo "building HEAD in $tmp"
if ! { autoreconf -fi && mkdir build && (cd build && ../configure) && make -C build -j2 check TESTS=; } >build.log 2>&1; then
	tail -20 "$tmp/build.log"
	echo "the unmutated copy does not build"
	exit 1
fi

# Run Check test program:case $1 (case optional) in build/, output to $2.
run_test() {
	(
		cd build || exit 1
		prog=${1%%:*} tcase=${1#*:}
		if [ "$tcase" != "$1" ]; then export CK_RUN_CASE="$tcase"; else unset CK_RUN_CASE; fi
		CK_DEFAULT_TIMEOUT=120 PINSHMD="$PWD/daemon/pinshmd" PINSHMCTL="$PWD/clients/pinshmctl" \
			PINSHM_DEMO="$PWD/clients/pinshm-demo" timeout 1200 "./tests/$prog"
	) >>"$2" 2>&1
}

# The guarding tests of a mutant are checked unmutated once each, on a
# build of the unmutated tree: the last mutant's file is put back, but its
# build stays until the next build.
baseline() {
	case " $passed " in *" $1 "*) return 0 ;; esac
	case " $failed " in *" $1 "*) return 1 ;; esac
	if [ -n "$dirty" ]; then
		if ! make -C build -j2 check TESTS= >rebuild.log 2>&1; then
			echo "the unmutated copy does not build again (see rebuild.log)"
			exit 1
		fi
		dirty=
	fi
	if run_test "$1" "$tmp/baseline.log"; then passed="$passed $1"; else failed="$failed $1"; return 1; fi
}

# mutant NAME FILE SED-EXPRESSION TEST...
mutant() {
	name=$1 file=$2 expr=$3
	shift 3
	if [ -n "$only" ]; then
		case " $only " in *" $name "*) ;; *) return 0 ;; esac
	fi
	for t in "$@"; do
		if ! baseline "$t"; then
			echo "$name: $t fails unmutated (see baseline.log): not judged"
			return 0
		fi
	done
	cp "$file" "$file.orig"
	sed -i "$expr" "$file"
	if cmp -s "$file" "$file.orig"; then
		echo "$name: the expression changes nothing in $file (stale mutant)"
	elif ! make -C build -j2 check TESTS= >"$name.log" 2>&1; then
		echo "$name: does not build (see $name.log)"
	else
		verdict=SURVIVED
		for t in "$@"; do
			if ! run_test "$t" "$name.log"; then
				verdict="caught by $t"
				break
			fi
		done
		echo "$name: $verdict"
	fi
	cp "$file.orig" "$file" # a new mtime: the next build recompiles it
	rm -f "$file.orig"
	dirty=1
}

only="$*"
passed=
failed=
dirty=

mutant ring-max-message src/ring.h \
	's/if (len > g->max_message || off + rec_size(len) > g->capacity)/if (off + rec_size(len) > g->capacity)/' \
	check_corrupt:random check_corrupt:records
mutant ring-free-bound src/produce.c \
	's/if (free > tail || tail - free > cap || !pos_aligned(free))/if (free > tail || !pos_aligned(free))/' \
	check_corrupt:positions check_corrupt:random
mutant ring-cursor-bound src/produce.c \
	's/if (cursor > tail || tail - cursor > cap || !pos_aligned(cursor))/if (cursor > tail || !pos_aligned(cursor))/' \
	check_corrupt:positions check_corrupt:random
mutant consumer-position-bound src/consume.c \
	's/if (!pos_aligned(pos) || pos > reserve)/if (!pos_aligned(pos))/' \
	check_corrupt:positions check_corrupt:random
mutant hidden-lane-never-looked src/consume.c \
	's/return ch->live_lanes < ch->g.max_producers;/return false;/' \
	check_hostile:peers
mutant quota-charge-skipped daemon/account.c \
	's/^\tu->use.bytes += size;$/\t(void)u;/' \
	check_daemon:accounting check_isolation:users
mutant open-mode-widened daemon/registry.c \
	's/role == PINSHM_PRODUCER ? CRED_WRITE : CRED_READ)/CRED_READ)/' \
	check_daemon:permissions check_isolation:users
mutant unlink-owner-widened daemon/registry.c \
	's/if (c->cred.uid != 0 && c->cred.uid != chan->uid) {/if (0) {/' \
	check_daemon:permissions check_isolation:users
mutant notify-not-wake-socket daemon/wake.c \
	's/if (\*fd < 0 || !is_wake_socket(\*fd)) {/if (*fd < 0) {/' \
	check_daemon:events
mutant wake-send-blocking src/wakeup.c \
	's/MSG_DONTWAIT | MSG_NOSIGNAL/MSG_NOSIGNAL/' \
	check_wakeup:hostile
mutant memfd-shrink-unsealed daemon/segment.c \
	's/F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)/F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SEAL)/' \
	check_segment:backend
mutant fdstore-gives-up-nothing daemon/fdstore.c \
	's/pending\[FDSTORE_PENDING_MAX\];/pending[FDSTORE_PENDING_MAX + 8];/; /notifications wait to be sent, the most/,/return;/s/return;/append(fdname, -1); return;/' \
	check_lifecycle:restart
mutant start-time-wrong-reap daemon/watch.c \
	's/if (proc_start(rw->here) != rw->start)/if (1)/' \
	check_lifecycle:judge
mutant adopt-maps-one-turn daemon/registry.h \
	's/#define REGISTRY_MAPS_SLICE (64u << 10)/#define REGISTRY_MAPS_SLICE (64u << 20)/' \
	check_hostile:stall_peers
mutant reap-one-turn daemon/registry.h \
	's/#define REGISTRY_REAP_SLICE (1u << 20)/#define REGISTRY_REAP_SLICE (1u << 30)/' \
	check_hostile:stall_peers
mutant create-lock-one-turn daemon/segment.c \
	's|return (SEGMENT_SLICE_BYTES + page - 1) / page \* page;|return SIZE_MAX;|' \
	check_hostile:stall
mutant huge-lock-one-turn daemon/segment.c \
	's|return (SEGMENT_SLICE_BYTES + page - 1) / page \* page;|return s->hugepages ? s->size : (SEGMENT_SLICE_BYTES + page - 1) / page * page;|' \
	check_segment:hugepages check_hostile:stall_huge
mutant huge-step-inside-page daemon/segment.c \
	's|size_t end = (at + max + page - 1) / page \* page;|size_t end = at + max;|' \
	check_segment:hugepages
mutant destroy-no-punch daemon/segment.c \
	's/if (len > 0 \&\& s->fd >= 0 \&\& s->release)/if (0)/' \
	check_hostile:release
mutant pool-drain-one-turn daemon/pool.c \
	's/pool_drain(p, later); \/\*/pool_drain(p, NULL); \/*/' \
	check_hostile:stall
mutant name-owner-widened daemon/names.c \
	's/if (owner == c->uid)/if (1)/' \
	check_isolation:squatting
mutant socket-folder-owner-trusted src/protocol.c \
	's/if (st.st_uid != geteuid()) {/if (0) {/' \
	check_isolation:squatting
mutant client-error-shared src/client.c \
	's/return e ? e->text : c->error;/return c->error;/' \
	check_wakeup:threads
mutant idle-relock-one-turn daemon/locking.c \
	's/relock_slice(chan, slice)/relock_slice(chan, SIZE_MAX)/' \
	check_hostile:stall_idle
mutant relock-waits-for-dying daemon/registry.c \
	's/bool lock_due = r->locking.first \&\& r->lock_waited;/bool lock_due = false;/' \
	check_hostile:stall_idle
mutant relock-replied-early daemon/idle.c \
	's/return rc > 0 ? -EINPROGRESS : rc;/return rc > 0 ? 0 : rc;/' \
	check_hostile:stall_idle
mutant huge-create-no-wait daemon/making.c \
	's/if (o->hugepages \&\& rc == -ENOMEM \&\& dying_huge(dying)) {/if (0) {/' \
	check_hostile:stall_huge
mutant relock-said-early daemon/segment.c \
	's|^\t/\* shm, shrunk: mlock would populate what is gone. \*/$|\tsegment_access(s, set_unlocked_fn, \&zero); s->unlocked = false;|' \
	check_segment:backend
