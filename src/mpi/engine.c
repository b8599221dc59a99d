/*
 * engine.c - the plugin's progress engine.
 *
 * Inbound: every record of this rank's queue is handled at once: matched
 * against the posted receives of its communicator (in the order they were
 * posted) or kept as unexpected (an EAGER's payload copied out, so that the
 * ring never waits for a receive to be posted), or it advances a rendezvous
 * (CTS, DATA, ACK).  Records from one rank arrive in the order written, so
 * messages between a pair never overtake each other.
 *
 * Outbound: per peer, CTS/ACK records first, then sends in the order they
 * were started (each writes its EAGER or RTS), then DATA of the sends that
 * got their CTS.  Nothing ever waits for room: what does not fit stays
 * queued and the peer is marked busy.  (A receiver may copy a long message
 * straight from its sender instead, where the two send to each other or
 * ranks outnumber cores: wire.h, write_first(), take_rts().)
 *
 * Unexpected messages are kept by unexp.c; receives that may also match a
 * message of the MPI library probe it from remote.c.
 *
 * Nothing here blocks except pm_idle(), and only when told it may.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "plugin.h"
#include "wire.h"

static void bad_record(const char *why)
{
	static unsigned reported;
	if (reported++ < 5)
		fprintf(stderr, "pinshm-mpi: rank %d: dropped a malformed record (%s)\n", pm.world_rank, why);
}

void pm_peer_mark_busy(int peer)
{
	if (!pm.peers[peer].busy) {
		pm.peers[peer].busy = true;
		pm.busy[peer / 64] |= 1ull << (peer % 64);
		pm.busy_peers++;
	}
}

static void peer_update_busy(int peer)
{
	struct pm_peer *p = &pm.peers[peer];
	if (p->busy && !p->ctl.head && !p->sendq.head && !p->stream.head) {
		p->busy = false;
		pm.busy[peer / 64] &= ~(1ull << (peer % 64));
		pm.busy_peers--;
	}
}

/* ---- writing records ---------------------------------------------------- */

/* The path out of pm_reserve_out() where the ring failed: it says why and
 * aborts the job. */
void pm_write_failed(int peer, int rc)
{
	fprintf(stderr, "pinshm-mpi: rank %d: cannot write to rank %d: %s\n", pm.world_rank,
		pm.local_world[peer], pinshm_strerror(rc));
	PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_OTHER);
}

struct pm_ctl {
	struct pm_link link;
	union {
		struct rec_cts cts;
		struct rec_ack ack;
	} rec;
	size_t len;
};

static int write_ctl(int peer, const void *rec, size_t len)
{
	void *buf;
	if (!pm_reserve_out(peer, len, &buf))
		return 0;
	memcpy(buf, rec, len);
	pinshm_commit(pm.peers[peer].out, len, 0);
	return 1;
}

/* Send a CTS or an ACK to @p peer now, or queue it. */
static void send_ctl(int peer, const void *rec, size_t len)
{
	struct pm_peer *p = &pm.peers[peer];
	if (!p->ctl.head && write_ctl(peer, rec, len))
		return;
	struct pm_ctl *c = malloc(sizeof(*c));
	if (!c) {
		fprintf(stderr, "pinshm-mpi: out of memory\n");
		PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
		return;
	}
	memcpy(&c->rec, rec, len);
	c->len = len;
	pm_list_push(&p->ctl, &c->link);
	pm_peer_mark_busy(peer);
}

static void send_ack(int peer, uint64_t sid)
{
	struct rec_ack a = {.h = {.type = REC_ACK, .from = (uint16_t)pm.local_rank}, .sid = sid};
	send_ctl(peer, &a, sizeof(a));
}

static void send_cts(int peer, uint64_t sid, uint64_t rid, uint64_t accept)
{
	struct rec_cts c = {
		.h = {.type = REC_CTS, .from = (uint16_t)pm.local_rank}, .sid = sid, .rid = rid, .accept = accept};
	send_ctl(peer, &c, sizeof(c));
}

bool pm_send_now(struct pm_comm *c, const void *buf, int count, MPI_Datatype dtype, int dest, int tag,
		 enum pm_family family)
{
	return pm_send_now_inline(c, buf, count, dtype, dest, tag, family);
}

