/*
 * state.c - the device side of one handle (struct device_state): its table
 * of registrations, what the daemon is told of them, and the forked
 * child's check.  The bookkeeping that registrations (register.c), pending
 * releases (release.c) and waiting commits (commit.c) share; it calls none
 * of them.
 */
#include <assert.h>
#include <stdlib.h>
#include <unistd.h>

#include "device/device.h"

struct device_state *device_state_get(pinshm_channel_t *ch)
{
	if (!ch->dev) {
		ch->dev = calloc(1, sizeof(*ch->dev));
		if (!ch->dev)
			return NULL;
		ch->dev->pid = getpid();
	}
	return ch->dev;
}

struct device_reg *device_find_reg(struct device_state *ds, const struct pinshm_device *dev)
{
	if (ds && ds->pid != getpid())
		return NULL; /* a forked child: none of it is its own */
	for (unsigned i = 0; ds && i < ds->nregs; i++)
		if (ds->regs[i].dev == dev)
			return &ds->regs[i];
	return NULL;
}

int device_report(pinshm_channel_t *ch, pinshm_device_kind_t kind, int delta)
{
	return ch->ctl ? ch->ctl->device_report(ch, kind, delta) : 0;
}

void device_drop_reg(pinshm_channel_t *ch, struct device_reg *r, bool call_driver)
{
	struct device_state *ds = ch->dev;
	struct pinshm_device *dev = r->dev;

	if (call_driver) {
		dev->ops->unreg(dev, r);
		/* Not registered any more, whatever the daemon answers (a lost
		 * connection drops its counts anyway). */
		device_report(ch, dev->kind, -1);
	}
	*r = ds->regs[--ds->nregs];
	atomic_fetch_sub_explicit(&dev->users, 1, memory_order_release);
}

void device_state_free(pinshm_channel_t *ch, bool call_driver)
{
	struct device_state *ds = ch->dev;

	while (ds->nregs > 0)
		device_drop_reg(ch, &ds->regs[ds->nregs - 1], call_driver);
	free(ds);
	ch->dev = NULL;
}

void device_fork_check(pinshm_channel_t *ch)
{
	if (!ch->dev || ch->dev->pid == getpid())
		return;
	if (ch->reserved == RESV_DEVICE)
		ch->reserved = RESV_LOST; /* the parent's device writes it: never published here */
	/* The driver's registrations and events are the parent's: nothing of
	 * them is touched. */
	device_state_free(ch, false);
}

static_assert(sizeof(((pinshm_channel_info_t *)0)->devices) / sizeof(((pinshm_channel_info_t *)0)->devices[0]) ==
		      DEVICE_MAX_PER_HANDLE,
	      "pinshm_channel_info() shows every device of a handle");

void device_info(const pinshm_channel_t *ch, pinshm_channel_info_t *info)
{
	const struct device_state *ds = ch->dev;

	if (ds->pid != getpid())
		return; /* a forked child: none of it is its own */
	for (unsigned i = 0; i < ds->nregs; i++)
		info->devices[info->ndevices++] = (struct pinshm_channel_device){
			.dev = ds->regs[i].dev,
			.kind = ds->regs[i].dev->kind,
			.flags = PINSHM_REGISTERED | (ds->regs[i].read_only ? PINSHM_REGISTERED_READ_ONLY : 0),
		};
	info->commit_waits = ch->reserved == RESV_DEVICE;
}

int device_report_all(pinshm_channel_t *ch)
{
	struct device_state *ds = ch->dev;
	int rc = 0;

	for (unsigned i = 0; ds && ds->pid == getpid() && i < ds->nregs; i++) {
		int r = device_report(ch, ds->regs[i].dev->kind, +1);
		if (r != 0 && rc == 0)
			rc = r;
	}
	return rc;
}
