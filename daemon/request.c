/*
 * request.c - the handlers of the requests of pinshm-protocol(7).
 */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "handback.h"
#include "log.h"
#include "names.h"
#include "numa.h"
#include "request.h"

#define LIBRARY_VERSION_CODE                                                                                  \
	((uint32_t)PINSHM_VERSION_MAJOR << 16 | (uint32_t)PINSHM_VERSION_MINOR << 8 | PINSHM_VERSION_PATCH)

static int fail(struct proto_msg *rep, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(struct proto_msg *rep, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rep->text, sizeof(rep->text), fmt, ap);
	va_end(ap);
	return err;
}

static int check_name(struct proto_msg *rep, const char *name)
{
	if (proto_name_valid(name))
		return 0;
	return fail(rep, -EINVAL,
		    "invalid channel name: 1 to %d characters of A-Z a-z 0-9 . _ -, not starting with '.', "
		    "or @UID. and such characters",
		    PINSHM_NAME_MAX);
}

static int serve_hello(struct request_ctx *ctx, struct reg_client *c, const struct proto_msg *req,
		       struct proto_msg *rep)
{
	uint32_t v = req->u.hello.library;

	log_debug("pid %d uid %u: HELLO, protocol %u, library %u.%u.%u", (int)c->cred.pid, (unsigned)c->cred.uid,
		  req->u.hello.version, v >> 16, (v >> 8) & 0xff, v & 0xff);
	if (req->u.hello.version != PROTO_VERSION)
		return fail(rep, -EPROTO, "client speaks protocol version %u, this daemon %u", req->u.hello.version,
			    PROTO_VERSION);
	rep->u.hello_reply.version = PROTO_VERSION;
	rep->u.hello_reply.flags = ctx->user_mode ? PROTO_HELLO_USER_MODE : 0;
	rep->u.hello_reply.library = LIBRARY_VERSION_CODE;
	return 0;
}

/*
 * The backend of a new channel: the request's (PINSHM_USE_*), else the
 * configured default.  `auto` takes the sealed memfd: it costs nothing
 * more than shm, leaves no name anywhere, can be made of huge pages and
 * comes from the pool, and no holder can shrink it.  A channel whose mode
 * admits another user must never be shrinkable (one user could make
 * another's processes fault), so it is refused where this kernel has no
 * sealed memfd; an owner-only channel falls back to shm there, where a
 * shrink hurts no one but its owner (shm_fallback).  Huge pages always
 * take a memfd (MFD_HUGETLB).
 */
static int choose_backend(enum config_backend dflt, uint32_t flags, uint32_t mode, struct segment_opts *o,
			  struct proto_msg *rep)
{
	bool memfd = flags & PINSHM_USE_MEMFD, shm = flags & PINSHM_USE_SHM;

	if (memfd && shm)
		return fail(rep, -EINVAL, "both backends asked for: memfd or shm, not both");
	if (shm && o->hugepages)
		return fail(rep, -EINVAL, "huge pages need the memfd backend, not shm");
	if (!memfd && !shm && !o->hugepages) {
		if (dflt == CONFIG_BACKEND_SHM)
			shm = true;
		else if (dflt == CONFIG_BACKEND_AUTO)
			o->shm_fallback = (mode & 077) == 0;
	}
	o->shm = shm;
	return 0;
}

static void create_reply(const struct channel *chan, struct proto_msg *rep)
{
	rep->u.create_reply.size = chan->seg.size;
	rep->u.create_reply.state = registry_channel_state(chan);
	rep->u.create_reply.backend = chan->seg.backend;
	rep->u.create_reply.id = chan->id;
}

/* The node of a CREATE: the request's, or that of the PCI device it names. */
static int create_node(const struct proto_msg *req, const struct reg_client *c, int *node, struct proto_msg *rep)
{
	const char *pci = req->u.create.pci;

	if (!pci[0])
		return numa_resolve(req->u.create.node, c->cred.pid, node, rep->text, sizeof(rep->text));
	if (req->u.create.node != PINSHM_NODE_ANY)
		return fail(rep, -EINVAL, "a NUMA node and a PCI device both asked for: one or the other");
	int rc = numa_of_pci(pci, node, rep->text, sizeof(rep->text));
	if (rc == 0)
		log_info("pid %d: '%s' next to PCI device %s: %s%d", (int)c->cred.pid, req->u.create.name, pci,
			 *node == PINSHM_NODE_ANY ? "no placement, node " : "node ", *node);
	return rc;
}

