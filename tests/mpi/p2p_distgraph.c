/*
 * p2p_distgraph.c - communicators made by MPI_Dist_graph_create (and
 * MPI_Dist_graph_create_adjacent), round after round, each freed before
 * the next is made: each gets its own matching context, carries
 * point-to-point traffic with the right data and statuses, and its
 * context is reused after MPI_Comm_free.
 *
 * The graph is complete (every rank an in and out neighbour of every
 * other), given in MPI_Dist_graph_create's distributed form: rank r
 * states the out-edges of rank (r + round) % size, so that most ranks
 * learn their edges from another rank.  Rounds alternate reorder 0 and 1,
 * weights and MPI_UNWEIGHTED, and the two calls.
 *
 * Open MPI 4.1's treematch topo component now and then hangs in
 * MPI_Dist_graph_create with 4 ranks on 2 cores, with or without the
 * plugin (open-mpi/ompi#8991), so this program selects the basic one
 * (OMPI_MCA_topo=basic, set before MPI_Init; basic keeps every rank where
 * it is even with reorder 1).  The checks use the new communicator's own
 * ranks and neighbour lists all the same.
 *
 * Call families: blocking (Sendrecv, Recv) and nonblocking (Isend, Irecv,
 * Waitall), each pair of ranks on the new communicator in turn.
 */
#include "mpitest.h"

enum { ROUNDS = 8, LEN = 1000 };

/* The ranks of @p graph's in and out neighbours are every other rank's:
 * checked with MPI_Dist_graph_neighbors_count and _neighbors. */
static void check_neighbours(MPI_Comm graph, int weighted, int round)
{
	int indeg = -1, outdeg = -1, wtd = -1, r, n;

	MT_MPI(MPI_Comm_rank(graph, &r));
	MT_MPI(MPI_Comm_size(graph, &n));
	MT_CHECK(n == mt_size, "round %d: size %d", round, n);
	MT_MPI(MPI_Dist_graph_neighbors_count(graph, &indeg, &outdeg, &wtd));
	MT_CHECK(indeg == n - 1 && outdeg == n - 1 && !wtd == !weighted,
		 "round %d: degrees in %d out %d weighted %d, want %d %d %d", round, indeg, outdeg, wtd, n - 1,
		 n - 1, weighted);
	int *in = mt_alloc(sizeof(int) * (size_t)n), *out = mt_alloc(sizeof(int) * (size_t)n);
	int *inw = mt_alloc(sizeof(int) * (size_t)n), *outw = mt_alloc(sizeof(int) * (size_t)n);
	int *seen = mt_alloc(sizeof(int) * (size_t)n);
	MT_MPI(MPI_Dist_graph_neighbors(graph, indeg, in, weighted ? inw : MPI_UNWEIGHTED, outdeg, out,
					weighted ? outw : MPI_UNWEIGHTED));
	for (int list = 0; list < 2; list++) {
		const int *nb = list ? out : in;
		memset(seen, 0, sizeof(int) * (size_t)n);
		for (int i = 0; i < n - 1; i++) {
			MT_CHECK(nb[i] >= 0 && nb[i] < n && nb[i] != r && !seen[nb[i]],
				 "round %d: %s neighbour %d is %d", round, list ? "out" : "in", i, nb[i]);
			seen[nb[i]] = 1;
		}
	}
	free(in);
	free(out);
	free(inw);
	free(outw);
	free(seen);
}

/* A complete graph over MPI_COMM_WORLD, made the way @p round says. */
static MPI_Comm make_graph(int round)
{
	int reorder = round % 2, weighted = (round / 2) % 2, adjacent = round % 3 == 2;
	int *nb = mt_alloc(sizeof(int) * (size_t)mt_size), *w = mt_alloc(sizeof(int) * (size_t)mt_size);
	MPI_Comm graph = MPI_COMM_NULL;

	if (adjacent) {
		for (int d = 1; d < mt_size; d++) {
			nb[d - 1] = mt_rank ^ d;
			w[d - 1] = d;
		}
		MT_MPI(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, mt_size - 1, nb, weighted ? w : MPI_UNWEIGHTED,
						      mt_size - 1, nb, weighted ? w : MPI_UNWEIGHTED, MPI_INFO_NULL,
						      reorder, &graph));
	} else {
		/* This rank states the out-edges of another one. */
		int source = (mt_rank + round) % mt_size, degree = mt_size - 1;
		for (int d = 1; d < mt_size; d++) {
			nb[d - 1] = source ^ d;
			w[d - 1] = d;
		}
		MT_MPI(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &source, &degree, nb, weighted ? w : MPI_UNWEIGHTED,
					     MPI_INFO_NULL, reorder, &graph));
	}
	MT_CHECK(graph != MPI_COMM_NULL, "round %d: no communicator", round);
	int topo = MPI_UNDEFINED, cmp = MPI_UNEQUAL;
	MT_MPI(MPI_Topo_test(graph, &topo));
	MT_CHECK(topo == MPI_DIST_GRAPH, "round %d: topology %d, want MPI_DIST_GRAPH", round, topo);
	MT_MPI(MPI_Comm_compare(graph, MPI_COMM_WORLD, &cmp));
	MT_CHECK(cmp == MPI_CONGRUENT || (reorder && cmp == MPI_SIMILAR), "round %d: compared with WORLD: %d", round,
		 cmp);
	MT_MPI(MPI_Comm_set_errhandler(graph, MPI_ERRORS_RETURN));
	check_neighbours(graph, weighted, round);
	free(nb);
	free(w);
	return graph;
}

