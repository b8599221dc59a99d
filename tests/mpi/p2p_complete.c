/*
 * p2p_complete.c - completion: Wait, Waitall, Waitany, Waitsome, Test,
 * Testall, Testany, Testsome on arrays that mix point-to-point requests,
 * requests of other operations (Ibarrier, Ibcast) and MPI_REQUEST_NULL, with
 * statuses and MPI_STATUS(ES)_IGNORE; arrays of nothing but
 * MPI_REQUEST_NULL; Request_get_status before and after completion;
 * Request_free of an active send; Cancel + Test_cancelled (a cancelled
 * receive, and one that had completed); Request_c2f/f2c, and a receive
 * request waited for and freed by the library itself, as Fortran would;
 * a truncated receive through each completion call (one call of the error
 * handler, with MPI_ERR_TRUNCATE, as Open MPI makes); persistent requests,
 * inactive and started, among the others in the any, some and all calls;
 * 20 000 requests at once (receives, a collective's request, nulls, an
 * inactive persistent receive) through each any and some call, where
 * MPI_Testany and MPI_Testsome over them allocate nothing (malloc,
 * calloc and realloc counted here, in this thread; not in an ASan build,
 * whose allocator they would bypass); the same requests in two arrays at
 * different positions, completed through either, round after round as
 * new requests take the handles of the old; and, last, MPI_Finalize right
 * after sends whose requests were freed.
 *
 * Call families: nonblocking, blocking (the "go" messages and the receives
 * of the freed sends).
 */
#include <time.h>

#define MT_COUNT_ALLOCATIONS
#include "mpitest.h"

#define MIXED 6

struct mixed {
	MPI_Request rq[MIXED];
	int in[64], out[64], bc[4];
	int recv_at, send_at; /* indices of the Irecv and the Isend in rq */
};

/* [Ibarrier, Irecv, NULL, Isend, Ibcast, NULL], rotated by @p rot. */
static void mixed_start(struct mixed *m, int peer, int tag, int rot)
{
	int pos[MIXED];

	for (int i = 0; i < MIXED; i++)
		pos[i] = (i + rot) % MIXED;
	for (int i = 0; i < 64; i++) {
		m->out[i] = mt_rank * 1000 + tag + i;
		m->in[i] = -1;
	}
	for (int i = 0; i < 4; i++)
		m->bc[i] = mt_rank == 0 ? 77 + i + tag : -1;
	m->recv_at = pos[1];
	m->send_at = pos[3];
	MT_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &m->rq[pos[0]]));
	MT_MPI(MPI_Irecv(m->in, 64, MPI_INT, peer, tag, MPI_COMM_WORLD, &m->rq[pos[1]]));
	m->rq[pos[2]] = MPI_REQUEST_NULL;
	MT_MPI(MPI_Isend(m->out, 64, MPI_INT, peer, tag, MPI_COMM_WORLD, &m->rq[pos[3]]));
	MT_MPI(MPI_Ibcast(m->bc, 4, MPI_INT, 0, MPI_COMM_WORLD, &m->rq[pos[4]]));
	m->rq[pos[5]] = MPI_REQUEST_NULL;
}

static void mixed_check(struct mixed *m, int peer, int tag)
{
	for (int i = 0; i < 64; i++)
		MT_CHECK(m->in[i] == peer * 1000 + tag + i, "mixed array: in[%d] = %d", i, m->in[i]);
	for (int i = 0; i < 4; i++)
		MT_CHECK(m->bc[i] == 77 + i + tag, "mixed array: Ibcast %d", m->bc[i]);
	for (int i = 0; i < MIXED; i++)
		MT_CHECK(m->rq[i] == MPI_REQUEST_NULL, "request %d not freed by its completion", i);
}

/* A status of the array: that of the receive must name it. */
static void mixed_status(struct mixed *m, int idx, MPI_Status *st, int peer, int tag)
{
	if (idx == m->recv_at)
		MT_CHECK_STATUS(*st, peer, tag, 64, MPI_INT);
}

static void poison(MPI_Status st[])
{
	for (int i = 0; i < MIXED; i++)
		st[i].MPI_ERROR = -77;
}

/* After Waitall or Testall: every status is written (MPI_ERROR included),
 * the send's one says it was not cancelled. */
static void mixed_all_statuses(struct mixed *m, MPI_Status st[])
{
	int cancelled = 1;

	for (int i = 0; i < MIXED; i++)
		MT_CHECK(st[i].MPI_ERROR == MPI_SUCCESS, "status %d: MPI_ERROR %d", i, st[i].MPI_ERROR);
	MT_MPI(MPI_Test_cancelled(&st[m->send_at], &cancelled));
	MT_CHECK(!cancelled, "the Isend's status says cancelled");
}

