/*
 * coll_ops.c - the collective calls carried through a communicator's area
 * (coll.h): MPI_Barrier, MPI_Bcast, MPI_Reduce, MPI_Allreduce, MPI_Gather,
 * MPI_Scatter, MPI_Allgather, MPI_Alltoall.
 *
 * Barrier, Bcast, Reduce, Allreduce, Gather, Scatter and Allgather offer the
 * call to coll_hier.c (a communicator that spans nodes) where pm_coll_for()
 * gives no area (coll_hier.c carries only communicators that have none,
 * so the order decides nothing, and a call with an area looks once).  Each passes the call to
 * the MPI library unchanged where pm_coll_for() says so, or where what must match at every rank is not valid (the root,
 * the count and type of the rank's own block or elements: the library
 * reports the error as it does), or where a reduction's element does not
 * fit a half (red_layout()); all of that is the same at every rank.  The
 * root's own arguments of Gather, Scatter decide nothing: an error there
 * is the root's, after the same steps as the others.
 *
 * Data of at most COLL_SMALL bytes in a step (what a rank posts: a
 * Bcast's message, a reduction's elements, a Gather's block, the n blocks
 * of a Scatter or of one rank's Alltoall) lies in the rank's small slot,
 * beside its flags, instead of its half: one line to fetch, not two (a
 * Bcast's message: BCAST_SMALL bytes, after the root's length).
 *
 * A rank's own block or chunk never goes through its half where no other
 * rank reads it (a Gather's or Reduce's root, a Scatter's root's own
 * block, an Alltoall's block to itself): it is taken from the user's
 * buffer; a reduction folds its own chunk straight from its input.
 *
 * Barrier: one step, every rank posts and waits for all.
 * Bcast: the message's bytes (packed, for a non-contiguous type) in pieces
 * of one half, a step each: the root writes, the others copy out.  The
 * first step carries the root's length at the head of its small slot (and
 * the message itself where it fits the rest, BCAST_SMALL bytes), and every
 * rank runs the steps of that length: a receiver whose count and type make
 * fewer bytes takes what fits and reports MPI_ERR_TRUNCATE, as Open MPI
 * does; one with more room takes the message (MPI wants the signatures
 * equal; Open MPI's tuned Bcast does not report a larger receive either).
 * Reduce, Allreduce: the elements in chunks whose packed bytes fit a half,
 * a step each (how many from the type's size and the count only: the ranks
 * may lay the same signature out differently): the ranks pack their chunk
 * into their half, and the root (Reduce) or every rank (Allreduce) unpacks
 * each into its own layout and reduces the n chunks with
 * PMPI_Reduce_local in one fixed order, from the highest rank down:
 *   result = x0 op (x1 op (... op (x[n-2] op x[n-1])))
 * for every operation, predefined or not, commutative or not (MPI takes
 * them as associative).  The same bytes in the same order at every rank:
 * every rank of an Allreduce gets the same bits, on every run.  Chunks of
 * a few elements of the common predefined types and operations go
 * through the plugin's own kernels instead (coll_kern.c): the same
 * operation in the same order, decided from the signature alone.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_red.h"

static void *out_of_memory(void)
{
	fprintf(stderr, "pinshm-mpi: out of memory\n");
	PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
	return NULL;
}

/* Where rank @p r's data of step @p s lies: its small slot (data of at
 * most COLL_SMALL bytes, decided from what matches at every rank) or its
 * half. */
static inline uint8_t *slot(const struct pm_coll *co, int r, uint64_t s, bool small)
{
	return small ? coll_small(co, r, s) : coll_half(co, r, s);
}

/* @p p moved by @p d bytes (an address computation only). */
static inline void *at(const void *p, MPI_Aint d)
{
	return (void *)((uintptr_t)p + (uintptr_t)d);
}

int coll_barrier(struct pm_coll *co)
{
	if (co->size > 1) {
		uint64_t s = ++co->step;
		coll_post(co, s);
		coll_wait_all(co, s);
		coll_finish(co, s);
	}
	return coll_error(co);
}

int MPI_Barrier(MPI_Comm comm)
{
	struct pm_coll *co = pm_coll_for(comm);
	int rc = co ? -1 : hier_barrier(comm);
	if (rc >= 0)
		return rc;
	coll_count(CALL_BARRIER, co != NULL, 0);
	return co ? coll_barrier(co) : PMPI_Barrier(comm);
}

/* ---- Bcast ------------------------------------------------------------ */

