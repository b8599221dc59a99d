/*
 * coll_scan.c - MPI_Reduce_scatter_block, MPI_Reduce_scatter, MPI_Scan and
 * MPI_Exscan through a communicator's area (coll.h), with the layout and
 * the fixed order of the reductions of coll_ops.c (coll_red.h).
 *
 * Each is carried where pm_coll_for() says so and its signature allows
 * (the operation, the type's size, the counts: MPI requires
 * Reduce_scatter's recvcounts to be the same at every rank), so every
 * rank takes the same path and the same steps; else the MPI library takes
 * the call at every rank.
 *
 * Reduce_scatter(_block): each rank's half is cut in n slots of a 1/n
 * of it (rounded down to 64 bytes); at each step every rank packs into
 * slot d the next chunk of its block d, and rank d unpacks slot d of every
 * half into its own layout and folds them.  The steps: as many as the
 * longest block needs.  In place, the step from element e0 writes this
 * rank's result over items [e0, e0 + k) of recvbuf, which this rank has
 * packed already: block d's items not yet packed start at its first item
 * plus e0 + k, further on.
 * Scan, Exscan: the elements in chunks that fit a half, a step each, as
 * MPI_Allreduce; rank r waits only for ranks 0..r and folds their chunks
 * (Exscan: 0..r-1; its rank 0's receive buffer is left as it is).
 * The order, for every operation, predefined or not:
 *   rank r's block:  x0 op (x1 op (... op x[n-1]))
 *   Scan at r:       x0 op (x1 op (... op x[r]))    (Exscan: up to x[r-1])
 * so every run with the same inputs and ranks gets the same bits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_red.h"

static inline void *at(const void *p, MPI_Aint d)
{
	return (void *)((uintptr_t)p + (uintptr_t)d);
}

static void keep(int *rc, int e)
{
	if (e != MPI_SUCCESS && *rc == MPI_SUCCESS)
		*rc = e;
}

/* This rank's rooms for a chunk of @p k elements (not dense: a local choice). */
static void red_rooms(struct red *r, int k)
{
	if (r->dense || k == 0)
		return;
	r->acc = malloc(red_span(r, k));
	r->x = malloc(red_span(r, k));
	if (!r->acc || !r->x) {
		fprintf(stderr, "pinshm-mpi: out of memory\n");
		PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
	}
}

/* Elements [@p e, @p e + @p k) of @p in, packed to @p dst in this rank's half. */
static int red_pack(const struct pm_coll *co, const struct red *r, const void *in, int64_t e, int k, void *dst)
{
	MPI_Aint off = (MPI_Aint)e * r->extent;
	uint64_t bytes = (uint64_t)k * r->size;
	if (r->dense) {
		coll_copy_in(dst, at(in, off + r->tlb), (size_t)bytes, coll_streams(co, bytes));
		return MPI_SUCCESS;
	}
	return pm_pack(at(in, off), k, r->type, dst, bytes);
}

/* Elements of a block of @p count from @p e0 that a chunk of @p per holds. */
static int chunk(int count, int64_t e0, int per)
{
	return count - e0 <= 0 ? 0 : count - e0 < per ? (int)(count - e0) : per;
}

/* ---- Reduce_scatter, Reduce_scatter_block ------------------------------ */

static int rs_steps(struct pm_coll *co, struct red *r, const char *in, char *out, const int *counts, size_t slot)
{
	int n = co->size, me = co->rank, rc = MPI_SUCCESS, most = 0;
	for (int d = 0; d < n; d++)
		most = counts[d] > most ? counts[d] : most;
	for (int64_t e0 = 0; e0 < most; e0 += r->per_chunk) {
		uint64_t s = ++co->step;
		coll_wait_free(co, s);
		int64_t first = 0; /* block d's first element */
		for (int d = 0; d < n; first += counts[d], d++) {
			int k = chunk(counts[d], e0, r->per_chunk);
			if (k > 0)
				keep(&rc, red_pack(co, r, in, first + e0, k, coll_half(co, me, s) + (size_t)d * slot));
		}
		coll_post(co, s);
		int k = chunk(counts[me], e0, r->per_chunk);
		if (k > 0) {
			coll_wait_all(co, s);
			keep(&rc, red_fold(co, r, s, k, at(out, (MPI_Aint)e0 * r->extent), 0, n, (size_t)me * slot));
		}
		coll_finish(co, s);
	}
	return rc;
}

/* Reduce_scatter (@p counts) or Reduce_scatter_block (@p counts NULL,
 * @p block each) through the area of @p comm, or -1 where the library
 * takes it. */
