/*
 * p2p_pieces.c - derived datatypes packed and unpacked in pieces.
 *
 * The plugin packs and unpacks a non-contiguous message in pieces of at
 * most INT_MAX bytes; check_mpi runs this program with PINSHM_MPI_PIECE=64
 * (a test hook: 64-byte pieces), so that small messages cross many piece
 * boundaries.  Types made of ints: vector, indexed, a struct with gaps,
 * resized, and types whose single item is larger than a piece (contiguous
 * of vectors, subarrays in C and Fortran order, a struct of hvector,
 * indexed_block and hindexed_block blocks, a resized one of those, darrays
 * of block, cyclic and undistributed dimensions in both orders), sent as
 * one type and received as another (a different number of ints per item,
 * so that a message may end inside an item), eager, streamed one way and
 * crossing (copied once where the kernel lets the receiver read its
 * sender), blocking and nonblocking, plus Sendrecv_replace.  Every byte of
 * the receive buffer is checked, the gaps and what lies past the message
 * included, against what Open MPI's own MPI_Unpack of the same data
 * writes.
 *
 * Call families: blocking, nonblocking.
 */
#include <dlfcn.h>
#include <stdbool.h>

#include "mpitest.h"

/* The plugin's pieces, seen from here: this program defines PMPI_Pack and
 * PMPI_Unpack, which the preloaded plugin's calls reach before the MPI
 * library's (an executable comes first in the symbol lookup), and keeps
 * the largest size a call packed or unpacked. */
static long biggest_piece;

static void saw_piece(long bytes)
{
	if (bytes > biggest_piece)
		biggest_piece = bytes;
}

int PMPI_Pack(const void *inbuf, int incount, MPI_Datatype datatype, void *outbuf, int outsize, int *position,
	      MPI_Comm comm)
{
	static int (*next)(const void *, int, MPI_Datatype, void *, int, int *, MPI_Comm);
	if (!next)
		*(void **)&next = dlsym(RTLD_NEXT, "PMPI_Pack");
	int from = *position, rc = next(inbuf, incount, datatype, outbuf, outsize, position, comm);
	saw_piece(*position - from);
	return rc;
}

int PMPI_Unpack(const void *inbuf, int insize, int *position, void *outbuf, int outcount, MPI_Datatype datatype,
		MPI_Comm comm)
{
	static int (*next)(const void *, int, int *, void *, int, MPI_Datatype, MPI_Comm);
	if (!next)
		*(void **)&next = dlsym(RTLD_NEXT, "PMPI_Unpack");
	int from = *position, rc = next(inbuf, insize, position, outbuf, outcount, datatype, comm);
	saw_piece(*position - from);
	return rc;
}

#define GUARD 64
#define NTYPES 13

static MPI_Datatype types[NTYPES];
static const char *names[NTYPES];
static int ints_of[NTYPES]; /* ints in one item */

static void add(int *n, const char *name, MPI_Datatype t)
{
	int size;
	MT_MPI(MPI_Type_commit(&t));
	MT_MPI(MPI_Type_size(t, &size));
	types[*n] = t;
	names[*n] = name;
	ints_of[*n] = size / (int)sizeof(int);
	(*n)++;
}