static int serve_create(struct request_ctx *ctx, struct reg_client *c, const struct proto_msg *req,
			struct proto_msg *rep)
{
	struct channel *chan;
	int rc = check_name(rep, req->u.create.name);

	if (rc != 0)
		return rc;
	if (req->u.create.mode & ~0777u)
		return fail(rep, -EINVAL, "invalid mode %#o: permission bits 0..0777 only", req->u.create.mode);
	const uint32_t known = PINSHM_PERSISTENT | PINSHM_HUGEPAGES | PINSHM_USE_MEMFD | PINSHM_USE_SHM;
	if (req->u.create.flags & ~known)
		return fail(rep, -EINVAL, "unknown create flags %#x", req->u.create.flags & ~known);
	struct segment_opts o = {.hugepages = req->u.create.flags & PINSHM_HUGEPAGES};
	rc = choose_backend(ctx->reg->acct->cfg->backend, req->u.create.flags, req->u.create.mode, &o, rep);
	if (rc != 0)
		return rc;
	o.pin_idle = req->u.create.pin_idle;
	if (o.pin_idle == PINSHM_PIN_DEFAULT)
		o.pin_idle = ctx->reg->acct->cfg->pin_idle;
	else if (o.pin_idle > PINSHM_PIN_IDLE_MAX)
		return fail(rep, -EINVAL, "invalid pin_idle %u: 0 (always pinned) or 1 to %u seconds", o.pin_idle,
			    PINSHM_PIN_IDLE_MAX);
	rc = create_node(req, c, &o.node, rep);
	if (rc != 0)
		return rc;
	rc = names_may_create(&ctx->reg->acct->cfg->names, &c->cred, req->u.create.name, rep->text,
			      sizeof(rep->text));
	if (rc != 0)
		return rc;
	pinshm_channel_attr_t attr = proto_geometry_to_attr(&req->u.create.geo);
	rc = registry_create(ctx->reg, c, req->u.create.name, &attr, req->u.create.mode,
			     req->u.create.flags & PINSHM_PERSISTENT, &o, &chan, rep->text, sizeof(rep->text));
	if (rc == 0)
		create_reply(chan, rep);
	return rc;
}

/* The channel @p name, if there is one, belongs to @p owner (PROTO_OWNER_ANY: anyone). */
static int check_owner(struct registry *reg, const char *name, uint32_t owner, struct proto_msg *rep)
{
	const struct channel *chan = registry_find(reg, name);

	if (!chan || owner == PROTO_OWNER_ANY || chan->uid == (uid_t)owner)
		return 0;
	return fail(rep, -EPERM, "channel '%s' belongs to uid %lu, not to uid %lu as the opener expects", name,
		    (unsigned long)chan->uid, (unsigned long)owner);
}

static int serve_open(struct request_ctx *ctx, struct reg_client *c, const struct proto_msg *req,
		      struct proto_msg *rep, int *fd)
{
	struct channel *chan;
	unsigned endpoint;
	uint32_t role = req->u.open.role;
	int rc = check_name(rep, req->u.open.name);

	if (rc != 0)
		return rc;
	if (role != PINSHM_PRODUCER && role != PINSHM_CONSUMER)
		return fail(rep, -EINVAL, "invalid role %u", role);
	rc = check_owner(ctx->reg, req->u.open.name, req->u.open.owner, rep);
	if (rc != 0)
		return rc;
	rc = registry_open(ctx->reg, c, req->u.open.name, (pinshm_role_t)role, req->u.open.node, &chan, &endpoint,
			   rep->text, sizeof(rep->text));
	if (rc != 0)
		return rc;
	rep->u.open_reply.endpoint = endpoint;
	rep->u.open_reply.geo = proto_geometry_from_attr(&chan->attr);
	rep->u.open_reply.size = chan->g.size; /* the geometry's; the segment may be larger */
	rep->u.open_reply.id = chan->id;
	*fd = chan->seg.fd;
	return 0;
}

static int serve_unlink(struct request_ctx *ctx, struct reg_client *c, const struct proto_msg *req,
			struct proto_msg *rep)
{
	int rc = check_name(rep, req->u.unlink.name);

