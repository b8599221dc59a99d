/*
 * p2p_modes.c - the send modes: Ssend/Issend (complete only once matched),
 * Bsend/Ibsend with Buffer_attach/Buffer_detach (several buffered before the
 * receiver posts), Rsend/Irsend (to a receive known to be posted), Isend and
 * Irecv of several sizes, truncation of a nonblocking receive, 1 MiB
 * Bsend, Ssend and Issend, and Ssend of every size from 0 to 100 bytes;
 * with every peer (above 4 ranks, the sizes shared among the peers and
 * the 1 MiB messages with log2(mt_size) of them: the power-of-two
 * distances).
 *
 * Call families: blocking, nonblocking, synchronous, buffered.
 */
#include "mpitest.h"

#define NBUF 4
#define BUFMSG 3000

/* Issend must not complete before the receiver matches it: the receiver
 * waits for a "go" message, sent only after the sender saw Test fail. */
static void synchronous(int peer)
{
	int v = mt_rank * 10, w = -1, go = 1;
	MPI_Status st;

	for (int turn = 0; turn < 2; turn++) {
		if ((turn == 0) == (mt_rank < peer)) {
			MPI_Request rq;
			int flag = 1;
			MT_MPI(MPI_Issend(&v, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq));
			for (int i = 0; i < 50 && flag; i++)
				MT_MPI(MPI_Test(&rq, &flag, MPI_STATUS_IGNORE));
			MT_CHECK(!flag, "Issend completed before the receive was posted");
			MT_MPI(MPI_Send(&go, 1, MPI_INT, peer, 2, MPI_COMM_WORLD));
			MT_MPI(MPI_Wait(&rq, &st));
			MT_CHECK(rq == MPI_REQUEST_NULL, "Wait left the request set");
			MT_MPI(MPI_Ssend(&v, 1, MPI_INT, peer, 3, MPI_COMM_WORLD));
			MT_MPI(MPI_Ssend(NULL, 0, MPI_INT, peer, 4, MPI_COMM_WORLD));
		} else {
			MT_MPI(MPI_Recv(&go, 1, MPI_INT, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			MT_MPI(MPI_Recv(&w, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 1, 1, MPI_INT);
			MT_CHECK(w == peer * 10, "Issend data %d", w);
			w = -1;
			MT_MPI(MPI_Recv(&w, 1, MPI_INT, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 3, 1, MPI_INT);
			MT_CHECK(w == peer * 10, "Ssend data %d", w);
			MT_MPI(MPI_Recv(&w, 1, MPI_INT, peer, 4, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 4, 0, MPI_INT);
		}
	}
}

/* Ssend of every size from 0 to 100 bytes, each checked to the byte
 * (round @p d of the peers: its share, mt_sweep_first()). */
static void synchronous_sizes(int peer, int d)
{
	unsigned char out[100], in[116];

	for (int n = mt_sweep_first(d); n <= 100; n += mt_sweep_step()) {
		for (int turn = 0; turn < 2; turn++) {
			if ((turn == 0) == (mt_rank < peer)) {
				mt_fill(out, n, mt_seed(mt_rank, peer, n));
				MT_MPI(MPI_Ssend(out, n, MPI_BYTE, peer, 5, MPI_COMM_WORLD));
			} else {
				MPI_Status st;
				memset(in, 0, sizeof(in));
				MT_MPI(MPI_Recv(in, n + 16, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &st));
				MT_CHECK_STATUS(st, peer, 5, n, MPI_BYTE);
				MT_CHECK_FILL(in, n, mt_seed(peer, mt_rank, n));
				for (int k = n; k < n + 16; k++)
					MT_CHECK(in[k] == 0, "byte %d written past the Ssend of %d", k, n);
			}
		}
	}
}

/* NBUF Bsends and NBUF Ibsends go out before the receiver posts anything. */
static void buffered(int peer)
{
	int size = 2 * NBUF * (BUFMSG + MPI_BSEND_OVERHEAD);
	char *buf = mt_alloc(size);
	unsigned char *msg = mt_alloc(BUFMSG);
	MPI_Request rq[NBUF];

	MT_MPI(MPI_Buffer_attach(buf, size));
	for (int turn = 0; turn < 2; turn++) {
		if ((turn == 0) == (mt_rank < peer)) {
			for (int i = 0; i < NBUF; i++) {
				mt_fill(msg, BUFMSG - i, mt_seed(mt_rank, peer, 200 + i));
				MT_MPI(MPI_Bsend(msg, BUFMSG - i, MPI_BYTE, peer, 5, MPI_COMM_WORLD));
			}
			for (int i = 0; i < NBUF; i++) {
				mt_fill(msg, i, mt_seed(mt_rank, peer, 300 + i));
				MT_MPI(MPI_Ibsend(msg, i, MPI_BYTE, peer, 6, MPI_COMM_WORLD, &rq[i]));
				/* A buffered send's buffer is free once it returns. */
				memset(msg, 0xee, BUFMSG);
			}
			MT_MPI(MPI_Waitall(NBUF, rq, MPI_STATUSES_IGNORE));
			MT_MPI(MPI_Send(NULL, 0, MPI_BYTE, peer, 7, MPI_COMM_WORLD));
		} else {
			MPI_Status st;
			MT_MPI(MPI_Recv(NULL, 0, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			for (int i = NBUF - 1; i >= 0; i--) {
				MT_MPI(MPI_Recv(msg, BUFMSG, MPI_BYTE, peer, 6, MPI_COMM_WORLD, &st));
				int k = NBUF - 1 - i;
				MT_CHECK_STATUS(st, peer, 6, k, MPI_BYTE);
				MT_CHECK_FILL(msg, k, mt_seed(peer, mt_rank, 300 + k));
			}
			for (int i = 0; i < NBUF; i++) {
				MT_MPI(MPI_Recv(msg, BUFMSG, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &st));
				MT_CHECK_STATUS(st, peer, 5, BUFMSG - i, MPI_BYTE);
				MT_CHECK_FILL(msg, BUFMSG - i, mt_seed(peer, mt_rank, 200 + i));
			}
		}
	}
	void *back = NULL;
	int back_size = 0;
	MT_MPI(MPI_Buffer_detach(&back, &back_size));
	MT_CHECK(back == buf && back_size == size, "Buffer_detach gave %p/%d, want %p/%d", back, back_size,
		 (void *)buf, size);
	/* Attach again (a second, smaller buffer) and use it. */
	size = BUFMSG + MPI_BSEND_OVERHEAD;
	MT_MPI(MPI_Buffer_attach(buf, size));
	int x = mt_rank, y = -1;
	MT_MPI(MPI_Bsend(&x, 1, MPI_INT, peer, 8, MPI_COMM_WORLD));
	MT_MPI(MPI_Recv(&y, 1, MPI_INT, peer, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	MT_CHECK(y == peer, "Bsend after re-attach: %d", y);
	MT_MPI(MPI_Buffer_detach(&back, &back_size));
	MT_CHECK(back == buf && back_size == size, "second detach %p/%d", back, back_size);
	free(buf);
	free(msg);
}

/* Large messages (not eager): Ssend and Issend, and a Bsend that completes
 * into the attached buffer before the receiver posts anything. */
#define BIG (1 << 20)
static void large(int peer)
{
	unsigned char *b = mt_alloc(BIG), *r = mt_alloc(BIG);
	int size = BIG + MPI_BSEND_OVERHEAD;
	char *att = mt_alloc(size);
	MPI_Status st;

	MT_MPI(MPI_Buffer_attach(att, size));
	for (int turn = 0; turn < 2; turn++) {
		if ((turn == 0) == (mt_rank < peer)) {
			mt_fill(b, BIG, mt_seed(mt_rank, peer, 60));
			MT_MPI(MPI_Bsend(b, BIG, MPI_BYTE, peer, 60, MPI_COMM_WORLD));
			memset(b, 0, BIG); /* the buffered copy is what goes */
			MT_MPI(MPI_Send(NULL, 0, MPI_BYTE, peer, 61, MPI_COMM_WORLD));
			mt_fill(b, BIG, mt_seed(mt_rank, peer, 62));
			MT_MPI(MPI_Ssend(b, BIG, MPI_BYTE, peer, 62, MPI_COMM_WORLD));
			MPI_Request rq;
			mt_fill(b, BIG, mt_seed(mt_rank, peer, 63));
			MT_MPI(MPI_Issend(b, BIG, MPI_BYTE, peer, 63, MPI_COMM_WORLD, &rq));
			MT_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
		} else {
			MT_MPI(MPI_Recv(NULL, 0, MPI_BYTE, peer, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			for (int tag = 60; tag <= 63; tag++) {
				if (tag == 61)
					continue;
				memset(r, 0, BIG);
				MT_MPI(MPI_Recv(r, BIG, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
				MT_CHECK_STATUS(st, peer, tag, BIG, MPI_BYTE);
				MT_CHECK_FILL(r, BIG, mt_seed(peer, mt_rank, tag));
			}
		}
	}
	void *back;
	int back_size;
	MT_MPI(MPI_Buffer_detach(&back, &back_size));
	free(att);
	free(b);
	free(r);
}

/* Rsend and Irsend go to receives posted before a zero-byte "ready". */
static void ready(int peer)
{
	int v[3] = {mt_rank, 7, 8}, w[3] = {-1, -1, -1}, u[3] = {-1, -1, -1};
	MPI_Request rq[2];
	MPI_Status st[2];

	MT_MPI(MPI_Irecv(w, 3, MPI_INT, peer, 9, MPI_COMM_WORLD, &rq[0]));
	MT_MPI(MPI_Irecv(u, 3, MPI_INT, peer, 10, MPI_COMM_WORLD, &rq[1]));
	MT_MPI(MPI_Sendrecv(NULL, 0, MPI_INT, peer, 11, NULL, 0, MPI_INT, peer, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	MT_MPI(MPI_Rsend(v, 3, MPI_INT, peer, 9, MPI_COMM_WORLD));
	MPI_Request sr;
	MT_MPI(MPI_Irsend(v, 2, MPI_INT, peer, 10, MPI_COMM_WORLD, &sr));
	MT_MPI(MPI_Wait(&sr, MPI_STATUS_IGNORE));
	MT_MPI(MPI_Waitall(2, rq, st));
	MT_CHECK_STATUS(st[0], peer, 9, 3, MPI_INT);
	MT_CHECK_STATUS(st[1], peer, 10, 2, MPI_INT);
	MT_CHECK(w[0] == peer && w[2] == 8 && u[0] == peer && u[1] == 7 && u[2] == -1, "Rsend/Irsend data");
}

static void nonblocking(int peer)
{
	static const int sizes[] = {0, 1, 100, 4000, 20000, 300000};
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	unsigned char *out[N], *in[N];
	MPI_Request rq[2 * N];
	MPI_Status st[2 * N];

	for (int i = 0; i < N; i++) {
		out[i] = mt_alloc(sizes[i]);
		in[i] = mt_alloc(sizes[i]);
		mt_fill(out[i], sizes[i], mt_seed(mt_rank, peer, 400 + i));
	}
	/* Receives posted in reverse order of the sends, by tag. */
	for (int i = 0; i < N; i++)
		MT_MPI(MPI_Irecv(in[N - 1 - i], sizes[N - 1 - i], MPI_BYTE, peer, 20 + N - 1 - i, MPI_COMM_WORLD, &rq[i]));
	for (int i = 0; i < N; i++)
		MT_MPI(MPI_Isend(out[i], sizes[i], MPI_BYTE, peer, 20 + i, MPI_COMM_WORLD, &rq[N + i]));
	MT_MPI(MPI_Waitall(2 * N, rq, st));
	for (int i = 0; i < N; i++) {
		int k = N - 1 - i;
		MT_CHECK_STATUS(st[i], peer, 20 + k, sizes[k], MPI_BYTE);
		MT_CHECK_FILL(in[k], sizes[k], mt_seed(peer, mt_rank, 400 + k));
	}
	for (int i = 0; i < N; i++) {
		free(out[i]);
		free(in[i]);
	}

	/* Truncation of an Irecv: Wait returns MPI_ERR_TRUNCATE. */
	int big[64] = {0}, small[4];
	MPI_Request r, s;
	MT_MPI(MPI_Irecv(small, 4, MPI_INT, peer, 30, MPI_COMM_WORLD, &r));
	MT_MPI(MPI_Isend(big, 64, MPI_INT, peer, 30, MPI_COMM_WORLD, &s));
	MPI_Status tst;
	int rc = MPI_Wait(&r, &tst);
	int cls = -1;
	MPI_Error_class(rc, &cls);
	MT_CHECK(cls == MPI_ERR_TRUNCATE, "64 ints into an Irecv of 4: error class %d, want MPI_ERR_TRUNCATE", cls);
	MT_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_modes");
	for (int d = 1; d < mt_size; d++) {
		int peer = mt_rank ^ d;
		synchronous(peer);
		synchronous_sizes(peer, d);
		buffered(peer);
		ready(peer);
		nonblocking(peer);
		if (mt_size <= 4 || (d & (d - 1)) == 0) /* above 4 ranks, with the power-of-two distances */
			large(peer);
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD)); /* no wildcard meets the next round */
	}
	return mt_finish();
}
