/*
 * registry.c - the channel table, permissions, references and reaping.
 * Below it: the wake-up sockets (wake.c), the descriptor store's records
 * (record.c), half-made channels (making.c), adopted or handed-back
 * segments being locked (locking.c), page moves (move.c),
 * working-set pinning (idle.c); above it, calling in: the watching of
 * processes (watch.c), restart adoption (adopt.c), hand-backs
 * (handback.c), the requests (request.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "dying.h"
#include "idle.h"
#include "log.h"
#include "record.h"
#include "registry.h"
#include "wake.h"

static unsigned name_hash(const char *name)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *name; name++)
		h = (h ^ (uint8_t)*name) * 16777619u;
	return h & (REGISTRY_BUCKETS - 1);
}

static struct channel *find(struct registry *r, const char *name)
{
	for (struct channel *chan = r->buckets[name_hash(name)]; chan; chan = chan->hash_next)
		if (strcmp(chan->name, name) == 0)
			return chan;
	return NULL;
}

static void unname(struct registry *r, struct channel *chan)
{
	struct channel **p = &r->buckets[name_hash(chan->name)];

	while (*p != chan)
		p = &(*p)->hash_next;
	*p = chan->hash_next;
	chan->hash_next = NULL;
	chan->named = false;
	struct record rec;
	registry_record(chan, &rec);
	record_remove(&rec, chan->seg.fd, chan->stored);
	/* Its eventfds' records go with its own: they name it. */
	for (unsigned k = 0; chan->stored && chan->notify_fd && k < chan->g.max_consumers; k++)
		if (chan->notify_fd[k] >= 0)
			record_wakeup_remove(chan->name, chan->seg.fd, chan->g.max_producers + k);
	chan->stored = false;
}

/* Number @p chan, file it under its name (if named) and append it to the
 * registry's list; channel_free() undoes it. */
static void link_channel(struct registry *r, struct channel *chan)
{
	chan->id = r->next_id++;
	if (chan->named) {
		unsigned b = name_hash(chan->name);
		chan->hash_next = r->buckets[b];
		r->buckets[b] = chan;
	}
	chan->prev = r->last;
	chan->next = NULL;
	if (r->last)
		r->last->next = chan;
	else
		r->first = chan;
	r->last = chan;
	r->count++;
}

static void channel_free(struct registry *r, struct channel *chan)
{
	if (chan->named)
		unname(r, chan);
	if (chan->prev)
		chan->prev->next = chan->next;
	else
		r->first = chan->next;
	if (chan->next)
		chan->next->prev = chan->prev;
	else
		r->last = chan->prev;
	r->count--;
	if (chan->pin_idle)
		r->idle_policies--;
	if (chan->locking || chan->unlocking)
		locking_abandon(&r->locking, r->acct, chan, "destroyed while it was locked");
	account_release(r->acct, chan->uid, chan->seg.size, chan->seg.pinned);
	for (unsigned i = 0; chan->notify_fd && i < chan->g.max_consumers; i++)
		wake_forget(&r->wake, chan, chan->g.max_producers + i);
	free(chan->notify_fd);
	free(chan->notify_uid);
	if (chan->move)
		move_forget(&r->moving, chan);
	if (chan->seg.release)
		dying_add(&r->dying, &chan->seg); /* unmapped and punched in slices */
	else
		segment_destroy(&chan->seg);
	free(chan->holder);
	free(chan);
}

/* Destroy @p chan if nothing keeps it any more. */
void registry_collect(struct registry *r, struct channel *chan)
{
	if (chan->refs > 0 || (chan->persistent && chan->named))
		return;
	log_info("channel '%s' destroyed%s", chan->name, chan->named ? "" : " (unlinked)");
	/* Its pages go, whoever still holds its descriptor, but for the header
	 * and the endpoints, whose marks (dead, closed) tell a process that
	 * still uses it that its peers are gone (-EPIPE). */
	chan->seg.release = true;
	chan->seg.keep = chan->g.cursors_off;
	channel_free(r, chan);
}

static bool has_ref(const struct reg_client *c, const struct channel *chan)
{
	for (unsigned i = 0; i < c->nrefs; i++)
		if (c->refs[i] == chan)
			return true;
	return false;
}