/* The root's length at a Bcast's first step, at the head of its small
 * slot; a message of at most BCAST_SMALL bytes follows it there. */
#define BCAST_HEAD sizeof(uint64_t)
#define BCAST_SMALL (COLL_SMALL - BCAST_HEAD)

static inline uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* @p bytes at @p data from @p root to rank @p to (every rank: @p to < 0),
 * a half at a time: every rank runs the steps of the root's length, read
 * at the first step (untrusted: it bounds nothing but the steps; a rank
 * copies at most its own @p bytes).  @return the root's length. */
static uint64_t bcast_bytes(struct pm_coll *co, char *data, uint64_t bytes, int root, int to)
{
	bool takes = co->rank != root && (to < 0 || co->rank == to);
	uint64_t s = ++co->step, total = bytes;
	uint8_t *head = coll_small(co, root, s);
	if (co->rank == root) {
		coll_wait_free(co, s);
		memcpy(head, &total, BCAST_HEAD);
	} else {
		coll_wait_arrive(co, root, s);
		memcpy(&total, head, BCAST_HEAD);
		if (coll_error(co) != MPI_SUCCESS)
			total = 0; /* one step, returning at once */
	}
	bool small = total <= BCAST_SMALL;
	for (uint64_t off = 0;; s = ++co->step) {
		size_t n = (size_t)min64(total - off, co->half_bytes);
		uint8_t *p = small ? head + BCAST_HEAD : coll_half(co, root, s);
		if (co->rank == root) {
			if (off > 0)
				coll_wait_free(co, s);
			if (n > 0)
				memcpy(p, data + off, n);
			coll_post(co, s);
		} else if (takes) {
			if (off > 0)
				coll_wait_arrive(co, root, s);
			if (off < bytes && n > 0)
				memcpy(data + off, p, (size_t)min64(n, bytes - off));
		}
		coll_finish(co, s);
		off += n;
		if (off >= total)
			return total;
	}
}

/* A receiver's error where the root sent more than its room (Open MPI's
 * tuned Bcast reports that; a larger room takes the message as is). */
static int bcast_fit(const struct pm_coll *co, int root, int to, uint64_t bytes, uint64_t total)
{
	bool takes = co->rank != root && (to < 0 || co->rank == to);
	return takes && total > bytes ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
}

int coll_bcast_to(struct pm_coll *co, void *buffer, int count, MPI_Datatype datatype, int root, int to,
		  MPI_Comm comm)
{
	const struct pm_type *t = pm_type_info(datatype);
	size_t size = t ? (size_t)t->size : 0;
	uint64_t bytes = (uint64_t)size * (uint64_t)count;
	if (co->size == 1)
		return MPI_SUCCESS;
	if (to >= 0 && co->rank != root && co->rank != to) { /* only the steps: no data here */
		bcast_bytes(co, NULL, 0, root, to);
		return coll_error(co);
	}
	size_t flat_bytes;
	char *data = bytes ? (char *)(uintptr_t)pm_flat_data(buffer, count, datatype, &flat_bytes) : NULL;
	if (data || bytes == 0)
		return coll_result(co, comm, bcast_fit(co, root, to, bytes, bcast_bytes(co, data, bytes, root, to)));
	/* Not contiguous here (other ranks may differ): packed. */
	char *tmp = malloc(bytes);
	if (!tmp)
		return out_of_memory(), MPI_ERR_NO_MEM;
	int rc = MPI_SUCCESS;
	if (co->rank == root)
		rc = pm_pack(buffer, count, datatype, tmp, bytes);
	uint64_t total = bcast_bytes(co, tmp, bytes, root, to);
	if (co->rank != root) { /* the whole items received */
		int k = total < bytes ? (int)(total / size) : count;
		rc = pm_unpack(tmp, (uint64_t)k * size, buffer, k, datatype);
		if (rc == MPI_SUCCESS)
			rc = bcast_fit(co, root, to, bytes, total);
	}
	free(tmp);
	return coll_result(co, comm, rc);
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
	struct pm_coll *co = pm_coll_for(comm);
	int rc = co ? -1 : hier_bcast(buffer, count, datatype, root, comm);
	if (rc >= 0)
		return rc;
	const struct pm_type *t = co ? pm_type_info(datatype) : NULL;
	if (!t || count < 0 || root < 0 || root >= co->size) {
		coll_count(CALL_BCAST, false, 0);
		return PMPI_Bcast(buffer, count, datatype, root, comm);
	}
	coll_count(CALL_BCAST, true, (uint64_t)t->size * (uint64_t)count);
	return coll_bcast_to(co, buffer, count, datatype, root, -1, comm);
}

