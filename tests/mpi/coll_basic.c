/*
 * coll_basic.c - MPI_Barrier (no rank leaves before the last entered),
 * MPI_Bcast, MPI_Reduce and MPI_Allreduce on
 * world, a reversed split, a dup and sub-communicators of up to 3 ranks,
 * checked against references every rank computes itself: int, double,
 * float complex, MPI_2INT (MINLOC, MAXLOC), a vector type; every
 * predefined operation on the types it is defined for; a commutative and
 * a non-commutative user operation; counts 0, 1, 7, 1000 and 1 M and 3
 * (Bcast, Reduce, Allreduce of ints); every root; MPI_IN_PLACE;
 * MPI_Gather, MPI_Scatter and MPI_Allgather of ints and of vector items at
 * the root, and MPI_Alltoall, at 0, 1, 7, 1000 and 64 K and 5 items a
 * block; Allreduce of rounded doubles the same bits at every rank and on
 * a second call;
 * Bcasts of 32 to 256 KiB and Reduces of 32 to 128 KiB back to back; a
 * Bcast and a Reduce after data that looks like their marks; collectives
 * while point-to-point messages are in flight; a barrier while more
 * messages than a ring holds wait for a receive.  Runs with any number
 * of ranks (1 and 3 too).
 */
#include <complex.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "colltest.h"

static const int counts[] = {0, 1, 7, 1000};
#define LARGE ((1 << 20) + 3) /* 1 M ints and a tail: many pieces, the last one short */

/* The communicator's turn (every rank takes them in one order): the same
 * call on two communicators sends different values, so that data one left
 * in an area cannot pass for the other's. */
static unsigned salt;

/* The value rank @p r contributes at element @p i of test @p t. */
static int ival(int r, int i, int t)
{
	return (int)(((unsigned)r * 7919u + (unsigned)i * 104729u + (unsigned)t * 31u + salt * 5u) % 23u) - 11;
}

/* ---- Bcast -------------------------------------------------------------- */

static void check_bcast(MPI_Comm comm, MPI_Datatype vec)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int *ib = malloc(LARGE * sizeof(int));
	double *db = malloc(1000 * sizeof(double));
	MT_CHECK(ib && db, "out of memory");
	for (int root = 0; root < size; root++) {
		for (unsigned c = 0; c < sizeof(counts) / sizeof(counts[0]) + 1; c++) {
			int n = c < sizeof(counts) / sizeof(counts[0]) ? counts[c] : (root == size - 1 ? LARGE : 0);
			for (int i = 0; i < n; i++)
				ib[i] = rank == root ? ival(root, i, n) : -99;
			MT_MPI(MPI_Bcast(ib, n, MPI_INT, root, comm));
			for (int i = 0; i < n; i++)
				MT_CHECK(ib[i] == ival(root, i, n), "bcast int root %d n %d [%d] = %d", root, n, i,
					 ib[i]);
		}
		for (int i = 0; i < 1000; i++)
			db[i] = rank == root ? 0.5 * i + root : -1;
		MT_MPI(MPI_Bcast(db, 1000, MPI_DOUBLE, root, comm));
		for (int i = 0; i < 1000; i++)
			MT_CHECK(db[i] == 0.5 * i + root, "bcast double root %d [%d]", root, i);
		/* A vector type at the root, plain ints elsewhere (same signature):
		 * 7 items of 2 ints every 3. */
		for (int i = 0; i < 3 * 7 * 2; i++)
			ib[i] = rank == root ? ival(root, i, 5) : -99;
		if (rank == root) {
			MT_MPI(MPI_Bcast(ib, 7, vec, root, comm));
		} else if (rank % 2) {
			MT_MPI(MPI_Bcast(ib, 14, MPI_INT, root, comm));
			for (int k = 0; k < 14; k++)
				MT_CHECK(ib[k] == ival(root, (k / 2) * 3 + k % 2, 5), "bcast vec->int [%d]", k);
		} else {
			MT_MPI(MPI_Bcast(ib, 7, vec, root, comm));
			for (int i = 0; i < 3 * 7 - 1; i++)
				MT_CHECK(ib[i] == (i % 3 == 2 ? -99 : ival(root, i, 5)), "bcast vec [%d] = %d", i, ib[i]);
		}
	}
	free(ib);
	free(db);
}

