/*
 * pack.c - packing and unpacking messages of non-contiguous datatypes, of
 * any size.
 *
 * MPI_Pack and MPI_Unpack count bytes in an int.  A message is packed in
 * pieces of at most pm.cfg.piece bytes (INT_MAX; PINSHM_MPI_PIECE, a test
 * hook, shrinks it), each a call on whole items at a position in the
 * packed bytes.  An item larger than a piece is walked through its type's
 * contents (MPI_Type_get_envelope, MPI_Type_get_contents), block by block
 * in the order of its type map, down to items that fit.  Every call goes
 * through pm.quiet_comm: an error is returned, not raised.
 */
#include <stdlib.h>

#include "plugin.h"

struct walk {
	char *packed;   /* the packed bytes */
	uint64_t at;    /* the position in them */
	uint64_t end;   /* where they end: a message may end inside an item */
	bool unpack;
	int rc;
};

static void walk_items(struct walk *w, uintptr_t base, uint64_t count, MPI_Datatype t);

/* @p base moved by @p n times @p step bytes (either may be negative). */
static uintptr_t at_disp(uintptr_t base, int64_t n, MPI_Aint step)
{
	return base + (uintptr_t)((MPI_Aint)n * step);
}

static bool going(const struct walk *w)
{
	return w->rc == MPI_SUCCESS && w->at < w->end;
}

/* A subarray's dimensions from the outermost (C order's first, Fortran's
 * last), from @p level on: each a block of subsizes at starts. */
static void walk_dims(struct walk *w, uintptr_t base, const int *ints, int level, MPI_Aint ext, MPI_Datatype old)
{
	int n = ints[0];
	const int *sizes = ints + 1, *sub = ints + 1 + n, *starts = ints + 1 + 2 * n;
	bool c_order = ints[1 + 3 * n] == MPI_ORDER_C;
	int d = c_order ? level : n - 1 - level;
	MPI_Aint stride = ext; /* of one index in dimension d */
	for (int i = c_order ? d + 1 : 0; i < (c_order ? n : d); i++)
		stride *= sizes[i];
	if (level == n - 1) {
		walk_items(w, at_disp(base, starts[d], stride), (uint64_t)sub[d], old);
		return;
	}
	for (int k = 0; k < sub[d] && going(w); k++)
		walk_dims(w, at_disp(base, (int64_t)starts[d] + k, stride), ints, level + 1, ext, old);
}

/* The indices that a darray's process holds in one dimension of @p gsize
 * items over @p psize processes, as ranges: the @p k th, or false past the
 * last.  BLOCK: one block of darg items (by default gsize / psize rounded
 * up) at coord * darg; CYCLIC: blocks of darg (by default 1) items every
 * psize * darg, the last one cut at gsize; NONE: every index. */
static bool darray_range(int distrib, int darg, int gsize, int psize, int coord, int k, int *lo, int *hi)
{
	int64_t b, from;
	switch (distrib) {
	case MPI_DISTRIBUTE_BLOCK:
		b = darg == MPI_DISTRIBUTE_DFLT_DARG ? ((int64_t)gsize + psize - 1) / psize : darg;
		from = (int64_t)coord * b;
		if (k > 0 || from >= gsize)
			return false;
		break;
	case MPI_DISTRIBUTE_CYCLIC:
		b = darg == MPI_DISTRIBUTE_DFLT_DARG ? 1 : darg;
		from = ((int64_t)k * psize + coord) * b;
		if (from >= gsize)
			return false;
		break;
	default: /* MPI_DISTRIBUTE_NONE */
		b = gsize;
		from = 0;
		if (k > 0)
			return false;
	}
	*lo = (int)from;
	*hi = (int)(from + b < gsize ? from + b : gsize);
	return *lo < *hi;
}

/* A darray's dimensions from the outermost (C order's first, Fortran's
 * last), from @p level on: in each, the process's ranges in increasing
 * order, as the type map has them.  @p ints: size, rank, ndims, gsizes,
 * distribs, dargs, psizes, order; @p coords: the process's place in the
 * grid. */
