/*
 * perf_plot.h - pinshm-perf's results as a plot, drawn by gnuplot.
 *
 * The plot FILE (.png or .svg) has a panel per pattern measured: the
 * ping-pong's median round trip and the stream's throughput (GB/s, with
 * the memcpy reference dashed where there is one), against the message
 * size, one line per transport, both axes logarithmic.  Beside FILE go its
 * data (STEM.dat) and the gnuplot script that draws it (STEM.gp, which
 * names both by their base names: `cd DIR && gnuplot STEM.gp` redraws it).
 * Rows of size 0 and figures of 0 have no place on a log axis and are left
 * out; create rows are not plotted.
 *
 * gnuplot is looked for in PATH when the plot is set up, so that a run
 * that cannot plot stops before it measures.
 */
#ifndef PERF_PLOT_H
#define PERF_PLOT_H

#include <stddef.h>

#include "perf_stats.h"

typedef struct perf_plot {
	char *file;        /* FILE as given */
	char *dir;         /* its folder ("." if none) */
	char *base;        /* its base name */
	char *stem;        /* the base name without .png or .svg */
	int svg;           /* 1: .svg, 0: .png */
	char gnuplot[4096]; /* gnuplot's path, found in PATH */
	perf_result_t *rows;
	size_t nrows, cap;
} perf_plot_t;

/**
 * Set up a plot into @p file.  @return 0; -EINVAL if @p file does not end
 * in .png or .svg (either case), -ENOENT if gnuplot is not in PATH,
 * another negative errno if the file's folder cannot be written in,
 * -ENOMEM; @p err says why.
 */
int perf_plot_init(perf_plot_t *p, const char *file, char *err, size_t errlen);

/** Keep a copy of @p n rows (their names must outlive the plot). @return 0 or -ENOMEM. */
int perf_plot_add(perf_plot_t *p, const perf_result_t *rows, size_t n);

/**
 * Write STEM.dat and STEM.gp beside the plot's file, and run gnuplot in
 * its folder on STEM.gp.  @p title (may be NULL) heads the plot.
 * @return 0; -ENODATA if no row can be plotted; another negative errno if
 * a file could not be written or gnuplot failed (what was written stays);
 * @p err says why.
 */
int perf_plot_finish(perf_plot_t *p, const char *title, char *err, size_t errlen);

/** Free what the plot holds (its files stay). */
void perf_plot_free(perf_plot_t *p);

/**
 * Find the executable @p name in PATH (as execvp would), into @p path.
 * @return 0 or -ENOENT.
 */
int perf_find_in_path(const char *name, char *path, size_t len);

#endif /* PERF_PLOT_H */
