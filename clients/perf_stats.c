/*
 * perf_stats.c - percentiles and the table, CSV and JSON outputs of pinshm-perf.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "perf_stats.h"

#define BASELINE "textbook"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t perf_percentile(const uint64_t *sorted, size_t n, double p)
{
	/* Nearest rank: the smallest sample with at least p*n samples <= it. */
	double rank = ceil(p * (double)n);
	size_t i = rank < 1.0 ? 0 : (size_t)rank - 1;

	return sorted[i < n ? i : n - 1];
}

int perf_stats_pingpong(uint64_t *samples, size_t n, perf_result_t *r)
{
	double total = 0;

	if (n == 0)
		return -EINVAL;
	qsort(samples, n, sizeof(*samples), cmp_u64);
	for (size_t i = 0; i < n; i++)
		total += (double)samples[i];
	r->iterations = n;
	r->median_ns = (double)perf_percentile(samples, n, 0.5);
	r->p99_ns = (double)perf_percentile(samples, n, 0.99);
	r->p999_ns = (double)perf_percentile(samples, n, 0.999);
	r->max_ns = (double)samples[n - 1];
	r->has_tail = 1;
	if (total <= 0)
		total = 1; /* a clock coarser than the loop: avoid dividing by 0 */
	r->msgs_per_s = (double)n * 1e9 / total;
	/* Bytes per ns is 1e9 bytes per second. */
	r->gb_per_s = 2.0 * (double)r->size * (double)n / total;
	return 0;
}

int perf_stats_stream(uint64_t elapsed_ns, perf_result_t *r)
{
	if (elapsed_ns == 0 || r->iterations == 0)
		return -EINVAL;
	r->median_ns = (double)elapsed_ns / (double)r->iterations;
	r->p99_ns = r->p999_ns = r->max_ns = 0;
	r->has_tail = 0;
	r->msgs_per_s = (double)r->iterations * 1e9 / (double)elapsed_ns;
	r->gb_per_s = (double)r->size * (double)r->iterations / (double)elapsed_ns;
	return 0;
}

/* ---- rounds ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median of @p n values (n > 0), sorted in place. */
static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The median over the valid rounds of transport @p t of the figure at @p field. */
static double median_field(const perf_result_t *grid, const unsigned char *ok, size_t rounds, size_t ntr,
			   size_t t, size_t field)
{
	double v[PERF_MAX_ROUNDS];
	size_t n = 0;

	for (size_t k = 0; k < rounds; k++)
		if (ok[k * ntr + t])
			v[n++] = *(const double *)((const char *)&grid[k * ntr + t] + field);
	return median(v, n);
}

/* Where rounds of the cache line figures @p cl_ns split into two
 * placements: the geometric mean of the smallest and largest figure where
 * they lie PERF_PLACEMENT_SPLIT apart, else 0 (one placement). */
static double placement_split(const double *cl_ns, size_t rounds)
{
	double lo = 0, hi = 0;

	for (size_t k = 0; k < rounds; k++) {
		if (cl_ns[k] <= 0)
			continue;
		lo = lo == 0 || cl_ns[k] < lo ? cl_ns[k] : lo;
		hi = cl_ns[k] > hi ? cl_ns[k] : hi;
	}
	return lo > 0 && hi >= PERF_PLACEMENT_SPLIT * lo ? sqrt(lo * hi) : 0;
}

/* A row's rounds (or one placement's): their count and ratios, gathered. */
struct ratios {
	size_t valid, ntb, nvcl;
	double tb[PERF_MAX_ROUNDS], vcl[PERF_MAX_ROUNDS];
};

/* One more round of the row: its ratio to the textbook ring and to the
 * cache line, each 0 where the round has none. */
static void ratios_add(struct ratios *p, double tb, double vcl)
{
	p->valid++;
	if (tb > 0)
		p->tb[p->ntb++] = tb;
	if (vcl > 0)
		p->vcl[p->nvcl++] = vcl;
}

/* The median of @p n values (sorted in place), or 0 if there are none. */
static double median_or_0(double *v, size_t n)
{
	return n ? median(v, n) : 0;
}

/* A placement of the block's @p block_rounds rounds, whose cache line
 * figures' median is @p cl_median, and of the row's rounds @p p there. */