static void make_types(void)
{
	int n = 0;
	MPI_Datatype vec, idx, gaps, tmp, big;
	/* Up to a piece: 60, 28 and 36 bytes. */
	MT_MPI(MPI_Type_vector(5, 3, 4, MPI_INT, &vec));
	add(&n, "vector", vec);
	int ilens[3] = {2, 1, 4}, idisp[3] = {0, 3, 7};
	MT_MPI(MPI_Type_indexed(3, ilens, idisp, MPI_INT, &idx));
	add(&n, "indexed", idx);
	int slens[3] = {1, 3, 5};
	MPI_Aint sdisp[3] = {4, 16, 40};
	MPI_Datatype sts[3] = {MPI_INT, MPI_INT, MPI_INT};
	MT_MPI(MPI_Type_create_struct(3, slens, sdisp, sts, &gaps));
	add(&n, "struct with gaps", gaps);
	MT_MPI(MPI_Type_create_resized(vec, 0, 100, &tmp));
	add(&n, "resized vector", tmp);
	/* Larger than a piece: 240, 96, 96, 296 and 200 bytes. */
	MT_MPI(MPI_Type_contiguous(4, vec, &tmp));
	add(&n, "contiguous of vectors", tmp);
	int sizes[3] = {4, 5, 6}, sub[3] = {3, 4, 2}, starts[3] = {1, 0, 3};
	MT_MPI(MPI_Type_create_subarray(3, sizes, sub, starts, MPI_ORDER_C, MPI_INT, &tmp));
	add(&n, "subarray C", tmp);
	MT_MPI(MPI_Type_create_subarray(3, sizes, sub, starts, MPI_ORDER_FORTRAN, MPI_INT, &tmp));
	add(&n, "subarray Fortran", tmp);
	MPI_Datatype hv, ib, hib;
	MT_MPI(MPI_Type_create_hvector(3, 1, 72, gaps, &hv));
	int ibd[2] = {9, 1};
	MT_MPI(MPI_Type_create_indexed_block(2, 4, ibd, MPI_INT, &ib));
	MPI_Aint hibd[3] = {24, 0, 60};
	MT_MPI(MPI_Type_create_hindexed_block(3, 2, hibd, MPI_INT, &hib));
	int blens[3] = {1, 2, 1};
	MPI_Aint bdisp[3] = {8, 240, 400};
	MPI_Datatype bts[3] = {hv, ib, hib};
	MT_MPI(MPI_Type_create_struct(3, blens, bdisp, bts, &big));
	add(&n, "struct of hvector, indexed_block, hindexed_block", big);
	MT_MPI(MPI_Type_free(&hv));
	MT_MPI(MPI_Type_free(&ib));
	MT_MPI(MPI_Type_free(&hib));
	MPI_Aint lb, ext;
	MT_MPI(MPI_Type_get_extent(big, &lb, &ext));
	MT_MPI(MPI_Type_create_resized(big, 0, ext + 24, &tmp));
	add(&n, "resized big struct", tmp);
	int hlens[2] = {2, 3};
	MPI_Aint hdisp[2] = {200, 0};
	MT_MPI(MPI_Type_create_hindexed(2, hlens, hdisp, idx, &tmp));
	add(&n, "hindexed of indexed", tmp);
	MT_MPI(MPI_Type_dup(tmp, &tmp));
	add(&n, "dup", tmp);
	/* Darrays of 80 and 84 bytes: process 1 of a 2 x 2 grid, rows in a
	 * block, columns cyclic in blocks of 3, the last one cut; process 2
	 * of a 3 x 1 grid in Fortran order, rows cyclic one by one, columns
	 * not distributed. */
	int g1[2] = {7, 11}, d1[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
	int a1[2] = {MPI_DISTRIBUTE_DFLT_DARG, 3}, p1[2] = {2, 2};
	MT_MPI(MPI_Type_create_darray(4, 1, 2, g1, d1, a1, p1, MPI_ORDER_C, MPI_INT, &tmp));
	add(&n, "darray C", tmp);
	int g2[2] = {9, 7}, d2[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_NONE};
	int a2[2] = {MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG}, p2[2] = {3, 1};
	MT_MPI(MPI_Type_create_darray(3, 2, 2, g2, d2, a2, p2, MPI_ORDER_FORTRAN, MPI_INT, &tmp));
	add(&n, "darray Fortran", tmp);
	MT_CHECK(n == NTYPES, "%d types made", n);
}

/* Bytes a buffer of @p count items of @p t spans (lower bounds are 0), and
 * a guard past them. */
static size_t span(MPI_Datatype t, int count)
{
	MPI_Aint lb, ext, tlb, text;
	MT_MPI(MPI_Type_get_extent(t, &lb, &ext));
	MT_MPI(MPI_Type_get_true_extent(t, &tlb, &text));
	MT_CHECK(lb >= 0 && tlb >= 0, "negative lower bound");
	return count ? (size_t)((count - 1) * ext + tlb + text) + GUARD : GUARD;
}

struct msg {
	int st, rt;         /* send and receive types */
	int scount, rcount; /* items */
	int ints;           /* ints in the message */
	size_t sspan, rspan;
	uint64_t seed;
};

/* The message of @p ints ints (at least) from type @p st into type @p rt. */
static struct msg plan(int st, int rt, int ints, uint64_t seed)
{
	struct msg m = {.st = st, .rt = rt, .seed = seed};
	m.scount = (ints + ints_of[st] - 1) / ints_of[st];
	m.ints = m.scount * ints_of[st];
	m.rcount = (m.ints + ints_of[rt] - 1) / ints_of[rt] + 1;
	m.sspan = span(types[st], m.scount);
	m.rspan = span(types[rt], m.rcount);
	return m;
}

static unsigned char *send_buffer(const struct msg *m)
{
	unsigned char *b = mt_alloc(m->sspan);
	mt_fill(b, m->sspan, m->seed);
	return b;
}

/* What the receive buffer must hold: 0xa5 where nothing is written, and
 * the message where Open MPI's own MPI_Unpack puts it. */
static unsigned char *expected(const struct msg *m)
{
	unsigned char *sb = send_buffer(m), *want = mt_alloc(m->rspan);
	int bytes = m->ints * (int)sizeof(int), pos = 0;
	char *packed = mt_alloc((size_t)bytes);
	MT_MPI(MPI_Pack(sb, m->scount, types[m->st], packed, bytes, &pos, MPI_COMM_SELF));
	MT_CHECK(pos == bytes, "packed %d bytes of %d", pos, bytes);
	memset(want, 0xa5, m->rspan);
	int whole = m->ints / ints_of[m->rt], rest = m->ints % ints_of[m->rt];
	pos = 0;
	MT_MPI(MPI_Unpack(packed, bytes, &pos, want, whole, types[m->rt], MPI_COMM_SELF));
	if (rest) { /* the last item's first ints: unpack it whole from a scratch copy, then keep those */
		MPI_Aint lb, ext;
		MT_MPI(MPI_Type_get_extent(types[m->rt], &lb, &ext));
		size_t at = (size_t)(whole * ext), n = m->rspan - at;
		unsigned char *a = mt_alloc(n), *b = mt_alloc(n);
		int isize = ints_of[m->rt] * (int)sizeof(int), p = 0;
		char *item = mt_alloc((size_t)isize);
		memcpy(item, packed + pos, (size_t)rest * sizeof(int));
		memset(item + rest * sizeof(int), 0, (size_t)isize - (size_t)rest * sizeof(int));
		memcpy(a, want + at, n);
		memcpy(b, want + at, n);
		MT_MPI(MPI_Unpack(item, isize, &p, a, 1, types[m->rt], MPI_COMM_SELF));
		memset(item + rest * sizeof(int), 0xff, (size_t)isize - (size_t)rest * sizeof(int));
		p = 0;
		MT_MPI(MPI_Unpack(item, isize, &p, b, 1, types[m->rt], MPI_COMM_SELF));
		for (size_t i = 0; i < n; i++) /* written alike from both: the message's part */
			if (a[i] == b[i])
				want[at + i] = a[i];
		free(a);
		free(b);
		free(item);
	}
	free(packed);
	free(sb);
	return want;
}

static void check(const struct msg *m, const unsigned char *rb, const MPI_Status *st, int peer, int tag,
		  const char *how)
{
	unsigned char *want = expected(m);
	for (size_t i = 0; i < m->rspan; i++)
		MT_CHECK(rb[i] == want[i], "%s, %s (%d) into %s (%d), %d ints: byte %zu of %zu is %#x, want %#x", how,
			 names[m->st], m->scount, names[m->rt], m->rcount, m->ints, i, m->rspan, rb[i], want[i]);
	MT_CHECK_STATUS(*st, peer, tag, m->ints, MPI_INT);
	free(want);
}

/* One message each way between this rank and @p peer, either one way after
 * the other (@p crossing false: streamed) or both at once, blocking or not. */
static void exchange(int peer, int st, int rt, int ints, int tag, bool crossing, bool blocking)
{
	struct msg out = plan(st, rt, ints, mt_seed(mt_rank, peer, tag));
	struct msg in = plan(st, rt, ints, mt_seed(peer, mt_rank, tag));
	unsigned char *sb = send_buffer(&out), *rb = mt_alloc(in.rspan);
	MPI_Status status;
	memset(rb, 0xa5, in.rspan);
	for (int turn = 0; turn < (crossing ? 1 : 2); turn++) {
		bool sends = crossing || (turn == 0) == (mt_rank < peer);
		bool recvs = crossing || !sends;
		MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
		MPI_Status sts[2];
		if (blocking && crossing) {
			MT_MPI(MPI_Sendrecv(sb, out.scount, types[st], peer, tag, rb, in.rcount, types[rt], peer, tag,
					    MPI_COMM_WORLD, &status));
			continue;
		}
		if (blocking) {
			if (sends)
				MT_MPI(MPI_Send(sb, out.scount, types[st], peer, tag, MPI_COMM_WORLD));
			else
				MT_MPI(MPI_Recv(rb, in.rcount, types[rt], peer, tag, MPI_COMM_WORLD, &status));
			continue;
		}
		if (recvs)
			MT_MPI(MPI_Irecv(rb, in.rcount, types[rt], peer, tag, MPI_COMM_WORLD, &rq[0]));
		if (sends)
			MT_MPI(MPI_Isend(sb, out.scount, types[st], peer, tag, MPI_COMM_WORLD, &rq[1]));
		MT_MPI(MPI_Waitall(2, rq, sts));
		if (recvs)
			status = sts[0];
	}
	check(&in, rb, &status, peer, tag,
	      crossing ? (blocking ? "Sendrecv" : "crossing Isend/Irecv") : (blocking ? "Send/Recv" : "Isend/Irecv"));
	free(sb);
	free(rb);
}

/* Sendrecv_replace of a type larger than a piece, into itself. */
static void replace(int peer, int t, int ints, int tag)
{
	struct msg in = plan(t, t, ints, mt_seed(peer, mt_rank, tag));
	in.rcount = in.scount;
	in.rspan = in.sspan;
	struct msg out = in;
	out.seed = mt_seed(mt_rank, peer, tag);
	unsigned char *b = send_buffer(&out);
	MPI_Status status;
	MT_MPI(MPI_Sendrecv_replace(b, in.scount, types[t], peer, tag, peer, tag, MPI_COMM_WORLD, &status));
	/* The gaps keep this rank's own bytes: compare with those. */
	unsigned char *want = expected(&in), *mine = send_buffer(&out);
	for (size_t i = 0; i < in.rspan - GUARD; i++)
		MT_CHECK(b[i] == (want[i] == 0xa5 ? mine[i] : want[i]) || b[i] == want[i],
			 "Sendrecv_replace %s: byte %zu is %#x", names[t], i, b[i]);
	MT_CHECK_STATUS(status, peer, tag, in.ints, MPI_INT);
	free(want);
	free(mine);
	free(b);
}

int main(int argc, char **argv)
{
	/* Ints per message: eager (under 32 KiB), streamed in a few chunks. */
	static const int sizes[] = {1, 37, 500, 20000};
	mt_init(&argc, &argv, "p2p_pieces");
	make_types();
	int tag = 0;
	for (int d = 1; d < mt_size; d++) {
		int peer = mt_rank ^ d;
		for (int st = 0; st < NTYPES; st++)
			for (int k = 0; k < 4; k++) {
				int rt = (st + 1 + 3 * k) % NTYPES;
				exchange(peer, st, rt, sizes[k], tag++, false, true);
				exchange(peer, st, rt, sizes[k], tag++, false, false);
				exchange(peer, st, rt, sizes[k], tag++, true, true);
				exchange(peer, st, rt, sizes[k], tag++, true, false);
			}
		replace(peer, 7, 20000, tag++);
	}
	for (int i = 0; i < NTYPES; i++)
		MT_MPI(MPI_Type_free(&types[i]));
	/* Every piece within PINSHM_MPI_PIECE; and where the plugin carried
	 * the messages, it packed them here. */
	const char *piece = getenv("PINSHM_MPI_PIECE");
	if (piece)
		MT_CHECK(biggest_piece <= atol(piece), "a piece of %ld bytes, past %s", biggest_piece, piece);
	return mt_finish();
}
