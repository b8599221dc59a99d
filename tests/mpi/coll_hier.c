/*
 * coll_hier.c - MPI_Barrier, MPI_Bcast, MPI_Reduce, MPI_Allreduce,
 * MPI_Gather and MPI_Allgather on communicators that span (pretend) nodes
 * (run with PINSHM_MPI_NODES), checked against references every rank
 * computes itself: on world (each node a block of consecutive ranks), a
 * reversed split (blocks again) and an interleaved split (even ranks
 * first: no node is a block with 2 or 3 pretend nodes of 3 or 4 ranks);
 * every root; MPI_IN_PLACE at the root and on every rank; counts 0, 1, 7,
 * 1000 and one larger than an area's half; a vector type at some ranks
 * (same signature); a commutative user operation on the vector type; the
 * non-commutative affine operation; double sums of values that round, the
 * same bits at every rank and on a second call; blocks of a Gather or
 * Allgather received as vector items at some ranks.  Then Scatter,
 * Scatterv, Gatherv, Allgatherv, Reduce_scatter_block, Reduce_scatter,
 * Scan and Exscan the same way: every root, in place, counts 0 to 12 (a
 * v variant's blocks of 0, 2 or 4 ints, in reverse rank order), vector
 * items, ints and doubles, the affine operation and a vector type's Scan.
 *
 * What goes to the MPI library whole (check_mpi counts it): on the
 * interleaved split only, the affine operation's calls, that is per rank
 * one MPI_Reduce per root (size of world), one MPI_Allreduce and one
 * MPI_Reduce_scatter_block, and every Scan (6) and Exscan (5) there.
 * Everything else is carried.  Then a ring of point-to-point messages over
 * world (across the nodes too).  Runs with any number of ranks.
 */
#include <math.h>
#include <string.h>

#include "colltest.h"

static const int counts[] = {0, 1, 7, 1000, 300000};
#define NCOUNTS ((int)(sizeof(counts) / sizeof(counts[0])))

static int ival(int r, int i, int t)
{
	return (int)(((unsigned)r * 7919u + (unsigned)i * 104729u + (unsigned)t * 31u) % 23u) - 11;
}

static void check_bcast(MPI_Comm comm, int rank, int size, MPI_Datatype vec)
{
	int *b = malloc(counts[NCOUNTS - 1] * sizeof(int));
	MT_CHECK(b != NULL, "out of memory");
	for (int root = 0; root < size; root++) {
		for (int c = 0; c < NCOUNTS; c++) {
			int n = counts[c];
			for (int i = 0; i < n; i++)
				b[i] = rank == root ? ival(root, i, c) : -99;
			MT_MPI(MPI_Bcast(b, n, MPI_INT, root, comm));
			for (int i = 0; i < n; i++)
				MT_CHECK(b[i] == ival(root, i, c), "bcast root %d n %d [%d] = %d", root, n, i, b[i]);
		}
		/* 7 items of the vector type at odd ranks, 14 ints elsewhere. */
		for (int i = 0; i < 21; i++)
			b[i] = rank == root ? ival(root, i, 9) : -99;
		bool v = rank % 2;
		if (rank == root && !v)
			for (int k = 0; k < 14; k++)
				b[k] = ival(root, (k / 2) * 3 + k % 2, 9);
		MT_MPI(MPI_Bcast(b, v ? 7 : 14, v ? vec : MPI_INT, root, comm));
		for (int k = 0; k < 14; k++) {
			int at = v ? (k / 2) * 3 + k % 2 : k;
			MT_CHECK(b[at] == ival(root, (k / 2) * 3 + k % 2, 9), "bcast vec root %d [%d] = %d", root, k,
				 b[at]);
		}
	}
	free(b);
}

/* Gather to every root and Allgather of blocks of @p n ints: in place at
 * odd roots (Allgather: at every rank on odd tests), received as vector
 * items at odd ranks. */
