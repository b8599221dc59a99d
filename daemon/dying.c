/*
 * dying.c - segments of destroyed channels, destroyed slice by slice.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "dying.h"

void dying_add(struct dying **q, struct segment *s)
{
	struct dying *d = malloc(sizeof(*d));

	if (!d) {
		segment_destroy(s);
		return;
	}
	*d = (struct dying){.seg = *s};
	*s = (struct segment){.fd = -1, .base = MAP_FAILED, .node = PINSHM_NODE_ANY};
	while (*q)
		q = &(*q)->next;
	*q = d;
}

bool dying_step(struct dying **q)
{
	struct dying *d = *q;

	if (!d)
		return false;
	if (segment_destroy_step(&d->seg, &d->done, segment_slice_bytes(&d->seg)) == 0) {
		*q = d->next;
		free(d);
	}
	return *q != NULL;
}

void dying_finish(struct dying **q)
{
	while (*q) {
		struct dying *d = *q;
		*q = d->next;
		segment_destroy_step(&d->seg, &d->done, SIZE_MAX);
		free(d);
	}
}