/* ---- reductions ------------------------------------------------------------ */

/* Reduce to each root, then Allreduce (in place at odd tests), of ints. */
static void check_int(MPI_Comm comm, MPI_Op op, int n, int t)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int *in = malloc((n + 1) * sizeof(int)), *want = malloc((n + 1) * sizeof(int));
	MT_CHECK(in && want, "out of memory");
	for (int i = 0; i < n; i++) {
		int v = ival(size - 1, i, t) % 3; /* PROD stays small */
		for (int r = size - 2; r >= 0; r--)
			v = iop(op, ival(r, i, t) % 3, v);
		want[i] = v;
		in[i] = ival(rank, i, t) % 3;
	}
	mt_check_reduce_ints(comm, op, n, t, in, want);
	free(in);
	free(want);
}

static void check_double_complex(MPI_Comm comm, int n, int t)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	double *d = malloc((n + 1) * sizeof(double)), *dr = malloc((n + 1) * sizeof(double));
	float complex *z = malloc((n + 1) * sizeof(*z)), *zr = malloc((n + 1) * sizeof(*z));
	MT_CHECK(d && dr && z && zr, "out of memory");
	MPI_Op dops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
	for (int o = 0; o < 4; o++) {
		for (int i = 0; i < n; i++)
			d[i] = ival(rank, i, t + o) % 2 + 1.5; /* exact in any order */
		MT_MPI(MPI_Allreduce(d, dr, n, MPI_DOUBLE, dops[o], comm));
		for (int i = 0; i < n; i++) {
			double w = ival(0, i, t + o) % 2 + 1.5;
			for (int r = 1; r < size; r++) {
				double x = ival(r, i, t + o) % 2 + 1.5;
				w = o == 0 ? w + x : o == 1 ? w * x : o == 2 ? (x > w ? x : w) : (x < w ? x : w);
			}
			MT_CHECK(dr[i] == w, "allreduce double op %d [%d] = %g want %g", o, i, dr[i], w);
		}
	}
	for (int o = 0; o < 2; o++) {
		for (int i = 0; i < n; i++)
			z[i] = (float)(ival(rank, i, t) % 2) + (float)(ival(rank, i, t + 1) % 2) * I;
		int root = (t + o) % size;
		MT_MPI(MPI_Reduce(z, zr, n, MPI_C_FLOAT_COMPLEX, o ? MPI_PROD : MPI_SUM, root, comm));
		for (int i = 0; rank == root && i < n; i++) {
			float complex w = o ? 1 : 0;
			for (int r = 0; r < size; r++) {
				float complex x = (float)(ival(r, i, t) % 2) + (float)(ival(r, i, t + 1) % 2) * I;
				w = o ? w * x : w + x;
			}
			MT_CHECK(zr[i] == w, "reduce complex op %d [%d]", o, i);
		}
	}
	free(d);
	free(dr);
	free(z);
	free(zr);
}