static void check_gather(MPI_Comm comm, int rank, int size, MPI_Datatype vec, int n, int t)
{
	int *in = malloc((n + 1) * sizeof(int)), *out = malloc(((size_t)3 * n * size + 1) * sizeof(int));
	MT_CHECK(in && out, "out of memory");
	bool v = rank % 2 && n % 2 == 0; /* n ints: n / 2 vector items */
	for (int i = 0; i < n; i++)
		in[i] = ival(rank, i, t);
	for (int root = 0; root <= size; root++) {
		bool all = root == size, inplace = all ? t % 2 : rank == root && root % 2;
		size_t len = (size_t)(v ? 3 * n / 2 : n) * size;
		for (size_t i = 0; i <= len; i++)
			out[i] = -7;
		for (int i = 0; inplace && i < n; i++) /* this rank's block, at its place */
			out[v ? (size_t)rank * 3 * n / 2 + (i / 2) * 3 + i % 2 : (size_t)rank * n + i] = in[i];
		const void *send = inplace ? MPI_IN_PLACE : in;
		int rcount = v ? n / 2 : n;
		MPI_Datatype rtype = v ? vec : MPI_INT;
		if (all)
			MT_MPI(MPI_Allgather(send, n, MPI_INT, out, rcount, rtype, comm));
		else
			MT_MPI(MPI_Gather(send, n, MPI_INT, out, rcount, rtype, root, comm));
		for (int r = 0; (all || rank == root) && r < size; r++)
			for (int i = 0; i < n; i++) {
				size_t at = v ? (size_t)r * 3 * n / 2 + (i / 2) * 3 + i % 2 : (size_t)r * n + i;
				MT_CHECK(out[at] == ival(r, i, t), "%s root %d n %d rank %d's [%d] = %d", all ? "allgather" : "gather",
					 root, n, r, i, out[at]);
			}
		MT_CHECK(out[len] == -7, "gather wrote past the blocks");
	}
	free(in);
	free(out);
}

/* Reduce to every root and Allreduce of ints with @p op (colltest.h). */
static void check_int(MPI_Comm comm, int rank, int size, MPI_Op op, int n, int t)
{
	int *in = malloc((n + 1) * sizeof(int)), *want = malloc((n + 1) * sizeof(int));
	MT_CHECK(in && want, "out of memory");
	for (int i = 0; i < n; i++) {
		int v = ival(size - 1, i, t);
		for (int r = size - 2; r >= 0; r--)
			v = iop(op, ival(r, i, t), v);
		want[i] = v;
		in[i] = ival(rank, i, t);
	}
	mt_check_reduce_ints(comm, op, n, t, in, want);
	free(in);
	free(want);
}

/* The affine maps (a, b) of every rank composed in rank order. */
static void check_affine(MPI_Comm comm, int rank, int size, MPI_Datatype pair, MPI_Op aff)
{
	enum { N = 5 };
	unsigned in[2 * N], out[2 * N], want[2 * N];
	for (int i = 0; i < N; i++) {
		want[2 * i] = 1;
		want[2 * i + 1] = 0;
		for (int r = size - 1; r >= 0; r--) { /* want = f_r . want */
			unsigned a = 3u + 2u * (unsigned)(r + i), b = 7u * (unsigned)r + (unsigned)i;
			want[2 * i + 1] = a * want[2 * i + 1] + b;
			want[2 * i] *= a;
		}
		in[2 * i] = 3u + 2u * (unsigned)(rank + i);
		in[2 * i + 1] = 7u * (unsigned)rank + (unsigned)i;
	}
	for (int root = 0; root < size; root++) {
		memset(out, 0, sizeof(out));
		MT_MPI(MPI_Reduce(in, out, N, pair, aff, root, comm));
		MT_CHECK(rank != root || !memcmp(out, want, sizeof(out)), "affine reduce root %d", root);
	}
	memset(out, 0, sizeof(out));
	MT_MPI(MPI_Allreduce(in, out, N, pair, aff, comm));
	MT_CHECK(!memcmp(out, want, sizeof(out)), "affine allreduce");
}

/* A commutative user operation on the vector type: Allreduce, or Scan. */
static void check_vecsum(MPI_Comm comm, int rank, int size, MPI_Datatype vec, MPI_Op vsum, bool scan)
{
	int in[21], out[21];
	for (int i = 0; i < 21; i++) {
		in[i] = ival(rank, i, 3);
		out[i] = -5;
	}
	if (scan)
		MT_MPI(MPI_Scan(in, out, 7, vec, vsum, comm));
	else
		MT_MPI(MPI_Allreduce(in, out, 7, vec, vsum, comm));
	for (int i = 0; i < 21; i++) {
		int want = 0;
		for (int r = 0; r < (scan ? rank + 1 : size); r++)
			want += ival(r, i, 3);
		MT_CHECK(out[i] == (i % 3 == 2 ? -5 : want), "vecsum%s [%d] = %d", scan ? " scan" : "", i, out[i]);
	}
}

