/*
 * coll_scan.c - MPI_Reduce_scatter_block, MPI_Reduce_scatter, MPI_Scan and
 * MPI_Exscan on world, a reversed split, a dup and sub-communicators of up
 * to 3 ranks, checked against references every rank computes itself:
 * every predefined operation on int, SUM PROD MAX MIN on double, SUM PROD
 * on float complex, MINLOC MAXLOC on MPI_2INT and MPI_DOUBLE_INT, a
 * vector type (2 ints every 3) with a user SUM, a commutative
 * and a non-commutative user operation (affine maps, composed in rank
 * order); counts 0, 1, 7, 1000 (Reduce_scatter: a different one per
 * block) and 1M elements (Scan of ints, SUM, on world); MPI_IN_PLACE on
 * odd tests; on the dup, counts 0 and 7 only.  Any number of ranks; with
 * the argument "short", world only, counts 0 and 7 (for runs with many
 * ranks on few cores).
 */
#include <complex.h>
#include <stdbool.h>

#include "colltest.h"

#define LARGE (1 << 20)

static int rank, size;

/* The value rank @p r contributes at element @p i of test @p t. */
static int ival(int r, int i, int t)
{
	return (int)(((unsigned)r * 7919u + (unsigned)i * 104729u + (unsigned)t * 31u) % 23u) - 11;
}

static MPI_Op aff_op, mab_op, vsum_op;
static MPI_Datatype vec, pair;

/* ---- one reduction, four calls ------------------------------------------- */

/*
 * A reduction of @p type: element i of rank r is elem(r, i) (@p esize
 * bytes at buf + i * @p ext), its reference fold(a, b) = a op b.  Each
 * call is checked at every element of every block.
 */
struct kind {
	const char *name;
	MPI_Datatype type;
	MPI_Op op;
	size_t ext;
	void (*elem)(int r, int i, int t, void *out);
	void (*fold)(const void *a, void *b); /* b = a op b */
	bool (*same)(const void *a, const void *b);
};

/* Reference: x[lo] op (... op x[hi - 1]) at element i. */
static void ref(const struct kind *k, int lo, int hi, int i, int t, void *out)
{
	char x[64];
	k->elem(hi - 1, i, t, out);
	for (int r = hi - 2; r >= lo; r--) {
		k->elem(r, i, t, x);
		k->fold(x, out);
	}
}

static void fill(const struct kind *k, char *buf, int n, int t, int first)
{
	for (int i = 0; i < n; i++)
		k->elem(rank, first + i, t, buf + (size_t)i * k->ext);
}

static void expect(const struct kind *k, const char *what, const char *buf, int n, int lo, int hi, int first, int t)
{
	char w[64];
	for (int i = 0; i < n; i++) {
		ref(k, lo, hi, first + i, t, w);
		MT_CHECK(k->same(buf + (size_t)i * k->ext, w), "%s %s n %d test %d [%d] wrong", what, k->name, n, t, i);
	}
}

static void check_kind(MPI_Comm comm, const struct kind *k, int n, int t)
{
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	bool inplace = t % 2;
	size_t all = (size_t)n * (size_t)size + 1;
	char *in = malloc(all * k->ext), *out = malloc(all * k->ext);
	int *counts = malloc((size_t)size * sizeof(int));
	MT_CHECK(in && out && counts, "out of memory");
	/* Reduce_scatter_block: n elements a block. */
	fill(k, in, n * size, t, 0);
	memset(out, 0x5a, all * k->ext);
	if (inplace)
		memcpy(out, in, (size_t)n * size * k->ext);
	MT_MPI(MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : in, out, n, k->type, k->op, comm));
	expect(k, "reduce_scatter_block", out, n, 0, size, rank * n, t);
	/* Reduce_scatter: block d has (n + d) % 3 * n / 2 elements (some 0). */
	int total = 0, first = 0;
	for (int d = 0; d < size; d++) {
		counts[d] = (n + d) % 3 * n / 2;
		if (d < rank)
			first += counts[d];
		total += counts[d];
	}
	char *rin = malloc(((size_t)total + 1) * k->ext), *rout = malloc(((size_t)total + 1) * k->ext);
	MT_CHECK(rin && rout, "out of memory");
	fill(k, rin, total, t + 1, 0);
	if (inplace)
		memcpy(rout, rin, (size_t)total * k->ext);
	MT_MPI(MPI_Reduce_scatter(inplace ? MPI_IN_PLACE : rin, rout, counts, k->type, k->op, comm));
	expect(k, "reduce_scatter", rout, counts[rank], 0, size, first, t + 1);
	/* Scan, Exscan. */
	fill(k, in, n, t + 2, 0);
	if (inplace)
		memcpy(out, in, (size_t)n * k->ext);
	MT_MPI(MPI_Scan(inplace ? MPI_IN_PLACE : in, out, n, k->type, k->op, comm));
	expect(k, "scan", out, n, 0, rank + 1, 0, t + 2);
	memset(out, 0x5a, all * k->ext);
	if (inplace)
		memcpy(out, in, (size_t)n * k->ext);
	MT_MPI(MPI_Exscan(inplace ? MPI_IN_PLACE : in, out, n, k->type, k->op, comm));
	if (rank > 0)
		expect(k, "exscan", out, n, 0, rank, 0, t + 2);
	for (size_t b = 0; rank == 0 && b < (size_t)n * k->ext; b++) /* rank 0's is left as it was */
		MT_CHECK(out[b] == (inplace ? in[b] : 0x5a), "exscan wrote rank 0's buffer");
	free(rin);
	free(rout);
	free(in);
	free(out);
	free(counts);
}