/* MINLOC and MAXLOC on MPI_2INT; a vector type's SUM; the user operations. */
static void check_pairs_vectors_user(MPI_Comm comm, MPI_Datatype vec, MPI_Datatype pair, MPI_Op aff, MPI_Op mab,
				     int n, int t)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int *p = malloc((2 * n + 1) * sizeof(int)), *pr = malloc((2 * n + 1) * sizeof(int));
	int *v = malloc((3 * n + 3) * sizeof(int)), *vr = malloc((3 * n + 3) * sizeof(int));
	MT_CHECK(p && pr && v && vr, "out of memory");
	for (int o = 0; o < 2; o++) {
		for (int i = 0; i < n; i++) {
			p[2 * i] = ival(rank, i, t) % 4;
			p[2 * i + 1] = rank;
		}
		MT_MPI(MPI_Allreduce(p, pr, n, MPI_2INT, o ? MPI_MAXLOC : MPI_MINLOC, comm));
		for (int i = 0; i < n; i++) {
			int best = ival(0, i, t) % 4, at = 0;
			for (int r = 1; r < size; r++) {
				int x = ival(r, i, t) % 4;
				if (o ? x > best : x < best)
					best = x, at = r;
			}
			MT_CHECK(pr[2 * i] == best && pr[2 * i + 1] == at, "%s [%d] = (%d,%d) want (%d,%d)",
				 o ? "maxloc" : "minloc", i, pr[2 * i], pr[2 * i + 1], best, at);
		}
	}
	/* Vector items (2 ints every 3): the gaps of the result stay. */
	int items = n / 3 + 1;
	for (int i = 0; i < 3 * items; i++) {
		v[i] = ival(rank, i, t);
		vr[i] = -55;
	}
	MPI_Op vsum;
	MT_MPI(MPI_Op_create(vecsum, 1, &vsum));
	MT_MPI(MPI_Allreduce(v, vr, items, vec, vsum, comm));
	MPI_Op_free(&vsum);
	for (int i = 0; i < 3 * items - 1; i++) {
		int w = 0;
		for (int r = 0; r < size; r++)
			w += ival(r, i, t);
		MT_CHECK(vr[i] == (i % 3 == 2 ? -55 : w), "vector sum [%d] = %d", i, vr[i]);
	}
	/* Affine maps composed in rank order: f0 . f1 . ... */
	for (int root = 0; root < size; root++) {
		for (int i = 0; i < n; i++) {
			p[2 * i] = (unsigned)(2 * rank + i + 1) | 1u;
			p[2 * i + 1] = (unsigned)(rank * 5 + i);
		}
		MT_MPI(MPI_Reduce(p, pr, n, pair, aff, root, comm));
		for (int i = 0; rank == root && i < n; i++) {
			unsigned a = 1, b = 0;
			for (int r = size - 1; r >= 0; r--) {
				unsigned fa = (unsigned)(2 * r + i + 1) | 1u, fb = (unsigned)(r * 5 + i);
				b = fa * b + fb;
				a = fa * a;
			}
			MT_CHECK((unsigned)pr[2 * i] == a && (unsigned)pr[2 * i + 1] == b, "affine root %d [%d]", root, i);
		}
	}
	check_int(comm, mab, n, t);
	free(p);
	free(pr);
	free(v);
	free(vr);
}

/* Bcasts of 32 KiB to 256 KiB and Reduces (MPI_SUM) of 32 to 128 KiB
 * back to back, the root rotating, each of other values: a receiver that
 * copied or folded a piece before its sender wrote it would find the
 * values of an older call. */
static void check_streams(MPI_Comm comm)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	enum { MOST = 65536, CALLS = 300 };
	int *b = malloc(MOST * sizeof(int)), *sum = malloc(MOST * sizeof(int));
	MT_CHECK(b && sum, "out of memory");
	for (int c = 0; c < CALLS; c++) {
		int n = 8192 << (c % 4), root = c % size;
		for (int i = 0; i < n; i++)
			b[i] = rank == root ? c * 7919 + i : -1;
		MT_MPI(MPI_Bcast(b, n, MPI_INT, root, comm));
		for (int i = 0; i < n; i++)
			MT_CHECK(b[i] == c * 7919 + i, "bcast %d of %d ints from %d: [%d] = %d want %d", c, n, root, i, b[i],
				 c * 7919 + i);
		n = 8192 << (c % 3);
		for (int i = 0; i < n; i++)
			b[i] = (c + rank) * 31 + i;
		MT_MPI(MPI_Reduce(b, sum, n, MPI_INT, MPI_SUM, root, comm));
		for (int i = 0; rank == root && i < n; i++) {
			int want = (c * size + size * (size - 1) / 2) * 31 + size * i;
			MT_CHECK(sum[i] == want, "reduce %d of %d ints to %d: [%d] = %d want %d", c, n, root, i, sum[i], want);
		}
	}
	free(b);
	free(sum);
}