static void completions(int peer)
{
	struct mixed m;
	MPI_Status st[MIXED];
	int tag = 0;

	/* Wait one by one. */
	mixed_start(&m, peer, ++tag, 0);
	for (int i = MIXED - 1; i >= 0; i--) {
		MT_MPI(MPI_Wait(&m.rq[i], &st[i]));
		mixed_status(&m, i, &st[i], peer, tag);
	}
	mixed_check(&m, peer, tag);

	/* Waitall, statuses and STATUSES_IGNORE. */
	mixed_start(&m, peer, ++tag, 1);
	poison(st);
	MT_MPI(MPI_Waitall(MIXED, m.rq, st));
	mixed_status(&m, m.recv_at, &st[m.recv_at], peer, tag);
	mixed_all_statuses(&m, st);
	mixed_check(&m, peer, tag);
	mixed_start(&m, peer, ++tag, 2);
	MT_MPI(MPI_Waitall(MIXED, m.rq, MPI_STATUSES_IGNORE));
	mixed_check(&m, peer, tag);

	/* Waitany until MPI_UNDEFINED: each active request exactly once. */
	mixed_start(&m, peer, ++tag, 3);
	int seen = 0, idx;
	for (;;) {
		MPI_Status s;
		MT_MPI(MPI_Waitany(MIXED, m.rq, &idx, &s));
		if (idx == MPI_UNDEFINED)
			break;
		MT_CHECK(idx >= 0 && idx < MIXED && !(seen & 1 << idx), "Waitany index %d (seen %#x)", idx, seen);
		seen |= 1 << idx;
		mixed_status(&m, idx, &s, peer, tag);
	}
	MT_CHECK(__builtin_popcount(seen) == 4, "Waitany completed %d requests, want 4", __builtin_popcount(seen));
	mixed_check(&m, peer, tag);

	/* Waitsome until MPI_UNDEFINED. */
	mixed_start(&m, peer, ++tag, 4);
	seen = 0;
	for (;;) {
		int out = -1, ind[MIXED];
		MT_MPI(MPI_Waitsome(MIXED, m.rq, &out, ind, st));
		if (out == MPI_UNDEFINED)
			break;
		MT_CHECK(out >= 1 && out <= MIXED, "Waitsome outcount %d", out);
		for (int i = 0; i < out; i++) {
			MT_CHECK(!(seen & 1 << ind[i]), "Waitsome gave %d twice", ind[i]);
			seen |= 1 << ind[i];
			mixed_status(&m, ind[i], &st[i], peer, tag);
		}
	}
	MT_CHECK(__builtin_popcount(seen) == 4, "Waitsome completed %d requests", __builtin_popcount(seen));
	mixed_check(&m, peer, tag);

	/* Test one by one, STATUS_IGNORE. */
	mixed_start(&m, peer, ++tag, 5);
	for (int done = 0; !done;) {
		done = 1;
		for (int i = 0; i < MIXED; i++) {
			int flag = 0;
			MT_MPI(MPI_Test(&m.rq[i], &flag, MPI_STATUS_IGNORE));
			done &= flag;
		}
	}
	mixed_check(&m, peer, tag);

	/* Testall: all or nothing. */
	mixed_start(&m, peer, ++tag, 0);
	for (int flag = 0; !flag;) {
		poison(st);
		MT_MPI(MPI_Testall(MIXED, m.rq, &flag, st));
		if (!flag)
			for (int i = 0; i < MIXED; i++)
				MT_CHECK(i == 2 || i == 5 || m.rq[i] != MPI_REQUEST_NULL,
					 "Testall without completion freed request %d", i);
		else
			mixed_status(&m, m.recv_at, &st[m.recv_at], peer, tag);
	}
	mixed_all_statuses(&m, st);
	mixed_check(&m, peer, tag);

	/* Testany until flag with MPI_UNDEFINED. */
	mixed_start(&m, peer, ++tag, 1);
	seen = 0;
	for (;;) {
		int flag = 0;
		MPI_Status s;
		MT_MPI(MPI_Testany(MIXED, m.rq, &idx, &flag, &s));
		if (flag && idx == MPI_UNDEFINED)
			break;
		if (!flag) {
			MT_CHECK(idx == MPI_UNDEFINED, "Testany without completion: index %d", idx);
			continue;
		}
		MT_CHECK(!(seen & 1 << idx), "Testany gave %d twice", idx);
		seen |= 1 << idx;
		mixed_status(&m, idx, &s, peer, tag);
	}
	MT_CHECK(__builtin_popcount(seen) == 4, "Testany completed %d requests", __builtin_popcount(seen));
	mixed_check(&m, peer, tag);

	/* Testsome until MPI_UNDEFINED, STATUSES_IGNORE. */
	mixed_start(&m, peer, ++tag, 2);
	seen = 0;
	for (;;) {
		int out = -1, ind[MIXED];
		MT_MPI(MPI_Testsome(MIXED, m.rq, &out, ind, MPI_STATUSES_IGNORE));
		if (out == MPI_UNDEFINED)
			break;
		MT_CHECK(out >= 0 && out <= MIXED, "Testsome outcount %d", out);
		for (int i = 0; i < out; i++) {
			MT_CHECK(!(seen & 1 << ind[i]), "Testsome gave %d twice", ind[i]);
			seen |= 1 << ind[i];
		}
	}
	MT_CHECK(__builtin_popcount(seen) == 4, "Testsome completed %d requests", __builtin_popcount(seen));
	mixed_check(&m, peer, tag);
}