static void walk_darray_dims(struct walk *w, uintptr_t base, const int *ints, const int *coords, int level,
			     MPI_Aint ext, MPI_Datatype old)
{
	int n = ints[2];
	const int *gsizes = ints + 3, *distribs = gsizes + n, *dargs = distribs + n, *psizes = dargs + n;
	bool c_order = psizes[n] == MPI_ORDER_C;
	int d = c_order ? level : n - 1 - level, lo, hi;
	MPI_Aint stride = ext; /* of one index in dimension d */
	for (int i = c_order ? d + 1 : 0; i < (c_order ? n : d); i++)
		stride *= gsizes[i];
	for (int k = 0; going(w) && darray_range(distribs[d], dargs[d], gsizes[d], psizes[d], coords[d], k, &lo, &hi);
	     k++) {
		if (level == n - 1) {
			walk_items(w, at_disp(base, lo, stride), (uint64_t)(hi - lo), old);
			continue;
		}
		for (int j = lo; j < hi && going(w); j++)
			walk_darray_dims(w, at_disp(base, j, stride), ints, coords, level + 1, ext, old);
	}
}

/* A darray item: the process's place in the grid (its rank in row-major
 * order, whatever the array's order), then its dimensions. */
static void walk_darray(struct walk *w, uintptr_t base, const int *ints, MPI_Aint ext, MPI_Datatype old)
{
	int n = ints[2], rank = ints[1];
	const int *psizes = ints + 3 + 3 * n;
	int *coords = malloc((size_t)n * sizeof(*coords));
	if (!coords) {
		w->rc = MPI_ERR_NO_MEM;
		return;
	}
	for (int i = n - 1; i >= 0; i--) {
		coords[i] = rank % psizes[i];
		rank /= psizes[i];
	}
	walk_darray_dims(w, base, ints, coords, 0, ext, old);
	free(coords);
}

/* The blocks of one item at @p base whose type was made by @p comb from
 * @p ints, @p addrs and @p types, in the order of its type map. */
static void walk_blocks(struct walk *w, uintptr_t base, int comb, const int *ints, const MPI_Aint *addrs,
			const MPI_Datatype *types)
{
	MPI_Aint lb, ext;
	if (PMPI_Type_get_extent(types[0], &lb, &ext) != MPI_SUCCESS) {
		w->rc = MPI_ERR_TYPE;
		return;
	}
	int n = ints ? ints[0] : 0;
	switch (comb) {
	case MPI_COMBINER_RESIZED: /* the same data; only the bounds differ */
		return walk_items(w, base, 1, types[0]);
	case MPI_COMBINER_CONTIGUOUS:
		return walk_items(w, base, (uint64_t)n, types[0]);
	case MPI_COMBINER_VECTOR:
	case MPI_COMBINER_HVECTOR: {
		MPI_Aint stride = comb == MPI_COMBINER_VECTOR ? (MPI_Aint)ints[2] * ext : addrs[0];
		for (int j = 0; j < n && going(w); j++)
			walk_items(w, at_disp(base, j, stride), (uint64_t)ints[1], types[0]);
		return;
	}
	case MPI_COMBINER_INDEXED:
	case MPI_COMBINER_INDEXED_BLOCK: {
		bool block = comb == MPI_COMBINER_INDEXED_BLOCK;
		for (int j = 0; j < n && going(w); j++)
			walk_items(w, at_disp(base, block ? ints[2 + j] : ints[1 + n + j], ext),
				   (uint64_t)(block ? ints[1] : ints[1 + j]), types[0]);
		return;
	}
	case MPI_COMBINER_HINDEXED:
	case MPI_COMBINER_HINDEXED_BLOCK:
	case MPI_COMBINER_STRUCT: {
		bool block = comb == MPI_COMBINER_HINDEXED_BLOCK;
		for (int j = 0; j < n && going(w); j++)
			walk_items(w, base + (uintptr_t)addrs[j], (uint64_t)(block ? ints[1] : ints[1 + j]),
				   comb == MPI_COMBINER_STRUCT ? types[j] : types[0]);
		return;
	}
	case MPI_COMBINER_SUBARRAY:
		if (n > 0)
			walk_dims(w, base, ints, 0, ext, types[0]);
		return;
	case MPI_COMBINER_DARRAY:
		if (ints[2] > 0)
			walk_darray(w, base, ints, ext, types[0]);
		return;
	default: /* predefined types (never this large) */
		w->rc = MPI_ERR_TYPE;
	}
}

