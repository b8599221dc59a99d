/*
 * perf_stats.c - percentiles and the table, CSV and JSON outputs of pinshm-perf.
 */
#include <errno.h>
#include <math.h>
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

static void table_row(FILE *f, const perf_result_t *r, double baseline_ns, int width)
{
	char med[32], p99[32], p999[32], max[32], rate[32], ratio[32], gb[32];

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
	if (baseline_ns > 0 && r->median_ns > 0) {
		double x = baseline_ns / r->median_ns;

		snprintf(ratio, sizeof(ratio), x >= 10 ? "%.1f" : x >= 0.1 ? "%.2f" : "%.2g", x);
	} else {
		strcpy(ratio, "-");
	}
	if (strcmp(r->pattern, "create") == 0)
		strcpy(gb, "-"); /* moves no byte */
	else
		snprintf(gb, sizeof(gb), "%.3f", r->gb_per_s);
	fprintf(f, "%-*s %10s %10s %10s %10s %10s %8s %7s\n", width, r->transport, med, p99, p999, max,
		fmt_rate(r->msgs_per_s, rate, sizeof(rate)), gb, ratio);
}

static void table_group(FILE *f, const perf_result_t *rows, size_t n, const perf_result_t *mc)
{
	const perf_result_t *first = n ? &rows[0] : mc;
	int stream = strcmp(first->pattern, "stream") == 0, create = strcmp(first->pattern, "create") == 0;
	double baseline_ns = 0;
	char size[32];
	int width = 14;

	for (size_t i = 0; i < n; i++) {
		if (strcmp(rows[i].transport, BASELINE) == 0)
			baseline_ns = rows[i].median_ns;
		if ((int)strlen(rows[i].transport) > width)
			width = (int)strlen(rows[i].transport);
	}
	if (create)
		fprintf(f, "\n%s, %s channels: %llu operations per row, through pinshmd\n", first->pattern,
			fmt_size(first->size, size, sizeof(size)), (unsigned long long)first->iterations);
	else
		fprintf(f, "\n%s, %s: %llu %s per row%s\n", first->pattern,
			fmt_size(first->size, size, sizeof(size)), (unsigned long long)first->iterations,
			stream ? "messages" : "round trips", baseline_ns > 0 ? "" : " (no " BASELINE " row: no ratio)");
	fprintf(f, "%-*s %10s %10s %10s %10s %10s %8s %7s\n", width, "transport",
		stream ? "mean_ns" : "median_ns", "p99_ns", "p99.9_ns", "max_ns",
		stream ? "msgs/s" : create ? "ops/s" : "rtrips/s", "GB/s", "ratio");
	for (size_t i = 0; i < n; i++)
		table_row(f, &rows[i], baseline_ns, width);
	if (mc != NULL) {
		table_row(f, mc, 0, width); /* a reference, not a transport: no ratio */
		if (mc->size >= (1u << 20))
			fprintf(f, "target: 0.7 x memcpy = %.2f GB/s\n", 0.7 * mc->gb_per_s);
	}
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

static void csv_row(FILE *f, const perf_result_t *r)
{
	fprintf(f, "%s,%s,%llu,%llu,", r->transport, r->pattern, (unsigned long long)r->size,
		(unsigned long long)r->iterations);
	num(f, r->median_ns, r->has_tail ? "%.0f" : "%.1f", 1, "");
	fputc(',', f);
	num(f, r->p99_ns, "%.0f", r->has_tail, "");
	fputc(',', f);
	num(f, r->p999_ns, "%.0f", r->has_tail, "");
	fputc(',', f);
	num(f, r->max_ns, "%.0f", r->has_tail, "");
	fputc(',', f);
	num(f, r->msgs_per_s, "%.0f", 1, "");
	fputc(',', f);
	num(f, r->gb_per_s, "%.4f", 1, "");
	fputc('\n', f);
}

static void json_row(FILE *f, const perf_result_t *r, int first)
{
	/* Transport and pattern names are ours: plain ASCII, nothing to escape. */
	fprintf(f, "%s  {\"transport\": \"%s\", \"pattern\": \"%s\", \"size\": %llu, \"iterations\": %llu, ",
		first ? "" : ",\n", r->transport, r->pattern, (unsigned long long)r->size,
		(unsigned long long)r->iterations);
	fputs("\"median_ns\": ", f);
	num(f, r->median_ns, r->has_tail ? "%.0f" : "%.1f", 1, "null");
	fputs(", \"p99_ns\": ", f);
	num(f, r->p99_ns, "%.0f", r->has_tail, "null");
	fputs(", \"p999_ns\": ", f);
	num(f, r->p999_ns, "%.0f", r->has_tail, "null");
	fputs(", \"max_ns\": ", f);
	num(f, r->max_ns, "%.0f", r->has_tail, "null");
	fputs(", \"msgs_per_s\": ", f);
	num(f, r->msgs_per_s, "%.0f", 1, "null");
	fputs(", \"gb_per_s\": ", f);
	num(f, r->gb_per_s, "%.4f", 1, "null");
	fputc('}', f);
}

/* ---- the output ------------------------------------------------------------- */

void perf_output_begin(perf_output_t *o, perf_format_t fmt, FILE *f, const char *title)
{
	o->fmt = fmt;
	o->f = f;
	o->rows = 0;
	switch (fmt) {
	case PERF_FMT_TABLE:
		if (title != NULL)
			fprintf(f, "%s\n", title);
		fprintf(f, "ratio = " BASELINE " time / row time, same pattern and size "
			   "(> 1: faster than the " BASELINE " ring)\n");
		if (title != NULL && strstr(title, "pinshmd") != NULL)
			fprintf(f, "NAME@pinshmd: transport NAME on channels created by pinshmd, "
				   "NAME: on segments of its own\n");
		break;
	case PERF_FMT_CSV:
		fprintf(f, "transport,pattern,size,iterations,median_ns,p99_ns,p999_ns,max_ns,"
			   "msgs_per_s,gb_per_s\n");
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
		table_group(o->f, rows, n, memcpy_row);
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
