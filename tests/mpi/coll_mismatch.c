/*
 * coll_mismatch.c - MPI_Bcast where one receiver's count differs from the
 * root's, under MPI_ERRORS_RETURN: a smaller receiver gets MPI_ERR_TRUNCATE
 * (its error class) with the part that fits and nothing past its count, a
 * larger one the message; every other rank gets the message, and the
 * Barrier and Allreduce that follow on the same communicator still work.
 * Messages in the small slot, in one half and in many; a receiver of
 * non-contiguous items; every root.  Runs with any number of ranks >= 2.
 */
#include "colltest.h"

#define LARGE (1 << 18)

static int val(int root, int i)
{
	return root * 1000003 + i * 7 + 1;
}

/* The Barrier and a checked Allreduce after a mismatched call. */
static void check_in_step(MPI_Comm comm, int rank, int size)
{
	MT_MPI(MPI_Barrier(comm));
	int in[3] = {rank + 1, -rank, 1}, out[3];
	MT_MPI(MPI_Allreduce(in, out, 3, MPI_INT, MPI_SUM, comm));
	MT_CHECK(out[0] == size * (size + 1) / 2 && out[1] == -size * (size - 1) / 2 && out[2] == size,
		 "allreduce after the mismatch: %d %d %d", out[0], out[1], out[2]);
}

/* Root @p root sends @p n ints; rank (root + 1) % size receives @p m. */
static void check_one(MPI_Comm comm, int *buf, int root, int n, int m)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	bool odd = rank == (root + 1) % size;
	int count = odd ? m : n;
	for (int i = 0; i < count + 1; i++)
		buf[i] = rank == root ? val(root, i) : -99;
	int rc = MPI_Bcast(buf, count, MPI_INT, root, comm);
	int cls = MPI_SUCCESS;
	if (rc != MPI_SUCCESS)
		MPI_Error_class(rc, &cls);
	int want = odd && m < n ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
	MT_CHECK(cls == want, "bcast root %d n %d m %d: class %d, want %d", root, n, m, cls, want);
	int got = count < n ? count : n;
	for (int i = 0; i < got; i++)
		MT_CHECK(buf[i] == val(root, i), "bcast root %d n %d m %d [%d] = %d", root, n, m, i, buf[i]);
	for (int i = got; rank != root && i < count + 1; i++)
		MT_CHECK(buf[i] == -99, "bcast root %d n %d m %d wrote [%d]", root, n, m, i);
	check_in_step(comm, rank, size);
}

/* The smaller receiver takes vector items (2 ints every 3): the whole items that fit. */
static void check_vec(MPI_Comm comm, int *buf, int root)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	MPI_Datatype vec = mt_vec3();
	bool odd = rank == (root + 1) % size;
	for (int i = 0; i < 3 * 8; i++)
		buf[i] = rank == root ? val(root, i) : -99;
	int rc = odd ? MPI_Bcast(buf, 3, vec, root, comm) : MPI_Bcast(buf, 16, MPI_INT, root, comm);
	int cls = MPI_SUCCESS;
	if (rc != MPI_SUCCESS)
		MPI_Error_class(rc, &cls);
	MT_CHECK(cls == (odd ? MPI_ERR_TRUNCATE : MPI_SUCCESS), "bcast vec root %d: class %d", root, cls);
	for (int i = 0; odd && i < 3 * 3; i++)
		MT_CHECK(buf[i] == (i % 3 == 2 ? -99 : val(root, i / 3 * 2 + i % 3)), "bcast vec [%d] = %d", i, buf[i]);
	for (int i = 0; !odd && i < 16; i++)
		MT_CHECK(buf[i] == val(root, i), "bcast vec root %d [%d] = %d", root, i, buf[i]);
	MPI_Type_free(&vec);
	check_in_step(comm, rank, size);
}

int main(int argc, char **argv)
{
	mt_coll_init(&argc, &argv, "coll_mismatch");
	MT_CHECK(mt_size >= 2, "needs 2 ranks or more");
	int *buf = malloc((LARGE + 1) * sizeof(int));
	MT_CHECK(buf != NULL, "out of memory");
	/* root's count, the odd receiver's */
	static const int cases[][2] = {{4, 1}, {4, 0}, {0, 3}, {6, 5}, {2, 6}, {3000, 1000}, {LARGE, LARGE / 2 + 1},
				       {LARGE / 2, LARGE}, {LARGE, 3}, {1, LARGE}};
	for (int root = 0; root < mt_size; root++) {
		for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
			check_one(MPI_COMM_WORLD, buf, root, cases[c][0], cases[c][1]);
		check_vec(MPI_COMM_WORLD, buf, root);
	}
	free(buf);
	MPI_Finalize();
	return 0;
}