/* Sums of doubles that round: near the exact sum, the same bits at every
 * rank (compared through an allgather) and on a second call. */
static void check_doubles(MPI_Comm comm, int rank, int size)
{
	enum { N = 1000 };
	double *in = malloc(N * sizeof(double)), *a = malloc(N * sizeof(double)), *b = malloc(N * sizeof(double));
	double *all = malloc((size_t)size * N * sizeof(double));
	MT_CHECK(in && a && b && all, "out of memory");
	for (int i = 0; i < N; i++)
		in[i] = 1.0 / (3.0 + rank * 7 + i) * (i % 2 ? 1e8 : 1e-8);
	MT_MPI(MPI_Allreduce(in, a, N, MPI_DOUBLE, MPI_SUM, comm));
	memcpy(b, in, N * sizeof(double));
	MT_MPI(MPI_Allreduce(MPI_IN_PLACE, b, N, MPI_DOUBLE, MPI_SUM, comm));
	MT_CHECK(!memcmp(a, b, N * sizeof(double)), "double sums differ between two calls");
	for (int i = 0; i < N; i++) {
		double want = 0;
		for (int r = 0; r < size; r++)
			want += 1.0 / (3.0 + r * 7 + i) * (i % 2 ? 1e8 : 1e-8);
		MT_CHECK(fabs(a[i] - want) <= 1e-12 * fabs(want), "double sum [%d] = %g want %g", i, a[i], want);
	}
	MT_MPI(MPI_Allgather(a, N, MPI_DOUBLE, all, N, MPI_DOUBLE, comm));
	for (int r = 0; r < size; r++)
		MT_CHECK(!memcmp(all + (size_t)r * N, a, N * sizeof(double)), "rank %d's double sums differ", r);
	free(in);
	free(a);
	free(b);
	free(all);
}

/* ---- the scatters, the v variants, the reduce-scatters, the scans ---------- */

/* Rank r's block of the v variants at test @p t: 0, 2 or 4 ints. */
static int vcount(int r, int t)
{
	return (r + t) % 3 * 2;
}

/* Blocks in reverse rank order, one int between two: @return their end. */
static int reverse_displs(int size, const int *counts, int *displs)
{
	int at = 0;
	for (int r = size - 1; r >= 0; r--) {
		displs[r] = at + 1;
		at += counts[r] + 1;
	}
	return at + 1;
}

/* Index of int @p k of a block laid out as vector items (@p v) or ints. */
static int vat(bool v, int k)
{
	return v ? (k / 2) * 3 + k % 2 : k;
}

/* This rank's block after a scatter: @p c ints of (rank, t), as vector
 * items at odd ranks, nothing written past it. */
static void check_block(const int *out, int rank, int c, int t, const char *what, int root)
{
	bool v = rank % 2;
	for (int k = 0; k < c; k++)
		MT_CHECK(out[vat(v, k)] == ival(rank, k, t), "%s root %d [%d] = %d", what, root, k, out[vat(v, k)]);
	MT_CHECK(out[v ? c / 2 * 3 : c] == -5, "%s root %d wrote past the block", what, root);
}

/* Scatter (@p n ints a rank, sent as vector items at odd roots) and
 * Scatterv (vcount() ints, blocks in reverse order) from every root,
 * received as vector items at odd ranks, in place at roots where root + t
 * is odd. */
