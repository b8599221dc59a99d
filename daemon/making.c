/*
 * making.c - half-made channels: segments made for a CREATE, locked (and
 * so populated) a slice a loop turn, in turn with one another.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "log.h"
#include "making.h"
#include "registry.h"

void making_add(struct making *m, struct channel *chan)
{
	chan->next = NULL;
	if (m->last)
		m->last->next = chan;
	else
		m->first = chan;
	m->last = chan;
	m->n++;
}

void making_remove(struct making *m, struct channel *prev, struct channel *chan)
{
	if (prev)
		prev->next = chan->next;
	else
		m->first = chan->next;
	if (m->last == chan)
		m->last = prev;
	chan->next = NULL;
	m->n--;
}

bool making_named(const struct making *m, const char *name)
{
	for (const struct channel *chan = m->first; chan; chan = chan->next)
		if (strcmp(chan->name, name) == 0)
			return true;
	return false;
}

void making_drop(struct account *acct, struct dying **dying, struct channel *chan)
{
	account_release(acct, chan->uid, chan->seg.size, true);
	chan->seg.release = true;
	chan->seg.keep = 0;
	if (making_waits(chan))
		segment_destroy(&chan->seg); /* nothing made: nothing to unmap */
	else
		dying_add(dying, &chan->seg);
	free(chan->holder);
	free(chan);
}

/* Whether @p q holds a segment of huge pages: its pages come back as its
 * slices are punched out. */
static bool dying_huge(const struct dying *q)
{
	for (; q; q = q->next)
		if (q->seg.hugepages)
			return true;
	return false;
}

/* The message of a create whose segment (of chan->seg.size bytes) could
 * not be made: @p rc, from segment_alloc(). */
static void make_error(const struct channel *chan, const struct segment_opts *o, int rc, char *why, size_t whylen)
{
	if (o->hugepages && rc == -ENOMEM)
		snprintf(why, whylen, "too few free huge pages for '%s' (%zu bytes): see vm.nr_hugepages",
			 chan->name, chan->seg.size);
	else if (o->hugepages && rc == -EINVAL)
		snprintf(why, whylen, "huge pages for '%s': this kernel cannot make a sealed huge-page memfd",
			 chan->name);
	else
		snprintf(why, whylen, "cannot create the segment of '%s': %s", chan->name, strerror(-rc));
}

int making_segment(struct account *acct, const struct dying *dying, struct channel *chan,
		   const struct segment_opts *o, size_t need, const struct segment *pooled, char *why, size_t whylen)
{
	const char *name = chan->name;
	size_t size;
	int rc = 0;

	segment_backing_size(need, o, &size);
	if (chan->from_pool) {
		chan->seg = *pooled;
		return 0;
	}
	struct segment_opts later = *o;
	later.lock_later = true; /* locked in slices: making_step() */
	rc = segment_alloc(&chan->seg, need, &later, name);
	if (rc == 0)
		return 0;
	if (o->hugepages && rc == -ENOMEM && dying_huge(dying)) {
		/* A destroyed channel's huge pages, still being punched out:
		 * made once they are back (making_step()). */
		log_info("channel '%s': waits for the huge pages of destroyed channels", name);
		chan->seg = (struct segment){.fd = -1, .base = MAP_FAILED, .node = o->node, .hugepages = true,
					     .size = size};
		chan->make_err = rc;
		return 1;
	}
	chan->seg.size = size;
	make_error(chan, o, rc, why, whylen);
	log_err("channel '%s': %s", name, why);
	account_release(acct, chan->uid, size, true);
	free(chan->holder);
	free(chan);
	return rc;
}

bool making_waits(const struct channel *chan)
{
	return chan->seg.fd < 0;
}

/* Make the segment of @p chan, which waited for huge pages (making_waits()),
 * now that no destroyed segment holds any: @return 1 (made, to be locked)
 * or the -errno of segment_alloc() (kept in chan->make_err, logged). */
static int make_late(struct channel *chan)
{
	struct segment_opts o = {.node = chan->seg.node, .hugepages = true, .lock_later = true};
	size_t need, size = chan->seg.size;
	char why[PROTO_TEXT_MAX + 1];
	int rc = pinshm_segment_size(&chan->attr, &need);

	rc = rc ? rc : segment_alloc(&chan->seg, need, &o, chan->name);
	if (rc == 0)
		return 1;
	chan->seg = (struct segment){.fd = -1, .base = MAP_FAILED, .node = o.node, .hugepages = true, .size = size};
	chan->make_err = rc;
	make_error(chan, &o, rc, why, sizeof(why));
	log_err("channel '%s': %s (made once the destroyed channels' pages were back)", chan->name, why);
	return rc;
}

int making_failed(const struct channel *chan, char *why, size_t whylen)
{
	const struct segment_opts o = {.node = chan->seg.node, .hugepages = true};

	make_error(chan, &o, chan->make_err, why, whylen);
	return chan->make_err;
}

struct channel *making_step(struct making *m)
{
	struct channel *chan = m->first;
	int rc = making_waits(chan) ? make_late(chan) : 1;

	if (rc > 0)
		rc = segment_lock_step(&chan->seg, &chan->locked_bytes, segment_slice_bytes(&chan->seg));

	making_remove(m, NULL, chan);
	if (rc > 0) {
		making_add(m, chan); /* round robin */
		return NULL;
	}
	return chan; /* locked, or left unpinned (rc < 0, pin_error), or not made (making_waits()) */
}

void making_creator_gone(struct making *m, uint64_t creator, pid_t pid, struct account *acct, struct dying **dying)
{
	for (struct channel *chan = m->first, *prev = NULL, *next; chan; chan = next) {
		next = chan->next;
		if (chan->creator != creator) {
			prev = chan;
			continue;
		}
		log_info("channel '%s': its creator (pid %d) left while it was made: given up", chan->name, (int)pid);
		making_remove(m, prev, chan);
		making_drop(acct, dying, chan);
	}
}

void making_fini(struct making *m, struct account *acct, struct dying **dying)
{
	while (m->first) {
		struct channel *chan = m->first;
		making_remove(m, NULL, chan);
		making_drop(acct, dying, chan);
	}
}