	if (rc != 0)
		return rc;
	return registry_unlink(ctx->reg, c, req->u.unlink.name, rep->text, sizeof(rep->text));
}

static int serve_close(struct request_ctx *ctx, struct reg_client *c, const struct proto_msg *req,
		       struct proto_msg *rep)
{
	return registry_close(ctx->reg, c, req->u.close.id, req->u.close.endpoint, rep->text, sizeof(rep->text));
}

static int serve_relock(struct request_ctx *ctx, struct reg_client *c, const struct proto_msg *req,
			struct proto_msg *rep)
{
	return registry_relock(ctx->reg, c, req->u.relock.id, rep->text, sizeof(rep->text));
}

static int serve_stat(struct request_ctx *ctx, const struct proto_msg *req, struct proto_msg *rep)
{
	int rc = check_name(rep, req->u.stat.name);

	if (rc != 0)
		return rc;
	return registry_stat(ctx->reg, req->u.stat.name, &rep->u.stat_reply.entry, rep->text, sizeof(rep->text));
}

static int serve_handback(struct request_ctx *ctx, struct reg_client *c, const struct proto_msg *req,
		       struct proto_msg *rep)
{
	int rc = check_name(rep, req->u.handback.name);

	if (rc != 0)
		return rc;
	if (ctx->in_fd < 0)
		return fail(rep, -EINVAL, "HANDBACK comes with the channel's descriptor");
	struct handback_request q = {.name = req->u.handback.name,
				  .attr = proto_geometry_to_attr(&req->u.handback.geo),
				  .role = req->u.handback.role,
				  .endpoint = req->u.handback.endpoint};
	return handback(ctx->reg, c, &q, &ctx->in_fd, &rep->u.handback_reply.id, &rep->u.handback_reply.flags,
			    rep->text, sizeof(rep->text));
}

static int serve_list(struct request_ctx *ctx, const struct proto_msg *req, struct proto_msg *rep)
{
	uint64_t next;
	bool more;

	rep->u.list_reply.count = registry_list(ctx->reg, req->u.list.cursor, rep->u.list_reply.entries,
						PROTO_LIST_PAGE, &next, &more);
	rep->u.list_reply.next = next;
	rep->u.list_reply.flags = more ? PROTO_LIST_MORE : 0;
	return 0;
}

static_assert(CONFIG_POOL_MAX_SIZES <= PROTO_POOL_CLASSES, "STATUS shows every class of the pool");

/* The pool's part of a STATUS reply: what it holds of the pinned sum, and why. */
static void status_pool(const struct pool *pool, struct proto_msg *rep)
{
	typeof(rep->u.status_reply) *s = &rep->u.status_reply;
	struct pool_class_stat cs[PROTO_POOL_CLASSES];

	s->pool_pinned = s->pool_hits = s->pool_misses = 0;
	s->pool_flags = s->pool_count = 0;
	if (!pool)
		return;
	s->pool_pinned = pool_bytes(pool);
	s->pool_hits = pool->hits;
	s->pool_misses = pool->misses;
	s->pool_flags = pool->stopped ? PROTO_POOL_STOPPED : 0;
	s->pool_count = pool_stat(pool, cs, PROTO_POOL_CLASSES);
	for (unsigned i = 0; i < s->pool_count; i++)
		s->pool[i] = (struct proto_pool_class){
			.size = cs[i].size,
			.wanted = cs[i].wanted,
			.ready = cs[i].ready,
			.filling = cs[i].filling,
			.locked = cs[i].locked,
		};
}

static int serve_status(struct request_ctx *ctx, const struct proto_msg *req, struct proto_msg *rep)
{
	const struct account *acct = ctx->reg->acct;
	struct timespec now;
	uint64_t next;
	bool more;

	clock_gettime(CLOCK_MONOTONIC, &now);
	rep->u.status_reply.pid = (uint32_t)ctx->daemon_pid;
	rep->u.status_reply.uptime_ms = (uint64_t)(now.tv_sec - ctx->started.tv_sec) * 1000u +
					(uint64_t)(now.tv_nsec / 1000000) - (uint64_t)(ctx->started.tv_nsec / 1000000);
	rep->u.status_reply.budget = acct->cfg->budget;
	rep->u.status_reply.pinned = acct->pinned;
	registry_count(ctx->reg, &rep->u.status_reply.channels_pinned, &rep->u.status_reply.channels_unpinned);
	rep->u.status_reply.connections = (uint32_t)acct->connections;
	rep->u.status_reply.count = account_list(acct, req->u.status.cursor, rep->u.status_reply.users,
						 PROTO_STATUS_PAGE, &next, &more);
	rep->u.status_reply.next = next;
	rep->u.status_reply.flags = (ctx->user_mode ? PROTO_STATUS_USER_MODE : 0) | (more ? PROTO_STATUS_MORE : 0);
	status_pool(ctx->reg->pool, rep);
	return 0;
}

