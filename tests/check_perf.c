/*
 * check_perf.c - pinshm-perf's plot (--plot).
 *
 * Runs the pinshm-perf just built ($PINSHM_PERF) on tiny measurements in a
 * fresh folder under /tmp, with its output in files, and checks what it
 * writes: a PNG or an SVG drawn by gnuplot, with its data and script beside
 * it; a clear refusal, before anything is measured, where gnuplot is not in
 * PATH or the name is not .png or .svg; the data and script kept, and exit
 * status 1, where gnuplot fails.
 *
 * The cases that draw need gnuplot in PATH: without it they are left out,
 * and the program exits 77 (skipped) once the others have passed.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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

/* Run pinshm-perf ARGS (NULL-terminated) in the run's folder, with PATH set
 * to @path (NULL: as it is); fail the test if it hangs or is killed. */
static void perf_runv(struct run *r, const char *path, const char *const *args)
{
	const char *bin = getenv("PINSHM_PERF");
	const char *argv[24];
	char buf[32];
	int n = 0, st;

	if (!bin || !bin[0])
		bin = "clients/pinshm-perf";
	if (bin[0] != '/') {
		static char abs[4096];

		ck_assert(getcwd(abs, sizeof(abs) - strlen(bin) - 2) != NULL);
		strcat(abs, "/");
		strcat(abs, bin);
		bin = abs;
	}
	argv[n++] = "pinshm-perf";
	for (; *args && n < 23; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int ofd = open(in_dir(r, "stdout"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int efd = open(in_dir(r, "stderr"), O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (ofd < 0 || efd < 0 || dup2(ofd, 1) < 0 || dup2(efd, 2) < 0 || chdir(r->dir) < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (path != NULL)
			setenv("PATH", path, 1);
		execv(bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	uint64_t deadline = tu_now_ms() + RUN_MS;
	while (waitpid(pid, &st, WNOHANG) != pid) {
		if (tu_now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			ck_abort_msg("pinshm-perf did not exit in %d ms", RUN_MS);
		}
		tu_sleep_ms(5);
	}
	tu_read_file(in_dir(r, "stdout"), r->out, sizeof(r->out));
	tu_read_file(in_dir(r, "stderr"), r->err, sizeof(r->err));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) < 126, "pinshm-perf: %s\n%s",
		      tu_status_str(st, buf, sizeof(buf)), r->err);
	r->status = WEXITSTATUS(st);
}

/* Run "pinshm-perf ARGS..." with PATH @path and fail the test unless it exits @want. */
#define PERF(r, path, want, ...)                                                                              \
	do {                                                                                                  \
		perf_runv((r), (path), (const char *const[]){__VA_ARGS__, NULL});                             \
		ck_assert_msg((r)->status == (want), "pinshm-perf %s: exit %d, want %d\nstdout: %s\nstderr: %s", \
			      #__VA_ARGS__, (r)->status, (want), (r)->out, (r)->err);                         \
	} while (0)

#define HAS(text, s) ck_assert_msg(strstr((text), (s)) != NULL, "'%s' not in:\n%s", (s), (text))

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
	char buf[65536];

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
		int fd = open(in_dir(&r, "gnuplot"), O_WRONLY | O_CREAT | O_TRUNC, 0700);

		ck_assert(fd >= 0);
		ck_assert(write(fd, scripts[i], strlen(scripts[i])) == (ssize_t)strlen(scripts[i]));
		close(fd);
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

static Suite *perf_suite(int gnuplot)
{
	Suite *s = suite_create("pinshm-perf");
	TCase *tc = tcase_create("plot");

	tcase_set_timeout(tc, 300);
	if (gnuplot) {
		tcase_add_test(tc, test_plot_png);
		tcase_add_test(tc, test_plot_svg);
		tcase_add_test(tc, test_plot_nothing);
	}
	tcase_add_test(tc, test_plot_without_gnuplot);
	tcase_add_test(tc, test_plot_gnuplot_fails);
	tcase_add_test(tc, test_plot_refused);
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
