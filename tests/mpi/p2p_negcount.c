/*
 * p2p_negcount.c - a negative count of requests given to MPI_Waitall,
 * MPI_Testall, MPI_Waitany, MPI_Testany, MPI_Waitsome, MPI_Testsome and
 * MPI_Startall gets MPI_ERR_ARG, through the error handler the MPI library itself
 * would call, and leaves the requests of the array alone.
 *
 * The array holds a pending receive of the plugin's (MPI_Irecv) and an
 * inactive persistent send (MPI_Send_init), both on a dup of
 * MPI_COMM_WORLD that has an error handler of its own; MPI_COMM_WORLD has
 * another.  Each call with count -1 is made twice: through the profiling
 * name (PMPI_X, the library alone), then through MPI_X (the plugin, where
 * it is preloaded).  Both must return MPI_ERR_ARG, and MPI_X must call
 * the same handlers as PMPI_X, as often and with the same error class
 * (Open MPI 4.1 calls MPI_COMM_WORLD's once, except in MPI_Testsome, which
 * returns without calling one).  Then, under MPI_ERRORS_RETURN, MPI_X
 * again.  Afterwards the receive is still pending and the persistent send
 * inactive: the peer's MPI_Send completes the one, MPI_Start and MPI_Wait
 * the other, data and statuses checked.
 *
 * The plugin's MPI_Startall once returned MPI_SUCCESS for a negative
 * count, calling no handler.  f_negcount.f90 tests the Fortran calls.
 *
 * Each pair of ranks in turn (peer = rank ^ d).  Call families: blocking
 * (Send), nonblocking (Irecv), persistent (Send_init, Start).
 */
#include "mpitest.h"

enum call { WAITALL, TESTALL, WAITANY, TESTANY, WAITSOME, TESTSOME, STARTALL, NCALLS };

static const char *const call_name[NCALLS] = {"Waitall",  "Testall",  "Waitany", "Testany",
					      "Waitsome", "Testsome", "Startall"};

/* What the two counting handlers saw. */
struct seen {
	int calls, code;
};
static struct seen on_world, on_dup;

static void count_world(MPI_Comm *comm, int *code, ...)
{
	(void)comm;
	on_world.calls++;
	on_world.code = *code;
}

static void count_dup(MPI_Comm *comm, int *code, ...)
{
	(void)comm;
	on_dup.calls++;
	on_dup.code = *code;
}

/* Call @p k with count -1 on @p rq, through PMPI_X (@p library) or MPI_X. */
static int negative(enum call k, int library, MPI_Request rq[])
{
	MPI_Status st[2];
	int index = -7, flag = -7, outcount = -7, indices[2];

	switch (k) {
	case WAITALL:
		return library ? PMPI_Waitall(-1, rq, st) : MPI_Waitall(-1, rq, st);
	case TESTALL:
		return library ? PMPI_Testall(-1, rq, &flag, st) : MPI_Testall(-1, rq, &flag, st);
	case WAITANY:
		return library ? PMPI_Waitany(-1, rq, &index, st) : MPI_Waitany(-1, rq, &index, st);
	case TESTANY:
		return library ? PMPI_Testany(-1, rq, &index, &flag, st) : MPI_Testany(-1, rq, &index, &flag, st);
	case WAITSOME:
		return library ? PMPI_Waitsome(-1, rq, &outcount, indices, st)
			       : MPI_Waitsome(-1, rq, &outcount, indices, st);
	case TESTSOME:
		return library ? PMPI_Testsome(-1, rq, &outcount, indices, st)
			       : MPI_Testsome(-1, rq, &outcount, indices, st);
	default:
		return library ? PMPI_Startall(-1, rq) : MPI_Startall(-1, rq);
	}
}

static int error_class(int code)
{
	int cls = -1;

	MT_MPI(MPI_Error_class(code, &cls));
	return cls;
}

/* What a call did: its result's class, and each handler's calls and the
 * class of the last code it got (-1: none). */
struct outcome {
	int rc_class, world_calls, world_class, dup_calls, dup_class;
};

static struct outcome outcome_of(enum call k, int library, MPI_Request rq[])
{
	on_world = on_dup = (struct seen){0, MPI_SUCCESS};
	int rc = negative(k, library, rq);
	return (struct outcome){error_class(rc), on_world.calls, on_world.calls ? error_class(on_world.code) : -1,
				on_dup.calls, on_dup.calls ? error_class(on_dup.code) : -1};
}