/* ---- Reduce, Allreduce --------------------------------------------------- */

/* The reduction of @p type, or false where it is not carried (coll_red.h). */
bool red_layout(struct red *r, MPI_Datatype type, size_t half)
{
	const struct pm_type *t = pm_type_info(type);
	if (!t || t->size == 0 || (uint64_t)t->size > half)
		return false;
	r->type = type;
	r->size = (size_t)t->size;
	r->per_chunk = half / r->size > INT_MAX ? INT_MAX : (int)(half / r->size);
	r->extent = t->extent;
	r->dense = t->flat && t->extent == (MPI_Aint)t->size;
	r->small = false; /* the halves, unless the caller chooses a small slot */
	r->kern = red_kernel(type, r->op);
	if (t->flat) { /* no hole: its bytes from the true lower bound on */
		r->tlb = t->tlb;
		r->true_extent = (MPI_Aint)t->size;
	} else if (PMPI_Type_get_true_extent(type, &r->tlb, &r->true_extent) != MPI_SUCCESS) {
		r->true_extent = 0;
	}
	return true;
}

/* @p k elements in this layout: the offset of their lowest byte from the
 * buffer's address, and how many bytes they span. */
static MPI_Aint red_lo(const struct red *r, int k)
{
	MPI_Aint d = (MPI_Aint)(k - 1) * r->extent;
	return r->tlb + (d < 0 ? d : 0);
}

size_t red_span(const struct red *r, int k)
{
	MPI_Aint d = (MPI_Aint)(k - 1) * r->extent;
	return (size_t)(r->true_extent + (d < 0 ? -d : d));
}

void *red_room(const struct red *r, int k, void **base)
{
	*base = malloc(k > 0 ? red_span(r, k) : 1);
	if (!*base)
		return out_of_memory();
	return k > 0 ? at(*base, -red_lo(r, k)) : *base;
}

/* @p count elements of @p type (@p bytes of data) from @p in to @p out. */
int typed_copy(const void *in, void *out, int count, MPI_Datatype type, uint64_t bytes)
{
	void *tmp = malloc(bytes);
	if (!tmp)
		return out_of_memory(), MPI_ERR_NO_MEM;
	int rc = pm_pack(in, count, type, tmp, bytes);
	if (rc == MPI_SUCCESS)
		rc = pm_unpack(tmp, bytes, out, count, type);
	free(tmp);
	return rc;
}

/* The @p k packed elements of @p half as a buffer in this layout (the
 * half itself where dense, else unpacked into @p room). */
static void *red_unpacked(const struct red *r, const void *half, char *room, int k, int *rc)
{
	if (r->dense)
		return at(half, -r->tlb);
	void *buf = at(room, -red_lo(r, k));
	int e = pm_unpack(half, (uint64_t)k * r->size, buf, k, r->type);
	if (e != MPI_SUCCESS && *rc == MPI_SUCCESS)
		*rc = e;
	return buf;
}

/* The fixed order: x[lo] op (x[lo+1] op (... x[hi-1])) over the chunks at
 * @p off of the halves of step @p s (this rank's own: r->mine, where
 * set), into @p out (the user's, at this chunk): directly where the input
 * is not @p out, else through the scratch. */