/* ---- the kinds ----------------------------------------------------------- */

static MPI_Op cur_op;

static void int_elem(int r, int i, int t, void *out) { *(int *)out = ival(r, i, t) % 3; }
static void int_fold(const void *a, void *b) { *(int *)b = iop(cur_op, *(const int *)a, *(int *)b); }
static bool int_same(const void *a, const void *b) { return *(const int *)a == *(const int *)b; }

static void dbl_elem(int r, int i, int t, void *out) { *(double *)out = ival(r, i, t) % 2 + 1.5; }
static void dbl_fold(const void *a, void *b)
{
	double x = *(const double *)a, *y = b;
	*y = cur_op == MPI_SUM ? x + *y : cur_op == MPI_PROD ? x * *y : cur_op == MPI_MAX ? (x > *y ? x : *y)
											   : (x < *y ? x : *y);
}
static bool dbl_same(const void *a, const void *b) { return *(const double *)a == *(const double *)b; }

static void cpx_elem(int r, int i, int t, void *out)
{
	*(float complex *)out = (float)(ival(r, i, t) % 2) + (float)(ival(r, i, t + 1) % 2) * I;
}
static void cpx_fold(const void *a, void *b)
{
	float complex x = *(const float complex *)a, *y = b;
	*y = cur_op == MPI_SUM ? x + *y : x * *y;
}
static bool cpx_same(const void *a, const void *b) { return *(const float complex *)a == *(const float complex *)b; }

/* MPI_2INT and MPI_DOUBLE_INT: (value, rank); ties to the lower index. */
struct dint {
	double v;
	int at;
};
static void pair_elem(int r, int i, int t, void *out)
{
	int *p = out;
	p[0] = ival(r, i, t) % 4;
	p[1] = r;
}
static void loc_fold(int av, int aat, int *bv, int *bat)
{
	bool max = cur_op == MPI_MAXLOC;
	if ((max ? av > *bv : av < *bv) || (av == *bv && aat < *bat)) {
		*bv = av;
		*bat = aat;
	}
}
static void pair_fold(const void *a, void *b)
{
	const int *x = a;
	int *y = b;
	loc_fold(x[0], x[1], &y[0], &y[1]);
}
static bool pair_same(const void *a, const void *b) { return !memcmp(a, b, 2 * sizeof(int)); }
static void dint_elem(int r, int i, int t, void *out)
{
	struct dint *p = out;
	p->v = ival(r, i, t) % 4;
	p->at = r;
}
static void dint_fold(const void *a, void *b)
{
	const struct dint *x = a;
	struct dint *y = b;
	int yv = (int)y->v;
	loc_fold((int)x->v, x->at, &yv, &y->at);
	y->v = yv;
}
static bool dint_same(const void *a, const void *b)
{
	const struct dint *x = a, *y = b;
	return x->v == y->v && x->at == y->at;
}

/* The vector type: 2 ints every 3 (the third left as it is). */
static void vec_elem(int r, int i, int t, void *out)
{
	int *p = out;
	p[0] = ival(r, 2 * i, t);
	p[1] = ival(r, 2 * i + 1, t);
	p[2] = -55;
}
static void vec_fold(const void *a, void *b)
{
	const int *x = a;
	int *y = b;
	y[0] += x[0];
	y[1] += x[1];
}
static bool vec_same(const void *a, const void *b) { return !memcmp(a, b, 2 * sizeof(int)); }

