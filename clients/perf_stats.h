/*
 * perf_stats.h - statistics and output formats of pinshm-perf.
 *
 * A row is one transport, pattern and message size.  Ping-pong rows carry
 * latency percentiles of the round trip; stream rows carry the mean time
 * per message in median_ns and no percentiles (has_tail == 0).  Create rows
 * (pattern "create") are ping-pong-like: percentiles of one operation's
 * time, msgs_per_s is operations per second and gb_per_s is 0.
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
} perf_result_t;

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

/** Parse "table", "csv" or "json". @return 0 or -EINVAL. */
int perf_format_parse(const char *s, perf_format_t *fmt);

/* An output being written: begin, any number of groups, end. */
typedef struct perf_output {
	perf_format_t fmt;
	FILE *f;
	unsigned long rows; /* rows written so far */
} perf_output_t;

/**
 * Start the output.  The table prints @p title (may be NULL) and says what
 * the ratio column is (and what "@pinshmd" means when the title names pinshmd); CSV prints its header line; JSON opens the array.
 */
void perf_output_begin(perf_output_t *o, perf_format_t fmt, FILE *f, const char *title);

/**
 * Write the rows of one pattern and size.  The table adds the ratio to the
 * row named "textbook" among them (baseline time / row time, so > 1 is
 * faster), and @p memcpy_row (may be NULL) as a reference line; CSV and
 * JSON ignore it.
 */
void perf_output_group(perf_output_t *o, const perf_result_t *rows, size_t n,
		       const perf_result_t *memcpy_row);

/** Finish the output (JSON closes the array) and flush it. */
void perf_output_end(perf_output_t *o);

#endif /* PERF_STATS_H */