/* Make sure @p c can reference @p chan (NULL: a channel about to be made). */
static int ref_room(struct reg_client *c, const struct channel *chan, char *why, size_t whylen)
{
	if (c->nrefs < c->cap || (chan && has_ref(c, chan)))
		return 0;
	if (c->cap >= REGISTRY_MAX_REFS) {
		snprintf(why, whylen, "this connection references %u channels, its most", c->nrefs);
		return -EMFILE;
	}
	unsigned cap = c->cap ? c->cap * 2 : 8;
	struct channel **refs = realloc(c->refs, cap * sizeof(*refs));
	if (!refs) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	c->refs = refs;
	c->cap = cap;
	return 0;
}

/* Reference @p chan from @p c (room made by ref_room()). */
static void take_ref(struct reg_client *c, struct channel *chan)
{
	if (has_ref(c, chan))
		return;
	c->refs[c->nrefs++] = chan;
	chan->refs++;
}

/*
 * The daemon's accesses to a segment, each run by segment_access() (a
 * client may shrink an shm segment under the daemon's mapping): they touch
 * the segment and their arguments only.
 */
struct count_args {
	const struct seg_geometry *g;
	unsigned first, n;
};

/* Endpoints of [first, first + n) attached now, as the segment says. */
static int count_fn(void *base, void *arg)
{
	const struct count_args *a = arg;
	int active = 0;

	for (unsigned i = a->first; i < a->first + a->n; i++) {
		struct endpoint *ep = seg_endpoint(a->g, base, i);
		active += atomic_load_explicit(&ep->state, memory_order_relaxed) == EP_ACTIVE;
	}
	return active;
}

static uint32_t count_active(struct channel *chan, unsigned first, unsigned n)
{
	struct count_args a = {.g = &chan->g, .first = first, .n = n};
	int active = segment_access(&chan->seg, count_fn, &a);

	return active > 0 ? (uint32_t)active : 0;
}

static bool endpoint_active(struct channel *chan, unsigned i)
{
	return count_active(chan, i, 1) == 1;
}

struct claim_args {
	const struct seg_geometry *g;
	const uint64_t *holder; /* the channel's */
	pinshm_role_t role;
	uint32_t pid;
};

/*
 * Claim a free endpoint of the role that no connection holds (active,
 * generation bumped, peers woken).  A client marks its endpoint closed in
 * the segment before its CLOSE reaches the daemon (pinshm_channel_close()):
 * until the CLOSE, the endpoint is still its connection's, and another
 * open must not get it (the two would share it, and the first one's CLOSE
 * be refused).
 */
static int claim_fn(void *base, void *arg)
{
	const struct claim_args *a = arg;

	if (a->role != PINSHM_PRODUCER && a->role != PINSHM_CONSUMER)
		return -EINVAL;
	unsigned first = a->role == PINSHM_PRODUCER ? 0 : a->g->max_producers;
	unsigned n = a->role == PINSHM_PRODUCER ? a->g->max_producers : a->g->max_consumers;
	for (unsigned i = first; i < first + n; i++) {
		if (a->holder[i] != 0)
			continue;
		int ep = seg_endpoint_take(a->g, base, i, 1, a->pid);
		if (ep >= 0) {
			seg_endpoints_changed(base);
			return ep;
		}
	}
	return -EBUSY;
}

struct reap_args {
	const struct seg_geometry *g;
	unsigned endpoint;
	struct unclaim_cursor *cur;
	uint64_t bytes;
};

static int reap_fn(void *base, void *arg)
{
	const struct reap_args *a = arg;

	return seg_endpoint_reap_step(a->g, base, a->endpoint, a->cur, a->bytes);
}

/* A reap under way: a shared queue's dead consumer's claims handed back
 * REGISTRY_REAP_SLICE bytes of its rings a turn (registry_step()). */
struct reg_reaping {
	struct reg_reaping *next;
	struct channel *chan; /* kept (a reference) until it is done */
	unsigned ep;
	pid_t pid;
	struct unclaim_cursor cur;
};

/*
 * A slice of @p rp, the reap of an endpoint if its segment still marks it
 * attached.  Once done, as a producer that leaves does, wake the consumers
 * armed on an eventfd that the daemon keeps: marked dead first, so that
 * they see it (-EPIPE, or the records a dead consumer held, handed back).
 * @return whether slices are left.
 */
