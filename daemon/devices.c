/*
 * devices.c - the device registrations of channels, as clients report them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "devices.h"
#include "log.h"
#include "idle.h"
#include "registry.h"

/* @p c's entry for @p chan, or NULL. */
static struct reg_device_use *use_of(struct reg_client *c, const struct channel *chan)
{
	for (unsigned i = 0; i < c->ndevuse; i++)
		if (c->devuse[i].chan == chan)
			return &c->devuse[i];
	return NULL;
}

static struct reg_device_use *use_add(struct reg_client *c, struct channel *chan)
{
	if (c->ndevuse == c->devuse_cap) {
		unsigned cap = c->devuse_cap ? c->devuse_cap * 2 : 4;
		struct reg_device_use *u = realloc(c->devuse, cap * sizeof(*u));
		if (!u)
			return NULL;
		c->devuse = u;
		c->devuse_cap = cap;
	}
	c->devuse[c->ndevuse] = (struct reg_device_use){.chan = chan};
	return &c->devuse[c->ndevuse++];
}

/* Take @p u's counts off its channel, and @p u out of @p c. */
static void use_remove(struct reg_client *c, struct reg_device_use *u)
{
	struct channel *chan = u->chan;

	for (unsigned k = 0; k < DEVICES_KINDS; k++)
		chan->device_regs[k] -= u->n[k];
	if (devices_count(u->n) > 0 && !devices_in_use(chan))
		chan->active_at = clock_now_ms(); /* idle from now on, not from before */
	*u = c->devuse[--c->ndevuse];
}

int devices_report(struct locking *q, struct reg_client *c, struct channel *chan, bool holds, uint32_t kind, int32_t delta, char *why,
		   size_t whylen)
{
	if (kind != PINSHM_DEVICE_CUDA && kind != PINSHM_DEVICE_OPENCL) {
		snprintf(why, whylen, "unknown device kind %u", kind);
		return -EINVAL;
	}
	if (delta != 1 && delta != -1) {
		snprintf(why, whylen, "a registration is reported as +1 or -1, not %d", delta);
		return -EINVAL;
	}
	struct reg_device_use *u = use_of(c, chan);
	if (delta > 0 && !holds) {
		snprintf(why, whylen, "this connection holds no endpoint of '%s': only a handle's registration counts",
			 chan->name);
		return -EPERM;
	}
	if (delta < 0) {
		if (!u || u->n[kind] == 0) {
			snprintf(why, whylen, "no registration of '%s' with such a device reported", chan->name);
			return -EINVAL;
		}
		chan->device_regs[kind]--;
		if (!devices_in_use(chan))
			chan->active_at = clock_now_ms();
		if (--u->n[kind] == 0 && devices_count(u->n) == 0)
			*u = c->devuse[--c->ndevuse];
		return 0;
	}
	if (u && u->n[kind] >= DEVICES_MAX_PER_CLIENT) {
		snprintf(why, whylen, "%u registrations of '%s' reported already", u->n[kind], chan->name);
		return -ENOSPC;
	}
	/* Locked before it is counted: the device may use it on our reply.
	 * Being locked, it waits (the loop answers with request_relocked()). */
	if (chan->locking) {
		snprintf(why, whylen, "'%s' is being locked: %zu of %zu bytes so far", chan->name, chan->locked_bytes,
			 chan->seg.size);
		return -EINPROGRESS;
	}
	int rc = idle_relock_asked(q, chan, why, whylen);
	if (rc != 0)
		return rc;
	if (!u && !(u = use_add(c, chan))) {
		snprintf(why, whylen, "no memory");
		return -ENOMEM;
	}
	u->n[kind]++;
	chan->device_regs[kind]++;
	log_debug("channel '%s': a device registration reported by pid %d (%u now)", chan->name, (int)c->cred.pid,
		  devices_count(chan->device_regs));
	return 0;
}

void devices_drop(struct reg_client *c, struct channel *chan)
{
	struct reg_device_use *u = use_of(c, chan);

	if (u)
		use_remove(c, u);
}

void devices_client_gone(struct reg_client *c)
{
	while (c->ndevuse > 0)
		use_remove(c, &c->devuse[c->ndevuse - 1]);
	devices_forget(c);
}

void devices_forget(struct reg_client *c)
{
	free(c->devuse);
	c->devuse = NULL;
	c->ndevuse = c->devuse_cap = 0;
}

void devices_describe(const struct channel *chan, uint32_t *regs, uint32_t *kinds)
{
	*regs = devices_count(chan->device_regs);
	*kinds = 0;
	for (unsigned k = 0; k < DEVICES_KINDS; k++)
		if (chan->device_regs[k] > 0)
			*kinds |= 1u << k;
}