static perf_placement_t placement(size_t block_rounds, double cl_median, struct ratios *p)
{
	return (perf_placement_t){ .block_rounds = (unsigned)block_rounds, .cacheline_ns = cl_median,
				   .rounds = (unsigned)p->valid, .vs_textbook = median_or_0(p->tb, p->ntb),
				   .vs_cacheline = median_or_0(p->vcl, p->nvcl) };
}

size_t perf_rounds_reduce(const perf_result_t *grid, const unsigned char *ok, size_t rounds, size_t ntr,
			  int base, const double *cl_ns, perf_result_t *out)
{
	static const size_t fields[] = {
		offsetof(perf_result_t, median_ns), offsetof(perf_result_t, p99_ns),
		offsetof(perf_result_t, p999_ns),   offsetof(perf_result_t, max_ns),
		offsetof(perf_result_t, msgs_per_s), offsetof(perf_result_t, gb_per_s),
	};
	/* [0]: every round; [1], [2]: the close and the far ones, where the
	 * rounds split.  Static: 72 KB, off the stack (pinshm-perf reduces in
	 * one thread). */
	static double cl[3][PERF_MAX_ROUNDS];
	static struct ratios part[3];
	size_t ncl[3] = { 0, 0, 0 }, nout = 0;
	double cl_median[3], split;

	if (rounds > PERF_MAX_ROUNDS)
		rounds = PERF_MAX_ROUNDS;
	split = placement_split(cl_ns, rounds);
	for (size_t k = 0; k < rounds; k++) {
		if (cl_ns[k] <= 0)
			continue;
		cl[0][ncl[0]++] = cl_ns[k];
		if (split > 0) {
			size_t j = 1 + (cl_ns[k] >= split);

			cl[j][ncl[j]++] = cl_ns[k];
		}
	}
	for (int j = 0; j < 3; j++)
		cl_median[j] = median_or_0(cl[j], ncl[j]);
	for (size_t t = 0; t < ntr; t++) {
		perf_result_t *r = &out[nout];
		size_t first = 0;

		for (int j = 0; j < 3; j++)
			part[j].valid = part[j].ntb = part[j].nvcl = 0;
		for (size_t k = rounds; k-- > 0;) {
			const perf_result_t *g = &grid[k * ntr + t];
			double tb = 0, vcl = 0;

			if (!ok[k * ntr + t])
				continue;
			first = k;
			if (base >= 0 && ok[k * ntr + (size_t)base] && g->median_ns > 0)
				tb = grid[k * ntr + (size_t)base].median_ns / g->median_ns;
			if (strcmp(g->pattern, "pingpong") == 0 && cl_ns[k] > 0)
				vcl = g->median_ns / cl_ns[k];
			ratios_add(&part[0], tb, vcl);
			if (split > 0 && cl_ns[k] > 0) /* and to the round's placement */
				ratios_add(&part[1 + (cl_ns[k] >= split)], tb, vcl);
		}
		if (part[0].valid == 0)
			continue;
		*r = grid[first * ntr + t]; /* names, size, iterations, has_tail */
		for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
			*(double *)((char *)r + fields[i]) = median_field(grid, ok, rounds, ntr, t, fields[i]);
		r->rounds = (unsigned)part[0].valid;
		r->cacheline_ns = cl_median[0];
		r->vs_textbook = median_or_0(part[0].tb, part[0].ntb);
		r->vs_cacheline = median_or_0(part[0].vcl, part[0].nvcl);
		r->close = placement(ncl[1], cl_median[1], &part[1]);
		r->far = placement(ncl[2], cl_median[2], &part[2]);
		nout++;
	}
	return nout;
}

int perf_format_parse(const char *s, perf_format_t *fmt)
{
	if (strcmp(s, "table") == 0)
		*fmt = PERF_FMT_TABLE;
	else if (strcmp(s, "csv") == 0)
		*fmt = PERF_FMT_CSV;
	else if (strcmp(s, "json") == 0)
		*fmt = PERF_FMT_JSON;
	else
		return -EINVAL;
	return 0;
}

/* ---- table ------------------------------------------------------------- */

