/*
 * dying.h - the segments of destroyed channels, unmapped and punched out
 * in slices.
 *
 * Unmapping a large locked segment and punching its pages out takes the
 * kernel far longer than one turn of the event loop may.  A destroyed
 * channel's segment goes to this queue instead (its channel is gone from
 * the registry and its charge released at once), and the loop calls
 * dying_step() once a turn while the queue is not empty: each call unmaps
 * and punches one slice (segment_slice_bytes()) of the oldest segment,
 * which is closed after its last slice.  The loop runs these steps before
 * it locks slices of new channels (registry_step()), so that the bytes
 * locked stay within what the budget charged at every moment.
 */
#ifndef PINSHMD_DYING_H
#define PINSHMD_DYING_H

#include <stdbool.h>
#include <stddef.h>

#include "segment.h"

struct dying {
	struct segment seg;
	size_t done;        /* bytes unmapped (and punched) from its start */
	struct dying *next; /* destroyed after it */
};

/** Queue @p s (taken: reset to no segment) at the end of @p *q; where no
 *  memory is left for it, destroy it whole at once. */
void dying_add(struct dying **q, struct segment *s);

/** One slice of the first segment of @p *q.  @return whether any remain. */
bool dying_step(struct dying **q);

/** Destroy every segment of @p *q at once (the daemon stops). */
void dying_finish(struct dying **q);

#endif /* PINSHMD_DYING_H */
