/*
 * check_perf.c - the plots of pinshm-perf and pinshm-mpi-compare (--plot).
 *
 * Runs the pinshm-perf just built ($PINSHM_PERF) on tiny measurements in a
 * fresh folder under /tmp, with its output in files, and checks what it
 * writes: a PNG or an SVG drawn by gnuplot, with its data and script beside
 * it; a clear refusal, before anything is measured, where gnuplot is not in
 * PATH or the name is not .png or .svg; the data and script kept, and exit
 * status 1, where gnuplot fails.  pinshm-mpi-compare ($PINSHM_MPI_COMPARE)
 * runs with a stand-in for mpirun, so that no MPI is needed: its plot
 * holds the medians of the rounds.  pinshm-perf's rounds (--rounds): the
 * reduction on made-up rounds, and the columns of real runs.
 *
 * The cases that draw need gnuplot in PATH: without it they are left out,
 * and the program exits 77 (skipped) once the others have passed.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf_plot.h"
#include "testutil.h"

#define RUN_MS 120000 /* for one pinshm-perf run (a tiny one takes well under a second) */

struct run {
	char dir[64]; /* a fresh folder: the runs' working folder */
	int status;   /* exit status */
	char out[16384];
	char err[8192];
};

static void run_init(struct run *r)
{
	memset(r, 0, sizeof(*r));
	strcpy(r->dir, "/tmp/pinshm-perf-check-XXXXXX");
	ck_assert_msg(mkdtemp(r->dir) != NULL, "mkdtemp: %s", strerror(errno));
}

/* A path in the run's folder. */
static const char *in_dir(const struct run *r, const char *name)
{
	static char path[2][128];
	static int turn;

	turn ^= 1;
	snprintf(path[turn], sizeof(path[turn]), "%s/%s", r->dir, name);
	return path[turn];
}

/* The absolute path of the program named by $@p var (else @p fallback, from the build folder). */
static const char *program(const char *var, const char *fallback, char *buf, size_t len)
{
	const char *bin = getenv(var);

	if (!bin || !bin[0])
		bin = fallback;
	if (bin[0] == '/')
		return bin;
	ck_assert(getcwd(buf, len - strlen(bin) - 2) != NULL);
	strcat(buf, "/");
	strcat(buf, bin);
	return buf;
}

struct exec_args {
	const struct run *r;
	const char *path;
	const char *const *argv;
};

/* The child of runv(): its output into files of the run's folder, then exec. */
static int exec_child(void *arg, int idx)
{
	const struct exec_args *a = arg;
	int ofd = open(in_dir(a->r, "stdout"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int efd = open(in_dir(a->r, "stderr"), O_WRONLY | O_CREAT | O_TRUNC, 0600);

	(void)idx;
	if (ofd < 0 || efd < 0 || dup2(ofd, 1) < 0 || dup2(efd, 2) < 0 || chdir(a->r->dir) < 0)
		return 126;
	if (a->path != NULL)
		setenv("PATH", a->path, 1);
	execv(a->argv[0], (char *const *)a->argv);
	fprintf(stderr, "exec %s: %s\n", a->argv[0], strerror(errno));
	return 127;
}

/* Run @p argv (NULL-terminated; argv[0] is the program's path) in the run's
 * folder, with PATH set to @p path (NULL: as it is); fail the test if it
 * hangs or is killed. */
static void runv(struct run *r, const char *path, const char *const *argv)
{
	struct exec_args a = { .r = r, .path = path, .argv = argv };
	struct tu_procs ps;
	char buf[32];
	int i, st;

	tu_procs_init(&ps);
	i = tu_spawn(&ps, argv[0], exec_child, &a, 0);
	ck_assert_msg(tu_wait_all(&ps, RUN_MS) == 0, "%s did not exit in %d ms", argv[0], RUN_MS);
	st = ps.status[i];
	tu_read_file(in_dir(r, "stdout"), r->out, sizeof(r->out));
	tu_read_file(in_dir(r, "stderr"), r->err, sizeof(r->err));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) < 126, "%s: %s\n%s", argv[0],
		      tu_status_str(st, buf, sizeof(buf)), r->err);
	r->status = WEXITSTATUS(st);
}

static void check_status(const struct run *r, const char *what, int want)
{
	ck_assert_msg(r->status == want, "%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r->status, want,
		      r->out, r->err);
}

