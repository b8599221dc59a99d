/*
 * check_feed.c - pinshm-feed ($PINSHM_FEED, the one just built) against a
 * pinshmd of its own: the OpenCL mode on whatever OpenCL platform is
 * installed (pocl on the CPU in CI; without one the feed exits 77 and the
 * tests say so and pass), with its data checked on the device and no host
 * copy; several producers; a producer killed mid-batch; the d2h
 * direction; the copy benchmark; and the CUDA mode, which exits 77 with a
 * clear reason where there is no GPU, and whose logic runs against a
 * double of the driver ($PINSHM_FAKE_CUDA_FEED, tests/fake_cuda_feed.c).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemonutil.h"
#include "testutil.h"

#define RUN_S 60

struct run {
	int status;
	char out[16384];
	char err[8192];
};

/* Run pinshm-feed @p args (a shell word list) with the daemon's socket,
 * its output in files of the daemon's folder. */
static void feed(struct run *r, const struct daemon *d, const char *args)
{
	const char *bin = getenv("PINSHM_FEED");
	char cmd[1024], out[160], err[160];

	snprintf(out, sizeof(out), "%s/feed.out", d->dir);
	snprintf(err, sizeof(err), "%s/feed.err", d->dir);
	snprintf(cmd, sizeof(cmd), "timeout -s KILL %d %s --socket %s %s >%s 2>%s", RUN_S,
		 bin && *bin ? bin : "clients/pinshm-feed", d->sock, args, out, err);
	int st = system(cmd);
	ck_assert_msg(st != -1 && WIFEXITED(st), "pinshm-feed %s: did not exit", args);
	r->status = WEXITSTATUS(st);
	tu_read_file(out, r->out, sizeof(r->out));
	tu_read_file(err, r->err, sizeof(r->err));
	unlink(out);
	unlink(err);
	ck_assert_msg(r->status != 137, "pinshm-feed %s: killed after %d s", args, RUN_S);
}

/* Run an OpenCL feed; false (said) where there is no OpenCL device. */
static bool feed_ok(struct run *r, const struct daemon *d, const char *args)
{
	feed(r, d, args);
	if (r->status == 77) {
		printf("SKIP: pinshm-feed %s: %s", args, r->err);
		return false;
	}
	ck_assert_msg(r->status == 0, "pinshm-feed %s: exit %d\n%s%s", args, r->status, r->out, r->err);
	return true;
}

/* The value of column @p col in CSV row @p row (1: the first after the header). */
static long long csv(const char *text, unsigned row, const char *col)
{
	char buf[16384], *save = NULL, *lines[64];
	unsigned n = 0;

	snprintf(buf, sizeof(buf), "%s", text);
	for (char *l = strtok_r(buf, "\n", &save); l && n < 64; l = strtok_r(NULL, "\n", &save))
		lines[n++] = l;
	ck_assert_msg(row < n, "no row %u in:\n%s", row, text);
	int at = -1, i = 0;
	for (char *c = lines[0], *s2 = NULL; (c = strtok_r(c == lines[0] ? lines[0] : NULL, ",", &s2)); c = NULL, i++)
		if (strcmp(c, col) == 0)
			at = i;
	ck_assert_msg(at >= 0, "no column %s in:\n%s", col, text);
	char *v = lines[row], *s3 = NULL;
	for (i = 0, v = strtok_r(v, ",", &s3); v && i < at; i++)
		v = strtok_r(NULL, ",", &s3);
	ck_assert_msg(v != NULL, "row %u has no column %s", row, col);
	return atoll(v);
}

#define HAS(text, s) ck_assert_msg(strstr((text), (s)) != NULL, "'%s' not in:\n%s", (s), (text))

/* Every test has a pinshmd of its own (a checked fixture: in the test's process). */
static struct daemon d;

static void daemon_up(void) { daemon_start(&d); }
static void daemon_down(void) { daemon_stop_ok(&d); }

/* The run's row says @p batches batches, none bad, @p copies host copies. */
static void row_ok(const struct run *r, long long batches, long long copies)
{
	ck_assert_int_eq(csv(r->out, 1, "batches"), batches);
	ck_assert_int_eq(csv(r->out, 1, "bad"), 0);
	ck_assert_int_eq(csv(r->out, 1, "host_copies"), copies);
}

/* Several producers, batches checked on the device, no host copy; the
 * staged path counts one host copy per batch. */
START_TEST(test_h2d)
{
	struct run r;

	if (feed_ok(&r, &d, "--device opencl --producers 3 --batch 64k --batches 120 --depth 3 --format csv")) {
		row_ok(&r, 120, 0);
		feed_ok(&r, &d, "--device opencl --producers 2 --batch 64k --batches 40 --staged --format csv");
		row_ok(&r, 40, 40);
	}
}
END_TEST

/* An overrun topic, producers far faster than the device: batches are
 * lost, and those overwritten under their copy are dropped, never
 * counted bad. */
START_TEST(test_overrun)
{
	struct run r;

	if (feed_ok(&r, &d, "--device opencl --overrun --producers 2 --batch 64k --seconds 1 --kernel-us 2000 "
			    "--format csv")) {
		ck_assert_int_eq(csv(r.out, 1, "bad"), 0);
		ck_assert_int_gt(csv(r.out, 1, "lost"), 0);
		printf("overrun: %lld batches, %lld dropped, %lld lost\n", csv(r.out, 1, "batches"),
		       csv(r.out, 1, "dropped"), csv(r.out, 1, "lost"));
	}
}
END_TEST

