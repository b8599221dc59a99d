/*
 * coll_wake.c - a rank that waits in a collective call for a late rank
 * sleeps once its spin and yield are spent, and the late rank's post must
 * wake it.  Round by round, one rank arrives 200 ms late at MPI_Barrier,
 * MPI_Bcast (it is the root), MPI_Allreduce, MPI_Ibarrier and
 * MPI_Iallreduce (each with MPI_Wait); every other rank must get through
 * the call within LIMIT_S.  check_mpi runs it with the plugin's sleeps
 * made longer than that (PINSHM_MPI_COLL_SLEEP_NS, a test hook), so that
 * only a wake-up ends them in time: a lost one fails the run.  First a
 * message with every other rank.  Runs with any power-of-two number of
 * ranks.
 */
#include <time.h>
#include <unistd.h>

#include "mpitest.h"

#define LATE_US 200000 /* how late the late rank comes */
#define LIMIT_S 5.0    /* far below a sleep that no wake-up ends (30 s in check_mpi) */

enum { BARRIER, BCAST, ALLREDUCE, IBARRIER, IALLREDUCE, CALLS };
static const char *const names[CALLS] = {"barrier", "bcast", "allreduce", "ibarrier", "iallreduce"};

static void call(int c, int late)
{
	int x = mt_rank + 1, y = -1;
	MPI_Request req;
	switch (c) {
	case BARRIER:
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
		return;
	case BCAST:
		y = mt_rank == late ? 1000 + late : -1;
		MT_MPI(MPI_Bcast(&y, 1, MPI_INT, late, MPI_COMM_WORLD));
		MT_CHECK(y == 1000 + late, "bcast from %d: %d", late, y);
		return;
	case ALLREDUCE:
		MT_MPI(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		break;
	case IBARRIER:
		MT_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &req));
		MT_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
		return;
	default:
		MT_MPI(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
		MT_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
		break;
	}
	MT_CHECK(y == mt_size * (mt_size + 1) / 2, "%s: %d", names[c], y);
}

/* A message with every other rank, so that the run's statistics show the
 * paths point to point took (check_mpi asks for them). */
static void greet(void)
{
	for (int d = 1; d < mt_size; d++) {
		int peer = mt_rank ^ d, in = -1;
		if (mt_rank < peer) {
			MT_MPI(MPI_Send(&mt_rank, 1, MPI_INT, peer, 7, MPI_COMM_WORLD));
			MT_MPI(MPI_Recv(&in, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		} else {
			MT_MPI(MPI_Recv(&in, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			MT_MPI(MPI_Send(&mt_rank, 1, MPI_INT, peer, 7, MPI_COMM_WORLD));
		}
		MT_CHECK(in == peer, "from rank %d: %d", peer, in);
	}
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "coll_wake");
	greet();
	MT_MPI(MPI_Barrier(MPI_COMM_WORLD)); /* the area agreed: later calls are carried */
	for (int c = 0; c < CALLS; c++) {
		int late = (c * 3 + 1) % mt_size;
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
		if (mt_rank == late)
			usleep(LATE_US);
		double t0 = MPI_Wtime();
		call(c, late);
		double took = MPI_Wtime() - t0;
		/* It waited for the late rank, and a wake-up ended the wait. */
		MT_CHECK(mt_rank == late || took >= LATE_US * 0.5e-6, "%s: done in %.3f s before rank %d came", names[c],
			 took, late);
		MT_CHECK(took < LIMIT_S, "%s: %.3f s with rank %d 0.2 s late: a sleeper not woken?", names[c], took,
			 late);
	}
	return mt_finish();
}
