/*
 * coll_nb_hier.c - MPI_Ibarrier, MPI_Ibcast, MPI_Ireduce, MPI_Iallreduce
 * and MPI_Iallgather on communicators that span (pretend) nodes (run with
 * PINSHM_MPI_NODES), checked against what every rank computes itself: on
 * world (whose first collective calls are nonblocking, made at rank 0
 * before the others can make theirs), a reversed split and an
 * interleaved split (even ranks first), each of these two agreed by one
 * MPI_Barrier first; every root; counts 0, 1, 7, 1000 and 40000; vector
 * items at the odd ranks (the same signature); in place; several calls
 * outstanding at once on one communicator and on two,
 * completed in reverse order with MPI_Wait and together with MPI_Waitall
 * or MPI_Test loops; a blocking MPI_Allreduce while calls are pending; a
 * user's operation freed right after the call; an Iallreduce of doubles
 * whose every rank gets the same bits, twice.  check_mpi
 * counts that every call went through pinshm.  Then a ring of
 * point-to-point messages.  Runs with any number of ranks.
 */
#include "colltest.h"

static const int counts[] = {0, 1, 7, 1000, 40000};
#define NCOUNTS ((int)(sizeof(counts) / sizeof(counts[0])))

static int val(int r, int i)
{
	return r * 1000003 + i * 7 + 1;
}

static void check_ibcast(MPI_Comm comm, MPI_Datatype vec)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	for (int c = 0; c < NCOUNTS; c++) {
		int n = counts[c] & ~1; /* even: vector items at the odd ranks */
		int *buf[2];
		for (int k = 0; k < 2; k++) {
			buf[k] = malloc(((size_t)n / 2 * 3 + 3) * sizeof(int));
			MT_CHECK(buf[k] != NULL, "out of memory");
		}
		for (int root = 0; root < size; root++) {
			/* Two calls at once, from root and the next rank, completed in reverse. */
			MPI_Request req[2];
			for (int k = 0; k < 2; k++) {
				int from = (root + k) % size;
				for (int i = 0; i < n / 2 * 3 + 3; i++)
					buf[k][i] = -99;
				bool vecs = rank % 2 && rank != from;
				for (int i = 0; rank == from && i < n; i++)
					buf[k][i] = val(from, i);
				if (vecs)
					MT_MPI(MPI_Ibcast(buf[k], n / 2, vec, from, comm, &req[k]));
				else
					MT_MPI(MPI_Ibcast(buf[k], n, MPI_INT, from, comm, &req[k]));
			}
			MT_MPI(MPI_Wait(&req[1], MPI_STATUS_IGNORE));
			MT_MPI(MPI_Wait(&req[0], MPI_STATUS_IGNORE));
			for (int k = 0; k < 2; k++) {
				int from = (root + k) % size;
				bool vecs = rank % 2 && rank != from;
				for (int i = 0; i < n; i++) {
					int at = vecs ? i / 2 * 3 + i % 2 : i;
					MT_CHECK(buf[k][at] == val(from, i), "ibcast n %d root %d [%d] = %d", n, from, i,
						 buf[k][at]);
				}
				if (!vecs)
					MT_CHECK(buf[k][n] == -99, "ibcast n %d wrote past its count", n);
			}
		}
		free(buf[0]);
		free(buf[1]);
	}
}

static void check_ireduce(MPI_Comm comm, MPI_Op maxabs_op)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	for (int c = 0; c < NCOUNTS; c++) {
		int n = counts[c];
		int *in = malloc((n + 1) * sizeof(int)), *out = malloc((n + 1) * sizeof(int));
		int *all = malloc((n + 1) * sizeof(int));
		MT_CHECK(in && out && all, "out of memory");
		for (int i = 0; i < n; i++)
			in[i] = (rank * 31 + i) % 17 - 8;
		for (int root = 0; root < size; root++) {
			bool inplace = rank == root && (root + c) % 2;
			for (int i = 0; i <= n; i++)
				out[i] = inplace && i < n ? in[i] : -77;
			MPI_Request req[2];
			MT_MPI(MPI_Ireduce(inplace ? MPI_IN_PLACE : in, out, n, MPI_INT, MPI_SUM, root, comm, &req[0]));
			MT_MPI(MPI_Iallreduce(in, all, n, MPI_INT, maxabs_op, comm, &req[1]));
			if (root == 0) { /* a blocking call while both are pending */
				int one = 1, sum = 0;
				MT_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm));
				MT_CHECK(sum == size, "allreduce among pending calls: %d", sum);
			}
			if (root % 2) {
				MT_MPI(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));
			} else {
				int done = 0;
				while (!done)
					MT_MPI(MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE));
			}
			for (int i = 0; i < n; i++) {
				int sum = 0, most = 0;
				for (int r = 0; r < size; r++) {
					int x = (r * 31 + i) % 17 - 8;
					sum += x;
					most = abs(x) > most ? abs(x) : most;
				}
				if (rank == root)
					MT_CHECK(out[i] == sum, "ireduce n %d root %d [%d] = %d want %d", n, root, i, out[i],
						 sum);
				MT_CHECK(all[i] == most, "iallreduce n %d [%d] = %d want %d", n, i, all[i], most);
			}
			MT_CHECK(out[n] == -77, "ireduce wrote past its count");
		}
		free(in);
		free(out);
		free(all);
	}
}

/* Iallgather: blocks of n ints, received as vector items at the odd
 * ranks, in place at the even ones on odd tests; two at once. */
