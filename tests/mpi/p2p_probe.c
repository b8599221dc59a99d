/*
 * p2p_probe.c - Probe, Iprobe, Mprobe, Improbe, Mrecv and Imrecv: counts
 * read from the probe's status, wildcards, a matched message that no later
 * receive can take, Message_c2f/f2c, MPI_MESSAGE_NO_PROC from PROC_NULL, and
 * probes that find nothing.
 *
 * Messages of 0 bytes to 1 MiB (eager and not).
 *
 * Call families: blocking (the sends, Probe + Recv), probe (Mrecv, Imrecv).
 */
#include "mpitest.h"

static void probe_recv(int peer)
{
	static const int sizes[] = {0, 5, 3000, 70000};
	MPI_Status st;

	for (int turn = 0; turn < 2; turn++) {
		if ((turn == 0) == (mt_rank < peer)) {
			for (int i = 0; i < 4; i++) {
				unsigned char *b = mt_alloc(sizes[i]);
				mt_fill(b, sizes[i], mt_seed(mt_rank, peer, i));
				MT_MPI(MPI_Send(b, sizes[i], MPI_BYTE, peer, 30 + i, MPI_COMM_WORLD));
				free(b);
			}
			continue;
		}
		for (int i = 0; i < 4; i++) {
			int n = -1, flag = 0;
			if (i % 2) {
				while (!flag)
					MT_MPI(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
			} else {
				MT_MPI(MPI_Probe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
			}
			MT_CHECK_STATUS(st, peer, 30 + i, sizes[i], MPI_BYTE);
			MT_MPI(MPI_Get_count(&st, MPI_BYTE, &n));
			unsigned char *b = mt_alloc(n);
			/* Probing again finds the same message. */
			MT_MPI(MPI_Probe(st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 30 + i, sizes[i], MPI_BYTE);
			MT_MPI(MPI_Recv(b, n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 30 + i, sizes[i], MPI_BYTE);
			MT_CHECK_FILL(b, n, mt_seed(peer, mt_rank, i));
			free(b);
		}
	}
}

static void matched(int peer)
{
	int a[4] = {mt_rank, 1, 1, 1}, b[2] = {mt_rank, 2};
	MPI_Status st;

	for (int turn = 0; turn < 2; turn++) {
		if ((turn == 0) == (mt_rank < peer)) {
			/* Two messages with the same envelope, then two more. */
			MT_MPI(MPI_Send(a, 4, MPI_INT, peer, 40, MPI_COMM_WORLD));
			MT_MPI(MPI_Send(b, 2, MPI_INT, peer, 40, MPI_COMM_WORLD));
			MT_MPI(MPI_Send(a, 3, MPI_INT, peer, 41, MPI_COMM_WORLD));
			MT_MPI(MPI_Send(b, 1, MPI_INT, peer, 42, MPI_COMM_WORLD));
			continue;
		}
		MPI_Message m1 = MPI_MESSAGE_NULL, m2 = MPI_MESSAGE_NULL;
		int x[8] = {0}, y[8] = {0}, n = -1;
		MT_MPI(MPI_Mprobe(peer, 40, MPI_COMM_WORLD, &m1, &st));
		MT_CHECK_STATUS(st, peer, 40, 4, MPI_INT);
		MT_CHECK(m1 != MPI_MESSAGE_NULL && m1 != MPI_MESSAGE_NO_PROC, "Mprobe gave no message");
		/* The first is taken: a receive gets the second. */
		MT_MPI(MPI_Recv(y, 8, MPI_INT, peer, 40, MPI_COMM_WORLD, &st));
		MT_CHECK_STATUS(st, peer, 40, 2, MPI_INT);
		MT_CHECK(y[0] == peer && y[1] == 2, "the receive after Mprobe: %d %d", y[0], y[1]);
		/* Through Fortran's handle and back. */
		MPI_Fint f = MPI_Message_c2f(m1);
		MPI_Message m1b = MPI_Message_f2c(f);
		MT_CHECK(m1b == m1, "Message_f2c(Message_c2f(m)) != m");
		MT_MPI(MPI_Mrecv(x, 8, MPI_INT, &m1b, &st));
		MT_CHECK(m1b == MPI_MESSAGE_NULL, "Mrecv left the message handle set");
		MT_CHECK_STATUS(st, peer, 40, 4, MPI_INT);
		MT_CHECK(x[0] == peer && x[3] == 1, "Mrecv data %d %d", x[0], x[3]);

		int flag = 0;
		while (!flag)
			MT_MPI(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &m2, &st));
		MT_CHECK_STATUS(st, peer, 41, 3, MPI_INT);
		MT_MPI(MPI_Get_count(&st, MPI_INT, &n));
		MPI_Request rq;
		memset(x, 0, sizeof(x));
		MT_MPI(MPI_Imrecv(x, n, MPI_INT, &m2, &rq));
		MT_CHECK(m2 == MPI_MESSAGE_NULL, "Imrecv left the message handle set");
		MT_MPI(MPI_Wait(&rq, &st));
		MT_CHECK_STATUS(st, peer, 41, 3, MPI_INT);
		MT_CHECK(x[0] == peer && x[2] == 1 && x[3] == 0, "Imrecv data");

		/* Mprobe with wildcards, then Mrecv with STATUS_IGNORE. */
		MT_MPI(MPI_Mprobe(MPI_ANY_SOURCE, 42, MPI_COMM_WORLD, &m1, &st));
		MT_CHECK_STATUS(st, peer, 42, 1, MPI_INT);
		x[0] = -1;
		MT_MPI(MPI_Mrecv(x, 1, MPI_INT, &m1, MPI_STATUS_IGNORE));
		MT_CHECK(x[0] == peer, "Mrecv with STATUS_IGNORE: %d", x[0]);
	}
}

/* A large message (not eager): Mprobe + Mrecv, and Improbe + Imrecv. */
#define BIG (1 << 20)
static void matched_large(int peer)
{
	unsigned char *b = mt_alloc(BIG);
	MPI_Status st;

	for (int turn = 0; turn < 2; turn++) {
		if ((turn == 0) == (mt_rank < peer)) {
			mt_fill(b, BIG, mt_seed(mt_rank, peer, 50));
			MT_MPI(MPI_Send(b, BIG, MPI_BYTE, peer, 50, MPI_COMM_WORLD));
			mt_fill(b, BIG - 1, mt_seed(mt_rank, peer, 51));
			MT_MPI(MPI_Send(b, BIG - 1, MPI_BYTE, peer, 51, MPI_COMM_WORLD));
			continue;
		}
		MPI_Message m;
		MT_MPI(MPI_Mprobe(peer, 50, MPI_COMM_WORLD, &m, &st));
		MT_CHECK_STATUS(st, peer, 50, BIG, MPI_BYTE);
		memset(b, 0, BIG);
		MT_MPI(MPI_Mrecv(b, BIG, MPI_BYTE, &m, &st));
		MT_CHECK_STATUS(st, peer, 50, BIG, MPI_BYTE);
		MT_CHECK_FILL(b, BIG, mt_seed(peer, mt_rank, 50));
		int flag = 0;
		while (!flag)
			MT_MPI(MPI_Improbe(peer, 51, MPI_COMM_WORLD, &flag, &m, &st));
		MT_CHECK_STATUS(st, peer, 51, BIG - 1, MPI_BYTE);
		MPI_Request rq;
		memset(b, 0, BIG);
		MT_MPI(MPI_Imrecv(b, BIG, MPI_BYTE, &m, &rq));
		MT_MPI(MPI_Wait(&rq, &st));
		MT_CHECK_STATUS(st, peer, 51, BIG - 1, MPI_BYTE);
		MT_CHECK_FILL(b, BIG - 1, mt_seed(peer, mt_rank, 51));
	}
	free(b);
}

static void nothing_there(void)
{
	int flag = 1;
	MPI_Message m = MPI_MESSAGE_NULL;
	MPI_Status st;

	MT_MPI(MPI_Iprobe(MPI_ANY_SOURCE, 12345, MPI_COMM_WORLD, &flag, &st));
	MT_CHECK(!flag, "Iprobe found a message that nobody sent");
	flag = 1;
	MT_MPI(MPI_Improbe(MPI_ANY_SOURCE, 12345, MPI_COMM_WORLD, &flag, &m, &st));
	MT_CHECK(!flag, "Improbe found a message that nobody sent");

	/* PROC_NULL: found at once, MPI_MESSAGE_NO_PROC, an empty receive. */
	MT_MPI(MPI_Probe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, MPI_PROC_NULL, MPI_ANY_TAG, 0, MPI_INT);
	MT_MPI(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &st));
	MT_CHECK(m == MPI_MESSAGE_NO_PROC, "Mprobe(PROC_NULL) did not give MPI_MESSAGE_NO_PROC");
	int v = 9;
	MT_MPI(MPI_Mrecv(&v, 1, MPI_INT, &m, &st));
	MT_CHECK_STATUS(st, MPI_PROC_NULL, MPI_ANY_TAG, 0, MPI_INT);
	MT_CHECK(v == 9 && m == MPI_MESSAGE_NULL, "Mrecv of MPI_MESSAGE_NO_PROC");
	flag = 0;
	MT_MPI(MPI_Improbe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &flag, &m, &st));
	MT_CHECK(flag && m == MPI_MESSAGE_NO_PROC, "Improbe(PROC_NULL)");
	MPI_Request rq;
	MT_MPI(MPI_Imrecv(&v, 1, MPI_INT, &m, &rq));
	MT_MPI(MPI_Wait(&rq, &st));
	MT_CHECK_STATUS(st, MPI_PROC_NULL, MPI_ANY_TAG, 0, MPI_INT);
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_probe");
	nothing_there();
	for (int d = 1; d < mt_size; d++) {
		probe_recv(mt_rank ^ d);
		matched(mt_rank ^ d);
		matched_large(mt_rank ^ d);
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	}
	return mt_finish();
}
