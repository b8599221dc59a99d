/*
 * coll_nb.c - MPI_Ibarrier, MPI_Ibcast, MPI_Ireduce, MPI_Iallreduce and
 * MPI_Iallgather, checked against references every rank computes itself:
 * counts 0, 1, 7, 1000 and one larger than a collective area's half (many
 * steps: check_mpi runs it with a small area); every root; MPI_IN_PLACE on some ranks; a vector type on some
 * ranks; several outstanding at once on one communicator and on two
 * (started in different orders at different ranks), completed in
 * different orders by MPI_Waitall, MPI_Testany, MPI_Testsome, MPI_Waitsome,
 * MPI_Waitany, MPI_Wait, MPI_Test and MPI_Request_get_status, mixed with
 * point-to-point requests; blocking collectives issued while nonblocking
 * ones are pending; MPI_Request_free and MPI_Cancel refused; a user's
 * operation freed (MPI_Op_free) right after the calls that apply it.  On world, a reversed split, a dup and sub-communicators of up
 * to 3 ranks (and of 1).  Runs with any number of ranks.
 */
#include <stdbool.h>

#include "mpitest.h"

static const int counts[] = {0, 1, 7, 1000, 1 << 15}; /* the last: 128 KiB, above a half */
#define NCOUNTS ((int)(sizeof(counts) / sizeof(counts[0])))
#define MAXREQ 64

/* The communicator's turn (every rank takes them in one order): the same
 * call on two communicators sends different values, so that data one left
 * in an area cannot pass for the other's. */
static unsigned salt;

static int ival(int r, int i, int t)
{
	return (int)(((unsigned)r * 7919u + (unsigned)i * 104729u + (unsigned)t * 31u + salt * 5u) % 23u) - 11;
}

static int isum(int size, int i, int t)
{
	int s = 0;
	for (int r = 0; r < size; r++)
		s += ival(r, i, t);
	return s;
}

/* A user's sum of the vector type's items: 2 ints every 3. */
static void add_ints(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	int *a = in, *b = inout;
	for (int k = 0; k < *len; k++) {
		b[3 * k] += a[3 * k];
		b[3 * k + 1] += a[3 * k + 1];
	}
}

/* A user's sum of ints, and a user's max (made while the sum is freed but
 * still in use: where the sum's memory went back, the max gets it). */
static void sum_ints(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	for (int k = 0; k < *len; k++)
		((int *)inout)[k] += ((int *)in)[k];
}

static void max_ints(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	int *a = in, *b = inout;
	for (int k = 0; k < *len; k++)
		b[k] = a[k] > b[k] ? a[k] : b[k];
}

/* ---- completing a set of requests, one way or another ------------------------- */

enum how { WAITALL, TESTANY, TESTSOME, WAITANY, WAITSOME, WAIT_REVERSE, TEST_STATUS, HOWS };

static void complete(MPI_Request *reqs, int n, enum how how)
{
	int left = 0;
	for (int i = 0; i < n; i++)
		left += reqs[i] != MPI_REQUEST_NULL;
	switch (how) {
	case WAITALL:
		MT_MPI(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
		return;
	case TESTANY:
		while (left) {
			int idx, flag;
			MT_MPI(MPI_Testany(n, reqs, &idx, &flag, MPI_STATUS_IGNORE));
			if (flag && idx != MPI_UNDEFINED)
				left--;
			MT_CHECK(!flag || idx != MPI_UNDEFINED || !left, "testany: none active, %d left", left);
		}
		return;
	case TESTSOME:
		while (left) {
			int out, idx[MAXREQ];
			MT_MPI(MPI_Testsome(n, reqs, &out, idx, MPI_STATUSES_IGNORE));
			MT_CHECK(out != MPI_UNDEFINED, "testsome: none active, %d left", left);
			left -= out;
		}
		return;
	case WAITANY:
		while (left--) {
			int idx;
			MT_MPI(MPI_Waitany(n, reqs, &idx, MPI_STATUS_IGNORE));
			MT_CHECK(idx != MPI_UNDEFINED, "waitany: none active");
		}
		return;
	case WAITSOME:
		while (left) {
			int out, idx[MAXREQ];
			MT_MPI(MPI_Waitsome(n, reqs, &out, idx, MPI_STATUSES_IGNORE));
			MT_CHECK(out != MPI_UNDEFINED && out > 0, "waitsome: %d with %d left", out, left);
			left -= out;
		}
		return;
	case WAIT_REVERSE:
		for (int i = n - 1; i >= 0; i--)
			MT_MPI(MPI_Wait(&reqs[i], MPI_STATUS_IGNORE));
		return;
	default:
		for (int i = 0; i < n; i++) {
			int flag = 0;
			while (!flag)
				MT_MPI(MPI_Request_get_status(reqs[i], &flag, MPI_STATUS_IGNORE));
			MT_MPI(MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE));
			MT_CHECK(flag && reqs[i] == MPI_REQUEST_NULL, "test after get_status: %d", flag);
		}
	}
}