/* Write a send's first record (EAGER or RTS). @return 1 written, 0 no room. */
static int write_first(struct pm_op *op)
{
	void *buf;
	int peer = op->peer_local;
	if (op->bytes <= pm.cfg.eager || op->failed) {
		uint8_t flags = op->failed ? REC_FAILED : op->mode == MODE_SYNC ? REC_SYNC : 0;
		if (!pm_write_eager(peer, op->comm, op->tag, flags, pm_op_id(op), op->data, op->bytes))
			return 0;
		if (op->mode == MODE_SYNC)
			op->state = ST_WAIT_ACK;
		else
			pm_op_complete(op);
		return 1;
	}
	if (!pm_reserve_out(peer, sizeof(struct rec_rts), &buf))
		return 0;
	struct rec_rts *r = buf;
	memset(r, 0, sizeof(*r));
	r->h.type = REC_RTS;
	r->h.from = (uint16_t)pm.local_rank;
	r->src = op->comm->rank;
	r->tag = op->tag;
	r->ctx = op->comm->ctx;
	r->sid = pm_op_id(op);
	r->len = op->bytes;
	/* Where the message lies, so that its receiver may copy it once; and
	 * asking it to where messages of this size are copied once
	 * (PINSHM_MPI_CMA, or ranks outnumber cores), or where a receive from
	 * that rank is open (the two send to each other: crossing). */
	bool from_size = pm.cfg.cma && op->bytes >= pm.cfg.cma;
	if (from_size || !pm.cfg.cma_set) {
		bool crossing = !pm.cfg.cma_set && pm.peers[peer].open_recvs;
		r->h.flags = REC_CMA | (from_size || crossing ? REC_COPY : 0);
		r->pid = (uint32_t)getpid();
		r->addr = (uint64_t)(uintptr_t)op->data;
	}
	pinshm_commit(pm.peers[peer].out, sizeof(*r), 0);
	op->state = ST_WAIT_CTS;
	return 1;
}

/* Write DATA of a send that got its CTS. @return 1 when all is written. */
static int write_stream(struct pm_op *op, int *did)
{
	int peer = op->peer_local;
	while (op->offset < op->accept) {
		uint64_t n = op->accept - op->offset;
		if (n > pm.cfg.chunk)
			n = pm.cfg.chunk;
		void *buf;
		if (!pm_reserve_out(peer, sizeof(struct rec_data) + n, &buf))
			return 0;
		struct rec_data *r = buf;
		memset(r, 0, sizeof(*r));
		r->h.type = REC_DATA;
		r->h.from = (uint16_t)pm.local_rank;
		r->rid = op->remote_id;
		r->offset = op->offset;
		memcpy(r + 1, op->data + op->offset, n);
		pinshm_commit(pm.peers[peer].out, sizeof(*r) + n, 0);
		op->offset += n;
		(*did)++;
	}
	return 1;
}

static int push_peer(int peer)
{
	struct pm_peer *p = &pm.peers[peer];
	int did = 0;
	while (p->ctl.head) {
		struct pm_ctl *c = pm_container(p->ctl.head, struct pm_ctl, link);
		if (!write_ctl(peer, &c->rec, c->len))
			goto out;
		pm_list_remove(&p->ctl, &c->link);
		free(c);
		did++;
	}
	while (p->sendq.head) {
		struct pm_op *op = pm_container(p->sendq.head, struct pm_op, link);
		pm_list_remove(&p->sendq, &op->link);
		if (!write_first(op)) {
			/* Put it back at the head: order matters. */
			op->link.next = p->sendq.head;
			op->link.prev = NULL;
			if (p->sendq.head)
				p->sendq.head->prev = &op->link;
			else
				p->sendq.tail = &op->link;
			p->sendq.head = &op->link;
			p->sendq.length++;
			goto out;
		}
		did++;
	}
	while (p->stream.head) {
		struct pm_op *op = pm_container(p->stream.head, struct pm_op, link);
		if (!write_stream(op, &did))
			goto out;
		pm_list_remove(&p->stream, &op->link);
		pm_op_complete(op);
	}
out:
	peer_update_busy(peer);
	return did;
}

