/*
 * coll_vops.c - MPI_Gatherv, MPI_Scatterv, MPI_Allgatherv and
 * MPI_Alltoallv through a communicator's area (coll.h).
 *
 * The counts of a v variant are known where they are given (the root's
 * arrays, each rank's own count), so nothing is decided from them before
 * the call's first step: whether a call is carried depends only on the
 * communicator (pm_coll_for(), and its size: a half holds one 64-byte
 * piece per rank) and the root, the same at every rank.
 *
 * Step one, the table: every rank posts the packed bytes it sends, one
 * number (Gatherv, Allgatherv: its one block, which every reader shares)
 * or n (Scatterv, Alltoallv: one per destination; zeros at Scatterv's
 * other ranks), and reads every rank's.  The steps that follow, as many
 * as the longest block needs (the same number at every rank), each move
 * a piece of every block: a half's worth of a shared block, or a 1/n of a
 * half (rounded down to 64 bytes) per destination; a rank copies out the
 * pieces it receives.  A rank's block to itself is copied directly, or
 * not at all in place.  Non-contiguous datatypes are packed by the sender
 * and unpacked by the receiver, so the ranks' datatypes need only match in
 * signature.  A receiver takes at most its room (more: MPI_ERR_TRUNCATE
 * there); an error in a rank's own arguments (a datatype, a count) makes
 * it post nothing and return the error after the same steps as the
 * others.  The table is other ranks' word: it bounds only how much is
 * copied from their halves, never past a piece or the reader's room.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_red.h"

/* Contiguous bytes of one block: the user's, or a packed copy. */
struct view {
	char *data;
	uint64_t bytes; /* send: its bytes; receive: room */
	void *tmp;      /* the packed copy, or NULL */
	bool want;      /* receive: this rank takes the block */
	void *buf;      /* receive into tmp: where it is unpacked */
	int count;
	MPI_Datatype type;
};

/* One call: the blocks this rank sends (shared: out[0] alone) and
 * receives (in[r] from rank r), what the table says it is sent (from). */
struct vx {
	bool shared;
	struct view *out, *in;
	uint64_t *from;
	int rc; /* the first error of this rank */
};

static void keep(int *rc, int e)
{
	if (e != MPI_SUCCESS && *rc == MPI_SUCCESS)
		*rc = e;
}

static void out_of_memory(void)
{
	fprintf(stderr, "pinshm-mpi: out of memory\n");
	PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
}

static void *room(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	if (!p)
		out_of_memory();
	return p;
}

/* The item @p disp items of @p type into @p buf (NULL where no type). */
static void *item_at(const void *buf, MPI_Datatype type, int disp)
{
	const struct pm_type *t = pm_type_info(type);
	return t ? (void *)((uintptr_t)buf + (uintptr_t)(t->extent * (MPI_Aint)disp)) : NULL;
}

/* @p count items of @p type at @p buf to send (a copy where @p copy). */
static void view_out(struct view *v, const void *buf, int count, MPI_Datatype type, bool copy, int *rc)
{
	const struct pm_type *t = pm_type_info(type);
	if (!t || count < 0) {
		keep(rc, t ? MPI_ERR_COUNT : MPI_ERR_TYPE);
		return;
	}
	uint64_t bytes = (uint64_t)t->size * (uint64_t)count;
	size_t flat;
	const void *p = bytes ? pm_flat_data(buf, count, type, &flat) : NULL;
	if (bytes == 0 || (p && !copy)) {
		v->data = (char *)(uintptr_t)p;
		v->bytes = bytes;
		return;
	}
	v->tmp = room(bytes);
	int e = MPI_SUCCESS;
	if (p)
		memcpy(v->tmp, p, bytes);
	else
		e = pm_pack(buf, count, type, v->tmp, bytes);
	keep(rc, e);
	v->data = v->tmp;
	v->bytes = e == MPI_SUCCESS ? bytes : 0;
}

/* Room for @p count items of @p type at @p buf to receive. */
static void view_in(struct view *v, void *buf, int count, MPI_Datatype type, int *rc)
{
	const struct pm_type *t = pm_type_info(type);
	if (!t || count < 0) {
		keep(rc, t ? MPI_ERR_COUNT : MPI_ERR_TYPE);
		return;
	}
	v->want = true;
	v->bytes = (uint64_t)t->size * (uint64_t)count;
	size_t flat;
	const void *p = v->bytes ? pm_flat_data(buf, count, type, &flat) : NULL;
	if (p || v->bytes == 0) {
		v->data = (char *)(uintptr_t)p;
		return;
	}
	v->data = v->tmp = room(v->bytes);
	v->buf = buf;
	v->count = count;
	v->type = type;
}

