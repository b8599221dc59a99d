/*
 * adopt.h - channels that outlive a daemon: kept in systemd's descriptor
 * store, and adopted again by the daemon that starts next.
 *
 * pinshmd killed (even by SIGKILL) breaks no channel: the clients keep
 * their mappings and exchange messages without it.  What a restarted
 * daemon must get back is its record of each channel (name, owner, mode,
 * geometry) and the segment's descriptor, to lock it, account it and hand
 * it out again.
 *
 * In service mode ($NOTIFY_SOCKET set, as under systemd with
 * FileDescriptorStoreMax=), every channel created is put in the
 * descriptor store: sd_notify "FDSTORE=1" with the segment's descriptor
 * and "FDNAME=" the daemon's record of it, written by the daemon alone
 * (clients cannot reach it, so what it says is trusted once it parses):
 *
 *   pinshm.2.INO.UID.GID.MODE.FLAGS.KIND.GFLAGS.CAPACITY.MAXMSG.PROD.CONS.NODE.PINIDLE.NAME
 *
 * (decimal numbers, MODE octal, FLAGS: PINSHM_PERSISTENT or 0, PINIDLE the
 * channel's pin_idle, 0: always locked; INO, the segment's inode, makes the
 * name unique and must be the descriptor's).  A record of version 1 (an
 * older daemon's, the same without PINIDLE) is still adopted, with the
 * configured pin_idle, and stored again as version 2 (the old one removed
 * first: systemd keeps a descriptor under its first name).  A record is
 * parsed strictly (digits only, no leading zero, each number within its
 * field, a valid name): anything else is logged, closed and removed.
 * When a channel is unlinked or destroyed its entry is removed
 * ("FDSTOREREMOVE=1"; one that cannot be sent waits and is sent again,
 * in order: fdstore.h).  The eventfd that a
 * consumer gave the daemon (NOTIFY) is kept there too, as
 *
 *   pinshm-efd.2.DEV.INO.ENDPOINT.NAME
 *
 * (NAME the channel's, DEV and INO its segment's), only for a channel whose
 * own record is in the store (chan->stored: created by this daemon or adopted
 * from the store, not handed back by a client), until the daemon forgets it
 * (the endpoint closed, reaped or claimed afresh, another eventfd given, the
 * channel destroyed).  A daemon started
 * with $LISTEN_FDS / $LISTEN_FDNAMES (for its own $LISTEN_PID) adopts
 * each descriptor so named: the segment must be a regular file at least as
 * large as the record's geometry, whose header (magic, layout version,
 * geometry) matches the record; it is mapped, charged to its owner (pinned)
 * as a create would be, and named again; its first slice is locked at once
 * (within LOCKING_START_BYTES for all: a small segment is pinned as it is
 * adopted), the rest a slice a loop turn (locking.h) while the loop
 * serves: a large segment holds no client up.
 * Meanwhile the channel is served, listed as not pinned, its header says
 * it is unlocked, and a RELOCK of it waits for its last slice.  An
 * adopted segment is locked again even where the previous daemon had
 * unlocked it for want of use; the idle scan may unlock it again after
 * its pin_idle.  A
 * descriptor that fails a check, or whose owner's limits refuse it, is
 * logged and closed (its users keep their mappings, unmanaged).  A second
 * record of a segment already adopted (the same st_dev and st_ino) is
 * closed and logged, not a second channel nor a second charge; its record
 * leaves the store, and where it bore the first's name (FDSTOREREMOVE
 * takes both) the channel is stored again.  Then each
 * stored eventfd is kept again for its endpoint, where its record names a
 * channel adopted from the store exactly (name, device and inode: one
 * lookup by name) and it is an eventfd (a record of no such channel, of
 * another version, or a second for one endpoint is closed and removed), before the endpoints are judged (below):
 * a reap at the adoption wakes the consumers armed on them, and producers
 * that open the channel later fetch them (PEER), though their consumers
 * have not reconnected.
 *
 * Outside service mode, clients hand their segments back when they
 * reconnect (pinshm_reconnect(3), a HANDBACK request with the descriptor):
 * see handback.h for what the daemon checks and trusts.  A client can
 * prove only that it holds the segment: not who owned the channel, its
 * mode or its name.  So a channel the daemon learns from a client belongs
 * to that client's user, mode 0600, not persistent, with the configured
 * pin_idle (a HANDBACK carries none, and no reply tells a client the
 * channel's but a STAT); the original owner, group, mode, persistence and
 * pin_idle are kept only where the daemon's own record survived (the
 * descriptor store).
 *
 * A daemon that stops (SIGTERM, SHUTDOWN) leaves the store as it is, so
 * that a restart of the unit adopts every channel again.
 *
 * The endpoints attached in an adopted segment belong to no connection
 * until their processes hand it back.  As a channel is adopted (from the
 * store, or first handed back), watch_judge_endpoints() judges each
 * such endpoint by the pid the segment records: one whose process died
 * while no daemon ran is reaped at once, as a closed connection's is (its
 * peers get -EPIPE); one whose process lives is watched and reaped when it
 * exits, unless its process claims it again first (registry.h).  A
 * hand-back by a client whose pid the daemon cannot see (SO_PEERCRED pid
 * 0: its PID namespace is not nested in the daemon's) judges none.
 * An adopted channel that is not persistent is kept ADOPT_GRACE_MS with no
 * connection, so that its users can come back, and longer while an
 * endpoint of it is watched; then destroyed as usual if none came back
 * ($PINSHMD_TEST_ADOPT_GRACE_MS, for the tests, shortens the grace).
 */
#ifndef PINSHMD_ADOPT_H
#define PINSHMD_ADOPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "registry.h"

#define ADOPT_GRACE_MS 30000u
#define ADOPT_MAX_FDS 8192u /* descriptors taken from $LISTEN_FDS at most */

struct adopt_fd {
	int fd;
	char *name; /* its FDNAME, "" if none */
};

struct adopt {
	struct registry *reg;   /* not owned */
	struct reg_client keep; /* references adopted channels during the grace (id ADOPT_KEEPER_ID) */
	uint64_t grace_end;     /* CLOCK_MONOTONIC ms, 0: no grace running */
	struct adopt_fd *fds;   /* taken from the environment, to adopt */
	unsigned nfds;
	size_t lock_at_once;    /* bytes still to be locked at once as they are adopted (locking_add()) */
};

/**
 * Take the descriptors systemd passed ($LISTEN_FDS from 3 on, named by
 * $LISTEN_FDNAMES, for this process's $LISTEN_PID): made close-on-exec,
 * and the three variables removed.  Call first thing in main(), before
 * anything else opens a descriptor.  @return how many.
 */
unsigned adopt_take_listen_fds(struct adopt *a);

/** Adopt what adopt_take_listen_fds() took into @p reg (logged).
 *  @return the channels adopted. */
unsigned adopt_listen_fds(struct adopt *a, struct registry *reg);

/** For the event loop's timers: when the grace ends (CLOCK_MONOTONIC ms;
 *  then call adopt_grace_end()), or 0: none running. */
uint64_t adopt_grace_due(const struct adopt *a);

/** The grace is over: drop its references (unused channels go). */
void adopt_grace_end(struct adopt *a);

/** Close what was not adopted, forget the grace's references, and leave
 *  the store alone from now on (the daemon stops). */
void adopt_fini(struct adopt *a);

#endif /* PINSHMD_ADOPT_H */
