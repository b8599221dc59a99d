/*
 * p2p_comms.c - communicators: MPI_COMM_SELF and self-sends, dup (its own
 * matching context: the same tag on two communicators never mixes), idup,
 * split, split_type, create, create_group, cart, graph, dist_graph,
 * Comm_free with operations pending, Comm_free and reuse (a new
 * communicator per round, which Open MPI builds on the freed one's context
 * id), an intercommunicator (which the plugin leaves
 * to the MPI library) in a request array beside a plugin request, and
 * Intercomm_merge.
 *
 * Call families: blocking, nonblocking, persistent on intracommunicators;
 * synchronous (Ssend, Issend) and probe (Mprobe + Mrecv) only on the
 * intercommunicator, so that check_mpi expects those two to go to the MPI
 * library.
 */
#include "mpitest.h"

/* Rank r of @p comm exchanges one int with r ^ 1 (itself if alone). */
static void exchange(MPI_Comm comm, int tag, const char *what)
{
	int r, n;

	MT_MPI(MPI_Comm_rank(comm, &r));
	MT_MPI(MPI_Comm_size(comm, &n));
	int peer = (r ^ 1) < n ? r ^ 1 : r;
	int v = r * 100 + tag, w = -1;
	MPI_Status st;
	MPI_Request rq;
	MT_MPI(MPI_Isend(&v, 1, MPI_INT, peer, tag, comm, &rq));
	MT_MPI(MPI_Recv(&w, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st));
	MT_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
	MT_CHECK_STATUS(st, peer, tag, 1, MPI_INT);
	MT_CHECK(w == peer * 100 + tag, "%s: got %d from %d, want %d", what, w, peer, peer * 100 + tag);
}

static void self(void)
{
	int v = 42, w = 0;
	MPI_Request rq;
	MPI_Status st;

	MT_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
	MT_MPI(MPI_Isend(&v, 1, MPI_INT, 0, 3, MPI_COMM_SELF, &rq));
	MT_MPI(MPI_Recv(&w, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &st));
	MT_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
	MT_CHECK_STATUS(st, 0, 3, 1, MPI_INT);
	MT_CHECK(w == 42, "COMM_SELF: %d", w);
	MT_MPI(MPI_Isend(&v, 1, MPI_INT, mt_rank, 4, MPI_COMM_WORLD, &rq));
	MT_MPI(MPI_Recv(&w, 1, MPI_INT, mt_rank, 4, MPI_COMM_WORLD, &st));
	MT_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
	MT_CHECK_STATUS(st, mt_rank, 4, 1, MPI_INT);
}

/* The same source and tag on WORLD and a dup: received in the other order. */
static void dup_isolation(void)
{
	MPI_Comm dup;
	int peer = mt_rank ^ 1, a = 1, b = 2, x = 0, y = 0;
	MPI_Request rq[2];

	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
	MT_MPI(MPI_Isend(&a, 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &rq[0]));
	MT_MPI(MPI_Isend(&b, 1, MPI_INT, peer, 5, dup, &rq[1]));
	MT_MPI(MPI_Recv(&y, 1, MPI_INT, peer, 5, dup, MPI_STATUS_IGNORE));
	MT_MPI(MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	MT_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
	MT_CHECK(x == 1 && y == 2, "dup: WORLD got %d (want 1), the dup got %d (want 2)", x, y);
	MT_MPI(MPI_Comm_free(&dup));
	MT_CHECK(dup == MPI_COMM_NULL, "Comm_free left the handle set");
}

/* New communicators round after round, each freed: contexts are reused. */
static void reuse(void)
{
	for (int round = 0; round < 12; round++) {
		MPI_Comm c;
		switch (round % 3) {
		case 0:
			MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
			break;
		case 1:
			MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, mt_size - mt_rank, &c));
			break;
		default: {
			MPI_Request rq;
			MT_MPI(MPI_Comm_idup(MPI_COMM_WORLD, &c, &rq));
			MT_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
		}
		}
		exchange(c, 10 + round, "reused communicator");
		MT_MPI(MPI_Comm_free(&c));
	}
}

/* Communicators freed while their operations are pending (a large send and
 * its receive, both posted just before Comm_free): they complete. */
