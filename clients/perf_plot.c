/*
 * perf_plot.c - pinshm-perf's results as a plot, drawn by gnuplot.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf_plot.h"

#define REFERENCE "memcpy" /* the stream's reference row: a dashed line */
#define MAX_LINES 64       /* transports per plot */
#define MAX_TICS 12        /* more sizes than this: gnuplot's own tics */

/* One colour per transport, the same in every panel. */
static const char *const colours[] = {
	"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
	"#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000080", "#808000",
};
#define NCOLOURS (sizeof(colours) / sizeof(colours[0]))

static const char *const patterns[] = { "pingpong", "stream" };

static void say(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

int perf_find_in_path(const char *name, char *path, size_t len)
{
	const char *dirs = getenv("PATH"), *d, *end;

	if (dirs == NULL)
		dirs = "/bin:/usr/bin";
	for (d = dirs; ; d = end + 1) {
		end = strchr(d, ':');
		if (end == NULL)
			end = d + strlen(d);
		/* An empty entry is the current folder, as for execvp. */
		int n = end > d ? snprintf(path, len, "%.*s/%s", (int)(end - d), d, name)
				: snprintf(path, len, "./%s", name);

		if (n > 0 && (size_t)n < len && access(path, X_OK) == 0) {
			struct stat st;

			if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
				return 0;
		}
		if (*end == '\0')
			break;
	}
	return -ENOENT;
}

static int has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n > m && strcasecmp(s + n - m, suffix) == 0;
}

