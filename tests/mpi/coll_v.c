/*
 * coll_v.c - MPI_Gatherv, MPI_Scatterv, MPI_Allgatherv and MPI_Alltoallv
 * on world, a reversed split, a dup and sub-communicators of up to 3
 * ranks, checked against what every rank computes itself: blocks of
 * 0, 1, 7 and 1000 items, a different count per rank (zeros among them),
 * displacements with gaps (left as they were), every root; the counts
 * known only where MPI gives them (NULL arrays elsewhere); ints, doubles,
 * float complex and MPI_2INT, and a vector type (2 ints every 3) on one
 * side against plain ints on the other; MPI_IN_PLACE on odd tests; one
 * block of 1M ints (Allgatherv, on world); on the dup, counts 0 and 7
 * only.  Any number of ranks; with the argument "short", world only,
 * counts 0 and 7.
 */
#include <complex.h>
#include <stdbool.h>

#include "colltest.h"

#define LARGE (1 << 20)
#define GAP 3 /* items between blocks */

static int rank, size;
static MPI_Datatype vec; /* 2 ints every 3 */

/* The communicator's turn (every rank takes them in one order): the same
 * call on two communicators sends different values, so that data one left
 * in an area cannot pass for the other's. */
static unsigned salt;

static int ival(int r, int i, int t)
{
	return (int)(((unsigned)r * 7919u + (unsigned)i * 104729u + (unsigned)t * 31u + salt * 7u) % 1000u) - 500;
}

/* Rank r's count at test t with base n: some zeros, all different. */
static int cnt(int r, int n, int t)
{
	return (r + t) % 4 == 3 ? 0 : n + (r + t) % 3;
}

/* Displacements (items) of blocks of counts c: GAP items before each. */
static int layout(const int *c, int *displs)
{
	int at = 0;
	for (int r = 0; r < size; r++) {
		displs[r] = at + GAP;
		at += GAP + c[r];
	}
	return at + GAP;
}

/* ints: Gatherv to each root, Scatterv back, Allgatherv; in place on odd t. */
static void check_ints(MPI_Comm comm, int n, int t)
{
	int c[64], d[64];
	for (int r = 0; r < size; r++)
		c[r] = cnt(r, n, t);
	int total = layout(c, d), mine = c[rank];
	int *all = malloc((size_t)total * sizeof(int)), *own = malloc(((size_t)mine + 1) * sizeof(int));
	MT_CHECK(all && own, "out of memory");
	for (int root = 0; root < size; root++) {
		bool inplace = t % 2 && rank == root;
		for (int i = 0; i < mine; i++)
			own[i] = ival(rank, i, t + root);
		for (int i = 0; i < total; i++)
			all[i] = -7;
		if (inplace)
			memcpy(all + d[rank], own, (size_t)mine * sizeof(int));
		if (rank == root)
			MT_MPI(MPI_Gatherv(inplace ? MPI_IN_PLACE : own, mine, MPI_INT, all, c, d, MPI_INT, root, comm));
		else
			MT_MPI(MPI_Gatherv(own, mine, MPI_INT, NULL, NULL, NULL, MPI_INT, root, comm));
		for (int r = 0, k = 0; rank == root && r < size; r++)
			for (; k < d[r] + c[r]; k++)
				MT_CHECK(all[k] == (k < d[r] ? -7 : ival(r, k - d[r], t + root)),
					 "gatherv root %d n %d from %d at %d: %d", root, n, r, k, all[k]);
		/* Back: rank r gets r's values + 1. */
		for (int i = 0; rank == root && i < total; i++)
			all[i] += 1;
		for (int i = 0; i < mine; i++)
			own[i] = -8;
		if (rank == root)
			MT_MPI(MPI_Scatterv(all, c, d, MPI_INT, inplace ? MPI_IN_PLACE : own, mine, MPI_INT, root, comm));
		else
			MT_MPI(MPI_Scatterv(NULL, NULL, NULL, MPI_INT, own, mine, MPI_INT, root, comm));
		for (int i = 0; !inplace && i < mine; i++)
			MT_CHECK(own[i] == ival(rank, i, t + root) + 1, "scatterv root %d n %d [%d] = %d", root, n, i,
				 own[i]);
	}
	for (int i = 0; i < total; i++)
		all[i] = -7;
	for (int i = 0; i < mine; i++)
		own[i] = ival(rank, i, t);
	if (t % 2)
		memcpy(all + d[rank], own, (size_t)mine * sizeof(int));
	MT_MPI(MPI_Allgatherv(t % 2 ? MPI_IN_PLACE : own, mine, MPI_INT, all, c, d, MPI_INT, comm));
	for (int r = 0, k = 0; r < size; r++)
		for (; k < d[r] + c[r]; k++)
			MT_CHECK(all[k] == (k < d[r] ? -7 : ival(r, k - d[r], t)), "allgatherv n %d from %d at %d", n, r, k);
	free(all);
	free(own);
}

