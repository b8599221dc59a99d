/*
 * coll_nb_first.c - a nonblocking collective as the first collective call
 * on a communicator must not wait for the other ranks: rank 0 starts
 * MPI_Ibarrier, then MPI_Iallreduce, on fresh communicators and only then
 * sends the message that the others receive before they start theirs.
 * A call that waited at rank 0 would hang the job.  Then a blocking call,
 * and nonblocking ones after it, on the same communicator.
 *
 * Then first calls of every kind on fresh communicators: their datatype
 * and MPI_Op freed right after the call, the library's own nonblocking
 * calls (MPI_Ialltoall, which the plugin does not carry) made between
 * them, and a communicator freed while its first call is pending (the
 * plugin must then end the communicator's agreement before the library
 * frees it, and pass nothing on to the library on it afterwards: Open MPI
 * 4.1's own nonblocking calls crash on a communicator freed under them).
 *
 * NB_FIRST_COLL_OFF=R: world rank R runs with PINSHM_MPI_COLL=0, so every
 * communicator's agreement says off: the calls that waited for it go to
 * the MPI library.  Runs with any number of ranks.
 */
#include "colltest.h"

/* Rank 0 starts @p comm's first collective calls before it lets the others start theirs. */
static void first_calls(MPI_Comm comm)
{
	int rank, size, x;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	x = rank + 1;
	MPI_Request r[2];
	mt_first_nonblocking(comm);
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

/* A non-commutative operation: x o y = y unless x is the larger (then x),
 * applied in rank order it gives the largest value with the lowest rank's
 * tag (value * 100 + rank). */
static void first_larger(void *in, void *inout, int *len, MPI_Datatype *type)
{
	(void)type;
	int *a = in, *b = inout;
	for (int i = 0; i < *len; i++)
		if (a[i] / 100 >= b[i] / 100)
			b[i] = a[i];
}

/* Every kind of carried call as the first ones on @p comm (freed here),
 * with the library's MPI_Ialltoall among them. */
static void first_of_each(MPI_Comm comm)
{
	int rank, size, go = 1;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	if (rank > 0)
		MT_MPI(MPI_Recv(&go, 1, MPI_INT, 0, 6, comm, MPI_STATUS_IGNORE));
	MPI_Request r[6];
	/* Ibcast of every other int, its type freed at once. */
	int v[64];
	for (int i = 0; i < 64; i++)
		v[i] = rank == size - 1 ? 7 * i : -1;
	MPI_Datatype every_other;
	MT_MPI(MPI_Type_vector(32, 1, 2, MPI_INT, &every_other));
	MT_MPI(MPI_Type_commit(&every_other));
	MT_MPI(MPI_Ibcast(v, 1, every_other, size - 1, comm, &r[0]));
	MT_MPI(MPI_Type_free(&every_other));
	/* The library's call between the waiting ones. */
	int *to = malloc((size_t)size * sizeof(int)), *from = malloc((size_t)size * sizeof(int));
	MT_CHECK(to && from, "out of memory");
	for (int i = 0; i < size; i++)
		to[i] = rank * 1000 + i;
	MT_MPI(MPI_Ialltoall(to, 1, MPI_INT, from, 1, MPI_INT, comm, &r[1]));
	/* Iallreduce with a non-commutative op freed at once. */
	MPI_Op op;
	MT_MPI(MPI_Op_create(first_larger, 0, &op));
	int mine[3] = {(rank % 2) * 100 + rank, 5 * 100 + rank, rank * 100 + rank}, got[3];
	MT_MPI(MPI_Iallreduce(mine, got, 3, MPI_INT, op, comm, &r[2]));
	MT_MPI(MPI_Op_free(&op));
	/* Ireduce to the last rank, Iallgather in place. */
	long sum = -1, one = rank + 1;
	MT_MPI(MPI_Ireduce(&one, &sum, 1, MPI_LONG, MPI_SUM, size - 1, comm, &r[3]));
	int *all = malloc((size_t)size * sizeof(int));
	MT_CHECK(all != NULL, "out of memory");
	all[rank] = rank * rank;
	MT_MPI(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, 1, MPI_INT, comm, &r[4]));
	MT_MPI(MPI_Ibarrier(comm, &r[5]));
	for (int d = 1; rank == 0 && d < size; d++)
		MT_MPI(MPI_Send(&go, 1, MPI_INT, d, 6, comm));
	MT_MPI(MPI_Waitall(6, r, MPI_STATUSES_IGNORE));
	for (int i = 0; i < 64; i++)
		MT_CHECK(v[i] == (i % 2 == 0 || rank == size - 1 ? 7 * i : -1), "ibcast: [%d] = %d", i, v[i]);
	for (int i = 0; i < size; i++)
		MT_CHECK(from[i] == i * 1000 + rank, "ialltoall: [%d] = %d", i, from[i]);
	int odd = size > 1 ? 101 : 0; /* rank 1 has the largest first value */
	MT_CHECK(got[0] == odd && got[1] == 500 && got[2] == (size - 1) * 101, "iallreduce: %d %d %d", got[0],
		 got[1], got[2]);
	MT_CHECK(rank != size - 1 || sum == (long)size * (size + 1) / 2, "ireduce: %ld", sum);
	for (int i = 0; i < size; i++)
		MT_CHECK(all[i] == i * i, "iallgather: [%d] = %d", i, all[i]);
	free(to);
	free(from);
	free(all);
	/* A communicator freed while its first call is pending. */
	MPI_Comm last;
	MT_MPI(MPI_Comm_dup(comm, &last));
	int x = rank + 1, total = -1;
	MT_MPI(MPI_Iallreduce(&x, &total, 1, MPI_INT, MPI_SUM, last, &r[0]));
	MT_MPI(MPI_Comm_free(&last));
	MT_MPI(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
	MT_CHECK(total == size * (size + 1) / 2, "iallreduce on a freed communicator: %d", total);
	MT_MPI(MPI_Comm_free(&comm));
}

int main(int argc, char **argv)
{
	const char *off = getenv("NB_FIRST_COLL_OFF"), *me = getenv("OMPI_COMM_WORLD_RANK");
	if (off && me && !strcmp(off, me))
		setenv("PINSHM_MPI_COLL", "0", 1);
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
	for (int i = 0; i < 3; i++) {
		MPI_Comm fresh;
		MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, i == 1 ? mt_size - mt_rank : mt_rank, &fresh));
		first_of_each(fresh);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (mt_rank == 0)
		printf("coll_nb_first: ok\n");
	MPI_Finalize();
	return 0;
}
