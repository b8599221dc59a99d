/*
 * p2p_persistent.c - persistent requests: Send_init, Ssend_init,
 * Bsend_init, Rsend_init and Recv_init (one with MPI_ANY_SOURCE), started
 * with Start and Startall over several rounds with new data each round; a
 * completed persistent request stays valid (inactive: Wait and Test return at
 * once with an empty status) until Request_free; a persistent send whose
 * Fortran handle was asked for (MPI_Request_c2f, f2c) used from C; a
 * persistent buffered send longer than the eager size completes before its
 * receive is posted (the copy into the buffer completes it).
 *
 * Call families: persistent, synchronous (Ssend_init), buffered
 * (Bsend_init), blocking (the handshakes, Sendrecv).
 */
#include "mpitest.h"

#define ROUNDS 6
#define LEN 2000

enum { R_STD, R_SYN, R_BUF, R_RDY, NKIND };

static void check_empty(MPI_Request *rq)
{
	MPI_Status st;
	int flag = 0;

	MT_MPI(MPI_Test(rq, &flag, &st));
	MT_CHECK(flag, "Test on an inactive persistent request: not complete");
	MT_CHECK(*rq != MPI_REQUEST_NULL, "Test freed a persistent request");
	MT_CHECK_STATUS(st, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, MPI_BYTE);
	MT_MPI(MPI_Wait(rq, &st));
	MT_CHECK(*rq != MPI_REQUEST_NULL, "Wait freed a persistent request");
	MT_CHECK_STATUS(st, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, MPI_BYTE);
	MT_MPI(MPI_Request_get_status(*rq, &flag, &st));
	MT_CHECK(flag, "Request_get_status on an inactive request: not complete");
}

static void pair(int peer)
{
	unsigned char *out[NKIND], *in[NKIND];
	MPI_Request sq[NKIND], rq[NKIND];
	int bsize = LEN + MPI_BSEND_OVERHEAD;
	char *bbuf = mt_alloc(bsize);

	MT_MPI(MPI_Buffer_attach(bbuf, bsize));
	for (int k = 0; k < NKIND; k++) {
		out[k] = mt_alloc(LEN);
		in[k] = mt_alloc(LEN);
	}
	MT_MPI(MPI_Send_init(out[R_STD], LEN, MPI_BYTE, peer, R_STD, MPI_COMM_WORLD, &sq[R_STD]));
	MT_MPI(MPI_Ssend_init(out[R_SYN], LEN, MPI_BYTE, peer, R_SYN, MPI_COMM_WORLD, &sq[R_SYN]));
	MT_MPI(MPI_Bsend_init(out[R_BUF], LEN, MPI_BYTE, peer, R_BUF, MPI_COMM_WORLD, &sq[R_BUF]));
	MT_MPI(MPI_Rsend_init(out[R_RDY], LEN, MPI_BYTE, peer, R_RDY, MPI_COMM_WORLD, &sq[R_RDY]));
	for (int k = 0; k < NKIND; k++)
		MT_MPI(MPI_Recv_init(in[k], LEN, MPI_BYTE, k == R_SYN ? MPI_ANY_SOURCE : peer, k, MPI_COMM_WORLD, &rq[k]));
	/* Never started: inactive. */
	check_empty(&rq[R_STD]);

	for (int round = 0; round < ROUNDS; round++) {
		MPI_Status st[NKIND];
		for (int k = 0; k < NKIND; k++) {
			mt_fill(out[k], LEN, mt_seed(mt_rank, peer, round * 10 + k));
			memset(in[k], 0, LEN);
		}
		/* Odd rounds: one request at a time with Start; even: Startall. */
		if (round % 2) {
			for (int k = 0; k < NKIND; k++)
				MT_MPI(MPI_Start(&rq[k]));
		} else {
			MT_MPI(MPI_Startall(NKIND, rq));
		}
		/* Every receive of both sides is posted after this: Rsend may go. */
		int mine = round * 100 + mt_rank, theirs = -1;
		MT_MPI(MPI_Sendrecv(&mine, 1, MPI_INT, peer, 99, &theirs, 1, MPI_INT, peer, 99, MPI_COMM_WORLD,
				    MPI_STATUS_IGNORE));
		MT_CHECK(theirs == round * 100 + peer, "handshake of round %d: %d", round, theirs);
		if (round % 2) {
			for (int k = NKIND - 1; k >= 0; k--)
				MT_MPI(MPI_Start(&sq[k]));
		} else {
			MT_MPI(MPI_Startall(NKIND, sq));
		}
		MT_MPI(MPI_Waitall(NKIND, sq, MPI_STATUSES_IGNORE));
		if (round % 3 == 0) {
			for (int k = 0; k < NKIND; k++)
				MT_MPI(MPI_Wait(&rq[k], &st[k]));
		} else {
			MT_MPI(MPI_Waitall(NKIND, rq, st));
		}
		for (int k = 0; k < NKIND; k++) {
			MT_CHECK(sq[k] != MPI_REQUEST_NULL && rq[k] != MPI_REQUEST_NULL,
				 "a completed persistent request became MPI_REQUEST_NULL");
			MT_CHECK_STATUS(st[k], peer, k, LEN, MPI_BYTE);
			MT_CHECK_FILL(in[k], LEN, mt_seed(peer, mt_rank, round * 10 + k));
		}
		check_empty(&sq[R_BUF]);
	}
	for (int k = 0; k < NKIND; k++) {
		MT_MPI(MPI_Request_free(&sq[k]));
		MT_MPI(MPI_Request_free(&rq[k]));
		MT_CHECK(sq[k] == MPI_REQUEST_NULL && rq[k] == MPI_REQUEST_NULL, "Request_free left a handle");
		free(out[k]);
		free(in[k]);
	}
	void *back;
	int back_size;
	MT_MPI(MPI_Buffer_detach(&back, &back_size));
	free(bbuf);
}