/* The type that @p t duplicates, through any number of MPI_Type_dup (a
 * reference of ours where it is not @p t), or MPI_DATATYPE_NULL. */
static MPI_Datatype undup(MPI_Datatype t, int *ni, int *na, int *nd, int *comb)
{
	MPI_Datatype held = MPI_DATATYPE_NULL;
	for (;;) {
		if (PMPI_Type_get_envelope(t, ni, na, nd, comb) != MPI_SUCCESS) {
			t = MPI_DATATYPE_NULL;
			break;
		}
		MPI_Datatype next;
		int i;
		MPI_Aint a;
		if (*comb != MPI_COMBINER_DUP || PMPI_Type_get_contents(t, 0, 0, 1, &i, &a, &next) != MPI_SUCCESS)
			break;
		if (held != MPI_DATATYPE_NULL)
			PMPI_Type_free(&held);
		t = held = next;
	}
	if (held != MPI_DATATYPE_NULL && held != t)
		PMPI_Type_free(&held);
	return t;
}

/* One item of @p t at @p base, larger than a piece: its blocks. */
static void walk_contents(struct walk *w, uintptr_t base, MPI_Datatype t)
{
	int ni, na, nd, comb;
	MPI_Datatype u = undup(t, &ni, &na, &nd, &comb);
	if (u == MPI_DATATYPE_NULL || comb == MPI_COMBINER_NAMED || nd < 1) {
		w->rc = MPI_ERR_TYPE;
		if (u != t && u != MPI_DATATYPE_NULL)
			PMPI_Type_free(&u);
		return;
	}
	int *ints = malloc(((size_t)ni + 1) * sizeof(*ints));
	MPI_Aint *addrs = malloc(((size_t)na + 1) * sizeof(*addrs));
	MPI_Datatype *types = malloc((size_t)nd * sizeof(*types));
	bool *derived = calloc((size_t)nd, sizeof(*derived));
	if (!ints || !addrs || !types || !derived) {
		w->rc = MPI_ERR_NO_MEM;
	} else if (PMPI_Type_get_contents(u, ni, na, nd, ints, addrs, types) != MPI_SUCCESS) {
		w->rc = MPI_ERR_TYPE;
	} else {
		/* A type built from need not be committed: pack with a
		 * committed duplicate of it. */
		for (int j = 0; j < nd; j++) {
			int x, c;
			MPI_Datatype dup = MPI_DATATYPE_NULL;
			if (PMPI_Type_get_envelope(types[j], &x, &x, &x, &c) != MPI_SUCCESS || c == MPI_COMBINER_NAMED)
				continue;
			derived[j] = true;
			if (PMPI_Type_dup(types[j], &dup) != MPI_SUCCESS || PMPI_Type_commit(&dup) != MPI_SUCCESS)
				w->rc = MPI_ERR_TYPE;
			PMPI_Type_free(&types[j]);
			types[j] = dup;
		}
		if (w->rc == MPI_SUCCESS)
			walk_blocks(w, base, comb, ni ? ints : NULL, addrs, types);
		for (int j = 0; j < nd; j++)
			if (derived[j] && types[j] != MPI_DATATYPE_NULL)
				PMPI_Type_free(&types[j]);
	}
	if (u != t)
		PMPI_Type_free(&u);
	free(ints);
	free(addrs);
	free(types);
	free(derived);
}

/* Write the first @p rest bytes of one packed item of @p dtype, at
 * @p src, where unpacking the item at @p elem would put them, and touch
 * nothing else.  Where each packed byte comes from is found by packing a
 * scratch copy of the item whose bytes hold their own offsets, a byte of
 * the offset at a time.  @return an MPI error code. */
