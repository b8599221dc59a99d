/*
 * p2p_large.c - message sizes from 0 bytes to 64 MiB, around the limits that
 * an implementation may switch at (eager size, ring chunks, powers of two),
 * both ways at once: Sendrecv (blocking) and Isend/Irecv (nonblocking), with
 * data checked end to end and nothing written past the message.  Up to
 * 4 MiB with every peer; 16 and 64 MiB with the first peer only (memory and
 * time on 4 oversubscribed ranks).
 *
 * Call families: blocking, nonblocking.
 */
#include "mpitest.h"

#define MIB (1 << 20)
#define GUARD 64

static const int sizes[] = {0,         1,          63,          4095,    4096,    4097,
			    8192 + 3,  65535,      65536,       65537,   MIB - 1, MIB,
			    MIB + 100, 4 * MIB,    16 * MIB + 5, 64 * MIB};
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))
#define ALL_PEERS_MAX (4 * MIB)

static void check_guard(const unsigned char *b, int n)
{
	for (int i = 0; i < GUARD; i++)
		MT_CHECK(b[n + i] == 0xa5, "byte %d past a message of %d was written", i, n);
}

static void one_size(int peer, int i, unsigned char *sb, unsigned char *rb)
{
	int n = sizes[i];
	MPI_Status st;

	mt_fill(sb, n, mt_seed(mt_rank, peer, i));
	memset(rb, 0xa5, (size_t)n + GUARD);
	MT_MPI(MPI_Sendrecv(sb, n, MPI_BYTE, peer, i, rb, n + GUARD, MPI_BYTE, peer, i, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, i, n, MPI_BYTE);
	MT_CHECK_FILL(rb, n, mt_seed(peer, mt_rank, i));
	check_guard(rb, n);

	/* Nonblocking, the receive posted after the send, in ints where it fits. */
	MPI_Request rq[2];
	int ints = n / 4;
	mt_fill(sb, n, mt_seed(mt_rank, peer, 100 + i));
	memset(rb, 0xa5, (size_t)n + GUARD);
	MT_MPI(MPI_Isend(sb, ints, MPI_INT, peer, 100 + i, MPI_COMM_WORLD, &rq[0]));
	MT_MPI(MPI_Irecv(rb, ints, MPI_INT, peer, 100 + i, MPI_COMM_WORLD, &rq[1]));
	MPI_Status sts[2];
	MT_MPI(MPI_Waitall(2, rq, sts));
	MT_CHECK_STATUS(sts[1], peer, 100 + i, ints, MPI_INT);
	MT_CHECK_FILL(rb, (size_t)ints * 4, mt_seed(peer, mt_rank, 100 + i));
	check_guard(rb, ints * 4);
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_large");
	int max = sizes[NSIZES - 1];
	unsigned char *sb = mt_alloc((size_t)max + GUARD), *rb = mt_alloc((size_t)max + GUARD);

	for (int d = 1; d < mt_size; d++)
		for (int i = 0; i < NSIZES; i++)
			if (d == 1 || sizes[i] <= ALL_PEERS_MAX)
				one_size(mt_rank ^ d, i, sb, rb);
	free(sb);
	free(rb);
	return mt_finish();
}
