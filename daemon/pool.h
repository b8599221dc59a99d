/*
 * pool.h - ready segments: made, placed and pinned ahead of the requests.
 *
 * Making and pinning a segment takes time in proportion to its size; the
 * pool does it in the loop's idle time (pool_refill(), never while a
 * request waits, and only once no request has come for LOOP_POOL_QUIET_MS:
 * the request that follows a pool hit, often the same client's OPEN, is not
 * delayed by a refill), so that a CREATE of a common size only formats one.
 * Creates back to back faster than that outrun the pool.
 *
 * - In slices: one pool_refill() call does one step, so that a class of
 *   256 MiB or 1 GiB does not hold the loop for a quarter of a second.  The
 *   first step makes the segment (memfd, size, seals, mapping: no page
 *   touched) and locks its first slice; each step after locks (and so
 *   populates) the next POOL_SLICE_BYTES; the loop serves what came in
 *   between.  One segment fills at a time (`fill`), and it is ready, in
 *   its class, for pool_take(), only once wholly locked.
 * - A filling segment is charged whole to the budget from its first step,
 *   not slice by slice: the loop serves CREATEs between its slices, and a
 *   CREATE admitted into room that the pool's next slices are about to
 *   lock would take the pinned sum over the budget.  Charged whole, the
 *   sum is an upper bound of what is locked at every moment, and exact
 *   once the segment is ready; a segment abandoned half-filled (drain,
 *   reload, shutdown, a failed lock) is unmapped, which unlocks what was
 *   locked of it, and its whole charge is taken off at that moment.
 *
 * - Classes: the segment sizes of the config (pool_sizes), pool_segments
 *   ready segments of each.  A CREATE of a channel of segment size s, with
 *   no NUMA node and no huge pages, takes a segment of the smallest class
 *   C with s <= C and C - s <= C / 8 (at most an eighth of it unused).
 * - Never reused: a segment leaves the pool for one channel and is
 *   destroyed with it; a client may still map it.  pool_put_back() is for
 *   a segment taken and not handed out (the channel refused after all).
 * - Charged to the budget: ready segments are pinned, so they count in the
 *   pinned sum of account.h (to no user), and the pool fills only as far
 *   as the budget allows.  A CREATE refused for the budget drains the pool
 *   (pool_drain()) and is tried again; a taken segment's charge passes to
 *   the channel's owner.
 * - A segment that cannot be locked (RLIMIT_MEMLOCK), in any slice, is not
 *   kept: the pool stops filling until the next pool_configure().
 * - NUMA placement and huge pages: none.  A pool segment is a sealed memfd
 *   of small pages, for CREATEs that ask for neither.
 */
#ifndef PINSHMD_POOL_H
#define PINSHMD_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "account.h"
#include "dying.h"
#include "segment.h"

struct pool_class {
	size_t size;
	struct segment *segs; /* ready, pinned, zero; segs[0..n) */
	unsigned n;
};

/* Bytes locked by one step of a refill: about a millisecond of the loop's
 * time. */
#define POOL_SLICE_BYTES (2u * 1024u * 1024u)

struct pool {
	struct account *acct;    /* whose pinned sum is charged (not owned) */
	struct pool_class *classes;
	unsigned nclasses;
	unsigned target;         /* ready segments wanted per class */
	bool stopped;            /* a segment could not be made or pinned */
	uint64_t hits, misses;   /* eligible CREATEs served from it, or not */
	/* The segment being filled, charged whole (see above); fill_class
	 * NULL: none. */
	struct pool_class *fill_class;
	struct segment fill;
	size_t fill_locked;      /* bytes of it locked, from its start */
};

/** An empty pool, no classes, charging @p acct. */
void pool_init(struct pool *p, struct account *acct);

/**
 * Set the classes to the @p nsizes sizes @p sizes (rounded up to pages)
 * with @p per_size segments each, destroying every ready segment (they
 * are made again from idle time): added to @p later, to be unmapped in
 * slices (dying.h), or at once where @p later is NULL.
 * @return 0 or -ENOMEM (pool emptied).
 */
int pool_configure(struct pool *p, const uint64_t *sizes, unsigned nsizes, unsigned per_size, struct dying **later);

/** Whether pool_refill() has something to do. */
bool pool_wants(const struct pool *p);

/**
 * One step of a refill: go on with the segment being filled (lock its next
 * slice), or start one for the class that lacks most, if the budget allows
 * it whole.  A segment whose last slice is locked goes into its class.
 * Call from idle time only.
 */
void pool_refill(struct pool *p);

/**
 * Take a ready segment for a channel of segment size @p size into @p out
 * (its charge leaves the pool: charge it to the owner).
 * @return whether one was taken (hits and misses counted).
 */
bool pool_take(struct pool *p, size_t size, struct segment *out);

/** Give back @p s, taken by pool_take() and never handed out. */
void pool_put_back(struct pool *p, struct segment *s);

/** Destroy every ready segment and the one being filled: at once, or,
 *  with @p later, queued there to be unmapped a slice a turn (dying.h);
 *  their charges go at once either way.
 *  @return the bytes freed from the budget. */
uint64_t pool_drain(struct pool *p, struct dying **later);

/** @return the bytes the pool holds of the budget: its ready segments and
 *  the one being filled, whole. */
uint64_t pool_bytes(const struct pool *p);

/** @return the bytes of the segment being filled (0: none); of them,
 *  @p locked (may be NULL) are locked so far. */
uint64_t pool_filling_bytes(const struct pool *p, uint64_t *locked);

/* One class as STATUS shows it. */
struct pool_class_stat {
	uint64_t size;
	unsigned wanted;  /* ready segments kept of it */
	unsigned ready;
	unsigned filling; /* 1 if the segment being filled is of it */
	uint64_t locked;  /* bytes of that one locked so far (it is charged whole) */
};

/** Describe the first @p max classes, smallest first, into @p out.
 *  @return how many were described. */
unsigned pool_stat(const struct pool *p, struct pool_class_stat *out, unsigned max);

/** pool_drain(), and free the classes. */
void pool_fini(struct pool *p);

#endif /* PINSHMD_POOL_H */
