/*
 * p2p_basic.c - blocking point-to-point: Send/Recv of several sizes,
 * Sendrecv and Sendrecv_replace, MPI_ANY_SOURCE/MPI_ANY_TAG, MPI_PROC_NULL,
 * MPI_STATUS_IGNORE, Get_count/Get_elements, truncation (MPI_ERR_TRUNCATE
 * through MPI_ERRORS_RETURN, the next message intact, and through a
 * communicator's own error handler, called once) and the send-send
 * exchange of eager-size messages (both ranks send before they receive);
 * every size from 0 to 300 bytes (above 4 ranks, shared among the peers).
 *
 * Call families: blocking only.
 */
#include "mpitest.h"

/* Open MPI's ob1/vader sends a payload of up to ~4040 bytes eagerly. */
#define EAGER_MAX 4000

static const int sizes[] = {0, 1, 7, 64, 4096, 65537};
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

/* The lower rank of a pair sends first, so that no size deadlocks. */
static void send_recv(int peer, unsigned char *sbuf, unsigned char *rbuf)
{
	for (int i = 0; i < NSIZES; i++) {
		int n = sizes[i];
		MPI_Status st;
		for (int turn = 0; turn < 2; turn++) {
			if ((turn == 0) == (mt_rank < peer)) {
				mt_fill(sbuf, n, mt_seed(mt_rank, peer, i));
				MT_MPI(MPI_Send(sbuf, n, MPI_BYTE, peer, 10 + i, MPI_COMM_WORLD));
			} else {
				memset(rbuf, 0, n + 16);
				MT_MPI(MPI_Recv(rbuf, n + 16, MPI_BYTE, peer, 10 + i, MPI_COMM_WORLD, &st));
				MT_CHECK_STATUS(st, peer, 10 + i, n, MPI_BYTE);
				int el = -1;
				MT_MPI(MPI_Get_elements(&st, MPI_BYTE, &el));
				MT_CHECK(el == n, "Get_elements %d, want %d", el, n);
				MT_CHECK_FILL(rbuf, n, mt_seed(peer, mt_rank, i));
				for (int k = n; k < n + 16; k++)
					MT_CHECK(rbuf[k] == 0, "byte %d written past the message of %d", k, n);
			}
		}
	}
}

/* Every size from 0 to SWEEP bytes, each checked to the byte and for
 * nothing written past it: the small records' layouts (header, payload,
 * line padding) at every length.  The lower rank sends first.  Round @p d
 * of the peers: its share of the sizes (mt_sweep_first()). */
#define SWEEP 300

static void size_sweep(int peer, int d, unsigned char *sbuf, unsigned char *rbuf)
{
	for (int n = mt_sweep_first(d); n <= SWEEP; n += mt_sweep_step()) {
		for (int turn = 0; turn < 2; turn++) {
			if ((turn == 0) == (mt_rank < peer)) {
				mt_fill(sbuf, n, mt_seed(mt_rank, peer, 100 + n));
				MT_MPI(MPI_Send(sbuf, n, MPI_BYTE, peer, 7, MPI_COMM_WORLD));
			} else {
				MPI_Status st;
				memset(rbuf, 0, n + 16);
				MT_MPI(MPI_Recv(rbuf, n + 16, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &st));
				MT_CHECK_STATUS(st, peer, 7, n, MPI_BYTE);
				MT_CHECK_FILL(rbuf, n, mt_seed(peer, mt_rank, 100 + n));
				for (int k = n; k < n + 16; k++)
					MT_CHECK(rbuf[k] == 0, "byte %d written past the message of %d", k, n);
			}
		}
	}
}

