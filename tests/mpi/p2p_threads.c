/*
 * p2p_threads.c - MPI_THREAD_MULTIPLE: the plugin leaves such a program to
 * the MPI library (with its one warning) and keeps nothing its threads
 * could race on.  THREADS threads a rank, each with its own tag, make,
 * start, wait for and free persistent sends, send and receive with
 * Isend/Irecv and Sendrecv, and make and free derived datatypes, all at
 * once; every message is checked.  A plugin that carried such a program
 * hangs or fails here.  (The race this was written for, the plugin's list
 * of the library's persistent requests grown by several threads at once
 * with PINSHM_MPI_STATS=1, crashed a similar program under ASan in 1 run
 * of 3; this one did not crash in 6 runs of the old plugin, so it guards
 * that race only by chance.)
 *
 * Usage: p2p_threads [ROUNDS] (3000: the persistent sends each thread
 * makes; a quarter as many exchanges).
 *
 * Where the library does not give MPI_THREAD_MULTIPLE, it says so and
 * passes.  Call families: none carried (the library's, every one).
 */
#include <pthread.h>

#include "mpitest.h"

#define THREADS 4

static int peer;
static int rounds = 3000;

static int expected(int thread, int round)
{
	return thread * 1000000 + round;
}

/* Persistent sends made, started and freed by every thread at once (the
 * lower rank), received in order per thread (the higher). */
static long persistent(int t)
{
	long bad = 0;

	for (int i = 0; i < rounds; i++) {
		int v = expected(t, i);
		if (mt_rank < peer) {
			MPI_Request rq;
			MT_MPI(MPI_Send_init(&v, 1, MPI_INT, peer, t, MPI_COMM_WORLD, &rq));
			MT_MPI(MPI_Start(&rq));
			MT_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
			MT_MPI(MPI_Request_free(&rq));
		} else {
			MT_MPI(MPI_Recv(&v, 1, MPI_INT, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			bad += v != expected(t, i);
		}
	}
	return bad;
}

/* Both ways at once: Irecv + Isend + Waitall, Sendrecv, derived types. */
static long exchange(int t)
{
	long bad = 0;

	for (int i = 0; i < rounds / 4; i++) {
		MPI_Datatype pair;
		MPI_Request rq[2];
		int out = expected(t, i), back = -1;

		MT_MPI(MPI_Type_contiguous(2, MPI_INT, &pair));
		MT_MPI(MPI_Type_commit(&pair));
		MT_MPI(MPI_Irecv(&back, 1, MPI_INT, peer, THREADS + t, MPI_COMM_WORLD, &rq[0]));
		MT_MPI(MPI_Isend(&out, 1, MPI_INT, peer, THREADS + t, MPI_COMM_WORLD, &rq[1]));
		MT_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
		bad += back != expected(t, i);
		back = -1;
		MT_MPI(MPI_Sendrecv(&out, 1, MPI_INT, peer, 2 * THREADS + t, &back, 1, MPI_INT, peer,
				    2 * THREADS + t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		bad += back != expected(t, i);
		MT_MPI(MPI_Type_free(&pair));
	}
	return bad;
}

static void *work(void *arg)
{
	int t = (int)(intptr_t)arg;

	return (void *)(intptr_t)(persistent(t) + exchange(t));
}

int main(int argc, char **argv)
{
	int provided = -1;

	mt_name = "p2p_threads";
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &mt_size);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (provided != MPI_THREAD_MULTIPLE) {
		if (mt_rank == 0)
			printf("p2p_threads: ok (the library gives no MPI_THREAD_MULTIPLE: nothing to test)\n");
		MPI_Finalize();
		return 0;
	}
	if (argc > 1)
		rounds = atoi(argv[1]);
	MT_CHECK(rounds >= 4, "rounds: %d, want 4 or more", rounds);
	peer = mt_rank ^ 1;
	pthread_t th[THREADS];
	for (int t = 0; t < THREADS; t++)
		MT_CHECK(pthread_create(&th[t], NULL, work, (void *)(intptr_t)t) == 0, "pthread_create");
	long bad = 0;
	for (int t = 0; t < THREADS; t++) {
		void *b;
		pthread_join(th[t], &b);
		bad += (long)(intptr_t)b;
	}
	MT_CHECK(bad == 0, "%ld messages with the wrong value", bad);
	return mt_finish();
}