static bool reap_slice(struct reg_reaping *rp)
{
	struct channel *chan = rp->chan;
	unsigned ep = rp->ep;
	struct reap_args ra = {.g = &chan->g, .endpoint = ep, .cur = &rp->cur, .bytes = REGISTRY_REAP_SLICE};
	int rc = segment_access(&chan->seg, reap_fn, &ra);

	if (rc == 1)
		return true;
	if (rc == -EINVAL)
		return false; /* closed by the client */
	if (rc != 0) {
		log_warn("channel '%s': cannot reap endpoint %u of pid %d: %s", chan->name, ep, (int)rp->pid,
			 pinshm_strerror(rc));
		return false;
	}
	log_info("channel '%s': endpoint %u of pid %d reaped", chan->name, ep, (int)rp->pid);
	for (unsigned i = 0; chan->notify_fd && i < chan->g.max_consumers; i++)
		if (chan->g.max_producers + i != ep)
			wake_armed(chan, chan->g.max_producers + i);
	return false;
}

/* Reap endpoint @p ep of @p chan (process @p pid): its first slice now, the
 * others (a shared queue's rings scanned) by registry_step(), in turn
 * with the other reaps; the endpoint stays attached until its last. */
void registry_reap_endpoint(struct registry *r, struct channel *chan, unsigned ep, pid_t pid)
{
	struct reg_reaping first = {.chan = chan, .ep = ep, .pid = pid};

	if (!reap_slice(&first))
		return;
	struct reg_reaping *rp = malloc(sizeof(*rp));
	if (!rp) {
		while (reap_slice(&first)) /* no memory to wait: the rest at once */
			;
		return;
	}
	*rp = first;
	chan->refs++;
	struct reg_reaping **q = &r->reaping;
	while (*q)
		q = &(*q)->next;
	*q = rp;
}

bool registry_reaping(const struct registry *r, const struct channel *chan, unsigned ep)
{
	for (const struct reg_reaping *rp = r->reaping; rp; rp = rp->next)
		if (rp->chan == chan && rp->ep == ep)
			return true;
	return false;
}

/* The next slice of the oldest reap under way; then it waits its turn again. */
static void reaping_step(struct registry *r)
{
	struct reg_reaping *rp = r->reaping;

	r->reaping = rp->next;
	rp->next = NULL;
	if (reap_slice(rp)) {
		struct reg_reaping **q = &r->reaping;
		while (*q)
			q = &(*q)->next;
		*q = rp;
		return;
	}
	struct channel *chan = rp->chan;
	free(rp);
	chan->refs--;
	registry_collect(r, chan);
}

/* The channel numbered @p id among those @p c references, or NULL. */
struct channel *registry_referenced(struct reg_client *c, uint64_t id)
{
	for (unsigned i = 0; i < c->nrefs; i++)
		if (c->refs[i]->id == id)
			return c->refs[i];
	return NULL;
}

int registry_notify(struct registry *r, struct reg_client *c, uint64_t id, uint32_t endpoint, int *fd, char *why,
		    size_t whylen)
{
	struct channel *chan = registry_referenced(c, id);

	if (!chan) {
		snprintf(why, whylen, "this connection holds no channel number %llu", (unsigned long long)id);
		return -ENOENT;
	}
	if (endpoint < chan->g.max_producers || endpoint >= chan->g.max_producers + chan->g.max_consumers ||
	    chan->holder[endpoint] != c->id) {
		snprintf(why, whylen, "endpoint %u of '%s' is not a consumer this connection opened", endpoint,
			 chan->name);
		return -EINVAL;
	}
	int rc = wake_keep(&r->wake, chan, endpoint, c->cred.uid, fd, why, whylen);
	if (rc != 0)
		return rc;
	if (chan->stored) /* only beside its channel's record: a channel handed back is not there */
		record_wakeup_put(chan->name, chan->seg.fd, endpoint, chan->notify_fd[endpoint - chan->g.max_producers]);
	/* Armed already: it may have missed a wake-up that nobody could give
	 * (a restart: producers could not fetch its socket, and endpoints
	 * reaped at the adoption), so it is woken now; at worst, for nothing. */
	wake_armed(chan, endpoint);
	return 0;
}

int registry_keep_notify(struct registry *r, struct channel *chan, unsigned endpoint, int *fd, char *why,
			 size_t whylen)
{
	if (endpoint < chan->g.max_producers || endpoint >= chan->g.max_producers + chan->g.max_consumers) {
		snprintf(why, whylen, "endpoint %u of '%s' is not a consumer endpoint", endpoint, chan->name);
		return -EINVAL;
	}
	return wake_keep(&r->wake, chan, endpoint, chan->uid, fd, why, whylen); /* who gave it is not stored */
}

void registry_forget_notify(struct registry *r, struct channel *chan, unsigned endpoint)
{
	wake_forget(&r->wake, chan, endpoint);
}