static void check_scatter(MPI_Comm comm, int rank, int size, MPI_Datatype vec, int n, int t)
{
	int *all = malloc(((size_t)3 * (n + 6) * size + 8) * sizeof(int)), *out = malloc((3 * (n + 6)) * sizeof(int));
	int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
	MT_CHECK(all && out && counts && displs, "out of memory");
	for (int r = 0; r < size; r++)
		counts[r] = vcount(r, t);
	int end = reverse_displs(size, counts, displs);
	bool rv = rank % 2;
	for (int root = 0; root < size; root++) {
		bool inplace = rank == root && (root + t) % 2, sv = root % 2;
		for (int i = 0; i < 3 * (n + 6); i++)
			out[i] = -5;
		for (int r = 0; rank == root && r < size; r++)
			for (int k = 0; k < n; k++)
				all[(size_t)r * (sv ? 3 * n / 2 : n) + vat(sv, k)] = ival(r, k, t);
		/* The root's arguments are not significant elsewhere: null there. */
		MPI_Datatype st = rank != root ? MPI_DATATYPE_NULL : sv ? vec : MPI_INT;
		MT_MPI(MPI_Scatter(all, sv ? n / 2 : n, st, inplace ? MPI_IN_PLACE : out, rv ? n / 2 : n,
				   rv ? vec : MPI_INT, root, comm));
		if (!inplace)
			check_block(out, rank, n, t, "scatter", root);
		for (int i = 0; rank == root && i < end; i++)
			all[i] = -1;
		for (int r = 0; rank == root && r < size; r++)
			for (int k = 0; k < counts[r]; k++)
				all[displs[r] + k] = ival(r, k, t);
		for (int i = 0; i < 3 * (n + 6); i++)
			out[i] = -5;
		int c = counts[rank];
		bool r = rank == root;
		MT_MPI(MPI_Scatterv(all, r ? counts : NULL, r ? displs : NULL, r ? MPI_INT : MPI_DATATYPE_NULL,
				    inplace ? MPI_IN_PLACE : out, rv ? c / 2 : c, rv ? vec : MPI_INT, root, comm));
		if (!inplace)
			check_block(out, rank, c, t, "scatterv", root);
	}
	free(all);
	free(out);
	free(counts);
	free(displs);
}

/* Gatherv to every root and Allgatherv of vcount() ints a rank (sent as
 * vector items at odd ranks) into blocks in reverse order: in place at
 * roots where root + t is odd (Allgatherv: every rank on odd tests). */
static void check_gatherv(MPI_Comm comm, int rank, int size, MPI_Datatype vec, int t)
{
	int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int)), in[6];
	MT_CHECK(counts && displs, "out of memory");
	for (int r = 0; r < size; r++)
		counts[r] = vcount(r, t);
	int end = reverse_displs(size, counts, displs), c = counts[rank], *out = malloc((end + 1) * sizeof(int));
	MT_CHECK(out != NULL, "out of memory");
	bool v = rank % 2;
	for (int k = 0; k < c; k++)
		in[vat(v, k)] = ival(rank, k, t);
	for (int root = 0; root <= size; root++) {
		bool all = root == size, inplace = all ? t % 2 : rank == root && (root + t) % 2;
		for (int i = 0; i <= end; i++)
			out[i] = -7;
		for (int k = 0; inplace && k < c; k++)
			out[displs[rank] + k] = ival(rank, k, t);
		const void *send = inplace ? MPI_IN_PLACE : in;
		if (all)
			MT_MPI(MPI_Allgatherv(send, v ? c / 2 : c, v ? vec : MPI_INT, out, counts, displs, MPI_INT, comm));
		else
			MT_MPI(MPI_Gatherv(send, v ? c / 2 : c, v ? vec : MPI_INT, out, rank == root ? counts : NULL,
					   rank == root ? displs : NULL, rank == root ? MPI_INT : MPI_DATATYPE_NULL, root, comm));
		for (int r = 0; (all || rank == root) && r < size; r++) {
			for (int k = 0; k < counts[r]; k++)
				MT_CHECK(out[displs[r] + k] == ival(r, k, t), "%s root %d rank %d's [%d] = %d",
					 all ? "allgatherv" : "gatherv", root, r, k, out[displs[r] + k]);
			MT_CHECK(out[displs[r] - 1] == -7, "gatherv wrote between the blocks");
		}
		MT_CHECK(out[end] == -7, "gatherv wrote past the blocks");
	}
	free(out);
	free(counts);
	free(displs);
}

/* The fold of ranks [0, @p hi) of element @p e with @p op. */
static int ifold(MPI_Op op, int hi, int e, int t)
{
	int v = ival(hi - 1, e, t);
	for (int r = hi - 2; r >= 0; r--)
		v = iop(op, ival(r, e, t), v);
	return v;
}

/* Reduce_scatter_block of @p n ints a rank and Reduce_scatter of
 * (r + t) % 3 at rank r, with @p op: in place on odd tests. */