/* Run "pinshm-perf ARGS..." with PATH @path and fail the test unless it exits @want. */
#define PERF(r, path, want, ...)                                                                              \
	do {                                                                                                  \
		char bin_[4096];                                                                              \
		runv((r), (path),                                                                             \
		     (const char *const[]){ program("PINSHM_PERF", "clients/pinshm-perf", bin_, sizeof(bin_)), \
					    __VA_ARGS__, NULL });                                     \
		check_status((r), "pinshm-perf " #__VA_ARGS__, (want));                                     \
	} while (0)

/* Run "bash pinshm-mpi-compare ARGS..." likewise (bash by its path: PATH may lack it). */
#define COMPARE(r, path, want, ...)                                                                           \
	do {                                                                                                  \
		char bin_[4096];                                                                              \
		runv((r), (path),                                                                             \
		     (const char *const[]){ "/bin/bash",                                                      \
					    program("PINSHM_MPI_COMPARE", "../clients/pinshm-mpi-compare", bin_, \
						    sizeof(bin_)),                                            \
					    __VA_ARGS__, NULL });                                     \
		check_status((r), "pinshm-mpi-compare " #__VA_ARGS__, (want));                              \
	} while (0)

#define HAS(text, s) ck_assert_msg(strstr((text), (s)) != NULL, "'%s' not in:\n%.3000s", (s), (text))

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Remove the run's folder and what is in it. */
static void run_done(struct run *r)
{
	ck_assert_msg(nftw(r->dir, remove_one, 8, FTW_DEPTH | FTW_PHYS) == 0, "removing %s: %s", r->dir,
		      strerror(errno));
}

/* The first @len bytes of file @name of the run's folder, and its size. */
static size_t head(const struct run *r, const char *name, char *buf, size_t len)
{
	struct stat st;
	int fd = open(in_dir(r, name), O_RDONLY);
	ssize_t n;

	ck_assert_msg(fd >= 0, "%s was not written: %s", name, strerror(errno));
	ck_assert(fstat(fd, &st) == 0);
	n = read(fd, buf, len - 1);
	ck_assert(n >= 0);
	buf[n] = '\0';
	close(fd);
	return (size_t)st.st_size;
}

static int exists(const struct run *r, const char *name)
{
	return access(in_dir(r, name), F_OK) == 0;
}

/* Write @p text into file @p name of the run's folder, with mode @p mode. */
static void write_file(const struct run *r, const char *name, const char *text, mode_t mode)
{
	int fd = open(in_dir(r, name), O_WRONLY | O_CREAT | O_TRUNC, mode);

	ck_assert_msg(fd >= 0, "%s: %s", name, strerror(errno));
	ck_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	ck_assert(close(fd) == 0);
}

/* The data and the script beside a plot of cacheline and textbook ping-pongs. */
static void check_data_and_script(const struct run *r, const char *stem, const char *output)
{
	char buf[8192], name[64];

	snprintf(name, sizeof(name), "%s.dat", stem);
	head(r, name, buf, sizeof(buf));
	HAS(buf, "# pingpong cacheline: size_bytes median_round_trip_ns\n64 ");
	HAS(buf, "# pingpong textbook: size_bytes median_round_trip_ns\n64 ");
	HAS(buf, "\n1024 ");
	snprintf(name, sizeof(name), "%s.gp", stem);
	head(r, name, buf, sizeof(buf));
	HAS(buf, "set logscale xy");
	HAS(buf, "set output '");
	HAS(buf, output);
	HAS(buf, "title 'cacheline'");
	HAS(buf, "title 'textbook'");
	HAS(buf, "set xtics (\"64 B\" 64, \"1 KiB\" 1024)");
}

START_TEST(test_plot_png)
{
	static const unsigned char png[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	struct run r;
	char buf[16];

	run_init(&r);
	PERF(&r, NULL, 0, "-t", "cacheline,textbook", "-p", "pingpong", "-s", "64,1k", "-n", "100", "-f", "csv",
	     "--plot", "lat.png");
	HAS(r.out, "textbook,pingpong,1024,100,"); /* the results still go to stdout */
	HAS(r.err, "plot written to lat.png");
	ck_assert_msg(head(&r, "lat.png", buf, sizeof(buf)) > 1000, "lat.png is too small to be a plot");
	ck_assert_msg(memcmp(buf, png, sizeof(png)) == 0, "lat.png is not a PNG");
	check_data_and_script(&r, "lat", "lat.png");
	run_done(&r);
}
END_TEST

/* An SVG of both patterns, with a folder in its name; the stream has the memcpy line. */
START_TEST(test_plot_svg)
{
	struct run r;
	static char buf[1 << 20];

	run_init(&r);
	ck_assert(mkdir(in_dir(&r, "sub"), 0700) == 0);
	PERF(&r, NULL, 0, "-t", "cacheline,textbook", "-s", "64,1k", "-n", "100", "--plot", "sub/both.SVG");
	ck_assert_msg(head(&r, "sub/both.SVG", buf, sizeof(buf)) > 1000, "both.SVG is too small to be a plot");
	ck_assert_msg(strncmp(buf, "<?xml", 5) == 0, "not an SVG:\n%.200s", buf);
	HAS(buf, "<svg");
	HAS(buf, "textbook");
	HAS(buf, "median round trip");
	HAS(buf, "throughput");
	check_data_and_script(&r, "sub/both", "both.SVG");
	head(&r, "sub/both.dat", buf, sizeof(buf));
	HAS(buf, "# stream textbook: size_bytes gb_per_s\n");
	HAS(buf, "# stream memcpy: size_bytes gb_per_s\n");
	head(&r, "sub/both.gp", buf, sizeof(buf));
	HAS(buf, "memcpy, one core (reference)");
	run_done(&r);
}
END_TEST

/* No gnuplot in PATH: refused before anything is measured, and said plainly. */
START_TEST(test_plot_without_gnuplot)
{
	struct run r;

	run_init(&r);
	PERF(&r, r.dir, 2, "-t", "cacheline", "-p", "pingpong", "-s", "64", "-n", "100", "--plot", "x.png");
	HAS(r.err, "--plot: gnuplot is not in PATH");
	HAS(r.err, "gnuplot-nox");
	HAS(r.err, "nothing was measured");
	ck_assert_msg(r.out[0] == '\0', "measured anyway:\n%s", r.out);
	ck_assert(!exists(&r, "x.png") && !exists(&r, "x.dat") && !exists(&r, "x.gp"));
	/* An empty PATH entry is the current folder, as for execvp: a gnuplot there counts. */
	PERF(&r, "", 2, "-t", "cacheline", "-p", "pingpong", "-s", "64", "-n", "100", "--plot", "x.png");
	HAS(r.err, "gnuplot is not in PATH");
	run_done(&r);
}
END_TEST

/* A fake gnuplot that fails, or exits 0 without drawing: exit 1, data and script kept. */
START_TEST(test_plot_gnuplot_fails)
{
	static const char *const scripts[] = {
		"#!/bin/sh\necho 'fake gnuplot: no' >&2\nexit 3\n",
		"#!/bin/sh\nexit 0\n",
	};
	static const char *const said[] = { "gnuplot exited with status 3", "gnuplot wrote no y.png" };
	struct run r;

	run_init(&r);
	for (size_t i = 0; i < 2; i++) {
		write_file(&r, "gnuplot", scripts[i], 0700);
		PERF(&r, r.dir, 1, "-t", "cacheline", "-p", "pingpong", "-s", "64", "-n", "100", "--plot", "y.png");
		HAS(r.out, "cacheline");
		HAS(r.err, said[i]);
		HAS(r.err, "the data (./y.dat) and the script (./y.gp) are kept");
		ck_assert(exists(&r, "y.dat") && exists(&r, "y.gp") && !exists(&r, "y.png"));
	}
	run_done(&r);
}
END_TEST

START_TEST(test_plot_refused)
{
	struct run r;

	run_init(&r);
	PERF(&r, NULL, 2, "-t", "cacheline", "-s", "64", "-n", "100", "--plot", "x.jpg");
	HAS(r.err, "'x.jpg': the plot's name must end in .png or .svg");
	HAS(r.err, "nothing was measured");
	PERF(&r, NULL, 2, "-t", "cacheline", "-s", "64", "-n", "100", "--plot", ".png");
	HAS(r.err, "must end in .png or .svg");
	PERF(&r, NULL, 2, "-t", "cacheline", "-s", "64", "-n", "100", "--plot", "no/such/x.png");
	HAS(r.err, "--plot: 'no/such': No such file or directory (the plot's folder); nothing was measured");
	PERF(&r, NULL, 2, "-p", "create", "-S", "", "--plot", "x.png");
	HAS(r.err, "--plot: the create pattern has no plot");
	ck_assert_str_eq(r.out, "");
	run_done(&r);
}
END_TEST

/* Size 0 has no place on a log axis: measured and printed, but no plot. */
START_TEST(test_plot_nothing)
{
	struct run r;

	run_init(&r);
	PERF(&r, NULL, 1, "-t", "cacheline", "-p", "pingpong", "-s", "0", "-n", "100", "--plot", "z.png");
	HAS(r.out, "cacheline");
	HAS(r.err, "--plot: no row to plot");
	ck_assert(!exists(&r, "z.png"));
	run_done(&r);
}
END_TEST

/* ---- rounds ---------------------------------------------------------------- */

static perf_result_t fake_row(const char *transport, const char *pattern, double median_ns)
{
	return (perf_result_t){ .transport = transport, .pattern = pattern, .size = 64, .iterations = 100,
				.median_ns = median_ns, .p99_ns = 2 * median_ns, .p999_ns = 3 * median_ns,
				.max_ns = 4 * median_ns, .msgs_per_s = 1e9 / median_ns, .gb_per_s = 128 / median_ns,
				.has_tail = 1 };
}

#define NEAR(x, want)                                                                                         \
	ck_assert_msg(fabs((x) - (want)) < 1e-9, "%s = %.12g, want %.12g", #x, (double)(x), (double)(want))

/* Three rounds of a ping-pong whose cache line is far, close, then between:
 * the ratios are the medians of each round's ratios, not ratios of medians. */
START_TEST(test_rounds_reduce)
{
	const perf_result_t grid[3 * 4] = {
		fake_row("cacheline", "pingpong", 400), fake_row("textbook", "pingpong", 1000),
		fake_row("pinshm", "pingpong", 500),    fake_row("pipe", "pingpong", 1),
		fake_row("cacheline", "pingpong", 100), fake_row("textbook", "pingpong", 300),
		fake_row("pinshm", "pingpong", 250),    fake_row("pipe", "pingpong", 1),
		fake_row("cacheline", "pingpong", 200), fake_row("textbook", "pingpong", 2000),
		fake_row("pinshm", "pingpong", 9999),   fake_row("pipe", "pingpong", 1),
	};
	/* pinshm failed in round 3, pipe in every round. */
	const unsigned char ok[3 * 4] = { 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 0 };
	const double cl_ns[3] = { 400, 100, 200 };
	perf_result_t out[4];

	ck_assert_uint_eq(perf_rounds_reduce(grid, ok, 3, 4, 1, cl_ns, out), 3);
	ck_assert_str_eq(out[0].transport, "cacheline");
	ck_assert_str_eq(out[1].transport, "textbook");
	ck_assert_str_eq(out[2].transport, "pinshm");
	for (int i = 0; i < 3; i++)
		NEAR(out[i].cacheline_ns, 200);
	/* The cache line: 400, 100, 200; against the textbook 2.5, 3, 10. */
	ck_assert_uint_eq(out[0].rounds, 3);
	NEAR(out[0].median_ns, 200);
	NEAR(out[0].vs_cacheline, 1);
	NEAR(out[0].vs_textbook, 3);
	/* The textbook: 1000, 300, 2000; against the cache line 2.5, 3, 10. */
	NEAR(out[1].median_ns, 1000);
	NEAR(out[1].p99_ns, 2000);
	NEAR(out[1].max_ns, 4000);
	NEAR(out[1].msgs_per_s, 1e9 / 1000);
	NEAR(out[1].vs_textbook, 1);
	NEAR(out[1].vs_cacheline, 3);
	/* pinshm, two rounds: 500 and 250, their mean; textbook ratios 2 and 1.2
	 * (1.6, where the ratio of the medians would be 1000 / 375); against the
	 * cache line 1.25 and 2.5. */
	ck_assert_uint_eq(out[2].rounds, 2);
	ck_assert_uint_eq(out[2].iterations, 100);
	ck_assert_int_eq(out[2].has_tail, 1);
	NEAR(out[2].median_ns, 375);
	NEAR(out[2].p999_ns, 1125);
	NEAR(out[2].gb_per_s, (128.0 / 500 + 128.0 / 250) / 2);
	NEAR(out[2].vs_textbook, 1.6);
	NEAR(out[2].vs_cacheline, 1.875);
}
END_TEST

/* A stream has no ratio to the cache line; no textbook row, no ratio to it. */
START_TEST(test_rounds_reduce_stream)
{
	const perf_result_t grid[2] = { fake_row("pinshm", "stream", 50), fake_row("pinshm", "stream", 70) };
	const unsigned char ok[2] = { 1, 1 };
	const double cl_ns[2] = { 300, 0 };
	perf_result_t out[1];

	ck_assert_uint_eq(perf_rounds_reduce(grid, ok, 2, 1, -1, cl_ns, out), 1);
	NEAR(out[0].median_ns, 60);
	NEAR(out[0].cacheline_ns, 300);
	NEAR(out[0].vs_textbook, 0);
	NEAR(out[0].vs_cacheline, 0);
}
END_TEST

/* Five rounds whose cache line is close (100, 120, 110 ns) or far (450,
 * 480): split at sqrt(100 * 480), each placement reduced alone; rounds that
 * stay within PERF_PLACEMENT_SPLIT of each other do not split. */
START_TEST(test_rounds_reduce_placement)
{
	const double cl[5] = { 100, 450, 120, 480, 110 };
	const double tb[5] = { 300, 1000, 330, 1100, 320 }, ps[5] = { 150, 800, 200, 1000, 160 };
	perf_result_t grid[5 * 3], out[3];
	unsigned char ok[5 * 3];

	for (int k = 0; k < 5; k++) {
		grid[3 * k] = fake_row("cacheline", "pingpong", cl[k]);
		grid[3 * k + 1] = fake_row("textbook", "pingpong", tb[k]);
		grid[3 * k + 2] = fake_row("pinshm", "pingpong", ps[k]);
		ok[3 * k] = ok[3 * k + 1] = ok[3 * k + 2] = 1;
	}
	ok[3 * 2 + 2] = 0; /* pinshm failed in round 3 (close) */
	ck_assert_uint_eq(perf_rounds_reduce(grid, ok, 5, 3, 1, cl, out), 3);
	/* The cache line's own rows: close 100, 120, 110; far 450, 480. */
	ck_assert_uint_eq(out[0].close.rounds, 3);
	ck_assert_uint_eq(out[0].far.rounds, 2);
	ck_assert_uint_eq(out[2].close.block_rounds, 3); /* the block's, whichever rows ran */
	ck_assert_uint_eq(out[2].far.block_rounds, 2);
	NEAR(out[0].close.cacheline_ns, 110);
	NEAR(out[0].far.cacheline_ns, 465);
	NEAR(out[0].close.vs_cacheline, 1);
	/* pinshm, close: rounds 1 and 5 (150 / 300, 160 / 320: textbook ratios
	 * 2 and 2, x_cline 1.5 and 160 / 110); far: 800 and 1000 (1.25 and 1.1;
	 * x_cline 800 / 450 and 1000 / 480). */
	ck_assert_uint_eq(out[2].close.rounds, 2);
	ck_assert_uint_eq(out[2].far.rounds, 2);
	NEAR(out[2].close.cacheline_ns, 110); /* every close round's cache line, as the other rows' */
	NEAR(out[2].close.vs_textbook, 2);
	NEAR(out[2].far.vs_textbook, (1.25 + 1.1) / 2);
	NEAR(out[2].close.vs_cacheline, (1.5 + 160.0 / 110) / 2);
	NEAR(out[2].far.vs_cacheline, (800.0 / 450 + 1000.0 / 480) / 2);
	/* The whole: 4 rounds, textbook ratios 2, 1.25, 1.1, 2. */
	ck_assert_uint_eq(out[2].rounds, 4);
	NEAR(out[2].vs_textbook, (1.25 + 2) / 2);

	/* A round at the split is far: 200 of 100, 200, 400 (split at 200). */
	const double tie[5] = { 100, 200, 400, 0, 0 };
	ck_assert_uint_eq(perf_rounds_reduce(grid, ok, 5, 3, 1, tie, out), 3);
	ck_assert_uint_eq(out[0].close.block_rounds, 1);
	ck_assert_uint_eq(out[0].far.block_rounds, 2);
	NEAR(out[0].far.cacheline_ns, 300);

	/* Within PERF_PLACEMENT_SPLIT of each other (a drift): no split. */
	const double near[5] = { 300, 450, 420, 590, 410 };
	ck_assert_uint_eq(perf_rounds_reduce(grid, ok, 5, 3, 1, near, out), 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(out[i].close.block_rounds + out[i].far.block_rounds, 0);
		ck_assert_uint_eq(out[i].close.rounds + out[i].far.rounds, 0);
		NEAR(out[i].far.vs_textbook, 0);
	}
}
END_TEST

/* The table's placement block, from those rounds, after the block's
 * memcpy line; none without a split. */
START_TEST(test_rounds_table_placement)
{
	const double cl[4] = { 100, 450, 120, 480 };
	const perf_result_t mc = fake_row("memcpy", "pingpong", 10);
	perf_result_t grid[4 * 2], out[2];
	unsigned char ok[4 * 2] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	char *text = NULL;
	size_t len = 0;

	for (int k = 0; k < 4; k++) {
		grid[2 * k] = fake_row("textbook", "pingpong", 3 * cl[k]);
		grid[2 * k + 1] = fake_row("pinshm", "pingpong", 2 * cl[k]);
	}
	ck_assert_uint_eq(perf_rounds_reduce(grid, ok, 4, 2, 0, cl, out), 2);
	FILE *f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	perf_output_t o;
	perf_output_begin(&o, PERF_FMT_TABLE, f, NULL, 4);
	perf_output_group(&o, out, 2, &mc);
	perf_output_end(&o);
	fclose(f);
	HAS(text, "by placement, the rounds split by their cache line round trip: close 110 ns (2 rounds), far 465 ns "
		  "(2 rounds)\n");
	ck_assert_msg(strstr(text, "\nmemcpy ") != NULL && strstr(text, "\nmemcpy ") < strstr(text, "by placement"),
		      "the memcpy line not before the placement block:\n%s", text);
	HAS(text, "transport      ratio close   ratio far x_cline close   x_cline far\n");
	HAS(text, "textbook              1.00        1.00          3.00          3.00\n");
	HAS(text, "pinshm                1.50        1.50          2.00          2.00\n");
	free(text);

	const double near[4] = { 400, 450, 420, 480 };
	ck_assert_uint_eq(perf_rounds_reduce(grid, ok, 4, 2, 0, near, out), 2);
	text = NULL;
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	perf_output_begin(&o, PERF_FMT_TABLE, f, NULL, 4);
	perf_output_group(&o, out, 2, NULL);
	perf_output_end(&o);
	fclose(f);
	ck_assert_msg(strstr(text, "by placement") == NULL, "a placement block without a split:\n%s", text);
	free(text);
}
END_TEST

/* The CSV line of @p transport in @p csv, split at commas into @p f (NCSV fields). */
#define NCSV 22
static void csv_fields(const char *csv, const char *transport, char f[NCSV][32])
{
	char key[64];
	const char *c;
	int n = 0;

	snprintf(key, sizeof(key), "\n%s,", transport);
	c = strstr(csv, key);
	ck_assert_msg(c != NULL, "no row of %s in:\n%s", transport, csv);
	for (c++;; c++) {
		const char *end = c;

		while (*end && *end != ',' && *end != '\n')
			end++;
		ck_assert_msg(n < NCSV && end - c < 32, "row of %s: too many fields or too long", transport);
		snprintf(f[n++], 32, "%.*s", (int)(end - c), c);
		if (*end != ',')
			break;
		c = end;
	}
	ck_assert_msg(n == NCSV, "row of %s: %d fields, want %d", transport, n, NCSV);
}

/* A real run of 3 rounds, as CSV: the columns, and the references' own ratios of 1. */
START_TEST(test_rounds_csv)
{
	static const char header[] = "transport,pattern,size,iterations,median_ns,p99_ns,p999_ns,max_ns,"
				     "msgs_per_s,gb_per_s,rounds,cacheline_ns,vs_textbook,vs_cacheline,close_rounds,"
				     "close_cacheline_ns,close_vs_textbook,close_vs_cacheline,far_rounds,far_cacheline_ns,"
				     "far_vs_textbook,far_vs_cacheline\n";
	char cl[NCSV][32], tb[NCSV][32], ps[NCSV][32];
	struct run r;

	run_init(&r);
	PERF(&r, NULL, 0, "-t", "cacheline,textbook,pinshm", "-p", "pingpong", "-s", "64", "-n", "100", "-f", "csv",
	     "--rounds", "3");
	ck_assert_msg(strncmp(r.out, header, strlen(header)) == 0, "header:\n%s", r.out);
	csv_fields(r.out, "cacheline", cl);
	csv_fields(r.out, "textbook", tb);
	csv_fields(r.out, "pinshm", ps);
	ck_assert_str_eq(ps[10], "3");
	/* The cache line's own row is each round's reference. */
	ck_assert_str_eq(cl[11], cl[4]);
	ck_assert_str_eq(ps[11], cl[4]);
	ck_assert_str_eq(cl[13], "1.0000");
	ck_assert_str_eq(tb[12], "1.0000");
	ck_assert_msg(atof(ps[12]) > 0 && atof(ps[13]) > 0, "pinshm's ratios: '%s' '%s'", ps[12], ps[13]);

	/* One round, without --rounds: the ratios are those of the row's figures. */
	PERF(&r, NULL, 0, "-t", "cacheline,textbook,pinshm", "-p", "pingpong", "-s", "64", "-n", "100", "-f", "csv");
	csv_fields(r.out, "cacheline", cl);
	csv_fields(r.out, "textbook", tb);
	csv_fields(r.out, "pinshm", ps);
	ck_assert_str_eq(ps[10], "1");
	ck_assert_msg(fabs(atof(ps[12]) - atof(tb[4]) / atof(ps[4])) < 1e-4, "vs_textbook %s, %s / %s", ps[12],
		      tb[4], ps[4]);
	ck_assert_msg(fabs(atof(ps[13]) - atof(ps[4]) / atof(cl[4])) < 1e-4, "vs_cacheline %s, %s / %s", ps[13],
		      ps[4], cl[4]);

	/* A stream: a cache line measured each round, no ratio to it. */
	PERF(&r, NULL, 0, "-t", "textbook", "-p", "stream", "-s", "64", "-n", "100", "-f", "csv", "--rounds", "2");
	csv_fields(r.out, "textbook", tb);
	ck_assert_str_eq(tb[10], "2");
	ck_assert_msg(atof(tb[11]) > 0, "no cache line figure: '%s'", tb[11]);
	ck_assert_str_eq(tb[12], "1.0000");
	ck_assert_str_eq(tb[13], "");
	run_done(&r);
}
END_TEST

START_TEST(test_rounds_table_json)
{
	char path[4096], buf[8192];
	struct run r;

	run_init(&r);
	PERF(&r, NULL, 0, "-t", "textbook", "-p", "pingpong", "-s", "64", "-n", "100", "--rounds", "2");
	HAS(r.out, "pingpong, 64 B: 100 round trips per row, medians of 2 rounds; cache line round trip ");
	HAS(r.out, "ratio x_cline\n");
	PERF(&r, NULL, 0, "-t", "textbook", "-p", "pingpong", "-s", "64", "-n", "100", "--rounds", "2", "-f", "json");
	HAS(r.out, "\"rounds\": 2, \"cacheline_ns\": ");
	HAS(r.out, "\"vs_textbook\": 1.0000, \"vs_cacheline\": ");
	if (perf_find_in_path("gnuplot", path, sizeof(path)) == 0) {
		PERF(&r, NULL, 0, "-t", "textbook", "-p", "pingpong", "-s", "64", "-n", "100", "--rounds", "2", "--plot",
		     "r.png");
		head(&r, "r.gp", buf, sizeof(buf));
		HAS(buf, ", medians of 2 rounds' font");
	}
	PERF(&r, NULL, 2, "--rounds", "0");
	HAS(r.err, "--rounds: expected 1 to 1000");
	PERF(&r, NULL, 2, "--rounds", "1001");
	PERF(&r, NULL, 2, "-p", "create", "-S", "", "--rounds", "3");
	HAS(r.err, "--rounds: not with --pattern create");
	run_done(&r);
}
END_TEST

/* ---- pinshm-mpi-compare ---------------------------------------------------- */

/*
 * A stand-in for mpirun, so that the comparison runs without MPI: it prints
 * the lines pinshm-mpi-bench prints for the mode (-m) and sizes (-z) asked,
 * a figure of (size / 64 + 1) * 3 for Open MPI and * 2 with the plugin
 * (LD_PRELOAD among its arguments), doubled in the second round (it counts
 * its calls: 10 a round), and then the plugin's statistics; the complete
 * mode's four calls count as size 0.
 */
static const char fake_mpirun[] =
	"#!/bin/sh\n"
	"[ \"$1\" = --version ] && { echo 'mpirun (Open MPI) 9.9.9'; exit 0; }\n"
	"plugin=0 mode= sizes= calls=$(cat calls 2>/dev/null || echo 0)\n"
	"echo $((calls + 1)) >calls\n"
	"while [ $# -gt 0 ]; do\n"
	"    case $1 in\n"
	"    LD_PRELOAD=*) plugin=1 ;;\n"
	"    -m) mode=$2; shift ;;\n"
	"    -z) sizes=$2; shift ;;\n"
	"    esac\n"
	"    shift\n"
	"done\n"
	"for z in $(echo \"$sizes\" | tr , ' '); do\n"
	"    case $z in *K) b=$((${z%K} * 1024)) ;; *) b=$z ;; esac\n"
	"    v=$(( (b / 64 + 1) * (plugin ? 2 : 3) * (calls / 10 + 1) ))\n"
	"    case $mode in\n"
	"    latency) echo \"latency bytes=$b oneway_us=$v p10_us=1 p90_us=2 samples=3 per_sample=1\" ;;\n"
	"    bandwidth) echo \"bandwidth bytes=$b gbps=$v p10_gbps=1 p90_gbps=2 window=64 samples=3\" ;;\n"
	"    ring) echo \"ring bytes=$b ranks=4 step_us=$v p10_us=1 p90_us=2 samples=3 per_sample=1\" ;;\n"
	"    exchange) echo \"exchange bytes=$b round_us=$v p10_us=1 p90_us=2 samples=3 per_sample=1\" ;;\n"
	"    esac\n"
	"done\n"
	"[ \"$mode\" = complete ] && for c in testany waitany testsome waitsome; do\n"
	"    v=$(( (plugin ? 2 : 3) * (calls / 10 + 1) ))\n"
	"    echo \"complete requests=20000 call=$c call_us=$v p10_us=1 p90_us=2 samples=3 per_sample=1\"\n"
	"done\n"
	"[ $plugin = 1 ] && echo 'pinshm-mpi stats: rank=0 family=p2p pinshm_msgs=10 pinshm_bytes=1 mpi_msgs=0' >&2\n"
	"exit 0\n";

/* The fake mpirun, plugin and bench in the run's folder, and a pinshm-perf
 * where the script looks for one. */
static void fake_mpi(const struct run *r)
{
	write_file(r, "mpirun", fake_mpirun, 0700);
	write_file(r, "plugin.so", "", 0600);
	write_file(r, "bench", "#!/bin/sh\nexit 0\n", 0700);
	/* Where the script looks for pinshm-perf without -C: -C none must leave it unrun. */
	ck_assert(mkdir(in_dir(r, "clients"), 0700) == 0);
	write_file(r, "clients/pinshm-perf",
		   "#!/bin/sh\necho transport,median_ns\necho cacheline,400\n", 0700);
}

/* The script runs in the run's folder, where the fakes are; no cache line probe. */
#define COMPARE_ARGS                                                                                          \
	"-r", "2", "-m", "./mpirun", "-p", "./plugin.so", "-b", "./bench", "-C", "none", "-l", "0,8,4K", "-w",   \
		"64K", "-g", "8", "-e", "8,4K"

START_TEST(test_compare_plot)
{
	static const unsigned char png[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	struct run r;
	char buf[8192];

	run_init(&r);
	fake_mpi(&r);
	COMPARE(&r, NULL, 0, COMPARE_ARGS, "--plot", "mpi.png");
	HAS(r.out, "one-way latency, 2 ranks, 2 rounds");
	ck_assert_msg(strstr(r.out, "cache line") == NULL, "a probe with -C none:\n%s", r.out);
	/* Medians of the rounds (x and 2x) and the ratios within them. */
	HAS(r.out, "      4096       292.500      195.000   0.67       0.67     0.67-0.67");
	HAS(r.out, "completion calls over 20000 requests");
	HAS(r.out, "   testany         4.500        3.000   0.67       0.67     0.67-0.67");
	HAS(r.err, "plot written to mpi.png");
	ck_assert_msg(head(&r, "mpi.png", buf, sizeof(buf)) > 1000, "mpi.png is too small to be a plot");
	ck_assert_msg(memcmp(buf, png, sizeof(png)) == 0, "mpi.png is not a PNG");
	/* The medians of the two rounds by size (x and 2x: 1.5x), size 0 left out. */
	head(&r, "mpi.dat", buf, sizeof(buf));
	HAS(buf, "# latency openmpi: bytes us\n8 4.5\n4096 292.5\n\n\n");
	HAS(buf, "# latency plugin: bytes us\n8 3\n4096 195\n\n\n");
	HAS(buf, "# bandwidth plugin: bytes gbps\n65536 3075\n");
	HAS(buf, "# ring openmpi: bytes us\n8 4.5\n");
	HAS(buf, "# exchange plugin: bytes us\n8 3\n4096 195\n");
	head(&r, "mpi.gp", buf, sizeof(buf));
	HAS(buf, "set output 'mpi.png'");
	HAS(buf, "set multiplot layout 2,2");
	HAS(buf, "set logscale xy");
	HAS(buf, "set xtics (\"8 B\" 8, \"4 KiB\" 4096)");
	HAS(buf, "title 'pinshm plugin'");
	/* The long option's other spelling, an SVG. */
	ck_assert(unlink(in_dir(&r, "calls")) == 0);
	COMPARE(&r, NULL, 0, COMPARE_ARGS, "--plot=mpi.svg");
	head(&r, "mpi.svg", buf, sizeof(buf));
	ck_assert_msg(strncmp(buf, "<?xml", 5) == 0, "not an SVG:\n%.200s", buf);
	run_done(&r);
}
END_TEST

/*
 * Stand-ins for the rounds' placements: an mpirun for -M latency,coll (4
 * runs a round, one size each) whose plugin takes 2F us, F of the round
 * from the list below, and Open MPI 8 us (its collectives' baseline
 * preloads the plugin with PINSHM_MPI_COLL=0): a ratio of F / 4; and a
 * pinshm-perf whose cache line takes the next of the probes in "list" (ns).
 */
static const char fake_mpirun_rounds[] =
	"#!/bin/sh\n"
	"[ \"$1\" = --version ] && { echo 'mpirun (Open MPI) 9.9.9'; exit 0; }\n"
	"plugin=0 mode= calls=$(cat calls 2>/dev/null || echo 0)\n"
	"echo $((calls + 1)) >calls\n"
	"set -- \"$@\" end\n"
	"while [ \"$1\" != end ]; do\n"
	"    case $1 in\n"
	"    LD_PRELOAD=*) [ $plugin = 0 ] && plugin=1 ;;\n"
	"    PINSHM_MPI_COLL=0) plugin=2 ;;\n"
	"    -m) mode=$2; shift ;;\n"
	"    esac\n"
	"    shift\n"
	"done\n"
	"f=$(echo 1 2 5 3 6 | cut -d' ' -f$((calls / 4 + 1)))\n"
	"[ $plugin = 1 ] && v=$((2 * f)) || v=8\n"
	"case $mode in\n"
	"latency) echo \"latency bytes=64 oneway_us=$v p10_us=1 p90_us=2 samples=3 per_sample=1\" ;;\n"
	"coll) echo \"coll bytes=8 call=allreduce ranks=2 us=$v p10_us=1 p90_us=2 samples=3 cycle_us=$((v + 1))\"\n"
	"      [ $plugin = 1 ] && echo 'pinshm-mpi coll stats: rank=0 call=allreduce pinshm_calls=5 mpi_calls=0' >&2 ;;\n"
	"esac\n"
	"[ $plugin = 1 ] && echo 'pinshm-mpi stats: rank=0 family=p2p pinshm_msgs=10 pinshm_bytes=1 mpi_msgs=0' >&2\n"
	"exit 0\n";

static const char fake_perf_rounds[] =
	"#!/bin/sh\n"
	"n=$(cat probes 2>/dev/null || echo 0)\n"
	"echo $((n + 1)) >probes\n"
	"v=$(tr -s ' ' <list | cut -d' ' -f$((n + 1)))\n"
	"[ \"$v\" = x ] && echo 'no cache line' >&2\n"
	"echo transport,pattern,size,iterations,median_ns,p99_ns\n"
	"echo cacheline,pingpong,64,20000,$v,900\n";

/* A comparison of 5 rounds with the stand-ins, the probes taking @p list's
 * values in turn, "x" failing (each run starts the counts afresh). */
static void compare_probed(struct run *r, const char *list)
{
	unlink(in_dir(r, "calls"));
	unlink(in_dir(r, "probes"));
	write_file(r, "list", list, 0600);
	COMPARE(r, NULL, 0, "-r", "5", "-m", "./mpirun", "-p", "./plugin.so", "-b", "./bench", "-C", "./pinshm-perf",
		"-M", "latency,coll", "-R", "2", "-X", "none");
}

/*
 * Where the probes lie 2x apart or more, the rounds whose probes (5 a
 * round: before each of the 4 runs, and at the end) all lie on one side of
 * the cut are reduced apart, and a round that moved is in neither: 5
 * rounds, ratios 0.25 0.5 1.25 0.75 1.5; round 3 moved away and back (its
 * first and last probes close), round 5 has a probe at the cut (200,
 * sqrt(100 * 400)).  With the moved round in either part, or the probe at
 * the cut counted close, that part's median differs.  Then: a probe that
 * failed, a split with no round close together, every round moved, probes
 * less than 2x apart, every probe failed.
 */
START_TEST(test_compare_placement)
{
	struct run r;

	run_init(&r);
	write_file(&r, "mpirun", fake_mpirun_rounds, 0700);
	write_file(&r, "pinshm-perf", fake_perf_rounds, 0700);
	write_file(&r, "plugin.so", "", 0600);
	write_file(&r, "bench", "#!/bin/sh\nexit 0\n", 0700);
	compare_probed(&r, "100 110 100 110 100  400 400 400 400 400  105 400 400 400 105  120 100 100 100 100  "
			   "400 200 400 400 400");
	HAS(r.out, "2 rounds (median 100 ns) close together, 2 rounds (median 400 ns) far apart, 1 moved within the "
		   "round\n");
	HAS(r.out, "   ratios of\n");
	HAS(r.out, "     bytes    openmpi us    plugin us  ratio     median             range    close    far\n");
	HAS(r.out, "        64         8.000        6.000   0.75       0.75     0.25-1.50         0.50   1.00\n");
	HAS(r.out, "ratio (range)       close    far\n");
	HAS(r.out, "allreduce      2        8        8.000       6.000    0.75  0.25-1.50     0.50   1.00\n");
	/* A call and its barrier (cycle_us, one more than us): ratios (2F + 1) / 9. */
	HAS(r.out, "collectives, a call and the barrier after it (rank 0's mean time), 5 rounds\n");
	HAS(r.out, "allreduce      2        8        9.000       7.000    0.78  0.33-1.44     0.56   1.00\n");
	HAS(r.err, "round 3 of 5 done (openmpi first); cache line 105/400/400/400/105 ns (before each variant, at the end)");

	compare_probed(&r, "100 100 100 100 100  400 400 400 400 400  x 400 400 400 400  100 100 100 100 100  "
			   "400 400 400 400 400");
	HAS(r.out, " far apart, none moved within the round; 1 not probed (1 probe failed)\n");
	HAS(r.out, "        64         8.000        6.000   0.75       0.75     0.25-1.50         0.50   1.00\n");
	HAS(r.err, "round 3: the cache line probe (./pinshm-perf) failed: no cache line\n");
	HAS(r.err, "cache line -/400/400/400/400 ns");

	compare_probed(&r, "400 400 400 400 400  400 400 100 400 400  400 400 400 400 400  400 400 400 400 400  "
			   "400 400 400 400 400");
	HAS(r.out, ": no round close together, 4 rounds (median 400 ns) far apart, 1 moved within the round\n");
	HAS(r.out, "        64         8.000        6.000   0.75       0.75     0.25-1.50            -   1.00\n");

	/* Every round moved: no column of a placement. */
	compare_probed(&r, "100 400 100 100 100  100 400 100 100 100  100 400 100 100 100  100 400 100 100 100  "
			   "100 400 100 100 100");
	HAS(r.out, ": no round close together, no round far apart, 5 moved within the round\n");
	ck_assert_msg(strstr(r.out, "ratios of") == NULL, "a placement's column without a placed round:\n%s", r.out);

	/* 1.75x apart: one placement, no columns of it. */
	compare_probed(&r, "400 700 400 700 400  700 400 700 400 700  400 700 400 700 400  700 400 700 400 700  "
			   "400 700 400 700 400");
	HAS(r.out, "(pinshm-perf, CPUs 0 and 1): median 400 ns (400 to 700), in one placement\n");
	HAS(r.out, "        64         8.000        6.000   0.75       0.75     0.25-1.50    \n");
	ck_assert_msg(strstr(r.out, "close") == NULL, "a placement's column without a split:\n%s", r.out);

	compare_probed(&r, "x x x x x  x x x x x  x x x x x  x x x x x  x x x x x");
	HAS(r.out, "(pinshm-perf, CPUs 0 and 1): every probe failed\n");
	ck_assert_msg(strstr(r.out, "close") == NULL, "a placement's column without a probe:\n%s", r.out);
	run_done(&r);
}
END_TEST

/* Refused before anything runs: no gnuplot, a bad name, no such folder. */
START_TEST(test_compare_refused)
{
	struct run r;

	run_init(&r);
	fake_mpi(&r);
	COMPARE(&r, r.dir, 1, COMPARE_ARGS, "--plot", "mpi.png");
	HAS(r.err, "--plot: gnuplot is not in PATH");
	HAS(r.err, "gnuplot-nox");
	HAS(r.err, "nothing was measured");
	ck_assert_str_eq(r.out, "");
	COMPARE(&r, NULL, 1, COMPARE_ARGS, "-P", "mpi.pdf");
	HAS(r.err, "'mpi.pdf': the plot's name must end in .png or .svg");
	ck_assert_str_eq(r.out, "");
	COMPARE(&r, NULL, 1, COMPARE_ARGS, "-P", "no/such/mpi.png");
	HAS(r.err, "'no/such' is not a folder this user may write in");
	ck_assert_str_eq(r.out, "");
	COMPARE(&r, NULL, 2, COMPARE_ARGS, "--plot");
	ck_assert(!exists(&r, "mpi.png") && !exists(&r, "mpi.dat"));
	run_done(&r);
}
END_TEST

static Suite *perf_suite(int gnuplot)
{
	Suite *s = suite_create("pinshm-perf");
	TCase *tc = tcase_create("plot");

	tcase_set_timeout(tc, 300);
	if (gnuplot) {
		tcase_add_test(tc, test_plot_png);
		tcase_add_test(tc, test_plot_svg);
		tcase_add_test(tc, test_plot_nothing);
		tcase_add_test(tc, test_compare_plot);
	}
	tcase_add_test(tc, test_compare_refused);
	tcase_add_test(tc, test_compare_placement);
	tcase_add_test(tc, test_plot_without_gnuplot);
	tcase_add_test(tc, test_plot_gnuplot_fails);
	tcase_add_test(tc, test_plot_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("rounds");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_rounds_reduce);
	tcase_add_test(tc, test_rounds_reduce_stream);
	tcase_add_test(tc, test_rounds_reduce_placement);
	tcase_add_test(tc, test_rounds_table_placement);
	tcase_add_test(tc, test_rounds_csv);
	tcase_add_test(tc, test_rounds_table_json);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	char path[4096];
	int gnuplot = perf_find_in_path("gnuplot", path, sizeof(path)) == 0;

	if (tu_run_suite(perf_suite(gnuplot), true) != 0)
		return EXIT_FAILURE;
	if (!gnuplot) {
		printf("check_perf: gnuplot is not in PATH: the cases that draw a plot were skipped\n");
		return 77;
	}
	return EXIT_SUCCESS;
}