static void free_pending(void)
{
	enum { N = 1 << 18 };
	int peer = mt_rank ^ 1;
	unsigned char *out = mt_alloc(N), *in = mt_alloc(N);
	MPI_Comm c;
	MPI_Request rq[2];
	MPI_Status st[2];

	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
	mt_fill(out, N, mt_seed(mt_rank, peer, 90));
	MT_MPI(MPI_Irecv(in, N, MPI_BYTE, peer, 90, c, &rq[0]));
	MT_MPI(MPI_Isend(out, N, MPI_BYTE, peer, 90, c, &rq[1]));
	MT_MPI(MPI_Comm_free(&c));
	MT_CHECK(c == MPI_COMM_NULL, "Comm_free left the handle set");
	MT_MPI(MPI_Waitall(2, rq, st));
	MT_CHECK_STATUS(st[0], peer, 90, N, MPI_BYTE);
	MT_CHECK_FILL(in, N, mt_seed(peer, mt_rank, 90));
	free(out);
	free(in);
}

static void derived_comms(void)
{
	MPI_Comm c;
	MPI_Group world, g;

	/* split: even and odd ranks, in reverse order. */
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, mt_rank % 2, -mt_rank, &c));
	exchange(c, 30, "split");
	MT_MPI(MPI_Comm_free(&c));
	MT_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mt_rank, MPI_INFO_NULL, &c));
	exchange(c, 31, "split_type");
	MT_MPI(MPI_Comm_free(&c));

	/* create: every rank, reversed: ranks of the new communicator in the status. */
	int *order = mt_alloc(sizeof(int) * mt_size);
	for (int i = 0; i < mt_size; i++)
		order[i] = mt_size - 1 - i;
	MT_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
	MT_MPI(MPI_Group_incl(world, mt_size, order, &g));
	MT_MPI(MPI_Comm_create(MPI_COMM_WORLD, g, &c));
	int r;
	MT_MPI(MPI_Comm_rank(c, &r));
	MT_CHECK(r == mt_size - 1 - mt_rank, "create: rank %d", r);
	exchange(c, 32, "create");
	MT_MPI(MPI_Comm_free(&c));
	MT_MPI(MPI_Group_free(&g));

	/* create_group: each pair {r, r^1} on its own. */
	int pair[2] = {mt_rank & ~1, mt_rank | 1};
	MT_MPI(MPI_Group_incl(world, 2, pair, &g));
	MT_MPI(MPI_Comm_create_group(MPI_COMM_WORLD, g, 7, &c));
	exchange(c, 33, "create_group");
	MT_MPI(MPI_Comm_free(&c));
	MT_MPI(MPI_Group_free(&g));
	MT_MPI(MPI_Group_free(&world));
	free(order);
}

static void topologies(void)
{
	MPI_Comm c;
	int dims[2] = {0, 0}, periods[2] = {1, 1}, src, dst, v, w;
	MPI_Status st;

	MT_MPI(MPI_Dims_create(mt_size, 2, dims));
	MT_MPI(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 1, &c));
	for (int dim = 0; dim < 2; dim++) {
		int r;
		MT_MPI(MPI_Comm_rank(c, &r));
		MT_MPI(MPI_Cart_shift(c, dim, 1, &src, &dst));
		v = r * 10 + dim;
		w = -1;
		MT_MPI(MPI_Sendrecv(&v, 1, MPI_INT, dst, 40 + dim, &w, 1, MPI_INT, src, 40 + dim, c, &st));
		MT_CHECK_STATUS(st, src, 40 + dim, 1, MPI_INT);
		MT_CHECK(w == src * 10 + dim, "cart: got %d from %d", w, src);
	}
	MT_MPI(MPI_Comm_free(&c));

	/* graph: a ring. */
	int *index = mt_alloc(sizeof(int) * mt_size), *edges = mt_alloc(sizeof(int) * 2 * mt_size);
	for (int i = 0; i < mt_size; i++) {
		index[i] = 2 * (i + 1);
		edges[2 * i] = (i + 1) % mt_size;
		edges[2 * i + 1] = (i + mt_size - 1) % mt_size;
	}
	MT_MPI(MPI_Graph_create(MPI_COMM_WORLD, mt_size, index, edges, 0, &c));
	int nb[2], r;
	MT_MPI(MPI_Comm_rank(c, &r));
	MT_MPI(MPI_Graph_neighbors(c, r, 2, nb));
	v = r;
	MT_MPI(MPI_Sendrecv(&v, 1, MPI_INT, nb[0], 50, &w, 1, MPI_INT, nb[1], 50, c, &st));
	MT_CHECK_STATUS(st, nb[1], 50, 1, MPI_INT);
	MT_CHECK(w == nb[1], "graph: got %d from %d", w, nb[1]);
	MT_MPI(MPI_Comm_free(&c));

	/* dist_graph: the same ring, adjacent form. */
	int in[1] = {(mt_rank + mt_size - 1) % mt_size}, out[1] = {(mt_rank + 1) % mt_size}, wt[1] = {1};
	MT_MPI(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, in, wt, 1, out, wt, MPI_INFO_NULL, 0, &c));
	int indeg, outdeg, wtd;
	MT_MPI(MPI_Dist_graph_neighbors_count(c, &indeg, &outdeg, &wtd));
	MT_CHECK(indeg == 1 && outdeg == 1 && wtd, "dist_graph degrees %d %d, weighted %d", indeg, outdeg, wtd);
	MT_MPI(MPI_Comm_rank(c, &r));
	v = r + 1000;
	MT_MPI(MPI_Sendrecv(&v, 1, MPI_INT, out[0], 51, &w, 1, MPI_INT, in[0], 51, c, &st));
	MT_CHECK_STATUS(st, in[0], 51, 1, MPI_INT);
	MT_CHECK(w == in[0] + 1000, "dist_graph: got %d", w);
	MT_MPI(MPI_Comm_free(&c));
	free(index);
	free(edges);
}