static int serve_clients(struct request_ctx *ctx, const struct proto_msg *req, struct proto_msg *rep)
{
	uint64_t next = req->u.clients.cursor;
	bool more = false;

	rep->u.clients_reply.count = ctx->clients ? ctx->clients(ctx->clients_arg, req->u.clients.cursor,
								 rep->u.clients_reply.entries, PROTO_CLIENTS_PAGE,
								 &next, &more)
						  : 0;
	rep->u.clients_reply.next = next;
	rep->u.clients_reply.flags = more ? PROTO_CLIENTS_MORE : 0;
	return 0;
}

static int serve_shutdown(struct request_ctx *ctx, struct reg_client *c, struct proto_msg *rep)
{
	if (c->cred.uid != 0 && c->cred.uid != ctx->daemon_uid)
		return fail(rep, -EPERM, "only root or uid %u may stop this daemon", (unsigned)ctx->daemon_uid);
	log_notice("shutdown asked by uid %u (pid %d)", (unsigned)c->cred.uid, (int)c->cred.pid);
	ctx->stop = true;
	return 0;
}

/* Encode @p rep into @p out; an encoding failure (a bug) closes the connection. */
static void finish(struct proto_msg *rep, struct reply *out)
{
	int len = proto_encode(rep, out->buf);

	if (len < 0) {
		log_err("cannot encode a %s reply: %s", proto_type_name(rep->h.type), strerror(-len));
		rep->h.type = PROTO_ERROR;
		rep->status = -EIO;
		snprintf(rep->text, sizeof(rep->text), "internal error");
		len = proto_encode(rep, out->buf);
		reply_release_fd(out);
		out->fd = -1;
		out->fd_owned = false;
		out->close_after = true;
	}
	out->len = (size_t)len;
}

/* The ERROR reply to a packet of @p len bytes that proto_decode() refused
 * with @p rc (its header in @p req where it could be read). */
static void undecoded(const struct reg_client *c, const struct proto_msg *req, size_t len, int rc,
		      struct proto_msg *rep, struct reply *out)
{
	rep->h.type = PROTO_ERROR;
	rep->status = rc;
	if (rc == -EPROTO) {
		fail(rep, rc, "protocol version %u not supported: this daemon speaks %u", req->h.version,
		     PROTO_VERSION);
		log_info("pid %d uid %u: %s", (int)c->cred.pid, (unsigned)c->cred.uid, rep->text);
	} else if (rc == -EOPNOTSUPP) {
		fail(rep, rc, "unknown request type %u", req->h.type);
		log_info("pid %d uid %u: %s", (int)c->cred.pid, (unsigned)c->cred.uid, rep->text);
	} else {
		fail(rep, rc, "malformed %zu-byte request (%s): closing the connection", len, strerror(-rc));
		log_warn("pid %d uid %u: %s", (int)c->cred.pid, (unsigned)c->cred.uid, rep->text);
		out->close_after = true;
	}
	finish(rep, out);
}

/* DEVICE: a registration reported for a channel @p c references (devices.h). */
static int serve_device(struct request_ctx *ctx, struct reg_client *c, const struct proto_msg *req,
			struct proto_msg *rep)
{
	struct channel *chan = registry_referenced(c, req->u.device.id);

	if (!chan)
		return fail(rep, -ENOENT, "this connection holds no channel number %llu",
			    (unsigned long long)req->u.device.id);
	return devices_report(&ctx->reg->locking, c, chan, registry_client_holds(c, chan), req->u.device.kind,
			      req->u.device.delta,
			      rep->text, sizeof(rep->text));
}