static int push_busy(void)
{
	int did = 0;
	for (uint32_t w = 0; w < pm.busy_mask_words; w++) {
		uint64_t bits = pm.busy[w];
		while (bits) {
			int b = __builtin_ctzll(bits);
			bits &= bits - 1;
			did += push_peer((int)(w * 64 + (uint32_t)b));
		}
	}
	return did;
}

/* ---- starting operations ------------------------------------------------- */

static void op_open(struct pm_op *op, int peer)
{
	if (op->open_with || peer < 0 || op->bytes <= pm.cfg.eager)
		return;
	op->open_with = peer + 1;
	if (op->kind == OP_SEND)
		pm.peers[peer].open_sends++;
	else
		pm.peers[peer].open_recvs++;
}

void pm_op_closed(struct pm_op *op)
{
	if (!op->open_with || !pm.peers)
		return;
	struct pm_peer *p = &pm.peers[op->open_with - 1];
	if (op->kind == OP_SEND)
		p->open_sends--;
	else
		p->open_recvs--;
	op->open_with = 0;
}

int pm_send_start(struct pm_op *op)
{
	struct pm_peer *p = &pm.peers[op->peer_local];
	op_open(op, op->peer_local);
	op->state = ST_QUEUED;
	pm.sends_inflight++;
	if (!p->sendq.head && write_first(op))
		return MPI_SUCCESS;
	pm_list_push(&p->sendq, &op->link);
	pm_peer_mark_busy(op->peer_local);
	return MPI_SUCCESS;
}

int pm_send_failed(struct pm_comm *c, int dest, int tag, int code)
{
	struct pm_op *op = pm_op_new(OP_SEND);
	pm_op_attach(op, c);
	op->peer = dest;
	op->tag = tag;
	op->peer_local = c->local[dest];
	op->mode = MODE_STANDARD;
	op->family = FAM_COUNT; /* not a message of the user's */
	op->counted = true;
	op->user_freed = true;  /* released once written */
	op->failed = code;
	op->data = (char *)&op->failed;
	op->bytes = sizeof(op->failed);
	op->contiguous = true;
	pm_send_start(op);
	return code;
}

void pm_unexp_refuse(const struct pm_unexp *u)
{
	if (u->type == REC_RTS)
		send_cts(u->from, u->sid, 0, 0);
	else if (u->flags & REC_SYNC)
		send_ack(u->from, u->sid);
}

/* Whether a posted receive may also be matched by the MPI library. */
static bool may_match_remote(const struct pm_op *op)
{
	return pm_probe_lib(op->comm, op->peer);
}

void pm_op_unpost(struct pm_op *op)
{
	pm_list_remove(&op->comm->posted, &op->link);
	pm.posted--;
	if (may_match_remote(op)) {
		pm_list_remove(&pm.hybrid, &op->rlink);
		op->comm->wild_remote--;
	}
}

static void take_eager(struct pm_op *op, int src, int tag, uint8_t flags, int from, uint64_t sid,
		       const void *payload, uint64_t len)
{
	op->st_source = src;
	op->st_tag = tag;
	if (flags & REC_FAILED) { /* the send failed at its sender: say so */
		int code = MPI_ERR_OTHER;
		if (len == sizeof(code))
			memcpy(&code, payload, sizeof(code));
		op->st_error = code > MPI_SUCCESS && code <= MPI_ERR_LASTCODE ? code : MPI_ERR_OTHER;
		op->st_bytes = 0;
		pm_op_complete(op);
		return;
	}
	op->accept = len < op->bytes ? len : op->bytes;
	if (len > op->bytes)
		op->st_error = MPI_ERR_TRUNCATE;
	pm_op_deliver(op, payload, op->accept, 0);
	pm_op_deliver_done(op);
	op->st_bytes = len; /* the message's, truncated or not, as Open MPI reports it */
	if (flags & REC_SYNC)
		send_ack(from, sid);
	pm_op_complete(op);
}

