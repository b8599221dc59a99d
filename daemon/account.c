/*
 * account.c - per-user sums and the pinned sum, checked against the config.
 *
 * A user appears in the table while it holds anything (a connection, a
 * channel) and leaves it when it holds nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "account.h"
#include "log.h"
#include "pool.h"

struct account_user {
	uid_t uid;
	struct account_usage use;
	struct account_user *next;
};

static unsigned bucket_of(uid_t uid)
{
	return (unsigned)(((uint32_t)uid * 2654435761u) >> 24) & (ACCOUNT_BUCKETS - 1);
}

static struct account_user *find(const struct account *a, uid_t uid)
{
	for (struct account_user *u = a->buckets[bucket_of(uid)]; u; u = u->next)
		if (u->uid == uid)
			return u;
	return NULL;
}

/* @return @p uid's entry, made if new, or NULL (out of memory). */
static struct account_user *get(struct account *a, uid_t uid)
{
	struct account_user *u = find(a, uid);

	if (u)
		return u;
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	unsigned b = bucket_of(uid);
	u->uid = uid;
	u->next = a->buckets[b];
	a->buckets[b] = u;
	return u;
}

/* Drop @p uid's entry if it holds nothing. */
static void put(struct account *a, struct account_user *u)
{
	if (u->use.bytes || u->use.channels || u->use.connections)
		return;
	struct account_user **p = &a->buckets[bucket_of(u->uid)];
	while (*p != u)
		p = &(*p)->next;
	*p = u->next;
	free(u);
}

void account_init(struct account *a, const struct config *cfg)
{
	*a = (struct account){.cfg = cfg};
}

void account_fini(struct account *a)
{
	for (unsigned b = 0; b < ACCOUNT_BUCKETS; b++)
		while (a->buckets[b]) {
			struct account_user *u = a->buckets[b];
			a->buckets[b] = u->next;
			free(u);
		}
	a->pinned = 0;
}

void account_set_config(struct account *a, const struct config *cfg)
{
	a->cfg = cfg;
}

