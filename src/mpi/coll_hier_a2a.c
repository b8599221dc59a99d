/*
 * coll_hier_a2a.c - MPI_Alltoall and MPI_Alltoallv on a communicator that
 * spans nodes, with the layout of coll_hier.c: each node gathers its
 * ranks' blocks at its leader, the leaders exchange them with the MPI
 * library's Alltoallv, and each leader scatters what its node receives.
 *
 * Every rank packs the blocks it sends (block d for rank d, in rank
 * order) and has room for those it receives (block r from rank r).  The
 * steps, at every rank of the communicator alike:
 *   1. each node gathers at its leader every rank's table: the bytes it
 *      sends to each rank and the room it has for each rank's block (two
 *      numbers a rank of the communicator, one node step, coll_gather_bytes());
 *   2. each node gathers its ranks' packed blocks at its leader (coll_vbytes(),
 *      each rank's length from its own table);
 *   3. the leaders' PMPI_Alltoallv of the senders' lengths, for each node
 *      pair (sender in its node's order, then receiver in the other's),
 *      then the blocks themselves point to point (leaders_exchange(), in
 *      pieces of at most INT_MAX bytes), node j's in that order; a
 *      leader's counts come from those lengths, so a block is never taken
 *      short nor long between the leaders;
 *   4. each leader lays its node's received blocks out per receiving rank:
 *      the length each was sent (n numbers), then block r at the room the
 *      rank gave for rank r (cut there where longer), and scatters them in
 *      the node (coll_vbytes()); a receiver unpacks min(length, room) of
 *      each block, so that nothing is written past what was sent, and
 *      returns MPI_ERR_TRUNCATE where a length passed its room, as the
 *      library would.
 * A death on another node (coll_hier.c): the leaders' exchange of the
 * lengths carries each leader's status (one number more for each pair of
 * nodes), and each rank's piece in step 4 the status its leader learnt
 * (in its head, after the lengths): no step more.
 * The lengths are exchanged rather than taken as equal so that an
 * erroneous call whose signatures differ (a count larger at the sender)
 * ends with MPI_ERR_TRUNCATE where a receiver's room is short, never with
 * bytes past a buffer or a hang.
 *
 * Whether a call is carried so depends only on the communicator (its
 * layout, hier_v_carried()) and for Alltoall on the receive block's length
 * (the same at every rank): a leader's bytes must fit the library's int
 * counts (else the library takes it whole, at every rank).  An Alltoallv's
 * lengths are known only where they are given, so its leaders move the
 * blocks point to point in pieces of at most INT_MAX bytes, whatever
 * their sum.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "coll_hier.h"

static void *zalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		hier_no_memory();
	return p;
}

/* This rank's side of a call: its blocks packed, their lengths. */
struct a2a {
	uint64_t *tab;  /* [0, n): bytes sent to rank d; [n, 2n): room for rank r's block */
	char *out;      /* the packed blocks sent, in rank order */
	char *in;       /* the lengths sent to it (n numbers), then the room for the blocks received, in rank order */
	uint64_t stot, rtot;
	int rc;         /* this rank's own first error */
};

/* A piece's head: the n lengths sent a rank, and the status. */
#define A2A_HEAD(n) (((uint64_t)(n) + 1) * sizeof(uint64_t))

static void keep(int *rc, int e)
{
	if (e != MPI_SUCCESS && *rc == MPI_SUCCESS)
		*rc = e;
}

/* The leaders' exchange of the blocks: @p bs[j] bytes of @p L from
 * @p bsd[j] to leader j, @p br[j] bytes into @p X at @p brd[j] from it, point
 * to point in pieces of at most pm.cfg.piece bytes (INT_MAX: an
 * Alltoallv's int counts would cap the sum; both ends derive a pair's
 * length from the same exchanged lengths, so they agree on its pieces). */