/* Copy a message straight from its sender's memory. @return whether it did. */
static bool copy_from_sender(struct pm_op *op, uint32_t pid, uint64_t addr)
{
	if (pm.copy_refused || op->accept == 0)
		return false;
	char *dst = op->data;
	if (!op->contiguous) {
		op->tmp = malloc(op->accept);
		if (!op->tmp)
			return false;
		dst = op->tmp;
	}
	uint64_t done = 0;
	while (done < op->accept) {
		struct iovec local = {dst + done, op->accept - done};
		struct iovec remote = {(void *)(uintptr_t)(addr + done), op->accept - done};
		ssize_t n = process_vm_readv((pid_t)pid, &local, 1, &remote, 1, 0);
		if (n <= 0) {
			if (done == 0 && (errno == EPERM || errno == ENOSYS))
				pm.copy_refused = true; /* the kernel said no once: it will again */
			if (done)
				bad_record("the sender's memory could not be read");
			free(op->tmp);
			op->tmp = NULL;
			return false;
		}
		done += (uint64_t)n;
	}
	if (!op->contiguous) {
		op->offset = op->accept;
		pm_op_deliver_done(op);
	}
	pm.copied_once++;
	return true;
}

static void take_rts(struct pm_op *op, const struct pm_unexp *e)
{
	op->st_source = e->src;
	op->st_tag = e->tag;
	op->accept = e->len < op->bytes ? e->len : op->bytes;
	if (e->len > op->bytes)
		op->st_error = MPI_ERR_TRUNCATE;
	op->st_bytes = e->len; /* the message's, truncated or not, as Open MPI reports it */
	op->remote_id = e->sid;
	op->reply_to = e->from;
	op->offset = 0;
	/* Only from the process that owns the lane it came on, and where the
	 * sender asked for it or the two ranks send to each other. */
	bool copy = (e->flags & REC_COPY) || (!pm.cfg.cma_set && pm.peers[e->from].open_sends);
	if ((e->flags & REC_CMA) && copy && e->pid == (uint32_t)pm.local_pid[e->from] &&
	    copy_from_sender(op, e->pid, e->addr)) {
		struct rec_cts c = {.h = {.type = REC_CTS, .flags = REC_COPIED, .from = (uint16_t)pm.local_rank},
				    .sid = e->sid,
				    .accept = op->accept};
		send_ctl(e->from, &c, sizeof(c));
		pm_op_complete(op);
		return;
	}
	op->state = ST_STREAM;
	pm.streaming++;
	send_cts(e->from, e->sid, pm_op_id(op), op->accept);
	if (op->accept == 0)
		pm_op_complete(op);
}

void pm_recv_take(struct pm_op *op, struct pm_unexp *u)
{
	if (u->type == REC_EAGER)
		take_eager(op, u->src, u->tag, u->flags, u->from, u->sid, u->data, u->len);
	else
		take_rts(op, u);
	pm_unexp_free(u);
}

int pm_recv_start(struct pm_op *op)
{
	struct pm_comm *c = op->comm;
	op_open(op, op->peer == MPI_ANY_SOURCE ? -1 : c->local[op->peer]);
	struct pm_unexp *u = pm_unexp_find(c, op->peer, op->tag);
	if (u) {
		pm_list_remove(&c->unexp, &u->link);
		pm_recv_take(op, u);
		return MPI_SUCCESS;
	}
	op->state = ST_POSTED;
	pm_list_push(&c->posted, &op->link);
	pm.posted++;
	if (may_match_remote(op)) {
		pm_list_push(&pm.hybrid, &op->rlink);
		c->wild_remote++;
	}
	return MPI_SUCCESS;
}

bool pm_op_cancel(struct pm_op *op)
{
	if (op->state == ST_POSTED) {
		pm_op_unpost(op);
	} else if (op->state == ST_QUEUED) {
		pm_list_remove(&pm.peers[op->peer_local].sendq, &op->link);
		peer_update_busy(op->peer_local);
	} else if (op->state == ST_REMOTE && op->kind == OP_RECV) {
		PMPI_Cancel(&op->preq); /* the engine sees the outcome in its status */
		return true;
	} else {
		return false; /* on its way: it completes as usual */
	}
	op->cancelled = true;
	pm_op_complete(op);
	return true;
}

/* ---- reading records ------------------------------------------------------ */

static struct pm_op *match_posted(struct pm_comm *c, int src, int tag)
{
	for (struct pm_link *l = c->posted.head; l; l = l->next) {
		struct pm_op *op = pm_container(l, struct pm_op, link);
		if (pm_matches(op->peer, op->tag, src, tag))
			return op;
	}
	return NULL;
}