int red_fold(struct pm_coll *co, const struct red *r, uint64_t s, int k, void *out, int lo, int hi, size_t off)
{
	int rc = MPI_SUCCESS;
	const void *mine = r->dense ? r->mine : NULL;
	void *acc;
	int i = hi - 2;
	/* The plugin's kernels (scalar) for a few elements only: above, the
	 * library's vectorized ones are faster. */
	red_kernel_fn kern = (size_t)k * r->size <= RED_KERNEL_MAX ? r->kern : NULL;
	if (r->dense) {
		const void *top = mine && hi - 1 == co->rank ? at(mine, r->tlb) : slot(co, hi - 1, s, r->small) + off;
		acc = mine && mine != out ? out : at(co->scratch, -r->tlb);
		const void *x = i < lo ? NULL : mine && i == co->rank ? at(mine, r->tlb) : slot(co, i, s, r->small) + off;
		if (x && kern) {
			kern(x, top, at(acc, r->tlb), k); /* the first operation, without a copy of top */
			i--;
		} else {
			memcpy(at(acc, r->tlb), top, (size_t)k * r->size);
		}
	} else {
		acc = red_unpacked(r, slot(co, hi - 1, s, r->small) + off, r->acc, k, &rc);
	}
	for (; i >= lo; i--) {
		const void *x = mine && i == co->rank ? mine
						      : red_unpacked(r, slot(co, i, s, r->small) + off, r->x, k, &rc);
		if (kern) {
			kern(x, acc, acc, k);
			continue;
		}
		int e = PMPI_Reduce_local(x, acc, k, r->type, r->op);
		if (e != MPI_SUCCESS && rc == MPI_SUCCESS)
			rc = e;
	}
	if (rc != MPI_SUCCESS || acc == out)
		return rc;
	if (r->dense) {
		memcpy(at(out, r->tlb), co->scratch, (size_t)k * r->size);
		return MPI_SUCCESS;
	}
	return typed_copy(acc, out, k, r->type, (uint64_t)k * r->size);
}

/*
 * Reduce (@p root >= 0) or Allreduce (@p root < 0) of @p count elements
 * from @p in to @p out.  Every rank runs the same steps (their number
 * from the signature only); each packs its chunk into its half, and a
 * folding rank unpacks each into its own layout.  Where an operation
 * fails, the error is kept and the steps go on.
 */
static int reduce_steps(struct pm_coll *co, struct red *r, const char *in, char *out, int count, int root)
{
	int rc = MPI_SUCCESS;
	for (int64_t e0 = 0; e0 < count; e0 += r->per_chunk) {
		int k = count - e0 < r->per_chunk ? (int)(count - e0) : r->per_chunk;
		MPI_Aint off = (MPI_Aint)e0 * r->extent;
		uint64_t s = ++co->step;
		int e = MPI_SUCCESS;
		uint8_t *mine = slot(co, co->rank, s, r->small);
		r->mine = r->dense ? at(in, off) : NULL; /* folded from the input */
		if (r->dense && co->rank != root) {
			coll_wait_free(co, s);
			memcpy(mine, at(in, off + r->tlb), (size_t)k * r->size);
		} else if (!r->dense) {
			coll_wait_free(co, s);
			e = pm_pack(at(in, off), k, r->type, mine, (uint64_t)k * r->size);
		}
		coll_post(co, s);
		if (root < 0 || co->rank == root) {
			coll_wait_all(co, s);
			int f = red_fold(co, r, s, k, at(out, off), 0, co->size, 0);
			if (e == MPI_SUCCESS)
				e = f;
		}
		if (e != MPI_SUCCESS && rc == MPI_SUCCESS)
			rc = e;
		coll_finish(co, s);
	}
	return rc;
}

int coll_reduce(struct pm_coll *co, const struct red *r_, const void *sendbuf, void *recvbuf, int count, int root,
		MPI_Comm comm)
{
	struct red r = *r_;
	MPI_Datatype datatype = r.type;
	r.small = (uint64_t)count * r.size <= COLL_SMALL;
	const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	if (count == 0 || (co->size == 1 && sendbuf == MPI_IN_PLACE))
		return MPI_SUCCESS;
	if (co->size == 1) /* the result is the one rank's data */
		return pm_comm_error(comm, typed_copy(in, recvbuf, count, datatype, (uint64_t)count * r.size));
	if (!r.dense) { /* this rank's own room for a chunk (a local choice: the steps are the same) */
		size_t room = red_span(&r, count < r.per_chunk ? count : r.per_chunk);
		r.acc = malloc(room);
		r.x = malloc(room);
		if (!r.acc || !r.x)
			out_of_memory();
	}
	int rc = reduce_steps(co, &r, in, recvbuf, count, root);
	free(r.acc);
	free(r.x);
	return coll_result(co, comm, rc);
}

bool red_carried(const struct pm_coll *co, struct red *r, MPI_Datatype type, int count, int root)
{
	return co && count >= 0 && r->op != MPI_OP_NULL && root < co->size &&
	       red_layout(r, type, co->half_bytes ? co->half_bytes : SIZE_MAX);
}

/* Reduce (@p root >= 0) or Allreduce (@p root < 0) through the area of
 * @p comm, or -1 where the library takes it. */