/* The same peer and tag on WORLD and on @p graph: the message sent second
 * (on @p graph) is received first, then WORLD's with wildcards. */
static void isolation(MPI_Comm graph, int round)
{
	int r, n, from_world = -1, from_graph = -1;
	MPI_Group wg, gg;
	MPI_Request rq[2];
	MPI_Status st;

	MT_MPI(MPI_Comm_rank(graph, &r));
	MT_MPI(MPI_Comm_size(graph, &n));
	int gpeer = r ^ 1, wpeer = -1;
	MT_MPI(MPI_Comm_group(graph, &gg));
	MT_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
	MT_MPI(MPI_Group_translate_ranks(gg, 1, &gpeer, wg, &wpeer));
	MT_MPI(MPI_Group_free(&gg));
	MT_MPI(MPI_Group_free(&wg));
	/* WORLD's partner is the graph partner's WORLD rank, so both sides agree. */
	int a = 1000 * round + 1, b = 1000 * round + 2, tag = 70 + round;
	MT_MPI(MPI_Isend(&a, 1, MPI_INT, wpeer, tag, MPI_COMM_WORLD, &rq[0]));
	MT_MPI(MPI_Isend(&b, 1, MPI_INT, gpeer, tag, graph, &rq[1]));
	MT_MPI(MPI_Recv(&from_graph, 1, MPI_INT, gpeer, tag, graph, &st));
	MT_CHECK_STATUS(st, gpeer, tag, 1, MPI_INT);
	MT_MPI(MPI_Recv(&from_world, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, wpeer, tag, 1, MPI_INT);
	MT_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
	MT_CHECK(from_graph == b && from_world == a, "round %d: the graph got %d (want %d), WORLD got %d (want %d)",
		 round, from_graph, b, from_world, a);
}

/* With every other rank of @p graph, by its rank there: a Sendrecv, then
 * Irecv + Isend + Waitall, LEN bytes each, data and statuses checked. */
static void exchanges(MPI_Comm graph, int round)
{
	unsigned char out[LEN], in[LEN];
	int r, n;

	MT_MPI(MPI_Comm_rank(graph, &r));
	MT_MPI(MPI_Comm_size(graph, &n));
	for (int d = 1; d < n; d++) {
		int peer = r ^ d, tag = 100 * round + d;
		MPI_Status st[2];
		MPI_Request rq[2];

		mt_fill(out, LEN, mt_seed(r, peer, tag));
		memset(in, 0, LEN);
		MT_MPI(MPI_Sendrecv(out, LEN, MPI_BYTE, peer, tag, in, LEN, MPI_BYTE, peer, tag, graph, &st[0]));
		MT_CHECK_STATUS(st[0], peer, tag, LEN, MPI_BYTE);
		MT_CHECK_FILL(in, LEN, mt_seed(peer, r, tag));

		mt_fill(out, LEN, mt_seed(r, peer, tag + 50));
		memset(in, 0, LEN);
		MT_MPI(MPI_Irecv(in, LEN, MPI_BYTE, MPI_ANY_SOURCE, tag + 50, graph, &rq[0]));
		MT_MPI(MPI_Isend(out, LEN, MPI_BYTE, peer, tag + 50, graph, &rq[1]));
		MT_MPI(MPI_Waitall(2, rq, st));
		MT_CHECK_STATUS(st[0], peer, tag + 50, LEN, MPI_BYTE);
		MT_CHECK_FILL(in, LEN, mt_seed(peer, r, tag + 50));
	}
}

int main(int argc, char **argv)
{
	/* The basic topo component: treematch hangs now and then (above). */
	setenv("OMPI_MCA_topo", "basic", 1);
	mt_init(&argc, &argv, "p2p_distgraph");
	for (int round = 0; round < ROUNDS; round++) {
		MPI_Comm graph = make_graph(round);
		isolation(graph, round);
		exchanges(graph, round);
		MT_MPI(MPI_Comm_free(&graph));
		MT_CHECK(graph == MPI_COMM_NULL, "round %d: Comm_free left the handle set", round);
	}
	return mt_finish();
}
