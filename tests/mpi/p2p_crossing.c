/*
 * p2p_crossing.c - long messages one way, then crossing (both ranks of a
 * pair sending to each other at once): the plugin streams the first
 * through the ring (its receiver copies while its sender writes) and
 * copies the second once, from sender to receiver, each rank copying the
 * other's (src/mpi/engine.c, pm_op_closed()).  check_mpi counts the
 * messages copied once: every crossing one, and none of the one-way ones
 * where the ranks have cores of their own.
 *
 * Per pair of ranks (peer = rank ^ d): MESSAGES one-way messages of SIZE
 * bytes from the lower rank (blocking, each answered by 4 bytes), then
 * MESSAGES exchanges (MPI_Irecv, MPI_Isend, MPI_Waitall), then MESSAGES
 * MPI_Sendrecv's, then MESSAGES half-blocking exchanges, every message
 * checked.  In the last, the lower rank exchanges nonblockingly and the
 * higher one receives, then sends, blocking: the lower rank's message
 * crosses only to its sender, whose receive is open (its RTS asks for a
 * single copy), and the higher one's only to its receiver, whose send is
 * open (it copies unasked), whatever the timing.
 *
 * Call families: blocking, nonblocking.
 */
#include "mpitest.h"

#define SIZE (100 * 1000)
#define MESSAGES 4

static void one_way(int peer, unsigned char *sb, unsigned char *rb)
{
	MPI_Status st;
	int ack = 0;
	for (int i = 0; i < MESSAGES; i++) {
		if (mt_rank < peer) {
			mt_fill(sb, SIZE, mt_seed(mt_rank, peer, i));
			MT_MPI(MPI_Send(sb, SIZE, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
			MT_MPI(MPI_Recv(&ack, 1, MPI_INT, peer, 2, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 2, 1, MPI_INT);
		} else {
			MT_MPI(MPI_Recv(rb, SIZE, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 1, SIZE, MPI_BYTE);
			MT_CHECK_FILL(rb, SIZE, mt_seed(peer, mt_rank, i));
			MT_MPI(MPI_Send(&ack, 1, MPI_INT, peer, 2, MPI_COMM_WORLD));
		}
	}
}

static void crossing(int peer, unsigned char *sb, unsigned char *rb)
{
	for (int i = 0; i < MESSAGES; i++) {
		MPI_Request rq[2];
		MPI_Status sts[2];
		mt_fill(sb, SIZE, mt_seed(mt_rank, peer, 100 + i));
		MT_MPI(MPI_Irecv(rb, SIZE, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &rq[0]));
		MT_MPI(MPI_Isend(sb, SIZE, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &rq[1]));
		MT_MPI(MPI_Waitall(2, rq, sts));
		MT_CHECK_STATUS(sts[0], peer, 3, SIZE, MPI_BYTE);
		MT_CHECK_FILL(rb, SIZE, mt_seed(peer, mt_rank, 100 + i));
	}
	for (int i = 0; i < MESSAGES; i++) {
		MPI_Status st;
		mt_fill(sb, SIZE, mt_seed(mt_rank, peer, 200 + i));
		MT_MPI(MPI_Sendrecv(sb, SIZE, MPI_BYTE, peer, 4, rb, SIZE, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &st));
		MT_CHECK_STATUS(st, peer, 4, SIZE, MPI_BYTE);
		MT_CHECK_FILL(rb, SIZE, mt_seed(peer, mt_rank, 200 + i));
	}
}

static void half_blocking(int peer, unsigned char *sb, unsigned char *rb)
{
	for (int i = 0; i < MESSAGES; i++) {
		MPI_Status st[2];
		mt_fill(sb, SIZE, mt_seed(mt_rank, peer, 300 + i));
		if (mt_rank < peer) {
			MPI_Request rq[2];
			MT_MPI(MPI_Irecv(rb, SIZE, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &rq[0]));
			MT_MPI(MPI_Isend(sb, SIZE, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &rq[1]));
			MT_MPI(MPI_Waitall(2, rq, st));
		} else {
			MT_MPI(MPI_Recv(rb, SIZE, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &st[0]));
			MT_MPI(MPI_Send(sb, SIZE, MPI_BYTE, peer, 5, MPI_COMM_WORLD));
		}
		MT_CHECK_STATUS(st[0], peer, 5, SIZE, MPI_BYTE);
		MT_CHECK_FILL(rb, SIZE, mt_seed(peer, mt_rank, 300 + i));
	}
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_crossing");
	unsigned char *sb = mt_alloc(SIZE), *rb = mt_alloc(SIZE);

	for (int d = 1; d < mt_size; d++) {
		int peer = mt_rank ^ d;
		one_way(peer, sb, rb);
		crossing(peer, sb, rb);
		half_blocking(peer, sb, rb);
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	}
	free(sb);
	free(rb);
	return mt_finish();
}
