/*
 * coll_nb_first.c - a nonblocking collective as the first collective call
 * on a communicator must not wait for the other ranks: rank 0 starts
 * MPI_Ibarrier, then MPI_Iallreduce, on fresh communicators and only then
 * sends the message that the others receive before they start theirs.
 * A call that waited at rank 0 would hang the job.  Then a blocking call,
 * and nonblocking ones after it, on the same communicator.  Runs with any
 * number of ranks.
 */
#include "mpitest.h"

/* Rank 0 starts @p comm's first collective calls before it lets the others start theirs. */
static void first_calls(MPI_Comm comm)
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
	/* A blocking call, then nonblocking ones again. */
	MT_MPI(MPI_Barrier(comm));
	int v[100];
	for (int i = 0; i < 100; i++)
		v[i] = rank == size - 1 ? i * 3 : -1;
	MT_MPI(MPI_Ibcast(v, 100, MPI_INT, size - 1, comm, &r[0]));
	MT_MPI(MPI_Iallreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_SUM, comm, &r[1]));
	MT_MPI(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
	for (int i = 0; i < 100; i++)
		MT_CHECK(v[i] == i * 3, "ibcast after a barrier: [%d] = %d", i, v[i]);
	MT_CHECK(x == size * (size + 1) / 2, "iallreduce after a barrier: %d", x);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	mt_name = "coll_nb_first";
	MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &mt_size);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm dup, rev;
	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, mt_size - mt_rank, &rev));
	first_calls(MPI_COMM_WORLD);
	first_calls(dup);
	first_calls(rev);
	MPI_Comm_free(&dup);
	MPI_Comm_free(&rev);
	MPI_Barrier(MPI_COMM_WORLD);
	if (mt_rank == 0)
		printf("coll_nb_first: ok\n");
	MPI_Finalize();
	return 0;
}