static void check_iallgather(MPI_Comm comm, MPI_Datatype vec)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	for (int c = 0; c < NCOUNTS; c++) {
		int n = counts[c] & ~1;
		size_t room = (size_t)size * n / 2 * 3 + 3;
		int *in = malloc((n + 1) * sizeof(int)), *out[2];
		MT_CHECK(in != NULL, "out of memory");
		for (int i = 0; i < n; i++)
			in[i] = val(rank, i);
		MPI_Request req[2];
		bool vecs = rank % 2, ip = !vecs && c % 2;
		for (int k = 0; k < 2; k++) {
			out[k] = malloc(room * sizeof(int));
			MT_CHECK(out[k] != NULL, "out of memory");
			for (size_t i = 0; i < room; i++)
				out[k][i] = ip && n && i / n == (size_t)rank ? val(rank, (int)(i % n)) : -99;
			if (vecs)
				MT_MPI(MPI_Iallgather(in, n, MPI_INT, out[k], n / 2, vec, comm, &req[k]));
			else
				MT_MPI(MPI_Iallgather(ip ? MPI_IN_PLACE : in, n, MPI_INT, out[k], n, MPI_INT, comm, &req[k]));
		}
		MT_MPI(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));
		for (int k = 0; k < 2; k++) {
			for (int f = 0; f < size; f++)
				for (int i = 0; i < n; i++) {
					size_t at = vecs ? ((size_t)f * n + i) / 2 * 3 + i % 2 : (size_t)f * n + i;
					MT_CHECK(out[k][at] == val(f, i), "iallgather n %d from %d [%d] = %d", n, f, i,
						 out[k][at]);
				}
			if (!vecs)
				MT_CHECK(out[k][(size_t)size * n] == -99, "iallgather n %d wrote past its buffer", n);
			free(out[k]);
		}
		free(in);
	}
}

/* Doubles that round: every rank gets the same bits, and the same on a
 * second call (the leaders' order is the library's MPI_Ireduce's, which
 * may group the nodes' results otherwise than its MPI_Reduce). */
static void check_bits(MPI_Comm comm)
{
	int rank;
	MPI_Comm_rank(comm, &rank);
	enum { N = 513 };
	double in[N], a[N], b[N];
	for (int i = 0; i < N; i++)
		in[i] = 1.0 / (rank + 3) + i * 1e-3 / (rank + 7);
	MPI_Request req;
	MT_MPI(MPI_Iallreduce(in, a, N, MPI_DOUBLE, MPI_SUM, comm, &req));
	MT_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
	MT_MPI(MPI_Iallreduce(in, b, N, MPI_DOUBLE, MPI_SUM, comm, &req));
	MT_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
	MT_CHECK(!memcmp(a, b, sizeof(a)), "iallreduce of doubles: other bits on a second call");
	double lo[N], hi[N]; /* every rank the same bits */
	MT_MPI(MPI_Allreduce(b, lo, N, MPI_DOUBLE, MPI_MIN, comm));
	MT_MPI(MPI_Allreduce(b, hi, N, MPI_DOUBLE, MPI_MAX, comm));
	MT_CHECK(!memcmp(lo, hi, sizeof(lo)), "iallreduce: ranks got other bits");
}

static void check_ibarrier(MPI_Comm a, MPI_Comm b)
{
	/* Barriers on two communicators at once, and a user's op freed at
	 * once; an empty Ibcast (no leaders' phase) between calls that have
	 * one, on one communicator, completed before them. */
	for (int round = 0; round < 20; round++) {
		MPI_Request req[5];
		MPI_Op op;
		MT_MPI(MPI_Op_create(maxabs, 1, &op));
		int in = mt_rank - round, out = 0, one = mt_rank == round % mt_size ? 5 : 0;
		MT_MPI(MPI_Ibarrier(a, &req[0]));
		MT_MPI(MPI_Iallreduce(&in, &out, 1, MPI_INT, op, b, &req[1]));
		MT_MPI(MPI_Op_free(&op));
		MT_MPI(MPI_Ibcast(NULL, 0, MPI_INT, 0, b, &req[2]));
		MT_MPI(MPI_Ibarrier(b, &req[3]));
		MT_MPI(MPI_Ibcast(&one, 1, MPI_INT, round % mt_size, a, &req[4]));
		MT_MPI(MPI_Wait(&req[2], MPI_STATUS_IGNORE));
		MT_MPI(MPI_Waitall(5, req, MPI_STATUSES_IGNORE));
		MT_CHECK(one == 5, "ibcast among barriers: %d", one);
		int want = 0;
		for (int r = 0; r < mt_size; r++)
			want = abs(r - round) > want ? abs(r - round) : want;
		MT_CHECK(out == want, "iallreduce with a freed op: %d want %d", out, want);
	}
}

int main(int argc, char **argv)
{
	mt_coll_init(&argc, &argv, "coll_nb_hier");
	mt_first_nonblocking(MPI_COMM_WORLD); /* carried: world's layout is agreed at MPI_Init */
	MPI_Datatype vec = mt_vec3();
	MPI_Op op;
	MT_MPI(MPI_Op_create(maxabs, 1, &op));
	MPI_Comm rev, mix;
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, mt_size - mt_rank, &rev));
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, (mt_rank % 2) * mt_size + mt_rank, &mix));
	MPI_Comm comms[] = {MPI_COMM_WORLD, rev, mix};
	/* The others agree theirs at their first blocking call. */
	for (int c = 1; c < 3; c++)
		MT_MPI(MPI_Barrier(comms[c]));
	for (int c = 0; c < 3; c++) {
		check_ibcast(comms[c], vec);
		check_ireduce(comms[c], op);
		check_iallgather(comms[c], vec);
		check_bits(comms[c]);
	}
	check_ibarrier(MPI_COMM_WORLD, mix);
	mt_check_ring();
	MPI_Comm_free(&rev);
	MPI_Comm_free(&mix);
	MPI_Op_free(&op);
	MPI_Type_free(&vec);
	return mt_finish();
}
