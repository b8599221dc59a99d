/*
 * perf_stats.h - statistics and output formats of pinshm-perf.
 *
 * A row is one transport, pattern and message size.  Ping-pong rows carry
 * latency percentiles of the round trip; stream rows carry the mean time
 * per message in median_ns and no percentiles (has_tail == 0).  Create rows
 * (pattern "create") are ping-pong-like: percentiles of one operation's
 * time, msgs_per_s is operations per second and gb_per_s is 0.
 *
 * With rounds (pinshm-perf --rounds R), a row is the reduction of one
 * transport's rows of the R rounds of its pattern and size: every figure
 * the median over the rounds, and the medians of the per-round ratios
 * against the textbook ring and against the round's cache line round trip
 * (perf_rounds_reduce).
 */
#ifndef PERF_STATS_H
#define PERF_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum perf_format {
	PERF_FMT_TABLE,
	PERF_FMT_CSV,
	PERF_FMT_JSON,
} perf_format_t;

/*
 * The rounds of one placement of the two CPUs.  A host may move them close
 * together and far apart between rounds, and every figure moves with the
 * cache line's round trip: with rounds, perf_rounds_reduce() splits a
 * block's rounds where their cache line round trips fall apart, "close"
 * below the split and "far" at or above it, and reduces each part of a
 * row as the whole.
 */
typedef struct perf_placement {
	unsigned block_rounds; /* the block's rounds of this placement; 0: the rounds did not split */
	double cacheline_ns;   /* median of the cache line round trips of those rounds */
	unsigned rounds;       /* those of them where the row's transport ran */
	double vs_textbook;    /* median over those of textbook time / row time; 0: none */
	double vs_cacheline;   /* ping-pong: median over those of row time / cache line round trip; 0: none */
} perf_placement_t;

typedef struct perf_result {
	const char *transport;
	const char *pattern; /* "pingpong", "stream" or "create" */
	uint64_t size;       /* bytes per message; create: the channel's capacity */
	uint64_t iterations; /* measured round trips or messages (warm-up excluded) */
	double median_ns;    /* ping-pong: median round trip; stream: mean per message */
	double p99_ns, p999_ns, max_ns; /* ping-pong only */
	double msgs_per_s;   /* round trips/s or messages/s */
	double gb_per_s;     /* 1e9 bytes/s: 2*size per round trip, size per message */
	int has_tail;        /* p99_ns, p999_ns and max_ns are set */
	unsigned rounds;     /* rounds reduced into this row; 0: a row of its own (memcpy, create) */
	double cacheline_ns; /* median over the rounds of the cache line's round trip; 0: none */
	double vs_textbook;  /* median over the rounds of textbook time / row time; 0: none */
	double vs_cacheline; /* ping-pong: median over the rounds of row time / cache line round trip; 0: none */
	perf_placement_t close, far; /* with rounds that split: each placement's rounds alone */
} perf_result_t;

/* The rounds split where the largest cache line round trip among them is
 * at least this times the smallest (a host's two placements lie several
 * times apart, a drift within one less), at the geometric mean of the two. */
#define PERF_PLACEMENT_SPLIT 2.0

/* At most this many rounds (--rounds). */
#define PERF_MAX_ROUNDS 1000

/** @return the nearest-rank @p p quantile (0 < p <= 1) of @p n sorted samples (n > 0). */
uint64_t perf_percentile(const uint64_t *sorted, size_t n, double p);

/**
 * Fill the figures of ping-pong row @p r from @p n round-trip times in ns
 * (sorted in place).  r->size must be set.  @return 0, or -EINVAL if n == 0.
 */
int perf_stats_pingpong(uint64_t *samples, size_t n, perf_result_t *r);

/**
 * Fill the figures of stream row @p r, whose r->iterations messages of
 * r->size bytes took @p elapsed_ns from first send to last receive.
 * @return 0, or -EINVAL if elapsed_ns or r->iterations is 0.
 */
int perf_stats_stream(uint64_t elapsed_ns, perf_result_t *r);

/**
 * Reduce @p rounds rounds (at most PERF_MAX_ROUNDS) of @p ntr rows of one
 * pattern and size: the row of transport t in round k is
 * grid[k * ntr + t], valid where ok[k * ntr + t].  @p base is the index
 * of the textbook ring among the @p ntr (-1: none); @p cl_ns[k] is the
 * cache line's median round trip in round k (0: not measured).
 *
 * Writes into @p out one row per transport with at least one valid round,
 * in order: every figure (median_ns, p99_ns, p999_ns, max_ns, msgs_per_s,
 * gb_per_s) the median over its valid rounds (of an even count: the mean
 * of the middle two); rounds, the count of those; vs_textbook, the median
 * over the rounds where both ran of base median_ns / row median_ns (> 1:
 * faster than the textbook ring); for ping-pong rows, vs_cacheline, the
 * median over the rounds with a cache line figure of row median_ns /
 * cl_ns[k]; cacheline_ns, the median of the cache line figures.  Where
 * the cache line figures split (PERF_PLACEMENT_SPLIT), close and far hold
 * the same reductions over the rounds below the split and at or above it;
 * else both are zero.
 * @return the number of rows written.
 */
size_t perf_rounds_reduce(const perf_result_t *grid, const unsigned char *ok, size_t rounds, size_t ntr,
			  int base, const double *cl_ns, perf_result_t *out);

/** Parse "table", "csv" or "json". @return 0 or -EINVAL. */
int perf_format_parse(const char *s, perf_format_t *fmt);

/* An output being written: begin, any number of groups, end. */
typedef struct perf_output {
	perf_format_t fmt;
	FILE *f;
	unsigned long rows; /* rows written so far */
	unsigned rounds;    /* --rounds R, or 0 */
} perf_output_t;

/**
 * Start the output.  The table prints @p title (may be NULL) and says what
 * the ratio column is (and what "@pinshmd" means when the title names
 * pinshmd; with @p rounds, what the rounds and the cache line column are);
 * CSV prints its header line; JSON opens the array.
 */
void perf_output_begin(perf_output_t *o, perf_format_t fmt, FILE *f, const char *title, unsigned rounds);

/**
 * Write the rows of one pattern and size.  The table's ratio column is
 * each row's vs_textbook (textbook time / row time, so > 1 is faster), and
 * with rounds a column of vs_cacheline; @p memcpy_row (may be NULL) is a
 * reference line of the table, which CSV and JSON leave out.
 */
void perf_output_group(perf_output_t *o, const perf_result_t *rows, size_t n,
		       const perf_result_t *memcpy_row);

/** Finish the output (JSON closes the array) and flush it. */
void perf_output_end(perf_output_t *o);

#endif /* PERF_STATS_H */