/* A consumer's wake-up socket for a producer; the daemon wakes that
 * consumer once the reply is sent (request_replied()). */
static int serve_peer(struct request_ctx *ctx, struct reg_client *c, const struct proto_msg *req,
		      struct proto_msg *rep, struct reply *out)
{
	int rc = registry_peer(ctx->reg, c, req->u.peer.id, req->u.peer.endpoint, &out->fd, rep->text,
			       sizeof(rep->text));

	out->fd_owned = rc == 0;
	out->peer_wake = true; /* refused too: a socket may come later, the wake-up is due now */
	out->peer_id = req->u.peer.id;
	out->peer_endpoint = req->u.peer.endpoint;
	return rc;
}

void request_serve(struct request_ctx *ctx, struct reg_client *c, const uint8_t *pkt, size_t len, struct reply *out)
{
	struct proto_msg *req = &ctx->req, *rep = &ctx->rep;
	int rc = proto_decode(pkt, len, false, req);

	out->fd = -1;
	out->fd_owned = false;
	out->close_after = false;
	out->peer_wake = false;
	out->deferred = false;
	out->wait = (struct lock_wait){0};
	if (ctx->in_fd >= 0 && (rc != 0 || !proto_request_takes_fd(req->h.type))) {
		log_warn("pid %d uid %u: a descriptor with a request that takes none: closing the connection",
			 (int)c->cred.pid, (unsigned)c->cred.uid);
		request_refuse(-EPROTO, out);
		return;
	}
	memset(rep, 0, offsetof(struct proto_msg, u));
	rep->h.seq = req->h.seq;
	if (rc != 0) {
		undecoded(c, req, len, rc, rep, out);
		return;
	}

	rep->h.type = req->h.type | PROTO_REPLY;
	switch (req->h.type) {
	case PROTO_HELLO:
		rc = serve_hello(ctx, c, req, rep);
		break;
	case PROTO_CREATE:
		rc = serve_create(ctx, c, req, rep);
		break;
	case PROTO_OPEN:
		rc = serve_open(ctx, c, req, rep, &out->fd);
		break;
	case PROTO_UNLINK:
		rc = serve_unlink(ctx, c, req, rep);
		break;
	case PROTO_LIST:
		rc = serve_list(ctx, req, rep);
		break;
	case PROTO_SHUTDOWN:
		rc = serve_shutdown(ctx, c, rep);
		break;
	case PROTO_STATUS:
		rc = serve_status(ctx, req, rep);
		break;
	case PROTO_CLIENTS:
		rc = serve_clients(ctx, req, rep);
		break;
	case PROTO_CLOSE:
		rc = serve_close(ctx, c, req, rep);
		break;
	case PROTO_STAT:
		rc = serve_stat(ctx, req, rep);
		break;
	case PROTO_RELOCK:
		rc = serve_relock(ctx, c, req, rep);
		out->wait = (struct lock_wait){.id = req->u.relock.id, .type = PROTO_RELOCK};
		break;
	case PROTO_HANDBACK:
		rc = serve_handback(ctx, c, req, rep);
		break;
	case PROTO_NOTIFY:
		rc = registry_notify(ctx->reg, c, req->u.notify.id, req->u.notify.endpoint, &ctx->in_fd, rep->text,
				     sizeof(rep->text));
		break;
	case PROTO_PEER:
		rc = serve_peer(ctx, c, req, rep, out);
		break;
	case PROTO_DEVICE:
		rc = serve_device(ctx, c, req, rep);
		out->wait = (struct lock_wait){.id = req->u.device.id, .type = PROTO_DEVICE, .kind = req->u.device.kind};
		break;
	default: /* proto_decode() let through requests only */
		rc = fail(rep, -EOPNOTSUPP, "unknown request type %u", req->h.type);
		break;
	}
	if (rc == -EINPROGRESS) {
		/* A CREATE, a HANDBACK, or a RELOCK or DEVICE that waits for a
		 * locking, in progress: request_created(), request_handed_back()
		 * or request_relocked() replies. */
		out->deferred = true;
		out->seq = req->h.seq;
		return;
	}
	out->wait = (struct lock_wait){0};
	rep->status = rc;
	if (rc != 0) {
		reply_release_fd(out);
		out->fd = -1;
		out->fd_owned = false;
		log_debug("pid %d uid %u: %s: %s", (int)c->cred.pid, (unsigned)c->cred.uid,
			  proto_type_name(req->h.type), rep->text);
	}
	finish(rep, out);
}

