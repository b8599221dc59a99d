/*
 * coll_red.h - what the reductions of coll_ops.c share with those of
 * coll_scan.c and coll_nb.c: a reduction's layout (decided from its signature) and the
 * fold of the ranks' chunks of one step in the fixed order
 *   x[lo] op (x[lo+1] op (... op x[hi-1]))
 * (from the highest rank down, whatever the operation: MPI takes every
 * operation as associative; non-commutative ones are applied in rank order).
 */
#ifndef PINSHM_MPI_COLL_RED_H
#define PINSHM_MPI_COLL_RED_H

#include "coll.h"

/* out[i] = in[i] op inout[i] for @p k elements (coll_kern.c); @p out may
 * be @p inout (or @p in: element by element, each read before written). */
typedef void (*red_kernel_fn)(const void *in, const void *inout, void *out, int k);
/* This plugin's own kernel for @p op on @p type, or NULL: PMPI_Reduce_local
 * (which red_fold() takes too above RED_KERNEL_MAX bytes a chunk). */
#define RED_KERNEL_MAX 512u
red_kernel_fn red_kernel(MPI_Datatype type, MPI_Op op);

/* A reduction: what is decided from its signature (the same at every
 * rank: the type's size, the count, the op), and how the elements lie in
 * this rank's own memory (element i's bytes from buf + i * extent + tlb,
 * true_extent of them; its layout is its own, other ranks' may differ). */
struct red {
	MPI_Datatype type;
	MPI_Op op;
	size_t size;    /* signature: bytes of one element, packed */
	int per_chunk;  /* signature: elements a half holds, packed */
	MPI_Aint tlb, extent, true_extent;
	bool dense;     /* here: the elements are count * size contiguous bytes */
	bool small;     /* in the small slots (set by the caller that puts them there) */
	char *acc, *x;  /* here, not dense: two chunks in this layout, or NULL */
	const void *mine; /* dense: this rank's own chunk in its input, which red_fold() reads
			     instead of its slot, or NULL */
	red_kernel_fn kern; /* red_kernel() of the type and r->op (red_layout()), or NULL */
};

/* The reduction of @p type, or false where it is not carried: decided
 * from the type's size only (an element's packed bytes fit @p half). */
bool red_layout(struct red *r, MPI_Datatype type, size_t half);
/* Whether a reduction of @p count elements of @p type with r->op to
 * @p root (< 0: every rank) is carried through @p co (NULL: not carried),
 * from what matches at every rank only; its layout in *@p r.  The blocking
 * and the nonblocking calls decide alike. */
bool red_carried(const struct pm_coll *co, struct red *r, MPI_Datatype type, int count, int root);
/* Bytes that @p k elements span in this layout. */
size_t red_span(const struct red *r, int k);
/* Room for @p k elements in this layout: the buffer's address (elements
 * from there on), its memory in *@p base for free(). */
void *red_room(const struct red *r, int k, void **base);
/* @p count elements of @p type (@p bytes of data) from @p in to @p out. */
int typed_copy(const void *in, void *out, int count, MPI_Datatype type, uint64_t bytes);
/* The fixed order over ranks [@p lo, @p hi) of the @p k packed elements
 * at byte @p off of each one's half of step @p s (this rank's: r->mine,
 * where set), into @p out (the user's, at this chunk; folded there
 * directly where r->mine is set and is not @p out). */
int red_fold(struct pm_coll *co, const struct red *r, uint64_t s, int k, void *out, int lo, int hi, size_t off);

/* The @p n blocks of @p count items of @p type at @p buf packed to
 * (@p pack) or unpacked from @p packed (block r at r * @p bytes). */
int blocks_move(void *buf, int count, MPI_Datatype type, int n, char *packed, uint64_t bytes, bool pack);
/* The @p n blocks of @p count items of @p type at @p buf (block r at
 * buf + r * count * extent) unpacked from @p packed (block r at r * @p room),
 * @p lens[r] bytes of each at most (only those of @p only where >= 0). */
int blocks_unpack(void *buf, int count, MPI_Datatype type, int n, const char *packed, uint64_t room,
		  const uint64_t *lens, int only);
/* @p buf's @p n blocks as contiguous packed bytes: @p buf itself where it
 * is already, else a copy in *@p tmp (coll_ops.c says more). */
char *contiguous(void *buf, int count, MPI_Datatype type, int n, uint64_t bytes, bool fill, void **tmp, int *rc);

/* The flat bodies of coll_ops.c on an area @p co, for coll_hier.c's node
 * phases: the caller has checked what they check and counted the call;
 * @p comm is whose error handler an error goes to.  Bcast: to rank @p to
 * only (the others run the steps), or to every rank (@p to < 0).  Reduce:
 * @p r from red_layout() with its op set; @p root < 0: Allreduce. */
int coll_barrier(struct pm_coll *co);
int coll_bcast_to(struct pm_coll *co, void *buffer, int count, MPI_Datatype datatype, int root, int to,
		  MPI_Comm comm);
int coll_reduce(struct pm_coll *co, const struct red *r, const void *sendbuf, void *recvbuf, int count, int root,
		MPI_Comm comm);
/* Scan or (@p ex) Exscan of @p count elements (@p r as for coll_reduce()). */
int coll_scan(struct pm_coll *co, const struct red *r, const void *sendbuf, void *recvbuf, int count, bool ex,
	      MPI_Comm comm);
/* Gather of every rank's @p bytes at @p mine into @p all (block r at r *
 * @p bytes) at @p root (every rank: @p root < 0). */
int coll_gather_bytes(struct pm_coll *co, char *mine, char *all, uint64_t bytes, int root);

/* A v variant's node phase in packed bytes, rank 0 the root: Gatherv
 * (@p gather: every rank's @p bytes at @p mine to @p all at rank 0, rank
 * r's block there of @p lens[r] bytes, right after rank r - 1's) or
 * Scatterv (the reverse; @p mine NULL: this rank takes nothing).  @p all
 * and @p lens: at rank 0 only. */
int coll_vbytes(struct pm_coll *co, bool gather, char *mine, uint64_t bytes, char *all, const uint64_t *lens,
		MPI_Comm comm);

#endif /* PINSHM_MPI_COLL_RED_H */