int perf_plot_init(perf_plot_t *p, const char *file, char *err, size_t errlen)
{
	const char *slash = strrchr(file, '/');

	memset(p, 0, sizeof(*p));
	if (!has_suffix(file, ".png") && !has_suffix(file, ".svg")) {
		say(err, errlen, "'%s': the plot's name must end in .png or .svg", file);
		return -EINVAL;
	}
	for (const char *c = file; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f) {
			say(err, errlen, "the plot's name has a control character");
			return -EINVAL;
		}
	p->svg = has_suffix(file, ".svg");
	p->file = strdup(file);
	p->base = strdup(slash ? slash + 1 : file);
	p->dir = slash == NULL ? strdup(".") : slash == file ? strdup("/") : strndup(file, (size_t)(slash - file));
	if (p->base != NULL)
		p->stem = strndup(p->base, strlen(p->base) - 4);
	if (p->file == NULL || p->base == NULL || p->dir == NULL || p->stem == NULL) {
		perf_plot_free(p);
		say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (access(p->dir, W_OK) < 0) {
		int rc = -errno;

		say(err, errlen, "'%s': %s (the plot's folder)", p->dir, strerror(errno));
		perf_plot_free(p);
		return rc;
	}
	if (perf_find_in_path("gnuplot", p->gnuplot, sizeof(p->gnuplot)) < 0) {
		say(err, errlen, "gnuplot is not in PATH: install it (Debian: apt install gnuplot-nox), "
				 "or leave the plot out");
		perf_plot_free(p);
		return -ENOENT;
	}
	return 0;
}

int perf_plot_add(perf_plot_t *p, const perf_result_t *rows, size_t n)
{
	if (p->nrows + n > p->cap) {
		size_t cap = p->cap ? p->cap : 64;
		perf_result_t *r;

		while (cap < p->nrows + n)
			cap *= 2;
		r = realloc(p->rows, cap * sizeof(*r));
		if (r == NULL)
			return -ENOMEM;
		p->rows = r;
		p->cap = cap;
	}
	memcpy(p->rows + p->nrows, rows, n * sizeof(*rows));
	p->nrows += n;
	return 0;
}

void perf_plot_free(perf_plot_t *p)
{
	free(p->file);
	free(p->dir);
	free(p->base);
	free(p->stem);
	free(p->rows);
	memset(p, 0, sizeof(*p));
}

/* ---- what is plotted ------------------------------------------------------ */

/* The figure of @r on its panel's y axis; 0: not plottable. */
static double y_value(const perf_result_t *r)
{
	if (r->size == 0)
		return 0; /* no place on a log axis */
	if (strcmp(r->pattern, "pingpong") == 0)
		return r->median_ns;
	if (strcmp(r->pattern, "stream") == 0)
		return r->gb_per_s;
	return 0;
}

/* The transports, in the order they first came (the reference aside). */
static size_t line_names(const perf_plot_t *p, const char **names)
{
	size_t n = 0;

	for (size_t i = 0; i < p->nrows; i++) {
		const char *t = p->rows[i].transport;
		size_t j;

		if (y_value(&p->rows[i]) <= 0 || strcmp(t, REFERENCE) == 0)
			continue;
		for (j = 0; j < n && strcmp(names[j], t) != 0; j++)
			;
		if (j == n && n < MAX_LINES)
			names[n++] = t;
	}
	return n;
}

/* One data block: the plottable rows of @pattern and @transport, by size. */
static int write_block(FILE *f, const perf_plot_t *p, const char *pattern, const char *transport)
{
	int any = 0;

	for (size_t i = 0; i < p->nrows; i++) {
		const perf_result_t *r = &p->rows[i];

		if (strcmp(r->pattern, pattern) != 0 || strcmp(r->transport, transport) != 0 || y_value(r) <= 0)
			continue;
		if (!any)
			fprintf(f, "# %s %s: size_bytes %s\n", pattern, transport,
				strcmp(pattern, "pingpong") == 0 ? "median_round_trip_ns" : "gb_per_s");
		fprintf(f, "%llu %.6g\n", (unsigned long long)r->size, y_value(r));
		any = 1;
	}
	if (any)
		fputs("\n\n", f); /* the end of a gnuplot index */
	return any;
}

/* A gnuplot string in single quotes, where only ' is special (doubled). */
static void quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputc('\'', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

static void size_label(unsigned long long size, char *buf, size_t len)
{
	if (size >= (1ull << 20) && size % (1ull << 20) == 0)
		snprintf(buf, len, "%llu MiB", size >> 20);
	else if (size >= 1024 && size % 1024 == 0)
		snprintf(buf, len, "%llu KiB", size >> 10);
	else
		snprintf(buf, len, "%llu B", size);
}

/* The x tics: the sizes measured, labelled in B, KiB and MiB. */
static void write_xtics(FILE *f, const perf_plot_t *p)
{
	unsigned long long sizes[MAX_TICS];
	size_t n = 0;

	for (size_t i = 0; i < p->nrows; i++) {
		unsigned long long s = p->rows[i].size;
		size_t j;

		if (y_value(&p->rows[i]) <= 0)
			continue;
		for (j = 0; j < n && sizes[j] != s; j++)
			;
		if (j < n)
			continue;
		if (n == MAX_TICS) {
			fputs("set xtics autofreq\n", f);
			return;
		}
		sizes[n++] = s;
	}
	fputs("set xtics (", f);
	for (size_t i = 0; i < n; i++) {
		char label[32];

		size_label(sizes[i], label, sizeof(label));
		fprintf(f, "%s\"%s\" %llu", i ? ", " : "", label, sizes[i]);
	}
	fputs(")\n", f);
}

static void write_header(FILE *f, const perf_plot_t *p, const char *title, int panels)
{
	fputs("# Drawn by pinshm-perf: `gnuplot ", f);
	fputs(p->stem, f);
	fputs(".gp` in this folder draws it again.\n", f);
	if (p->svg)
		fprintf(f, "set terminal svg size %d,560 dynamic noenhanced font 'sans,11' background rgb 'white'\n",
			panels * 750);
	else
		fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
			   "    set terminal pngcairo size %d,560 noenhanced font 'sans,10'\n"
			   "} else {\n"
			   "    set terminal png size %d,560 noenhanced\n"
			   "}\n", panels * 750, panels * 750);
	fputs("set encoding utf8\nset micro\nset output ", f);
	quoted(f, p->base);
	fputs("\ndata = ", f);
	quoted(f, p->stem);
	fputs(" . '.dat'\n", f);
	for (size_t i = 0; i < NCOLOURS; i++)
		fprintf(f, "set linetype %zu linecolor rgb '%s' linewidth 2 pointtype %zu pointsize 1\n", i + 1,
			colours[i], i % 13 + 1);
	fprintf(f, "set multiplot layout 1,%d title ", panels);
	quoted(f, title ? title : "pinshm-perf");
	fputs(" font ',12'\n", f);
	fputs("set logscale xy\n"
	      "set grid xtics ytics mytics linecolor rgb '#d0d0d0'\n"
	      "set key outside right top vertical Left reverse samplen 2 spacing 1.1\n"
	      "set xlabel 'message size (log scale)'\n", f);
	write_xtics(f, p);
}

/* One panel: a line per transport with data, at the index @index of the data. */
static void write_panel(FILE *f, const char *pattern, const char **names, size_t n, const int *index,
			int reference)
{
	int ping = strcmp(pattern, "pingpong") == 0, first = 1;

	/* The data are in ns and GB/s; the axes in seconds and bytes/s, SI prefixed. */
	const char *y = ping ? "($2*1e-9)" : "($2*1e9)";

	if (ping)
		fputs("set title 'ping-pong: median round trip (lower is better)'\n"
		      "set ylabel 'round trip (log scale)'\n"
		      "set format y '%.0s %cs'\n", f);
	else
		fputs("set title 'stream: throughput (higher is better; 1 GB/s = 10^9 bytes/s)'\n"
		      "set ylabel 'throughput, bytes per second (log scale)'\n"
		      "set format y '%.0s %cB/s'\n", f);
	fputs("plot", f);
	for (size_t i = 0; i < n; i++) {
		if (index[i] < 0)
			continue;
		fprintf(f, "%s \\\n    data index %d using 1:%s with linespoints linetype %zu title ",
			first ? "" : ",", index[i], y, i % NCOLOURS + 1);
		quoted(f, names[i]);
		first = 0;
	}
	if (reference >= 0)
		fprintf(f, "%s \\\n    data index %d using 1:%s with lines dashtype 2 linecolor rgb 'black' "
			   "title 'memcpy, one core (reference)'", first ? "" : ",", reference, y);
	fputc('\n', f);
}

/* Write STEM.dat and STEM.gp. @return the panels drawn (0: nothing to plot), or -errno. */
static int write_files(const perf_plot_t *p, const char *title, const char *dat, const char *gp)
{
	const char *names[MAX_LINES];
	size_t n = line_names(p, names);
	int index[2][MAX_LINES], ref[2] = { -1, -1 }, blocks = 0, panels = 0, has[2] = { 0, 0 };
	FILE *f = fopen(dat, "w");
	int rc = 0;

	if (f == NULL)
		return -errno;
	fprintf(f, "# pinshm-perf plot data, one block (gnuplot index) per pattern and transport\n");
	for (int pi = 0; pi < 2; pi++) {
		for (size_t i = 0; i < n; i++) {
			index[pi][i] = write_block(f, p, patterns[pi], names[i]) ? blocks++ : -1;
			has[pi] |= index[pi][i] >= 0;
		}
		if (write_block(f, p, patterns[pi], REFERENCE))
			ref[pi] = blocks++;
		panels += has[pi];
	}
	if (fclose(f) != 0)
		return -errno;
	if (panels == 0)
		return 0;

	f = fopen(gp, "w");
	if (f == NULL)
		return -errno;
	write_header(f, p, title, panels);
	for (int pi = 0; pi < 2; pi++)
		if (has[pi])
			write_panel(f, patterns[pi], names, n, index[pi], ref[pi]);
	fputs("unset multiplot\n", f);
	if (ferror(f))
		rc = -EIO;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	return rc < 0 ? rc : panels;
}

/* Run gnuplot on @script in the plot's folder; its output goes to stderr. */
static int run_gnuplot(const perf_plot_t *p, const char *script, char *err, size_t errlen)
{
	pid_t pid;
	int status;

	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		say(err, errlen, "fork: %s", strerror(errno));
		return -errno;
	}
	if (pid == 0) {
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0 || chdir(p->dir) < 0)
			_exit(126);
		execl(p->gnuplot, "gnuplot", script, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			say(err, errlen, "waitpid: %s", strerror(errno));
			return -errno;
		}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		say(err, errlen, "%s %s %d", p->gnuplot, WIFEXITED(status) ? "exited with status" : "was killed by signal",
		    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		return -EIO;
	}
	return 0;
}

