/*
 * commit.c - a producer's reservation committed after a device's
 * completion event (a device-to-host copy, a kernel that writes it).
 *
 * A producer handle holds one reservation at a time (a pipeline of depth
 * D uses D producer handles).  pinshm_commit_after() leaves it reserved,
 * in state RESV_DEVICE, with the event: the record is published only
 * once the event completed, found by the next reserve, send, commit or
 * abort on the handle, by pinshm_commit_poll(), or at the close, which
 * waits for it.  Nothing else may touch the reservation meanwhile: those
 * calls fail with -EBUSY while the event is pending, so that no record is
 * published while the device still writes it.
 */
#include <errno.h>

#include "device/device.h"

/* The event of the waiting commit completed (@p done: 1) or its command
 * failed (-EIO): publish the record, or drop the reservation. */
static int finish(pinshm_channel_t *ch, int done)
{
	struct device_pending_commit c = ch->dev->commit;

	ch->dev->commit = (struct device_pending_commit){ 0 };
	c.dev->ops->drop(c.dev, c.event);
	ch->reserved = RESV_HELD;
	if (done < 0) {
		pinshm_abort(ch);
		return channel_fail(ch, -EIO, "%s: the device's command failed: its record was dropped",
				    c.dev->ops->name);
	}
	return pinshm_commit(ch, c.len, 0);
}

int device_commit_progress(pinshm_channel_t *ch)
{
	char why[DEVICE_WHY];

	device_fork_check(ch);
	if (ch->reserved != RESV_DEVICE)
		return 0;
	struct device_pending_commit *c = &ch->dev->commit;
	int done = c->dev->ops->query(c->dev, c->event, why);
	if (done == 0)
		return 1;
	return finish(ch, done == 1 ? 1 : -EIO);
}

/* Wait for the event of the waiting commit.  @return its query's answer
 * after the wait; where the wait did not end it (0: still pending), the
 * reservation becomes RESV_LOST: the device may still write it, so it is
 * neither committed nor aborted, and its room is never reused. */
static int wait_commit(pinshm_channel_t *ch)
{
	struct device_pending_commit *c = &ch->dev->commit;
	char why[DEVICE_WHY] = "";

	c->dev->ops->wait(c->dev, c->event);
	int done = c->dev->ops->query(c->dev, c->event, why);
	if (done != 0)
		return done;
	c->dev->ops->drop(c->dev, c->event);
	channel_fail(ch, -EIO, "%s: the wait for the device's event failed: its reservation is lost",
		     c->dev->ops->name);
	*c = (struct device_pending_commit){ 0 };
	ch->reserved = RESV_LOST;
	return 0;
}

void device_commit_drain(pinshm_channel_t *ch)
{
	if (ch->reserved != RESV_DEVICE)
		return;
	int done = wait_commit(ch);
	if (done != 0)
		finish(ch, done == 1 ? 1 : -EIO);
}

void device_commit_forget(pinshm_channel_t *ch)
{
	struct device_pending_commit *c = &ch->dev->commit;

	if (ch->reserved != RESV_DEVICE || wait_commit(ch) == 0)
		return;
	c->dev->ops->drop(c->dev, c->event);
	*c = (struct device_pending_commit){ 0 };
	ch->reserved = RESV_HELD; /* the handle's own: it goes with it */
}

int pinshm_commit_after(pinshm_channel_t *ch, size_t len, pinshm_device_t *dev, void *event)
{
	char why[DEVICE_WHY] = "";

	if (ch->role != PINSHM_PRODUCER)
		return channel_fail(ch, -EINVAL, "not a producer");
	device_fork_check(ch);
	if (!device_find_reg(ch->dev, dev))
		return channel_fail(ch, -ENOENT, "not registered with this device");
	if (!event)
		return channel_fail(ch, -EINVAL, "no event");
	if (ch->reserved == RESV_DEVICE)
		return channel_fail(ch, -EBUSY, "the reservation waits for its device's event already");
	if (ch->reserved != RESV_HELD || len > ch->resv_len)
		return channel_fail(ch, -EINVAL, ch->reserved ? "commit longer than the reservation" : "nothing reserved");
	int done = dev->ops->query(dev, event, why);
	if (done < 0 && done != -EIO) /* not an event: nothing is known of the device's work */
		return channel_fail(ch, done, "%s: %s", dev->ops->name, why);
	int rc = dev->ops->retain(dev, event, why);
	if (rc != 0)
		return channel_fail(ch, rc, "%s: %s", dev->ops->name, why);
	ch->dev->commit = (struct device_pending_commit){ .dev = dev, .event = event, .len = len };
	ch->reserved = RESV_DEVICE;
	return done == 0 ? 0 : finish(ch, done == 1 ? 1 : -EIO);
}

int pinshm_commit_poll(pinshm_channel_t *ch)
{
	if (!ch->dev)
		return 0;
	return device_commit_progress(ch);
}