/* Arrays of nothing but MPI_REQUEST_NULL, and a Wait on it. */
static void all_null(void)
{
	MPI_Request rq[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
	MPI_Status st;
	int idx = 0, flag = 0, out = 0, ind[3];

	MT_MPI(MPI_Wait(&rq[0], &st));
	MT_CHECK_STATUS(st, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, MPI_INT);
	MT_MPI(MPI_Test(&rq[0], &flag, &st));
	MT_CHECK(flag, "Test(MPI_REQUEST_NULL): not complete");
	MT_MPI(MPI_Waitany(3, rq, &idx, &st));
	MT_CHECK(idx == MPI_UNDEFINED, "Waitany of nulls: %d", idx);
	flag = 0;
	MT_MPI(MPI_Testany(3, rq, &idx, &flag, &st));
	MT_CHECK(flag && idx == MPI_UNDEFINED, "Testany of nulls: %d %d", flag, idx);
	MT_MPI(MPI_Waitsome(3, rq, &out, ind, MPI_STATUSES_IGNORE));
	MT_CHECK(out == MPI_UNDEFINED, "Waitsome of nulls: %d", out);
	MT_MPI(MPI_Testsome(3, rq, &out, ind, MPI_STATUSES_IGNORE));
	MT_CHECK(out == MPI_UNDEFINED, "Testsome of nulls: %d", out);
	flag = 0;
	MT_MPI(MPI_Testall(3, rq, &flag, MPI_STATUSES_IGNORE));
	MT_CHECK(flag, "Testall of nulls");
	MT_MPI(MPI_Waitall(3, rq, MPI_STATUSES_IGNORE));
	MT_MPI(MPI_Waitall(0, NULL, MPI_STATUSES_IGNORE));
	flag = 0;
	MT_MPI(MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &st));
	MT_CHECK(flag, "Request_get_status(MPI_REQUEST_NULL)");
}

/* Request_get_status, Request_free, Cancel, c2f/f2c with one peer. */
static void requests(int peer)
{
	int v = mt_rank + 500, w = -1, flag = 1;
	MPI_Request rq, sq;
	MPI_Status st;

	/* Before the peer sends (it waits for "go"): not complete. */
	MT_MPI(MPI_Irecv(&w, 1, MPI_INT, peer, 60, MPI_COMM_WORLD, &rq));
	MT_MPI(MPI_Request_get_status(rq, &flag, &st));
	MT_CHECK(!flag, "Request_get_status: complete before the peer sent");
	MT_MPI(MPI_Sendrecv(NULL, 0, MPI_INT, peer, 61, NULL, 0, MPI_INT, peer, 61, MPI_COMM_WORLD,
			    MPI_STATUS_IGNORE));
	/* Through Fortran's handle and back. */
	MPI_Fint f = MPI_Request_c2f(rq);
	MPI_Request rq2 = MPI_Request_f2c(f);
	MT_CHECK(rq2 == rq, "Request_f2c(Request_c2f(r)) != r");
	/* A send whose request is freed at once: it still arrives. */
	MT_MPI(MPI_Isend(&v, 1, MPI_INT, peer, 60, MPI_COMM_WORLD, &sq));
	MT_MPI(MPI_Request_free(&sq));
	MT_CHECK(sq == MPI_REQUEST_NULL, "Request_free left the handle set");
	for (flag = 0; !flag;)
		MT_MPI(MPI_Request_get_status(rq2, &flag, &st));
	MT_CHECK(rq2 != MPI_REQUEST_NULL, "Request_get_status freed the request");
	MT_CHECK_STATUS(st, peer, 60, 1, MPI_INT);
	/* Cancel after completion: no effect. */
	MT_MPI(MPI_Cancel(&rq2));
	MT_MPI(MPI_Wait(&rq2, &st));
	MT_CHECK_STATUS(st, peer, 60, 1, MPI_INT);
	flag = 1;
	MT_MPI(MPI_Test_cancelled(&st, &flag));
	MT_CHECK(!flag, "a completed receive reads as cancelled");
	MT_CHECK(w == peer + 500, "freed Isend: got %d", w);

	/* A receive that nothing matches, cancelled. */
	MT_MPI(MPI_Irecv(&w, 1, MPI_INT, MPI_ANY_SOURCE, 62, MPI_COMM_WORLD, &rq));
	MT_MPI(MPI_Cancel(&rq));
	MT_MPI(MPI_Wait(&rq, &st));
	flag = 0;
	MT_MPI(MPI_Test_cancelled(&st, &flag));
	MT_CHECK(flag, "a cancelled receive does not read as cancelled");
	MT_MPI(MPI_Irecv(&w, 1, MPI_INT, peer, 64, MPI_COMM_WORLD, &rq));
	MT_MPI(MPI_Cancel(&rq));
	for (flag = 0; !flag;)
		MT_MPI(MPI_Test(&rq, &flag, &st));
	MT_MPI(MPI_Test_cancelled(&st, &flag));
	MT_CHECK(flag, "a cancelled receive (Test) does not read as cancelled");
	/* The peer still gets through (ahead of it: nothing to match). */
	MT_MPI(MPI_Sendrecv(&v, 1, MPI_INT, peer, 63, &w, 1, MPI_INT, peer, 63, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 63, 1, MPI_INT);
	MT_CHECK(w == peer + 500, "after a cancel: got %d", w);
}

/* Persistent requests among the others: [started send, inactive receive,
 * Ibarrier, NULL, Irecv, started receive].  The any and some calls report
 * the four active ones once each and never the inactive one; the all
 * calls give it an empty status; persistent handles stay set. */
#define PMIX 6

/* Start the persistent send and receive, and fill the array but for its
 * Irecv (position 4, left NULL). */
static void pmix_start(MPI_Request rq[PMIX], MPI_Request *psend, MPI_Request *precv, MPI_Request pidle)
{
	MT_MPI(MPI_Start(psend));
	MT_MPI(MPI_Start(precv));
	rq[0] = *psend;
	rq[1] = pidle;
	MT_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &rq[2]));
	rq[3] = MPI_REQUEST_NULL;
	rq[4] = MPI_REQUEST_NULL;
	rq[5] = *precv;
}