void request_created(struct request_ctx *ctx, struct reg_client *c, struct channel *chan, uint32_t seq,
		     struct reply *out)
{
	struct proto_msg *rep = &ctx->rep;

	*out = (struct reply){.fd = -1};
	memset(rep, 0, offsetof(struct proto_msg, u));
	rep->h.type = PROTO_CREATE | PROTO_REPLY;
	rep->h.seq = seq;
	rep->status = registry_create_end(ctx->reg, c, chan, &chan, rep->text, sizeof(rep->text));
	if (rep->status == 0)
		create_reply(chan, rep);
	else
		log_debug("pid %d uid %u: CREATE: %s", (int)c->cred.pid, (unsigned)c->cred.uid, rep->text);
	finish(rep, out);
}

void request_handed_back(struct request_ctx *ctx, const struct reg_judged *done, uint32_t seq, struct reply *out)
{
	struct proto_msg *rep = &ctx->rep;

	*out = (struct reply){.fd = -1};
	memset(rep, 0, offsetof(struct proto_msg, u));
	rep->h.type = PROTO_HANDBACK | PROTO_REPLY;
	rep->h.seq = seq;
	rep->u.handback_reply.id = done->id;
	rep->u.handback_reply.flags = done->flags;
	finish(rep, out);
}

void request_relocked(struct request_ctx *ctx, struct reg_client *c, struct channel *chan, uint32_t seq,
		      const struct lock_wait *w, struct reply *out)
{
	struct proto_msg *rep = &ctx->rep;

	*out = (struct reply){.fd = -1};
	memset(rep, 0, offsetof(struct proto_msg, u));
	rep->h.type = w->type | PROTO_REPLY;
	rep->h.seq = seq;
	if (!chan->seg.pinned)
		rep->status = fail(rep, -ENOMEM, "cannot lock '%s': %s", chan->name, chan->seg.pin_error);
	else if (chan->seg.unlocked) /* a relock that failed */
		rep->status = fail(rep, chan->relock_err ? -chan->relock_err : -ENOMEM, "cannot lock '%s' again: %s",
				   chan->name, strerror(chan->relock_err ? chan->relock_err : ENOMEM));
	else if (w->type == PROTO_DEVICE)
		rep->status = devices_report(&ctx->reg->locking, c, chan, registry_client_holds(c, chan), w->kind, 1,
					     rep->text, sizeof(rep->text));
	if (rep->status != 0)
		log_debug("pid %d uid %u: %s: %s", (int)c->cred.pid, (unsigned)c->cred.uid, proto_type_name(w->type),
			  rep->text);
	finish(rep, out);
}

void request_replied(struct request_ctx *ctx, struct reg_client *c, const struct reply *out)
{
	if (out->peer_wake)
		registry_peer_replied(ctx->reg, c, out->peer_id, out->peer_endpoint);
}

void request_refuse(int err, struct reply *out)
{
	struct proto_msg rep = {.h.type = PROTO_ERROR, .status = err};

	snprintf(rep.text, sizeof(rep.text), "%s: closing the connection",
		 err == -EMSGSIZE ? "request larger than 4096 bytes"
		 : err == -EPROTO ? "descriptors or control data that were not asked for"
				  : "malformed request");
	out->fd = -1;
	out->fd_owned = false;
	out->close_after = true;
	out->peer_wake = false;
	finish(&rep, out);
}

void request_deny(const uint8_t *pkt, size_t len, int err, const char *text, struct reply *out)
{
	struct proto_msg *req = malloc(sizeof(*req));
	struct proto_msg rep = {.h.type = PROTO_ERROR, .status = err};

	/* The header is filled where it could be read: valid, or of another
	 * version or type. */
	int rc = req ? proto_decode(pkt, len, false, req) : -ENOMEM;
	if (rc == 0 || rc == -EPROTO || rc == -EOPNOTSUPP)
		rep.h.seq = req->h.seq;
	free(req);
	snprintf(rep.text, sizeof(rep.text), "%s", text);
	out->fd = -1;
	out->fd_owned = false;
	out->close_after = true;
	out->peer_wake = false;
	finish(&rep, out);
}
