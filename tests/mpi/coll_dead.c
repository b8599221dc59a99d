/*
 * coll_dead.c - a rank dies between two collectives: the others must not
 * wait for it forever.  The last rank kills itself (SIGKILL: no exit
 * handler runs) after a first MPI_Allreduce has set the communicator's
 * collectives up; the others then call MPI_Allreduce (argument "barrier":
 * MPI_Barrier; "bcast": MPI_Bcast from the dead rank; "iallreduce":
 * MPI_Iallreduce and MPI_Wait; "ibcast": MPI_Ibcast from the dead rank
 * and MPI_Wait; "ibarrier", "iallgather": MPI_Ibarrier, MPI_Iallgather
 * and MPI_Wait; "ireduce", "ireduce0": MPI_Ireduce to rank 1, to rank 0,
 * and MPI_Wait; the blocking calls of blocking_calls below, each named
 * for its call: "bcast" and "scatter" from the dead rank, "reduce",
 * "gather" and "gatherv" to rank 1, "reduce0", "bcast0" from or to rank 0,
 * "bcastL", "allreduceL" with more data than goes packed with a status
 * byte; "blocking": all of those in turn, each reported as it returns;
 * "nonblocking": the six nonblocking calls above started together, then
 * one MPI_Waitall, reported as one call; "zero": the calls of zero_calls
 * below with a count of 0, then MPI_Barrier, then those again, each
 * reported as "zero NAME"; "inhandler": MPI_Barrier, MPI_Allreduce,
 * MPI_Bcast from the dead rank, MPI_Iallreduce with MPI_Wait, then
 * MPI_Iallreduce and MPI_Ibarrier together and an MPI_Wait for each
 * ("iallreduce_pending", "ibarrier_pending"), with a handler that makes
 * collectives itself, below).
 * On pretend nodes (PINSHM_MPI_NODES=2 at 4 ranks, or 3 at 6) the dead
 * rank is on the last node and not its leader: the survivors of the
 * other nodes (whose lowest rank leads each) see the death only through
 * the call.
 * By default the error handler aborts the job (a survivor says so first:
 * "the default handler ends the process"); with "return" (a second
 * argument, or COLL_DEAD_RETURN set in the environment) the survivors set
 * a handler that counts its calls and returns, print the error the call
 * returned and exit 0 without MPI_Finalize.
 * With "inhandler" the handler, at its outermost level only (it guards
 * against its own nesting, as a user's must), makes three collectives and
 * prints a line "in handler: NAME returned ..." for each, "ok" where its
 * result is right: an MPI_Allreduce on MPI_COMM_SELF, one on the
 * survivors' communicator (split before the death), and an MPI_Barrier on
 * the failed communicator itself, with the number of times the handler
 * was called meanwhile (the nested call's own report); the outer call's
 * line counts the outermost calls only, and says "comm bad" where the
 * handler was not given the outer call's communicator.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The blocking calls that "blocking" makes in turn: after the first, the
 * dead rank's node fails each at once, and the others must still hear
 * of it through the call. */
static const char *const blocking_calls[] = {
	"barrier",   "bcast",  "bcast0",    "bcastL",     "allreduce", "allreduceL", "reduce",
	"reduce0",   "gather", "allgather", "gatherv",    "allgatherv", "scatter",   "scatterv",
	"alltoall",  "alltoallv", "reduce_scatter", "scan",
};

#define LARGE 8192 /* ints: past the bytes that go packed with the status */