static void persistent_mixed(int peer)
{
	int out = mt_rank + 900, in[2] = {-1, -1}, idle = -1, seen;
	MPI_Request rq[PMIX], psend, precv, pidle;
	MPI_Status st[PMIX];

	MT_MPI(MPI_Send_init(&out, 1, MPI_INT, peer, 80, MPI_COMM_WORLD, &psend));
	MT_MPI(MPI_Recv_init(&in[0], 1, MPI_INT, peer, 80, MPI_COMM_WORLD, &precv));
	MT_MPI(MPI_Recv_init(&idle, 1, MPI_INT, peer, 82, MPI_COMM_WORLD, &pidle));
	for (int round = 0; round < 4; round++) {
		in[0] = in[1] = -1;
		pmix_start(rq, &psend, &precv, pidle);
		MT_MPI(MPI_Irecv(&in[1], 1, MPI_INT, peer, 81, MPI_COMM_WORLD, &rq[4]));
		MT_MPI(MPI_Send(&out, 1, MPI_INT, peer, 81, MPI_COMM_WORLD));
		seen = 0;
		for (int left = 4; left > 0;) {
			int idx = -1, n = 0, ind[PMIX], flag = 0;
			switch (round) {
			case 0:
				MT_MPI(MPI_Waitany(PMIX, rq, &idx, &st[0]));
				n = idx != MPI_UNDEFINED;
				ind[0] = idx;
				break;
			case 1:
				MT_MPI(MPI_Testany(PMIX, rq, &idx, &flag, &st[0]));
				MT_CHECK(flag || idx == MPI_UNDEFINED, "Testany without completion: index %d", idx);
				n = flag && idx != MPI_UNDEFINED;
				ind[0] = idx;
				break;
			case 2: MT_MPI(MPI_Waitsome(PMIX, rq, &n, ind, st)); break;
			default: MT_MPI(MPI_Testsome(PMIX, rq, &n, ind, MPI_STATUSES_IGNORE)); break;
			}
			MT_CHECK(n != MPI_UNDEFINED, "round %d: MPI_UNDEFINED with %d requests left", round, left);
			for (int k = 0; k < n; k++) {
				MT_CHECK(ind[k] != 1 && ind[k] != 3 && !(seen & 1 << ind[k]),
					 "round %d: request %d completed (seen %#x)", round, ind[k], seen);
				seen |= 1 << ind[k];
				if (round != 3 && (ind[k] == 4 || ind[k] == 5))
					MT_CHECK_STATUS(st[k], peer, ind[k] == 4 ? 81 : 80, 1, MPI_INT);
			}
			left -= n;
		}
		MT_CHECK(in[0] == peer + 900 && in[1] == peer + 900, "round %d: got %d %d", round, in[0], in[1]);
		MT_CHECK(rq[0] == psend && rq[1] == pidle && rq[5] == precv, "round %d: a persistent handle changed",
			 round);
		MT_CHECK(rq[2] == MPI_REQUEST_NULL && rq[4] == MPI_REQUEST_NULL, "round %d: a request not freed",
			 round);
		/* Nothing active left: the any and some calls say MPI_UNDEFINED. */
		int idx = 0, n = 0, flag = 0, ind[PMIX];
		MT_MPI(MPI_Waitany(PMIX, rq, &idx, MPI_STATUS_IGNORE));
		MT_CHECK(idx == MPI_UNDEFINED, "Waitany over inactive requests: %d", idx);
		MT_MPI(MPI_Testany(PMIX, rq, &idx, &flag, MPI_STATUS_IGNORE));
		MT_CHECK(flag && idx == MPI_UNDEFINED, "Testany over inactive requests: %d %d", flag, idx);
		MT_MPI(MPI_Waitsome(PMIX, rq, &n, ind, MPI_STATUSES_IGNORE));
		MT_CHECK(n == MPI_UNDEFINED, "Waitsome over inactive requests: %d", n);
		MT_MPI(MPI_Testsome(PMIX, rq, &n, ind, MPI_STATUSES_IGNORE));
		MT_CHECK(n == MPI_UNDEFINED, "Testsome over inactive requests: %d", n);
	}
	/* The all calls: the inactive one's status is empty. */
	for (int round = 0; round < 2; round++) {
		in[0] = -1;
		pmix_start(rq, &psend, &precv, pidle);
		for (int i = 0; i < PMIX; i++)
			st[i].MPI_ERROR = -77;
		if (round == 0) {
			MT_MPI(MPI_Waitall(PMIX, rq, st));
		} else {
			for (int flag = 0; !flag;)
				MT_MPI(MPI_Testall(PMIX, rq, &flag, st));
		}
		MT_CHECK_STATUS(st[1], MPI_ANY_SOURCE, MPI_ANY_TAG, 0, MPI_INT);
		MT_CHECK_STATUS(st[5], peer, 80, 1, MPI_INT);
		for (int i = 0; i < PMIX; i++)
			MT_CHECK(st[i].MPI_ERROR == MPI_SUCCESS, "all call %d: status %d: MPI_ERROR %d", round, i,
				 st[i].MPI_ERROR);
		MT_CHECK(in[0] == peer + 900, "all call %d: got %d", round, in[0]);
		MT_CHECK(rq[0] == psend && rq[1] == pidle && rq[5] == precv, "all call %d: a persistent handle changed",
			 round);
	}
	MT_MPI(MPI_Request_free(&psend));
	MT_MPI(MPI_Request_free(&precv));
	MT_MPI(MPI_Request_free(&pidle));
}