/* Whether the blocking receive waiting unposted (pm_recv_direct) matches. */
static bool direct_matches(const struct pm_comm *c, int src, int tag)
{
	const struct pm_op *d = pm.direct;
	return d && d->comm == c && d->state == ST_POSTED && pm_matches(d->peer, d->tag, src, tag);
}

/* The communicator of an envelope, checked against the lane it came on. */
static struct pm_comm *envelope_comm(uint64_t ctx, int src, int from, bool *orphan)
{
	struct pm_comm *c = pm_comm_by_ctx(ctx);
	*orphan = false;
	if (!c) {
		*orphan = true;
		return NULL;
	}
	if (src < 0 || src >= c->size || c->local[src] != from) {
		bad_record("source does not match its lane");
		return NULL;
	}
	return c;
}

/*
 * The handlers get a private copy of the record's header, read once from
 * the ring and checked (type, sender), and the payload's place and length
 * computed from the record's length: another rank may rewrite the record
 * meanwhile, which can garble a payload but never move a read or a write
 * outside the record or the receive buffer.
 */
static void on_eager(const struct rec_eager *r, uint64_t sid, const void *payload, size_t n)
{
	if (n < r->len || n - r->len >= PM_LINE)
		return bad_record("EAGER length");
	n = r->len;
	bool orphan;
	struct pm_comm *c = envelope_comm(r->ctx, r->src, r->h.from, &orphan);
	if (!c && !orphan)
		return;
	struct pm_op *op = c ? match_posted(c, r->src, r->tag) : NULL;
	if (op) {
		pm_op_unpost(op);
	} else if (direct_matches(c, r->src, r->tag)) {
		op = pm.direct;
	} else {
		struct pm_unexp e = {.type = REC_EAGER, .flags = r->h.flags, .from = r->h.from, .src = r->src,
				     .tag = r->tag, .ctx = r->ctx, .len = n, .sid = sid};
		return pm_unexp_keep(c, &e, payload);
	}
	take_eager(op, r->src, r->tag, r->h.flags, r->h.from, sid, payload, n);
}

static void on_rts(const struct rec_rts *r, size_t n)
{
	if (n != 0)
		return bad_record("RTS length");
	bool orphan;
	struct pm_comm *c = envelope_comm(r->ctx, r->src, r->h.from, &orphan);
	if (!c && !orphan)
		return;
	struct pm_unexp e = {.type = REC_RTS, .flags = r->h.flags, .from = r->h.from, .src = r->src, .tag = r->tag,
			     .ctx = r->ctx, .len = r->len, .sid = r->sid, .pid = r->pid, .addr = r->addr};
	struct pm_op *op = c ? match_posted(c, r->src, r->tag) : NULL;
	if (!op) {
		if (direct_matches(c, r->src, r->tag))
			pm.direct_missed = true; /* it has no wire id for the CTS */
		return pm_unexp_keep(c, &e, NULL);
	}
	pm_op_unpost(op);
	take_rts(op, &e);
}

static void on_cts(const struct rec_cts *r, size_t n)
{
	struct pm_op *op = n == 0 ? pm_op_by_id(r->sid) : NULL;
	if (!op || op->kind != OP_SEND || op->state != ST_WAIT_CTS || r->accept > op->bytes ||
	    op->peer_local != r->h.from)
		return bad_record("CTS for no send waiting for one");
	op->remote_id = r->rid;
	op->accept = r->accept;
	op->offset = 0;
	if (op->accept == 0 || (r->h.flags & REC_COPIED))
		return pm_op_complete(op);
	op->state = ST_STREAM;
	pm_list_push(&pm.peers[op->peer_local].stream, &op->link);
	pm_peer_mark_busy(op->peer_local);
}

static void on_data(const struct rec_data *r, const void *payload, size_t n)
{
	struct pm_op *op = pm_op_by_id(r->rid);
	if (!op || op->kind != OP_RECV || op->state != ST_STREAM || op->reply_to != r->h.from ||
	    r->offset != op->offset || n > op->accept - op->offset)
		return bad_record("DATA for no receive taking it");
	pm_op_deliver(op, payload, n, op->offset);
	op->offset += n;
	if (op->offset == op->accept) {
		pm_op_deliver_done(op);
		pm_op_complete(op);
	}
}