static int call_one(const char *call, int rank, int size)
{
	int x = rank + 1, y = 0, rc;
	int *v = calloc(LARGE, sizeof(int)), *w = calloc(LARGE, sizeof(int));
	int *counts = calloc((size_t)size, sizeof(int)), *displs = calloc((size_t)size, sizeof(int));
	for (int r = 0; r < size; r++) {
		counts[r] = 1;
		displs[r] = r;
	}
	if (!strcmp(call, "barrier"))
		rc = MPI_Barrier(MPI_COMM_WORLD);
	else if (!strcmp(call, "bcast"))
		rc = MPI_Bcast(&x, 1, MPI_INT, size - 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "bcast0"))
		rc = MPI_Bcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD);
	else if (!strcmp(call, "bcastL"))
		rc = MPI_Bcast(v, LARGE, MPI_INT, size - 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "allreduceL"))
		rc = MPI_Allreduce(v, w, LARGE, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	else if (!strcmp(call, "reduce") || !strcmp(call, "reduce0"))
		rc = MPI_Reduce(&x, &y, 1, MPI_INT, MPI_SUM, !strcmp(call, "reduce"), MPI_COMM_WORLD);
	else if (!strcmp(call, "gather"))
		rc = MPI_Gather(&x, 1, MPI_INT, v, 1, MPI_INT, 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "allgather"))
		rc = MPI_Allgather(&x, 1, MPI_INT, v, 1, MPI_INT, MPI_COMM_WORLD);
	else if (!strcmp(call, "gatherv"))
		rc = MPI_Gatherv(&x, 1, MPI_INT, v, counts, displs, MPI_INT, 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "allgatherv"))
		rc = MPI_Allgatherv(&x, 1, MPI_INT, v, counts, displs, MPI_INT, MPI_COMM_WORLD);
	else if (!strcmp(call, "scatter"))
		rc = MPI_Scatter(v, 1, MPI_INT, &y, 1, MPI_INT, size - 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "scatterv"))
		rc = MPI_Scatterv(v, counts, displs, MPI_INT, &y, 1, MPI_INT, size - 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "alltoall"))
		rc = MPI_Alltoall(v, 1, MPI_INT, w, 1, MPI_INT, MPI_COMM_WORLD);
	else if (!strcmp(call, "alltoallv"))
		rc = MPI_Alltoallv(v, counts, displs, MPI_INT, w, counts, displs, MPI_INT, MPI_COMM_WORLD);
	else if (!strcmp(call, "reduce_scatter"))
		rc = MPI_Reduce_scatter_block(v, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	else if (!strcmp(call, "scan"))
		rc = MPI_Scan(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
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
	} else if (!strcmp(call, "ibarrier")) {
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
		rc = MPI_Iallgather(&x, 1, MPI_INT, v, 1, MPI_INT, MPI_COMM_WORLD, &req);
		if (rc == MPI_SUCCESS)
			rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
	} else
		rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	free(v);
	free(w);
	free(counts);
	free(displs);
	return rc;
}

/* The calls of "zero", each with a count of 0 (blocks of 0 items). */
static const char *const zero_calls[] = {
	"bcast",     "bcast0",	   "reduce",	"reduce0",	  "allreduce", "gather",    "allgather",
	"gatherv",   "allgatherv", "scatter",	"scatterv",	  "alltoall",  "alltoallv", "reduce_scatter",
	"scan",	     "exscan",	   "iallreduce", "ibcast",
};