/*
 * MANY requests at the lower rank of a pair: receives (tag = position),
 * an Ibarrier at LIB_AT, MPI_REQUEST_NULL at every NULL_EVERY-th position,
 * an inactive persistent receive at IDLE_AT.  Nothing has come yet: over
 * them MPI_Testany and MPI_Testsome find nothing and allocate nothing.
 * Then the peer sends, last position first, and they complete through
 * Waitany, Testany, Testsome and Waitsome, each once.  Every rank makes
 * the same collective calls (Ibarrier, Barrier, Barrier).
 */
#define MANY 20000
#define LIB_AT 7001
#define IDLE_AT 13003
#define NULL_EVERY 997

static int many_receives_at(int i)
{
	return i != LIB_AT && i != IDLE_AT && i % NULL_EVERY != 5;
}

static void many_requests(int peer)
{
	if (mt_rank > peer) {
		MPI_Request bar;
		MT_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &bar));
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
		for (int i = MANY - 1; i >= 0; i--)
			if (many_receives_at(i))
				MT_MPI(MPI_Send(&i, 1, MPI_INT, peer, i, MPI_COMM_WORLD));
		MT_MPI(MPI_Wait(&bar, MPI_STATUS_IGNORE));
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
		return;
	}
	MPI_Request *rq = mt_alloc(MANY * sizeof(*rq)), idle;
	int *in = mt_alloc(MANY * sizeof(int)), *ind = mt_alloc(MANY * sizeof(int));
	MPI_Status *st = mt_alloc(MANY * sizeof(*st));
	unsigned char *seen = mt_alloc(MANY);
	int expect = 0, got = 0, idx, flag, n;

	memset(seen, 0, MANY);
	for (int i = 0; i < MANY; i++) {
		in[i] = -1;
		rq[i] = MPI_REQUEST_NULL;
		if (many_receives_at(i)) {
			MT_MPI(MPI_Irecv(&in[i], 1, MPI_INT, peer, i, MPI_COMM_WORLD, &rq[i]));
			expect++;
		}
	}
	MT_MPI(MPI_Recv_init(&idx, 1, MPI_INT, peer, MANY, MPI_COMM_WORLD, &idle));
	rq[IDLE_AT] = idle;
	/* Before the Ibarrier (which the peer's barrier would complete), with
	 * the receives pending: nothing to find, nothing allocated. */
	MT_MPI(MPI_Testany(MANY, rq, &idx, &flag, &st[0])); /* first calls may set up */
	MT_MPI(MPI_Testsome(MANY, rq, &n, ind, st));
	mt_counting = 1;
	for (int k = 0; k < 10; k++) {
		MT_MPI(MPI_Testany(MANY, rq, &idx, &flag, &st[0]));
		MT_CHECK(!flag && idx == MPI_UNDEFINED, "Testany over %d pending: %d %d", MANY, flag, idx);
		MT_MPI(MPI_Testsome(MANY, rq, &n, ind, st));
		MT_CHECK(n == 0, "Testsome over %d pending: %d", MANY, n);
	}
	mt_counting = 0;
	MT_CHECK(!MT_COUNTS_ALLOCATIONS || mt_allocations == 0,
		 "20 Testany and Testsome over %d requests allocated %ld times", MANY, mt_allocations);
	MT_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &rq[LIB_AT]));
	expect++;
	MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	for (int call = 0; got < expect; call = (call + 1) % 4) {
		n = 0;
		switch (call) {
		case 0:
			MT_MPI(MPI_Waitany(MANY, rq, &idx, &st[0]));
			ind[0] = idx;
			n = 1;
			break;
		case 1:
			MT_MPI(MPI_Testany(MANY, rq, &idx, &flag, &st[0]));
			ind[0] = idx;
			n = flag;
			break;
		case 2: MT_MPI(MPI_Testsome(MANY, rq, &n, ind, st)); break;
		default: MT_MPI(MPI_Waitsome(MANY, rq, &n, ind, st)); break;
		}
		MT_CHECK(n != MPI_UNDEFINED && n >= 0, "call %d: %d completed with %d of %d left", call, n,
			 expect - got, expect);
		for (int k = 0; k < n; k++) {
			int i = ind[k];
			MT_CHECK(i >= 0 && i < MANY && !seen[i] && i != IDLE_AT && rq[i] == MPI_REQUEST_NULL,
				 "call %d: position %d completed (again?)", call, i);
			seen[i] = 1;
			if (i != LIB_AT) {
				MT_CHECK_STATUS(st[k], peer, i, 1, MPI_INT);
				MT_CHECK(in[i] == i, "position %d: got %d", i, in[i]);
			}
		}
		got += n;
	}
	MT_MPI(MPI_Waitany(MANY, rq, &idx, MPI_STATUS_IGNORE));
	MT_CHECK(idx == MPI_UNDEFINED, "Waitany after all: %d", idx);
	MT_CHECK(rq[IDLE_AT] == idle, "the inactive persistent request changed");
	MT_MPI(MPI_Request_free(&idle));
	MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	free(rq);
	free(in);
	free(ind);
	free(st);
	free(seen);
}

