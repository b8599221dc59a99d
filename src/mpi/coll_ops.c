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
 * Bcast's message: BCAST_SMALL bytes, after the root's length; the blocks
 * of Gather, Scatter, Allgather and Alltoall: LEN_SMALL bytes, after the
 * sender's length, below).
 *
 * A rank's own block or chunk never goes through its half where no other
 * rank reads it (a Gather's or Reduce's root, a Scatter's root's own
 * block, an Alltoall's block to itself): it is taken from the user's
 * buffer; a reduction folds its own chunk straight from its input (one
 * in the small slots with a kernel of the plugin's folds every rank's
 * copy there, its own too: reduce_small()).
 *
 * Barrier: one step, every rank posts and waits for all.
 * Bcast: the message's bytes (packed, for a non-contiguous type) in pieces
 * of ROOTED_STEP bytes (or the half, if smaller), a step each: the root
 * writes, the others copy out, behind its marks (coll.h) where the
 * message is of one or two pieces.  The
 * first step carries the root's length at the head of its small slot (and
 * the message itself where it fits the rest, BCAST_SMALL bytes), and every
 * rank runs the steps of that length: a receiver whose count and type make
 * fewer bytes takes what fits and reports MPI_ERR_TRUNCATE, as Open MPI
 * does; one with more room takes the message (MPI wants the signatures
 * equal; Open MPI's tuned Bcast does not report a larger receive either).
 * Reduce, Allreduce: the elements in chunks whose packed bytes fit a half
 * (a Reduce's, ROOTED_STEP bytes, or one element where it is larger; its
 * root folds behind the ranks' marks where the chunk is marked), a step
 * each (how many from the type's size and the count only: the ranks
 * may lay the same signature out differently): the ranks pack their chunk
 * into their half, and the root (Reduce) or every rank (Allreduce) unpacks
 * each into its own layout and reduces the n chunks with
 * PMPI_Reduce_local in one fixed order, from the highest rank down:
 *   result = x0 op (x1 op (... op (x[n-2] op x[n-1])))
 * for every operation, predefined or not, commutative or not (MPI takes
 * them as associative).  The same bytes in the same order at every rank:
 * every rank of an Allreduce gets the same bits, on every run.  An
 * Allreduce of 3 ranks or more folds a large chunk by slices instead
 * (allreduce_slices()): each element still in that order, by one rank.
 * Chunks of a few elements of the common predefined types and operations
 * go through the plugin's own kernels instead (coll_kern.c): the same
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

/* Every rank waits for every arrive; or, where ranks outnumber cores
 * (co->lead_first), rank 0 does and then releases the others by its done:
 * it leaves first, while it runs, so that a call it roots next (a Bcast,
 * a Scatter) has its data posted before the others leave, instead of a
 * rank that left first waiting for a root that has no core.  Either way
 * no rank leaves before every rank arrived, so ranks that decided
 * differently still meet. */
int coll_barrier(struct pm_coll *co)
{
	if (co->size > 1) {
		uint64_t s = ++co->step;
		coll_post(co, s);
		if (co->rank == 0 || !co->lead_first)
			coll_wait_all(co, s);
		else
			coll_wait_release(co, s);
		coll_finish(co, s); /* after a failed wait, into memory of its own (coll.c slot_detach()) */
	}
	return coll_call_error(co);
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

/* Bytes of a half that a Bcast, a Reduce (but one element larger than
 * this) or a Gather fills at a step at most: the root's copies then
 * overlap the others' (PERFORMANCE.md, "Step sizes"); the other calls take
 * the whole half, in fewer steps. */
#define ROOTED_STEP (128u * 1024)

static inline size_t rooted_room(const struct pm_coll *co)
{
	return co->half_bytes < ROOTED_STEP ? co->half_bytes : ROOTED_STEP;
}

static inline uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Marks (coll.h): a writer marks how far it has written its half every
 * MARK_EVERY bytes, or every quarter of a longer piece (write_marked()). */
#define MARK_EVERY (16u * 1024)

/* Whether a Bcast of @p bytes is marked: 32 KiB to two pieces
 * (PERFORMANCE.md, "Step sizes"). */
static inline bool marked(uint64_t bytes)
{
	return bytes >= 2 * MARK_EVERY && bytes <= 2 * ROOTED_STEP;
}
#define MARK_SHIFT 20
static_assert(ROOTED_STEP < (1u << MARK_SHIFT), "a piece's bytes fit under the step in a mark");

/* Mark @p mark: @p bytes of step @p s written (release: they are there). */
static inline void mark_set(_Atomic uint64_t *mark, uint64_t s, uint64_t bytes)
{
	atomic_store_explicit(mark, s << MARK_SHIFT | bytes, memory_order_release);
}

/* Whether mark @p m is one of step @p s. */
static inline bool mark_of(uint64_t m, uint64_t s)
{
	return m >> MARK_SHIFT == (s & (UINT64_MAX >> MARK_SHIFT));
}

/* @p n bytes from @p from to this rank's @p half, marked at @p mark
 * (NULL: not marked) every MARK_EVERY bytes or, for more than 4 of
 * them, every quarter (PERFORMANCE.md, "Step sizes"). */
static void write_marked(struct pm_coll *co, uint8_t *half, const void *from, size_t n, _Atomic uint64_t *mark,
			 uint64_t s)
{
	bool stream = coll_streams(co, n);
	size_t every = n / 4 > MARK_EVERY ? n / 4 : MARK_EVERY;
	for (size_t d = 0; d < n;) {
		size_t c = mark && n - d > every ? every : n - d;
		coll_copy_in(half + d, (const char *)from + d, c, stream);
		d += c;
		if (mark)
			mark_set(mark, s, d);
	}
}

/* Bytes of step @p s that mark @p m says are written, or 0. */
static inline size_t mark_bytes(uint64_t m, uint64_t s)
{
	return mark_of(m, s) ? (size_t)(m & ((1u << MARK_SHIFT) - 1)) : 0;
}

#define FOLLOW_LOOKS 4096u /* looks at a mark that has not moved before the usual wait */

/* A receiver's step @p s: the first @p want bytes of the root's piece
 * @p p to @p dst, copied as the root's mark @p mark shows them written;
 * once the mark stops moving, the usual wait for the root's post.  With
 * @p want 0, only until the root has begun the step (its first step's
 * head is there). */
static void bcast_follow(struct pm_coll *co, _Atomic uint64_t *mark, int root, uint64_t s, const uint8_t *p,
			 char *dst, size_t want)
{
	size_t got = 0;
	for (unsigned looks = 0; looks < FOLLOW_LOOKS; looks++) {
		uint64_t m = atomic_load_explicit(mark, memory_order_acquire);
		if (want == 0 && mark_of(m, s))
			return;
		size_t ready = mark_bytes(m, s);
		ready = ready < want ? ready : want;
		if (ready > got) {
			memcpy(dst + got, p + got, ready - got);
			got = ready;
			looks = 0;
			if (got == want)
				return;
		} else if (atomic_load_explicit(&co->flags[root]->arrive, memory_order_acquire) >= s) {
			break;
		}
		coll_relax();
	}
	coll_wait_arrive(co, root, s);
	if (want > got)
		memcpy(dst + got, p + got, want - got);
}

/* @p bytes at @p data from @p root to rank @p to (every rank: @p to < 0),
 * ROOTED_STEP at a time: every rank runs the steps of the root's length, read
 * at the first step (untrusted: it bounds nothing but the steps; a rank
 * copies at most its own @p bytes).  @return the root's length. */
static uint64_t bcast_bytes(struct pm_coll *co, char *data, uint64_t bytes, int root, int to)
{
	bool takes = co->rank != root && (to < 0 || co->rank == to);
	uint64_t s = ++co->step, total = bytes;
	uint8_t *head = coll_small(co, root, s);
	/* A receiver follows the root's marks where it expects a message of
	 * one or two pieces (a longer one overlaps anyway: the root writes a
	 * piece while the receivers copy the one before) and the root has a
	 * core of its own. */
	bool follow = takes && marked(bytes) && !co->lead_first;
	if (co->rank == root) {
		coll_wait_free(co, s);
		head = coll_small(co, root, s); /* after the wait: a failed one detaches the slot (coll.c) */
		memcpy(head, &total, BCAST_HEAD);
	} else {
		if (follow)
			bcast_follow(co, coll_mark(co, root, s), root, s, NULL, NULL, 0);
		else
			coll_wait_arrive(co, root, s);
		memcpy(&total, head, BCAST_HEAD);
		if (coll_error(co) != MPI_SUCCESS)
			total = 0; /* one step, returning at once */
	}
	bool small = total <= BCAST_SMALL;
	size_t piece = rooted_room(co);
	for (uint64_t off = 0;; s = ++co->step) {
		size_t n = (size_t)min64(total - off, piece);
		if (co->rank == root && off > 0)
			coll_wait_free(co, s); /* before the pointers, as above */
		uint8_t *p = small ? head + BCAST_HEAD : coll_half(co, root, s);
		_Atomic uint64_t *mark = marked(total) ? coll_mark(co, root, s) : NULL;
		if (co->rank == root) {
			if (mark)
				mark_set(mark, s, 0);
			if (n > 0)
				write_marked(co, p, data + off, n, mark, s);
			coll_post(co, s);
		} else if (takes) {
			size_t want = off < bytes ? (size_t)min64(n, bytes - off) : 0;
			if (follow && mark && want > 0) {
				bcast_follow(co, mark, root, s, p, data + off, want);
			} else {
				if (off > 0)
					coll_wait_arrive(co, root, s);
				if (want > 0)
					memcpy(data + off, p, want);
			}
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
		return coll_call_error(co);
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
	/* The plugin's kernels for a few elements only: above, the
	 * library's (AVX) ones are faster. */
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

/* The first of the @p k elements of a chunk in rank @p j's slice (of @p n). */
static inline int slice_lo(int k, int j, int n)
{
	return (int)((int64_t)k * j / n);
}

/* Whether an Allreduce chunk of @p k elements is folded by slices: from
 * 3 ranks on and SLICES_MIN bytes (PERFORMANCE.md, "Step sizes"),
 * decided from the signature and the ranks. */
#define SLICES_MIN (256u * 1024)
static bool by_slices(const struct pm_coll *co, const struct red *r, int k)
{
	return co->size >= 3 && (uint64_t)k * r->size >= SLICES_MIN;
}

/*
 * An Allreduce chunk of @p k elements (at @p off of @p in and @p out)
 * by slices, once every rank posted it at step @p s: each rank folds
 * its own slice of the elements (slice_lo()) from every rank's half, in
 * the fixed order, into its half of step s + 1, and copies the others'
 * slices from theirs.  Each element is folded once, by one rank, in the
 * same order as a whole fold: the same bits.
 */
static int allreduce_slices(struct pm_coll *co, struct red *r, const char *in, char *out, int k, MPI_Aint off,
			    uint64_t s)
{
	int n = co->size, me = co->rank, rc = MPI_SUCCESS;
	int lo = slice_lo(k, me, n), hi = slice_lo(k, me + 1, n);
	coll_wait_all(co, s);
	uint64_t t = ++co->step;
	coll_wait_free(co, t); /* at once: every arrive >= s */
	uint8_t *res = coll_half(co, me, t) + (size_t)lo * r->size;
	void *slice_out = at(out, off + (MPI_Aint)lo * r->extent);
	r->mine = r->dense ? at(in, off + (MPI_Aint)lo * r->extent) : NULL;
	/* Dense: folded straight into the half; else in this rank's layout, then packed. */
	if (hi > lo)
		rc = red_fold(co, r, s, hi - lo, r->dense ? at(res, -r->tlb) : slice_out, 0, n, (size_t)lo * r->size);
	coll_finish(co, s);
	if (!r->dense && hi > lo) {
		int e = pm_pack(slice_out, hi - lo, r->type, res, (uint64_t)(hi - lo) * r->size);
		if (rc == MPI_SUCCESS)
			rc = e;
	}
	coll_post(co, t);
	for (int i = r->dense ? 0 : 1; i < n; i++) {
		int j = (me + i) % n, jl = slice_lo(k, j, n), jh = slice_lo(k, j + 1, n);
		const uint8_t *from = coll_half(co, j, t) + (size_t)jl * r->size;
		void *to = at(out, off + (MPI_Aint)jl * r->extent);
		if (j != me)
			coll_wait_arrive(co, j, t);
		if (jh == jl)
			continue;
		if (r->dense) {
			memcpy(at(to, r->tlb), from, (size_t)(jh - jl) * r->size);
			continue;
		}
		int e = pm_unpack(from, (uint64_t)(jh - jl) * r->size, to, jh - jl, r->type);
		if (rc == MPI_SUCCESS)
			rc = e;
	}
	coll_finish(co, t);
	return rc;
}

/* Whether a Reduce's chunk of @p k elements is marked as it
 * is written, for its root to fold behind: 32 KiB to ROOTED_STEP bytes
 * (decided from the signature; an Allreduce, whose every rank would
 * follow every other, took longer so: PERFORMANCE.md, "Step sizes"). */
static inline bool chunk_marked(const struct red *r, int k)
{
	uint64_t bytes = (uint64_t)k * r->size;
	return !r->small && bytes >= 2 * MARK_EVERY && bytes <= ROOTED_STEP;
}

/* The fold of elements [@p a, @p b) of a chunk at @p off (red_fold()). */
static int fold_range(struct pm_coll *co, struct red *r, uint64_t s, const char *in, char *out, MPI_Aint off,
		      int a, int b)
{
	MPI_Aint d = off + (MPI_Aint)a * r->extent;
	r->mine = r->dense ? at(in, d) : NULL;
	return red_fold(co, r, s, b - a, at(out, d), 0, co->size, (size_t)a * r->size);
}

/* At 2 ranks: elements [@p a, @p b) of the other rank's chunk at step
 * @p s folded into the result at @p out (which holds this rank's own). */
static int fold_other(struct pm_coll *co, const struct red *r, uint64_t s, char *out, MPI_Aint off, int a, int b)
{
	const uint8_t *x = coll_half(co, 1 - co->rank, s) + (size_t)a * r->size;
	return PMPI_Reduce_local(at(x, -r->tlb), at(out, off + (MPI_Aint)a * r->extent), b - a, r->type, r->op);
}

/* The fold of a marked chunk of @p k elements at step @p s, range by range
 * as every other rank's mark shows it written; once the marks stop
 * moving, the usual wait for every post, and the rest.  At 2 ranks, where
 * the operands may swap (r->kern: integers, float and double sums and
 * products), the root first copies its own chunk to the result while the
 * other writes, then folds the other's into it: one pass behind the mark
 * instead of two. */
static int fold_behind(struct pm_coll *co, struct red *r, uint64_t s, int k, const char *in, char *out,
		       MPI_Aint off)
{
	int got = 0, rc = MPI_SUCCESS;
	red_kernel_fn kern = r->kern;
	bool own_first = co->size == 2 && r->dense && kern;
	if (own_first && in != out)
		memcpy(at(out, off + r->tlb), at(in, off + r->tlb), (size_t)k * r->size);
	r->kern = NULL; /* ranges of any length: the library's operation for each, on every run */
	for (unsigned looks = 0; got < k && looks < FOLLOW_LOOKS; looks++) {
		size_t ready = (size_t)k * r->size;
		for (int j = 0; j < co->size; j++) {
			if (j == co->rank)
				continue;
			size_t b = mark_bytes(atomic_load_explicit(coll_mark(co, j, s), memory_order_acquire), s);
			ready = b < ready ? b : ready;
		}
		int e = (int)(ready / r->size);
		if (e > got) {
			int f = own_first ? fold_other(co, r, s, out, off, got, e) : fold_range(co, r, s, in, out, off, got, e);
			if (rc == MPI_SUCCESS)
				rc = f;
			got = e;
			looks = 0;
			continue;
		}
		coll_relax();
	}
	if (got < k) {
		coll_wait_all(co, s);
		int f = own_first ? fold_other(co, r, s, out, off, got, k) : fold_range(co, r, s, in, out, off, got, k);
		if (rc == MPI_SUCCESS)
			rc = f;
	}
	r->kern = kern;
	return rc;
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
		bool slices = root < 0 && !r->small && by_slices(co, r, k);
		bool marks = root >= 0 && chunk_marked(r, k);
		bool writes = !r->dense || co->rank != root;
		if (writes)
			coll_wait_free(co, s);
		/* After the wait: a failed one detaches this rank's slot (coll.c). */
		uint8_t *mine = slot(co, co->rank, s, r->small);
		_Atomic uint64_t *mark = marks ? coll_mark(co, co->rank, s) : NULL;
		r->mine = r->dense ? at(in, off) : NULL; /* folded from the input */
		if (r->dense && writes) {
			write_marked(co, mine, at(in, off + r->tlb), (size_t)k * r->size, mark, s);
		} else if (writes) {
			e = pm_pack(at(in, off), k, r->type, mine, (uint64_t)k * r->size);
			if (mark)
				mark_set(mark, s, (uint64_t)k * r->size);
		}
		coll_post(co, s);
		if (slices) {
			int f = allreduce_slices(co, r, in, out, k, off, s);
			if (e == MPI_SUCCESS)
				e = f;
		} else if (marks && !co->lead_first && co->rank == root) {
			int f = fold_behind(co, r, s, k, in, out, off);
			if (e == MPI_SUCCESS)
				e = f;
		} else if (root < 0 || co->rank == root) {
			coll_wait_all(co, s);
			int f = red_fold(co, r, s, k, at(out, off), 0, co->size, 0);
			if (e == MPI_SUCCESS)
				e = f;
		}
		if (e != MPI_SUCCESS && rc == MPI_SUCCESS)
			rc = e;
		if (!slices) /* allreduce_slices() finished its steps */
			coll_finish(co, s);
	}
	return rc;
}

/*
 * A reduction whose elements fit the small slots, dense here, with one of
 * the plugin's kernels: reduce_steps()' one step, short.  Every rank,
 * the root too, posts its elements in its small slot, and the fold reads
 * them all from there (so MPI_IN_PLACE needs nothing more) in the fixed
 * order, straight into the result.  The same step, slots and order as
 * reduce_steps(): ranks of one call may take either.
 */
static void reduce_small(struct pm_coll *co, const struct red *r, const void *in, void *out, int count, int root)
{
	uint64_t s = ++co->step;
	coll_wait_free(co, s);
	/* After the wait: a failed one detaches this rank's slot (coll.c). */
	memcpy(coll_small(co, co->rank, s), at(in, r->tlb), (size_t)count * r->size);
	coll_post(co, s);
	if (root < 0 || co->rank == root) {
		int n = co->size;
		void *acc = at(out, r->tlb);
		coll_wait_all(co, s);
		r->kern(coll_small(co, n - 2, s), coll_small(co, n - 1, s), acc, count);
		for (int i = n - 3; i >= 0; i--)
			r->kern(coll_small(co, i, s), acc, acc, count);
	}
	coll_finish(co, s);
}

int coll_reduce(struct pm_coll *co, const struct red *r_, const void *sendbuf, void *recvbuf, int count, int root,
		MPI_Comm comm)
{
	const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	if (count == 0 || (co->size == 1 && sendbuf == MPI_IN_PLACE))
		return MPI_SUCCESS;
	if (co->size == 1) /* the result is the one rank's data */
		return pm_comm_error(comm, typed_copy(in, recvbuf, count, r_->type, (uint64_t)count * r_->size));
	bool small = (uint64_t)count * r_->size <= COLL_SMALL;
	if (small && r_->dense && r_->kern) {
		reduce_small(co, r_, in, recvbuf, count, root);
		return coll_call_error(co);
	}
	struct red r = *r_;
	r.small = small;
	if (root >= 0 && (size_t)r.per_chunk * r.size > rooted_room(co))
		r.per_chunk = (int)(rooted_room(co) / r.size > 0 ? rooted_room(co) / r.size : 1);
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
 * of every block (coll_gather_bytes(), for coll_hier.c's node phases): a
 * half's worth of each rank's own block through its own half.
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

int coll_gather_bytes(struct pm_coll *co, char *mine, char *all, uint64_t bytes, int root)
{
	struct blocks b = {.mine = mine, .all = all, .bytes = bytes};
	if (bytes == 0)
		return MPI_SUCCESS;
	if (co->size == 1)
		memmove(all, mine, bytes);
	else
		gather_steps(co, &b, root);
	return coll_call_error(co);
}

/*
 * The user's Gather, Scatter, Allgather and Alltoall do not take the
 * ranks' signatures as matching.  At a call's first step every rank that
 * sends puts the bytes of its block (each block it sends has that length)
 * at the head of its small slot; its data follows there where all of it
 * fits (LEN_SMALL bytes: "small"), or its address where co->cma_min is set
 * and the block is that long (Allgather, Alltoall: read with coll_read()),
 * else lies in its half, in pieces: the whole half for one block that
 * every reader shares (Allgather; a Gather, ROOTED_STEP bytes of it), a
 * 1/n of it per destination (Scatter, Alltoall).  A sender's layout
 * follows from its length alone, so a reader finds it.  How many steps the call takes is read alike at
 * every rank at the first step: Scatter from the root's length, Gather
 * from the root's room (the root posts it in its head, and the senders
 * wait for it), Allgather and Alltoall from the longest block any rank
 * sends (each reads every head).  A receiver takes min(sent, room) bytes
 * of each block and returns MPI_ERR_TRUNCATE where a block was longer
 * than its room, as Open MPI does; nothing is written past the bytes
 * taken.  The heads are other ranks' word: they set the number of steps
 * (the same at every rank) and bound how much is copied, never past a
 * piece, a slot or a room.  The usual call (every block as long as its
 * room, small) is one step at every rank: xb_fast() checks the heads for
 * that in one pass and copies, and only a call that is not that reads
 * each sender's layout (xb_plan(), xb_read()).  The four calls are
 * inlined into each MPI_ function, so the kind's tests fold away.
 */
#define LEN_HEAD sizeof(uint64_t)
#define LEN_SMALL (COLL_SMALL - LEN_HEAD)
static_assert(LEN_HEAD + sizeof(uint64_t) <= COLL_SMALL, "a length and an address fit a small slot");

enum blk_kind { BLK_GATHER, BLK_SCATTER, BLK_ALLGATHER, BLK_ALLTOALL };

/* A sender's layout, from its length. */
struct lay {
	bool small, cma;
	size_t piece;   /* bytes of a block per step */
	uint64_t steps; /* steps it needs (at least 1) */
};

static inline __attribute__((always_inline)) struct lay layout_of(const struct pm_coll *co, enum blk_kind kind,
								       uint64_t len)
{
	bool shared = kind == BLK_GATHER || kind == BLK_ALLGATHER;
	size_t w = shared ? 1 : (size_t)co->size;
	struct lay l = {.cma = (kind == BLK_ALLGATHER || kind == BLK_ALLTOALL) && co->cma_min && len >= co->cma_min};
	l.small = !l.cma && len <= LEN_SMALL / w;
	size_t room = l.small ? LEN_SMALL : kind == BLK_GATHER ? rooted_room(co) : co->half_bytes;
	l.piece = room / w > 0 ? room / w : 1;
	l.steps = l.small || l.cma ? 1 : len / l.piece + (len % l.piece != 0);
	if (l.steps == 0)
		l.steps = 1;
	return l;
}

/* One call at this rank. */
struct xb {
	enum blk_kind kind;
	int root;        /* Gather, Scatter */
	bool sends;      /* posts blocks (Gather: not the root, which reads its own) */
	bool takes;      /* receives blocks */
	const char *out; /* the blocks it sends: one (Gather, Allgather) or n, each of len bytes */
	uint64_t len;
	char *in;        /* its room: block r at r * room (Scatter: the one block at 0) */
	uint64_t room;
	uint64_t *lens;  /* what rank r sent it (Scatter: lens[root]), read at the first step */
	int rc;
	bool uniform;    /* xb_fast() took the call: every block it takes fits its room */
};

static inline uint64_t head_of(const struct pm_coll *co, int r, uint64_t s)
{
	uint64_t v;
	memcpy(&v, coll_small(co, r, s), LEN_HEAD);
	return v;
}

/* Where rank @p r's block for this rank lands. */
static inline char *in_block(const struct xb *x, int r)
{
	return x->in + (x->kind == BLK_SCATTER ? 0 : (uint64_t)r * x->room);
}

/* The first step read: the number of steps, and x->lens. */
static __attribute__((noinline)) uint64_t xb_plan(struct pm_coll *co, struct xb *x, uint64_t s1)
{
	int n = co->size, me = co->rank;
	if (coll_error(co) != MPI_SUCCESS) { /* no heads were read: nothing more */
		for (int r = 0; r < n; r++)
			x->lens[r] = 0;
		return 1;
	}
	switch (x->kind) {
	case BLK_SCATTER:
		x->lens[x->root] = me == x->root ? x->len : head_of(co, x->root, s1);
		return layout_of(co, x->kind, x->lens[x->root]).steps;
	case BLK_GATHER: {
		uint64_t room = me == x->root ? x->room : head_of(co, x->root, s1), h = rooted_room(co);
		for (int r = 0; me == x->root && r < n; r++)
			x->lens[r] = r == me ? x->len : head_of(co, r, s1);
		return room <= h ? 1 : room / h + (room % h != 0);
	}
	default: {
		uint64_t k = 1;
		for (int r = 0; r < n; r++) {
			x->lens[r] = r == me ? x->len : head_of(co, r, s1);
			uint64_t steps = layout_of(co, x->kind, x->lens[r]).steps;
			k = steps > k ? steps : k;
		}
		return k;
	}
	}
}

/* Step @p j (0 on) of the call, at step number @p s: this rank's pieces. */
static inline __attribute__((always_inline)) void xb_write(struct pm_coll *co, const struct xb *x,
							     const struct lay *own, uint64_t j, uint64_t s)
{
	int n = co->size, me = co->rank;
	uint64_t lo = j * own->piece;
	bool shared = x->kind == BLK_GATHER || x->kind == BLK_ALLGATHER;
	bool head = j == 0 && (x->sends || (x->kind == BLK_GATHER && me == x->root));
	bool data = x->sends && !own->cma && j < own->steps && (j == 0 || !own->small) && lo < x->len;
	if (!head && !data)
		return;
	coll_wait_free(co, s);
	uint8_t *small = coll_small(co, me, s);
	if (head) {
		uint64_t h = x->sends ? x->len : x->room; /* a Gather's root: its room */
		memcpy(small, &h, LEN_HEAD);
	}
	if (j == 0 && own->cma) {
		uint64_t a = (uint64_t)(uintptr_t)x->out;
		memcpy(small + LEN_HEAD, &a, sizeof(a));
	}
	if (!data)
		return;
	uint8_t *base = own->small ? small + LEN_HEAD : coll_half(co, me, s);
	size_t len = x->len - lo < own->piece ? (size_t)(x->len - lo) : own->piece;
	if (shared) {
		coll_copy_in(base, x->out + lo, len, coll_streams(co, len));
		return;
	}
	const char *from = x->out + lo;
	if (len == x->len && len == own->piece) { /* the slot's pieces as out's blocks: at once (its own, unread) */
		coll_copy_in(base, from, len * (size_t)n, coll_streams(co, len * (size_t)n));
		return;
	}
	bool stream = coll_streams(co, len * (size_t)(n - 1));
	for (int d = 0; d < n; d++, base += own->piece, from += x->len)
		if (d != me) /* a Scatter's sender is its root */
			coll_copy_in(base, from, len, stream);
}

/* Step @p j: what this rank takes from rank @p r. */
static __attribute__((noinline)) void xb_read(struct pm_coll *co, struct xb *x, int r, uint64_t j, uint64_t s,
						uint64_t s1)
{
	int me = co->rank;
	bool shared = x->kind == BLK_GATHER || x->kind == BLK_ALLGATHER;
	struct lay l = layout_of(co, x->kind, x->lens[r]);
	uint64_t avail = x->lens[r] < x->room ? x->lens[r] : x->room, lo = j * l.piece;
	if (j >= l.steps || (j > 0 && l.small) || lo >= avail)
		return;
	size_t dest = shared ? 0 : (size_t)me * l.piece;
	if (l.cma) {
		uint64_t a;
		memcpy(&a, coll_small(co, r, s1) + LEN_HEAD, sizeof(a));
		int e = coll_read(co, r, in_block(x, r), a + (shared ? 0 : (uint64_t)me * x->lens[r]), (size_t)avail);
		if (e != MPI_SUCCESS && x->rc == MPI_SUCCESS)
			x->rc = e;
		return;
	}
	const uint8_t *base = l.small ? coll_small(co, r, s1) + LEN_HEAD : coll_half(co, r, s);
	size_t len = avail - lo < l.piece ? (size_t)(avail - lo) : l.piece;
	memcpy(in_block(x, r) + lo, base + dest, len);
}

/*
 * The usual call, after its first step's waits: every block this rank
 * takes is as long as its room and small, and so is its own (the whole
 * call is that one step at every rank).  Compares the heads with that in
 * one pass and then copies each block out of its slot; false (nothing
 * copied) where any differs, for xb_plan() and xb_read() to take it.
 */
static inline __attribute__((always_inline)) bool xb_fast(struct pm_coll *co, struct xb *x, const struct lay *own,
							    uint64_t s1)
{
	int n = co->size, me = co->rank;
	uint64_t len = x->room;
	if (!own->small || coll_error(co) != MPI_SUCCESS)
		return false;
	switch (x->kind) {
	case BLK_SCATTER: /* the root's length is its own: one step */
		if (me != x->root) {
			if (head_of(co, x->root, s1) != len || len > LEN_SMALL / (size_t)n)
				return false;
			size_t piece = LEN_SMALL / (size_t)n;
			if (len)
				memcpy(x->in, coll_small(co, x->root, s1) + LEN_HEAD + (size_t)me * piece, (size_t)len);
		}
		x->lens[x->root] = me == x->root ? x->len : len;
		return me != x->root || !x->takes || x->len <= x->room;
	case BLK_GATHER:
		if (me != x->root) /* the root's room: its steps */
			return head_of(co, x->root, s1) <= LEN_SMALL;
		if (len > LEN_SMALL || x->len > len) /* its own block too (in place: 0 here) */
			return false;
		for (int r = 0; r < n; r++)
			if (r != me && head_of(co, r, s1) != len)
				return false;
		break;
	default: /* Allgather, Alltoall: the blocks it sends are as long as the room */
		if (x->len != len)
			return false;
		for (int r = 0; r < n; r++)
			if (r != me && head_of(co, r, s1) != len)
				return false;
		break;
	}
	size_t at = x->kind == BLK_ALLTOALL ? (size_t)me * own->piece : 0;
	for (int r = 0; r < n; r++) {
		x->lens[r] = len;
		if (r != me && len)
			memcpy(x->in + (uint64_t)r * len, coll_small(co, r, s1) + LEN_HEAD + at, (size_t)len);
	}
	return true;
}

/* The steps of a call (co->size > 1). */
static inline __attribute__((always_inline)) void xb_steps(struct pm_coll *co, struct xb *x)
{
	int n = co->size, me = co->rank;
	struct lay own = layout_of(co, x->kind, x->sends ? x->len : 0);
	uint64_t s1 = co->step + 1, k = 1;
	for (uint64_t j = 0; j < k; j++) {
		uint64_t s = ++co->step;
		xb_write(co, x, &own, j, s);
		coll_post(co, s);
		if (x->kind == BLK_SCATTER) {
			if (me != x->root)
				coll_wait_arrive(co, x->root, s);
		} else if (x->kind == BLK_GATHER) {
			if (me == x->root)
				coll_wait_all(co, s);
			else if (j == 0)
				coll_wait_arrive(co, x->root, s);
		} else {
			coll_wait_all(co, s);
		}
		if (j == 0 && xb_fast(co, x, &own, s1)) {
			x->uniform = true;
			coll_finish(co, s);
			return;
		}
		if (j == 0)
			k = xb_plan(co, x, s1);
		for (int r = 0; x->takes && coll_error(co) == MPI_SUCCESS && r < n; r++)
			if (r != me && (x->kind != BLK_SCATTER || r == x->root))
				xb_read(co, x, r, j, s, s1);
		coll_finish(co, s);
	}
	if (own.cma)
		coll_wait_done(co, s1);
}

/* Bytes of @p count items of @p type (0 and the error kept in *@p rc where
 * either is not valid). */
static uint64_t type_bytes(MPI_Datatype type, int count, int *rc)
{
	const struct pm_type *t = pm_type_info(type);
	if (!t || count < 0) {
		if (*rc == MPI_SUCCESS)
			*rc = t ? MPI_ERR_COUNT : MPI_ERR_TYPE;
		return 0;
	}
	return (uint64_t)t->size * (uint64_t)count;
}

int blocks_unpack(void *buf, int count, MPI_Datatype type, int n, const char *packed, uint64_t room,
		  const uint64_t *lens, int only)
{
	const struct pm_type *t = pm_type_info(type);
	if (!t)
		return MPI_ERR_TYPE;
	MPI_Aint stride = t->extent * (MPI_Aint)count;
	int rc = MPI_SUCCESS;
	for (int r = 0; r < n && rc == MPI_SUCCESS; r++) {
		uint64_t got = lens[only >= 0 ? only : r] < room ? lens[only >= 0 ? only : r] : room;
		if (got)
			rc = pm_unpack(packed + (uint64_t)r * room, got, at(buf, (MPI_Aint)r * stride), count, type);
	}
	return rc;
}

/* The type and count that decided the call, looked up once: a side of
 * the same type and count (the usual call) needs no look-up of its own. */
struct xb_type {
	MPI_Datatype type;
	int count;
	bool dense;     /* flat, items back to back */
	MPI_Aint tlb;
	uint64_t bytes;
};

static inline uint64_t xb_bytes(const struct xb_type *bt, MPI_Datatype type, int count, int *rc)
{
	return type == bt->type && count == bt->count ? bt->bytes : type_bytes(type, count, rc);
}

/* contiguous(), the same. */
static inline char *xb_side(const struct xb_type *bt, void *buf, int count, MPI_Datatype type, int n, uint64_t bytes,
			    bool fill, void **tmp, int *rc)
{
	if (type == bt->type && count == bt->count && bytes == bt->bytes && bt->dense)
		return at(buf, bt->tlb);
	return contiguous(buf, count, type, n, bytes, fill, tmp, rc);
}

/* This rank's own block, where it sends one to itself (not in place):
 * copied directly. */
static inline __attribute__((always_inline)) void xb_own(const struct pm_coll *co, struct xb *x, bool in_place)
{
	int me = co->rank;
	bool own = !in_place && (x->kind == BLK_GATHER ? me == x->root
				 : x->kind == BLK_SCATTER ? me == x->root && x->takes
							    : true);
	x->lens[me] = x->len;
	if (!own)
		return;
	uint64_t got = x->len < x->room ? x->len : x->room;
	const char *from = x->kind == BLK_GATHER || x->kind == BLK_ALLGATHER ? x->out : x->out + (uint64_t)me * x->len;
	if (got && from != in_block(x, me))
		memmove(in_block(x, me), from, (size_t)got);
}

/*
 * The four calls.  Whether one is carried is decided from what every rank
 * has alike where the signatures match (the receive side's count and type,
 * or the send side's where every rank sends: Gather, Allgather; in place,
 * the side there is), as before the lengths were posted: a count or type
 * not valid there sends the call to the library, which reports it.  The
 * root's other arguments decide nothing.
 */
static inline __attribute__((always_inline)) int xb_call(struct pm_coll *co, enum blk_kind kind, const void *sendbuf,
							  int scount, MPI_Datatype stype, void *recvbuf, int rcount,
							  MPI_Datatype rtype, int root, MPI_Comm comm)
{
	static const enum coll_call calls[] = {CALL_GATHER, CALL_SCATTER, CALL_ALLGATHER, CALL_ALLTOALL};
	int n = co ? co->size : 0, me = co ? co->rank : 0;
	bool is_root = co && (kind == BLK_ALLGATHER || kind == BLK_ALLTOALL || me == root);
	bool in_place = is_root && (kind == BLK_SCATTER ? recvbuf == MPI_IN_PLACE : sendbuf == MPI_IN_PLACE);
	bool by_send = (kind == BLK_GATHER || kind == BLK_ALLGATHER) && !in_place;
	MPI_Datatype btype = by_send || (kind == BLK_SCATTER && in_place) ? stype : rtype;
	int count = by_send || (kind == BLK_SCATTER && in_place) ? scount : rcount;
	const struct pm_type *t = co ? pm_type_info(btype) : NULL;
	if (!t || count < 0 || ((kind == BLK_GATHER || kind == BLK_SCATTER) && (root < 0 || root >= n))) {
		coll_count(calls[kind], false, 0);
		return -1;
	}
	const struct xb_type bt = {.type = btype, .count = count, .dense = t->flat && t->extent == t->size,
				   .tlb = t->tlb, .bytes = (uint64_t)t->size * (uint64_t)count};
	uint64_t lens_here[64];
	struct xb x = {.kind = kind, .root = root, .rc = MPI_SUCCESS};
	x.lens = n <= 64 ? lens_here : malloc((size_t)n * sizeof(uint64_t));
	void *tmp_out = NULL, *tmp_in = NULL;
	if (!x.lens)
		PMPI_Abort(comm, MPI_ERR_NO_MEM);
	/* Receive side first: in place, the send side is in it. */
	x.takes = kind == BLK_SCATTER ? !(is_root && in_place) : kind != BLK_GATHER || is_root;
	int blocks = kind == BLK_SCATTER ? 1 : n;
	if (x.takes || (kind == BLK_GATHER && is_root)) {
		x.room = xb_bytes(&bt, rtype, rcount, &x.rc);
		x.in = xb_side(&bt, recvbuf, rcount, rtype, blocks, x.room, in_place, &tmp_in, &x.rc);
	}
	x.sends = kind == BLK_SCATTER ? is_root : !(kind == BLK_GATHER && is_root);
	if (kind == BLK_GATHER && is_root && !in_place) {
		x.len = xb_bytes(&bt, stype, scount, &x.rc);
		x.out = xb_side(&bt, (void *)(uintptr_t)sendbuf, scount, stype, 1, x.len, true, &tmp_out, &x.rc);
	} else if (in_place && (kind == BLK_ALLGATHER || kind == BLK_ALLTOALL)) { /* the room is the block */
		x.len = x.room;
		x.out = kind == BLK_ALLGATHER ? x.in + (uint64_t)me * x.room : NULL;
		if (kind == BLK_ALLTOALL && x.in) { /* read before it is written */
			tmp_out = malloc(x.room * (uint64_t)n + 1);
			x.out = tmp_out ? memcpy(tmp_out, x.in, (size_t)(x.room * (uint64_t)n)) : NULL;
		}
	} else if (x.sends) {
		x.len = xb_bytes(&bt, stype, scount, &x.rc);
		x.out = xb_side(&bt, (void *)(uintptr_t)sendbuf, scount, stype, kind == BLK_SCATTER || kind == BLK_ALLTOALL ? n : 1,
				   x.len, true, &tmp_out, &x.rc);
	}
	if (((x.takes || (kind == BLK_GATHER && is_root)) && x.room && !x.in) || (x.sends && x.len && !x.out))
		PMPI_Abort(comm, MPI_ERR_NO_MEM);
	coll_count(calls[kind], true, x.sends ? x.len * (uint64_t)(kind == BLK_ALLTOALL || kind == BLK_SCATTER ? n : 1) : 0);
	if (n > 1)
		xb_steps(co, &x);
	if (in_place && kind != BLK_SCATTER) /* its own block is in place: taken whole */
		x.len = x.room;
	xb_own(co, &x, in_place && kind != BLK_ALLTOALL);
	bool taking = x.takes || (kind == BLK_GATHER && is_root);
	for (int r = 0; taking && !x.uniform && r < n; r++)
		if ((kind != BLK_SCATTER || r == root) && x.lens[r] > x.room && x.rc == MPI_SUCCESS)
			x.rc = MPI_ERR_TRUNCATE;
	if (taking && tmp_in && coll_error(co) == MPI_SUCCESS) {
		int e = blocks_unpack(recvbuf, rcount, rtype, blocks, x.in, x.room, x.lens, kind == BLK_SCATTER ? root : -1);
		if (e != MPI_SUCCESS && x.rc == MPI_SUCCESS)
			x.rc = e;
	}
	free(tmp_in);
	free(tmp_out);
	if (x.lens != lens_here)
		free(x.lens);
	return coll_result(co, comm, x.rc);
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
	       MPI_Datatype recvtype, int root, MPI_Comm comm)
{
	struct pm_coll *co = pm_coll_for(comm);
	int rc = co ? -1 : hier_gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, false, comm);
	if (rc < 0)
		rc = xb_call(co, BLK_GATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
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
		rc = xb_call(co, BLK_SCATTER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
	return rc >= 0 ? rc : PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
		  MPI_Datatype recvtype, MPI_Comm comm)
{
	struct pm_coll *co = pm_coll_for(comm);
	int rc = co ? -1 : hier_gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, true, comm);
	if (rc < 0)
		rc = xb_call(co, BLK_ALLGATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm);
	return rc >= 0 ? rc : PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
		 MPI_Datatype recvtype, MPI_Comm comm)
{
	int rc = hier_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
	if (rc >= 0)
		return rc;
	rc = xb_call(pm_coll_for(comm), BLK_ALLTOALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0,
		     comm);
	return rc >= 0 ? rc : PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