struct channel *registry_find(struct registry *r, const char *name)
{
	return find(r, name);
}

struct channel *registry_find_segment(struct registry *r, const struct stat *st)
{
	struct stat other;

	/* The size first: an fstat() only for the channels of the same size. */
	for (struct channel *chan = r->first; chan; chan = chan->next)
		if ((off_t)chan->seg.size == st->st_size && fstat(chan->seg.fd, &other) == 0 && other.st_dev == st->st_dev &&
		    other.st_ino == st->st_ino)
			return chan;
	return NULL;
}


void registry_record(const struct channel *chan, struct record *rec)
{
	*rec = (struct record){.version = 2,
			       .uid = chan->uid,
			       .gid = chan->gid,
			       .mode = chan->mode,
			       .flags = chan->persistent ? PINSHM_PERSISTENT : 0u,
			       .attr = chan->attr,
			       .node = chan->seg.at_consumer ? PINSHM_NODE_CONSUMER : chan->seg.node,
			       .pin_idle = chan->pin_idle};
	snprintf(rec->name, sizeof(rec->name), "%s", chan->name);
}

void registry_store(struct channel *chan)
{
	struct record rec;

	registry_record(chan, &rec);
	chan->stored = record_put(&rec, chan->seg.fd);
}

int registry_peer(struct registry *r, struct reg_client *c, uint64_t id, uint32_t endpoint, int *fd, char *why,
		  size_t whylen)
{
	struct channel *chan = registry_referenced(c, id);

	(void)r;
	if (!chan) {
		snprintf(why, whylen, "this connection holds no channel number %llu", (unsigned long long)id);
		return -ENOENT;
	}
	if (endpoint < chan->g.max_producers || endpoint >= chan->g.max_producers + chan->g.max_consumers) {
		snprintf(why, whylen, "endpoint %u of '%s' is not a consumer endpoint", endpoint, chan->name);
		return -EINVAL;
	}
	if (!chan->notify_fd || chan->notify_fd[endpoint - chan->g.max_producers] < 0) {
		snprintf(why, whylen, "endpoint %u of '%s' gave no wake-up socket", endpoint, chan->name);
		return -ENOENT;
	}
	return wake_dup(chan, endpoint, fd, why, whylen);
}

void registry_peer_replied(struct registry *r, struct reg_client *c, uint64_t id, uint32_t endpoint)
{
	struct channel *chan = registry_referenced(c, id);

	(void)r;
	if (chan && endpoint >= chan->g.max_producers && endpoint < chan->g.max_producers + chan->g.max_consumers)
		wake_armed(chan, endpoint);
}

int registry_relock(struct registry *r, struct reg_client *c, uint64_t id, char *why, size_t whylen)
{
	struct channel *chan = registry_referenced(c, id);

	if (!chan) {
		snprintf(why, whylen, "this connection holds no channel number %llu", (unsigned long long)id);
		return -ENOENT;
	}
	if (chan->locking) {
		snprintf(why, whylen, "'%s' is being locked: %zu of %zu bytes so far", chan->name, chan->locked_bytes,
			 chan->seg.size);
		return -EINPROGRESS;
	}
	if (!chan->seg.pinned && chan->seg.pin_error[0]) { /* as a RELOCK that waited for the lock is told */
		snprintf(why, whylen, "cannot lock '%s': %s", chan->name, chan->seg.pin_error);
		return -ENOMEM;
	}
	return idle_relock_asked(&r->locking, chan, why, whylen);
}

void registry_init(struct registry *r, struct account *acct)
{
	*r = (struct registry){.next_id = 1, .acct = acct, .watch_epfd = -1};
}

void registry_fini(struct registry *r)
{
	while (r->first)
		channel_free(r, r->first);
	making_fini(&r->making, r->acct, &r->dying);
	while (r->reaping) {
		struct reg_reaping *rp = r->reaping;
		r->reaping = rp->next;
		free(rp);
	}
	dying_finish(&r->dying);
}

