/*
 * check_demo.c - pinshm-demo's command line.
 *
 * Runs the pinshm-demo just built ($PINSHM_DEMO) with its output in files
 * of a fresh folder under /tmp, and checks its exit status and what it
 * says: numbers that are not numbers, carry junk or are out of range are
 * refused with exit status 2 before anything runs; --help and -h print the
 * usage on stdout and exit 0; numbers in every accepted base run a short
 * demo on an anonymous segment (no daemon); a process that cannot attach
 * (a daemon of the test's own refuses its connection) ends the run with
 * exit status 1, never a hang.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemonutil.h"
#include "testutil.h"

#define RUN_MS 20000 /* for one pinshm-demo run */

struct run {
	int status; /* exit status */
	char out[8192];
	char err[8192];
};

/* Run pinshm-demo with @p args (NULL-terminated); fail the test if it does
 * not exit in time or is killed. */
static void demo_runv(struct run *r, const char *const *args)
{
	char dir[] = "/tmp/pinshm-demo-check-XXXXXX", out[64], err[64];
	const char *argv[16];
	const char *bin = getenv("PINSHM_DEMO");
	int n = 0;

	if (!bin || !bin[0])
		bin = "clients/pinshm-demo";
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(err, sizeof(err), "%s/err", dir);
	argv[n++] = "pinshm-demo";
	for (; *args && n < 15; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	r->status = prog_run(bin, argv, NULL, out, err, RUN_MS);
	tu_read_file(out, r->out, sizeof(r->out));
	tu_read_file(err, r->err, sizeof(r->err));
	unlink(out);
	unlink(err);
	rmdir(dir);
}

/* Run "pinshm-demo ARGS..." and fail the test unless it exits @p want. */
#define DEMO(r, want, ...)                                                                                    \
	do {                                                                                                  \
		demo_runv((r), (const char *const[]){__VA_ARGS__, NULL});                                     \
		ck_assert_msg((r)->status == (want), "pinshm-demo %s: exit %d, want %d\nstdout: %s\nstderr: %s", \
			      #__VA_ARGS__, (r)->status, (want), (r)->out, (r)->err);                         \
	} while (0)

#define HAS(text, s) ck_assert_msg(strstr((text), (s)) != NULL, "'%s' not in:\n%s", (s), (text))

/* Each refused before any process starts: exit 2, the option and value named
 * on stderr, the usage after it, nothing on stdout. */
START_TEST(test_bad_numbers)
{
	static const struct {
		const char *opt, *value, *said;
	} bad[] = {
		{"-n", "abc", "-n: 'abc' is not a number"},
		{"-p", "2x", "-p: '2x' is not a number"},
		{"-c", "1.5", "-c: '1.5' is not a number"},
		{"-s", "64k", "-s: '64k' is not a number"},
		{"-n", "", "-n: '' is not a number"},
		{"-n", "-1", "-n: '-1' is not a number"},
		{"-n", " 5", "-n: ' 5' is not a number"},
		{"-n", "0x", "-n: '0x' is not a number"},
		{"-n", "0", "from 1 to 1000000000000"},
		{"-n", "1000000000001", "from 1 to 1000000000000"},
		{"-n", "18446744073709551616", "from 1 to 1000000000000"}, /* 2^64: strtoull's ERANGE */
		{"-p", "0", "-p: '0' is not a number from 1 to 16"},
		{"-p", "17", "-p: '17' is not a number from 1 to 16"},
		{"-c", "0x11", "-c: '0x11' is not a number from 1 to 16"},
		{"-s", "23", "-s: '23' is not a number from 24 to 65536"},
		{"-s", "65537", "-s: '65537' is not a number from 24 to 65536"},
	};
	struct run r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		demo_runv(&r, (const char *const[]){bad[i].opt, bad[i].value, "-p", "1", "-c", "1", NULL});
		ck_assert_msg(r.status == 2, "pinshm-demo %s '%s': exit %d, want 2\nstdout: %s\nstderr: %s", bad[i].opt,
			      bad[i].value, r.status, r.out, r.err);
		HAS(r.err, bad[i].said);
		HAS(r.err, "usage: pinshm-demo");
		ck_assert_msg(r.out[0] == '\0', "%s %s: ran anyway:\n%s", bad[i].opt, bad[i].value, r.out);
	}
	DEMO(&r, 2, "-t", "stack");
	HAS(r.err, "-t: 'stack' is neither queue nor topic");
	DEMO(&r, 2, "-n", "10", "extra");
	HAS(r.err, "unexpected argument 'extra'");
	ck_assert_str_eq(r.out, "");
}
END_TEST

START_TEST(test_help)
{
	struct run r;

	DEMO(&r, 0, "--help");
	HAS(r.out, "usage: pinshm-demo");
	HAS(r.out, "--help");
	ck_assert_str_eq(r.err, "");
	DEMO(&r, 0, "-h");
	HAS(r.out, "usage: pinshm-demo");
	ck_assert_str_eq(r.err, "");
	DEMO(&r, 0, "--version");
	HAS(r.out, "pinshm-demo ");
	HAS(r.out, pinshm_version());
	DEMO(&r, 2, "--no-such-option");
	HAS(r.err, "usage: pinshm-demo");
	ck_assert_str_eq(r.out, "");
}
END_TEST

/* Decimal, hexadecimal and octal give the counts they say. */
START_TEST(test_good_numbers)
{
	struct run r;

	DEMO(&r, 0, "-p", "0x2", "-c", "01", "-n", "0x64", "-s", "0100");
	HAS(r.out, "2 producer(s), 1 consumer(s), 200 messages of 64 bytes each");
	HAS(r.out, "received 200 messages");
	HAS(r.out, "OK");
	DEMO(&r, 0, "-t", "topic", "-p", "1", "-c", "2", "-n", "50", "-s", "24");
	HAS(r.out, "1 producer(s), 2 consumer(s), 50 messages of 24 bytes each");
	HAS(r.out, "received 100 messages");
	HAS(r.out, "OK");
}
END_TEST

/* A process that cannot attach ends the run with a failure, never a hang:
 * the daemon takes two connections of the user (the demo's and the first
 * consumer's), so the second consumer is refused. */
START_TEST(test_attach_fails)
{
	struct daemon d;
	struct daemon_opts o = {.config = true};
	struct run r;

	daemon_start_config(&d, &o, "[daemon]\nmax_connections_per_user = 2\n");
	DEMO(&r, 1, "-S", d.sock, "-p", "1", "-c", "2", "-n", "1000");
	HAS(r.err, "consumer "); /* whichever of the two connected second */
	HAS(r.err, ": attach: ");
	HAS(r.out, "FAILED");
	DEMO(&r, 1, "-S", d.sock, "-p", "2", "-c", "1", "-n", "1000");
	HAS(r.err, "producer ");
	HAS(r.err, ": attach: ");
	HAS(r.out, "FAILED");
	daemon_stop_ok(&d);
}
END_TEST

static Suite *demo_suite(void)
{
	Suite *s = suite_create("pinshm-demo");
	TCase *tc = tcase_create("command line");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_bad_numbers);
	tcase_add_test(tc, test_help);
	tcase_add_test(tc, test_good_numbers);
	suite_add_tcase(s, tc);
	tc = tcase_create("failures");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_attach_fails);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(demo_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
