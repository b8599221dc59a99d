/*
 * p2p_order.c - MPI's non-overtaking rule under wildcards.  Messages
 * between a pair on one communicator arrive in the order sent whatever
 * their size (eager or not) and tag: received with MPI_ANY_TAG, selected by
 * tag (a later tag first, then the rest in order), fanned in to one rank with
 * MPI_ANY_SOURCE from every other rank (both paths at once when the plugin
 * splits the ranks into pretend nodes) or from one rank at a time (a
 * blocked wildcard receive sees whichever path has the message), and
 * matched against receives posted before the messages were sent (each
 * source's messages fill the receives in the order they were posted), and
 * a blocked receive behind a nonblocking one posted before it.
 *
 * Started with MPI_Init_thread(MPI_THREAD_SERIALIZED).
 *
 * Call families: nonblocking, blocking, synchronous.
 */
#include <time.h>

#include "mpitest.h"

#define NMSG 40
#define MAXLEN 300000

static int msg_len(int seq)
{
	static const int lens[] = {4, 16, 4000, 50000, 8, MAXLEN, 100, 4096};

	return lens[seq % 8];
}

static int msg_tag(int seq)
{
	return 1 + (seq * 7 % 3);
}

/* Message seq of (from, to): its seq in the first int, a pattern after. */
static void fill(unsigned char *b, int from, int to, int seq)
{
	int n = msg_len(seq);

	memcpy(b, &seq, sizeof(int));
	mt_fill(b + sizeof(int), n - sizeof(int), mt_seed(from, to, seq));
}

static int check(const unsigned char *b, const MPI_Status *st, int to)
{
	int seq, n;

	MT_MPI(MPI_Get_count(st, MPI_BYTE, &n));
	MT_CHECK(n >= (int)sizeof(int), "a message of %d bytes", n);
	memcpy(&seq, b, sizeof(int));
	MT_CHECK(seq >= 0 && seq < NMSG && n == msg_len(seq) && st->MPI_TAG == msg_tag(seq),
		 "message from %d: seq %d, %d bytes, tag %d", st->MPI_SOURCE, seq, n, st->MPI_TAG);
	MT_CHECK_FILL(b + sizeof(int), n - sizeof(int), mt_seed(st->MPI_SOURCE, to, seq));
	return seq;
}

static void send_all(int to, unsigned char **bufs, MPI_Request *rq)
{
	for (int s = 0; s < NMSG; s++) {
		fill(bufs[s], mt_rank, to, s);
		MT_MPI(MPI_Isend(bufs[s], msg_len(s), MPI_BYTE, to, msg_tag(s), MPI_COMM_WORLD, &rq[s]));
	}
}

/* One pair: the lower rank sends, the higher receives with ANY_TAG, and
 * then by tag. */
