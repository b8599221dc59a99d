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
 * Allgather received as vector items at some ranks.
 *
 * What goes to the MPI library whole (check_mpi counts it): on the
 * interleaved split only, the affine operation's calls, that is per rank
 * one MPI_Reduce per root (size of world) and one MPI_Allreduce.
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

/* A commutative user operation on the vector type. */
static void check_vecsum(MPI_Comm comm, int rank, int size, MPI_Datatype vec, MPI_Op vsum)
{
	int in[21], out[21];
	for (int i = 0; i < 21; i++) {
		in[i] = ival(rank, i, 3);
		out[i] = -5;
	}
	MT_MPI(MPI_Allreduce(in, out, 7, vec, vsum, comm));
	for (int i = 0; i < 21; i++) {
		int want = 0;
		for (int r = 0; r < size; r++)
			want += ival(r, i, 3);
		MT_CHECK(out[i] == (i % 3 == 2 ? -5 : want), "vecsum [%d] = %d", i, out[i]);
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
	check_vecsum(comm, rank, size, vec, vsum);
	check_doubles(comm, rank, size);
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
	int token = mt_rank, back = -1;
	MT_MPI(MPI_Sendrecv(&token, 1, MPI_INT, (mt_rank + 1) % mt_size, 5, &back, 1, MPI_INT,
			    (mt_rank + mt_size - 1) % mt_size, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	MT_CHECK(back == (mt_rank + mt_size - 1) % mt_size, "ring: %d", back);
	MPI_Comm_free(&rev);
	MPI_Comm_free(&mix);
	MPI_Op_free(&aff);
	MPI_Op_free(&vsum);
	MPI_Type_free(&vec);
	MPI_Type_free(&pair);
	return mt_finish();
}
