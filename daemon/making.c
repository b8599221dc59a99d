/*
 * making.c - half-made channels: segments made for a CREATE, locked (and
 * so populated) a slice a loop turn, in turn with one another.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "making.h"
#include "registry.h"

void making_add(struct making *m, struct channel *ch)
{
	ch->next = NULL;
	if (m->last)
		m->last->next = ch;
	else
		m->first = ch;
	m->last = ch;
	m->n++;
}

void making_remove(struct making *m, struct channel *prev, struct channel *ch)
{
	if (prev)
		prev->next = ch->next;
	else
		m->first = ch->next;
	if (m->last == ch)
		m->last = prev;
	ch->next = NULL;
	m->n--;
}

bool making_named(const struct making *m, const char *name)
{
	for (const struct channel *ch = m->first; ch; ch = ch->next)
		if (strcmp(ch->name, name) == 0)
			return true;
	return false;
}

void making_drop(struct account *acct, struct dying **dying, struct channel *ch)
{
	account_release(acct, ch->uid, ch->seg.size, true);
	ch->seg.release = true;
	ch->seg.keep = 0;
	dying_add(dying, &ch->seg);
	free(ch->holder);
	free(ch);
}


int making_segment(struct account *acct, struct channel *ch, const struct segment_opts *o, size_t need,
			  const struct segment *pooled, char *why, size_t whylen)
{
	const char *name = ch->name;
	size_t size;
	int rc = 0;

	segment_backing_size(need, o, &size);
	if (ch->from_pool) {
		ch->seg = *pooled;
		return 0;
	}
	struct segment_opts later = *o;
	later.lock_later = true; /* locked in slices: making_step() */
	rc = segment_alloc(&ch->seg, need, &later, name);
	if (rc == 0)
		return 0;
	if (o->hugepages && rc == -ENOMEM)
		snprintf(why, whylen, "too few free huge pages for '%s' (%zu bytes): see vm.nr_hugepages", name, size);
	else if (o->hugepages && rc == -EINVAL)
		snprintf(why, whylen, "huge pages for '%s': this kernel cannot make a sealed huge-page memfd", name);
	else
		snprintf(why, whylen, "cannot create the segment of '%s': %s", name, strerror(-rc));
	log_err("channel '%s': %s", name, why);
	account_release(acct, ch->uid, size, true);
	free(ch->holder);
	free(ch);
	return rc;
}

struct channel *making_step(struct making *m)
{
	struct channel *ch = m->first;
	int rc = segment_lock_step(&ch->seg, &ch->made, segment_slice_bytes(&ch->seg));

	making_remove(m, NULL, ch);
	if (rc > 0) {
		making_add(m, ch); /* round robin */
		return NULL;
	}
	return ch; /* locked, or left unpinned (rc < 0, pin_error) */
}

void making_creator_gone(struct making *m, uint64_t creator, pid_t pid, struct account *acct, struct dying **dying)
{
	for (struct channel *ch = m->first, *prev = NULL, *next; ch; ch = next) {
		next = ch->next;
		if (ch->creator != creator) {
			prev = ch;
			continue;
		}
		log_info("channel '%s': its creator (pid %d) left while it was made: given up", ch->name, (int)pid);
		making_remove(m, prev, ch);
		making_drop(acct, dying, ch);
	}
}

void making_fini(struct making *m, struct account *acct, struct dying **dying)
{
	while (m->first) {
		struct channel *ch = m->first;
		making_remove(m, NULL, ch);
		making_drop(acct, dying, ch);
	}
}