/* Data that a call left in a rank's half must never pass for how far a
 * later Bcast or Reduce has been written (the marks of coll_ops.c): on a
 * fresh communicator (its first call is step 1), an Allreduce of 20000
 * uint64 whose word at 128 KiB reads as a mark of step 3 at rank 0 (and,
 * at step 4, of step 6 at rank 1), then a Barrier, then a 64 KiB Bcast
 * from rank 0 (a Reduce to rank 0) whose writer comes late. */
static void check_stale_marks(void)
{
	enum { C = 20000, AT = 16384, NB = 8192 };
	MPI_Comm comm;
	int rank, size;
	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	uint64_t *in = malloc(C * 8), *out = malloc(C * 8), *b = malloc(NB * 8);
	MT_CHECK(in && out && b, "out of memory");
	for (int i = 0; i < C; i++)
		in[i] = 1000 + (uint64_t)i;
	if (rank == 0)
		in[AT] = 3ull << 20 | NB * 8;
	MT_MPI(MPI_Allreduce(in, out, C, MPI_UINT64_T, MPI_SUM, comm)); /* step 1 */
	MT_MPI(MPI_Barrier(comm));
	for (int i = 0; i < NB; i++)
		b[i] = rank == 0 ? 7000000 + (uint64_t)i : 0;
	if (rank == 0)
		usleep(50000); /* the receivers look first */
	MT_MPI(MPI_Bcast(b, NB, MPI_UINT64_T, 0, comm));
	for (int i = 0; i < NB; i++)
		MT_CHECK(b[i] == 7000000 + (uint64_t)i, "bcast after a stale mark: [%d] = %llu", i,
			 (unsigned long long)b[i]);
	in[AT] = rank == 1 ? 6ull << 20 | NB * 8 : 1000 + (uint64_t)AT;
	MT_MPI(MPI_Allreduce(in, out, C, MPI_UINT64_T, MPI_SUM, comm)); /* step 4 */
	MT_MPI(MPI_Barrier(comm));
	for (int i = 0; i < NB; i++)
		b[i] = 5000000 + (uint64_t)i;
	if (rank != 0)
		usleep(50000); /* the root looks first */
	MT_MPI(MPI_Reduce(b, out, NB, MPI_UINT64_T, MPI_SUM, 0, comm));
	for (int i = 0; rank == 0 && i < NB; i++)
		MT_CHECK(out[i] == (uint64_t)size * (5000000 + (uint64_t)i), "reduce after a stale mark: [%d] = %llu", i,
			 (unsigned long long)out[i]);
	free(in);
	free(out);
	free(b);
	MPI_Comm_free(&comm);
}

/* Allreduce of @p N doubles whose sum depends on the order: the same bits
 * at every rank, and on a second call (40000: 320 KB, folded by slices
 * from 3 ranks on). */
static void check_bits(MPI_Comm comm, int N)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	double *x = malloc(N * sizeof(double)), *a = malloc(N * sizeof(double)), *b = malloc(N * sizeof(double));
	double *c = malloc(N * sizeof(double));
	MT_CHECK(x && a && b && c, "out of memory");
	for (int i = 0; i < N; i++)
		x[i] = 1.0 / (rank + 3) + i * 1e-7 * (rank % 2 ? 1e9 : 1);
	MT_MPI(MPI_Allreduce(x, a, N, MPI_DOUBLE, MPI_SUM, comm));
	MT_MPI(MPI_Allreduce(x, b, N, MPI_DOUBLE, MPI_SUM, comm));
	memcpy(c, a, N * sizeof(double));
	MT_MPI(MPI_Bcast(c, N, MPI_DOUBLE, 0, comm));
	MT_CHECK(!memcmp(a, b, N * sizeof(double)), "allreduce gave other bits the second time");
	MT_CHECK(!memcmp(a, c, N * sizeof(double)), "allreduce gave other bits than at rank 0");
	free(x);
	free(a);
	free(b);
	free(c);
}

