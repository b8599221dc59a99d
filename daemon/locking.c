/*
 * locking.c - segments the daemon did not make, locked a slice a loop
 * turn (locking.h).
 */
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

void locking_add(struct locking *q, struct account *acct, struct channel *chan, size_t *at_once)
{
	size_t slice = segment_slice_bytes(&chan->seg);
	size_t first = *at_once >= slice ? slice : 0;

	*at_once -= first;
	chan->locking = true;
	chan->locked_bytes = 0;
	if (!lock_slice(acct, chan, first)) /* 0: the header's note only */
		append(q, chan);
}

struct channel *locking_step(struct locking *q, struct account *acct)
{
	struct channel *chan = q->first;

	take_out(q, chan);
	if (lock_slice(acct, chan, segment_slice_bytes(&chan->seg)))
		return chan;
	append(q, chan); /* round robin */
	return NULL;
}

void locking_abandon(struct locking *q, struct account *acct, struct channel *chan, const char *why)
{
	log_info("channel '%s': locking given up at %zu of %zu bytes: %s", chan->name, chan->locked_bytes,
		 chan->seg.size, why);
	take_out(q, chan);
	segment_lock_abandon(&chan->seg, why);
	chan->locking = false;
	account_unpinned(acct, chan->uid, chan->seg.size);
}