static const char *fmt_size(uint64_t size, char *buf, size_t len)
{
	if (size >= (1u << 20) && size % (1u << 20) == 0)
		snprintf(buf, len, "%llu MiB", (unsigned long long)(size >> 20));
	else if (size >= 1024 && size % 1024 == 0)
		snprintf(buf, len, "%llu KiB", (unsigned long long)(size >> 10));
	else
		snprintf(buf, len, "%llu B", (unsigned long long)size);
	return buf;
}

static const char *fmt_ns(double ns, char *buf, size_t len)
{
	snprintf(buf, len, ns < 100 ? "%.1f" : "%.0f", ns);
	return buf;
}

static const char *fmt_rate(double v, char *buf, size_t len)
{
	if (v >= 1e9)
		snprintf(buf, len, "%.2fG", v / 1e9);
	else if (v >= 1e6)
		snprintf(buf, len, "%.2fM", v / 1e6);
	else if (v >= 1e3)
		snprintf(buf, len, "%.1fk", v / 1e3);
	else
		snprintf(buf, len, "%.0f", v);
	return buf;
}

static const char *fmt_ratio(double x, char *buf, size_t len)
{
	if (x > 0)
		snprintf(buf, len, x >= 10 ? "%.1f" : x >= 0.1 ? "%.2f" : "%.2g", x);
	else
		snprintf(buf, len, "-");
	return buf;
}

static void table_row(FILE *f, const perf_result_t *r, int width, int rounds)
{
	char med[32], p99[32], p999[32], max[32], rate[32], ratio[32], gb[32], xcl[32];

	fmt_ns(r->median_ns, med, sizeof(med));
	if (r->has_tail) {
		fmt_ns(r->p99_ns, p99, sizeof(p99));
		fmt_ns(r->p999_ns, p999, sizeof(p999));
		fmt_ns(r->max_ns, max, sizeof(max));
	} else {
		strcpy(p99, "-");
		strcpy(p999, "-");
		strcpy(max, "-");
	}
	if (strcmp(r->pattern, "create") == 0)
		strcpy(gb, "-"); /* moves no byte */
	else
		snprintf(gb, sizeof(gb), "%.3f", r->gb_per_s);
	fprintf(f, "%-*s %10s %10s %10s %10s %10s %8s %7s", width, r->transport, med, p99, p999, max,
		fmt_rate(r->msgs_per_s, rate, sizeof(rate)), gb, fmt_ratio(r->vs_textbook, ratio, sizeof(ratio)));
	if (rounds)
		fprintf(f, " %7s", fmt_ratio(r->vs_cacheline, xcl, sizeof(xcl)));
	fputc('\n', f);
}

/* Where the rounds split by placement: each transport's ratios in each. */
static void table_placements(FILE *f, const perf_result_t *rows, size_t n, int width)
{
	char a[32], b[32], c[32], d[32];

	/* The placements are the block's: every row carries the same. */
	if (n == 0 || !rows[0].close.block_rounds || !rows[0].far.block_rounds)
		return;
	fprintf(f, "by placement, the rounds split by their cache line round trip: close %.0f ns (%u rounds), "
		   "far %.0f ns (%u rounds)\n",
		rows[0].close.cacheline_ns, rows[0].close.block_rounds, rows[0].far.cacheline_ns,
		rows[0].far.block_rounds);
	fprintf(f, "%-*s %11s %11s %13s %13s\n", width, "transport", "ratio close", "ratio far", "x_cline close",
		"x_cline far");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%-*s %11s %11s %13s %13s\n", width, rows[i].transport,
			fmt_ratio(rows[i].close.vs_textbook, a, sizeof(a)), fmt_ratio(rows[i].far.vs_textbook, b, sizeof(b)),
			fmt_ratio(rows[i].close.vs_cacheline, c, sizeof(c)), fmt_ratio(rows[i].far.vs_cacheline, d, sizeof(d)));
}