/* Gather, Scatter and Allgather of @p k ints a rank (in place where
 * @p t is odd); Gather and Scatter of vector items at the root. */
static void check_blocks(MPI_Comm comm, MPI_Datatype vec, int k, int t)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	size_t all = (size_t)size * (size_t)(k + 1) * 3;
	int *mine = malloc((k + 1) * sizeof(int)), *got = malloc(all * sizeof(int));
	MT_CHECK(mine && got, "out of memory");
	for (int root = 0; root < size; root++) {
		bool inplace = t % 2 && rank == root;
		for (int i = 0; i < k; i++)
			mine[i] = ival(rank, i, t + root);
		for (size_t i = 0; i < all; i++)
			got[i] = -5;
		if (inplace)
			memcpy(got + (size_t)rank * k, mine, k * sizeof(int));
		MT_MPI(MPI_Gather(inplace ? MPI_IN_PLACE : mine, k, MPI_INT, got, k, MPI_INT, root, comm));
		for (int r = 0; rank == root && r < size; r++)
			for (int i = 0; i < k; i++)
				MT_CHECK(got[(size_t)r * k + i] == ival(r, i, t + root), "gather root %d from %d [%d]",
					 root, r, i);
		/* Scatter back what rank r would have: r's values. */
		for (int i = 0; i < k; i++)
			mine[i] = -6;
		MT_MPI(MPI_Scatter(got, k, MPI_INT, inplace ? MPI_IN_PLACE : mine, k, MPI_INT, root, comm));
		for (int i = 0; !inplace && i < k; i++)
			MT_CHECK(mine[i] == ival(rank, i, t + root), "scatter root %d [%d] = %d", root, i, mine[i]);
		/* At the root, items of 2 ints every 3. */
		int items = k / 2;
		for (int i = 0; i < 2 * items; i++)
			mine[i] = ival(rank, i, t);
		for (size_t i = 0; i < all; i++)
			got[i] = -5;
		if (rank == root)
			MT_MPI(MPI_Gather(mine, 2 * items, MPI_INT, got, items, vec, root, comm));
		else /* the receive side is not significant here */
			MT_MPI(MPI_Gather(mine, 2 * items, MPI_INT, NULL, -1, MPI_DATATYPE_NULL, root, comm));
		for (int r = 0; rank == root && r < size; r++)
			for (int i = 0; i < 3 * items; i++)
				MT_CHECK(got[(size_t)r * 3 * items + i] == (i % 3 == 2 ? -5 : ival(r, i / 3 * 2 + i % 3, t)),
					 "gather vec root %d from %d [%d]", root, r, i);
		for (int i = 0; i < 2 * items; i++)
			mine[i] = -6;
		if (rank == root)
			MT_MPI(MPI_Scatter(got, items, vec, mine, 2 * items, MPI_INT, root, comm));
		else
			MT_MPI(MPI_Scatter(NULL, -1, MPI_DATATYPE_NULL, mine, 2 * items, MPI_INT, root, comm));
		for (int i = 0; i < 2 * items; i++)
			MT_CHECK(mine[i] == ival(rank, i, t), "scatter vec root %d [%d]", root, i);
	}
	for (int i = 0; i < k; i++)
		mine[i] = ival(rank, i, t);
	if (t % 2)
		memcpy(got + (size_t)rank * k, mine, k * sizeof(int));
	MT_MPI(MPI_Allgather(t % 2 ? MPI_IN_PLACE : mine, k, MPI_INT, got, k, MPI_INT, comm));
	for (int r = 0; r < size; r++)
		for (int i = 0; i < k; i++)
			MT_CHECK(got[(size_t)r * k + i] == ival(r, i, t), "allgather from %d [%d]", r, i);
	/* Alltoall: block r of rank q holds ival(q * size + r, ...). */
	int *to = malloc(((size_t)size * k + 1) * sizeof(int));
	MT_CHECK(to, "out of memory");
	for (int r = 0; r < size; r++)
		for (int i = 0; i < k; i++)
			to[(size_t)r * k + i] = ival(rank * size + r, i, t);
	memcpy(got, to, (size_t)size * k * sizeof(int));
	MT_MPI(MPI_Alltoall(t % 2 ? MPI_IN_PLACE : to, k, MPI_INT, got, k, MPI_INT, comm));
	for (int r = 0; r < size; r++)
		for (int i = 0; i < k; i++)
			MT_CHECK(got[(size_t)r * k + i] == ival(r * size + rank, i, t), "alltoall from %d [%d]", r, i);
	free(to);
	free(mine);
	free(got);
}

