/*
 * coll_a2a_hier.c - MPI_Alltoall and MPI_Alltoallv on communicators that
 * span (pretend) nodes (run with PINSHM_MPI_NODES), checked against what
 * every rank computes itself: on world (each node a block of ranks), a
 * reversed split and an interleaved split (even ranks first); blocks of
 * 0, 1, 7, 1000 and 5000 ints; MPI_IN_PLACE; vector items at the odd
 * ranks (the same signature); Alltoallv blocks of different lengths, some
 * empty, with displacements in reverse order; MPI_IN_PLACE Alltoallv with
 * counts that differ by pair (the same both ways, as in place needs);
 * receivers with more room than they are sent (each block's room one
 * int longer, Alltoall and Alltoallv): they get what was sent and nothing
 * is written past it (an erroneous call in MPI, whose signatures differ:
 * the plugin defines it so; Open MPI alone returns MPI_ERR_TRUNCATE for
 * that Alltoall at 3 ranks, so the program is run with the plugin only).
 * check_mpi counts that every call went through pinshm.  Then a ring of
 * point-to-point messages.  Runs with any number of ranks.
 */
#include "colltest.h"

static const int counts[] = {0, 1, 7, 1000, 5000};
#define NCOUNTS ((int)(sizeof(counts) / sizeof(counts[0])))

/* Item i of the block rank @p from sends rank @p to. */
static int val(int from, int to, int i)
{
	return from * 1000003 + to * 10007 + i * 3 + 1;
}

static void check_alltoall(MPI_Comm comm, MPI_Datatype vec)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	bool odd = rank % 2; /* receives vector items: 2 ints every 3 */
	for (int c = 0; c < NCOUNTS; c++) {
		int n = counts[c];
		for (int in_place = 0; in_place < 2; in_place++) {
			bool ip = in_place && !odd; /* MPI_IN_PLACE takes the receive type for both */
			size_t rlen = odd ? (size_t)size * n / 2 * 3 + 3 : (size_t)size * n + 1;
			int *s = malloc(((size_t)size * n + 1) * sizeof(int)), *r = malloc(rlen * sizeof(int));
			MT_CHECK(s && r, "out of memory");
			for (int d = 0; d < size; d++)
				for (int i = 0; i < n; i++)
					s[(size_t)d * n + i] = val(rank, d, i);
			for (size_t i = 0; i < rlen; i++)
				r[i] = ip && i < (size_t)size * n ? s[i] : -99;
			bool vec_ok = odd && n % 2 == 0;
			if (odd && !vec_ok) /* ints: odd ranks use vectors only for even counts */
				MT_MPI(MPI_Alltoall(s, n, MPI_INT, r, n, MPI_INT, comm));
			else if (odd)
				MT_MPI(MPI_Alltoall(s, n, MPI_INT, r, n / 2, vec, comm));
			else
				MT_MPI(MPI_Alltoall(ip ? MPI_IN_PLACE : s, n, MPI_INT, r, n, MPI_INT, comm));
			for (int f = 0; f < size; f++)
				for (int i = 0; i < n; i++) {
					size_t at = vec_ok ? ((size_t)f * n + i) / 2 * 3 + i % 2 : (size_t)f * n + i;
					MT_CHECK(r[at] == val(f, rank, i), "alltoall n %d%s from %d [%d] = %d want %d", n,
						 ip ? " in place" : "", f, i, r[at], val(f, rank, i));
				}
			if (!vec_ok)
				MT_CHECK(r[(size_t)size * n] == -99, "alltoall n %d wrote past its buffer", n);
			free(s);
			free(r);
		}
	}
}

/* Alltoallv: rank f sends rank t (f + 2 t) % 5 * k ints; blocks at
 * displacements in reverse rank order. */
static int vcount(int f, int t, int k)
{
	return (f + 2 * t) % 5 * k;
}

static void check_alltoallv(MPI_Comm comm)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int *sc = malloc(size * sizeof(int)), *sd = malloc(size * sizeof(int));
	int *rc = malloc(size * sizeof(int)), *rd = malloc(size * sizeof(int));
	MT_CHECK(sc && sd && rc && rd, "out of memory");
	static const int ks[] = {1, 300};
	for (int ki = 0; ki < 2; ki++)
		for (int in_place = 0; in_place < 2; in_place++) {
			int k = ks[ki], stot = 0, rtot = 0;
			for (int d = size - 1; d >= 0; d--) {
				sc[d] = vcount(rank, d, k);
				sd[d] = stot;
				stot += sc[d];
				rc[d] = vcount(d, rank, k);
				rd[d] = rtot;
				rtot += rc[d];
			}
			/* In place: the send blocks are the receive blocks (counts and
			 * displacements of the receive side): only where they agree. */
			bool ip = in_place;
			for (int d = 0; d < size && ip; d++)
				ip = sc[d] == rc[d];
			int *s = malloc((stot + 1) * sizeof(int)), *r = malloc((rtot + 1) * sizeof(int));
			MT_CHECK(s && r, "out of memory");
			for (int d = 0; d < size; d++)
				for (int i = 0; i < sc[d]; i++)
					s[sd[d] + i] = val(rank, d, i);
			for (int i = 0; i <= rtot; i++)
				r[i] = -99;
			if (ip)
				for (int d = 0; d < size; d++)
					for (int i = 0; i < rc[d]; i++)
						r[rd[d] + i] = val(rank, d, i);
			MT_MPI(MPI_Alltoallv(ip ? MPI_IN_PLACE : s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, comm));
			for (int f = 0; f < size; f++)
				for (int i = 0; i < rc[f]; i++)
					MT_CHECK(r[rd[f] + i] == val(f, rank, i), "alltoallv k %d from %d [%d] = %d", k, f, i,
						 r[rd[f] + i]);
			MT_CHECK(r[rtot] == -99, "alltoallv wrote past its buffer");
			free(s);
			free(r);
		}
	free(sc);
	free(sd);
	free(rc);
	free(rd);
}

