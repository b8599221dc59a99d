/*
 * handback.c - a client's hand-back of a channel's segment (handback.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "handback.h"
#include "watch.h"
#include "log.h"
#include "names.h"
#include "seg.h"

struct endpoint_check {
	const struct seg_geometry *g;
	unsigned endpoint;
	uint32_t pid;
};

/* segment_access(): the endpoint is attached, for that process. */
static int endpoint_attached(void *base, void *arg)
{
	const struct endpoint_check *e = arg;
	struct endpoint *ep = seg_endpoint(e->g, base, e->endpoint);

	return atomic_load_explicit(&ep->state, memory_order_relaxed) == EP_ACTIVE &&
			       atomic_load_explicit(&ep->pid, memory_order_relaxed) == e->pid
		       ? 0
		       : -ESRCH;
}

/* A new channel for the segment @p fd that @p c hands back (the trust rule
 * of adopt.h).  @return 0 and @p out, or -errno with @p why. */
static int handback_new(struct registry *r, struct reg_client *c, const char *name, const pinshm_channel_attr_t *attr,
		     const struct seg_geometry *g, int fd, struct channel **out, char *why, size_t whylen)
{
	struct channel *chan = calloc(1, sizeof(*chan));
	int rc;

	if (chan)
		chan->holder = calloc(g->max_producers + g->max_consumers, sizeof(*chan->holder));
	if (!chan || !chan->holder) {
		free(chan);
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	rc = segment_attach(fd, g, PINSHM_NODE_ANY, &chan->seg, why, whylen);
	if (rc == 0) {
		rc = account_charge(r->acct, c->cred.uid, chan->seg.size, why, whylen);
		if (rc != 0)
			munmap(chan->seg.base, chan->seg.size);
	}
	if (rc != 0) {
		free(chan->holder);
		free(chan);
		return rc;
	}
	snprintf(chan->name, sizeof(chan->name), "%s", name);
	chan->uid = c->cred.uid;
	chan->gid = c->cred.gid;
	chan->mode = 0600;
	chan->attr = *attr;
	chan->attr.max_message = g->max_message;
	chan->g = *g;
	chan->pin_idle = r->acct->cfg->pin_idle; /* a HANDBACK does not carry the channel's own: the default */
	/* A name the client may not create (names.h) is not given either. */
	chan->named = names_may_create(&r->acct->cfg->names, &c->cred, name, why, whylen) == 0;
	rc = registry_insert(r, chan, why, whylen);
	if (rc == -EEXIST) {
		chan->named = false; /* the name went to another channel: taken back unnamed */
		rc = registry_insert(r, chan, why, whylen);
	}
	if (rc != 0) {
		account_release(r->acct, chan->uid, chan->seg.size, true); /* charged pinned, nothing locked */
		chan->seg.fd = -1; /* the caller's still */
		segment_destroy(&chan->seg);
		free(chan->holder);
		free(chan);
		return rc;
	}
	/* Its first slice now, as a move or a reap does; the others a slice a
	 * loop turn (locking.h). */
	locking_add(&r->locking, r->acct, chan, &(size_t){segment_slice_bytes(&chan->seg)});
	*out = chan;
	return 0;
}

int handback(struct registry *r, struct reg_client *c, const struct handback_request *q, int *fd, uint64_t *id,
	     uint32_t *flags, char *why, size_t whylen)
{
	struct seg_geometry g;
	struct stat st;
	struct channel *chan;
	int rc;

	*flags = 0;
	if (seg_geometry_compute(&q->attr, &g) != 0) {
		snprintf(why, whylen, "invalid geometry");
		return -EINVAL;
	}
	bool producer = q->role == PINSHM_PRODUCER;
	if ((q->role != PINSHM_PRODUCER && q->role != PINSHM_CONSUMER) ||
	    (producer ? q->endpoint >= g.max_producers
		      : q->endpoint < g.max_producers || q->endpoint >= g.max_producers + g.max_consumers)) {
		snprintf(why, whylen, "endpoint %u is not a %s of this geometry", q->endpoint,
			 producer ? "producer" : "consumer");
		return -EINVAL;
	}
	/* Shared memory only (a memfd, a file of tmpfs or hugetlbfs: they
	 * answer F_GET_SEALS), asked without reaching any file system's own
	 * code: a file of another kind, of a FUSE server that never answers
	 * say, would block the daemon in its first fstat(). */
	if (fcntl(*fd, F_GET_SEALS) < 0) {
		snprintf(why, whylen, "not a shared memory file (a memfd or a file of /dev/shm)");
		return -EINVAL;
	}
	if (fstat(*fd, &st) != 0) {
		snprintf(why, whylen, "fstat: %s", strerror(errno));
		return -EINVAL;
	}
	chan = registry_find_segment(r, &st);
	if (chan) {
		if (memcmp(&chan->g, &g, sizeof(g)) != 0) {
			snprintf(why, whylen, "channel '%s' has another geometry", chan->name);
			return -EINVAL;
		}
		*flags |= PROTO_HANDBACK_KNOWN;
	} else {
		/* Room for the reference first: once taken, the channel is the
		 * daemon's, and a reference refused then would destroy it - punch
		 * the pages its processes still use. */
		rc = registry_ref_room(c, why, whylen);
		if (rc != 0)
			return rc;
		rc = handback_new(r, c, q->name, &q->attr, &g, *fd, &chan, why, whylen);
		if (rc != 0)
			return rc;
		*fd = -1; /* the channel's now */
		log_notice("channel '%s' handed back by pid %d uid %u: taken back%s, owner uid %u, mode 0600, %zu bytes, "
			   "to be locked, default pin_idle %u",
			   chan->name, (int)c->cred.pid, (unsigned)c->cred.uid,
			   chan->named ? "" : " unnamed (name taken, or not its to create)",
			   (unsigned)chan->uid, chan->seg.size, chan->pin_idle);
	}
	uint64_t chid = chan->id;
	rc = registry_ref(r, c, chan, why, whylen);
	if (rc != 0)
		return rc; /* chan may be gone */
	*flags |= chan->named ? PROTO_HANDBACK_NAMED : 0;
	struct endpoint_check e = {.g = &chan->g, .endpoint = q->endpoint, .pid = (uint32_t)c->cred.pid};
	if (chan->holder[q->endpoint] == 0 && !registry_reaping(r, chan, q->endpoint) &&
	    segment_access(&chan->seg, endpoint_attached, &e) == 0) {
		chan->holder[q->endpoint] = c->id;
		*flags |= PROTO_HANDBACK_ENDPOINT;
	}
	*id = chid;
	if (*flags & PROTO_HANDBACK_KNOWN)
		return 0;
	/* A channel new to this daemon: the endpoints of the others, judged
	 * once it is locked.  Not by a client the daemon cannot see
	 * (SO_PEERCRED pid 0: a PID namespace not nested in the daemon's),
	 * whose own pids mean nothing here: its live endpoints would be taken
	 * for gone; its reply still waits for the lock. */
	bool judge = c->cred.pid > 0;
	if (!judge)
		log_notice("channel '%s': handed back by a process outside this daemon's PID namespaces (pid 0): "
			   "its endpoints are not judged",
			   chan->name);
	if (watch_judge_start(r, chan, &(struct reg_judged){.client = c->id, .id = chid, .flags = *flags}, judge) == 0)
		return -EINPROGRESS; /* the reply once locked and judged (watch_judge_step()) */
	if (judge)
		watch_judge_endpoints(r, chan); /* out of memory to do it in slices; still locked in slices */
	return 0;
}