static void pair(int peer, unsigned char **bufs, unsigned char *rb)
{
	MPI_Request rq[NMSG];
	MPI_Status st;

	if (mt_rank < peer) {
		send_all(peer, bufs, rq);
		MT_MPI(MPI_Waitall(NMSG, rq, MPI_STATUSES_IGNORE));
		send_all(peer, bufs, rq);
		MT_MPI(MPI_Waitall(NMSG, rq, MPI_STATUSES_IGNORE));
		return;
	}
	for (int s = 0; s < NMSG; s++) {
		MT_MPI(MPI_Recv(rb, MAXLEN, MPI_BYTE, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
		int got = check(rb, &st, mt_rank);
		MT_CHECK(got == s, "ANY_TAG: message %d came as number %d", got, s);
	}
	/* The second batch: first every tag-3 message, then the rest in order. */
	for (int s = 0; s < NMSG; s++)
		if (msg_tag(s) == 3) {
			MT_MPI(MPI_Recv(rb, MAXLEN, MPI_BYTE, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &st));
			int got = check(rb, &st, mt_rank);
			MT_CHECK(got == s, "by tag: message %d, want %d", got, s);
		}
	for (int s = 0; s < NMSG; s++) {
		if (msg_tag(s) == 3)
			continue;
		MT_MPI(MPI_Recv(rb, MAXLEN, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
		int got = check(rb, &st, mt_rank);
		MT_CHECK(got == s && st.MPI_SOURCE == peer, "after the tag-3 ones: message %d from %d, want %d", got,
			 st.MPI_SOURCE, s);
	}
}

/*
 * A blocking receive waits behind a nonblocking one posted before it: the
 * lower rank posts MPI_Irecv(ANY_TAG), then blocks in MPI_Recv(tag 5)
 * before the peer sends (the peer waits a moment after "go").  The first
 * message (tag 5) goes to the posted receive; the blocked receive gets the
 * second, long (rendezvous); a third, synchronous, completes its MPI_Ssend.
 */
static void behind_posted(int peer, unsigned char **bufs, unsigned char *rb)
{
	MPI_Status st;
	int go = 1;

	if (mt_rank < peer) {
		MPI_Request rq;
		int first = -1, third = -1;
		MT_MPI(MPI_Irecv(&first, 1, MPI_INT, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &rq));
		MT_MPI(MPI_Send(&go, 1, MPI_INT, peer, 4, MPI_COMM_WORLD));
		MT_MPI(MPI_Recv(rb, MAXLEN, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &st));
		MT_CHECK_STATUS(st, peer, 5, MAXLEN, MPI_BYTE);
		MT_CHECK_FILL(rb, MAXLEN, mt_seed(peer, mt_rank, 5));
		MT_MPI(MPI_Recv(&third, 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &st));
		MT_CHECK_STATUS(st, peer, 5, 1, MPI_INT);
		MT_MPI(MPI_Wait(&rq, &st));
		MT_CHECK_STATUS(st, peer, 5, 1, MPI_INT);
		MT_CHECK(first == 1 && third == 3, "behind a posted receive: it got %d, the blocked one %d; want 1, 3",
			 first, third);
		return;
	}
	int one = 1, three = 3;
	struct timespec pause = {0, 20 * 1000 * 1000};
	MT_MPI(MPI_Recv(&go, 1, MPI_INT, peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	nanosleep(&pause, NULL); /* let the peer block first (either order must work) */
	mt_fill(bufs[0], MAXLEN, mt_seed(mt_rank, peer, 5));
	MT_MPI(MPI_Send(&one, 1, MPI_INT, peer, 5, MPI_COMM_WORLD));
	MT_MPI(MPI_Send(bufs[0], MAXLEN, MPI_BYTE, peer, 5, MPI_COMM_WORLD));
	MT_MPI(MPI_Ssend(&three, 1, MPI_INT, peer, 5, MPI_COMM_WORLD));
}

/* Every rank sends to @p root; the root receives with ANY_SOURCE. */
static void fan_in(int root, unsigned char **bufs, unsigned char *rb)
{
	MPI_Request rq[NMSG];
	MPI_Status st;

	if (mt_rank != root) {
		send_all(root, bufs, rq);
		MT_MPI(MPI_Waitall(NMSG, rq, MPI_STATUSES_IGNORE));
		return;
	}
	int *next = calloc(mt_size, sizeof(int));
	for (int i = 0; i < NMSG * (mt_size - 1); i++) {
		MT_MPI(MPI_Recv(rb, MAXLEN, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
		int src = st.MPI_SOURCE;
		MT_CHECK(src >= 0 && src < mt_size && src != root, "ANY_SOURCE: source %d", src);
		int got = check(rb, &st, mt_rank);
		MT_CHECK(got == next[src], "fan-in: from %d came message %d, want %d", src, got, next[src]);
		next[src]++;
	}
	free(next);
}

/* One sender at a time (the root lets each go in turn), the root blocked in
 * an ANY_SOURCE receive while only that sender's path (the rings or the MPI
 * library) has a message: a wildcard receive must watch both. */
static void one_at_a_time(int root)
{
	for (int round = 0; round < 3; round++)
		for (int s = 0; s < mt_size; s++) {
			if (s == root)
				continue;
			int v = s * 100 + round, w = -1;
			MPI_Status st;
			if (mt_rank == root) {
				MT_MPI(MPI_Send(&v, 1, MPI_INT, s, 76, MPI_COMM_WORLD));
				MT_MPI(MPI_Recv(&w, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
				MT_CHECK_STATUS(st, s, 77, 1, MPI_INT);
				MT_CHECK(w == v, "one at a time: got %d, want %d", w, v);
			} else if (mt_rank == s) {
				MT_MPI(MPI_Recv(&w, 1, MPI_INT, root, 76, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
				MT_CHECK(w == v, "one at a time: the root sent %d, want %d", w, v);
				MT_MPI(MPI_Send(&w, 1, MPI_INT, root, 77, MPI_COMM_WORLD));
			}
		}
}

/* The root posts every receive (ANY_SOURCE) before the others send. */
static void preposted(int root, unsigned char **bufs)
{
	MPI_Request rq[NMSG * 8];
	int n = NMSG * (mt_size - 1);

	MT_CHECK(mt_size <= 9, "preposted: at most 9 ranks");
	if (mt_rank == root) {
		MPI_Status *st = mt_alloc(sizeof(MPI_Status) * n);
		unsigned char **rb = mt_alloc(sizeof(void *) * n);
		for (int i = 0; i < n; i++) {
			rb[i] = mt_alloc(MAXLEN);
			MT_MPI(MPI_Irecv(rb[i], MAXLEN, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq[i]));
		}
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
		MT_MPI(MPI_Waitall(n, rq, st));
		int *next = calloc(mt_size, sizeof(int));
		for (int i = 0; i < n; i++) {
			int src = st[i].MPI_SOURCE;
			MT_CHECK(src >= 0 && src < mt_size && src != root, "preposted: source %d", src);
			int got = check(rb[i], &st[i], mt_rank);
			MT_CHECK(got == next[src], "preposted receive %d got message %d of %d, want %d", i, got, src,
				 next[src]);
			next[src]++;
			free(rb[i]);
		}
		free(next);
		free(rb);
		free(st);
	} else {
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
		send_all(root, bufs, rq);
		MT_MPI(MPI_Waitall(NMSG, rq, MPI_STATUSES_IGNORE));
	}
}

int main(int argc, char **argv)
{
	/* Through MPI_Init_thread, single-threaded use. */
	mt_init_level(&argc, &argv, "p2p_order", MPI_THREAD_SERIALIZED);
	unsigned char *bufs[NMSG], *rb = mt_alloc(MAXLEN);

	for (int s = 0; s < NMSG; s++)
		bufs[s] = mt_alloc(MAXLEN);
	for (int d = 1; d < mt_size; d++) {
		pair(mt_rank ^ d, bufs, rb);
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
		behind_posted(mt_rank ^ d, bufs, rb);
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	}
	for (int root = 0; root < mt_size; root++) {
		one_at_a_time(root);
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD)); /* no fan-in message meets its wildcards */
		fan_in(root, bufs, rb);
		MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	}
	preposted(mt_size - 1, bufs);
	for (int s = 0; s < NMSG; s++)
		free(bufs[s]);
	free(rb);
	return mt_finish();
}