/* A ring of messages in flight over world while @p comm reduces. */
static void check_with_p2p(MPI_Comm comm)
{
	enum { M = 1 << 16 }; /* past the eager size: a rendezvous */
	int *out = malloc(M * sizeof(int)), *in = malloc(M * sizeof(int)), sum = 0, one = 1;
	MPI_Request rq[2];
	MT_CHECK(in && out, "out of memory");
	for (int i = 0; i < M; i++)
		out[i] = mt_rank * M + i;
	MT_MPI(MPI_Irecv(in, M, MPI_INT, (mt_rank + mt_size - 1) % mt_size, 9, MPI_COMM_WORLD, &rq[0]));
	MT_MPI(MPI_Isend(out, M, MPI_INT, (mt_rank + 1) % mt_size, 9, MPI_COMM_WORLD, &rq[1]));
	MT_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm));
	int csize;
	MPI_Comm_size(comm, &csize);
	MT_CHECK(sum == csize, "allreduce beside p2p: %d", sum);
	MT_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
	int from = (mt_rank + mt_size - 1) % mt_size;
	for (int i = 0; i < M; i++)
		MT_CHECK(in[i] == from * M + i, "ring [%d]", i);
	free(in);
	free(out);
}

/* Messages that no receive waits for yet, more than a ring holds, from
 * rank 0 to rank 1 while rank 1 waits in a barrier of @p comm with
 * nothing posted: the barrier (the MPI library's where collectives are
 * off) must still take them in, or rank 0's sends never end. */