int registry_create(struct registry *r, struct reg_client *c, const char *name, const pinshm_channel_attr_t *attr,
		    unsigned mode, bool persistent, const struct segment_opts *o, struct channel **out, char *why,
		    size_t whylen)
{
	struct segment pooled;
	bool from_pool = false;
	struct seg_geometry g;
	pinshm_channel_attr_t resolved = *attr;
	size_t size;
	int rc;

	if (find(r, name) || making_named(&r->making, name)) {
		snprintf(why, whylen, "channel '%s' exists", name);
		return -EEXIST;
	}
	if (r->count + r->making.n >= REGISTRY_MAX_CHANNELS) {
		snprintf(why, whylen, "the daemon holds %u channels, its most", r->count);
		return -ENFILE;
	}
	rc = seg_geometry_compute(attr, &g);
	if (rc == 0) {
		resolved.max_message = g.max_message;
		rc = pinshm_segment_size(&resolved, &size);
	}
	if (rc != 0) {
		snprintf(why, whylen, "invalid geometry: kind %u, flags %#x, capacity %llu (a power of two, %u..%llu), "
				      "max_message %u, producers %u (1..%u), consumers %u (1..%u)",
			 attr->kind, attr->flags, (unsigned long long)attr->capacity, PINSHM_MIN_CAPACITY,
			 (unsigned long long)PINSHM_MAX_CAPACITY, attr->max_message, attr->max_producers,
			 PINSHM_MAX_PRODUCERS, attr->max_consumers, PINSHM_MAX_CONSUMERS);
		return -EINVAL;
	}
	rc = ref_room(c, NULL, why, whylen);
	if (rc != 0)
		return rc;
	size_t need = size;
	if (segment_backing_size(need, o, &size) != 0) {
		snprintf(why, whylen, "huge pages asked for, but this kernel has none");
		return -EINVAL;
	}
	rc = account_charge_channel(r->acct, r->pool, &r->dying, c->cred.uid, need, o, &pooled, &size, why, whylen);
	if (rc < 0) {
		log_info("channel '%s' refused to uid %u (pid %d): %s", name, (unsigned)c->cred.uid,
			 (int)c->cred.pid, why);
		return rc;
	}
	from_pool = rc == 1;
	struct channel *chan = calloc(1, sizeof(*chan));
	if (!chan || !(chan->holder = calloc(g.max_producers + g.max_consumers, sizeof(*chan->holder)))) {
		free(chan);
		if (from_pool)
			pool_put_back(r->pool, &pooled);
		account_release(r->acct, c->cred.uid, size, true);
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	snprintf(chan->name, sizeof(chan->name), "%s", name);
	chan->persistent = persistent;
	chan->creator = c->id;
	chan->pin_idle = o->pin_idle;
	chan->uid = c->cred.uid;
	chan->gid = c->cred.gid;
	chan->mode = mode;
	chan->attr = resolved;
	chan->g = g;
	chan->from_pool = from_pool;
	rc = making_segment(r->acct, r->dying, chan, o, need, &pooled, why, whylen);
	if (rc < 0)
		return rc;
	if (!from_pool) {
		making_add(&r->making, chan);
		*out = chan;
		return -EINPROGRESS;
	}
	return registry_create_end(r, c, chan, out, why, whylen);
}
int registry_create_end(struct registry *r, struct reg_client *c, struct channel *chan, struct channel **out,
			char *why, size_t whylen)
{
	const char *name = chan->name;

	if (making_waits(chan)) {
		int rc = making_failed(chan, why, whylen);
		making_drop(r->acct, &r->dying, chan);
		return rc;
	}
	int rc = segment_format(&chan->seg, &chan->attr);

	if (rc != 0) {
		snprintf(why, whylen, "cannot create the segment of '%s': %s", name, strerror(-rc));
		log_err("channel '%s': %s", name, why);
		making_drop(r->acct, &r->dying, chan);
		return rc;
	}
	if (!chan->seg.pinned) {
		log_warn("segment '%s': %zu bytes left unpinned: %s", name, chan->seg.size, chan->seg.pin_error);
		account_unpinned(r->acct, chan->uid, chan->seg.size); /* on the quota, not the budget */
	}
	chan->named = true;
	link_channel(r, chan);
	take_ref(c, chan);
	registry_store(chan);
	if (chan->pin_idle) {
		r->idle_policies++;
		chan->active_at = clock_now_ms();
	}

	if (!chan->seg.pinned)
		snprintf(why, whylen, "channel '%s' created, but not pinned: %s", name, chan->seg.pin_error);
	log_info("channel '%s' created by uid %u (pid %d): %s, %s, %zu bytes, mode %03o%s%s%s%s", name,
		 (unsigned)chan->uid, (int)c->cred.pid, chan->attr.kind == PINSHM_TOPIC ? "topic" : "queue",
		 chan->seg.backend == PINSHM_BACKEND_SHM ? "shm" : "sealed memfd", chan->seg.size, chan->mode,
		 chan->persistent ? ", persistent" : "", chan->seg.pinned ? ", pinned" : ", NOT pinned",
		 chan->seg.hugepages ? ", huge pages" : "", chan->from_pool ? ", from the pool" : "");
	if (chan->seg.node >= 0)
		log_info("channel '%s': pages preferred on NUMA node %d", name, chan->seg.node);
	else if (chan->seg.at_consumer)
		log_info("channel '%s': unplaced until its first consumer opens it (near the consumer)", name);
	*out = chan;
	return 0;
}

bool registry_step(struct registry *r, struct channel **made, struct channel **lock_done)
{
	*made = *lock_done = NULL;
	if (r->reaping)
		reaping_step(r); /* besides the others: a reap holds its endpoint */
	/* The dying first (what they unlock makes room for what the others
	 * lock), then the moving; but while either lasts the locking gets
	 * every other turn, so that one user's destroys cannot hold back
	 * another's RELOCK, whose reply waits for its last slice.  The making
	 * waits for both (a huge-page create needs the dying's pages). */
	bool lock_due = r->locking.first && r->lock_waited;
	if ((r->dying || r->moving) && !lock_due) {
		if (r->dying)
			dying_step(&r->dying);
		else
			move_step(&r->moving);
		r->lock_waited = r->locking.first != NULL;
	} else if (r->locking.first && (!r->making.first || r->lock_turn || lock_due)) {
		r->lock_turn = r->lock_waited = false;
		*lock_done = locking_step(&r->locking, r->acct);
	} else if (r->making.first) {
		r->lock_turn = true; /* the locking's, next */
		*made = making_step(&r->making);
	}
	return registry_busy(r);
}

void registry_create_abandon(struct registry *r, struct channel *chan)
{
	making_drop(r->acct, &r->dying, chan);
}

bool registry_busy(const struct registry *r)
{
	return r->dying || r->making.first || r->locking.first || r->moving || r->judging || r->reaping;
}

int registry_open(struct registry *r, struct reg_client *c, const char *name, pinshm_role_t role,
		  int client_node, struct channel **out, unsigned *endpoint, char *why, size_t whylen)
{
	struct channel *chan = find(r, name);
	const char *what = role == PINSHM_PRODUCER ? "producer" : "consumer";

	if (!chan) {
		snprintf(why, whylen, "no channel '%s'", name);
		return -ENOENT;
	}
	if (!cred_may(&c->cred, chan->uid, chan->gid, chan->mode, role == PINSHM_PRODUCER ? CRED_WRITE : CRED_READ)) {
		snprintf(why, whylen, "uid %u may not open '%s' as a %s (owner %u, group %u, mode %03o)",
			 (unsigned)c->cred.uid, name, what, (unsigned)chan->uid, (unsigned)chan->gid, chan->mode);
		return -EACCES;
	}
	int rc = ref_room(c, chan, why, whylen);
	if (rc != 0)
		return rc;
	struct claim_args ca = {.g = &chan->g, .holder = chan->holder, .role = role, .pid = (uint32_t)c->cred.pid};
	int ep = segment_access(&chan->seg, claim_fn, &ca);
	if (ep == -EBADMSG) {
		snprintf(why, whylen, "the segment of '%s' is damaged (shrunk by a client)", name);
		return ep;
	}
	if (ep < 0) {
		snprintf(why, whylen, "every %s endpoint of '%s' is taken (%u)", what, name,
			 role == PINSHM_PRODUCER ? chan->g.max_producers : chan->g.max_consumers);
		return ep;
	}
	chan->holder[ep] = c->id;
	wake_forget(&r->wake, chan, (unsigned)ep); /* a free endpoint's: stale */
	take_ref(c, chan);
	log_debug("channel '%s': endpoint %d (%s) claimed for pid %d", name, ep, what, (int)c->cred.pid);
	if (chan->seg.unlocked)
		idle_relock(r, chan, "opened"); /* about to be used: a slice a turn, the OPEN not waiting */
	if (role == PINSHM_CONSUMER && chan->seg.node == PINSHM_NODE_CONSUMER)
		move_start(&r->moving, chan, client_node, c->cred.pid);
	*out = chan;
	*endpoint = (unsigned)ep;
	return 0;
}

int registry_unlink(struct registry *r, struct reg_client *c, const char *name, char *why, size_t whylen)
{
	struct channel *chan = find(r, name);

	if (!chan) {
		snprintf(why, whylen, "no channel '%s'", name);
		return -ENOENT;
	}
	if (c->cred.uid != 0 && c->cred.uid != chan->uid) {
		snprintf(why, whylen, "only its owner (uid %u) or root may unlink '%s'", (unsigned)chan->uid, name);
		return -EPERM;
	}
	unname(r, chan);
	log_info("channel '%s' unlinked by uid %u (pid %d)", chan->name, (unsigned)c->cred.uid, (int)c->cred.pid);
	registry_collect(r, chan);
	return 0;
}

uint32_t registry_channel_state(const struct channel *chan)
{
	return (chan->seg.pinned ? PINSHM_LIST_PINNED : 0) | (chan->persistent ? PINSHM_LIST_PERSISTENT : 0) |
	       (chan->seg.sealed ? PINSHM_LIST_SEALED : 0) | (chan->seg.hugepages ? PINSHM_LIST_HUGEPAGES : 0) |
	       (chan->seg.damaged ? PINSHM_LIST_DAMAGED : 0) | (chan->seg.unlocked ? PINSHM_LIST_UNLOCKED : 0) |
	       (chan->locking ? PINSHM_LIST_LOCKING : 0);
}


void registry_count(const struct registry *r, uint32_t *pinned, uint32_t *unpinned)
{
	*pinned = *unpinned = 0;
	for (const struct channel *chan = r->first; chan; chan = chan->next)
		++*(chan->seg.pinned ? pinned : unpinned);
}

bool registry_client_holds(const struct reg_client *c, struct channel *chan)
{
	for (unsigned ep = 0; ep < chan->g.max_producers + chan->g.max_consumers; ep++)
		if (chan->holder[ep] == c->id && endpoint_active(chan, ep))
			return true;
	return false;
}

uint32_t registry_client_endpoints(const struct reg_client *c)
{
	uint32_t n = 0;

	for (unsigned i = 0; i < c->nrefs; i++) {
		struct channel *chan = c->refs[i];
		for (unsigned ep = 0; ep < chan->g.max_producers + chan->g.max_consumers; ep++)
			n += chan->holder[ep] == c->id && endpoint_active(chan, ep);
	}
	return n;
}

struct stats_args {
	const struct seg_geometry *g;
	struct proto_list_entry *e;
};

/* Sum the counters of the lanes and of the subscribers' endpoints.  They
 * are the clients' writing: summed (modulo 2^64) and reported, never used
 * as an index or a size. */
static int stats_fn(void *base, void *arg)
{
	const struct stats_args *a = arg;
	struct proto_list_entry *e = a->e;

	for (unsigned l = 0; l < a->g->max_producers; l++) {
		struct lane_header *lh = seg_lane(a->g, base, l);
		e->messages += atomic_load_explicit(&lh->messages, memory_order_relaxed);
		e->bytes += atomic_load_explicit(&lh->bytes, memory_order_relaxed);
		e->refused += atomic_load_explicit(&lh->refused, memory_order_relaxed);
	}
	for (unsigned i = 0; i < a->g->max_consumers; i++) {
		struct endpoint *ep = seg_endpoint(a->g, base, a->g->max_producers + i);
		e->lost += atomic_load_explicit(&ep->lost, memory_order_relaxed);
	}
	return 0;
}

/* What LIST and STAT say of @p chan. */
static void describe(struct channel *chan, struct proto_list_entry *e)
{
	memset(e, 0, sizeof(*e));
	snprintf(e->name, sizeof(e->name), "%s", chan->name);
	e->geo = proto_geometry_from_attr(&chan->attr);
	/* Counted first: the count may find the segment damaged. */
	e->producers = count_active(chan, 0, chan->g.max_producers);
	e->consumers = count_active(chan, chan->g.max_producers, chan->g.max_consumers);
	e->state = registry_channel_state(chan);
	e->uid = chan->uid;
	e->gid = chan->gid;
	e->mode = chan->mode;
	e->size = chan->seg.size;
	e->node = chan->seg.node;
	e->backend = chan->seg.backend;
	e->pin_idle = chan->pin_idle;
	devices_describe(chan, &e->device_regs, &e->device_kinds);
	struct stats_args sa = {.g = &chan->g, .e = e};
	if (segment_access(&chan->seg, stats_fn, &sa) != 0)
		e->messages = e->bytes = e->lost = e->refused = 0; /* damaged: nothing to say */
	e->state = registry_channel_state(chan);
}

int registry_stat(struct registry *r, const char *name, struct proto_list_entry *out, char *why, size_t whylen)
{
	struct channel *chan = find(r, name);

	if (!chan) {
		snprintf(why, whylen, "no channel '%s'", name);
		return -ENOENT;
	}
	describe(chan, out);
	return 0;
}

/* Drop @p c's reference to @p chan (it has one); @p chan may be destroyed. */
static void drop_ref(struct registry *r, struct reg_client *c, struct channel *chan)
{
	for (unsigned i = 0; i < c->nrefs; i++)
		if (c->refs[i] == chan) {
			c->refs[i] = c->refs[--c->nrefs];
			break;
		}
	devices_drop(c, chan); /* devices: what it reported of it goes with its reference */
	chan->refs--;
	registry_collect(r, chan);
}

int registry_close(struct registry *r, struct reg_client *c, uint64_t id, uint32_t endpoint, char *why,
		   size_t whylen)
{
	struct channel *chan = registry_referenced(c, id);

	if (!chan) {
		snprintf(why, whylen, "this connection holds no channel number %llu", (unsigned long long)id);
		return -ENOENT;
	}
	unsigned total = chan->g.max_producers + chan->g.max_consumers;
	if (endpoint >= total || chan->holder[endpoint] != c->id) {
		snprintf(why, whylen, "endpoint %u of '%s' is not one this connection opened", endpoint, chan->name);
		return -EINVAL;
	}
	chan->holder[endpoint] = 0;
	wake_forget(&r->wake, chan, endpoint);
	registry_reap_endpoint(r, chan, endpoint, c->cred.pid);
	log_debug("channel '%s': endpoint %u closed by pid %d", chan->name, endpoint, (int)c->cred.pid);
	for (unsigned ep = 0; ep < total; ep++)
		if (chan->holder[ep] == c->id)
			return 0; /* it still holds another */
	if (chan->creator != c->id)
		drop_ref(r, c, chan);
	return 0;
}

unsigned registry_list(struct registry *r, uint64_t cursor, struct proto_list_entry *out, unsigned max,
		       uint64_t *next, bool *more)
{
	unsigned n = 0;

	*next = cursor;
	*more = false;
	for (struct channel *chan = r->first; chan; chan = chan->next) {
		if (!chan->named || chan->id <= cursor)
			continue;
		if (n == max) {
			*more = true;
			break;
		}
		describe(chan, &out[n++]);
		*next = chan->id;
	}
	return n;
}

void registry_client_gone(struct registry *r, struct reg_client *c)
{
	making_creator_gone(&r->making, c->id, c->cred.pid, r->acct, &r->dying);
	devices_client_gone(c); /* devices: its reports go, before its references */
	for (unsigned i = 0; i < c->nrefs; i++) {
		struct channel *chan = c->refs[i];
		for (unsigned ep = 0; ep < chan->g.max_producers + chan->g.max_consumers; ep++) {
			if (chan->holder[ep] != c->id)
				continue;
			chan->holder[ep] = 0;
			wake_forget(&r->wake, chan, ep);
			registry_reap_endpoint(r, chan, ep, c->cred.pid);
		}
		chan->refs--;
		registry_collect(r, chan);
	}
	registry_client_forget(c);
}

void registry_client_forget(struct reg_client *c)
{
	devices_forget(c);
	free(c->refs);
	c->refs = NULL;
	c->nrefs = c->cap = 0;
}

int registry_insert(struct registry *r, struct channel *chan, char *why, size_t whylen)
{
	if (chan->named && (find(r, chan->name) || making_named(&r->making, chan->name))) {
		snprintf(why, whylen, "channel '%s' exists", chan->name);
		return -EEXIST;
	}
	if (r->count >= REGISTRY_MAX_CHANNELS) {
		snprintf(why, whylen, "the daemon holds %u channels, its most", r->count);
		return -ENFILE;
	}
	link_channel(r, chan);
	if (chan->pin_idle) { /* working-set pinning, from now on (channel_free() counts it off) */
		r->idle_policies++;
		chan->active_at = clock_now_ms();
	}
	return 0;
}

int registry_ref_room(struct reg_client *c, char *why, size_t whylen)
{
	return ref_room(c, NULL, why, whylen);
}

int registry_ref(struct registry *r, struct reg_client *c, struct channel *chan, char *why, size_t whylen)
{
	int rc = ref_room(c, chan, why, whylen);

	if (rc == 0)
		take_ref(c, chan);
	else
		registry_collect(r, chan);
	return rc;
}