/*
 * The same VIEW receives in two arrays: a[i], and b[VIEW + i] after VIEW
 * nulls.  The calls over one array and over the other must each see which
 * are pending and which are done, wherever a request was seen last; they
 * complete through either, alternating.  ROUNDS rounds, whose receives
 * take the handles that the last round's gave back.  Every rank makes the
 * same collective calls (a Barrier per round).
 */
#define VIEW 64
#define VIEW_ROUNDS 4

/* Complete every receive of a and b (the peer sends them now). */
static void two_views_finish(MPI_Request a[VIEW], MPI_Request b[2 * VIEW], int in[VIEW], int peer, int round)
{
	int ind[2 * VIEW], got = 0, idx, n;
	MPI_Status st[2 * VIEW];
	for (int call = 0; got < VIEW; call = (call + 1) % 4) {
		int over_b = call & 1;
		MPI_Request *v = over_b ? b : a;
		int len = over_b ? 2 * VIEW : VIEW;
		if (call < 2) {
			MT_MPI(MPI_Waitany(len, v, &idx, &st[0]));
			ind[0] = idx;
			n = 1;
		} else {
			MT_MPI(MPI_Waitsome(len, v, &n, ind, st));
		}
		MT_CHECK(n >= 1, "round %d call %d: %d done of %d left", round, call, n, VIEW - got);
		for (int k = 0; k < n; k++) {
			int i = over_b ? ind[k] - VIEW : ind[k];
			MT_CHECK(i >= 0 && i < VIEW && v[ind[k]] == MPI_REQUEST_NULL, "round %d call %d: position %d",
				 round, call, ind[k]);
			MT_CHECK_STATUS(st[k], peer, i, 1, MPI_INT);
			MT_CHECK(in[i] == i + round, "round %d: position %d got %d", round, i, in[i]);
			a[i] = b[VIEW + i] = MPI_REQUEST_NULL;
		}
		got += n;
	}
}