static void table_group(FILE *f, const perf_result_t *rows, size_t n, const perf_result_t *mc, unsigned rounds)
{
	const perf_result_t *first = n ? &rows[0] : mc;
	int stream = strcmp(first->pattern, "stream") == 0, create = strcmp(first->pattern, "create") == 0;
	int baseline = 0, width = 14;
	char size[32], cl[64] = "";

	for (size_t i = 0; i < n; i++) {
		baseline |= strcmp(rows[i].transport, BASELINE) == 0;
		if ((int)strlen(rows[i].transport) > width)
			width = (int)strlen(rows[i].transport);
	}
	rounds = create ? 0 : rounds;
	if (rounds && first->cacheline_ns > 0)
		snprintf(cl, sizeof(cl), "; cache line round trip %.0f ns", first->cacheline_ns);
	if (create)
		fprintf(f, "\n%s, %s channels: %llu operations per row, through pinshmd\n", first->pattern,
			fmt_size(first->size, size, sizeof(size)), (unsigned long long)first->iterations);
	else if (rounds)
		fprintf(f, "\n%s, %s: %llu %s per row, medians of %u rounds%s%s\n", first->pattern,
			fmt_size(first->size, size, sizeof(size)), (unsigned long long)first->iterations,
			stream ? "messages" : "round trips", rounds, cl, baseline ? "" : " (no " BASELINE " row: no ratio)");
	else
		fprintf(f, "\n%s, %s: %llu %s per row%s\n", first->pattern,
			fmt_size(first->size, size, sizeof(size)), (unsigned long long)first->iterations,
			stream ? "messages" : "round trips", baseline ? "" : " (no " BASELINE " row: no ratio)");
	fprintf(f, "%-*s %10s %10s %10s %10s %10s %8s %7s", width, "transport",
		stream ? "mean_ns" : "median_ns", "p99_ns", "p99.9_ns", "max_ns",
		stream ? "msgs/s" : create ? "ops/s" : "rtrips/s", "GB/s", "ratio");
	fputs(rounds ? " x_cline\n" : "\n", f);
	for (size_t i = 0; i < n; i++)
		table_row(f, &rows[i], width, rounds);
	if (mc != NULL) {
		table_row(f, mc, width, rounds); /* a reference, not a transport: no ratio */
		if (mc->size >= (1u << 20))
			fprintf(f, "target: 0.7 x memcpy = %.2f GB/s\n", 0.7 * mc->gb_per_s);
	}
	if (rounds)
		table_placements(f, rows, n, width);
}

/* ---- CSV and JSON ---------------------------------------------------------- */

/* A ping-pong figure is a whole number of ns; a stream mean is not. */
static void num(FILE *f, double v, const char *fmt, int present, const char *absent)
{
	if (present && isfinite(v))
		fprintf(f, fmt, v);
	else
		fputs(absent, f);
}

/* The figures of a row as CSV and JSON write them, in their order. */
#define NCELLS 18
struct cell {
	const char *name;
	double v;
	const char *fmt;
	int present;
};

static void row_cells(const perf_result_t *r, struct cell c[NCELLS])
{
	const struct cell all[NCELLS] = {
		{ "median_ns", r->median_ns, r->has_tail ? "%.0f" : "%.1f", 1 },
		{ "p99_ns", r->p99_ns, "%.0f", r->has_tail },
		{ "p999_ns", r->p999_ns, "%.0f", r->has_tail },
		{ "max_ns", r->max_ns, "%.0f", r->has_tail },
		{ "msgs_per_s", r->msgs_per_s, "%.0f", 1 },
		{ "gb_per_s", r->gb_per_s, "%.4f", 1 },
		{ "rounds", r->rounds, "%.0f", r->rounds > 0 },
		{ "cacheline_ns", r->cacheline_ns, "%.0f", r->cacheline_ns > 0 },
		{ "vs_textbook", r->vs_textbook, "%.4f", r->vs_textbook > 0 },
		{ "vs_cacheline", r->vs_cacheline, "%.4f", r->vs_cacheline > 0 },
		{ "close_rounds", r->close.rounds, "%.0f", r->close.rounds > 0 },
		{ "close_cacheline_ns", r->close.cacheline_ns, "%.0f", r->close.cacheline_ns > 0 },
		{ "close_vs_textbook", r->close.vs_textbook, "%.4f", r->close.vs_textbook > 0 },
		{ "close_vs_cacheline", r->close.vs_cacheline, "%.4f", r->close.vs_cacheline > 0 },
		{ "far_rounds", r->far.rounds, "%.0f", r->far.rounds > 0 },
		{ "far_cacheline_ns", r->far.cacheline_ns, "%.0f", r->far.cacheline_ns > 0 },
		{ "far_vs_textbook", r->far.vs_textbook, "%.4f", r->far.vs_textbook > 0 },
		{ "far_vs_cacheline", r->far.vs_cacheline, "%.4f", r->far.vs_cacheline > 0 },
	};

	memcpy(c, all, sizeof(all));
}

