/*
 * account.h - what each user holds, against the budget and the limits.
 *
 * Two sums, kept exact:
 *
 * - pinned: the bytes of every segment locked in RAM, all users together,
 *   against the budget of the machine (config budget);
 * - per uid: the bytes of the segments of the channels it owns (pinned or
 *   not), against its quota; the channels it owns (alive: named, or
 *   unlinked and still used); its connections open.
 *
 * A channel is charged to its owner (the uid that created it) when it is
 * created, and released when it is destroyed; a reload changes the limits
 * for the requests that come after it, never a charge already made.  A
 * segment that could not be locked (RLIMIT_MEMLOCK in user mode) stays
 * charged to its owner's quota, not to the budget: account_unpinned().
 * Each user's pinned bytes are kept too, for STATUS (account_list()).
 *
 * Root and the daemon's own user are charged and limited like anyone; a
 * [user root] section gives root other limits.
 */
#ifndef PINSHMD_ACCOUNT_H
#define PINSHMD_ACCOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "protocol.h"

#define ACCOUNT_BUCKETS 256u

struct account_user;

struct account {
	const struct config *cfg;   /* the limits in force (not owned) */
	uint64_t pinned;            /* bytes locked, all users */
	uint64_t connections;       /* counted by account_connect(), all users */
	struct account_user *buckets[ACCOUNT_BUCKETS];
};

/** What one user holds now. */
struct account_usage {
	uint64_t bytes;      /* of the segments of its channels */
	uint64_t pinned;     /* of them, locked in RAM */
	uint64_t channels;
	uint64_t connections;
};

void account_init(struct account *a, const struct config *cfg);

/** Forget every charge. */
void account_fini(struct account *a);

/** Apply @p cfg to the requests that follow (a reload). */
void account_set_config(struct account *a, const struct config *cfg);

/**
 * A connection of @p uid opens: within its max_connections, count it.
 * @return 0, or -EUSERS with the reason in @p why.
 */
int account_connect(struct account *a, uid_t uid, char *why, size_t whylen);

/** A connection counted by account_connect() closed. */
void account_disconnect(struct account *a, uid_t uid);

/**
 * Charge a new channel of @p size segment bytes to @p uid, pinned, if
 * every check passes, in this order:
 * @return 0;
 *         -EFBIG:  @p size is over max_segment_size;
 *         -EUSERS: @p uid owns max_channels channels already;
 *         -EDQUOT: its bytes would go over its quota;
 *         -ENOSPC: the pinned bytes would go over the budget;
 *         with the reason, and the sums, in @p why.
 */
int account_charge(struct account *a, uid_t uid, uint64_t size, char *why, size_t whylen);

struct dying;
struct pool;
struct segment;
struct segment_opts;

/**
 * The segment of a new channel of @p need bytes made as @p o says, for
 * @p uid: taken from @p pool (NULL: none) where it has one of the size
 * (only for a segment of no node, no huge pages, not shm: the pool's are
 * sealed memfds), else to be made; charged (account_charge()) for its true
 * size, the pool's class or a fresh segment's backing size (@p size).  A
 * limit that the pool's class breaks is tried again with a fresh
 * segment's size (the class may be larger than the channel needs); a
 * budget that refuses it (-ENOSPC) is tried again once the pool gave its
 * ready segments up (pool_drain(), unmapped in slices through @p dying,
 * before this channel's are locked): ready segments give way to channels.
 * @return 1 (@p pooled, from the pool), 0 (a segment to make), or as
 *         account_charge() (the pool keeps what it had).
 */
int account_charge_channel(struct account *a, struct pool *pool, struct dying **dying, uid_t uid, size_t need,
			   const struct segment_opts *o, struct segment *pooled, size_t *size, char *why,
			   size_t whylen);

/** The segment of @p size bytes charged to @p uid by account_charge() could
 *  not be locked after all: take its bytes off the pinned sums (it stays on
 *  the quota). */
void account_unpinned(struct account *a, uid_t uid, uint64_t size);

/** Release a channel of @p uid charged for @p size bytes, @p pinned or not. */
void account_release(struct account *a, uid_t uid, uint64_t size, bool pinned);

/** @return what @p uid holds now. */
struct account_usage account_usage_of(const struct account *a, uid_t uid);

/**
 * Fill @p out with up to @p max users that hold anything and whose uid is
 * at least @p cursor, in uid order, with their quota in force.
 * @return the number filled; @p next: the last uid filled + 1 (the next
 * cursor), or @p cursor if none; @p more: whether users remain after it.
 */
unsigned account_list(const struct account *a, uint64_t cursor, struct proto_user_entry *out, unsigned max,
		      uint64_t *next, bool *more);

#endif /* PINSHMD_ACCOUNT_H */
