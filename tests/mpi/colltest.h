/*
 * colltest.h - what the collective test programs of tests/mpi share: the
 * user operations they reduce with, and the run over their communicators.
 */
#ifndef PINSHM_COLLTEST_H
#define PINSHM_COLLTEST_H

#include <stdbool.h>
#include <stdlib.h>

#include "mpitest.h"

/* x -> a x + b composed: (f . g)(x) = f(g(x)); associative, not commutative. */
static inline void affine(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	unsigned *f = in, *g = inout;
	for (int i = 0; i < *len; i++, f += 2, g += 2) {
		unsigned a = f[0] * g[0], b = f[0] * g[1] + f[1];
		g[0] = a;
		g[1] = b;
	}
}

static inline void maxabs(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	int *a = in, *b = inout;
	for (int i = 0; i < *len; i++)
		b[i] = abs(a[i]) > abs(b[i]) ? abs(a[i]) : abs(b[i]);
}

/* SUM over items of the vector type (2 ints every 3). */
static inline void vecsum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	int *a = in, *b = inout;
	for (int i = 0; i < *len; i++)
		for (int j = 0; j < 2; j++)
			b[3 * i + j] += a[3 * i + j];
}

/* @p comm's first collective calls, nonblocking (MPI_Ibarrier and
 * MPI_Iallreduce), made at rank 0 before the others may make theirs: they
 * wait for its message first, so a call that waited for the other ranks
 * at rank 0 would hang the job. */
static inline void mt_first_nonblocking(MPI_Comm comm)
{
	int rank, size, go = 1, x, sum = -1;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	x = rank + 1;
	MPI_Request r[2];
	if (rank > 0)
		MT_MPI(MPI_Recv(&go, 1, MPI_INT, 0, 5, comm, MPI_STATUS_IGNORE));
	MT_MPI(MPI_Ibarrier(comm, &r[0]));
	MT_MPI(MPI_Iallreduce(&x, &sum, 1, MPI_INT, MPI_SUM, comm, &r[1]));
	for (int d = 1; rank == 0 && d < size; d++)
		MT_MPI(MPI_Send(&go, 1, MPI_INT, d, 5, comm));
	MT_MPI(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
	MT_CHECK(sum == size * (size + 1) / 2, "first iallreduce: %d", sum);
}

/* MPI_Init, rank and size, errors returned on world: @return whether the
 * program's argument asks for its short run ("short"). */
static inline bool mt_coll_init(int *argc, char ***argv, const char *name)
{
	MPI_Init(argc, argv);
	mt_name = name;
	MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &mt_size);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	return *argc > 1 && !strcmp((*argv)[1], "short");
}

/* The vector type of the programs: 2 ints every 3 (committed). */
static inline MPI_Datatype mt_vec3(void)
{
	MPI_Datatype v2, vec;
	MT_MPI(MPI_Type_contiguous(2, MPI_INT, &v2));
	MT_MPI(MPI_Type_create_resized(v2, 0, 3 * sizeof(int), &vec));
	MPI_Type_free(&v2);
	MT_MPI(MPI_Type_commit(&vec));
	return vec;
}

/* The predefined operations on ints (and maxabs, for a user's one). */
static inline int iop(MPI_Op op, int a, int b)
{
	if (op == MPI_SUM) return a + b;
	if (op == MPI_PROD) return a * b;
	if (op == MPI_MAX) return a > b ? a : b;
	if (op == MPI_MIN) return a < b ? a : b;
	if (op == MPI_LAND) return a && b;
	if (op == MPI_LOR) return a || b;
	if (op == MPI_LXOR) return !a != !b;
	if (op == MPI_BAND) return a & b;
	if (op == MPI_BOR) return a | b;
	if (op == MPI_BXOR) return a ^ b;
	return abs(a) > abs(b) ? abs(a) : abs(b); /* maxabs */
}

/* MPI_Reduce of @p n ints (this rank's @p in) to every root (in place
 * there where t + root is odd), then MPI_Allreduce (in place on odd
 * tests @p t): the root, then every rank, gets @p want; nothing past it. */
static inline void mt_check_reduce_ints(MPI_Comm comm, MPI_Op op, int n, int t, const int *in, const int *want)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int *out = malloc((n + 1) * sizeof(int));
	MT_CHECK(out != NULL, "out of memory");
	for (int root = 0; root < size; root++) {
		bool inplace = rank == root && (t + root) % 2;
		for (int i = 0; i < n; i++)
			out[i] = inplace ? in[i] : -77;
		out[n] = 4242;
		MT_MPI(MPI_Reduce(inplace ? MPI_IN_PLACE : in, out, n, MPI_INT, op, root, comm));
		for (int i = 0; rank == root && i < n; i++)
			MT_CHECK(out[i] == want[i], "reduce op test %d root %d n %d [%d] = %d want %d", t, root, n, i,
				 out[i], want[i]);
		MT_CHECK(out[n] == 4242, "reduce wrote past the count");
	}
	bool inplace = t % 2;
	for (int i = 0; i < n; i++)
		out[i] = inplace ? in[i] : -77;
	MT_MPI(MPI_Allreduce(inplace ? MPI_IN_PLACE : in, out, n, MPI_INT, op, comm));
	for (int i = 0; i < n; i++)
		MT_CHECK(out[i] == want[i], "allreduce op test %d n %d [%d] = %d want %d", t, n, i, out[i], want[i]);
	free(out);
}

/* @p check(comm, quick, large) on world (large unless @p quick), and unless
 * @p quick on a reversed split, a dup (quick) and sub-communicators of up
 * to 3 ranks; then a ring of point-to-point messages over world. */
static inline void mt_coll_comms(void (*check)(MPI_Comm, bool, bool), bool quick)
{
	check(MPI_COMM_WORLD, quick, !quick);
	if (!quick) {
		MPI_Comm rev, dup, sub;
		MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, mt_size - mt_rank, &rev));
		MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
		MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, mt_rank / 3, mt_rank, &sub));
		check(rev, false, false);
		check(dup, true, false);
		check(sub, false, false);
		MPI_Comm_free(&rev);
		MPI_Comm_free(&dup);
		MPI_Comm_free(&sub);
	}
	int token = mt_rank, back = -1;
	MT_MPI(MPI_Sendrecv(&token, 1, MPI_INT, (mt_rank + 1) % mt_size, 5, &back, 1, MPI_INT,
			    (mt_rank + mt_size - 1) % mt_size, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	MT_CHECK(back == (mt_rank + mt_size - 1) % mt_size, "ring: %d", back);
}

#endif /* PINSHM_COLLTEST_H */