static int zero_one(const char *call, int size)
{
	int x = 0, y = 0, rc;
	int *counts = calloc((size_t)size, sizeof(int)), *displs = calloc((size_t)size, sizeof(int));
	MPI_Request req = MPI_REQUEST_NULL;
	if (!strcmp(call, "bcast") || !strcmp(call, "bcast0"))
		rc = MPI_Bcast(&x, 0, MPI_INT, !strcmp(call, "bcast") ? size - 1 : 0, MPI_COMM_WORLD);
	else if (!strcmp(call, "reduce") || !strcmp(call, "reduce0"))
		rc = MPI_Reduce(&x, &y, 0, MPI_INT, MPI_SUM, !strcmp(call, "reduce"), MPI_COMM_WORLD);
	else if (!strcmp(call, "allreduce"))
		rc = MPI_Allreduce(&x, &y, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	else if (!strcmp(call, "gather"))
		rc = MPI_Gather(&x, 0, MPI_INT, &y, 0, MPI_INT, 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "allgather"))
		rc = MPI_Allgather(&x, 0, MPI_INT, &y, 0, MPI_INT, MPI_COMM_WORLD);
	else if (!strcmp(call, "gatherv"))
		rc = MPI_Gatherv(&x, 0, MPI_INT, &y, counts, displs, MPI_INT, 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "allgatherv"))
		rc = MPI_Allgatherv(&x, 0, MPI_INT, &y, counts, displs, MPI_INT, MPI_COMM_WORLD);
	else if (!strcmp(call, "scatter"))
		rc = MPI_Scatter(&x, 0, MPI_INT, &y, 0, MPI_INT, size - 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "scatterv"))
		rc = MPI_Scatterv(&x, counts, displs, MPI_INT, &y, 0, MPI_INT, size - 1, MPI_COMM_WORLD);
	else if (!strcmp(call, "alltoall"))
		rc = MPI_Alltoall(&x, 0, MPI_INT, &y, 0, MPI_INT, MPI_COMM_WORLD);
	else if (!strcmp(call, "alltoallv"))
		rc = MPI_Alltoallv(&x, counts, displs, MPI_INT, &y, counts, displs, MPI_INT, MPI_COMM_WORLD);
	else if (!strcmp(call, "reduce_scatter"))
		rc = MPI_Reduce_scatter_block(&x, &y, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	else if (!strcmp(call, "scan"))
		rc = MPI_Scan(&x, &y, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	else if (!strcmp(call, "exscan"))
		rc = MPI_Exscan(&x, &y, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	else if (!strcmp(call, "iallreduce"))
		rc = MPI_Iallreduce(&x, &y, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
	else
		rc = MPI_Ibcast(&x, 0, MPI_INT, size - 1, MPI_COMM_WORLD, &req);
	if (rc == MPI_SUCCESS && req != MPI_REQUEST_NULL)
		rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
	free(counts);
	free(displs);
	return rc;
}

/* "nonblocking": every survivor must complete all six (a leader's part
 * of each passes the news on) before MPI_Waitall reports. */
static int nonblocking(int rank, int size)
{
	MPI_Request req[6];
	int x = rank + 1, y[4] = {0, 0, 0, 0}, b = x;
	int *v = calloc((size_t)size, sizeof(int));
	MPI_Iallreduce(&x, &y[0], 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[0]);
	MPI_Ibcast(&b, 1, MPI_INT, size - 1, MPI_COMM_WORLD, &req[1]);
	MPI_Ibarrier(MPI_COMM_WORLD, &req[2]);
	MPI_Ireduce(&x, &y[1], 1, MPI_INT, MPI_SUM, 1, MPI_COMM_WORLD, &req[3]);
	MPI_Ireduce(&x, &y[2], 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &req[4]);
	MPI_Iallgather(&x, 1, MPI_INT, v, 1, MPI_INT, MPI_COMM_WORLD, &req[5]);
	int rc = MPI_Waitall(6, req, MPI_STATUSES_IGNORE);
	free(v);
	return rc;
}

/* Errors returned: the handler counts its calls, so that each call's
 * report says how often the error was reported (once, or never). */
static int handled;

static int my_rank, my_size;

/* "inhandler": the survivors' communicator, the handler's depth, the
 * nested calls of the handler, whether it was given another communicator. */
static MPI_Comm survivors = MPI_COMM_NULL;
static int depth, nested, comm_bad;

static void say(const char *what, const char *call, int rank, int rc, int times, const char *tail)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0, cls = 0;
	MPI_Error_class(rc, &cls);
	MPI_Error_string(rc, msg, &len);
	printf("coll_dead: rank %d: %s%s returned %d (class %d: %s), handler %d%s\n", rank, what, call, rc, cls, msg,
	       times, tail);
	fflush(NULL);
}

/* The collectives of "inhandler"'s handler: each must end (the last with
 * the error, reported through this handler once more, nested). */
static void in_handler(void)
{
	int x = my_rank + 1, y = 0, n = my_size - 1, rc;
	nested = 0;
	rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF);
	say("in handler: ", "self", my_rank, rc, nested, rc == MPI_SUCCESS && y == x ? ", ok" : ", wrong");
	nested = 0;
	y = 0;
	rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, survivors);
	say("in handler: ", "survivors", my_rank, rc, nested,
	    rc == MPI_SUCCESS && y == n * (n + 1) / 2 ? ", ok" : ", wrong");
	nested = 0;
	rc = MPI_Barrier(MPI_COMM_WORLD);
	say("in handler: ", "world", my_rank, rc, nested, "");
	nested = 0;
}