static int leaders_exchange(const struct pm_hier *h, const char *L, const uint64_t *bs, const uint64_t *bsd, char *X,
			    const uint64_t *br, const uint64_t *brd)
{
	uint64_t piece = pm.cfg.piece;
	size_t most = 0, k = 0;

	for (int j = 0; j < h->nnodes; j++)
		most += (bs[j] + piece - 1) / piece + (br[j] + piece - 1) / piece;
	MPI_Request *req = zalloc(most, sizeof(MPI_Request));
	int rc = MPI_SUCCESS;

	for (size_t i = 0; i < most; i++)
		req[i] = MPI_REQUEST_NULL;
	for (int j = 0; j < h->nnodes; j++)
		for (uint64_t at = 0; at < br[j]; at += piece)
			rc = first(rc, PMPI_Irecv(X + brd[j] + at, (int)(br[j] - at < piece ? br[j] - at : piece), MPI_BYTE,
						  j, 0, h->leaders, &req[k++]));
	for (int j = 0; j < h->nnodes; j++)
		for (uint64_t at = 0; at < bs[j]; at += piece)
			rc = first(rc, PMPI_Isend(L + bsd[j] + at, (int)(bs[j] - at < piece ? bs[j] - at : piece), MPI_BYTE,
						  j, 0, h->leaders, &req[k++]));
	/* Open MPI's MPI_Waitall returns as soon as a request fails (or had
	 * failed), leaving the others pending and the failed ones allocated:
	 * each is waited for, so that none writes into X or reads L once
	 * freed, and a failed one freed; the call returns the first request's
	 * own error rather than MPI_ERR_IN_STATUS. */
	int w = PMPI_Waitall((int)k, req, MPI_STATUSES_IGNORE);
	for (size_t i = 0; w != MPI_SUCCESS && i < k; i++) {
		if (req[i] == MPI_REQUEST_NULL)
			continue;
		rc = first(rc, PMPI_Wait(&req[i], MPI_STATUS_IGNORE));
		if (req[i] != MPI_REQUEST_NULL)
			PMPI_Request_free(&req[i]);
	}
	rc = first(rc, w == MPI_ERR_IN_STATUS ? MPI_ERR_OTHER : w);
	free(req);
	return rc;
}

/* The leader's part between the node steps.  @p tabs: its node's tables
 * (local rank k's bytes to every rank at k * 2n, its room for every rank's
 * block at k * 2n + n); @p G: its node's packed blocks, local rank k's
 * from @p goff[k].  @return in *@p O the pieces per local rank (@p olen[k]
 * bytes each, in local order) and the leaders' first error. */