/* Halves even/odd, an intercommunicator between them, then merged. */
static void intercomm(void)
{
	MPI_Comm half, inter, merged;
	int color = mt_rank % 2, hr;

	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, color, mt_rank, &half));
	MT_MPI(MPI_Comm_rank(half, &hr));
	MT_MPI(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - color, 60, &inter));
	MT_MPI(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
	int rsize;
	MT_MPI(MPI_Comm_remote_size(inter, &rsize));
	MT_CHECK(rsize == mt_size / 2, "remote size %d", rsize);

	/* Rank hr of each side talks to rank hr of the other. An array mixing
	 * the intercommunicator's Issend, a persistent receive on WORLD (the
	 * plugin's), an Ibarrier and MPI_REQUEST_NULL. */
	int v = mt_rank, w = -1, pv = mt_rank + 7, pw = -1;
	MPI_Request rq[4], pr;
	MT_MPI(MPI_Recv_init(&pw, 1, MPI_INT, mt_rank ^ 1, 61, MPI_COMM_WORLD, &pr));
	MT_MPI(MPI_Start(&pr));
	rq[0] = MPI_REQUEST_NULL;
	MT_MPI(MPI_Issend(&v, 1, MPI_INT, hr, 62, inter, &rq[1]));
	rq[2] = pr;
	MT_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &rq[3]));
	MT_MPI(MPI_Send(&pv, 1, MPI_INT, mt_rank ^ 1, 61, MPI_COMM_WORLD));
	MPI_Message m;
	MPI_Status st;
	MT_MPI(MPI_Mprobe(MPI_ANY_SOURCE, 62, inter, &m, &st));
	MT_MPI(MPI_Mrecv(&w, 1, MPI_INT, &m, &st));
	MT_CHECK_STATUS(st, hr, 62, 1, MPI_INT);
	MT_CHECK(w == (mt_rank ^ 1), "intercomm: got %d", w);
	int done = 0;
	while (done < 3) {
		int idx;
		MT_MPI(MPI_Waitany(4, rq, &idx, &st));
		MT_CHECK(idx != MPI_UNDEFINED, "Waitany ran out of requests after %d", done);
		if (idx == 2)
			MT_CHECK_STATUS(st, mt_rank ^ 1, 61, 1, MPI_INT);
		done++;
	}
	MT_CHECK(pw == (mt_rank ^ 1) + 7, "persistent receive beside the intercomm: %d", pw);
	MT_MPI(MPI_Request_free(&pr));
	/* Ssend completes only once matched: the even side sends first. */
	for (int turn = 0; turn < 2; turn++) {
		if (turn == color) {
			MT_MPI(MPI_Ssend(&v, 1, MPI_INT, hr, 63, inter));
		} else {
			MT_MPI(MPI_Mprobe(hr, 63, inter, &m, &st));
			MT_MPI(MPI_Mrecv(&w, 1, MPI_INT, &m, &st));
			MT_CHECK_STATUS(st, hr, 63, 1, MPI_INT);
		}
	}

	/* Merged: the odd half first. */
	MT_MPI(MPI_Intercomm_merge(inter, color == 0, &merged));
	int mr;
	MT_MPI(MPI_Comm_rank(merged, &mr));
	MT_CHECK(mr == (color ? hr : mt_size / 2 + hr), "merged rank %d", mr);
	exchange(merged, 64, "Intercomm_merge");
	MT_MPI(MPI_Comm_free(&merged));
	MT_MPI(MPI_Comm_free(&inter));
	MT_MPI(MPI_Comm_free(&half));
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_comms");
	self();
	dup_isolation();
	free_pending();
	reuse();
	derived_comms();
	topologies();
	intercomm();
	reuse();
	return mt_finish();
}