static void check_rs(MPI_Comm comm, int rank, int size, MPI_Op op, int n, int t)
{
	int *counts = malloc(size * sizeof(int)), total = 0, mine = 0;
	MT_CHECK(counts != NULL, "out of memory");
	for (int r = 0; r < size; r++) {
		counts[r] = (r + t) % 3;
		mine += r < rank ? counts[r] : 0;
		total += counts[r];
	}
	int big = total > n * size ? total : n * size, *in = malloc((big + 1) * sizeof(int)),
	    *out = malloc((big + 1) * sizeof(int));
	MT_CHECK(in && out, "out of memory");
	bool inplace = t % 2;
	for (int v = 0; v < 2; v++) {
		int c = v ? counts[rank] : n, from = v ? mine : rank * n;
		for (int e = 0; e < big; e++)
			in[e] = out[e] = ival(rank, e, t);
		out[v ? (inplace ? total : c) : (inplace ? n * size : n)] = 4242;
		if (v)
			MT_MPI(MPI_Reduce_scatter(inplace ? MPI_IN_PLACE : in, out, counts, MPI_INT, op, comm));
		else
			MT_MPI(MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : in, out, n, MPI_INT, op, comm));
		for (int k = 0; k < c; k++)
			MT_CHECK(out[k] == ifold(op, size, from + k, t), "%s test %d [%d] = %d want %d",
				 v ? "reduce_scatter" : "reduce_scatter_block", t, k, out[k], ifold(op, size, from + k, t));
		MT_CHECK(out[v ? (inplace ? total : c) : (inplace ? n * size : n)] == 4242, "reduce_scatter wrote past");
	}
	free(counts);
	free(in);
	free(out);
}

/* Scan and Exscan of @p n ints with @p op, in place on odd tests (Exscan:
 * rank 0's result is undefined). */
static void check_scan(MPI_Comm comm, int rank, MPI_Op op, int n, int t)
{
	int *in = malloc((n + 1) * sizeof(int)), *out = malloc((n + 1) * sizeof(int));
	MT_CHECK(in && out, "out of memory");
	bool inplace = t % 2;
	for (int ex = 0; ex < 2; ex++) {
		for (int e = 0; e <= n; e++)
			in[e] = out[e] = ival(rank, e, t);
		out[n] = 4242;
		if (ex)
			MT_MPI(MPI_Exscan(inplace ? MPI_IN_PLACE : in, out, n, MPI_INT, op, comm));
		else
			MT_MPI(MPI_Scan(inplace ? MPI_IN_PLACE : in, out, n, MPI_INT, op, comm));
		for (int e = 0; e < n && rank + !ex > 0; e++)
			MT_CHECK(out[e] == ifold(op, rank + !ex, e, t), "%s test %d [%d] = %d want %d", ex ? "exscan" : "scan",
				 t, e, out[e], ifold(op, rank + !ex, e, t));
		MT_CHECK(out[n] == 4242, "scan wrote past the count");
	}
	free(in);
	free(out);
}

/* Rank r's affine map of element i. */
static void affine_of(int r, int i, unsigned *f)
{
	f[0] = 3u + 2u * (unsigned)(r + i);
	f[1] = 7u * (unsigned)r + (unsigned)i;
}

/* f[lo] . f[lo+1] . ... . f[hi-1] of element i. */
static void affine_fold(int lo, int hi, int i, unsigned *want)
{
	want[0] = 1;
	want[1] = 0;
	for (int r = hi - 1; r >= lo; r--) {
		unsigned f[2];
		affine_of(r, i, f);
		want[1] = f[0] * want[1] + f[1];
		want[0] *= f[0];
	}
}

/* The non-commutative affine operation on Scan, Exscan and
 * Reduce_scatter_block (2 pairs a rank). */
static void check_ordered(MPI_Comm comm, int rank, int size, MPI_Datatype pair, MPI_Op aff)
{
	unsigned *in = malloc((size_t)4 * size * sizeof(unsigned)), out[6], want[2];
	MT_CHECK(in != NULL, "out of memory");
	for (int i = 0; i < 2 * size; i++)
		affine_of(rank, i, in + 2 * i);
	for (int ex = 0; ex < 2; ex++) {
		if (ex)
			MT_MPI(MPI_Exscan(in, out, 3, pair, aff, comm));
		else
			MT_MPI(MPI_Scan(in, out, 3, pair, aff, comm));
		for (int i = 0; i < 3 && rank + !ex > 0; i++) {
			affine_fold(0, rank + !ex, i, want);
			MT_CHECK(out[2 * i] == want[0] && out[2 * i + 1] == want[1], "affine %s [%d]", ex ? "exscan" : "scan", i);
		}
	}
	MT_MPI(MPI_Reduce_scatter_block(in, out, 2, pair, aff, comm));
	for (int i = 0; i < 2; i++) {
		affine_fold(0, size, 2 * rank + i, want);
		MT_CHECK(out[2 * i] == want[0] && out[2 * i + 1] == want[1], "affine reduce_scatter_block [%d]", i);
	}
	free(in);
}

