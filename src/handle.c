/*
 * handle.c - what every part of a handle's data path reads or sets: its
 * error detail, and whether its peers have left.
 */
#include <errno.h>
#include <stdio.h>

#include "channel.h"

/* True when no endpoint in [first, first + n) is attached but one had been. */
static bool endpoints_gone(const struct seg_geometry *g, void *base, unsigned first, unsigned n)
{
	bool seen = false;

	for (unsigned i = first; i < first + n; i++) {
		uint32_t state = atomic_load_explicit(&seg_endpoint(g, base, i)->state, memory_order_acquire);
		if (state == EP_ACTIVE)
			return false;
		if (state == EP_CLOSED || state == EP_DEAD)
			seen = true;
	}
	return seen;
}

/* Whether every endpoint of the other role has left, looked at again only
 * when an endpoint changed state. */
bool channel_peers_gone(pinshm_channel_t *ch)
{
	uint32_t changes = atomic_load_explicit(&ch->hdr->endpoint_changes, memory_order_acquire);

	if (changes != ch->gone_changes) {
		ch->gone_changes = changes;
		if (ch->role == PINSHM_PRODUCER)
			ch->gone = endpoints_gone(&ch->g, ch->base, ch->g.max_producers, ch->g.max_consumers);
		else
			ch->gone = endpoints_gone(&ch->g, ch->base, 0, ch->g.max_producers);
	}
	return ch->gone;
}

int channel_fail(pinshm_channel_t *ch, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ch->error, sizeof(ch->error), fmt, ap);
	va_end(ap);
	if (err == -EBADMSG)
		ch->broken = true;
	return err;
}