static int rs_call(const void *sendbuf, void *recvbuf, const int *counts, int block, MPI_Datatype type, MPI_Op op,
		   MPI_Comm comm, enum coll_call call)
{
	int hrc = hier_reduce_scatter(sendbuf, recvbuf, counts, block, type, op, comm, call);
	if (hrc >= 0)
		return hrc;
	struct pm_coll *co = pm_coll_for(comm);
	struct red r = {.op = op};
	size_t slot = co && co->size > 1 ? (co->half_bytes / (size_t)co->size) & ~(size_t)63 : SIZE_MAX;
	bool valid = co && op != MPI_OP_NULL && (counts || block >= 0);
	int64_t total = 0;
	for (int d = 0; valid && d < co->size; d++) {
		int c = counts ? counts[d] : block;
		valid = c >= 0;
		total += c;
	}
	if (!valid || slot == 0 || !red_layout(&r, type, slot)) {
		coll_count(call, false, 0);
		return -1;
	}
	int n = co->size, me = co->rank, *all = NULL;
	coll_count(call, true, (uint64_t)total * r.size);
	if (!counts) { /* the block variant as Reduce_scatter */
		all = malloc((size_t)n * sizeof(int));
		if (!all)
			return pm_comm_error(comm, MPI_ERR_NO_MEM);
		for (int d = 0; d < n; d++)
			all[d] = block;
		counts = all;
	}
	int rc = MPI_SUCCESS;
	const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	if (n == 1 && sendbuf != MPI_IN_PLACE && counts[0] > 0)
		rc = typed_copy(in, recvbuf, counts[0], type, (uint64_t)counts[0] * r.size);
	if (n > 1 && total > 0) {
		red_rooms(&r, counts[me] < r.per_chunk ? counts[me] : r.per_chunk);
		rc = rs_steps(co, &r, in, recvbuf, counts, slot);
	}
	free(r.acc);
	free(r.x);
	free(all);
	return coll_result(co, comm, rc);
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op,
			     MPI_Comm comm)
{
	int rc = rs_call(sendbuf, recvbuf, NULL, recvcount, datatype, op, comm, CALL_REDUCE_SCATTER_BLOCK);
	return rc >= 0 ? rc : PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype,
		       MPI_Op op, MPI_Comm comm)
{
	int rc = recvcounts ? rs_call(sendbuf, recvbuf, recvcounts, 0, datatype, op, comm, CALL_REDUCE_SCATTER) : -1;
	if (!recvcounts)
		coll_count(CALL_REDUCE_SCATTER, false, 0);
	return rc >= 0 ? rc : PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
}

/* ---- Scan, Exscan ------------------------------------------------------- */

static int scan_steps(struct pm_coll *co, struct red *r, const char *in, char *out, int count, bool ex)
{
	int rc = MPI_SUCCESS, hi = ex ? co->rank : co->rank + 1; /* fold ranks [0, hi) */
	for (int64_t e0 = 0; e0 < count; e0 += r->per_chunk) {
		int k = chunk(count, e0, r->per_chunk);
		uint64_t s = ++co->step;
		coll_wait_free(co, s);
		keep(&rc, red_pack(co, r, in, e0, k, coll_half(co, co->rank, s)));
		coll_post(co, s);
		if (hi > 0) {
			for (int q = 0; q < hi; q++)
				coll_wait_arrive(co, q, s);
			keep(&rc, red_fold(co, r, s, k, at(out, (MPI_Aint)e0 * r->extent), 0, hi, 0));
		}
		coll_finish(co, s);
	}
	return rc;
}

int coll_scan(struct pm_coll *co, const struct red *r_, const void *sendbuf, void *recvbuf, int count, bool ex,
	      MPI_Comm comm)
{
	struct red r = *r_;
	const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	if (count == 0 || (co->size == 1 && (ex || sendbuf == MPI_IN_PLACE)))
		return MPI_SUCCESS;
	if (co->size == 1)
		return pm_comm_error(comm, typed_copy(in, recvbuf, count, r.type, (uint64_t)count * r.size));
	red_rooms(&r, count < r.per_chunk ? count : r.per_chunk);
	int rc = scan_steps(co, &r, in, recvbuf, count, ex);
	free(r.acc);
	free(r.x);
	return coll_result(co, comm, rc);
}

/* Scan or Exscan (@p ex) through the area of @p comm, or -1 where the
 * library takes it. */
static int scan_call(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
		     bool ex)
{
	enum coll_call call = ex ? CALL_EXSCAN : CALL_SCAN;
	int rc = hier_scan(sendbuf, recvbuf, count, type, op, ex, comm);
	if (rc >= 0)
		return rc;
	struct pm_coll *co = pm_coll_for(comm);
	struct red r = {.op = op};
	if (!red_carried(co, &r, type, count, -1)) {
		coll_count(call, false, 0);
		return -1;
	}
	coll_count(call, true, (uint64_t)count * r.size);
	return coll_scan(co, &r, sendbuf, recvbuf, count, ex, comm);
}

int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
	int rc = scan_call(sendbuf, recvbuf, count, datatype, op, comm, false);
	return rc >= 0 ? rc : PMPI_Scan(sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
	int rc = scan_call(sendbuf, recvbuf, count, datatype, op, comm, true);
	return rc >= 0 ? rc : PMPI_Exscan(sendbuf, recvbuf, count, datatype, op, comm);
}