static void on_ack(const struct rec_ack *r, size_t n)
{
	struct pm_op *op = n == 0 ? pm_op_by_id(r->sid) : NULL;
	if (!op || op->kind != OP_SEND || op->state != ST_WAIT_ACK || op->peer_local != r->h.from)
		return bad_record("ACK for no send waiting for one");
	pm_op_complete(op);
}

static const size_t header_size[] = {
	[REC_EAGER] = sizeof(struct rec_eager), [REC_RTS] = sizeof(struct rec_rts),
	[REC_CTS] = sizeof(struct rec_cts),     [REC_DATA] = sizeof(struct rec_data),
	[REC_ACK] = sizeof(struct rec_ack),
};

static void on_record(const void *data, size_t len)
{
	union {
		struct rec_head h;
		struct rec_eager eager;
		struct rec_rts rts;
		struct rec_cts cts;
		struct rec_data dat;
		struct rec_ack ack;
	} r;
	uint8_t type = ((const volatile struct rec_head *)data)->type;
	if (type < REC_EAGER || type > REC_ACK || len < header_size[type])
		return bad_record("unknown type or short record");
	/* Copies of a size known here: a call to memcpy with a variable
	 * size, and the reads of its result, cost more than the rest. */
	switch (type) {
	case REC_EAGER:
		memcpy(&r.eager, data, sizeof(r.eager));
		break;
	case REC_RTS:
		memcpy(&r.rts, data, sizeof(r.rts));
		break;
	case REC_CTS:
		memcpy(&r.cts, data, sizeof(r.cts));
		break;
	case REC_DATA:
		memcpy(&r.dat, data, sizeof(r.dat));
		break;
	case REC_ACK:
		memcpy(&r.ack, data, sizeof(r.ack));
		break;
	}
	r.h.type = type;
	if (r.h.from >= pm.nlocal)
		return bad_record("unknown sender");
	const char *payload = (const char *)data + header_size[type];
	size_t n = len - header_size[type];
	switch (type) {
	case REC_EAGER: {
		uint64_t sid = 0;
		if (r.h.flags & REC_SID) {
			if (n < sizeof(sid))
				return bad_record("EAGER without room for its sid");
			memcpy(&sid, payload, sizeof(sid));
			payload += sizeof(sid);
			n -= sizeof(sid);
		} else if (r.h.flags & REC_SYNC) {
			return bad_record("synchronous EAGER without a sid");
		}
		return on_eager(&r.eager, sid, payload, n);
	}
	case REC_RTS:
		return on_rts(&r.rts, n);
	case REC_CTS:
		return on_cts(&r.cts, n);
	case REC_DATA:
		return on_data(&r.dat, payload, n);
	case REC_ACK:
		return on_ack(&r.ack, n);
	}
}

/*
 * The record taken last is released by the next look at the inbound queue,
 * not before the call it completed returns: a blocking receive returns,
 * and its caller's reply leaves, without waiting for the release (its
 * store and its look at the producers' wait line).  Its room is held only
 * until the rank's next progress, which every call that waits makes, so
 * no sender waits on it for long.
 */
static pinshm_msg_t last_taken;
static bool holding_last;

static void release_last(void)
{
	if (holding_last) {
		holding_last = false;
		if (pm.in) /* closed, and with it released, at MPI_Finalize */
			pinshm_release(pm.in, &last_taken);
	}
}

/*
 * The common record of a ping-pong, in fewer steps: an EAGER without a sid,
 * on the communicator of the blocking receive waiting unposted
 * (pm_recv_direct()), which that receive matches, where no receive was
 * posted before it.  on_record() would give it to that receive too; here
 * it goes into the buffer and completes the receive at once: the
 * receiver's steps are all on a message's trip.  Anything else, a
 * malformed record included, is left to on_record().
 * @return whether it took @p m.
 */