/* In place, rank f and rank t exchange (f + t) % 4 * k + (f == t) ints
 * each way: counts that differ by pair; blocks in reverse rank order with
 * a gap of one int between them (never written). */
static void check_alltoallv_in_place(MPI_Comm comm)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int *rc = malloc(size * sizeof(int)), *rd = malloc(size * sizeof(int));
	MT_CHECK(rc && rd, "out of memory");
	static const int ks[] = {1, 300};
	for (int ki = 0; ki < 2; ki++) {
		int k = ks[ki], tot = 0;
		for (int d = size - 1; d >= 0; d--) {
			rc[d] = (rank + d) % 4 * k + (rank == d);
			rd[d] = tot;
			tot += rc[d] + 1;
		}
		int *r = malloc((tot + 1) * sizeof(int));
		MT_CHECK(r, "out of memory");
		for (int i = 0; i <= tot; i++)
			r[i] = -99;
		for (int d = 0; d < size; d++)
			for (int i = 0; i < rc[d]; i++)
				r[rd[d] + i] = val(rank, d, i);
		MT_MPI(MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_INT, r, rc, rd, MPI_INT, comm));
		for (int f = 0; f < size; f++) {
			for (int i = 0; i < rc[f]; i++)
				MT_CHECK(r[rd[f] + i] == val(f, rank, i), "alltoallv in place k %d from %d [%d] = %d", k, f,
					 i, r[rd[f] + i]);
			MT_CHECK(r[rd[f] + rc[f]] == -99, "alltoallv in place k %d wrote past the block from %d", k, f);
		}
		free(r);
	}
	free(rc);
	free(rd);
}

/* Each block's room one int longer than what is sent (Alltoall: n sent,
 * n + 1 received; Alltoallv: vcount() sent): the extra int of every
 * block stays as it was. */
static void check_roomy(MPI_Comm comm)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int *sc = malloc(size * sizeof(int)), *sd = malloc(size * sizeof(int));
	int *rc = malloc(size * sizeof(int)), *rd = malloc(size * sizeof(int));
	MT_CHECK(sc && sd && rc && rd, "out of memory");
	for (int c = 1; c < NCOUNTS; c++) {
		int n = counts[c], stot = 0, rtot = 0;
		for (int d = size - 1; d >= 0; d--) {
			sc[d] = vcount(rank, d, n);
			sd[d] = stot;
			stot += sc[d];
			rc[d] = vcount(d, rank, n) + 1;
			rd[d] = rtot;
			rtot += rc[d];
		}
		size_t most = (size_t)size * (n + 1) > (size_t)stot + rtot ? (size_t)size * (n + 1) : (size_t)stot + rtot;
		int *s = malloc((most + 1) * sizeof(int)), *r = malloc((most + 1) * sizeof(int));
		MT_CHECK(s && r, "out of memory");
		for (int d = 0; d < size; d++)
			for (int i = 0; i < n; i++)
				s[(size_t)d * n + i] = val(rank, d, i);
		for (size_t i = 0; i <= most; i++)
			r[i] = -99;
		MT_MPI(MPI_Alltoall(s, n, MPI_INT, r, n + 1, MPI_INT, comm));
		for (int f = 0; f < size; f++) {
			for (int i = 0; i < n; i++)
				MT_CHECK(r[(size_t)f * (n + 1) + i] == val(f, rank, i), "roomy alltoall n %d from %d [%d] = %d",
					 n, f, i, r[(size_t)f * (n + 1) + i]);
			MT_CHECK(r[(size_t)f * (n + 1) + n] == -99, "roomy alltoall n %d: written past the %d ints from %d",
				 n, n, f);
		}
		for (int d = 0; d < size; d++)
			for (int i = 0; i < sc[d]; i++)
				s[sd[d] + i] = val(rank, d, i);
		for (size_t i = 0; i <= most; i++)
			r[i] = -99;
		MT_MPI(MPI_Alltoallv(s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, comm));
		for (int f = 0; f < size; f++) {
			for (int i = 0; i < rc[f] - 1; i++)
				MT_CHECK(r[rd[f] + i] == val(f, rank, i), "roomy alltoallv n %d from %d [%d] = %d", n, f, i,
					 r[rd[f] + i]);
			MT_CHECK(r[rd[f] + rc[f] - 1] == -99, "roomy alltoallv n %d: written past the %d ints from %d", n,
				 rc[f] - 1, f);
		}
		free(s);
		free(r);
	}
	free(sc);
	free(sd);
	free(rc);
	free(rd);
}

int main(int argc, char **argv)
{
	mt_coll_init(&argc, &argv, "coll_a2a_hier");
	MPI_Datatype vec = mt_vec3();
	MPI_Comm rev, mix;
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, mt_size - mt_rank, &rev));
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, (mt_rank % 2) * mt_size + mt_rank, &mix));
	MPI_Comm comms[] = {MPI_COMM_WORLD, rev, mix};
	for (int c = 0; c < 3; c++) {
		check_alltoall(comms[c], vec);
		check_alltoallv(comms[c]);
		check_alltoallv_in_place(comms[c]);
		check_roomy(comms[c]);
	}
	mt_check_ring();
	MPI_Comm_free(&rev);
	MPI_Comm_free(&mix);
	MPI_Type_free(&vec);
	return mt_finish();
}