static int leaders_phase(const struct pm_hier *h, const uint64_t *tabs, const char *G, const uint64_t *goff,
			 char **O, uint64_t *olen, bool failed, MPI_Comm comm)
{
	int n = h->size, me = h->my_node, nn = h->node_size[me], nodes = h->nnodes, rc = MPI_SUCCESS;
	int *scnt = zalloc((size_t)nodes, sizeof(int)), *sdsp = zalloc((size_t)nodes, sizeof(int));
	int *rcnt = zalloc((size_t)nodes, sizeof(int)), *rdsp = zalloc((size_t)nodes, sizeof(int));
	/* 3a: the senders' lengths, node j's pairs (k here, d of node j),
	 * then this node's status (its phase failed). */
	uint64_t *slens = zalloc((size_t)nn * (size_t)n + (size_t)nodes, sizeof(uint64_t));
	uint64_t *rlens = zalloc((size_t)nn * (size_t)n + (size_t)nodes, sizeof(uint64_t));
	for (int j = 0, at = 0; j < nodes; j++) {
		sdsp[j] = rdsp[j] = at * (int)sizeof(uint64_t);
		scnt[j] = rcnt[j] = (nn * h->node_size[j] + 1) * (int)sizeof(uint64_t);
		at += nn * h->node_size[j] + 1;
	}
	/* slens: by node j, then k, then d of node j in order; the status. */
	uint64_t *p = slens;
	for (int j = 0; j < nodes; j++) {
		for (int k = 0; k < nn; k++)
			for (int d = 0; d < n; d++)
				if (h->node_of[d] == j)
					*p++ = tabs[(size_t)k * 2 * n + d];
		*p++ = failed;
	}
	rc = first(rc, PMPI_Alltoallv(slens, scnt, sdsp, MPI_BYTE, rlens, rcnt, rdsp, MPI_BYTE, h->leaders));
	/* rlens: by node i, then r of node i, then m here: what r sends m.
	 * 3b: the blocks, with counts from those lengths. */
	uint64_t *bs = zalloc((size_t)nodes, sizeof(uint64_t)), *bsd = zalloc((size_t)nodes, sizeof(uint64_t));
	uint64_t *br = zalloc((size_t)nodes, sizeof(uint64_t)), *brd = zalloc((size_t)nodes, sizeof(uint64_t));
	uint64_t sall = 0, rall = 0;
	p = slens;
	uint64_t *q = rlens;
	for (int j = 0; j < nodes; j++) {
		for (int x = 0; x < nn * h->node_size[j]; x++) {
			bs[j] += *p++;
			br[j] += *q++;
		}
		p++;
		/* node j's status: passed even where failed is set already
		 * (node j + 1's lengths follow it) */
		failed = *q++ != 0 || failed;
		bsd[j] = sall;
		brd[j] = rall;
		sall += bs[j];
		rall += br[j];
	}
	char *L = zalloc((size_t)sall, 1), *X = zalloc((size_t)rall, 1);
	for (int j = 0; j < nodes; j++) {
		char *w = L + bsd[j];
		for (int k = 0; bs[j] && k < nn; k++) {
			const uint64_t *row = tabs + (size_t)k * 2 * n;
			uint64_t off = goff[k];
			for (int d = 0; d < n; off += row[d++])
				if (h->node_of[d] == j) {
					memcpy(w, G + off, row[d]);
					w += row[d];
				}
		}
	}
	rc = first(rc, leaders_exchange(h, L, bs, bsd, X, br, brd));
	free(L);
	/* 4: local rank m's piece: the length of each block sent it, the
	 * status (some node's phase failed), then block r at its room's place. */
	uint64_t *ooff = zalloc((size_t)nn, sizeof(uint64_t)), total = 0, head = A2A_HEAD(n);
	for (int m = 0; m < nn; m++) {
		const uint64_t *room = tabs + (size_t)m * 2 * n + n;
		olen[m] = head;
		for (int r = 0; r < n; r++)
			olen[m] += room[r];
		ooff[m] = total;
		total += olen[m];
	}
	*O = zalloc((size_t)total, 1);
	/* at[m * n + r]: where block r goes in local rank m's piece. */
	uint64_t *at = zalloc((size_t)nn * (size_t)n, sizeof(uint64_t));
	for (int m = 0; m < nn; m++) {
		at[(size_t)m * n] = head;
		for (int r = 1; r < n; r++)
			at[(size_t)m * n + r] = at[(size_t)m * n + r - 1] + tabs[(size_t)m * 2 * n + n + r - 1];
	}
	q = rlens;
	for (int i = 0; i < nodes; i++, q++) { /* q++: past node i's status */
		const char *src = X + brd[i];
		for (int r = 0; r < n; r++) {
			if (h->node_of[r] != i)
				continue;
			for (int m = 0; m < nn; m++, q++) {
				uint64_t room = tabs[(size_t)m * 2 * n + n + r];
				memcpy(*O + ooff[m] + (uint64_t)r * sizeof(uint64_t), q, sizeof(uint64_t));
				memcpy(*O + ooff[m] + at[(size_t)m * n + r], src, (size_t)(*q < room ? *q : room));
				src += *q;
			}
		}
	}
	uint64_t st = failed || rc != MPI_SUCCESS;
	for (int m = 0; m < nn; m++)
		memcpy(*O + ooff[m] + (uint64_t)n * sizeof(uint64_t), &st, sizeof(st));
	free(at);
	free(X);
	free(ooff);
	free(slens);
	free(rlens);
	free(scnt);
	free(sdsp);
	free(rcnt);
	free(rdsp);
	free(bs);
	free(bsd);
	free(br);
	free(brd);
	return pm_comm_error(comm, rc);
}

/* The sum of the @p n numbers at @p v into *@p sum: false where it does
 * not fit in 64 bits. */
static bool sum_fits(const uint64_t *v, int n, uint64_t *sum)
{
	uint64_t s = 0;
	for (int i = 0; i < n; i++)
		if (__builtin_add_overflow(s, v[i], &s))
			return false;
	*sum = s;
	return true;
}

/*
 * A leader's look at its node's tables (@p tabs, as leaders_phase()
 * takes them): local rank k's sends into @p glen[k], their place in the
 * gathered blocks into @p goff[k].  The tables came through the area,
 * where any rank of the node can write: a table whose sends, or rooms
 * with the head of its piece, do not add up in 64 bits with the others'
 * (the buffers would be sized by a sum that wrapped, and filled at
 * offsets that did not) is taken as empty.  @return whether one was.
 */
static bool node_tables(const struct pm_hier *h, uint64_t *tabs, uint64_t *glen, uint64_t *goff)
{
	int n = h->size, nn = h->node_size[h->my_node];
	uint64_t gall = 0, oall = 0, sends, rooms, unused;
	bool bad = false;
	for (int k = 0; k < nn; k++) {
		uint64_t *row = tabs + (size_t)k * 2 * n;
		if (!sum_fits(row, n, &sends) || !sum_fits(row + n, n, &rooms) ||
		    __builtin_add_overflow(gall, sends, &unused) || rooms > UINT64_MAX - A2A_HEAD(n) ||
		    __builtin_add_overflow(oall, rooms + A2A_HEAD(n), &unused)) {
			memset(row, 0, 2 * (size_t)n * sizeof(*row));
			sends = rooms = 0;
			bad = true;
		}
		glen[k] = sends;
		goff[k] = gall;
		gall += sends;
		oall += rooms + A2A_HEAD(n);
	}
	return bad;
}

