/*
 * locking.c - segments the daemon did not make, locked a slice a loop
 * turn (locking.h).
 */
#include <string.h>

#include "clock.h"
#include "locking.h"
#include "log.h"
#include "registry.h"

/* Append @p chan to @p q. */
static void append(struct locking *q, struct channel *chan)
{
	chan->lock_next = NULL;
	if (q->last)
		q->last->lock_next = chan;
	else
		q->first = chan;
	q->last = chan;
}

/* Take @p chan out of @p q, where it is. */
static void take_out(struct locking *q, struct channel *chan)
{
	struct channel *prev = NULL;

	for (struct channel *at = q->first; at && at != chan; at = at->lock_next)
		prev = at;
	if (prev ? prev->lock_next != chan : q->first != chan)
		return;
	if (prev)
		prev->lock_next = chan->lock_next;
	else
		q->first = chan->lock_next;
	if (q->last == chan)
		q->last = prev;
	chan->lock_next = NULL;
}

/* Lock the next @p max bytes of @p chan.  @return whether its locking
 * ended (chan->locking cleared, logged; failed: charged unpinned). */
static bool lock_slice(struct account *acct, struct channel *chan, size_t max)
{
	int rc = segment_attach_pin(&chan->seg, &chan->locked_bytes, max);

	if (rc > 0)
		return false;
	chan->locking = false;
	if (rc < 0) {
		account_unpinned(acct, chan->uid, chan->seg.size);
		log_warn("channel '%s': %zu bytes left unpinned: %s", chan->name, chan->seg.size, chan->seg.pin_error);
	} else {
		log_info("channel '%s': its %zu bytes locked", chan->name, chan->seg.size);
		chan->active_at = clock_now_ms(); /* idle from now on, not from while it was locked */
	}
	return true;
}

/* Relock the next @p max bytes of @p chan.  @return whether its relock
 * ended (chan->locking cleared, logged; failed: still unlocked). */
static bool relock_slice(struct channel *chan, size_t max)
{
	int rc = segment_relock_step(&chan->seg, &chan->locked_bytes, max);

	if (rc > 0)
		return false;
	chan->locking = false;
	chan->relock_err = -rc;
	if (rc == 0)
		log_info("channel '%s': locked again (%s)", chan->name, chan->relock_why);
	else
		log_warn("channel '%s': cannot lock it again (%s): %s", chan->name, chan->relock_why, strerror(-rc));
	chan->active_at = clock_now_ms(); /* idle from now on */
	return true;
}

void locking_add(struct locking *q, struct account *acct, struct channel *chan, size_t *at_once)
{
	size_t slice = segment_slice_bytes(&chan->seg);
	size_t first = *at_once >= slice ? slice : 0;

	*at_once -= first;
	chan->lock_op = LOCK_PIN;
	chan->locking = true;
	chan->locked_bytes = 0;
	if (!lock_slice(acct, chan, first)) /* 0: the header's note only */
		append(q, chan);
}

struct channel *locking_step(struct locking *q, struct account *acct)
{
	struct channel *chan = q->first;
	size_t slice = segment_slice_bytes(&chan->seg);

	take_out(q, chan);
	if (chan->lock_op == LOCK_UNLOCK) {
		if (segment_unlock_step(&chan->seg, &chan->locked_bytes, slice) == 0) {
			chan->unlocking = false;
			return NULL;
		}
	} else if (chan->lock_op == LOCK_RELOCK ? relock_slice(chan, slice) : lock_slice(acct, chan, slice)) {
		return chan;
	}
	append(q, chan); /* round robin */
	return NULL;
}

void locking_unlock(struct locking *q, struct channel *chan)
{
	log_info("channel '%s': unlocked after %u s unused (still charged)", chan->name, chan->pin_idle);
	segment_unlock_begin(&chan->seg);
	chan->lock_op = LOCK_UNLOCK;
	chan->unlocking = true;
	chan->locked_bytes = 0; /* unlocked so far */
	append(q, chan);
}

int locking_relock(struct locking *q, struct channel *chan, const char *why, bool at_once)
{
	bool queued = chan->unlocking;

	chan->unlocking = false;
	chan->lock_op = LOCK_RELOCK;
	chan->locking = true;
	chan->locked_bytes = 0; /* what an unlock left locked is locked again, cheaply */
	chan->relock_why = why;
	if (at_once && relock_slice(chan, segment_slice_bytes(&chan->seg))) {
		if (queued)
			take_out(q, chan);
		return -chan->relock_err;
	}
	if (!queued)
		append(q, chan);
	return 1;
}

void locking_abandon(struct locking *q, struct account *acct, struct channel *chan, const char *why)
{
	if (chan->lock_op != LOCK_PIN) { /* pinned for the accounts throughout */
		take_out(q, chan);
		chan->locking = chan->unlocking = false;
		return;
	}
	log_info("channel '%s': locking given up at %zu of %zu bytes: %s", chan->name, chan->locked_bytes,
		 chan->seg.size, why);
	take_out(q, chan);
	segment_lock_abandon(&chan->seg, why);
	chan->locking = false;
	account_unpinned(acct, chan->uid, chan->seg.size);
}
