/*
 * mpitest.h - helpers shared by the MPI test programs of tests/mpi.
 *
 * Each program is a plain C MPI program: it checks its data, statuses and
 * counts, and on the first failure prints "PROGRAM: rank R: FILE:LINE: why"
 * on stderr and calls MPI_Abort, so that mpirun exits non-zero.  It prints
 * "PROGRAM: ok" from rank 0 when everything passed.  The programs run with
 * any power-of-two number of ranks (2 and 4 in check_mpi); most of them test
 * each pair of ranks in turn (peer = rank ^ d for d = 1 .. size - 1), so that
 * every family of calls crosses both paths when the plugin splits the ranks
 * into pretend nodes (PINSHM_MPI_NODES).
 */
#ifndef PINSHM_MPITEST_H
#define PINSHM_MPITEST_H

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mt_rank = -1, mt_size;
static const char *mt_name = "mpitest";

static inline void mt_fail_at(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), noreturn));

static inline void mt_fail_at(const char *file, int line, const char *fmt, ...)
{
	char why[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: rank %d: %s:%d: FAILED: %s\n", mt_name, mt_rank, file, line, why);
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
	abort();
}

/** Fail (abort every rank) with a message. */
#define MT_FAIL(...) mt_fail_at(__FILE__, __LINE__, __VA_ARGS__)

/** Fail unless @p cond holds. */
#define MT_CHECK(cond, ...)                   \
	do {                                  \
		if (!(cond))                  \
			MT_FAIL(__VA_ARGS__); \
	} while (0)

/** Fail unless the MPI call returns MPI_SUCCESS (for calls under MPI_ERRORS_RETURN). */
#define MT_MPI(call)                                                                            \
	do {                                                                                    \
		int mt_rc_ = (call);                                                            \
		if (mt_rc_ != MPI_SUCCESS) {                                                    \
			char mt_es_[MPI_MAX_ERROR_STRING];                                      \
			int mt_el_ = 0;                                                         \
			MPI_Error_string(mt_rc_, mt_es_, &mt_el_);                              \
			MT_FAIL("%s returned %d (%s)", #call, mt_rc_, mt_es_);                  \
		}                                                                               \
	} while (0)

/**
 * MPI_Init (@p level < 0) or MPI_Init_thread(@p level), rank and size (a
 * power of two, at least 2); errors return on COMM_WORLD.
 */
static inline void mt_init_level(int *argc, char ***argv, const char *name, int level)
{
	int provided = MPI_THREAD_SINGLE;

	mt_name = name;
	if (level < 0)
		MPI_Init(argc, argv);
	else
		MPI_Init_thread(argc, argv, level, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &mt_size);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MT_CHECK(mt_size >= 2 && (mt_size & (mt_size - 1)) == 0, "needs 2, 4, 8... ranks, not %d", mt_size);
	if (level >= 0) {
		int query = -1;
		MT_MPI(MPI_Query_thread(&query));
		MT_CHECK(provided >= MPI_THREAD_SINGLE && provided <= MPI_THREAD_MULTIPLE && query == provided,
			 "Init_thread(%d): provided %d, Query_thread %d", level, provided, query);
	}
}

/** MPI_Init, rank and size; see mt_init_level(). */
static inline void mt_init(int *argc, char ***argv, const char *name)
{
	mt_init_level(argc, argv, name, -1);
}

/** A ring of point-to-point messages over world (across pretend nodes
 *  too): each rank sends its number on and checks its neighbour's. */
static inline void mt_check_ring(void)
{
	int token = mt_rank, back = -1;

	MT_MPI(MPI_Sendrecv(&token, 1, MPI_INT, (mt_rank + 1) % mt_size, 5, &back, 1, MPI_INT,
			    (mt_rank + mt_size - 1) % mt_size, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
	MT_CHECK(back == (mt_rank + mt_size - 1) % mt_size, "ring: %d", back);
}

/** Barrier, "NAME: ok" from rank 0, MPI_Finalize; @return 0 for main. */
static inline int mt_finish(void)
{
	MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	if (mt_rank == 0)
		printf("%s: ok (%d ranks)\n", mt_name, mt_size);
	fflush(stdout);
	MPI_Finalize();
	return 0;
}

/** The 8 bytes of the pattern of @p seed that start at index 8 * @p word. */
static inline uint64_t mt_word(uint64_t seed, uint64_t word)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + word + 1;

	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/** Byte @p i of the pattern of @p seed. */
static inline unsigned char mt_byte(uint64_t seed, size_t i)
{
	return (unsigned char)(mt_word(seed, i / 8) >> (8 * (i % 8)));
}

/** Bytes @p from .. @p from + @p len of the pattern of @p seed into @p buf (@p from: a multiple of 8). */
static inline void mt_fill_from(unsigned char *buf, size_t len, uint64_t seed, size_t from)
{
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w = mt_word(seed, (from + i) / 8);
		for (int k = 0; k < 8; k++)
			buf[i + k] = (unsigned char)(w >> (8 * k));
	}
	for (; i < len; i++)
		buf[i] = mt_byte(seed, from + i);
}

/** Fill @p len bytes with the pattern of @p seed. */
static inline void mt_fill(void *buf, size_t len, uint64_t seed)
{
	mt_fill_from(buf, len, seed, 0);
}

/** @return -1 if @p buf holds the pattern of @p seed, else the first bad index. */
static inline long mt_bad(const void *buf, size_t len, uint64_t seed)
{
	const unsigned char *p = buf;
	unsigned char block[4096];

	for (size_t at = 0; at < len; at += sizeof(block)) {
		size_t n = len - at < sizeof(block) ? len - at : sizeof(block);
		mt_fill_from(block, n, seed, at);
		if (memcmp(p + at, block, n) != 0)
			for (size_t i = 0; i < n; i++)
				if (p[at + i] != block[i])
					return (long)(at + i);
	}
	return -1;
}

/** Fail unless @p buf holds @p len bytes of the pattern of @p seed. */
#define MT_CHECK_FILL(buf, len, seed)                                                                    \
	do {                                                                                             \
		const unsigned char *mt_p_ = (const unsigned char *)(buf);                               \
		size_t mt_n_ = (len);                                                                    \
		uint64_t mt_s_ = (seed);                                                                 \
		long mt_i_ = mt_bad(mt_p_, mt_n_, mt_s_);                                                \
		if (mt_i_ >= 0)                                                                          \
			MT_FAIL("%s: byte %ld of %zu is %#x, want %#x (seed %llu)", #buf, mt_i_, mt_n_,  \
				mt_p_[mt_i_], mt_byte(mt_s_, mt_i_), (unsigned long long)mt_s_);         \
	} while (0)

/** A seed naming a message: (sender, receiver, what), the same on both sides. */
static inline uint64_t mt_seed(int from, int to, int what)
{
	return ((uint64_t)(unsigned)from << 40) ^ ((uint64_t)(unsigned)to << 20) ^ (uint64_t)(unsigned)what;
}

/*
 * A sweep of sizes with every peer, round d of the mt_size - 1 rounds
 * (peer mt_rank ^ d, so both ends of a pair agree).  Up to 4 ranks every
 * round sweeps every size; above, the rounds share the sweep: round d
 * takes every (mt_size - 1)th size from d - 1, so that each rank still
 * sends and receives every size once, and 32 ranks do not sweep 31 times.
 */
static inline int mt_sweep_first(int d)
{
	return mt_size > 4 ? d - 1 : 0;
}

static inline int mt_sweep_step(void)
{
	return mt_size > 4 ? mt_size - 1 : 1;
}

/** Fail unless @p st names @p source and @p tag and holds @p count of @p type. */
#define MT_CHECK_STATUS(st, source, tag, count, type)                                             \
	do {                                                                                      \
		int mt_c_ = -2;                                                                   \
		MT_MPI(MPI_Get_count(&(st), (type), &mt_c_));                                     \
		MT_CHECK((st).MPI_SOURCE == (source) && (st).MPI_TAG == (tag) && mt_c_ == (count), \
			 "status: source %d tag %d count %d, want source %d tag %d count %d",     \
			 (st).MPI_SOURCE, (st).MPI_TAG, mt_c_, (int)(source), (int)(tag),        \
			 (int)(count));                                                           \
	} while (0)

/** The number @p arg, else $@p env, else @p fallback (a program's seed, its
 *  rounds); fail where it is not a number. */
static inline unsigned long long mt_number_from(const char *arg, const char *env, unsigned long long fallback)
{
	const char *s = arg ? arg : getenv(env);
	char *end;

	if (!s || !*s)
		return fallback;
	unsigned long long v = strtoull(s, &end, 0);
	MT_CHECK(*end == 0, "%s: not a number: %s", env, s);
	return v;
}

/** malloc or fail. */
static inline void *mt_alloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		MT_FAIL("malloc(%zu) failed", n);
	return p;
}

/*
 * Counting allocations (a program that defines MT_COUNT_ALLOCATIONS before
 * including this): while mt_counting is set, in this thread, the calls of
 * malloc, calloc and realloc, into mt_allocations; the program's own
 * definitions take them from every library, the preloaded plugin
 * included.  MT_COUNTS_ALLOCATIONS is 0 in an ASan build, whose allocator
 * they would bypass.
 */
#ifdef MT_COUNT_ALLOCATIONS
#if defined(__SANITIZE_ADDRESS__)
#define MT_COUNTS_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MT_COUNTS_ALLOCATIONS 0
#endif
#endif
#ifndef MT_COUNTS_ALLOCATIONS
#define MT_COUNTS_ALLOCATIONS 1
#endif

static __thread int mt_counting;
static __thread long mt_allocations;

#if MT_COUNTS_ALLOCATIONS
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);

void *malloc(size_t n)
{
	mt_allocations += mt_counting;
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
	mt_allocations += mt_counting;
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
	mt_allocations += mt_counting;
	return __libc_realloc(p, n);
}
#endif
#endif

#endif
