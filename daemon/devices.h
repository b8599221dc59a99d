/*
 * devices.h - the device registrations of channels, as clients report them.
 *
 * A process that registers a handle of a channel with a device (pinshm-device(3):
 * pinshm_channel_register()) tells pinshmd through the connection that
 * opened the handle (DEVICE, +1), and again when the registration goes
 * (-1).  The daemon counts them per connection and per channel, by device
 * kind, and drops a connection's counts when it closes or gives the
 * channel's reference back.  While any is counted, working-set pinning
 * leaves the channel locked (idle.h): a driver pins the pages
 * and hands their physical addresses to a DMA engine, which the daemon's
 * munlock() must not undercut; a DEVICE +1 locks an unlocked channel again
 * first.  The counts are what clients say: a +1 counts only from a
 * connection that holds an attached endpoint of the channel (a handle it
 * opened, so it could keep it locked by activity too); a connection with a
 * mere reference gets -EPERM.
 */
#ifndef PINSHMD_DEVICES_H
#define PINSHMD_DEVICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DEVICES_KINDS 3u            /* indexed by PINSHM_DEVICE_* (1, 2) */
#define DEVICES_MAX_PER_CLIENT 65536u /* registrations of one kind one connection reports for a channel */

struct locking;
struct registry;
struct reg_client;
struct channel;

/* What one connection reported for one channel it references. */
struct reg_device_use {
	struct channel *chan;
	uint32_t n[DEVICES_KINDS];
};

/**
 * DEVICE: @p c reports a registration (+1) or unregistration (-1) of a
 * handle of @p chan, which it references, with a device of @p kind; @p holds:
 * whether @p c holds an attached endpoint of @p chan (registry_client_holds()).
 * A +1 locks the channel again where working-set pinning unlocked it
 * (through @p q, the registry's locking queue: it may wait, -EINPROGRESS).
 * @return 0; -EINVAL (bad kind or delta, or a -1 with nothing counted);
 *         -EPERM (a +1 and not @p holds); -ENOSPC (over
 *         DEVICES_MAX_PER_CLIENT); -ENOMEM; or as idle_relock_asked().
 */
int devices_report(struct locking *q, struct reg_client *c, struct channel *chan, bool holds, uint32_t kind, int32_t delta, char *why,
		   size_t whylen);

/** Drop what @p c reported for @p chan (its reference to @p chan goes). */
void devices_drop(struct reg_client *c, struct channel *chan);

/** Drop everything @p c reported (it closed); the channels are alive. */
void devices_client_gone(struct reg_client *c);

/** Free @p c's reports without touching the channels (at teardown). */
void devices_forget(struct reg_client *c);

/** Whether any registration of @p chan is counted (by kind in chan->device_regs). */
#define devices_in_use(chan) devices_count((chan)->device_regs)

/** The registrations counted in @p n, all kinds. */
static inline uint32_t devices_count(const uint32_t n[DEVICES_KINDS])
{
	uint32_t t = 0;

	for (unsigned k = 0; k < DEVICES_KINDS; k++)
		t += n[k];
	return t;
}

/** The registrations counted for @p chan, and their kinds (bit 1 << kind). */
void devices_describe(const struct channel *chan, uint32_t *regs, uint32_t *kinds);

#endif /* PINSHMD_DEVICES_H */
