/*
 * coll_dead.c - a rank dies between two collectives: the others must not
 * wait for it forever.  The last rank kills itself (SIGKILL: no exit
 * handler runs) after a first MPI_Allreduce has set the communicator's
 * collectives up; the others then call MPI_Allreduce (argument "barrier":
 * MPI_Barrier; "bcast": MPI_Bcast from the dead rank; "iallreduce":
 * MPI_Iallreduce and MPI_Wait; "ibcast": MPI_Ibcast from the dead rank
 * and MPI_Wait; "ibarrier", "iallgather": MPI_Ibarrier, MPI_Iallgather
 * and MPI_Wait; "ireduce", "ireduce0": MPI_Ireduce to rank 1, to rank 0,
 * and MPI_Wait).  On pretend nodes (PINSHM_MPI_NODES=2 at 4 ranks) the
 * dead rank is on the second node and not its leader: the survivors of
 * the first node (rank 0 leads it) see the death only through the call.
 * By default the error handler aborts the job; with "return" (a second
 * argument, or COLL_DEAD_RETURN set in the environment) the survivors set
 * MPI_ERRORS_RETURN, print the error the call returned and exit 0
 * without MPI_Finalize.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank, size, x, y = 0;
	const char *call = argc > 1 ? argv[1] : "allreduce";
	int ret = (argc > 2 && !strcmp(argv[2], "return")) || getenv("COLL_DEAD_RETURN");

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	x = rank + 1;
	MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (y != size * (size + 1) / 2) {
		fprintf(stderr, "coll_dead: rank %d: first allreduce gave %d\n", rank, y);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (ret)
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rank == size - 1) {
		fflush(NULL);
		raise(SIGKILL);
	}
	int rc;
	if (!strcmp(call, "barrier"))
		rc = MPI_Barrier(MPI_COMM_WORLD);
	else if (!strcmp(call, "bcast"))
		rc = MPI_Bcast(&x, 1, MPI_INT, size - 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "iallreduce")) {
		MPI_Request req;
		rc = MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
		if (rc == MPI_SUCCESS)
			rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
	} else if (!strcmp(call, "ibcast")) {
		MPI_Request req;
		rc = MPI_Ibcast(&x, 1, MPI_INT, size - 1, MPI_COMM_WORLD, &req);
		if (rc == MPI_SUCCESS)
			rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
	}
	else if (!strcmp(call, "ibarrier")) {
		MPI_Request req;
		rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
		if (rc == MPI_SUCCESS)
			rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
	} else if (!strcmp(call, "ireduce") || !strcmp(call, "ireduce0")) {
		MPI_Request req;
		int root = !strcmp(call, "ireduce");
		rc = MPI_Ireduce(&x, &y, 1, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, &req);
		if (rc == MPI_SUCCESS)
			rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
	} else if (!strcmp(call, "iallgather")) {
		MPI_Request req;
		int *all = calloc((size_t)size, sizeof(int));
		rc = MPI_Iallgather(&x, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD, &req);
		if (rc == MPI_SUCCESS)
			rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
		free(all);
	} else
		rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0, cls = 0;
	MPI_Error_class(rc, &cls);
	MPI_Error_string(rc, msg, &len);
	printf("coll_dead: rank %d: %s returned %d (class %d: %s)\n", rank, call, rc, cls, msg);
	fflush(NULL);
	_exit(0);
}