static void check_unexpected_flood(MPI_Comm comm)
{
	enum { N = 2048, LEN = 512 }; /* 4 MiB of ints, eager everywhere */
	int *buf = malloc(LEN * sizeof(int));
	MT_CHECK(buf, "out of memory");
	for (int k = 0; k < N && mt_rank == 0 && mt_size > 1; k++) {
		for (int i = 0; i < LEN; i++)
			buf[i] = k * LEN + i;
		MT_MPI(MPI_Send(buf, LEN, MPI_INT, 1, 11, MPI_COMM_WORLD));
	}
	MT_MPI(MPI_Barrier(comm));
	for (int k = 0; k < N && mt_rank == 1; k++) {
		MT_MPI(MPI_Recv(buf, LEN, MPI_INT, 0, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		MT_CHECK(buf[0] == k * LEN && buf[LEN - 1] == k * LEN + LEN - 1, "flood message %d: %d", k, buf[0]);
	}
	free(buf);
}

/* Where signature item j of a strided double vector lies: shape 0, one
 * vector of m items (stride ld); shape 1, items of two (stride ld). */
static size_t spos(int shape, int ld, size_t j)
{
	return shape ? (j / 2) * (size_t)(ld + 1) + (j % 2) * (size_t)ld : j * (size_t)ld;
}

/* SUM over items of a vector of doubles (blocks of 1), in the layout of
 * the datatype it is given (each rank's own). */
static void vdsum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	int ints[3], ni, na, nd, comb;
	MPI_Aint lb, extent, addr;
	MPI_Datatype inner;
	MPI_Type_get_envelope(*dt, &ni, &na, &nd, &comb);
	if (comb != MPI_COMBINER_VECTOR || ni != 3)
		MT_FAIL("vdsum: not a vector type");
	MPI_Type_get_contents(*dt, 3, 0, 1, ints, &addr, &inner);
	MPI_Type_get_extent(*dt, &lb, &extent);
	for (int i = 0; i < *len; i++)
		for (int j = 0; j < ints[0]; j++) {
			size_t at = (size_t)i * (size_t)extent + (size_t)j * (size_t)ints[2] * sizeof(double);
			*(double *)((char *)inout + at) += *(double *)((char *)in + at);
		}
}

/* Reductions whose ranks lay the same signature out differently: each
 * rank's own stride, its gaps left untouched. */
static void check_strided(MPI_Comm comm)
{
	MPI_Op op;
	MT_MPI(MPI_Op_create(vdsum, 1, &op));
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int ld = 1 + 9 * (rank % 4);
	for (int shape = 0; shape < 2; shape++) {
		int m = shape ? 2 : 500, count = shape ? 20000 : 1;
		size_t items = (size_t)m * (size_t)count, nd = spos(shape, ld, items - 1) + 2;
		double *in = malloc(nd * sizeof(double)), *out = malloc(nd * sizeof(double));
		MT_CHECK(in && out, "out of memory");
		MPI_Datatype t;
		MT_MPI(MPI_Type_vector(m, 1, ld, MPI_DOUBLE, &t));
		MT_MPI(MPI_Type_commit(&t));
		for (size_t i = 0; i < nd; i++)
			in[i] = out[i] = -1.0;
		for (size_t j = 0; j < items; j++)
			in[spos(shape, ld, j)] = rank + 1 + (double)(j % 7);
		MT_MPI(MPI_Allreduce(in, out, count, t, op, comm));
		for (size_t j = 0, k = 0; k < nd; k++) {
			bool item = j < items && spos(shape, ld, j) == k;
			double w = item ? size * (size + 1) / 2 + size * (double)(j++ % 7) : -1.0;
			MT_CHECK(out[k] == w, "strided allreduce shape %d [%zu] = %g want %g", shape, k, out[k], w);
		}
		for (int root = 0; root < size; root++) {
			/* Other values at each root: a slice left unwritten would show. */
			for (size_t j = 0; j < items; j++)
				in[spos(shape, ld, j)] = rank + 1 + (double)(j % 7) + root;
			for (size_t i = 0; i < nd; i++)
				out[i] = -1.0;
			MT_MPI(MPI_Reduce(in, out, count, t, op, root, comm));
			for (size_t j = 0, k = 0; rank == root && k < nd; k++) {
				bool item = j < items && spos(shape, ld, j) == k;
				double w = item ? size * (size + 1) / 2 + size * (double)(j++ % 7 + root) : -1.0;
				MT_CHECK(out[k] == w, "strided reduce shape %d [%zu] = %g want %g", shape, k, out[k], w);
			}
		}
		MPI_Type_free(&t);
		free(in);
		free(out);
	}
	MPI_Op_free(&op);
}

/* A Gather whose root alone passes a datatype it may not use (not
 * committed; the library may or may not say so there): every rank has
 * taken the same steps (the next call on the communicator is right). */
static void check_root_only_error(MPI_Comm comm)
{
	int rank, size, x = 7, all[64];
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	MPI_Datatype raw;
	MT_MPI(MPI_Type_contiguous(1, MPI_INT, &raw)); /* never committed */
	for (int root = 0; root < size && size <= 64; root++) {
		int rc = MPI_Gather(&x, 1, MPI_INT, all, 1, rank == root ? raw : MPI_INT, root, comm);
		MT_CHECK(rank == root || rc == MPI_SUCCESS, "gather, root %d: rc %d", root, rc);
		int s = 0, one = 1;
		MT_MPI(MPI_Allreduce(&one, &s, 1, MPI_INT, MPI_SUM, comm));
		MT_CHECK(s == size, "after the root's error: %d", s);
	}
	MPI_Type_free(&raw);
}

/* ---- Barrier ------------------------------------------------------------ */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts); /* one clock: every rank runs on this machine */
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* MPI_Barrier holds every rank until the last has entered: each rank in
 * turn enters 5 ms late, and no rank may leave before it entered. */
