/*
 * locking.h - segments that the daemon did not make (a record of the
 * descriptor store at a restart, a client's hand-back) locked in RAM a
 * slice a loop turn, in turn with one another, as making.h locks what a
 * CREATE makes.  Such a channel is listed and served meanwhile: it is
 * charged pinned from the start; chan->locking says it is being locked;
 * the segment's header says it is unlocked (segment_attach_pin()), LIST
 * and STAT do not show it pinned until its last slice, and a RELOCK of it
 * waits for that slice.  Linked through chan->lock_next.
 *
 * Working-set pinning (idle.h) goes through the same queue, a slice a
 * turn in turn with the others: a channel idle for its pin_idle is
 * unlocked (chan->unlocking; the header and LIST say unlocked from its
 * first slice on), and one used again or asked for is locked again
 * (chan->locking too: a RELOCK or a DEVICE +1 waits for its last slice,
 * and only that slice clears `unlocked`).  Neither changes what its owner
 * is charged: it stays pinned for the accounts throughout.
 */
#ifndef PINSHMD_LOCKING_H
#define PINSHMD_LOCKING_H

#include <stdbool.h>
#include <stddef.h>

#include "account.h"

struct channel;

/* What the queue does to a channel (chan->lock_op). */
enum lock_op {
	LOCK_PIN,    /* adopted or handed back: locked, or left unpinned (chan->locking) */
	LOCK_RELOCK, /* unlocked for want of use, locked again (chan->locking) */
	LOCK_UNLOCK, /* idle: unlocked (chan->unlocking) */
};

/* The channels being locked, in the order of their next slice. */
struct locking {
	struct channel *first, *last;
};

/* Bytes that restart adoption locks at once, before the loop serves: the
 * first slice of each segment adopted while they last (a small one is
 * pinned as it is adopted), about 50 ms of locking at most. */
#define LOCKING_START_BYTES (64u << 20)

/** Start locking @p chan, attached and charged pinned to its owner:
 *  chan->locking set, its header says so; its first slice is locked at
 *  once where @p at_once (bytes) holds one, taken off it (a segment of one
 *  slice is then pinned, and not queued), and the rest is queued on @p q
 *  (where locking failed: charged unpinned to @p acct, logged). */
void locking_add(struct locking *q, struct account *acct, struct channel *chan, size_t *at_once);

/** Lock (or unlock) the next slice of the first of @p q (not empty), which
 *  then waits its turn again.  @return it, out of @p q, where its locking
 *  ended: locked, or locking failed (a LOCK_PIN then charged unpinned to
 *  its owner in @p acct; a LOCK_RELOCK stays unlocked, chan->relock_err),
 *  logged; chan->locking is cleared then.  Else NULL (an unlock that ends
 *  too: chan->unlocking cleared). */
struct channel *locking_step(struct locking *q, struct account *acct);

/** Give up locking @p chan (chan->locking), out of @p q: what was locked
 *  is unlocked, and it stays unpinned for @p why, so charged in @p acct.
 *  A relock or an unlock (the channel goes) is only taken out. */
void locking_abandon(struct locking *q, struct account *acct, struct channel *chan, const char *why);

/** Start unlocking @p chan, pinned, locked and idle: chan->unlocking, and
 *  `unlocked` said at once (segment_unlock_begin()); queued on @p q. */
void locking_unlock(struct locking *q, struct channel *chan);

/**
 * Start locking @p chan again (chan->seg.unlocked, not chan->locking),
 * for @p why (a static string, logged at the end): chan->locking set,
 * from its first byte on (an unlock in progress turns into this).  Its
 * first slice is locked at once where @p at_once, and where that was the
 * whole segment, or it failed, it ends there.
 * @return 1: queued on @p q (the end comes from locking_step()); 0: locked
 *         again; or as segment_relock_step() (it stays unlocked).
 */
int locking_relock(struct locking *q, struct channel *chan, const char *why, bool at_once);

#endif /* PINSHMD_LOCKING_H */
