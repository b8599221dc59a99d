/*
 * mixed_cf.c - C and Fortran (f_mixed.f90) in one program, on the same
 * messages of MPI_COMM_WORLD: C sends, Fortran receives, Fortran answers,
 * C receives; a Fortran receive request waited for in C; persistent
 * requests made in C and started and completed from Fortran; MANY receives
 * posted in Fortran, which Fortran's Testany, Testsome and Testall over
 * them all find pending without allocating (counted here, in C) and its
 * any and some calls complete.  Without the
 * plugin's Fortran layer the C side goes through pinshm and the Fortran
 * side through the MPI library, and the first receive never ends.
 *
 * Each pair of ranks in turn (peer = rank ^ d).  Call families: blocking,
 * nonblocking, persistent.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include <dlfcn.h>

#define MT_COUNT_ALLOCATIONS
#include "mpitest.h"

#define N 64
#define MANY 3000

/* f_mixed.f90 */
void f_mixed_recv(int peer, int n);
int f_mixed_irecv(int *buf, int peer, int n);
void f_mixed_persistent(MPI_Fint rreq, MPI_Fint sreq, int *sbuf, const int *rbuf, int peer, int n);
void f_mixed_many_post(MPI_Fint *reqs, int *bufs, int peer, int n);
void f_mixed_many_test(MPI_Fint *reqs, MPI_Fint *sts, MPI_Fint *ind, int n, int calls);
void f_mixed_many_finish(MPI_Fint *reqs, MPI_Fint *sts, MPI_Fint *ind, const int *bufs, int peer, int n);

static int value(int from, int to, int what, int i)
{
	return from * 1000003 + to * 10007 + what * 101 + i;
}

static void pair(int peer)
{
	int out[N], in[N];
	MPI_Status st;
	int count = 0;

	/* C to Fortran, and back (f_mixed_recv answers with tag 2). */
	for (int i = 0; i < N; i++)
		out[i] = value(mt_rank, peer, 1, i + 1);
	MT_MPI(MPI_Send(out, N, MPI_INT, peer, 1, MPI_COMM_WORLD));
	f_mixed_recv(peer, N);
	memset(in, 0, sizeof(in));
	MT_MPI(MPI_Recv(in, N, MPI_INT, peer, 2, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 2, N, MPI_INT);
	for (int i = 0; i < N; i++)
		MT_CHECK(in[i] == value(peer, mt_rank, 2, i + 1), "C from Fortran: in[%d] = %d", i, in[i]);

	/* A receive posted in Fortran, completed in C. */
	memset(in, 0, sizeof(in));
	MPI_Request rq = MPI_Request_f2c(f_mixed_irecv(in, peer, N));
	for (int i = 0; i < N; i++)
		out[i] = value(mt_rank, peer, 3, i + 1);
	MT_MPI(MPI_Send(out, N, MPI_INT, peer, 3, MPI_COMM_WORLD));
	MT_MPI(MPI_Wait(&rq, &st));
	MT_CHECK(rq == MPI_REQUEST_NULL, "Wait in C left Fortran's request");
	MT_MPI(MPI_Get_count(&st, MPI_INT, &count));
	MT_CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == 3 && count == N, "Fortran's Irecv: status %d %d %d",
		 st.MPI_SOURCE, st.MPI_TAG, count);
	for (int i = 0; i < N; i++)
		MT_CHECK(in[i] == value(peer, mt_rank, 3, i + 1), "Fortran's Irecv: in[%d] = %d", i, in[i]);

	/* Persistent requests made here, started from Fortran. */
	MPI_Request sreq, rreq;
	MT_MPI(MPI_Recv_init(in, N, MPI_INT, peer, 4, MPI_COMM_WORLD, &rreq));
	MT_MPI(MPI_Send_init(out, N, MPI_INT, peer, 4, MPI_COMM_WORLD, &sreq));
	f_mixed_persistent(MPI_Request_c2f(rreq), MPI_Request_c2f(sreq), out, in, peer, N);
	MT_MPI(MPI_Request_free(&rreq));
	MT_MPI(MPI_Request_free(&sreq));
}

/* Whether Fortran's calls are the plugin's (preloaded, whether on or off),
 * whose calls on arrays allocate nothing; Open MPI's own allocate. */
static int fortran_is_plugin(void)
{
	Dl_info info;
	void *f = dlsym(RTLD_DEFAULT, "mpi_testany_");
	return f && dladdr(f, &info) && info.dli_fname && strstr(info.dli_fname, "pinshm_mpi");
}

/* MANY receives posted in Fortran at the lower rank of the pair (tag 1000
 * + position), tested from Fortran while nothing has come: after a first
 * round, the tests allocate nothing where they are the plugin's.  Then the peer sends (last position
 * first), and Fortran completes them.  Each rank calls MPI_Barrier once. */
static void many(int peer)
{
	if (mt_rank > peer) {
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
		for (int i = MANY; i >= 1; i--) {
			int v = value(mt_rank, peer, 5, i);
			MT_MPI(MPI_Send(&v, 1, MPI_INT, peer, 1000 + i, MPI_COMM_WORLD));
		}
		return;
	}
	MPI_Fint *reqs = mt_alloc(MANY * sizeof(MPI_Fint)), *ind = mt_alloc(MANY * sizeof(MPI_Fint));
	MPI_Fint *sts = mt_alloc(MANY * sizeof(MPI_Status));
	int *bufs = mt_alloc(MANY * sizeof(int));
	f_mixed_many_post(reqs, bufs, peer, MANY);
	f_mixed_many_test(reqs, sts, ind, MANY, 1); /* first calls may set up */
	mt_counting = 1;
	f_mixed_many_test(reqs, sts, ind, MANY, 10);
	mt_counting = 0;
	MT_CHECK(!MT_COUNTS_ALLOCATIONS || !fortran_is_plugin() || mt_allocations == 0,
		 "Fortran's Testany, Testsome and Testall over %d requests, 10 times each: %ld allocations", MANY,
		 mt_allocations);
	MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	f_mixed_many_finish(reqs, sts, ind, bufs, peer, MANY);
	free(reqs);
	free(ind);
	free(sts);
	free(bufs);
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "mixed_cf");
	for (int d = 1; d < mt_size; d++) {
		pair(mt_rank ^ d);
		many(mt_rank ^ d);
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	}
	return mt_finish();
}
