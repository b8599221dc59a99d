/*
 * coll_commfree.c - a communicator freed while it still has pending
 * operations, on one that spans (pretend) nodes (run with
 * PINSHM_MPI_NODES): a barrier gives it its hierarchical state, then each
 * rank sends a long message to every other rank (the requests freed at
 * once: they finish when the receiver has the data) and posts the
 * receives, frees the communicator, and completes everything while the
 * sends' last acknowledgements arrive inside collectives on world (the
 * ranks of the upper half wait a little first, so that the others are
 * already there).  The communicator's state then goes from inside the
 * progress engine; it must not be freed there, and the job must finish
 * cleanly.  The received data are checked.  Runs with any number of ranks.
 */
#include <unistd.h>

#include "colltest.h"

#define LONG (1 << 18) /* ints: 1 MiB, past the eager size */

static int val(int from, int to, int i)
{
	return from * 1000003 + to * 7919 + i;
}

static void round_trip(int round)
{
	MPI_Comm c;
	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
	MT_MPI(MPI_Barrier(c));
	int *out = malloc((size_t)mt_size * LONG * sizeof(int));
	int *in = malloc((size_t)mt_size * LONG * sizeof(int));
	MPI_Request *rq = malloc((size_t)mt_size * sizeof(MPI_Request));
	MT_CHECK(out && in && rq, "out of memory");
	for (int p = 0; p < mt_size; p++) {
		rq[p] = MPI_REQUEST_NULL;
		for (int i = 0; i < LONG; i++)
			out[(size_t)p * LONG + i] = val(mt_rank, p, i);
	}
	for (int p = 0; p < mt_size; p++) {
		if (p == mt_rank)
			continue;
		MPI_Request s;
		MT_MPI(MPI_Isend(out + (size_t)p * LONG, LONG, MPI_INT, p, round, c, &s));
		MT_MPI(MPI_Request_free(&s));
		MT_MPI(MPI_Irecv(in + (size_t)p * LONG, LONG, MPI_INT, p, round, c, &rq[p]));
	}
	MT_MPI(MPI_Comm_free(&c));
	if (mt_rank >= mt_size / 2)
		usleep(100000);
	MT_MPI(MPI_Waitall(mt_size, rq, MPI_STATUSES_IGNORE));
	/* The freed sends end in here at the latest (their receivers are
	 * done once all reach it); their out buffer lives until then. */
	int sum = 0, one = 1;
	MT_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
	MT_CHECK(sum == mt_size, "allreduce: %d, not %d", sum, mt_size);
	MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	for (int p = 0; p < mt_size; p++)
		for (int i = 0; p != mt_rank && i < LONG; i++)
			MT_CHECK(in[(size_t)p * LONG + i] == val(p, mt_rank, i), "round %d: from %d item %d: %d", round,
				 p, i, in[(size_t)p * LONG + i]);
	free(out);
	free(in);
	free(rq);
}

int main(int argc, char **argv)
{
	mt_coll_init(&argc, &argv, "coll_commfree");
	for (int round = 0; round < 3; round++)
		round_trip(round);
	return mt_finish();
}
