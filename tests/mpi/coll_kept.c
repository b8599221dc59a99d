/*
 * coll_kept.c - communicators made and freed one after another take the
 * collective area the one before left (pinshm-mpi-coll(7), kept areas), with
 * their steps going on from its last: 8 rounds of a dup of
 * MPI_COMM_WORLD whose first calls are blocking, and of a split that
 * reverses the ranks whose first calls are nonblocking (another order of
 * the same processes: an area of its own), each call's result checked;
 * then two dups alive at once (the second makes its own area), and
 * MPI_COMM_WORLD's first call at the end (it takes one kept).  check_mpi
 * reads the plugin's statistics: at every rank, 3 areas made (the first
 * dup's, the first split's, the second dup's) and 16 kept ones taken.
 * Runs with any number of ranks.
 */
#include "colltest.h"

/* A Barrier, an Allreduce and a Bcast of @p words from the last rank,
 * blocking or not, on @p comm. */
static void calls(MPI_Comm comm, bool nonblocking, int words)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int x = rank + 1, sum = -1;
	int *v = malloc((size_t)words * sizeof(int));
	MT_CHECK(v != NULL, "out of memory");
	for (int i = 0; i < words; i++)
		v[i] = rank == size - 1 ? 5 * i + words : -1;
	if (nonblocking) {
		MPI_Request r[3];
		MT_MPI(MPI_Ibarrier(comm, &r[0]));
		MT_MPI(MPI_Iallreduce(&x, &sum, 1, MPI_INT, MPI_SUM, comm, &r[1]));
		MT_MPI(MPI_Ibcast(v, words, MPI_INT, size - 1, comm, &r[2]));
		MT_MPI(MPI_Waitall(3, r, MPI_STATUSES_IGNORE));
	} else {
		MT_MPI(MPI_Barrier(comm));
		MT_MPI(MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, comm));
		MT_MPI(MPI_Bcast(v, words, MPI_INT, size - 1, comm));
	}
	MT_CHECK(sum == size * (size + 1) / 2, "allreduce: %d", sum);
	for (int i = 0; i < words; i++)
		MT_CHECK(v[i] == 5 * i + words, "bcast of %d [%d] = %d", words, i, v[i]);
	free(v);
}

int main(int argc, char **argv)
{
	mt_coll_init(&argc, &argv, "coll_kept");
	for (int round = 0; round < 8; round++) {
		MPI_Comm dup, rev;
		MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
		calls(dup, false, 1 + round * 40000); /* from one step to many */
		MT_MPI(MPI_Comm_free(&dup));
		MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, mt_size - mt_rank, &rev));
		calls(rev, true, 1 + round * 3000);
		MT_MPI(MPI_Comm_free(&rev));
	}
	MPI_Comm a, b;
	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &a));
	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &b));
	calls(a, false, 7);
	calls(b, true, 7);
	MT_MPI(MPI_Comm_free(&a));
	MT_MPI(MPI_Comm_free(&b));
	return mt_finish();
}