static bool take_direct(const pinshm_msg_t *m)
{
	struct pm_op *op = pm.direct;
	struct rec_eager r;
	if (!op || op->state != ST_POSTED || m->len < sizeof(r))
		return false;
	memcpy(&r, m->data, sizeof(r)); /* read once: see on_eager() */
	/* Over PM_LINE_ALIGNED_EAGER bytes, a sid (unused here) comes first. */
	size_t hdr = r.h.flags == REC_SID ? sizeof(struct rec_eager_sync) : sizeof(r);
	if (m->len < hdr)
		return false;
	size_t n = m->len - hdr;
	const struct pm_comm *c = op->comm;
	if (r.h.type != REC_EAGER || (r.h.flags & ~REC_SID) || r.ctx != c->ctx || c->posted.head || r.src < 0 ||
	    r.src >= c->size || c->local[r.src] != r.h.from || n < r.len || n - r.len >= PM_LINE ||
	    !pm_matches(op->peer, op->tag, r.src, r.tag))
		return false;
	/* take_eager() and pm_op_complete() for a contiguous receive without
	 * a handle, which nothing else completes. */
	op->st_source = r.src;
	op->st_tag = r.tag;
	op->st_bytes = r.len;
	op->accept = r.len < op->bytes ? r.len : op->bytes;
	if (r.len > op->bytes)
		op->st_error = MPI_ERR_TRUNCATE;
	if (op->accept)
		memcpy(op->data, (const char *)m->data + hdr, op->accept);
	op->state = ST_DONE;
	op->counted = true;
	pm_count_pinshm(op->family, r.len);
	return true;
}

static void take_message(pinshm_msg_t *m)
{
	if (!take_direct(m))
		on_record(m->data, m->len);
	release_last();
	last_taken = *m;
	holding_last = true;
}

/* Whether a blocking call waiting for @p op may return. */
static bool wait_over(const struct pm_op *op)
{
	return op->state == ST_DONE || (op == pm.direct && pm.direct_missed);
}

/* Take up to 64 records; stop early once the op a blocking call waits
 * for is done, so that its caller returns at once.  The inbound queue
 * polls quickly (setup.c): on a node of many ranks, a poll that does not
 * wait looks at the lanes that gave records lately and a few others in
 * turn, not at all of them; a wait looks at all of them before it sleeps. */
static int drain_inbound(int timeout_ms)
{
	int did = 0;
	release_last();
	for (; did < 64 && !(pm.watch && wait_over(pm.watch)); did++) {
		pinshm_msg_t m;
		int rc = pinshm_recv_inplace(pm.in, &m, did ? PINSHM_NONBLOCK : timeout_ms);
		if (rc == -EAGAIN || rc == -ETIMEDOUT)
			break;
		if (rc < 0) {
			fprintf(stderr, "pinshm-mpi: rank %d: inbound queue failed: %s (%s)\n", pm.world_rank,
				pinshm_strerror(rc), pinshm_channel_error(pm.in));
			PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_OTHER);
			break;
		}
		take_message(&m);
	}
	return did;
}

/* ---- progress and waiting -------------------------------------------------------- */

int pm_progress(void)
{
	if (!pm.active || pm.in_progress)
		return 0;
	pm.in_progress = 1;
	int did = drain_inbound(PINSHM_NONBLOCK);
	if (pm.busy_peers)
		did += push_busy();
	if (pm.hybrid.head || pm.remote.head)
		did += pm_poll_remote();
	if (pm_coll_nb_pending)
		did += pm_coll_nb_progress();
	pm.in_progress = 0;
	return did;
}

/* Whether a record may be awaited: some operation under way (a send not
 * done, a receive posted or taking DATA), a record waiting for room, a
 * request of the library watched, a nonblocking collective, a blocking call
 * of the plugin waiting, or a record taken and not released yet.  Read at
 * every pass of the library's loop: one OR of them all, without a branch
 * for each. */
static inline bool expecting(void)
{
	uintptr_t lists = (uintptr_t)pm.watch | (uintptr_t)pm.direct | (uintptr_t)pm.hybrid.head |
			  (uintptr_t)pm.remote.head;
	unsigned counts = pm.sends_inflight | pm.posted | pm.streaming | pm.busy_peers | pm_coll_nb_pending |
			  (unsigned)holding_last;
	return (lists | counts) != 0;
}

#define IDLE_LOOK 64u /* passes of the library's loop between two looks while nothing is awaited */