/* Producer 0 dies after 5 batches, in the middle of its sixth: the
 * consumer takes every batch the others made and checks them all. */
START_TEST(test_killed_producer)
{
	struct run r;

	if (feed_ok(&r, &d, "--device opencl --producers 3 --batch 64k --batches 90 --kill-producer-after 5 "
			    "--format csv")) {
		row_ok(&r, 30 + 30 + 5, 0);
		HAS(r.err, "process 0 was killed (signal 9)");
	}
}
END_TEST

/* The device fills records that 3 subscribers check. */
START_TEST(test_d2h)
{
	struct run r;

	if (feed_ok(&r, &d, "--device opencl --direction d2h --subscribers 3 --depth 3 --batch 64k --batches 60 "
			    "--kernel-us 100 --format csv")) {
		row_ok(&r, 60, 0);
		ck_assert_int_gt(csv(r.out, 1, "kernel_us"), 0);
	}
}
END_TEST

START_TEST(test_bench)
{
	struct run r;

	if (feed_ok(&r, &d, "--bench copy --device opencl --min-size 64k --max-size 256k --format csv")) {
		HAS(r.out, "what,size,h2d_GB_s,d2h_GB_s,ms_per_GiB,first_copy_us");
		HAS(r.out, "pinshm-registered,65536,");
		HAS(r.out, "runtime-pinned,262144,");
		HAS(r.out, "pageable,65536,");
		HAS(r.out, "pinshm-unregistered,262144,");
		HAS(r.out, "register+unregister,");
		HAS(r.out, "first-copy-after-open,");
	}
}
END_TEST

/* Without a GPU: exit 77 and why; with one, a short checked run. */
START_TEST(test_cuda)
{
	struct run r;

	feed(&r, &d, "--device cuda --batch 64k --batches 20 --format csv");
	if (r.status == 77) {
		HAS(r.err, "no cuda device");
	} else {
		ck_assert_msg(r.status == 0, "exit %d\n%s%s", r.status, r.out, r.err);
		row_ok(&r, 20, 0);
	}
	feed(&r, &d, "--device gpu");
	ck_assert_int_eq(r.status, 2);
	HAS(r.err, "--device: 'gpu' is not cuda, opencl");
}
END_TEST

/* The CUDA backend against the double: every copy to the device reads
 * the registered mapping in place; d2h and --staged as with OpenCL. */
START_TEST(test_cuda_double)
{
	const char *fake = getenv("PINSHM_FAKE_CUDA_FEED");
	struct run r;

	ck_assert_msg(fake && *fake, "PINSHM_FAKE_CUDA_FEED is not set (run through make check)");
	setenv("PINSHM_CUDA_LIBRARY", fake, 1);
	feed_ok(&r, &d, "--device cuda --producers 3 --batch 64k --batches 60 --depth 3 --kernel-us 10 --format csv");
	row_ok(&r, 60, 0);
	HAS(r.err, "h2d copies from registered memory 60, from other memory 0");
	feed_ok(&r, &d, "--device cuda --batch 64k --batches 20 --staged --format csv");
	row_ok(&r, 20, 20);
	HAS(r.err, "h2d copies from registered memory 0, from other memory 20");
	feed_ok(&r, &d, "--device cuda --direction d2h --subscribers 2 --depth 2 --batch 64k --batches 30 --format csv");
	row_ok(&r, 30, 0);
	feed_ok(&r, &d, "--bench copy --device cuda --min-size 64k --max-size 64k --format csv");
	HAS(r.out, "pinshm-registered,65536,");
}
END_TEST

/* A producer or subscriber that ends before it is ready (here: the
 * daemon takes one connection of the user, so no child can connect)
 * makes the feed fail at once and say so, never wait for it (it was
 * killed after RUN_S seconds). */
START_TEST(test_child_fails)
{
	const char *fake = getenv("PINSHM_FAKE_CUDA_FEED");
	static const char *const args[] = { "--device cuda --producers 2 --batch 64k --batches 8",
					    "--device cuda --direction d2h --subscribers 2 --batch 64k --batches 8" };
	struct daemon one;
	struct daemon_opts o = {.config = true};
	struct run r;

	ck_assert_msg(fake && *fake, "PINSHM_FAKE_CUDA_FEED is not set (run through make check)");
	setenv("PINSHM_CUDA_LIBRARY", fake, 1);
	daemon_start_config(&one, &o, "[daemon]\nmax_connections_per_user = 1\n");
	for (unsigned k = 0; k < 2; k++) {
		feed(&r, &one, args[k]);
		ck_assert_msg(r.status == 1, "%s: exit %d\n%s", args[k], r.status, r.err);
		HAS(r.err, "a child process ended before it was ready");
	}
	daemon_stop_ok(&one);
}
END_TEST

static Suite *feed_suite(void)
{
	Suite *s = suite_create("pinshm-feed");
	TCase *tc = tcase_create("opencl");

	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, daemon_up, daemon_down);
	tcase_add_test(tc, test_h2d);
	tcase_add_test(tc, test_overrun);
	tcase_add_test(tc, test_killed_producer);
	tcase_add_test(tc, test_d2h);
	tcase_add_test(tc, test_bench);
	tcase_add_test(tc, test_cuda);
	tcase_add_test(tc, test_cuda_double);
	tcase_add_test(tc, test_child_fails);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(feed_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
