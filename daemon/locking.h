/*
 * locking.h - segments that the daemon did not make (a record of the
 * descriptor store at a restart, a client's hand-back) locked in RAM a
 * slice a loop turn, in turn with one another, as making.h locks what a
 * CREATE makes.  Such a channel is listed and served meanwhile: it is
 * charged pinned from the start; chan->locking says it is being locked;
 * the segment's header says it is unlocked (segment_attach_pin()), LIST
 * and STAT do not show it pinned until its last slice, and a RELOCK of it
 * waits for that slice.  Linked through chan->lock_next.
 */
#ifndef PINSHMD_LOCKING_H
#define PINSHMD_LOCKING_H

#include <stdbool.h>
#include <stddef.h>

#include "account.h"

struct channel;

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

/** Lock the next slice of the first of @p q (not empty), which then waits
 *  its turn again.  @return it, out of @p q, where its locking ended:
 *  locked, or locking failed (then charged unpinned to its owner in
 *  @p acct, logged); chan->locking is cleared then.  Else NULL. */
struct channel *locking_step(struct locking *q, struct account *acct);

/** Give up locking @p chan (chan->locking), out of @p q: what was locked
 *  is unlocked, and it stays unpinned for @p why, so charged in @p acct. */
void locking_abandon(struct locking *q, struct account *acct, struct channel *chan, const char *why);

#endif /* PINSHMD_LOCKING_H */