int pm_progress_hook(void)
{
	static unsigned skipped;
	if (!pm.active)
		return 0;
	if (!expecting() && ++skipped < IDLE_LOOK)
		return 0;
	skipped = 0;
	return pm_progress();
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool any_busy(void)
{
	return pm.busy_peers != 0;
}

/* Whether only a record can end a wait that @p may_sleep: nothing queued
 * to write, no receive the MPI library may match, no progress call under
 * way, no nonblocking collective to move. */
static bool only_record_ends_wait(bool may_sleep)
{
	return may_sleep && !any_busy() && !pm.hybrid.head && !pm.remote.head && !pm.in_progress &&
	       !pm_coll_nb_pending;
}

/*
 * Waiting, where only a record can end the wait and ranks do not outnumber
 * cores: in the ring itself (below).  Otherwise: poll for spin_ns, then
 * yield the core for yield_ns (other ranks
 * may need it: ranks can outnumber cores; with spin_ns 0 every fruitless
 * pass yields, as Open MPI's own loop does then), then sleep on the inbound
 * queue's futex 1 ms at a time when only a record can end the wait, else
 * nap 50 us.  The MPI library gets a progress call every 64 polls and at
 * every yield or sleep.  *idle counts fruitless passes; 0 restarts.
 */
void pm_idle(unsigned *idle, bool may_sleep)
{
	static uint64_t since;
	if (pm.cfg.spin_ns && only_record_ends_wait(may_sleep)) {
		/* Only a record can end this wait: the ring waits for it, polling
		 * its lanes tightly for spin_ns (the first time), then yielding,
		 * then asleep, 1 ms at a time between calls to the library. */
		pinshm_channel_set_spin(pm.in, *idle == 0 ? pm.cfg.spin_ns : 0);
		(*idle)++;
		pm.in_progress = 1;
		int did = drain_inbound(1);
		pm.in_progress = 0;
		if (did)
			*idle = 0;
		else
			pm_mpi_progress();
		return;
	}
	if (*idle == 0)
		since = now_ns();
	(*idle)++;
	if ((*idle & 63) == 0)
		pm_mpi_progress();
	if (pm.cfg.spin_ns && (*idle < 16 || (*idle & 15) != 0))
		return; /* polling: look at the clock every 16 passes */
	uint64_t waited = now_ns() - since;
	if (waited < pm.cfg.spin_ns)
		return;
	if (waited < pm.cfg.spin_ns + pm.cfg.yield_ns) {
		sched_yield(); /* the library progresses every 64 passes (above) */
		return;
	}
	if (only_record_ends_wait(may_sleep)) {
		pm.in_progress = 1;
		int did = drain_inbound(1);
		pm.in_progress = 0;
		if (did)
			*idle = 0;
	} else {
		struct timespec nap = {0, 50000};
		nanosleep(&nap, NULL);
	}
	pm_mpi_progress();
}

void pm_wait_op(struct pm_op *op)
{
	unsigned idle = 0;
	struct pm_op *outer = pm.watch;
	pm.watch = op;
	while (!wait_over(op)) {
		if (op->kind == OP_COLL && pm_coll_nb_look())
			continue;
		if (pm_progress())
			idle = 0;
		else
			pm_idle(&idle, true);
	}
	pm.watch = outer;
}

const struct pm_op *pm_recv_direct(struct pm_comm *c, int source, int tag, void *data, size_t bytes,
				   enum pm_family family)
{
	/* Set field by field, not cleared whole: this is the hot path of
	 * MPI_Recv, and clearing the op costs more than the rest of it. */
	static struct pm_op op = {
		.kind = OP_RECV, .handle = MPI_REQUEST_NULL, .fortran = MPI_REQUEST_NULL, .contiguous = true};
	op.comm = c;
	op.peer = source;
	op.tag = tag;
	op.data = data;
	op.bytes = bytes;
	op.family = (uint8_t)family;
	op.counted = false;
	op.st_error = MPI_SUCCESS;
	op.state = ST_POSTED;
	pm.direct = &op;
	pm.direct_missed = false;
	pm_wait_op(&op);
	pm.direct = NULL;
	return op.state == ST_DONE ? &op : NULL;
}
