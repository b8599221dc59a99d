/*
 * idle.c - working-set pinning: idle channels unlocked, used ones locked
 * again (idle.h).
 */
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

int idle_relock(struct channel *ch, const char *reason)
{
	int rc = segment_relock(&ch->seg);

	if (rc == 0)
		log_info("channel '%s': locked again (%s)", ch->name, reason);
	else
		log_warn("channel '%s': cannot lock it again (%s): %s", ch->name, reason, strerror(-rc));
	ch->active_at = clock_now_ms();
	return rc;
}

int idle_relock_asked(struct channel *ch, char *why, size_t whylen)
{
	if (!ch->seg.unlocked)
		return 0;
	int rc = idle_relock(ch, "asked");
	if (rc != 0)
		snprintf(why, whylen, "cannot lock '%s' again: %s", ch->name, strerror(-rc));
	return rc;
}

void idle_scan(struct registry *r, uint64_t now)
{
	for (struct channel *ch = r->first; ch && r->idle_policies; ch = ch->next) {
		if (!ch->pin_idle || !ch->seg.pinned || ch->seg.damaged)
			continue;
		/* devices: a channel a device may use by DMA stays locked. */
		if (devices_in_use(ch))
			continue;
		struct activity_args a = {.g = &ch->g};
		if (segment_access(&ch->seg, activity_fn, &a) != 0)
			continue;
		if (a.sig != ch->activity) {
			ch->activity = a.sig;
			ch->active_at = now;
			if (ch->seg.unlocked)
				idle_relock(ch, "used again");
		} else if (!ch->seg.unlocked && now - ch->active_at >= (uint64_t)ch->pin_idle * 1000u) {
			segment_unlock(&ch->seg);
			log_info("channel '%s': unlocked after %u s unused (still charged)", ch->name, ch->pin_idle);
		}
	}
}