/* Alltoallv of ints: rank q sends rank r (q + r + n) % 5 items (some 0),
 * item i = ival(q * size + r, i, t); in place on odd t. */
static void check_alltoallv(MPI_Comm comm, int n, int t)
{
	int sc[64], sd[64], rc[64], rd[64];
	for (int r = 0; r < size; r++) {
		sc[r] = (rank + r + t) % 5 == 4 ? 0 : n + (rank + r) % 3;
		rc[r] = (r + rank + t) % 5 == 4 ? 0 : n + (r + rank) % 3;
	}
	int stotal = layout(sc, sd), rtotal = layout(rc, rd);
	bool inplace = t % 2;
	if (inplace) { /* the send blocks lie in recvbuf, as the receive ones */
		memcpy(sc, rc, sizeof(rc));
		memcpy(sd, rd, sizeof(rd));
		stotal = rtotal;
	}
	int *out = malloc((size_t)stotal * sizeof(int)), *in = malloc((size_t)rtotal * sizeof(int));
	MT_CHECK(out && in, "out of memory");
	for (int i = 0; i < rtotal; i++)
		in[i] = -7;
	int *src = inplace ? in : out;
	for (int r = 0; r < size; r++)
		for (int i = 0; i < sc[r]; i++)
			src[sd[r] + i] = ival(rank * size + r, i, t);
	MT_MPI(MPI_Alltoallv(inplace ? MPI_IN_PLACE : out, sc, sd, MPI_INT, in, rc, rd, MPI_INT, comm));
	for (int r = 0, k = 0; r < size; r++)
		for (; k < rd[r] + rc[r]; k++)
			MT_CHECK(in[k] == (k < rd[r] ? -7 : ival(r * size + rank, k - rd[r], t)),
				 "alltoallv n %d from %d at %d: %d", n, r, k, in[k]);
	free(out);
	free(in);
}

/* Other types: double and float complex (Allgatherv), MPI_2INT (Gatherv to
 * the last rank), vector items at the root against ints (Gatherv,
 * Scatterv) and vector items received against ints sent (Alltoallv). */