static void two_views(int peer)
{
	MPI_Request a[VIEW], b[2 * VIEW];
	int in[VIEW], idx, flag, n, ind[2 * VIEW];
	for (int r = 0; r < VIEW_ROUNDS; r++) {
		if (mt_rank > peer) {
			MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
			for (int i = VIEW - 1; i >= 0; i--) {
				int v = i + r;
				MT_MPI(MPI_Send(&v, 1, MPI_INT, peer, i, MPI_COMM_WORLD));
			}
			continue;
		}
		for (int i = 0; i < VIEW; i++) {
			b[i] = MPI_REQUEST_NULL;
			MT_MPI(MPI_Irecv(&in[i], 1, MPI_INT, peer, i, MPI_COMM_WORLD, &a[i]));
			b[VIEW + i] = a[i];
		}
		/* Nothing has come: each call over either array finds nothing. */
		for (int k = 0; k < 3; k++) {
			MT_MPI(MPI_Testsome(VIEW, a, &n, ind, MPI_STATUSES_IGNORE));
			MT_CHECK(n == 0, "round %d: Testsome over a: %d", r, n);
			MT_MPI(MPI_Testany(2 * VIEW, b, &idx, &flag, MPI_STATUS_IGNORE));
			MT_CHECK(!flag && idx == MPI_UNDEFINED, "round %d: Testany over b: %d %d", r, flag, idx);
		}
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
		two_views_finish(a, b, in, peer, r);
	}
}

/* The lower rank of (0,1) frees its sends and goes straight to MPI_Finalize. */
#define FREED_BIG (1 << 20)
static int finalize_with_freed_sends(void)
{
	static const int sizes[] = {0, 4000, FREED_BIG};
	unsigned char *b[3];

	for (int i = 0; i < 3; i++)
		b[i] = mt_alloc(FREED_BIG);
	MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	if (mt_rank == 0) {
		/* A freed send's buffer must stay as it is: one buffer each. */
		for (int i = 0; i < 3; i++) {
			MPI_Request rq;
			mt_fill(b[i], sizes[i], mt_seed(0, 1, 700 + i));
			MT_MPI(MPI_Isend(b[i], sizes[i], MPI_BYTE, 1, 70, MPI_COMM_WORLD, &rq));
			MT_MPI(MPI_Request_free(&rq));
		}
	} else if (mt_rank == 1) {
		for (int i = 0; i < 3; i++) {
			MPI_Status st;
			MT_MPI(MPI_Recv(b[0], FREED_BIG, MPI_BYTE, 0, 70, MPI_COMM_WORLD, &st));
			MT_CHECK_STATUS(st, 0, 70, sizes[i], MPI_BYTE);
			MT_CHECK_FILL(b[0], sizes[i], mt_seed(0, 1, 700 + i));
		}
		printf("%s: ok (%d ranks)\n", mt_name, mt_size);
		fflush(stdout);
	}
	MPI_Finalize();
	for (int i = 0; i < 3; i++)
		free(b[i]);
	return 0;
}

/*
 * What Fortran does with a receive request made in C: MPI_Request_c2f, then
 * the library's own calls, which the plugin does not see (here
 * PMPI_Request_f2c, PMPI_Wait and PMPI_Request_free).  The library's wait
 * ends when the message has come, with its status; a receive freed there
 * before its message came still takes it (messages between a pair keep
 * their order, so it has once the next one arrived).
 */