static bool vx_init(struct vx *x, const struct pm_coll *co, bool shared)
{
	size_t n = (size_t)co->size;
	x->shared = shared;
	x->rc = MPI_SUCCESS;
	x->out = calloc(shared ? 1 : n, sizeof(*x->out));
	x->in = calloc(n, sizeof(*x->in));
	x->from = calloc(n, sizeof(*x->from));
	return x->out && x->in && x->from;
}

/* The table's step: @return the longest block any rank sends. */
static uint64_t vx_table(struct pm_coll *co, struct vx *x)
{
	int n = co->size, w = x->shared ? 1 : n;
	uint64_t s = ++co->step, most = 0;
	coll_wait_free(co, s);
	for (int d = 0; d < w; d++)
		memcpy(coll_half(co, co->rank, s) + (size_t)d * 8, &x->out[d].bytes, 8);
	coll_post(co, s);
	coll_wait_all(co, s);
	for (int r = 0; r < n; r++)
		for (int d = 0; d < w; d++) {
			uint64_t len;
			memcpy(&len, coll_half(co, r, s) + (size_t)d * 8, 8);
			if (d == (x->shared ? 0 : co->rank))
				x->from[r] = len;
			most = len > most ? len : most;
		}
	coll_finish(co, s);
	/* A wait that failed (a dead member) read no table: no steps. */
	return coll_error(co) == MPI_SUCCESS ? most : 0;
}

/* The steps that move every block, a piece of each a step. */
static void vx_steps(struct pm_coll *co, struct vx *x, uint64_t most)
{
	int n = co->size, me = co->rank, w = x->shared ? 1 : n;
	size_t piece = x->shared ? co->half_bytes : (co->half_bytes / (size_t)n) & ~(size_t)63;
	for (uint64_t off = 0; off < most; off += piece) {
		uint64_t s = ++co->step;
		bool waited = false;
		for (int d = 0; d < w; d++) {
			const struct view *v = &x->out[d];
			if (off >= v->bytes || (!x->shared && d == me))
				continue;
			if (!waited)
				coll_wait_free(co, s);
			waited = true;
			size_t len = v->bytes - off < piece ? (size_t)(v->bytes - off) : piece;
			coll_copy_in(coll_half(co, me, s) + (size_t)d * piece, v->data + off, len, coll_streams(co, len));
		}
		coll_post(co, s);
		for (int r = 0; r < n; r++) {
			struct view *v = &x->in[r];
			if (!v->want || r == me || off >= x->from[r] || off >= v->bytes)
				continue;
			uint64_t len = x->from[r] - off < piece ? x->from[r] - off : piece;
			if (len > v->bytes - off)
				len = v->bytes - off;
			coll_wait_arrive(co, r, s);
			memcpy(v->data + off, coll_half(co, r, s) + (x->shared ? 0 : (size_t)me * piece), (size_t)len);
		}
		coll_finish(co, s);
	}
}

/* The whole call, once the views are set: table, steps, this rank's own
 * block, the blocks unpacked.  Frees what @p x holds; @return this rank's
 * first error. */
static int vx_move(struct pm_coll *co, struct vx *x)
{
	int n = co->size, me = co->rank;
	const struct view *own = x->shared ? &x->out[0] : &x->out[me];
	if (n > 1)
		vx_steps(co, x, vx_table(co, x));
	/* Its own block's length is its own, not what the table in the area
	 * says (which another rank can write). */
	x->from[me] = own->bytes;
	for (int r = 0; r < n; r++) {
		struct view *v = &x->in[r];
		if (!v->want)
			continue;
		uint64_t got = x->from[r] < v->bytes ? x->from[r] : v->bytes;
		if (x->from[r] > v->bytes)
			keep(&x->rc, MPI_ERR_TRUNCATE);
		if (r == me && got)
			memmove(v->data, own->data, (size_t)got);
		if (v->tmp && got)
			keep(&x->rc, pm_unpack(v->tmp, got, v->buf, v->count, v->type));
	}
	for (int d = 0; d < (x->shared ? 1 : n); d++)
		free(x->out[d].tmp);
	for (int r = 0; r < n; r++)
		free(x->in[r].tmp);
	int rc = x->rc;
	free(x->out);
	free(x->in);
	free(x->from);
	return rc;
}

static int vx_run(struct pm_coll *co, struct vx *x, MPI_Comm comm, enum coll_call call)
{
	uint64_t sent = 0;
	for (int d = 0; d < (x->shared ? 1 : co->size); d++)
		sent += x->out[d].bytes;
	coll_count(call, true, sent);
	return coll_result(co, comm, vx_move(co, x));
}