static void check_types(MPI_Comm comm, int n, int t)
{
	int c[64], d[64];
	for (int r = 0; r < size; r++)
		c[r] = cnt(r, n, t);
	int total = layout(c, d), mine = c[rank], root = size - 1;
	double *dall = malloc((size_t)total * sizeof(double)), *down = malloc(((size_t)mine + 1) * sizeof(double));
	float complex *zall = malloc((size_t)total * sizeof(*zall)), *zown = malloc(((size_t)mine + 1) * sizeof(*zown));
	int *pall = malloc((size_t)total * 3 * sizeof(int)), *pown = malloc(((size_t)mine + 1) * 2 * sizeof(int));
	MT_CHECK(dall && down && zall && zown && pall && pown, "out of memory");
	for (int i = 0; i < mine; i++) {
		down[i] = ival(rank, i, t) + 0.25;
		zown[i] = (float)ival(rank, i, t) + (float)ival(rank, i, t + 1) * I;
		pown[2 * i] = ival(rank, i, t);
		pown[2 * i + 1] = rank;
	}
	MT_MPI(MPI_Allgatherv(down, mine, MPI_DOUBLE, dall, c, d, MPI_DOUBLE, comm));
	MT_MPI(MPI_Allgatherv(zown, mine, MPI_C_FLOAT_COMPLEX, zall, c, d, MPI_C_FLOAT_COMPLEX, comm));
	for (int r = 0; r < size; r++)
		for (int i = 0; i < c[r]; i++) {
			MT_CHECK(dall[d[r] + i] == ival(r, i, t) + 0.25, "allgatherv double from %d [%d]", r, i);
			MT_CHECK(zall[d[r] + i] == (float)ival(r, i, t) + (float)ival(r, i, t + 1) * I,
				 "allgatherv complex from %d [%d]", r, i);
		}
	MT_MPI(MPI_Gatherv(pown, mine, MPI_2INT, pall, c, d, MPI_2INT, root, comm));
	for (int r = 0; rank == root && r < size; r++)
		for (int i = 0; i < c[r]; i++)
			MT_CHECK(pall[2 * (d[r] + i)] == ival(r, i, t) && pall[2 * (d[r] + i) + 1] == r,
				 "gatherv 2int from %d [%d]", r, i);
	/* Vector items at the root: 2 * c[r] ints from rank r are c[r] items. */
	for (int i = 0; i < 3 * total; i++)
		pall[i] = -9;
	for (int i = 0; i < 2 * mine; i++)
		pown[i] = ival(rank, i, t + 3);
	if (rank == root)
		MT_MPI(MPI_Gatherv(pown, 2 * mine, MPI_INT, pall, c, d, vec, root, comm));
	else
		MT_MPI(MPI_Gatherv(pown, 2 * mine, MPI_INT, NULL, NULL, NULL, MPI_DATATYPE_NULL, root, comm));
	for (int r = 0; rank == root && r < size; r++)
		for (int i = 0; i < 3 * c[r]; i++)
			MT_CHECK(pall[3 * d[r] + i] == (i % 3 == 2 ? -9 : ival(r, i / 3 * 2 + i % 3, t + 3)),
				 "gatherv vec from %d [%d]", r, i);
	for (int i = 0; i < 2 * mine; i++)
		pown[i] = -6;
	if (rank == root)
		MT_MPI(MPI_Scatterv(pall, c, d, vec, pown, 2 * mine, MPI_INT, root, comm));
	else
		MT_MPI(MPI_Scatterv(NULL, NULL, NULL, MPI_DATATYPE_NULL, pown, 2 * mine, MPI_INT, root, comm));
	for (int i = 0; i < 2 * mine; i++)
		MT_CHECK(pown[i] == ival(rank, i, t + 3), "scatterv vec [%d] = %d", i, pown[i]);
	/* Alltoallv: 2 * k ints sent, k vector items received, k = c[min]. */
	int sc[64], sd[64], rc[64], rd[64];
	for (int r = 0; r < size; r++) {
		sc[r] = 2 * c[rank < r ? rank : r];
		sd[r] = r * 2 * (n + 3);
		rc[r] = c[rank < r ? rank : r];
		rd[r] = r * (n + 3);
	}
	int *to = malloc((size_t)size * 2 * (n + 3) * sizeof(int)), *from = malloc((size_t)size * 3 * (n + 3) * sizeof(int));
	MT_CHECK(to && from, "out of memory");
	for (int r = 0; r < size; r++)
		for (int i = 0; i < sc[r]; i++)
			to[sd[r] + i] = ival(rank * size + r, i, t);
	for (int i = 0; i < size * 3 * (n + 3); i++)
		from[i] = -9;
	MT_MPI(MPI_Alltoallv(to, sc, sd, MPI_INT, from, rc, rd, vec, comm));
	for (int r = 0; r < size; r++)
		for (int i = 0; i < 3 * rc[r]; i++)
			MT_CHECK(from[3 * rd[r] + i] == (i % 3 == 2 ? -9 : ival(r * size + rank, i / 3 * 2 + i % 3, t)),
				 "alltoallv vec from %d [%d]", r, i);
	free(to);
	free(from);
	free(dall);
	free(down);
	free(zall);
	free(zown);
	free(pall);
	free(pown);
}

/* Every count and type on @p comm, or where @p quick counts 0 and 7; the
 * large block where @p large. */
static void check_comm(MPI_Comm comm, bool quick, bool large)
{
	static const int counts[] = {0, 1, 7, 1000};
	MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	MT_CHECK(size <= 64, "at most 64 ranks");
	salt++;
	for (unsigned k = 0; k < 4; k++) {
		if (quick && counts[k] != 0 && counts[k] != 7)
			continue;
		for (int t = 0; t < 2; t++) {
			check_ints(comm, counts[k], (int)k * 2 + t);
			check_alltoallv(comm, counts[k], (int)k * 2 + t);
		}
		check_types(comm, counts[k], (int)k);
	}
	if (!large)
		return;
	/* One block of 1M ints among small ones. */
	int c[64], d[64];
	for (int r = 0; r < size; r++)
		c[r] = r == size / 2 ? LARGE : 7;
	int total = layout(c, d);
	int *all = malloc((size_t)total * sizeof(int)), *own = malloc((size_t)c[rank] * sizeof(int));
	MT_CHECK(all && own, "out of memory");
	for (int i = 0; i < c[rank]; i++)
		own[i] = ival(rank, i, 9);
	MT_MPI(MPI_Allgatherv(own, c[rank], MPI_INT, all, c, d, MPI_INT, comm));
	for (int r = 0; r < size; r++)
		for (int i = 0; i < c[r]; i++)
			MT_CHECK(all[d[r] + i] == ival(r, i, 9), "large allgatherv from %d [%d]", r, i);
	free(all);
	free(own);
}

int main(int argc, char **argv)
{
	bool quick = mt_coll_init(&argc, &argv, "coll_v");
	vec = mt_vec3();
	mt_coll_comms(check_comm, quick);
	MPI_Type_free(&vec);
	MPI_Barrier(MPI_COMM_WORLD);
	if (mt_rank == 0)
		printf("coll_v: ok\n");
	MPI_Finalize();
	return 0;
}
