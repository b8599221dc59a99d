/*
 * idup_c.c - the C half of an MPMD job whose other half is f_idup.f90
 * (check_mpi runs `-np N/2 idup_c : -np N/2 f_idup`): every rank, in C or in
 * Fortran, MPI_Comm_idup's MPI_COMM_WORLD, then exchanges with every other
 * rank on the idup'd communicator, then MPI_Comm_dup's MPI_COMM_WORLD and
 * exchanges on that.  Both halves must count the idup on MPI_COMM_WORLD
 * and carry the new communicator alike: where Fortran's MPI_COMM_IDUP went
 * around the plugin, the exchange on the idup'd communicator (carried on
 * the C side only) and the one on the dup (whose context then differs
 * between the halves) hung.
 *
 * Each pair of ranks in turn (peer = rank ^ d); the data and statuses are
 * checked.  Call families: blocking (Sendrecv), nonblocking (Irecv).
 */
#include "mpitest.h"

#define N 100

/* The same as f_idup.f90's. */
static int value(int from, int to, int what, int i)
{
	return from * 1000003 + to * 10007 + what * 101 + i;
}

/* With every other rank on @p comm: Sendrecv, or with @p irecv Irecv,
 * Send and Wait; the data and status checked. */
static void exchange(MPI_Comm comm, int what, int irecv)
{
	int out[N], in[N];
	MPI_Request r;
	MPI_Status st;

	for (int d = 1; d < mt_size; d++) {
		int peer = mt_rank ^ d, tag = what * 10 + d;
		for (int i = 0; i < N; i++)
			out[i] = value(mt_rank, peer, what, i + 1);
		memset(in, 0, sizeof(in));
		if (irecv) {
			MT_MPI(MPI_Irecv(in, N, MPI_INT, peer, tag, comm, &r));
			MT_MPI(MPI_Send(out, N, MPI_INT, peer, tag, comm));
			MT_MPI(MPI_Wait(&r, &st));
		} else {
			MT_MPI(MPI_Sendrecv(out, N, MPI_INT, peer, tag, in, N, MPI_INT, peer, tag, comm, &st));
		}
		MT_CHECK_STATUS(st, peer, tag, N, MPI_INT);
		for (int i = 0; i < N; i++)
			MT_CHECK(in[i] == value(peer, mt_rank, what, i + 1), "what %d from %d: [%d] = %d", what, peer,
				 i, in[i]);
	}
}

int main(int argc, char **argv)
{
	MPI_Comm idup, dup;
	MPI_Request r;
	int cmp = -1;

	mt_init(&argc, &argv, "idup_c");
	MT_MPI(MPI_Comm_idup(MPI_COMM_WORLD, &idup, &r));
	MT_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
	MT_CHECK(r == MPI_REQUEST_NULL, "MPI_Wait left the idup's request");
	MT_MPI(MPI_Comm_compare(idup, MPI_COMM_WORLD, &cmp));
	MT_CHECK(cmp == MPI_CONGRUENT, "the idup'd communicator compares %d to MPI_COMM_WORLD", cmp);
	exchange(idup, 1, 0);
	exchange(idup, 2, 1);

	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
	exchange(dup, 3, 0);
	exchange(dup, 4, 1);

	MT_MPI(MPI_Comm_free(&idup));
	MT_MPI(MPI_Comm_free(&dup));
	return mt_finish();
}
