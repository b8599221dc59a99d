/*
 * making.h - half-made channels (registry_create()): a segment made for a
 * CREATE (memfd, seals, mapping, NUMA policy, charged whole, no page
 * touched) is locked, and so populated, slice by slice, one slice a loop
 * turn, round robin among the channels being made; its name is reserved
 * meanwhile and no other request sees it.  Linked through chan->next.
 */
#ifndef PINSHMD_MAKING_H
#define PINSHMD_MAKING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "account.h"
#include "dying.h"
#include "segment.h"

struct channel;

/* The half-made channels, in the order of their next slice. */
struct making {
	struct channel *first, *last;
	unsigned n;
};

/**
 * The segment of @p chan, charged chan->seg.size bytes (@p size) to its owner:
 * the pool's segment @p pooled (chan->from_pool), or a fresh one of @p need
 * bytes made as @p o says, to be locked in slices.  On failure (logged,
 * @p why) the charge goes, and @p chan is freed.  Too few free huge pages
 * while segments of huge pages are in @p dying (destroyed, their pages
 * punched out a slice a turn): @p chan waits for them, charged, nothing
 * made yet (making_waits()); making_step() makes it once @p dying is
 * empty.  @return 0; 1: it waits; or as segment_alloc().
 */
int making_segment(struct account *acct, const struct dying *dying, struct channel *chan,
		   const struct segment_opts *o, size_t need, const struct segment *pooled, char *why, size_t whylen);

/** Whether @p chan's segment is not made (yet: it waits for huge pages,
 *  or, out of making_step(), there were too few even then). */
bool making_waits(const struct channel *chan);

/** The message of a half-made channel that making_step() could not make
 *  (making_waits()), naming why (too few free huge pages, or what else
 *  segment_alloc() met).  @return that -errno. */
int making_failed(const struct channel *chan, char *why, size_t whylen);

/** Append @p chan, half-made, to @p m. */
void making_add(struct making *m, struct channel *chan);

/** Take @p chan out of @p m (@p prev before it, NULL: the first). */
void making_remove(struct making *m, struct channel *prev, struct channel *chan);

/** Whether a half-made channel reserves @p name. */
bool making_named(const struct making *m, const char *name);

/** Lock the next slice of the first of @p m (not empty), which then waits
 *  its turn again; one that waits for huge pages is made first (called
 *  only while no destroyed segment is queued).  @return it, out of @p m,
 *  where that was its last slice (locked, or left unpinned: pin_error), or
 *  it could not be made (making_waits()); else NULL. */
struct channel *making_step(struct making *m);

/** Give up @p chan, half-made or made and never listed: its whole charge
 *  goes, its segment is destroyed in slices (@p dying; never handed out:
 *  no punch kept for anyone, every page goes). */
void making_drop(struct account *acct, struct dying **dying, struct channel *chan);

/** Give up the channels that connection @p creator (process @p pid) was
 *  making: it went. */
void making_creator_gone(struct making *m, uint64_t creator, pid_t pid, struct account *acct, struct dying **dying);

/** Give up every channel of @p m (the daemon stops). */
void making_fini(struct making *m, struct account *acct, struct dying **dying);

#endif /* PINSHMD_MAKING_H */
