/*
 * release.c - records released after a device's completion event.
 *
 * The pending releases of a handle are kept in the order of the records
 * they release (the order received), at most one per held record.  The
 * oldest is released once its event completed, then the next, and so on:
 * a record is released only when its own event and those of every record
 * before it completed, since releasing a record releases those before it.
 * A pinshm_release() behind a pending one is queued without an event.
 */
#include <errno.h>
#include <string.h>

#include "device/device.h"

/* The position among the held records of the record that @p p releases. */
static int pending_index(pinshm_channel_t *ch, const struct device_pending *p)
{
	return ring_held_index(ch, &p->msg);
}

static void remember_stale(struct device_state *ds, const pinshm_msg_t *msg)
{
	if (ds->nstale < DEVICE_MAX_STALE)
		ds->stale[ds->nstale++] = *msg;
}

/* Release the record of the oldest pending entry and drop the entry. */
static int release_first(pinshm_channel_t *ch)
{
	struct device_state *ds = ch->dev;
	struct device_pending p = ds->pending[0];
	int rc = 0;

	memmove(&ds->pending[0], &ds->pending[1], --ds->npending * sizeof(ds->pending[0]));
	if (p.dev)
		p.dev->ops->drop(p.dev, p.event);
	int i = pending_index(ch, &p);
	if (i >= 0)
		rc = ring_release_held(ch, (unsigned)i);
	if (rc == -ESTALE) {
		remember_stale(ds, &p.msg);
		rc = 0;
	}
	return rc;
}

int device_progress(pinshm_channel_t *ch)
{
	char why[DEVICE_WHY];
	int rc = 0;

	device_fork_check(ch);
	struct device_state *ds = ch->dev;
	while (ds && ds->npending > 0) {
		struct device_pending *p = &ds->pending[0];
		/* A failed event counts as completed: its command is over. */
		if (p->dev && p->dev->ops->query(p->dev, p->event, why) == 0)
			break;
		int r = release_first(ch);
		if (r != 0)
			rc = r;
	}
	return rc;
}

void device_release_drain(pinshm_channel_t *ch)
{
	struct device_state *ds = ch->dev;

	while (ds->npending > 0) {
		struct device_pending *p = &ds->pending[0];
		if (p->dev)
			p->dev->ops->wait(p->dev, p->event);
		release_first(ch);
	}
}

void device_release_forget(pinshm_channel_t *ch)
{
	struct device_state *ds = ch->dev;

	for (unsigned i = 0; i < ds->npending; i++) {
		struct device_pending *p = &ds->pending[i];
		if (p->dev) {
			p->dev->ops->wait(p->dev, p->event);
			p->dev->ops->drop(p->dev, p->event);
		}
	}
	ds->npending = 0;
}

/*
 * Where a release of held record @p i goes: -1 if it may be released now
 * (no pending release of a record before it), else its place in the
 * queue.  -EINVAL if one is pending for that record already.
 */
static int queue_place(pinshm_channel_t *ch, int i)
{
	struct device_state *ds = ch->dev;
	unsigned k = 0;

	for (; k < ds->npending; k++) {
		int j = pending_index(ch, &ds->pending[k]);
		if (j == i)
			return -EINVAL;
		if (j > i)
			break;
	}
	return k == 0 ? -1 : (int)k;
}

static void enqueue(struct device_state *ds, unsigned k, const struct device_pending *p)
{
	memmove(&ds->pending[k + 1], &ds->pending[k], (ds->npending - k) * sizeof(ds->pending[0]));
	ds->pending[k] = *p;
	ds->npending++;
}

/*
 * After releasing what completed: where @p msg stands among the records
 * held (returned, >= 0), and its place in the queue (*k; -1: it may go at
 * once).  Or the handle's failure: not held, or pending already.
 */
static int locate(pinshm_channel_t *ch, const pinshm_msg_t *msg, int *k)
{
	device_progress(ch);
	int i = ring_held_index(ch, msg);
	if (i < 0)
		return channel_fail(ch, -EINVAL, "message not held by this handle");
	*k = queue_place(ch, i);
	if (*k == -EINVAL)
		return channel_fail(ch, -EINVAL, "message already pending release");
	return i;
}

int device_release(pinshm_channel_t *ch, const pinshm_msg_t *msg)
{
	device_fork_check(ch);
	if (!ch->dev)
		return pinshm_release(ch, msg);
	int k, i = locate(ch, msg, &k);

	if (i < 0)
		return i;
	if (k < 0)
		return ring_release_held(ch, (unsigned)i);
	/* Behind a pending release: it goes when that one does. */
	enqueue(ch->dev, (unsigned)k, &(struct device_pending){ .msg = *msg });
	return 0;
}

int pinshm_release_after(pinshm_channel_t *ch, const pinshm_msg_t *msg, pinshm_device_t *dev, void *event)
{
	char why[DEVICE_WHY] = "";

	device_fork_check(ch);
	if (!device_find_reg(ch->dev, dev))
		return channel_fail(ch, -ENOENT, "not registered with this device");
	if (!event)
		return channel_fail(ch, -EINVAL, "no event");
	int k, i = locate(ch, msg, &k);
	if (i < 0)
		return i;
	int done = dev->ops->query(dev, event, why);
	if (done < 0 && done != -EIO) /* not an event: nothing is known of the copy */
		return channel_fail(ch, done, "%s: %s", dev->ops->name, why);
	if (k < 0 && done != 0)
		return ring_release_held(ch, (unsigned)i);
	int rc = dev->ops->retain(dev, event, why);
	if (rc != 0)
		return channel_fail(ch, rc, "%s: %s", dev->ops->name, why);
	enqueue(ch->dev, k < 0 ? 0u : (unsigned)k, &(struct device_pending){ .msg = *msg, .dev = dev, .event = event });
	return 0;
}

int pinshm_release_poll(pinshm_channel_t *ch, pinshm_msg_t *stale, unsigned max, unsigned *nstale)
{
	struct device_state *ds = ch->dev;
	unsigned n = 0;

	if (nstale)
		*nstale = 0;
	device_fork_check(ch);
	ds = ch->dev;
	if (!ds)
		return 0;
	int rc = device_progress(ch);
	n = ds->nstale < max ? ds->nstale : max;
	if (n > 0) {
		memcpy(stale, ds->stale, n * sizeof(*stale));
		memmove(ds->stale, ds->stale + n, (ds->nstale - n) * sizeof(*stale));
		ds->nstale -= n;
	}
	if (nstale)
		*nstale = n;
	return rc != 0 ? rc : (int)ds->npending;
}