static int reduce_call(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
		       MPI_Comm comm, enum coll_call call)
{
	struct pm_coll *co = pm_coll_for(comm);
	int rc = co ? -1 : hier_reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
	if (rc >= 0)
		return rc;
	struct red r = {.op = op};
	if (!red_carried(co, &r, datatype, count, root)) {
		coll_count(call, false, 0);
		return -1;
	}
	coll_count(call, true, (uint64_t)count * r.size);
	return coll_reduce(co, &r, sendbuf, recvbuf, count, root, comm);
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
	       MPI_Comm comm)
{
	if (root < 0)
		return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
	int rc = reduce_call(sendbuf, recvbuf, count, datatype, op, root, comm, CALL_REDUCE);
	return rc >= 0 ? rc : PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
		  MPI_Comm comm)
{
	int rc = reduce_call(sendbuf, recvbuf, count, datatype, op, -1, comm, CALL_ALLREDUCE);
	return rc >= 0 ? rc : PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

/* ---- Gather, Scatter, Allgather ---------------------------------------------- */

/*
 * Each rank's block is the same number of bytes (MPI: the signatures
 * match), packed where a datatype is not contiguous.  A step moves a piece
 * of every block: Gather and Allgather a half's worth of each rank's own
 * block through its own half; Scatter 1/n of the root's half per rank.
 */
struct blocks {
	char *mine;      /* this rank's block (send side), contiguous */
	char *all;       /* the n blocks (root of Gather, Allgather; root of Scatter: send side) */
	uint64_t bytes;  /* of one block */
	void *tmp_mine, *tmp_all; /* packed copies, or NULL */
};

/* The @p n blocks of @p count items of @p type at @p buf (block r at
 * buf + r * count * extent) packed to (@p pack) or unpacked from
 * @p packed (block r at r * @p bytes), one block at a time. */
int blocks_move(void *buf, int count, MPI_Datatype type, int n, char *packed, uint64_t bytes, bool pack)
{
	const struct pm_type *t = pm_type_info(type);
	if (!t)
		return MPI_ERR_TYPE;
	if (count < 0)
		return MPI_ERR_COUNT;
	MPI_Aint stride = t->extent * (MPI_Aint)count; /* taken before the next look-up */
	int rc = MPI_SUCCESS;
	for (int r = 0; r < n && rc == MPI_SUCCESS; r++) {
		void *p = at(buf, (MPI_Aint)r * stride);
		char *q = packed + (uint64_t)r * bytes;
		rc = pack ? pm_pack(p, count, type, q, bytes) : pm_unpack(q, bytes, p, count, type);
	}
	return rc;
}

/* Contiguous bytes of the @p n blocks (@p bytes each, @p bytes > 0) of
 * @p count items of @p type at @p buf: the buffer itself, or a packed copy
 * in *@p tmp (packed now where @p fill; a failure to pack is kept in *@p rc
 * and the copy holds zeros: the caller's steps go on).  @return NULL only
 * where out of memory. */
char *contiguous(void *buf, int count, MPI_Datatype type, int n, uint64_t bytes, bool fill, void **tmp,
			int *rc)
{
	const struct pm_type *t = pm_type_info(type);
	*tmp = NULL;
	if (t && count >= 0 && t->flat && (uint64_t)t->size * (uint64_t)count == bytes &&
	    (t->extent == t->size || (uint64_t)count * (uint64_t)n <= 1))
		return at(buf, t->tlb);
	*tmp = calloc(n, bytes);
	if (!*tmp)
		return out_of_memory(), NULL;
	int e = fill ? blocks_move(buf, count, type, n, *tmp, bytes, true) : MPI_SUCCESS;
	if (e != MPI_SUCCESS && *rc == MPI_SUCCESS)
		*rc = e;
	return *tmp;
}

/* Root @p root (or every rank, @p root < 0) takes the blocks of all. */
static void gather_steps(struct pm_coll *co, struct blocks *b, int root)
{
	bool small = b->bytes <= COLL_SMALL;
	for (uint64_t off = 0; off < b->bytes; off += co->half_bytes) {
		size_t n = b->bytes - off < co->half_bytes ? (size_t)(b->bytes - off) : co->half_bytes;
		uint64_t s = ++co->step;
		if (root != co->rank) { /* a Gather's root reads its own block from b->mine */
			coll_wait_free(co, s);
			memcpy(slot(co, co->rank, s, small), b->mine + off, n);
		}
		coll_post(co, s);
		if (root < 0 || root == co->rank) {
			coll_wait_all(co, s);
			for (int r = 0; r < co->size; r++) {
				char *to = b->all + (uint64_t)r * b->bytes + off;
				if (r == co->rank && to != b->mine + off) /* not in place */
					memcpy(to, b->mine + off, n);
				else if (r != co->rank)
					memcpy(to, slot(co, r, s, small), n);
			}
		}
		coll_finish(co, s);
	}
}

/*
 * Single copy (co->cma_min: agreed at every rank, coll.c): one step where
 * every rank posts the address of its contiguous send side in its small
 * slot, every rank copies what it takes straight from the others' memory
 * (coll_read()), and none returns before every rank's done says it has
 * finished reading.  Taken for blocks of at least co->cma_min bytes: the
 * same at every rank.
 */
static void post_address(struct pm_coll *co, uint64_t s, const void *p)
{
	uint64_t a = (uint64_t)(uintptr_t)p;
	coll_wait_free(co, s);
	memcpy(coll_small(co, co->rank, s), &a, sizeof(a));
	coll_post(co, s);
}

static uint64_t peer_address(const struct pm_coll *co, int r, uint64_t s)
{
	uint64_t a;
	memcpy(&a, coll_small(co, r, s), sizeof(a));
	return a;
}

/* Allgather: every rank's block from its memory. */
static int allgather_cma(struct pm_coll *co, struct blocks *b)
{
	uint64_t s = ++co->step;
	int rc = MPI_SUCCESS;
	post_address(co, s, b->mine);
	char *own = b->all + (uint64_t)co->rank * b->bytes;
	if (own != b->mine)
		memcpy(own, b->mine, b->bytes);
	coll_wait_all(co, s);
	for (int r = 0; r < co->size && coll_error(co) == MPI_SUCCESS; r++) {
		int e = r == co->rank ? MPI_SUCCESS
				      : coll_read(co, r, b->all + (uint64_t)r * b->bytes, peer_address(co, r, s), b->bytes);
		if (e != MPI_SUCCESS && rc == MPI_SUCCESS)
			rc = e;
	}
	coll_finish(co, s);
	coll_wait_done(co, s);
	return rc;
}

int coll_gather_bytes(struct pm_coll *co, char *mine, char *all, uint64_t bytes, int root)
{
	struct blocks b = {.mine = mine, .all = all, .bytes = bytes};
	if (bytes == 0)
		return MPI_SUCCESS;
	if (co->size == 1)
		memmove(all, mine, bytes);
	else
		gather_steps(co, &b, root);
	return coll_error(co);
}

/* The root's blocks, each to its rank. */
static void scatter_steps(struct pm_coll *co, struct blocks *b, int root)
{
	bool small = b->bytes * (uint64_t)co->size <= COLL_SMALL;
	size_t room = small ? COLL_SMALL : co->half_bytes;
	size_t piece = room / (size_t)co->size > 0 ? room / (size_t)co->size : 1;
	for (uint64_t off = 0; off < b->bytes; off += piece) {
		size_t n = b->bytes - off < piece ? (size_t)(b->bytes - off) : piece;
		uint64_t s = ++co->step;
		const char *from = (const char *)slot(co, root, s, small) + (size_t)co->rank * piece;
		if (co->rank == root) { /* its own piece straight from b->all */
			coll_wait_free(co, s);
			for (int r = 0; r < co->size; r++)
				if (r != root)
					memcpy(slot(co, root, s, small) + (size_t)r * piece,
					       b->all + (uint64_t)r * b->bytes + off, n);
			coll_post(co, s);
			from = b->all + (uint64_t)root * b->bytes + off;
		} else {
			coll_wait_arrive(co, root, s);
		}
		if (b->mine && b->mine + off != from)
			memcpy(b->mine + off, from, n);
		coll_finish(co, s);
	}
}

enum blk_kind { BLK_GATHER, BLK_SCATTER, BLK_ALLGATHER };

/* The three calls: the block's bytes from the side every rank has. */
static int block_call(struct pm_coll *co, enum blk_kind kind, const void *sendbuf, int scount, MPI_Datatype stype,
		      void *recvbuf, int rcount, MPI_Datatype rtype, int root, MPI_Comm comm)
{
	static const enum coll_call calls[] = {CALL_GATHER, CALL_SCATTER, CALL_ALLGATHER};
	bool is_root = co && (kind == BLK_ALLGATHER || co->rank == root);
	/* Gather: every rank sends; Scatter: every rank receives (at the root, either may be in place). */
	bool in_place = is_root && (kind == BLK_SCATTER ? recvbuf == MPI_IN_PLACE : sendbuf == MPI_IN_PLACE);
	bool by_send = kind != BLK_SCATTER && !in_place;
	/* The type whose items make this rank's block (a pm_type_info() result
	 * lives until the next look-up, so its size is taken at once). */
	MPI_Datatype btype = by_send || (kind == BLK_SCATTER && in_place) ? stype : rtype;
	int count = by_send || (kind == BLK_SCATTER && in_place) ? scount : rcount;
	/* The root's n blocks (its other arguments are not significant
	 * elsewhere, so nothing is decided from them: an error there is the
	 * root's, after the same steps as the others). */
	int allcount = kind == BLK_SCATTER ? scount : rcount;
	MPI_Datatype alltype = kind == BLK_SCATTER ? stype : rtype;
	const struct pm_type *t = co ? pm_type_info(btype) : NULL;
	if (!t || count < 0 || (kind != BLK_ALLGATHER && (root < 0 || root >= co->size))) {
		coll_count(calls[kind], false, 0);
		return -1;
	}
	struct blocks b = {.bytes = (uint64_t)t->size * (uint64_t)count};
	coll_count(calls[kind], true, b.bytes);
	if (b.bytes == 0)
		return MPI_SUCCESS;
	int rc = MPI_SUCCESS, n = co->size;
	void *allbuf = kind == BLK_SCATTER ? (void *)(uintptr_t)sendbuf : recvbuf;
	if (is_root)
		b.all = contiguous(allbuf, allcount, alltype, n, b.bytes, kind == BLK_SCATTER || in_place, &b.tmp_all,
				   &rc);
	if (in_place)
		b.mine = b.all + (uint64_t)co->rank * b.bytes;
	else if (kind == BLK_SCATTER)
		b.mine = contiguous(recvbuf, rcount, rtype, 1, b.bytes, false, &b.tmp_mine, &rc);
	else
		b.mine = contiguous((void *)(uintptr_t)sendbuf, scount, stype, 1, b.bytes, true, &b.tmp_mine, &rc);
	if ((is_root && !b.all) || !b.mine) /* out of memory: no way on together */
		PMPI_Abort(comm, MPI_ERR_NO_MEM);
	if (co->size == 1)
		memmove(kind == BLK_SCATTER ? b.mine : b.all, kind == BLK_SCATTER ? b.all : b.mine,
			b.mine == b.all ? 0 : b.bytes);
	else if (kind == BLK_SCATTER)
		scatter_steps(co, &b, root);
	else if (kind == BLK_ALLGATHER && co->cma_min && b.bytes >= co->cma_min)
		rc = allgather_cma(co, &b);
	else
		gather_steps(co, &b, kind == BLK_GATHER ? root : -1);
	if (is_root && b.tmp_all && kind != BLK_SCATTER && rc == MPI_SUCCESS)
		rc = blocks_move(allbuf, allcount, alltype, n, b.tmp_all, b.bytes, false);
	if (b.tmp_mine && kind == BLK_SCATTER && rc == MPI_SUCCESS)
		rc = blocks_move(recvbuf, rcount, rtype, 1, b.tmp_mine, b.bytes, false);
	free(b.tmp_all);
	free(b.tmp_mine);
	return coll_result(co, comm, rc);
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
	       MPI_Datatype recvtype, int root, MPI_Comm comm)
{
	struct pm_coll *co = pm_coll_for(comm);
	int rc = co ? -1 : hier_gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, false, comm);
	if (rc < 0)
		rc = block_call(co, BLK_GATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
	return rc >= 0 ? rc : PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
		MPI_Datatype recvtype, int root, MPI_Comm comm)
{
	struct pm_coll *co = pm_coll_for(comm);
	int rc = co ? -1
		    : hier_scatter(sendbuf, false, NULL, NULL, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
				   comm);
	if (rc < 0)
		rc = block_call(co, BLK_SCATTER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
	return rc >= 0 ? rc : PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
		  MPI_Datatype recvtype, MPI_Comm comm)
{
	struct pm_coll *co = pm_coll_for(comm);
	int rc = co ? -1 : hier_gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, true, comm);
	if (rc < 0)
		rc = block_call(co, BLK_ALLGATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm);
	return rc >= 0 ? rc : PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

/* ---- Alltoall ------------------------------------------------------------- */

/* Block r of every rank's @p out (n blocks of @p bytes) to rank r's @p in
 * at block of the sender: each step, every rank writes a 1/n of its half
 * per destination, then copies its own piece out of every rank's half. */
static void alltoall_steps(struct pm_coll *co, const char *out, char *in, uint64_t bytes)
{
	int n = co->size;
	bool small = bytes * (uint64_t)n <= COLL_SMALL;
	size_t room = small ? COLL_SMALL : co->half_bytes;
	size_t piece = room / (size_t)n > 0 ? room / (size_t)n : 1;
	for (uint64_t off = 0; off < bytes; off += piece) {
		size_t len = bytes - off < piece ? (size_t)(bytes - off) : piece;
		uint64_t s = ++co->step;
		int me = co->rank;
		coll_wait_free(co, s);
		for (int r = 0; r < n; r++)
			if (r != me) /* its own piece goes straight from out to in */
				memcpy(slot(co, me, s, small) + (size_t)r * piece, out + (uint64_t)r * bytes + off, len);
		coll_post(co, s);
		memcpy(in + (uint64_t)me * bytes + off, out + (uint64_t)me * bytes + off, len);
		coll_wait_all(co, s);
		for (int r = 0; r < n; r++)
			if (r != me)
				memcpy(in + (uint64_t)r * bytes + off, slot(co, r, s, small) + (size_t)me * piece, len);
		coll_finish(co, s);
	}
}

/* Alltoall: block `rank` of every rank's @p out from its memory. */
static int alltoall_cma(struct pm_coll *co, const char *out, char *in, uint64_t bytes)
{
	uint64_t s = ++co->step;
	int rc = MPI_SUCCESS, me = co->rank;
	post_address(co, s, out);
	memcpy(in + (uint64_t)me * bytes, out + (uint64_t)me * bytes, bytes);
	coll_wait_all(co, s);
	for (int r = 0; r < co->size && coll_error(co) == MPI_SUCCESS; r++) {
		int e = r == me ? MPI_SUCCESS
				: coll_read(co, r, in + (uint64_t)r * bytes, peer_address(co, r, s) + (uint64_t)me * bytes,
					    bytes);
		if (e != MPI_SUCCESS && rc == MPI_SUCCESS)
			rc = e;
	}
	coll_finish(co, s);
	coll_wait_done(co, s);
	return rc;
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
		 MPI_Datatype recvtype, MPI_Comm comm)
{
	int hrc = hier_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
	if (hrc >= 0)
		return hrc;
	struct pm_coll *co = pm_coll_for(comm);
	bool in_place = sendbuf == MPI_IN_PLACE;
	/* Decided from the block's bytes only (the same at every rank). */
	const struct pm_type *rt = co && recvcount >= 0 ? pm_type_info(recvtype) : NULL;
	if (!rt) {
		coll_count(CALL_ALLTOALL, false, 0);
		return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
	}
	uint64_t bytes = (uint64_t)rt->size * (uint64_t)recvcount, all = bytes * (uint64_t)co->size;
	coll_count(CALL_ALLTOALL, true, all);
	if (bytes == 0)
		return MPI_SUCCESS;
	int rc = MPI_SUCCESS, n = co->size;
	void *tmp_out = NULL, *tmp_in = NULL;
	/* In place: the send blocks are the receive buffer, read before it is written. */
	char *out = in_place ? contiguous(recvbuf, recvcount, recvtype, n, bytes, true, &tmp_out, &rc)
			     : contiguous((void *)(uintptr_t)sendbuf, sendcount, sendtype, n, bytes, true, &tmp_out, &rc);
	if (out && in_place && !tmp_out) { /* contiguous in the user's buffer: a copy to read from */
		tmp_out = malloc(all);
		out = tmp_out ? memcpy(tmp_out, out, all) : NULL;
	}
	char *in = out ? contiguous(recvbuf, recvcount, recvtype, n, bytes, false, &tmp_in, &rc) : NULL;
	if (!out || !in)
		PMPI_Abort(comm, MPI_ERR_NO_MEM);
	if (n == 1)
		memcpy(in, out, all);
	else if (co->cma_min && bytes >= co->cma_min)
		rc = alltoall_cma(co, out, in, bytes);
	else
		alltoall_steps(co, out, in, bytes);
	if (tmp_in && rc == MPI_SUCCESS)
		rc = blocks_move(recvbuf, recvcount, recvtype, n, tmp_in, bytes, false);
	free(tmp_out);
	free(tmp_in);
	return coll_result(co, comm, rc);
}