/* Doubles: Scan, Exscan and Reduce_scatter_block sums near the exact ones. */
static void check_dscan(MPI_Comm comm, int rank, int size)
{
	enum { N = 5 };
	double *in = malloc((size_t)N * size * sizeof(double)), *out = malloc((size_t)N * size * sizeof(double));
	MT_CHECK(in && out, "out of memory");
	for (int i = 0; i < N * size; i++)
		in[i] = 1.0 / (3.0 + rank * 7 + i) * (i % 2 ? 1e8 : 1e-8);
	for (int k = 0; k < 3; k++) {
		if (k == 0)
			MT_MPI(MPI_Scan(in, out, N, MPI_DOUBLE, MPI_SUM, comm));
		else if (k == 1)
			MT_MPI(MPI_Exscan(in, out, N, MPI_DOUBLE, MPI_SUM, comm));
		else
			MT_MPI(MPI_Reduce_scatter_block(in, out, N, MPI_DOUBLE, MPI_SUM, comm));
		int hi = k == 0 ? rank + 1 : k == 1 ? rank : size, from = k == 2 ? rank * N : 0;
		for (int i = 0; i < N && hi > 0; i++) {
			double want = 0;
			for (int r = 0; r < hi; r++)
				want += 1.0 / (3.0 + r * 7 + from + i) * ((from + i) % 2 ? 1e8 : 1e-8);
			MT_CHECK(fabs(out[i] - want) <= 1e-12 * fabs(want), "double %d [%d] = %g want %g", k, i, out[i], want);
		}
	}
	free(in);
	free(out);
}

static void check_comm(MPI_Comm comm, MPI_Datatype vec, MPI_Datatype pair, MPI_Op aff, MPI_Op vsum)
{
	static const MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_BXOR};
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	MT_MPI(MPI_Barrier(comm));
	check_bcast(comm, rank, size, vec);
	for (int c = 0; c < NCOUNTS; c++)
		check_gather(comm, rank, size, vec, c < NCOUNTS - 1 ? counts[c] : 40000, c);
	for (int c = 0; c < NCOUNTS; c++)
		check_int(comm, rank, size, ops[c % 3], counts[c], c);
	check_affine(comm, rank, size, pair, aff);
	check_vecsum(comm, rank, size, vec, vsum, false);
	check_doubles(comm, rank, size);
	for (int c = 0; c < 3; c++) {
		check_scatter(comm, rank, size, vec, 4 * c * c - 2 * c, c); /* 0, 2, 12 ints */
		check_gatherv(comm, rank, size, vec, c);
		check_rs(comm, rank, size, ops[c], counts[c], c);
		check_scan(comm, rank, ops[c], counts[c], c);
	}
	check_ordered(comm, rank, size, pair, aff);
	check_vecsum(comm, rank, size, vec, vsum, true);
	check_dscan(comm, rank, size);
	MT_MPI(MPI_Barrier(comm));
}

int main(int argc, char **argv)
{
	mt_coll_init(&argc, &argv, "coll_hier");
	MPI_Datatype vec = mt_vec3(), pair;
	MPI_Op aff, vsum;
	MT_MPI(MPI_Type_contiguous(2, MPI_UNSIGNED, &pair));
	MT_MPI(MPI_Type_commit(&pair));
	MT_MPI(MPI_Op_create(affine, 0, &aff));
	MT_MPI(MPI_Op_create(vecsum, 1, &vsum));
	MPI_Comm rev, mix;
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, mt_size - mt_rank, &rev));
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, (mt_rank % 2) * mt_size + mt_rank, &mix));
	check_comm(MPI_COMM_WORLD, vec, pair, aff, vsum);
	check_comm(rev, vec, pair, aff, vsum);
	check_comm(mix, vec, pair, aff, vsum);
	mt_check_ring();
	MPI_Comm_free(&rev);
	MPI_Comm_free(&mix);
	MPI_Op_free(&aff);
	MPI_Op_free(&vsum);
	MPI_Type_free(&vec);
	MPI_Type_free(&pair);
	return mt_finish();
}
