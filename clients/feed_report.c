/*
 * feed_report.c - pinshm-feed's figures: rows of named values printed as
 * a table, CSV or a JSON array of objects.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "feed.h"

double feed_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Table columns: the first (a name) left-aligned in 22, the others right in 10 or more. */
static int width(const struct feed_report *r, unsigned i)
{
	int w = (int)strlen(r->cols[i]);

	return i == 0 ? -22 : w < 10 ? 10 : w;
}

void feed_report_begin(struct feed_report *r, enum feed_format f, const char *const *cols, unsigned ncols)
{
	r->format = f;
	r->ncols = ncols < FEED_MAX_COLS ? ncols : FEED_MAX_COLS;
	r->nrows = 0;
	for (unsigned i = 0; i < r->ncols; i++)
		r->cols[i] = cols[i];
	if (f == FEED_JSON) {
		printf("[");
		return;
	}
	for (unsigned i = 0; i < r->ncols; i++) {
		if (f == FEED_CSV)
			printf("%s%s", i ? "," : "", cols[i]);
		else
			printf("%s%*s", i ? " " : "", width(r, i), cols[i]);
	}
	printf("\n");
}

void feed_report_row(struct feed_report *r, char vals[][32], const bool *text)
{
	if (r->format == FEED_JSON)
		printf("%s\n  {", r->nrows ? "," : "");
	for (unsigned i = 0; i < r->ncols; i++) {
		bool none = strcmp(vals[i], "-") == 0; /* not applicable: JSON's null */
		if (r->format == FEED_JSON)
			printf("%s\"%s\": %s%s%s", i ? ", " : "", r->cols[i], text[i] && !none ? "\"" : "",
			       none ? "null" : vals[i], text[i] && !none ? "\"" : "");
		else if (r->format == FEED_CSV)
			printf("%s%s", i ? "," : "", vals[i]);
		else
			printf("%s%*s", i ? " " : "", width(r, i), vals[i]);
	}
	printf(r->format == FEED_JSON ? "}" : "\n");
	r->nrows++;
	fflush(stdout);
}

void feed_report_end(struct feed_report *r)
{
	if (r->format == FEED_JSON)
		printf("\n]\n");
	fflush(stdout);
}
