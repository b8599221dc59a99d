/*
 * register.c - devices: opening and closing them, and the registrations of
 * each handle's mapping with them (the backend-independent part).  The top
 * of the device layer: an unregistration or a close waits for the waiting
 * commit (commit.c) and the pending releases (release.c) first.
 */
#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

#include "device/device.h"

int pinshm_device_open_cuda(int ordinal, pinshm_device_t **out)
{
	device_open_begin();
	return cuda_open(ordinal, out);
}

int pinshm_device_open_opencl(void *context, pinshm_device_t **out)
{
	device_open_begin();
	if (!context)
		return device_open_fail(-EINVAL, "no OpenCL context");
	return opencl_open(context, out);
}

int pinshm_device_close(pinshm_device_t *dev)
{
	if (!dev)
		return 0;
	if (atomic_load_explicit(&dev->users, memory_order_acquire) > 0)
		return -EBUSY;
	void *lib = dev->lib;
	dev->ops->close(dev); /* frees dev */
	if (lib)
		dlclose(lib);
	return 0;
}

pinshm_device_kind_t pinshm_device_kind(const pinshm_device_t *dev)
{
	return dev->kind;
}

/* What the ring calls of the device layer (channel.h). */
static const struct channel_dev_ops device_ops = {
	.progress = device_progress,
	.release = device_release,
	.commit_progress = device_commit_progress,
};

int pinshm_channel_register(pinshm_channel_t *ch, pinshm_device_t *dev, unsigned flags)
{
	char why[DEVICE_WHY] = "";

	if (!dev || flags & ~(PINSHM_REGISTER_READ_ONLY | PINSHM_REGISTER_STRICT))
		return channel_fail(ch, -EINVAL, "bad device or flags");
	device_fork_check(ch);
	if (device_find_reg(ch->dev, dev))
		return 0;
	struct device_state *ds = device_state_get(ch);
	if (!ds)
		return channel_fail(ch, -ENOMEM, "no memory for the device state");
	ch->dev_ops = &device_ops;
	if (ds->nregs == DEVICE_MAX_PER_HANDLE)
		return channel_fail(ch, -ENOSPC, "registered with %u devices already", DEVICE_MAX_PER_HANDLE);
	bool want_ro = ch->role == PINSHM_CONSUMER || flags & PINSHM_REGISTER_READ_ONLY;
	struct device_reg r = { .dev = dev, .read_only = want_ro };
	int rc = dev->ops->reg(dev, ch->base, ch->map_size, &r, why);
	if (rc == 0 && want_ro && !r.read_only && flags & PINSHM_REGISTER_STRICT) {
		dev->ops->unreg(dev, &r);
		return channel_fail(ch, -ENOTSUP, "%s: the device cannot map memory read-only", dev->ops->name);
	}
	if (rc != 0)
		return channel_fail(ch, rc, "%s: %s", dev->ops->name, why);
	/* pinshmd keeps the channel locked from its reply on (working-set
	 * pinning must not unlock pages a device may reach by DMA): where it
	 * refuses, the registration is undone. */
	rc = device_report(ch, dev->kind, +1);
	if (rc != 0) {
		dev->ops->unreg(dev, &r);
		return rc;
	}
	ds->regs[ds->nregs++] = r;
	atomic_fetch_add_explicit(&dev->users, 1, memory_order_relaxed);
	return 0;
}

/* Wait for the device's events (the waiting commit's, then those of the
 * pending releases), and commit and release what they held. */
static void drain(pinshm_channel_t *ch)
{
	device_commit_drain(ch);
	device_release_drain(ch);
}

int pinshm_channel_unregister(pinshm_channel_t *ch, pinshm_device_t *dev)
{
	struct device_reg *r = device_find_reg(ch->dev, dev);

	if (!r)
		return channel_fail(ch, -ENOENT, "not registered with this device");
	/* The device may still read records of any pending release. */
	drain(ch);
	device_drop_reg(ch, r, true);
	return 0;
}

unsigned pinshm_channel_registered(const pinshm_channel_t *ch, const pinshm_device_t *dev)
{
	const struct device_reg *r = device_find_reg(ch->dev, dev);

	if (!r)
		return 0;
	return PINSHM_REGISTERED | (r->read_only ? PINSHM_REGISTERED_READ_ONLY : 0);
}

int pinshm_device_addr(pinshm_channel_t *ch, pinshm_device_t *dev, const void *p, size_t len,
		       pinshm_device_addr_t *out)
{
	struct device_reg *r = device_find_reg(ch->dev, dev);
	uintptr_t at = (uintptr_t)p, base = (uintptr_t)ch->base;

	if (!r)
		return channel_fail(ch, -ENOENT, "not registered with this device");
	if (at < base || at - base > ch->map_size || len > ch->map_size - (at - base))
		return channel_fail(ch, -EINVAL, "the bytes are not in the handle's mapping");
	uint64_t off = at - base;
	if (dev->kind == PINSHM_DEVICE_OPENCL) {
		*out = (pinshm_device_addr_t){ .buffer = r->buffer, .offset = off };
		return 0;
	}
	if (r->dptr == 0 && r->piece < r->size)
		return channel_fail(ch, -ENOTSUP, "%s: the mapping was registered in pieces whose device addresses are apart",
				    dev->ops->name);
	if (r->dptr == 0)
		return channel_fail(ch, -ENOTSUP, "%s: the device cannot map host memory", dev->ops->name);
	*out = (pinshm_device_addr_t){ .ptr = r->dptr + off };
	return 0;
}

void device_state_close(pinshm_channel_t *ch)
{
	device_fork_check(ch);
	if (ch->dev)
		drain(ch);
	device_state_forget(ch);
}

void device_state_forget(pinshm_channel_t *ch)
{
	if (!ch->dev)
		return;
	/* In a forked child the driver's registrations and events are the
	 * parent's: nothing of them is touched.  In the process that
	 * registered, the device must be done with the mapping before it is
	 * unregistered (and unmapped): wait, but commit and release nothing. */
	bool own = ch->dev->pid == getpid();
	if (own) {
		device_commit_forget(ch);
		device_release_forget(ch);
	}
	device_state_free(ch, own);
}