/* The lower rank of the pair starts and waits for a buffered send of BIG
 * bytes, twice, and only then tells the other, which only then receives
 * them: the sends must complete without their receives. */
#define BIG (256 * 1024)
static void buffered_first(int peer)
{
	int bsize = 2 * (BIG + MPI_BSEND_OVERHEAD);
	char *bbuf = mt_alloc(bsize);
	unsigned char *msg = mt_alloc(BIG);
	int token = 0;

	MT_MPI(MPI_Buffer_attach(bbuf, bsize));
	if (mt_rank < peer) {
		MPI_Request sq;
		MT_MPI(MPI_Bsend_init(msg, BIG, MPI_BYTE, peer, 20, MPI_COMM_WORLD, &sq));
		for (int k = 0; k < 2; k++) {
			mt_fill(msg, BIG, mt_seed(mt_rank, peer, 20 + k));
			MT_MPI(MPI_Start(&sq));
			MT_MPI(MPI_Wait(&sq, MPI_STATUS_IGNORE));
		}
		MT_MPI(MPI_Send(&token, 1, MPI_INT, peer, 21, MPI_COMM_WORLD));
		MT_MPI(MPI_Request_free(&sq));
	} else {
		MPI_Status st;
		MT_MPI(MPI_Recv(&token, 1, MPI_INT, peer, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		for (int k = 0; k < 2; k++) {
			memset(msg, 0, BIG);
			MT_MPI(MPI_Recv(msg, BIG, MPI_BYTE, peer, 20, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, peer, 20, BIG, MPI_BYTE);
			MT_CHECK_FILL(msg, BIG, mt_seed(peer, mt_rank, 20 + k));
		}
	}
	void *back;
	int back_size;
	MT_MPI(MPI_Buffer_detach(&back, &back_size));
	free(bbuf);
	free(msg);
}

/* A persistent receive from PROC_NULL completes at once, again and again. */
static void proc_null(void)
{
	int v = 3;
	MPI_Request r, s;
	MPI_Status st;

	MT_MPI(MPI_Recv_init(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r));
	MT_MPI(MPI_Send_init(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &s));
	for (int i = 0; i < 3; i++) {
		MT_MPI(MPI_Start(&r));
		MT_MPI(MPI_Start(&s));
		MT_MPI(MPI_Wait(&r, &st));
		MT_CHECK_STATUS(st, MPI_PROC_NULL, MPI_ANY_TAG, 0, MPI_INT);
		MT_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
	}
	MT_CHECK(v == 3, "a receive from PROC_NULL wrote %d", v);
	MT_MPI(MPI_Request_free(&r));
	MT_MPI(MPI_Request_free(&s));
}

/* A persistent send whose Fortran handle was asked for (MPI_Request_c2f)
 * still works from C, and f2c gives its C handle back.  (tests/mpi/mixed_cf
 * starts such requests from Fortran.) */
static void fortran_handle(int peer)
{
	int out[4] = {peer, mt_rank, 7, 11}, in[4] = {0};
	MPI_Request s, r;

	MT_MPI(MPI_Send_init(out, 4, MPI_INT, peer, 9, MPI_COMM_WORLD, &s));
	MT_MPI(MPI_Recv_init(in, 4, MPI_INT, peer, 9, MPI_COMM_WORLD, &r));
	MPI_Fint f = MPI_Request_c2f(s);
	MT_CHECK(MPI_Request_f2c(f) == s, "Request_f2c(Request_c2f(s)) != s for a persistent send");
	for (int i = 0; i < 2; i++) {
		MT_MPI(MPI_Start(&r));
		MT_MPI(MPI_Start(&s));
		MT_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
		MT_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
		MT_CHECK(in[0] == mt_rank && in[1] == peer && in[2] == 7 && in[3] == 11,
			 "persistent send after c2f, round %d: got %d %d %d %d", i, in[0], in[1], in[2], in[3]);
		memset(in, 0, sizeof(in));
	}
	MT_MPI(MPI_Request_free(&s));
	MT_MPI(MPI_Request_free(&r));
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_persistent");
	proc_null();
	fortran_handle(mt_rank ^ 1);
	for (int d = 1; d < mt_size; d++) {
		pair(mt_rank ^ d);
		buffered_first(mt_rank ^ d);
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD)); /* no wildcard meets the next round */
	}
	return mt_finish();
}