static void check_barrier_holds(MPI_Comm comm)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	double *in = malloc((size_t)size * sizeof(*in));
	MT_CHECK(in != NULL, "malloc");
	for (int late = 0; late < size && late < 8; late++) {
		if (rank == late) {
			struct timespec ts = {0, 5000000};
			nanosleep(&ts, NULL);
		}
		double t_in = now_s();
		MT_MPI(MPI_Barrier(comm));
		double t_out = now_s();
		MT_MPI(MPI_Allgather(&t_in, 1, MPI_DOUBLE, in, 1, MPI_DOUBLE, comm));
		for (int r = 0; r < size; r++)
			MT_CHECK(t_out >= in[r], "barrier, rank %d late: left %.6f s before rank %d entered", late,
				 in[r] - t_out, r);
	}
	free(in);
}

static void check_comm(MPI_Comm comm, MPI_Datatype vec, MPI_Datatype pair, MPI_Op aff, MPI_Op mab)
{
	MPI_Op iops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
	MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
	salt++;
	MT_MPI(MPI_Barrier(comm));
	check_barrier_holds(comm);
	check_bcast(comm, vec);
	for (unsigned c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		for (unsigned o = 0; o < sizeof(iops) / sizeof(iops[0]); o++)
			check_int(comm, iops[o], counts[c], (int)(c * 16 + o));
		check_double_complex(comm, counts[c], (int)c);
		check_pairs_vectors_user(comm, vec, pair, aff, mab, counts[c], (int)c);
		check_blocks(comm, vec, counts[c], (int)c);
		MT_MPI(MPI_Barrier(comm));
	}
	check_int(comm, MPI_SUM, LARGE, 99);
	check_blocks(comm, vec, (1 << 16) + 5, 3); /* 256 KiB and 20 bytes a block */
	check_bits(comm, 5000);
	check_bits(comm, 40000);
	check_streams(comm);
	check_strided(comm);
	check_root_only_error(comm);
	check_with_p2p(comm);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	mt_name = "coll_basic";
	MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &mt_size);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Datatype vec, pair;
	MPI_Op aff, mab;
	MPI_Datatype v2;
	MT_MPI(MPI_Type_contiguous(2, MPI_INT, &v2));
	MT_MPI(MPI_Type_create_resized(v2, 0, 3 * sizeof(int), &vec)); /* 2 ints every 3 */
	MPI_Type_free(&v2);
	MT_MPI(MPI_Type_commit(&vec));
	MT_MPI(MPI_Type_contiguous(2, MPI_UNSIGNED, &pair));
	MT_MPI(MPI_Type_commit(&pair));
	MT_MPI(MPI_Op_create(affine, 0, &aff));
	MT_MPI(MPI_Op_create(maxabs, 1, &mab));

	MPI_Comm rev, dup, sub;
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, mt_size - mt_rank, &rev));
	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, mt_rank / 3, mt_rank, &sub));
	check_stale_marks();
	check_unexpected_flood(MPI_COMM_WORLD);
	check_comm(MPI_COMM_WORLD, vec, pair, aff, mab);
	check_comm(rev, vec, pair, aff, mab);
	check_comm(sub, vec, pair, aff, mab);
	/* Two communicators used alternately, back to back. */
	for (int k = 0; k < 50; k++) {
		int x = mt_rank + k, s = 0;
		MT_MPI(MPI_Allreduce(&x, &s, 1, MPI_INT, MPI_SUM, k % 2 ? dup : rev));
		MT_CHECK(s == mt_size * (mt_size - 1) / 2 + k * mt_size, "alternating %d: %d", k, s);
	}
	check_comm(dup, vec, pair, aff, mab);
	MPI_Comm_free(&rev);
	MPI_Comm_free(&dup);
	MPI_Comm_free(&sub);
	MPI_Op_free(&aff);
	MPI_Op_free(&mab);
	MPI_Type_free(&vec);
	MPI_Type_free(&pair);
	MPI_Barrier(MPI_COMM_WORLD);
	if (mt_rank == 0)
		printf("coll_basic: ok\n");
	MPI_Finalize();
	return 0;
}