/* ---- one round: every call at one count, all outstanding ---------------------- */

struct round {
	int n, t;
	int *bc, *ar, *aro, *rd, *rdo, *ag, *agin; /* ag: size blocks of n; aro, rdo, agin: not in place */
	int p2p_out[4], p2p_in[4];
};

/* Start every call at count @p n (test @p t) on @p comm with @p root,
 * and a point-to-point exchange with the neighbours, into @p reqs. */
static int start_round(MPI_Comm comm, struct round *R, int root, MPI_Request *reqs)
{
	int rank, size, k = 0, n = R->n, t = R->t;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	for (int i = 0; i < n; i++) {
		R->bc[i] = rank == root ? ival(root, i, t) : -99;
		R->ar[i] = ival(rank, i, t + 1);
		R->rd[i] = ival(rank, i, t + 2);
	}
	for (int r = 0; r < size; r++)
		for (int i = 0; i < n; i++)
			R->ag[(size_t)r * n + i] = r == rank ? ival(rank, i, t + 3) : -99;
	for (int i = 0; i < n; i++)
		R->agin[i] = ival(rank, i, t + 3);
	MT_MPI(MPI_Ibarrier(comm, &reqs[k++]));
	MT_MPI(MPI_Ibcast(R->bc, n, MPI_INT, root, comm, &reqs[k++]));
	/* In place on every other test (MPI: at every rank or none). */
	bool ip = t % 2;
	MT_MPI(MPI_Iallreduce(ip ? MPI_IN_PLACE : R->ar, ip ? R->ar : R->aro, n, MPI_INT, MPI_SUM, comm, &reqs[k++]));
	R->p2p_out[0] = rank * 1000 + t;
	MT_MPI(MPI_Isend(&R->p2p_out[0], 1, MPI_INT, (rank + 1) % size, 7, comm, &reqs[k++]));
	MT_MPI(MPI_Irecv(&R->p2p_in[0], 1, MPI_INT, (rank + size - 1) % size, 7, comm, &reqs[k++]));
	/* In place at the root, on every other test. */
	bool rip = rank == root && t % 2;
	MT_MPI(MPI_Ireduce(rip ? MPI_IN_PLACE : R->rd, rank == root ? (rip ? R->rd : R->rdo) : NULL, n, MPI_INT,
			   MPI_MAX, root, comm, &reqs[k++]));
	MT_MPI(MPI_Iallgather(ip ? MPI_IN_PLACE : R->agin, n, MPI_INT, R->ag, n, MPI_INT, comm,
			      &reqs[k++]));
	return k;
}

static void check_round(MPI_Comm comm, const struct round *R, int root)
{
	int rank, size, n = R->n, t = R->t;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	const int *ar = t % 2 ? R->ar : R->aro;
	for (int i = 0; i < n; i++) {
		MT_CHECK(ar[i] == isum(size, i, t + 1), "iallreduce n %d t %d [%d] = %d", n, t, i, ar[i]);
		if (rank == root) {
			const int *rd = t % 2 ? R->rd : R->rdo;
			int m = ival(0, i, t + 2);
			for (int r = 1; r < size; r++)
				m = ival(r, i, t + 2) > m ? ival(r, i, t + 2) : m;
			MT_CHECK(rd[i] == m, "ireduce root %d n %d [%d] = %d, not %d", root, n, i, rd[i], m);
		} else {
			MT_CHECK(R->bc[i] == ival(root, i, t), "ibcast root %d n %d [%d] = %d", root, n, i, R->bc[i]);
		}
		for (int r = 0; r < size; r++)
			MT_CHECK(R->ag[(size_t)r * n + i] == ival(r, i, t + 3), "iallgather n %d block %d [%d] = %d", n, r,
				 i, R->ag[(size_t)r * n + i]);
	}
	int from = (rank + size - 1) % size;
	MT_CHECK(R->p2p_in[0] == from * 1000 + t, "p2p among them: %d", R->p2p_in[0]);
}