static void negative_counts(MPI_Comm dup, MPI_Request rq[2])
{
	MPI_Errhandler world_eh, dup_eh;

	MT_MPI(MPI_Comm_create_errhandler(count_world, &world_eh));
	MT_MPI(MPI_Comm_create_errhandler(count_dup, &dup_eh));
	MT_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, world_eh));
	MT_MPI(MPI_Comm_set_errhandler(dup, dup_eh));
	for (int k = 0; k < NCALLS; k++) {
		struct outcome lib = outcome_of(k, 1, rq), ours = outcome_of(k, 0, rq);
		MT_CHECK(lib.rc_class == MPI_ERR_ARG, "PMPI_%s(-1): class %d, want MPI_ERR_ARG (%d)", call_name[k],
			 lib.rc_class, MPI_ERR_ARG);
		MT_CHECK(ours.rc_class == MPI_ERR_ARG, "MPI_%s(-1): class %d, want MPI_ERR_ARG (%d)", call_name[k],
			 ours.rc_class, MPI_ERR_ARG);
		MT_CHECK(lib.world_calls + lib.dup_calls <= 1, "PMPI_%s(-1): %d + %d handler calls", call_name[k],
			 lib.world_calls, lib.dup_calls);
		MT_CHECK(ours.world_calls == lib.world_calls && ours.world_class == lib.world_class &&
				 ours.dup_calls == lib.dup_calls && ours.dup_class == lib.dup_class,
			 "MPI_%s(-1): WORLD's handler called %d times (class %d), the dup's %d (class %d); "
			 "the library alone: %d (%d), %d (%d)",
			 call_name[k], ours.world_calls, ours.world_class, ours.dup_calls, ours.dup_class,
			 lib.world_calls, lib.world_class, lib.dup_calls, lib.dup_class);
	}
	MT_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
	MT_MPI(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
	MT_MPI(MPI_Errhandler_free(&world_eh));
	MT_MPI(MPI_Errhandler_free(&dup_eh));
	for (int k = 0; k < NCALLS; k++) {
		int cls = error_class(negative(k, 0, rq));
		MT_CHECK(cls == MPI_ERR_ARG, "MPI_%s(-1) under MPI_ERRORS_RETURN: class %d, want MPI_ERR_ARG (%d)",
			 call_name[k], cls, MPI_ERR_ARG);
	}
}

int main(int argc, char **argv)
{
	enum { N = 64 };
	int in[N], out[N], sent[N];
	MPI_Comm dup;

	mt_init(&argc, &argv, "p2p_negcount");
	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
	for (int d = 1; d < mt_size; d++) {
		int peer = mt_rank ^ d;
		MPI_Request rq[2];
		MPI_Status st;

		for (int i = 0; i < N; i++) {
			in[i] = -1;
			out[i] = (int)mt_word(mt_seed(mt_rank, peer, d), (uint64_t)i);
			sent[i] = (int)mt_word(mt_seed(mt_rank, peer, 100 + d), (uint64_t)i);
		}
		MT_MPI(MPI_Irecv(in, N, MPI_INT, peer, d, dup, &rq[0]));
		MT_MPI(MPI_Send_init(sent, N, MPI_INT, peer, 100 + d, dup, &rq[1]));
		negative_counts(dup, rq);
		MT_CHECK(rq[0] != MPI_REQUEST_NULL && rq[1] != MPI_REQUEST_NULL, "a negative count nulled a request");

		MT_MPI(MPI_Send(out, N, MPI_INT, peer, d, dup));
		MT_MPI(MPI_Wait(&rq[0], &st));
		MT_CHECK_STATUS(st, peer, d, N, MPI_INT);
		for (int i = 0; i < N; i++)
			MT_CHECK(in[i] == (int)mt_word(mt_seed(peer, mt_rank, d), (uint64_t)i), "from %d: [%d] = %d",
				 peer, i, in[i]);

		MT_MPI(MPI_Irecv(in, N, MPI_INT, peer, 100 + d, dup, &rq[0]));
		MT_MPI(MPI_Start(&rq[1]));
		MT_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
		for (int i = 0; i < N; i++)
			MT_CHECK(in[i] == (int)mt_word(mt_seed(peer, mt_rank, 100 + d), (uint64_t)i),
				 "persistent from %d: [%d] = %d", peer, i, in[i]);
		MT_MPI(MPI_Request_free(&rq[1]));
	}
	MT_MPI(MPI_Comm_free(&dup));
	return mt_finish();
}