static void count_error(MPI_Comm *comm, int *code, ...)
{
	(void)code;
	if (depth > 0) {
		nested++;
		return;
	}
	handled++;
	if (survivors == MPI_COMM_NULL)
		return;
	int same = MPI_UNEQUAL;
	MPI_Comm_compare(*comm, MPI_COMM_WORLD, &same);
	comm_bad |= same != MPI_IDENT;
	depth++;
	in_handler();
	depth--;
}

static void report(const char *call, int rank, int rc)
{
	say("", call, rank, rc, handled, comm_bad ? ", comm bad" : "");
	handled = 0;
	comm_bad = 0;
}

/* By default: says that the handler runs (the MPI library's own message
 * may be lost when several ranks abort at once), then MPI_ERRORS_ARE_FATAL
 * ends the process. */
static void fatal_said(MPI_Comm *comm, int *code, ...)
{
	printf("coll_dead: rank %d: the default handler ends the process\n", my_rank);
	fflush(NULL);
	MPI_Comm_set_errhandler(*comm, MPI_ERRORS_ARE_FATAL);
	MPI_Comm_call_errhandler(*comm, *code);
}

int main(int argc, char **argv)
{
	int rank, size, x, y = 0;
	const char *call = argc > 1 ? argv[1] : "allreduce";
	int ret = (argc > 2 && !strcmp(argv[2], "return")) || getenv("COLL_DEAD_RETURN");

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	my_rank = rank;
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	my_size = size;
	x = rank + 1;
	MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (y != size * (size + 1) / 2) {
		fprintf(stderr, "coll_dead: rank %d: first allreduce gave %d\n", rank, y);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	MPI_Errhandler eh;
	MPI_Comm_create_errhandler(ret ? count_error : fatal_said, &eh);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
	if (!strcmp(call, "inhandler")) {
		MPI_Comm_split(MPI_COMM_WORLD, rank < size - 1 ? 0 : MPI_UNDEFINED, rank, &survivors);
		if (survivors != MPI_COMM_NULL)
			MPI_Comm_set_errhandler(survivors, MPI_ERRORS_RETURN);
	}
	if (rank == size - 1) {
		fflush(NULL);
		raise(SIGKILL);
	}
	if (!strcmp(call, "nonblocking")) {
		report(call, rank, nonblocking(rank, size));
	} else if (!strcmp(call, "zero")) {
		for (int pass = 0; pass < 2; pass++) {
			for (size_t k = 0; k < sizeof(zero_calls) / sizeof(zero_calls[0]); k++) {
				int rc = zero_one(zero_calls[k], size);
				say("zero ", zero_calls[k], rank, rc, handled, "");
				handled = 0;
			}
			if (!pass)
				report("barrier", rank, call_one("barrier", rank, size));
		}
	} else if (!strcmp(call, "inhandler")) {
		static const char *const outer[] = {"barrier", "allreduce", "bcast", "iallreduce"};
		if (!ret)
			survivors = MPI_COMM_NULL; /* the default handler: nothing in it */
		for (size_t k = 0; k < sizeof(outer) / sizeof(outer[0]); k++)
			report(outer[k], rank, call_one(outer[k], rank, size));
		/* The handler's MPI_Barrier on the communicator while its
		 * MPI_Ibarrier is pending: it lets that one finish first. */
		MPI_Request req[2];
		MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[0]);
		MPI_Ibarrier(MPI_COMM_WORLD, &req[1]);
		report("iallreduce_pending", rank, MPI_Wait(&req[0], MPI_STATUS_IGNORE));
		report("ibarrier_pending", rank, MPI_Wait(&req[1], MPI_STATUS_IGNORE));
	} else if (!strcmp(call, "blocking")) {
		for (size_t k = 0; k < sizeof(blocking_calls) / sizeof(blocking_calls[0]); k++)
			report(blocking_calls[k], rank, call_one(blocking_calls[k], rank, size));
	} else {
		report(call, rank, call_one(call, rank, size));
	}
	_exit(0);
}
