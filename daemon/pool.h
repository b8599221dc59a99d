/*
 * pool.h - ready segments: made, placed and pinned ahead of the requests.
 *
 * Making and pinning a segment costs 0.3-0.5 ms a MiB; the pool does it in
 * the loop's idle time (pool_refill(), one segment a call, never while a
 * request waits, and only once no request has come for LOOP_POOL_QUIET_MS:
 * the request that follows a pool hit, often the same client's OPEN, is
 * not delayed by a refill), so that a CREATE of a common size only
 * formats one.  Creates back to back faster than that outrun the pool.
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
 * - A segment that cannot be locked (RLIMIT_MEMLOCK) is not kept: the pool
 *   stops filling until the next pool_configure().
 */
#ifndef PINSHMD_POOL_H
#define PINSHMD_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "account.h"
#include "segment.h"

struct pool_class {
	size_t size;
	struct segment *segs; /* ready, pinned, zero; segs[0..n) */
	unsigned n;
};

struct pool {
	struct account *acct;    /* whose pinned sum is charged (not owned) */
	struct pool_class *classes;
	unsigned nclasses;
	unsigned target;         /* ready segments wanted per class */
	bool stopped;            /* a segment could not be pinned */
	uint64_t hits, misses;   /* eligible CREATEs served from it, or not */
};

/** An empty pool, no classes, charging @p acct. */
void pool_init(struct pool *p, struct account *acct);

/**
 * Set the classes to the @p nsizes sizes @p sizes (rounded up to pages)
 * with @p per_size segments each, destroying every ready segment (they
 * are made again from idle time).  @return 0 or -ENOMEM (pool emptied).
 */
int pool_configure(struct pool *p, const uint64_t *sizes, unsigned nsizes, unsigned per_size);

/** Whether pool_refill() has something to do. */
bool pool_wants(const struct pool *p);

/** Make one ready segment for the class that lacks most, if the budget
 *  allows.  Call from idle time only. */
void pool_refill(struct pool *p);

/**
 * Take a ready segment for a channel of segment size @p size into @p out
 * (its charge leaves the pool: charge it to the owner).
 * @return whether one was taken (hits and misses counted).
 */
bool pool_take(struct pool *p, size_t size, struct segment *out);

/** Give back @p s, taken by pool_take() and never handed out. */
void pool_put_back(struct pool *p, struct segment *s);

/** Destroy every ready segment.  @return the bytes freed from the budget. */
uint64_t pool_drain(struct pool *p);

/** @return the bytes of the ready segments. */
uint64_t pool_bytes(const struct pool *p);

/** Destroy every ready segment, free the classes. */
void pool_fini(struct pool *p);

#endif /* PINSHMD_POOL_H */