/* "N" or "unlimited", for messages. */
static const char *limit_str(uint64_t v, char *buf, size_t len)
{
	if (v == CONFIG_UNLIMITED)
		return "unlimited";
	snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

int account_connect(struct account *a, uid_t uid, char *why, size_t whylen)
{
	struct config_limits l = config_limits_of(a->cfg, uid);
	struct account_user *u = get(a, uid);

	if (!u) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	if (u->use.connections >= l.max_connections) {
		snprintf(why, whylen, "uid %u has %llu connections open, its most (max_connections)", (unsigned)uid,
			 (unsigned long long)u->use.connections);
		put(a, u);
		return -EUSERS;
	}
	u->use.connections++;
	a->connections++;
	return 0;
}

void account_disconnect(struct account *a, uid_t uid)
{
	struct account_user *u = find(a, uid);

	if (!u || u->use.connections == 0) {
		log_err("accounting: uid %u closes a connection it did not have", (unsigned)uid);
		return;
	}
	u->use.connections--;
	a->connections--;
	put(a, u);
}

int account_charge(struct account *a, uid_t uid, uint64_t size, char *why, size_t whylen)
{
	struct config_limits l = config_limits_of(a->cfg, uid);
	struct account_usage use = account_usage_of(a, uid);
	char b1[24];

	if (size > a->cfg->max_segment_size) {
		snprintf(why, whylen,
			 "a segment of %llu bytes is over max_segment_size, %llu bytes (pinshmd.conf(5): the "
			 "default is derived from the budget)",
			 (unsigned long long)size, (unsigned long long)a->cfg->max_segment_size);
		return -EFBIG;
	}
	if (use.channels >= l.max_channels) {
		snprintf(why, whylen, "uid %u owns %llu channels, its most (max_channels)", (unsigned)uid,
			 (unsigned long long)use.channels);
		return -EUSERS;
	}
	if (use.bytes + size > l.quota || use.bytes + size < use.bytes) {
		snprintf(why, whylen, "quota of uid %u exceeded: %llu bytes used of %s, %llu more asked",
			 (unsigned)uid, (unsigned long long)use.bytes, limit_str(l.quota, b1, sizeof(b1)),
			 (unsigned long long)size);
		return -EDQUOT;
	}
	if (a->pinned + size > a->cfg->budget || a->pinned + size < a->pinned) {
		snprintf(why, whylen, "pin budget exceeded: %llu bytes pinned of %llu, %llu more asked",
			 (unsigned long long)a->pinned, (unsigned long long)a->cfg->budget, (unsigned long long)size);
		return -ENOSPC;
	}
	struct account_user *u = get(a, uid);
	if (!u) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	u->use.bytes += size;
	u->use.pinned += size;
	u->use.channels++;
	a->pinned += size;
	return 0;
}

/* Take @p size bytes off a pinned sum, at most all of it. */
static void unpin(uint64_t *sum, uint64_t size)
{
	*sum -= size < *sum ? size : *sum;
}

void account_unpinned(struct account *a, uid_t uid, uint64_t size)
{
	struct account_user *u = find(a, uid);

	unpin(&a->pinned, size);
	if (u)
		unpin(&u->use.pinned, size);
}

void account_release(struct account *a, uid_t uid, uint64_t size, bool pinned)
{
	struct account_user *u = find(a, uid);

	if (pinned) {
		if (size > a->pinned)
			log_err("accounting: %llu pinned bytes released of %llu", (unsigned long long)size,
				(unsigned long long)a->pinned);
		unpin(&a->pinned, size);
	}
	if (!u || u->use.channels == 0 || u->use.bytes < size || (pinned && u->use.pinned < size)) {
		log_err("accounting: uid %u releases a channel of %llu bytes that it was not charged",
			(unsigned)uid, (unsigned long long)size);
		return;
	}
	if (pinned)
		u->use.pinned -= size;
	u->use.bytes -= size;
	u->use.channels--;
	put(a, u);
}

struct account_usage account_usage_of(const struct account *a, uid_t uid)
{
	const struct account_user *u = find(a, uid);

	return u ? u->use : (struct account_usage){0};
}

/* The user of the smallest uid >= @p low, or NULL. */
static const struct account_user *lowest_from(const struct account *a, uint64_t low)
{
	const struct account_user *best = NULL;

	for (unsigned b = 0; b < ACCOUNT_BUCKETS; b++)
		for (const struct account_user *u = a->buckets[b]; u; u = u->next)
			if ((uint64_t)u->uid >= low && (!best || u->uid < best->uid))
				best = u;
	return best;
}

unsigned account_list(const struct account *a, uint64_t cursor, struct proto_user_entry *out, unsigned max,
		      uint64_t *next, bool *more)
{
	unsigned n = 0;

	*next = cursor;
	*more = false;
	/* A selection in uid order: the users are few, a page at most 100. */
	for (const struct account_user *u; (u = lowest_from(a, *next)) != NULL;) {
		if (n == max) {
			*more = true;
			break;
		}
		out[n++] = (struct proto_user_entry){
			.uid = (uint32_t)u->uid,
			.channels = (uint32_t)u->use.channels,
			.connections = (uint32_t)u->use.connections,
			.pinned = u->use.pinned,
			.charged = u->use.bytes,
			.quota = config_limits_of(a->cfg, u->uid).quota,
		};
		*next = (uint64_t)u->uid + 1;
	}
	return n;
}

int account_charge_channel(struct account *a, struct pool *pool, struct dying **dying, uid_t uid, size_t need,
			   const struct segment_opts *o, struct segment *pooled, size_t *size, char *why,
			   size_t whylen)
{
	bool from_pool = false;
	int rc;

	segment_backing_size(need, o, size);
	if (pool && o->node == PINSHM_NODE_ANY && !o->hugepages && !o->shm && pool_take(pool, need, pooled)) {
		from_pool = true;
		*size = pooled->size;
	}
	rc = account_charge(a, uid, *size, why, whylen);
	if (rc != 0 && from_pool) {
		pool_put_back(pool, pooled);
		from_pool = false;
		segment_backing_size(need, o, size);
		why[0] = '\0';
		rc = account_charge(a, uid, *size, why, whylen);
	}
	if (rc == -ENOSPC && pool && pool_bytes(pool) > 0) {
		pool_drain(pool, dying);
		why[0] = '\0';
		rc = account_charge(a, uid, *size, why, whylen);
	}
	if (rc != 0 && from_pool)
		pool_put_back(pool, pooled);
	return rc != 0 ? rc : from_pool;
}