static void sendrecv(int peer)
{
	double out[300], in[300];
	MPI_Status st;

	for (int i = 0; i < 300; i++)
		out[i] = mt_rank * 1000 + i + 0.5;
	MT_MPI(MPI_Sendrecv(out, 300, MPI_DOUBLE, peer, 3, in, 300, MPI_DOUBLE, peer, 3, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 3, 300, MPI_DOUBLE);
	for (int i = 0; i < 300; i++)
		MT_CHECK(in[i] == peer * 1000 + i + 0.5, "Sendrecv: in[%d] = %g", i, in[i]);
	int el = -1;
	MT_MPI(MPI_Get_elements(&st, MPI_DOUBLE, &el));
	MT_CHECK(el == 300, "Get_elements %d", el);
	int cnt = -1;
	MT_MPI(MPI_Get_count(&st, MPI_BYTE, &cnt));
	MT_CHECK(cnt == 300 * (int)sizeof(double), "Get_count in bytes %d", cnt);

	/* Different counts and tags both ways, received with wildcards. */
	int a[5] = {mt_rank, 1, 2, 3, 4}, b[8] = {0};
	MT_MPI(MPI_Sendrecv(a, mt_rank < peer ? 5 : 2, MPI_INT, peer, 40 + mt_rank, b, 8, MPI_INT, MPI_ANY_SOURCE,
			    MPI_ANY_TAG, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 40 + peer, peer < mt_rank ? 5 : 2, MPI_INT);
	MT_CHECK(b[0] == peer && b[1] == 1, "Sendrecv wildcards: %d %d", b[0], b[1]);

	long r[1000];
	for (int i = 0; i < 1000; i++)
		r[i] = (long)mt_rank << 20 | i;
	MT_MPI(MPI_Sendrecv_replace(r, 1000, MPI_LONG, peer, 5, peer, 5, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 5, 1000, MPI_LONG);
	for (int i = 0; i < 1000; i++)
		MT_CHECK(r[i] == ((long)peer << 20 | i), "Sendrecv_replace: r[%d] = %ld", i, r[i]);

	/* STATUS_IGNORE */
	MT_MPI(MPI_Sendrecv_replace(r, 10, MPI_LONG, peer, 6, peer, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	MT_CHECK(r[0] == ((long)mt_rank << 20), "Sendrecv_replace back: %ld", r[0]);
}

static void wildcards(int peer)
{
	int v = mt_rank, w = -1;
	MPI_Status st;

	for (int turn = 0; turn < 2; turn++) {
		if ((turn == 0) == (mt_rank < peer)) {
			MT_MPI(MPI_Send(&v, 1, MPI_INT, peer, 100 + mt_rank, MPI_COMM_WORLD));
			MT_MPI(MPI_Send(&v, 1, MPI_INT, peer, 7, MPI_COMM_WORLD));
			MT_MPI(MPI_Send(&v, 1, MPI_INT, peer, 8, MPI_COMM_WORLD));
		} else {
			MT_MPI(MPI_Recv(&w, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 100 + peer, 1, MPI_INT);
			MT_CHECK(w == peer, "ANY_SOURCE/ANY_TAG: %d", w);
			MT_MPI(MPI_Recv(&w, 1, MPI_INT, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 7, 1, MPI_INT);
			w = -1;
			MT_MPI(MPI_Recv(&w, 1, MPI_INT, MPI_ANY_SOURCE, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			MT_CHECK(w == peer, "STATUS_IGNORE receive: %d", w);
		}
	}
}

static void proc_null(void)
{
	int v = 5;
	MPI_Status st;

	MT_MPI(MPI_Send(&v, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD));
	MT_MPI(MPI_Recv(&v, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, MPI_PROC_NULL, MPI_ANY_TAG, 0, MPI_INT);
	MT_CHECK(v == 5, "a receive from PROC_NULL wrote %d", v);
	MT_MPI(MPI_Sendrecv(&v, 1, MPI_INT, MPI_PROC_NULL, 1, &v, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, MPI_PROC_NULL, MPI_ANY_TAG, 0, MPI_INT);
	MT_MPI(MPI_Sendrecv_replace(&v, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, MPI_PROC_NULL, MPI_ANY_TAG, 0, MPI_INT);
	MT_CHECK(v == 5, "Sendrecv_replace with PROC_NULL wrote %d", v);
}

static void truncation(int peer)
{
	int big[100], small[10];

	for (int i = 0; i < 100; i++)
		big[i] = i;
	for (int turn = 0; turn < 2; turn++) {
		if ((turn == 0) == (mt_rank < peer)) {
			MT_MPI(MPI_Send(big, 100, MPI_INT, peer, 20, MPI_COMM_WORLD));
			MT_MPI(MPI_Send(big, 3, MPI_INT, peer, 21, MPI_COMM_WORLD));
		} else {
			MPI_Status st;
			int rc = MPI_Recv(small, 10, MPI_INT, peer, 20, MPI_COMM_WORLD, &st);
			int cls = -1, n = -1;
			MPI_Error_class(rc, &cls);
			MT_CHECK(cls == MPI_ERR_TRUNCATE, "100 ints into 10: error class %d, want MPI_ERR_TRUNCATE", cls);
			/* The count is the message's, as Open MPI reports it. */
			MT_MPI(MPI_Get_count(&st, MPI_INT, &n));
			MT_CHECK(n == 100, "100 ints into 10: count %d, want 100", n);
			MT_CHECK(small[9] == 9, "100 ints into 10: small[9] = %d, want 9", small[9]);
			memset(small, 0, sizeof(small));
			MT_MPI(MPI_Recv(small, 10, MPI_INT, peer, 21, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 21, 3, MPI_INT);
			MT_CHECK(small[0] == 0 && small[1] == 1 && small[2] == 2 && small[3] == 0,
				 "after a truncation: %d %d %d %d", small[0], small[1], small[2], small[3]);
		}
	}
}

/* A truncation goes through the communicator's own error handler. */
static int handler_calls, handler_class;

static void record_error(MPI_Comm *comm, int *code, ...)
{
	(void)comm;
	handler_calls++;
	MPI_Error_class(*code, &handler_class);
}

static void truncation_handler(int peer)
{
	MPI_Comm dup;
	MPI_Errhandler eh;
	int big[8] = {1, 2, 3, 4, 5, 6, 7, 8}, small[2];

	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
	MT_MPI(MPI_Comm_create_errhandler(record_error, &eh));
	MT_MPI(MPI_Comm_set_errhandler(dup, eh));
	handler_calls = 0;
	handler_class = MPI_SUCCESS;
	for (int turn = 0; turn < 2; turn++) {
		if ((turn == 0) == (mt_rank < peer)) {
			MT_MPI(MPI_Send(big, 8, MPI_INT, peer, 22, dup));
		} else {
			int rc = MPI_Recv(small, 2, MPI_INT, peer, 22, dup, MPI_STATUS_IGNORE);
			int cls = -1;
			MPI_Error_class(rc, &cls);
			MT_CHECK(cls == MPI_ERR_TRUNCATE, "truncation on a dup: error class %d", cls);
			MT_CHECK(handler_calls == 1 && handler_class == MPI_ERR_TRUNCATE,
				 "the communicator's error handler: %d calls, class %d; want 1 call, MPI_ERR_TRUNCATE",
				 handler_calls, handler_class);
		}
	}
	MT_MPI(MPI_Errhandler_free(&eh));
	MT_MPI(MPI_Comm_free(&dup));
}

/* Both ranks send first: correct only because small sends complete eagerly. */
static void send_send(int peer, unsigned char *sbuf, unsigned char *rbuf)
{
	static const int n[] = {0, 8, 1000, EAGER_MAX};

	for (int i = 0; i < 4; i++) {
		mt_fill(sbuf + i * EAGER_MAX, n[i], mt_seed(mt_rank, peer, 50 + i));
		MT_MPI(MPI_Send(sbuf + i * EAGER_MAX, n[i], MPI_BYTE, peer, 50, MPI_COMM_WORLD));
	}
	for (int i = 0; i < 4; i++) {
		MPI_Status st;
		MT_MPI(MPI_Recv(rbuf, EAGER_MAX, MPI_BYTE, peer, 50, MPI_COMM_WORLD, &st));
		MT_CHECK_STATUS(st, peer, 50, n[i], MPI_BYTE);
		MT_CHECK_FILL(rbuf, n[i], mt_seed(peer, mt_rank, 50 + i));
	}
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_basic");
	unsigned char *sbuf = mt_alloc(4 * EAGER_MAX + 70000);
	unsigned char *rbuf = mt_alloc(4 * EAGER_MAX + 70000);

	proc_null();
	for (int d = 1; d < mt_size; d++) {
		int peer = mt_rank ^ d;
		send_recv(peer, sbuf, rbuf);
		size_sweep(peer, d, sbuf, rbuf);
		sendrecv(peer);
		wildcards(peer);
		truncation(peer);
		truncation_handler(peer);
		send_send(peer, sbuf, rbuf);
		/* The wildcard receives of a round must not meet the next round's messages. */
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	}
	free(sbuf);
	free(rbuf);
	return mt_finish();
}
