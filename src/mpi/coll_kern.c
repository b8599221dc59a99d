/*
 * coll_kern.c - the reductions' own kernels for the common predefined
 * operations on the common predefined types, where calling
 * PMPI_Reduce_local for a few elements costs more than the operation.
 *
 * A kernel computes out[i] = in[i] op inout[i] as MPI_Reduce_local does
 * (out = inout), or into a third buffer (a fold's first operation, without
 * a copy of its first operand),
 * with the operands in the order of Open MPI's own C kernels (inout op in)
 * where the order can show: integers give the same bits in either order
 * (sums and products wrap, as the library's do in practice); floating
 * point is taken for MPI_SUM and MPI_PROD only, where IEEE arithmetic is
 * commutative (a NaN's payload aside).  Every other pair goes to
 * PMPI_Reduce_local.  Every rank folds with the same kernel in the same
 * order, so the ranks' results stay bit-for-bit equal.
 */
#include <stdint.h>
#include <string.h>

/* The loops vectorized (GCC does not at -O2; clang does). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

#include "coll_red.h"

/* Elements are loaded and stored by memcpy: a user's buffer need not be
 * aligned, and whether a kernel is used depends on the signature alone. */
#define KERN(name, T, expr)                                                  \
	static void name(const void *in_, const void *inout_, void *out_, int k) \
	{                                                                    \
		const char *in = in_, *io = inout_;                          \
		char *out = out_;                                            \
		for (size_t i = 0; i < (size_t)k * sizeof(T); i += sizeof(T)) { \
			T a, b, c;                                           \
			memcpy(&a, io + i, sizeof(T));                       \
			memcpy(&b, in + i, sizeof(T));                       \
			c = (expr);                                          \
			memcpy(out + i, &c, sizeof(T));                      \
		}                                                            \
	}

/* Integers of width W, signed S and unsigned U: every operation. */
#define INT_KERNS(W, S, U)                                                   \
	KERN(sum_##W, U, (U)(a + b))                                         \
	KERN(prod_##W, U, (U)(a * b))                                        \
	KERN(band_##W, U, a & b)                                             \
	KERN(bor_##W, U, a | b)                                              \
	KERN(bxor_##W, U, a ^ b)                                             \
	KERN(land_##W, U, (U)(a && b))                                       \
	KERN(lor_##W, U, (U)(a || b))                                        \
	KERN(lxor_##W, U, (U)(!a != !b))                                     \
	KERN(smax_##W, S, a > b ? a : b)                                     \
	KERN(smin_##W, S, a < b ? a : b)                                     \
	KERN(umax_##W, U, a > b ? a : b)                                     \
	KERN(umin_##W, U, a < b ? a : b)

INT_KERNS(32, int32_t, uint32_t)
INT_KERNS(64, int64_t, uint64_t)
KERN(sum_f, float, a + b)
KERN(prod_f, float, a * b)
KERN(sum_d, double, a + b)
KERN(prod_d, double, a * b)

/* Which kernel family a type belongs to: 's'/'u' integers of 4 or 8
 * bytes, 'f' float, 'd' double, or 0. */
static char type_class(MPI_Datatype t, int *width)
{
	*width = 0;
	if (t == MPI_INT || t == MPI_INT32_T)
		*width = 4;
	else if (t == MPI_UNSIGNED || t == MPI_UINT32_T)
		return *width = 4, 'u';
	else if (t == MPI_LONG || t == MPI_LONG_LONG || t == MPI_INT64_T)
		*width = (int)sizeof(long) == 8 || t != MPI_LONG ? 8 : 4;
	else if (t == MPI_UNSIGNED_LONG || t == MPI_UNSIGNED_LONG_LONG || t == MPI_UINT64_T)
		return *width = (int)sizeof(long) == 8 || t != MPI_UNSIGNED_LONG ? 8 : 4, 'u';
	else if (t == MPI_DOUBLE)
		return 'd';
	else if (t == MPI_FLOAT)
		return 'f';
	return *width ? 's' : 0;
}

red_kernel_fn red_kernel(MPI_Datatype type, MPI_Op op)
{
	int w;
	char c = type_class(type, &w);
	if (c == 'd' || c == 'f') {
		if (op == MPI_SUM)
			return c == 'd' ? sum_d : sum_f;
		if (op == MPI_PROD)
			return c == 'd' ? prod_d : prod_f;
		return NULL;
	}
	if (!c)
		return NULL;
	bool s = c == 's', wide = w == 8;
	if (op == MPI_SUM)
		return wide ? sum_64 : sum_32;
	if (op == MPI_MAX)
		return wide ? (s ? smax_64 : umax_64) : (s ? smax_32 : umax_32);
	if (op == MPI_MIN)
		return wide ? (s ? smin_64 : umin_64) : (s ? smin_32 : umin_32);
	if (op == MPI_PROD)
		return wide ? prod_64 : prod_32;
	if (op == MPI_BAND)
		return wide ? band_64 : band_32;
	if (op == MPI_BOR)
		return wide ? bor_64 : bor_32;
	if (op == MPI_BXOR)
		return wide ? bxor_64 : bxor_32;
	if (op == MPI_LAND)
		return wide ? land_64 : land_32;
	if (op == MPI_LOR)
		return wide ? lor_64 : lor_32;
	if (op == MPI_LXOR)
		return wide ? lxor_64 : lxor_32;
	return NULL;
}