int coll_vbytes(struct pm_coll *co, bool gather, char *mine, uint64_t bytes, char *all, const uint64_t *lens,
		MPI_Comm comm)
{
	struct vx x;
	if (!vx_init(&x, co, gather))
		out_of_memory();
	uint64_t off = 0;
	for (int r = 0; co->rank == 0 && r < co->size; off += lens[r++]) {
		struct view *v = gather ? &x.in[r] : &x.out[r];
		v->data = all + off;
		v->bytes = lens[r];
		v->want = gather;
	}
	struct view *own = gather ? &x.out[0] : &x.in[0];
	if (gather || mine) {
		own->data = mine;
		own->bytes = bytes;
		own->want = !gather;
	}
	return coll_result(co, comm, vx_move(co, &x));
}

/* The area of @p comm for a v variant with @p root (0 for those without
 * one), set up in @p x, or NULL where the library takes the call (counted). */
static struct pm_coll *vx_route(MPI_Comm comm, int root, bool shared, struct vx *x, enum coll_call call)
{
	struct pm_coll *co = pm_coll_for(comm);
	if (!co || root < 0 || root >= co->size || (co->size > 1 && co->half_bytes / (size_t)co->size < 64)) {
		coll_count(call, false, 0);
		return NULL;
	}
	if (!vx_init(x, co, shared))
		out_of_memory();
	return co;
}

int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
		const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm)
{
	int rc = root < 0 ? -1 : hier_gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
					      comm);
	if (rc >= 0)
		return rc;
	struct vx x;
	struct pm_coll *co = vx_route(comm, root, true, &x, CALL_GATHERV);
	if (!co)
		return PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
	bool is_root = co->rank == root, in_place = is_root && sendbuf == MPI_IN_PLACE;
	if (!in_place)
		view_out(&x.out[0], sendbuf, sendcount, sendtype, false, &x.rc);
	for (int r = 0; is_root && r < co->size; r++)
		if (r != root || !in_place)
			view_in(&x.in[r], item_at(recvbuf, recvtype, displs[r]), recvcounts[r], recvtype, &x.rc);
	return vx_run(co, &x, comm, CALL_GATHERV);
}

int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype,
		 void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
	int rc = hier_scatter(sendbuf, true, sendcounts, displs, 0, sendtype, recvbuf, recvcount, recvtype, root, comm);
	if (rc >= 0)
		return rc;
	struct vx x;
	struct pm_coll *co = vx_route(comm, root, false, &x, CALL_SCATTERV);
	if (!co)
		return PMPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
	bool is_root = co->rank == root, in_place = is_root && recvbuf == MPI_IN_PLACE;
	for (int d = 0; is_root && d < co->size; d++)
		if (d != root || !in_place)
			view_out(&x.out[d], item_at(sendbuf, sendtype, displs[d]), sendcounts[d], sendtype, false, &x.rc);
	if (!in_place)
		view_in(&x.in[root], recvbuf, recvcount, recvtype, &x.rc);
	return vx_run(co, &x, comm, CALL_SCATTERV);
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
		   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm)
{
	int rc = hier_gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, -1, comm);
	if (rc >= 0)
		return rc;
	struct vx x;
	struct pm_coll *co = vx_route(comm, 0, true, &x, CALL_ALLGATHERV);
	if (!co)
		return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
	int me = co->rank;
	bool in_place = sendbuf == MPI_IN_PLACE; /* this rank's own: its block is in recvbuf already */
	if (in_place)
		view_out(&x.out[0], item_at(recvbuf, recvtype, displs[me]), recvcounts[me], recvtype, false, &x.rc);
	else
		view_out(&x.out[0], sendbuf, sendcount, sendtype, false, &x.rc);
	for (int r = 0; r < co->size; r++)
		if (r != me || !in_place)
			view_in(&x.in[r], item_at(recvbuf, recvtype, displs[r]), recvcounts[r], recvtype, &x.rc);
	return vx_run(co, &x, comm, CALL_ALLGATHERV);
}

int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
		  void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)
{
	int rc = hier_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
	if (rc >= 0)
		return rc;
	struct vx x;
	struct pm_coll *co = vx_route(comm, 0, false, &x, CALL_ALLTOALLV);
	if (!co)
		return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
				      comm);
	/* In place: the blocks to send are copied out of recvbuf before any is received. */
	bool in_place = sendbuf == MPI_IN_PLACE;
	for (int d = 0; d < co->size; d++) {
		if (in_place)
			view_out(&x.out[d], item_at(recvbuf, recvtype, rdispls[d]), recvcounts[d], recvtype, true,
				 &x.rc);
		else
			view_out(&x.out[d], item_at(sendbuf, sendtype, sdispls[d]), sendcounts[d], sendtype, false,
				 &x.rc);
	}
	for (int r = 0; r < co->size; r++)
		view_in(&x.in[r], item_at(recvbuf, recvtype, rdispls[r]), recvcounts[r], recvtype, &x.rc);
	return vx_run(co, &x, comm, CALL_ALLTOALLV);
}