/* The call once every rank has its side @p a: @return the node's and
 * leaders' first error (reported), else this rank's own (reported). */
static int a2a_run(struct pm_hier *h, struct a2a *a, MPI_Comm comm)
{
	int n = h->size, nn = h->node_size[h->my_node];
	bool lead = is_leader(h);
	uint64_t *tabs = lead ? zalloc((size_t)nn * 2 * (size_t)n, sizeof(uint64_t)) : NULL;
	uint64_t *glen = lead ? zalloc((size_t)nn, sizeof(uint64_t)) : NULL;
	uint64_t *goff = lead ? zalloc((size_t)nn, sizeof(uint64_t)) : NULL;
	uint64_t *olen = lead ? zalloc((size_t)nn, sizeof(uint64_t)) : NULL;
	int sent = coll_gather_bytes(h->node, (char *)a->tab, (char *)tabs, 2 * (uint64_t)n * sizeof(uint64_t), 0);
	/* A table taken as empty fails the call at every rank (the status of
	 * step 4). */
	if (lead && node_tables(h, tabs, glen, goff))
		sent = first(sent, MPI_ERR_OTHER);
	uint64_t gall = lead && nn > 0 ? goff[nn - 1] + glen[nn - 1] : 0;
	char *G = lead ? zalloc((size_t)gall, 1) : NULL, *O = NULL;
	sent = first(sent, coll_vbytes(h->node, true, a->out, a->stot, G, glen, comm));
	if (lead)
		sent = first(sent, leaders_phase(h, tabs, G, goff, &O, olen, sent != MPI_SUCCESS, comm));
	free(G);
	sent = first(sent, coll_vbytes(h->node, false, a->in, a->rtot, O, olen, comm));
	free(O);
	free(tabs);
	free(glen);
	free(goff);
	free(olen);
	return sent;
}

/* Block @p i of a side: @p counts[i] items (or @p count) at item
 * @p displs[i] (or i * @p count) of @p buf. */
static void *block_at(const void *buf, const int *displs, int count, MPI_Aint extent, int i)
{
	MPI_Aint d = displs ? (MPI_Aint)displs[i] : (MPI_Aint)i * count;
	return (void *)((uintptr_t)buf + (uintptr_t)(d * extent));
}

/* This rank's side: the blocks it sends (@p sbuf ...) packed, its room
 * for the blocks it receives (@p rbuf ...); in place: it sends from its
 * receive blocks, packed before any is received. */
static void a2a_side(struct a2a *a, int n, const void *sbuf, const int *scounts, const int *sdispls, int scount,
		     MPI_Datatype stype, const void *rbuf, const int *rcounts, const int *rdispls, int rcount,
		     MPI_Datatype rtype)
{
	const struct pm_type *t;
	a->tab = zalloc(2 * (size_t)n, sizeof(uint64_t));
	uint64_t ssize = 0, rsize = 0;
	MPI_Aint sext = 0;
	if ((t = pm_type_info(rtype))) {
		rsize = (uint64_t)t->size;
	} else {
		keep(&a->rc, MPI_ERR_TYPE);
	}
	if (sbuf == MPI_IN_PLACE) {
		sbuf = rbuf;
		scounts = rcounts;
		sdispls = rdispls;
		scount = rcount;
		stype = rtype;
	}
	if ((t = pm_type_info(stype))) {
		ssize = (uint64_t)t->size;
		sext = t->extent;
	} else {
		keep(&a->rc, MPI_ERR_TYPE);
	}
	for (int d = 0; d < n; d++) {
		int sc = scounts ? scounts[d] : scount, rc = rcounts ? rcounts[d] : rcount;
		if (sc < 0 || rc < 0)
			keep(&a->rc, MPI_ERR_COUNT);
		a->tab[d] = sc > 0 ? (uint64_t)sc * ssize : 0;
		a->tab[n + d] = rc > 0 ? (uint64_t)rc * rsize : 0;
		a->stot += a->tab[d];
		a->rtot += a->tab[n + d];
	}
	a->rtot += A2A_HEAD(n); /* the lengths sent it, the status */
	a->out = zalloc((size_t)a->stot, 1);
	a->in = zalloc((size_t)a->rtot, 1);
	uint64_t off = 0;
	for (int d = 0; d < n; off += a->tab[d++]) {
		if (!a->tab[d])
			continue;
		int e = pm_pack(block_at(sbuf, sdispls, scount, sext, d), scounts ? scounts[d] : scount, stype,
				a->out + off, a->tab[d]);
		if (e != MPI_SUCCESS) { /* sent as zeros of its length: the others' steps go on */
			keep(&a->rc, e);
			memset(a->out + off, 0, a->tab[d]);
		}
	}
}