static int unpack_head(MPI_Datatype dtype, int size, void *elem, const unsigned char *src, size_t rest)
{
	MPI_Aint tlb, span;
	if (PMPI_Type_get_true_extent(dtype, &tlb, &span) != MPI_SUCCESS || span <= 0)
		return MPI_ERR_TYPE;
	unsigned char *scratch = malloc((size_t)span), *packed = malloc((size_t)size);
	size_t *offset = calloc(rest, sizeof(*offset));
	int rc = scratch && packed && offset ? MPI_SUCCESS : MPI_ERR_NO_MEM;
	unsigned shift = 0;
	do {
		for (MPI_Aint j = 0; rc == MPI_SUCCESS && j < span; j++)
			scratch[j] = (unsigned char)((uint64_t)j >> shift);
		int at = 0;
		if (rc == MPI_SUCCESS && PMPI_Pack((void *)((uintptr_t)scratch - (uintptr_t)tlb), 1, dtype, packed, size,
						   &at, pm.quiet_comm) != MPI_SUCCESS)
			rc = MPI_ERR_INTERN;
		for (size_t i = 0; rc == MPI_SUCCESS && i < rest; i++)
			offset[i] |= (size_t)packed[i] << shift;
		shift += 8;
	} while (rc == MPI_SUCCESS && shift < 64 && ((uint64_t)span - 1) >> shift);
	for (size_t i = 0; rc == MPI_SUCCESS && i < rest; i++)
		*(unsigned char *)((uintptr_t)elem + (uintptr_t)tlb + offset[i]) = src[i];
	free(scratch);
	free(packed);
	free(offset);
	return rc;
}

/* @p count items of @p t at @p base, in pieces of whole items. */
static void walk_items(struct walk *w, uintptr_t base, uint64_t count, MPI_Datatype t)
{
	MPI_Count size;
	MPI_Aint lb, ext;
	if (PMPI_Type_size_x(t, &size) != MPI_SUCCESS || size < 0 || PMPI_Type_get_extent(t, &lb, &ext) != MPI_SUCCESS) {
		w->rc = MPI_ERR_TYPE;
		return;
	}
	if (size == 0)
		return;
	if ((uint64_t)size > pm.cfg.piece) {
		for (uint64_t i = 0; i < count && going(w); i++)
			walk_contents(w, at_disp(base, (int64_t)i, ext), t);
		return;
	}
	uint64_t per = pm.cfg.piece / (uint64_t)size;
	for (uint64_t i = 0; i < count && going(w);) {
		uint64_t n = count - i < per ? count - i : per;
		uint64_t fit = (w->end - w->at) / (uint64_t)size;
		void *item = (void *)at_disp(base, (int64_t)i, ext);
		if (fit == 0) { /* the message ends inside this item */
			w->rc = w->unpack ? unpack_head(t, (int)size, item, (unsigned char *)w->packed + w->at,
							w->end - w->at)
					  : MPI_ERR_INTERN;
			w->at = w->end;
			return;
		}
		if (n > fit)
			n = fit;
		int pos = 0, len = (int)(n * (uint64_t)size), rc;
		if (w->unpack)
			rc = PMPI_Unpack(w->packed + w->at, len, &pos, item, (int)n, t, pm.quiet_comm);
		else
			rc = PMPI_Pack(item, (int)n, t, w->packed + w->at, len, &pos, pm.quiet_comm);
		if (rc != MPI_SUCCESS || pos != len) {
			w->rc = rc != MPI_SUCCESS ? rc : MPI_ERR_INTERN;
			return;
		}
		w->at += (uint64_t)len;
		i += n;
	}
}

int pm_pack(const void *buf, int count, MPI_Datatype dtype, void *out, uint64_t bytes)
{
	struct walk w = {.packed = out, .end = bytes, .unpack = false, .rc = MPI_SUCCESS};
	walk_items(&w, (uintptr_t)buf, count > 0 ? (uint64_t)count : 0, dtype);
	return w.rc == MPI_SUCCESS && w.at != bytes ? MPI_ERR_INTERN : w.rc;
}

int pm_unpack(const void *src, uint64_t len, void *buf, int count, MPI_Datatype dtype)
{
	struct walk w = {.packed = (char *)(uintptr_t)src, .end = len, .unpack = true, .rc = MPI_SUCCESS};
	walk_items(&w, (uintptr_t)buf, count > 0 ? (uint64_t)count : 0, dtype);
	return w.rc;
}