static void csv_header(FILE *f)
{
	const perf_result_t none = { 0 };
	struct cell c[NCELLS];

	row_cells(&none, c);
	fputs("transport,pattern,size,iterations", f);
	for (int i = 0; i < NCELLS; i++)
		fprintf(f, ",%s", c[i].name);
	fputc('\n', f);
}

static void csv_row(FILE *f, const perf_result_t *r)
{
	struct cell c[NCELLS];

	fprintf(f, "%s,%s,%llu,%llu", r->transport, r->pattern, (unsigned long long)r->size,
		(unsigned long long)r->iterations);
	row_cells(r, c);
	for (int i = 0; i < NCELLS; i++) {
		fputc(',', f);
		num(f, c[i].v, c[i].fmt, c[i].present, "");
	}
	fputc('\n', f);
}

static void json_row(FILE *f, const perf_result_t *r, int first)
{
	struct cell c[NCELLS];

	/* Transport and pattern names are ours: plain ASCII, nothing to escape. */
	fprintf(f, "%s  {\"transport\": \"%s\", \"pattern\": \"%s\", \"size\": %llu, \"iterations\": %llu",
		first ? "" : ",\n", r->transport, r->pattern, (unsigned long long)r->size,
		(unsigned long long)r->iterations);
	row_cells(r, c);
	for (int i = 0; i < NCELLS; i++) {
		fprintf(f, ", \"%s\": ", c[i].name);
		num(f, c[i].v, c[i].fmt, c[i].present, "null");
	}
	fputc('}', f);
}

/* ---- the output ------------------------------------------------------------- */

void perf_output_begin(perf_output_t *o, perf_format_t fmt, FILE *f, const char *title, unsigned rounds)
{
	o->fmt = fmt;
	o->f = f;
	o->rows = 0;
	o->rounds = rounds;
	switch (fmt) {
	case PERF_FMT_TABLE:
		if (title != NULL)
			fprintf(f, "%s\n", title);
		fprintf(f, "ratio = " BASELINE " time / row time, same pattern and size "
			   "(> 1: faster than the " BASELINE " ring)\n");
		if (rounds)
			fprintf(f, "rounds: every transport of a size runs once a round, in turn, %u rounds, and a "
				   "cache line's round trip with them;\nevery figure is the median over the rounds, "
				   "ratio and x_cline (row time / cache line round trip, ping-pong) the\n"
				   "medians of the ratios of each round\n", rounds);
		if (title != NULL && strstr(title, "pinshmd") != NULL)
			fprintf(f, "NAME@pinshmd: transport NAME on channels created by pinshmd, "
				   "NAME: on segments of its own\n");
		break;
	case PERF_FMT_CSV:
		csv_header(f);
		break;
	case PERF_FMT_JSON:
		fputs("[\n", f);
		break;
	}
	fflush(f);
}

void perf_output_group(perf_output_t *o, const perf_result_t *rows, size_t n,
		       const perf_result_t *memcpy_row)
{
	if (n == 0 && (memcpy_row == NULL || o->fmt != PERF_FMT_TABLE))
		return;
	switch (o->fmt) {
	case PERF_FMT_TABLE:
		table_group(o->f, rows, n, memcpy_row, o->rounds);
		break;
	case PERF_FMT_CSV:
		for (size_t i = 0; i < n; i++)
			csv_row(o->f, &rows[i]);
		break;
	case PERF_FMT_JSON:
		for (size_t i = 0; i < n; i++)
			json_row(o->f, &rows[i], o->rows + i == 0);
		break;
	}
	o->rows += n;
	fflush(o->f);
}

void perf_output_end(perf_output_t *o)
{
	if (o->fmt == PERF_FMT_JSON)
		fputs(o->rows ? "\n]\n" : "]\n", o->f);
	fflush(o->f);
}