/* The received blocks to their places: what was sent of each, at most
 * its room (the lengths are the leader's word: they bound only that). */
static void a2a_unpack(struct a2a *a, int n, void *rbuf, const int *rcounts, const int *rdispls, int rcount,
		       MPI_Datatype rtype)
{
	const struct pm_type *t = pm_type_info(rtype);
	if (!t)
		return;
	MPI_Aint ext = t->extent;
	uint64_t off = A2A_HEAD(n);
	for (int r = 0; r < n; off += a->tab[n + r++]) {
		uint64_t len, room = a->tab[n + r];
		memcpy(&len, a->in + (size_t)r * sizeof(uint64_t), sizeof(len));
		if (len > room)
			keep(&a->rc, MPI_ERR_TRUNCATE);
		if (len && room)
			keep(&a->rc, pm_unpack(a->in + off, len < room ? len : room,
					       block_at(rbuf, rdispls, rcount, ext, r), rcounts ? rcounts[r] : rcount,
					       rtype));
	}
}

static int a2a_call(struct pm_hier *h, const void *sbuf, const int *scounts, const int *sdispls, int scount,
		    MPI_Datatype stype, void *rbuf, const int *rcounts, const int *rdispls, int rcount,
		    MPI_Datatype rtype, MPI_Comm comm, enum coll_call call)
{
	struct a2a a = {.rc = MPI_SUCCESS};
	a2a_side(&a, h->size, sbuf, scounts, sdispls, scount, stype, rbuf, rcounts, rdispls, rcount, rtype);
	coll_count(call, true, a.stot);
	int sent = a2a_run(h, &a, comm);
	uint64_t st = 1;
	if (sent == MPI_SUCCESS)
		memcpy(&st, a.in + (size_t)h->size * sizeof(uint64_t), sizeof(st));
	sent = hier_status_end(h, comm, sent, st != 0);
	/* A block longer than its room: what fits is unpacked all the same,
	 * as the library leaves it, and the error is MPI_ERR_TRUNCATE. */
	if (a.rc == MPI_SUCCESS && sent == MPI_SUCCESS)
		a2a_unpack(&a, h->size, rbuf, rcounts, rdispls, rcount, rtype);
	free(a.tab);
	free(a.out);
	free(a.in);
	return first(sent, pm_comm_error(comm, a.rc));
}

static int alltoall_call(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount,
			 MPI_Datatype rtype, MPI_Comm comm)
{
	struct pm_hier *h = hier_get(&comm);
	const struct pm_type *t = h && hier_v_carried(h) && rcount >= 0 ? pm_type_info(rtype) : NULL;
	/* A leader moves its node's blocks to and from every rank. */
	if (!t || (uint64_t)t->size * (uint64_t)rcount > INT_MAX / ((uint64_t)h->size * (uint64_t)h->most))
		return -1;
	if (t->size == 0 || rcount == 0) {
		coll_count(CALL_ALLTOALL, true, 0);
		return MPI_SUCCESS;
	}
	return a2a_call(h, sendbuf, NULL, NULL, scount, stype, recvbuf, NULL, NULL, rcount, rtype, comm,
			CALL_ALLTOALL);
}

int hier_alltoall(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount,
		  MPI_Datatype rtype, MPI_Comm comm)
{
	struct pm_hier *outer = hier_current;
	return hier_done(outer, alltoall_call(sendbuf, scount, stype, recvbuf, rcount, rtype, comm));
}

static int alltoallv_call(const void *sendbuf, const int *scounts, const int *sdispls, MPI_Datatype stype,
			  void *recvbuf, const int *rcounts, const int *rdispls, MPI_Datatype rtype, MPI_Comm comm)
{
	struct pm_hier *h = hier_get(&comm);
	if (!h || !hier_v_carried(h))
		return -1;
	return a2a_call(h, sendbuf, scounts, sdispls, 0, stype, recvbuf, rcounts, rdispls, 0, rtype, comm,
			CALL_ALLTOALLV);
}

int hier_alltoallv(const void *sendbuf, const int *scounts, const int *sdispls, MPI_Datatype stype, void *recvbuf,
		   const int *rcounts, const int *rdispls, MPI_Datatype rtype, MPI_Comm comm)
{
	struct pm_hier *outer = hier_current;
	return hier_done(outer, alltoallv_call(sendbuf, scounts, sdispls, stype, recvbuf, rcounts, rdispls, rtype, comm));
}