/* Affine maps (a odd, b): composed in rank order. */
static void aff_elem(int r, int i, int t, void *out)
{
	unsigned *p = out;
	p[0] = (unsigned)(2 * r + i + t + 1) | 1u;
	p[1] = (unsigned)(r * 5 + i);
}
static void aff_fold(const void *a, void *b)
{
	int one = 1;
	affine((void *)(uintptr_t)a, b, &one, NULL);
}

/* Every count and type on @p comm, or where @p quick counts 0 and 7; the
 * large block where @p large. */
static void check_comm(MPI_Comm comm, bool quick, bool large)
{
	static const int counts[] = {0, 1, 7, 1000};
	MPI_Op iops[] = {MPI_SUM,  MPI_PROD, MPI_MAX,  MPI_MIN,	 MPI_LAND,
			 MPI_LOR,  MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, mab_op};
	MPI_Op dops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
	MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(comm, &rank);
	for (unsigned c = 0; c < 4; c++) {
		int n = counts[c];
		if (quick && n != 0 && n != 7)
			continue;
		for (unsigned o = 0; o < sizeof(iops) / sizeof(iops[0]); o++) {
			struct kind k = {"int", MPI_INT, iops[o], sizeof(int), int_elem, int_fold, int_same};
			cur_op = iops[o];
			check_kind(comm, &k, n, (int)(c * 16 + o));
		}
		for (unsigned o = 0; o < 4; o++) {
			struct kind k = {"double", MPI_DOUBLE, dops[o], sizeof(double), dbl_elem, dbl_fold, dbl_same};
			cur_op = dops[o];
			check_kind(comm, &k, n, (int)(c * 4 + o));
		}
		for (unsigned o = 0; o < 2; o++) {
			struct kind k = {"float complex", MPI_C_FLOAT_COMPLEX, dops[o], sizeof(float complex), cpx_elem,
					 cpx_fold, cpx_same};
			cur_op = dops[o];
			check_kind(comm, &k, n, (int)(c + o));
			struct kind p = {"2int", MPI_2INT, o ? MPI_MAXLOC : MPI_MINLOC, 2 * sizeof(int), pair_elem,
					 pair_fold, pair_same};
			cur_op = p.op;
			check_kind(comm, &p, n, (int)(c + o));
			struct kind d = {"double_int", MPI_DOUBLE_INT, p.op, sizeof(struct dint), dint_elem, dint_fold,
					 dint_same};
			check_kind(comm, &d, n, (int)(c + o + 1));
		}
		struct kind v = {"vector", vec, vsum_op, 3 * sizeof(int), vec_elem, vec_fold, vec_same};
		check_kind(comm, &v, n, (int)c);
		struct kind a = {"affine", pair, aff_op, 2 * sizeof(unsigned), aff_elem, aff_fold, pair_same};
		check_kind(comm, &a, n, (int)c);
		check_kind(comm, &a, n, (int)c + 1);
	}
	if (!large)
		return;
	/* 1M ints, SUM. */
	int *in = malloc(LARGE * sizeof(int)), *out = malloc(LARGE * sizeof(int));
	MT_CHECK(in && out, "out of memory");
	for (int i = 0; i < LARGE; i++)
		in[i] = ival(rank, i, 5);
	MT_MPI(MPI_Scan(in, out, LARGE, MPI_INT, MPI_SUM, comm));
	for (int i = 0; i < LARGE; i++) {
		int w = 0;
		for (int r = 0; r <= rank; r++)
			w += ival(r, i, 5);
		MT_CHECK(out[i] == w, "large scan [%d] = %d want %d", i, out[i], w);
	}
	free(in);
	free(out);
}

int main(int argc, char **argv)
{
	bool quick = mt_coll_init(&argc, &argv, "coll_scan");
	vec = mt_vec3();
	MT_MPI(MPI_Type_contiguous(2, MPI_UNSIGNED, &pair));
	MT_MPI(MPI_Type_commit(&pair));
	MT_MPI(MPI_Op_create(affine, 0, &aff_op));
	MT_MPI(MPI_Op_create(maxabs, 1, &mab_op));
	MT_MPI(MPI_Op_create(vecsum, 1, &vsum_op));

	mt_coll_comms(check_comm, quick);
	MPI_Op_free(&aff_op);
	MPI_Op_free(&mab_op);
	MPI_Op_free(&vsum_op);
	MPI_Type_free(&vec);
	MPI_Type_free(&pair);
	MPI_Barrier(MPI_COMM_WORLD);
	if (mt_rank == 0)
		printf("coll_scan: ok\n");
	MPI_Finalize();
	return 0;
}