static void alloc_round(struct round *R, int n, int size)
{
	size_t m = n ? (size_t)n : 1;
	R->n = n;
	R->bc = mt_alloc(m * sizeof(int));
	R->ar = mt_alloc(m * sizeof(int));
	R->rd = mt_alloc(m * sizeof(int));
	R->aro = mt_alloc(m * sizeof(int));
	R->rdo = mt_alloc(m * sizeof(int));
	R->agin = mt_alloc(m * sizeof(int));
	R->ag = mt_alloc(m * (size_t)size * sizeof(int));
}

static void free_round(struct round *R)
{
	free(R->bc);
	free(R->ar);
	free(R->rd);
	free(R->aro);
	free(R->rdo);
	free(R->agin);
	free(R->ag);
}

/* Every count, every root; two rounds outstanding at once on @p comm. */
static void check_counts(MPI_Comm comm)
{
	int size;
	MPI_Comm_size(comm, &size);
	int way = 0;
	for (int c = 0; c < NCOUNTS; c++) {
		struct round a, b;
		alloc_round(&a, counts[c], size);
		alloc_round(&b, counts[c], size);
		for (int root = 0; root < size; root++) {
			if (counts[c] > 1000 && root != size - 1)
				continue; /* the large count at one root */
			MPI_Request reqs[MAXREQ];
			a.t = 10 * c + root;
			b.t = a.t + 5;
			int k = start_round(comm, &a, root, reqs);
			k += start_round(comm, &b, (root + 1) % size, reqs + k);
			complete(reqs, k, (enum how)(way++ % HOWS));
			check_round(comm, &a, root);
			check_round(comm, &b, (root + 1) % size);
		}
		free_round(&a);
		free_round(&b);
	}
}

/* Two communicators, started in one order at even ranks and the other at
 * odd ones; a blocking collective on each while both are pending. */
static void check_two(MPI_Comm one, MPI_Comm two)
{
	int rank, size;
	MPI_Comm_rank(one, &rank);
	MPI_Comm_size(one, &size);
	struct round a, b;
	for (int c = 1; c < NCOUNTS; c++) {
		alloc_round(&a, counts[c], size);
		alloc_round(&b, counts[c], size);
		a.t = 100 + c;
		b.t = 200 + c;
		MPI_Request reqs[MAXREQ];
		int k = 0;
		if (rank % 2) {
			k += start_round(two, &b, 0, reqs + k);
			k += start_round(one, &a, size - 1, reqs + k);
		} else {
			k += start_round(one, &a, size - 1, reqs + k);
			k += start_round(two, &b, 0, reqs + k);
		}
		/* Blocking calls on both while all that is pending. */
		int x = rank + c, s = -1;
		MT_MPI(MPI_Allreduce(&x, &s, 1, MPI_INT, MPI_SUM, one));
		MT_CHECK(s == size * (size - 1) / 2 + c * size, "blocking allreduce among them: %d", s);
		int rank2;
		MPI_Comm_rank(two, &rank2);
		int v = rank2 == 0 ? 4242 + c : -1;
		MT_MPI(MPI_Bcast(&v, 1, MPI_INT, 0, two));
		MT_CHECK(v == 4242 + c, "blocking bcast among them: %d", v);
		complete(reqs, k, (enum how)(c % HOWS));
		check_round(one, &a, size - 1);
		check_round(two, &b, 0);
		free_round(&a);
		free_round(&b);
	}
}