int perf_plot_finish(perf_plot_t *p, const char *title, char *err, size_t errlen)
{
	size_t len = strlen(p->dir) + strlen(p->stem) + 8;
	char *dat = malloc(len), *gp = malloc(len), *script = malloc(strlen(p->stem) + 4);
	struct stat st;
	int rc;

	if (dat == NULL || gp == NULL || script == NULL) {
		say(err, errlen, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	snprintf(dat, len, "%s/%s.dat", p->dir, p->stem);
	snprintf(gp, len, "%s/%s.gp", p->dir, p->stem);
	snprintf(script, strlen(p->stem) + 4, "%s.gp", p->stem);
	rc = write_files(p, title, dat, gp);
	if (rc < 0) {
		say(err, errlen, "writing %s or %s: %s", dat, gp, strerror(-rc));
		goto out;
	}
	if (rc == 0) {
		say(err, errlen, "no row to plot (a log axis has no place for size 0)");
		rc = -ENODATA;
		goto out;
	}
	if (unlink(p->file) < 0 && errno != ENOENT) {
		say(err, errlen, "%s: %s", p->file, strerror(errno));
		rc = -errno;
		goto out;
	}
	rc = run_gnuplot(p, script, err, errlen);
	if (rc == 0 && (stat(p->file, &st) < 0 || st.st_size == 0)) {
		say(err, errlen, "gnuplot wrote no %s", p->file);
		rc = -EIO;
	}
	if (rc < 0) {
		size_t used = strlen(err);

		snprintf(err + used, errlen - used, "; the data (%s) and the script (%s) are kept", dat, gp);
	}
out:
	free(dat);
	free(gp);
	free(script);
	return rc;
}
