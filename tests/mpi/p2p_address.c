/*
 * p2p_address.c - sends and receives through pointers to MPI_Send,
 * MPI_Recv, MPI_Isend, MPI_Irecv and MPI_Waitall, taken in code that is not
 * position-independent (built with -fno-pie -no-pie): such a program has
 * an entry of its PLT stand for each call, which a lookup of the call's
 * name gives.  The plugin must see them for what they are (they lead to
 * its own calls: src/mpi/lookup.c) and carry the messages.
 *
 * Call families: blocking and nonblocking.
 */
#include "mpitest.h"

typedef int (*send_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm);
typedef int (*recv_fn)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *);
typedef int (*isend_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
typedef int (*irecv_fn)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
typedef int (*waitall_fn)(int, MPI_Request *, MPI_Status *);

/* volatile: the calls go through the pointers, not straight to the names. */
static send_fn volatile send_p;
static recv_fn volatile recv_p;
static isend_fn volatile isend_p;
static irecv_fn volatile irecv_p;
static waitall_fn volatile waitall_p;

static const int sizes[] = {0, 8, 1000, 70000};
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

static void exchange(int peer, unsigned char *sbuf, unsigned char *rbuf)
{
	for (int i = 0; i < NSIZES; i++) {
		int n = sizes[i];
		MPI_Status st;
		/* Blocking, the lower rank first. */
		for (int turn = 0; turn < 2; turn++) {
			if ((turn == 0) == (mt_rank < peer)) {
				mt_fill(sbuf, n, mt_seed(mt_rank, peer, i));
				MT_MPI(send_p(sbuf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
			} else {
				MT_MPI(recv_p(rbuf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st));
				MT_CHECK_STATUS(st, peer, 1, n, MPI_BYTE);
				MT_CHECK_FILL(rbuf, n, mt_seed(peer, mt_rank, i));
			}
		}
		/* Nonblocking, both at once. */
		MPI_Request rq[2];
		MPI_Status sts[2];
		mt_fill(sbuf, n, mt_seed(mt_rank, peer, 100 + i));
		MT_MPI(irecv_p(rbuf, n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[0]));
		MT_MPI(isend_p(sbuf, n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[1]));
		MT_MPI(waitall_p(2, rq, sts));
		MT_CHECK_STATUS(sts[0], peer, 2, n, MPI_BYTE);
		MT_CHECK_FILL(rbuf, n, mt_seed(peer, mt_rank, 100 + i));
	}
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_address");
	send_p = MPI_Send;
	recv_p = MPI_Recv;
	isend_p = MPI_Isend;
	irecv_p = MPI_Irecv;
	waitall_p = MPI_Waitall;
	unsigned char *sbuf = mt_alloc(70000), *rbuf = mt_alloc(70000);

	for (int d = 1; d < mt_size; d++)
		exchange(mt_rank ^ d, sbuf, rbuf);
	free(sbuf);
	free(rbuf);
	return mt_finish();
}