/* Derived types: a vector at some ranks, plain ints at others. */
static void check_vector(MPI_Comm comm, MPI_Datatype vec, MPI_Op op)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	const int n = 700; /* items of 2 ints every 3 */
	int *v = mt_alloc(3 * n * sizeof(int)), *w = mt_alloc(3 * n * (size_t)size * sizeof(int));
	for (int root = 0; root < size; root++) {
		for (int i = 0; i < 3 * n; i++)
			v[i] = rank == root ? ival(root, i, 50) : -99;
		MPI_Request rq[2];
		bool use_vec = rank == root || rank % 2 == 0;
		MT_MPI(MPI_Ibcast(v, use_vec ? n : 2 * n, use_vec ? vec : MPI_INT, root, comm, &rq[0]));
		MT_MPI(MPI_Ibarrier(comm, &rq[1]));
		MT_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
		for (int k = 0; k < 2 * n && rank != root; k++) {
			int want = ival(root, (k / 2) * 3 + k % 2, 50);
			int got = use_vec ? v[(k / 2) * 3 + k % 2] : v[k];
			MT_CHECK(got == want, "ibcast vec root %d [%d] = %d", root, k, got);
		}
	}
	/* Iallreduce of vector items (a user operation: Open MPI's own takes
	 * no predefined one on a derived type; the type freed before
	 * completion) and Iallgather into vector items. */
	MPI_Datatype mine;
	MT_MPI(MPI_Type_dup(vec, &mine));
	for (int i = 0; i < 3 * n; i++)
		v[i] = ival(rank, i, 51);
	MPI_Request rq[2];
	MT_MPI(MPI_Iallreduce(MPI_IN_PLACE, v, n, mine, op, comm, &rq[0]));
	MT_MPI(MPI_Type_free(&mine));
	for (size_t i = 0; i < 3 * (size_t)n * size; i++)
		w[i] = -99;
	int g[2] = {ival(rank, 0, 52), ival(rank, 1, 52)};
	MT_MPI(MPI_Iallgather(g, 2, MPI_INT, w, 1, vec, comm, &rq[1]));
	MT_MPI(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
	MT_MPI(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
	for (int i = 0; i < 3 * n; i++)
		MT_CHECK(v[i] == (i % 3 == 2 ? ival(rank, i, 51) : isum(size, i, 51)), "iallreduce vec [%d] = %d", i,
			 v[i]);
	for (int r = 0; r < size; r++)
		for (int k = 0; k < 2; k++)
			MT_CHECK(w[3 * r + k] == ival(r, k, 52) && w[3 * r + 2] == -99, "iallgather vec block %d [%d]", r, k);
	free(v);
	free(w);
}

/* MPI_Request_free and MPI_Cancel of a collective's request: erroneous
 * (MPI-3.1 5.12), refused as Open MPI refuses them while it is active (at
 * rank 0, before the others start it: they wait for its message); the
 * request stays.  Accepted where it is complete already. */
static void check_free_cancel(MPI_Comm comm)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int big[4096], x = rank, s = 0, go = 1;
	for (int i = 0; i < 4096; i++)
		big[i] = i;
	MPI_Request r[2];
	if (rank > 0)
		MT_MPI(MPI_Recv(&go, 1, MPI_INT, 0, 9, comm, MPI_STATUS_IGNORE));
	MT_MPI(MPI_Iallreduce(MPI_IN_PLACE, big, 4096, MPI_INT, MPI_SUM, comm, &r[0]));
	int rc = MPI_Request_free(&r[0]);
	MT_CHECK(rc == MPI_SUCCESS ? r[0] == MPI_REQUEST_NULL : r[0] != MPI_REQUEST_NULL, "request_free: %d", rc);
	MT_CHECK(rank > 0 || size == 1 || rc != MPI_SUCCESS, "request_free of an active collective accepted");
	MT_MPI(MPI_Ibarrier(comm, &r[1]));
	rc = MPI_Cancel(&r[1]);
	MT_CHECK(rank > 0 || size == 1 || rc != MPI_SUCCESS, "cancel of an active collective accepted");
	for (int d = 1; rank == 0 && d < size; d++)
		MT_MPI(MPI_Send(&go, 1, MPI_INT, d, 9, comm));
	MT_MPI(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
	for (int i = 0; i < 4096 && r[0] == MPI_REQUEST_NULL; i++)
		MT_CHECK(big[i] == size * i, "iallreduce after a refused free [%d] = %d", i, big[i]);
	MT_MPI(MPI_Allreduce(&x, &s, 1, MPI_INT, MPI_SUM, comm));
	MT_CHECK(s == size * (size - 1) / 2, "allreduce after them: %d", s);
}

/* MPI_Op_free of a user's op right after an Iallreduce and an Ireduce
 * that apply it, at rank 0 before the others start theirs (they wait for
 * its message), so that rank 0 applies it after the free; another op made
 * meanwhile, used and freed the same way.  Both results right. */
static void check_op_free(MPI_Comm comm)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	const int n = 5000; /* several steps in a small area */
	int *a = mt_alloc(n * sizeof(int)), *ao = mt_alloc(n * sizeof(int));
	int *b = mt_alloc(n * sizeof(int)), *bo = mt_alloc(n * sizeof(int));
	int *c = mt_alloc(n * sizeof(int)), go = 1;
	for (int i = 0; i < n; i++) {
		a[i] = ival(rank, i, 60);
		b[i] = ival(rank, i, 61);
		c[i] = ival(rank, i, 62);
		ao[i] = bo[i] = -99;
	}
	if (rank > 0)
		MT_MPI(MPI_Recv(&go, 1, MPI_INT, 0, 9, comm, MPI_STATUS_IGNORE));
	MPI_Op sum, max;
	MPI_Request r[3];
	MT_MPI(MPI_Op_create(sum_ints, 1, &sum));
	MT_MPI(MPI_Iallreduce(a, ao, n, MPI_INT, sum, comm, &r[0]));
	MT_MPI(MPI_Ireduce(b, rank == 0 ? bo : NULL, n, MPI_INT, sum, 0, comm, &r[1]));
	MT_MPI(MPI_Op_free(&sum));
	MT_CHECK(sum == MPI_OP_NULL, "op_free left the handle");
	MT_MPI(MPI_Op_create(max_ints, 1, &max));
	MT_MPI(MPI_Iallreduce(MPI_IN_PLACE, c, n, MPI_INT, max, comm, &r[2]));
	MT_MPI(MPI_Op_free(&max));
	for (int d = 1; rank == 0 && d < size; d++)
		MT_MPI(MPI_Send(&go, 1, MPI_INT, d, 9, comm));
	MT_MPI(MPI_Waitall(3, r, MPI_STATUSES_IGNORE));
	for (int i = 0; i < n; i++) {
		int m = ival(0, i, 62);
		for (int q = 1; q < size; q++)
			m = ival(q, i, 62) > m ? ival(q, i, 62) : m;
		MT_CHECK(ao[i] == isum(size, i, 60), "iallreduce, op freed: [%d] = %d", i, ao[i]);
		MT_CHECK(rank > 0 || bo[i] == isum(size, i, 61), "ireduce, op freed: [%d] = %d", i, bo[i]);
		MT_CHECK(c[i] == m, "iallreduce, second op freed: [%d] = %d, not %d", i, c[i], m);
	}
	free(a);
	free(ao);
	free(b);
	free(bo);
	free(c);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	mt_name = "coll_nb";
	MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &mt_size);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Datatype v2, vec;
	MPI_Op add;
	MT_MPI(MPI_Op_create(add_ints, 1, &add));
	MT_MPI(MPI_Type_contiguous(2, MPI_INT, &v2));
	MT_MPI(MPI_Type_create_resized(v2, 0, 3 * sizeof(int), &vec)); /* 2 ints every 3 */
	MPI_Type_free(&v2);
	MT_MPI(MPI_Type_commit(&vec));
	MPI_Comm rev, dup, sub;
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, mt_size - mt_rank, &rev));
	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, mt_rank / 3, mt_rank, &sub));
	MPI_Comm comms[] = {MPI_COMM_WORLD, rev, sub, dup};
	for (int i = 0; i < 4; i++) /* a blocking call first: the plugin carries the later ones (coll_nb_first) */
		MT_MPI(MPI_Barrier(comms[i]));
	for (int i = 0; i < 3; i++, salt++) {
		MPI_Comm_set_errhandler(comms[i], MPI_ERRORS_RETURN);
		check_counts(comms[i]);
		check_vector(comms[i], vec, add);
		check_free_cancel(comms[i]);
		check_op_free(comms[i]);
	}
	MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
	check_two(rev, dup);
	check_two(MPI_COMM_WORLD, dup);
	MPI_Comm_free(&rev);
	MPI_Comm_free(&dup);
	MPI_Comm_free(&sub);
	MPI_Type_free(&vec);
	MPI_Op_free(&add);
	MPI_Barrier(MPI_COMM_WORLD);
	if (mt_rank == 0)
		printf("coll_nb: ok\n");
	MPI_Finalize();
	return 0;
}
