/*
 * idle.c - working-set pinning: idle channels unlocked, used ones locked
 * again (idle.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "idle.h"
#include "log.h"

struct activity_args {
	const struct seg_geometry *g;
	uint64_t sig;
};

/* A signature of the segment's activity: it changes when a message is
 * committed, queue room is given back or an endpoint comes or goes. */
static int activity_fn(void *base, void *arg)
{
	struct activity_args *a = arg;
	const struct seg_header *h = base;
	uint64_t sig = atomic_load_explicit(&h->endpoint_changes, memory_order_relaxed);

	for (unsigned l = 0; l < a->g->max_producers; l++) {
		struct lane_header *lh = seg_lane(a->g, base, l);
		sig = sig * 31 + atomic_load_explicit(&lh->messages, memory_order_relaxed);
		sig = sig * 31 + atomic_load_explicit(&lh->free, memory_order_relaxed);
	}
	a->sig = sig;
	return 0;
}

int idle_relock(struct registry *r, struct channel *chan, const char *reason)
{
	if (!chan->seg.unlocked || chan->locking)
		return chan->locking ? 1 : 0;
	return locking_relock(&r->locking, chan, reason, false);
}

int idle_relock_asked(struct locking *q, struct channel *chan, char *why, size_t whylen)
{
	if (!chan->seg.unlocked)
		return 0;
	int rc = chan->locking ? 1 : locking_relock(q, chan, "asked", true);
	if (rc > 0)
		snprintf(why, whylen, "'%s' is being locked again: %zu of %zu bytes so far", chan->name,
			 chan->locked_bytes, chan->seg.size);
	else if (rc < 0)
		snprintf(why, whylen, "cannot lock '%s' again: %s", chan->name, strerror(-rc));
	return rc > 0 ? -EINPROGRESS : rc;
}

void idle_scan(struct registry *r, uint64_t now)
{
	for (struct channel *chan = r->first; chan && r->idle_policies; chan = chan->next) {
		/* Being locked (adopted, handed back, or again): its end sets active_at. */
		if (!chan->pin_idle || !chan->seg.pinned || chan->seg.damaged || chan->locking)
			continue;
		/* devices: a channel a device may use by DMA stays locked. */
		if (devices_in_use(chan))
			continue;
		struct activity_args a = {.g = &chan->g};
		if (segment_access(&chan->seg, activity_fn, &a) != 0)
			continue;
		if (a.sig != chan->activity) {
			chan->activity = a.sig;
			chan->active_at = now;
			if (chan->seg.unlocked) /* or being unlocked */
				idle_relock(r, chan, "used again");
		} else if (!chan->seg.unlocked && now - chan->active_at >= (uint64_t)chan->pin_idle * 1000u) {
			locking_unlock(&r->locking, chan); /* a slice a turn (registry_step()) */
		}
	}
}
