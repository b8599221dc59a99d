/*
 * p2p_datatypes.c - derived datatypes on both sides: vector, indexed,
 * struct, resized (interleaved columns), a large strided vector (1.5 MiB),
 * MPI_BOTTOM with absolute addresses, MPI_PACKED (Pack/Unpack on either
 * side), Get_count/Get_elements of a partial derived receive, and
 * Sendrecv_replace and Isend/Irecv with derived types.
 *
 * Call families: blocking, nonblocking.
 */
#include <errno.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mpitest.h"

struct rec {
	int id;
	double val[2];
	char tag;
};

static void vector_indexed(int peer)
{
	int m[10][5], flat[60], back[10][5];
	MPI_Datatype vec, idx;
	MPI_Status st;

	for (int i = 0; i < 10; i++)
		for (int j = 0; j < 5; j++)
			m[i][j] = mt_rank * 100000 + i * 10 + j;
	/* Columns 0-1 of the 10 rows: 10 blocks of 2, stride 5. */
	MT_MPI(MPI_Type_vector(10, 2, 5, MPI_INT, &vec));
	MT_MPI(MPI_Type_commit(&vec));
	MT_MPI(MPI_Sendrecv(m, 1, vec, peer, 1, flat, 60, MPI_INT, peer, 1, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 1, 20, MPI_INT);
	for (int i = 0; i < 10; i++)
		for (int j = 0; j < 2; j++)
			MT_CHECK(flat[i * 2 + j] == peer * 100000 + i * 10 + j, "vector: flat[%d] = %d", i * 2 + j,
				 flat[i * 2 + j]);
	/* Contiguous out, vector in: the columns land where they were. */
	memset(back, 0xff, sizeof(back));
	MT_MPI(MPI_Sendrecv(flat, 20, MPI_INT, peer, 2, back, 1, vec, peer, 2, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 2, 1, vec);
	for (int i = 0; i < 10; i++) {
		MT_CHECK(back[i][0] == mt_rank * 100000 + i * 10 && back[i][1] == mt_rank * 100000 + i * 10 + 1,
			 "vector receive: row %d: %d %d", i, back[i][0], back[i][1]);
		MT_CHECK(back[i][2] == -1 && back[i][4] == -1, "vector receive wrote into the gaps of row %d", i);
	}

	int lens[3] = {1, 3, 2}, disp[3] = {0, 5, 12};
	int src[20], dst[6];
	for (int i = 0; i < 20; i++)
		src[i] = mt_rank * 1000 + i;
	MT_MPI(MPI_Type_indexed(3, lens, disp, MPI_INT, &idx));
	MT_MPI(MPI_Type_commit(&idx));
	MT_MPI(MPI_Sendrecv(src, 1, idx, peer, 3, dst, 6, MPI_INT, peer, 3, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 3, 6, MPI_INT);
	static const int want[6] = {0, 5, 6, 7, 12, 13};
	for (int i = 0; i < 6; i++)
		MT_CHECK(dst[i] == peer * 1000 + want[i], "indexed: dst[%d] = %d", i, dst[i]);

	/* A message of 7 ints into a type of 3 ints: Get_count undefined, 7 elements. */
	MPI_Datatype three;
	int seven[7] = {1, 2, 3, 4, 5, 6, 7}, into[9];
	MT_MPI(MPI_Type_contiguous(3, MPI_INT, &three));
	MT_MPI(MPI_Type_commit(&three));
	MT_MPI(MPI_Sendrecv(seven, 7, MPI_INT, peer, 4, into, 3, three, peer, 4, MPI_COMM_WORLD, &st));
	int cnt = 0, el = 0;
	MT_MPI(MPI_Get_count(&st, three, &cnt));
	MT_MPI(MPI_Get_elements(&st, three, &el));
	MT_CHECK(cnt == MPI_UNDEFINED && el == 7, "partial: Get_count %d (want MPI_UNDEFINED), Get_elements %d", cnt,
		 el);
	MT_CHECK(into[6] == 7, "partial: into[6] = %d", into[6]);

	/* The same 7 ints into 4 elements of a type with gaps (ints 0 and 2 of
	 * 3): the message fills 3 whole elements and half of the 4th (int 9 of
	 * its 9 and 11).  Only the message's locations may be touched: the
	 * buffer ends after int 9, at a page that may not be read or written,
	 * and its gaps keep what they held. */
	MPI_Datatype gappy;
	long page = sysconf(_SC_PAGESIZE);
	char *pages = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	MT_CHECK(pages != MAP_FAILED && mprotect(pages + page, (size_t)page, PROT_NONE) == 0, "guard page: %s",
		 strerror(errno));
	int *spread = (int *)(void *)(pages + page) - 10;
	for (int i = 0; i < 10; i++)
		spread[i] = -1;
	MT_MPI(MPI_Type_vector(2, 1, 2, MPI_INT, &gappy));
	MT_MPI(MPI_Type_commit(&gappy));
	MT_MPI(MPI_Sendrecv(seven, 7, MPI_INT, peer, 14, spread, 4, gappy, peer, 14, MPI_COMM_WORLD, &st));
	MT_MPI(MPI_Get_count(&st, gappy, &cnt));
	MT_MPI(MPI_Get_elements(&st, gappy, &el));
	MT_CHECK(cnt == MPI_UNDEFINED && el == 7, "partial, gaps: Get_count %d (want MPI_UNDEFINED), Get_elements %d",
		 cnt, el);
	static const int spread_want[10] = {1, -1, 2, 3, -1, 4, 5, -1, 6, 7};
	for (int i = 0; i < 10; i++)
		MT_CHECK(spread[i] == spread_want[i], "partial, gaps: spread[%d] = %d, want %d", i, spread[i],
			 spread_want[i]);
	munmap(pages, 2 * (size_t)page);
	MT_MPI(MPI_Type_free(&gappy));

	/* Sendrecv_replace with the vector: only the columns are exchanged. */
	for (int i = 0; i < 10; i++)
		for (int j = 0; j < 5; j++)
			m[i][j] = mt_rank * 100000 + i * 10 + j;
	MT_MPI(MPI_Sendrecv_replace(m, 1, vec, peer, 5, peer, 5, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 5, 1, vec);
	for (int i = 0; i < 10; i++)
		for (int j = 0; j < 5; j++)
			MT_CHECK(m[i][j] == (j < 2 ? peer : mt_rank) * 100000 + i * 10 + j,
				 "Sendrecv_replace vector: m[%d][%d] = %d", i, j, m[i][j]);
	MT_MPI(MPI_Type_free(&vec));
	MT_MPI(MPI_Type_free(&idx));
	MT_MPI(MPI_Type_free(&three));
}

static void structs(int peer)
{
	struct rec out[5], in[5];
	int bl[3] = {1, 2, 1};
	MPI_Aint disp[3] = {offsetof(struct rec, id), offsetof(struct rec, val), offsetof(struct rec, tag)};
	MPI_Datatype types[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR}, st0, rec;

	MT_MPI(MPI_Type_create_struct(3, bl, disp, types, &st0));
	MT_MPI(MPI_Type_create_resized(st0, 0, sizeof(struct rec), &rec));
	MT_MPI(MPI_Type_commit(&rec));
	memset(out, 0, sizeof(out));
	memset(in, 0, sizeof(in));
	for (int i = 0; i < 5; i++) {
		out[i].id = mt_rank * 10 + i;
		out[i].val[0] = i + 0.25;
		out[i].val[1] = -i - 0.5;
		out[i].tag = (char)('a' + i);
	}
	MPI_Request rq[2];
	MT_MPI(MPI_Irecv(in, 5, rec, peer, 6, MPI_COMM_WORLD, &rq[0]));
	MT_MPI(MPI_Isend(out, 5, rec, peer, 6, MPI_COMM_WORLD, &rq[1]));
	MT_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
	for (int i = 0; i < 5; i++)
		MT_CHECK(in[i].id == peer * 10 + i && in[i].val[0] == i + 0.25 && in[i].val[1] == -i - 0.5 &&
				 in[i].tag == 'a' + i,
			 "struct %d: %d %g %g %c", i, in[i].id, in[i].val[0], in[i].val[1], in[i].tag);

	MPI_Status s2;
	MT_MPI(MPI_Sendrecv(out, 2, rec, peer, 7, in, 5, rec, peer, 7, MPI_COMM_WORLD, &s2));
	int cnt = 0, el = 0;
	MT_MPI(MPI_Get_count(&s2, rec, &cnt));
	MT_MPI(MPI_Get_elements(&s2, rec, &el));
	MT_CHECK(cnt == 2 && el == 8, "struct: Get_count %d (want 2), Get_elements %d (want 8)", cnt, el);
	MT_CHECK_STATUS(s2, peer, 7, 2, rec);
	MT_MPI(MPI_Type_free(&st0));
	MT_MPI(MPI_Type_free(&rec));
}

/* A column of a 4 x N matrix, resized to one int: count k takes k columns. */
static void resized(int peer)
{
	enum { R = 4, C = 6 };
	int a[R][C], b[R][C];
	MPI_Datatype col, col1;
	MPI_Status st;

	MT_MPI(MPI_Type_vector(R, 1, C, MPI_INT, &col));
	MT_MPI(MPI_Type_create_resized(col, 0, sizeof(int), &col1));
	MT_MPI(MPI_Type_commit(&col1));
	MPI_Aint lb, ext;
	MT_MPI(MPI_Type_get_extent(col1, &lb, &ext));
	MT_CHECK(lb == 0 && ext == sizeof(int), "resized extent %ld", (long)ext);
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++) {
			a[i][j] = mt_rank * 1000 + i * 10 + j;
			b[i][j] = -1;
		}
	/* Columns 1..3 out; columns 2..4 in. */
	MT_MPI(MPI_Sendrecv(&a[0][1], 3, col1, peer, 8, &b[0][2], 3, col1, peer, 8, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 8, 3, col1);
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++) {
			int w = j >= 2 && j <= 4 ? peer * 1000 + i * 10 + (j - 1) : -1;
			MT_CHECK(b[i][j] == w, "resized: b[%d][%d] = %d, want %d", i, j, b[i][j], w);
		}
	MT_MPI(MPI_Type_free(&col));
	MT_MPI(MPI_Type_free(&col1));
}

/* 3 doubles of every 4, 1.5 MiB of payload. */
static void big_vector(int peer)
{
	enum { N = 65536 };
	double *a = mt_alloc(sizeof(double) * 4 * N), *b = mt_alloc(sizeof(double) * 4 * N);
	MPI_Datatype v;
	MPI_Request rq[2];
	MPI_Status st[2];

	for (int i = 0; i < 4 * N; i++) {
		a[i] = mt_rank * 1e7 + i;
		b[i] = -1;
	}
	MT_MPI(MPI_Type_vector(N, 3, 4, MPI_DOUBLE, &v));
	MT_MPI(MPI_Type_commit(&v));
	MT_MPI(MPI_Irecv(b, 1, v, peer, 9, MPI_COMM_WORLD, &rq[0]));
	MT_MPI(MPI_Isend(a, 1, v, peer, 9, MPI_COMM_WORLD, &rq[1]));
	MT_MPI(MPI_Waitall(2, rq, st));
	MT_CHECK_STATUS(st[0], peer, 9, 1, v);
	for (int i = 0; i < 4 * N; i++)
		MT_CHECK(b[i] == (i % 4 == 3 ? -1 : peer * 1e7 + i), "big vector: b[%d] = %g", i, b[i]);
	MT_MPI(MPI_Type_free(&v));
	free(a);
	free(b);
}

/* A struct of absolute addresses, sent from and received at MPI_BOTTOM. */
static void bottom(int peer)
{
	int x = mt_rank * 3, y[3] = {mt_rank, mt_rank + 1, mt_rank + 2};
	double z = mt_rank + 0.125;
	int rx = -1, ry[3] = {-1, -1, -1};
	double rz = -1;
	int bl[3] = {1, 3, 1};
	MPI_Aint so[3], ro[3];
	MPI_Datatype types[3] = {MPI_INT, MPI_INT, MPI_DOUBLE}, stype, rtype;
	MPI_Status st;

	MT_MPI(MPI_Get_address(&x, &so[0]));
	MT_MPI(MPI_Get_address(y, &so[1]));
	MT_MPI(MPI_Get_address(&z, &so[2]));
	MT_MPI(MPI_Get_address(&rx, &ro[0]));
	MT_MPI(MPI_Get_address(ry, &ro[1]));
	MT_MPI(MPI_Get_address(&rz, &ro[2]));
	MT_MPI(MPI_Type_create_struct(3, bl, so, types, &stype));
	MT_MPI(MPI_Type_create_struct(3, bl, ro, types, &rtype));
	MT_MPI(MPI_Type_commit(&stype));
	MT_MPI(MPI_Type_commit(&rtype));
	MT_MPI(MPI_Sendrecv(MPI_BOTTOM, 1, stype, peer, 10, MPI_BOTTOM, 1, rtype, peer, 10, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 10, 1, rtype);
	MT_CHECK(rx == peer * 3 && ry[0] == peer && ry[2] == peer + 2 && rz == peer + 0.125,
		 "MPI_BOTTOM: %d %d %d %g", rx, ry[0], ry[2], rz);
	/* MPI_BOTTOM out, contiguous ints in: 4 ints then the double's bytes. */
	unsigned char raw[64];
	MT_MPI(MPI_Sendrecv(MPI_BOTTOM, 1, stype, peer, 11, raw, sizeof(raw), MPI_BYTE, peer, 11, MPI_COMM_WORLD, &st));
	MT_CHECK_STATUS(st, peer, 11, 4 * (int)sizeof(int) + (int)sizeof(double), MPI_BYTE);
	int first;
	double last;
	memcpy(&first, raw, sizeof(int));
	memcpy(&last, raw + 4 * sizeof(int), sizeof(double));
	MT_CHECK(first == peer * 3 && last == peer + 0.125, "MPI_BOTTOM to bytes: %d %g", first, last);
	MT_MPI(MPI_Type_free(&stype));
	MT_MPI(MPI_Type_free(&rtype));
}

static void packed(int peer)
{
	char buf[256], rbuf[256];
	int pos = 0, n = mt_rank + 40, vals[4] = {mt_rank, 9, 8, 7};
	double d = mt_rank * 0.5;
	MPI_Status st;

	MT_MPI(MPI_Pack(&n, 1, MPI_INT, buf, sizeof(buf), &pos, MPI_COMM_WORLD));
	MT_MPI(MPI_Pack(vals, 4, MPI_INT, buf, sizeof(buf), &pos, MPI_COMM_WORLD));
	MT_MPI(MPI_Pack(&d, 1, MPI_DOUBLE, buf, sizeof(buf), &pos, MPI_COMM_WORLD));
	MT_MPI(MPI_Sendrecv(buf, pos, MPI_PACKED, peer, 12, rbuf, sizeof(rbuf), MPI_PACKED, peer, 12, MPI_COMM_WORLD,
			    &st));
	int got = -1;
	MT_MPI(MPI_Get_count(&st, MPI_PACKED, &got));
	MT_CHECK(got == pos, "MPI_PACKED: %d bytes, want %d", got, pos);
	int rn, rv[4], rpos = 0;
	double rd;
	MT_MPI(MPI_Unpack(rbuf, got, &rpos, &rn, 1, MPI_INT, MPI_COMM_WORLD));
	MT_MPI(MPI_Unpack(rbuf, got, &rpos, rv, 4, MPI_INT, MPI_COMM_WORLD));
	MT_MPI(MPI_Unpack(rbuf, got, &rpos, &rd, 1, MPI_DOUBLE, MPI_COMM_WORLD));
	MT_CHECK(rn == peer + 40 && rv[0] == peer && rv[3] == 7 && rd == peer * 0.5, "Unpack: %d %d %d %g", rn,
		 rv[0], rv[3], rd);
	/* Typed out, MPI_PACKED in, then unpacked as the sender's type. */
	MT_MPI(MPI_Sendrecv(vals, 4, MPI_INT, peer, 13, rbuf, sizeof(rbuf), MPI_PACKED, peer, 13, MPI_COMM_WORLD, &st));
	MT_MPI(MPI_Get_count(&st, MPI_PACKED, &got));
	rpos = 0;
	MT_MPI(MPI_Unpack(rbuf, got, &rpos, rv, 4, MPI_INT, MPI_COMM_WORLD));
	MT_CHECK(rv[0] == peer && rv[1] == 9 && rv[3] == 7, "typed to MPI_PACKED: %d %d", rv[0], rv[1]);
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_datatypes");
	for (int d = 1; d < mt_size; d++) {
		int peer = mt_rank ^ d;
		vector_indexed(peer);
		structs(peer);
		resized(peer);
		big_vector(peer);
		bottom(peer);
		packed(peer);
	}
	return mt_finish();
}