static void library_side(int peer)
{
	int go = 1, w = -1, x = -1;
	MPI_Request rq, lib;
	MPI_Status st;
	struct timespec pause = {0, 10 * 1000 * 1000};

	if (mt_rank > peer) {
		int v[3] = {mt_rank + 700, mt_rank + 720, mt_rank + 730};
		MT_MPI(MPI_Recv(&go, 1, MPI_INT, peer, 71, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		nanosleep(&pause, NULL); /* the peer's wait starts first (either order must work) */
		MT_MPI(MPI_Send(&v[0], 1, MPI_INT, peer, 70, MPI_COMM_WORLD));
		MT_MPI(MPI_Recv(&go, 1, MPI_INT, peer, 71, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		MT_MPI(MPI_Send(&v[1], 1, MPI_INT, peer, 72, MPI_COMM_WORLD));
		MT_MPI(MPI_Send(&v[2], 1, MPI_INT, peer, 73, MPI_COMM_WORLD));
		return;
	}
	MT_MPI(MPI_Irecv(&w, 1, MPI_INT, peer, 70, MPI_COMM_WORLD, &rq));
	MPI_Fint f = MPI_Request_c2f(rq);
	MT_CHECK(MPI_Request_f2c(f) == rq, "Request_f2c(Request_c2f(r)) != r for an active receive");
	lib = PMPI_Request_f2c(f);
	MT_MPI(MPI_Send(&go, 1, MPI_INT, peer, 71, MPI_COMM_WORLD));
	MT_MPI(PMPI_Wait(&lib, &st));
	MT_CHECK(lib == MPI_REQUEST_NULL, "the library's wait left its handle set");
	MT_CHECK_STATUS(st, peer, 70, 1, MPI_INT);
	MT_CHECK(w == peer + 700, "the library's wait: got %d, want %d", w, peer + 700);

	MT_MPI(MPI_Irecv(&w, 1, MPI_INT, peer, 72, MPI_COMM_WORLD, &rq));
	lib = PMPI_Request_f2c(MPI_Request_c2f(rq));
	MT_MPI(PMPI_Request_free(&lib));
	MT_MPI(MPI_Send(&go, 1, MPI_INT, peer, 71, MPI_COMM_WORLD));
	MT_MPI(MPI_Recv(&x, 1, MPI_INT, peer, 73, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	MT_CHECK(x == peer + 730 && w == peer + 720, "freed in the library: got %d and %d, want %d and %d", w, x,
		 peer + 720, peer + 730);
}

/* A truncated receive through each completion call, on a communicator
 * whose error handler counts its calls: one call with the request's own
 * code (MPI_ERR_TRUNCATE), as Open MPI makes; the single calls return that
 * code, the all and some calls MPI_ERR_IN_STATUS with it in the status. */
static int handler_calls, handler_code;

static void count_error(MPI_Comm *comm, int *code, ...)
{
	(void)comm;
	handler_calls++;
	handler_code = *code;
}

static void truncated_completions(int peer)
{
	static const char *const name[] = {"Wait", "Test", "Waitany", "Testany",
					   "Waitsome", "Testsome", "Waitall", "Testall"};
	MPI_Comm comm;
	MPI_Errhandler eh;
	char out[8] = "abcdefg", in[4];

	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
	MT_MPI(MPI_Comm_create_errhandler(count_error, &eh));
	MT_MPI(MPI_Comm_set_errhandler(comm, eh));
	for (int k = 0; k < 8; k++) {
		if (mt_rank > peer) {
			MT_MPI(MPI_Send(out, 8, MPI_BYTE, peer, k, comm));
			continue;
		}
		MPI_Request rq;
		MPI_Status st;
		int flag = 0, idx, n = 0, done[1], rc, cls = -1;
		st.MPI_ERROR = MPI_SUCCESS;
		MT_MPI(MPI_Irecv(in, 4, MPI_BYTE, peer, k, comm, &rq));
		handler_calls = 0;
		switch (k) {
		case 0: rc = MPI_Wait(&rq, &st); break;
		case 1: do rc = MPI_Test(&rq, &flag, &st); while (rc == MPI_SUCCESS && !flag); break;
		case 2: rc = MPI_Waitany(1, &rq, &idx, &st); break;
		case 3: do rc = MPI_Testany(1, &rq, &idx, &flag, &st); while (rc == MPI_SUCCESS && !flag); break;
		case 4: rc = MPI_Waitsome(1, &rq, &n, done, &st); break;
		case 5: do rc = MPI_Testsome(1, &rq, &n, done, &st); while (rc == MPI_SUCCESS && n == 0); break;
		case 6: rc = MPI_Waitall(1, &rq, &st); break;
		default: do rc = MPI_Testall(1, &rq, &flag, &st); while (rc == MPI_SUCCESS && !flag); break;
		}
		int multi = k >= 4;
		MPI_Error_class(multi ? st.MPI_ERROR : rc, &cls);
		MT_CHECK(cls == MPI_ERR_TRUNCATE, "%s: error class %d, want MPI_ERR_TRUNCATE", name[k], cls);
		MT_CHECK(!multi || rc == MPI_ERR_IN_STATUS, "%s returned %d, want MPI_ERR_IN_STATUS", name[k], rc);
		MT_CHECK(handler_calls == 1, "%s: the error handler ran %d times", name[k], handler_calls);
		MPI_Error_class(handler_code, &cls);
		MT_CHECK(cls == MPI_ERR_TRUNCATE, "%s: the handler got class %d, want MPI_ERR_TRUNCATE", name[k], cls);
		if (rq != MPI_REQUEST_NULL)
			MT_MPI(MPI_Request_free(&rq));
	}
	MT_MPI(MPI_Comm_free(&comm));
	MT_MPI(MPI_Errhandler_free(&eh));
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_complete");
	all_null();
	for (int d = 1; d < mt_size; d++) {
		completions(mt_rank ^ d);
		requests(mt_rank ^ d);
		library_side(mt_rank ^ d);
		truncated_completions(mt_rank ^ d);
		persistent_mixed(mt_rank ^ d);
		many_requests(mt_rank ^ d);
		two_views(mt_rank ^ d);
	}
	return finalize_with_freed_sends();
}
