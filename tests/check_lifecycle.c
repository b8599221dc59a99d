/*
 * check_lifecycle.c - the lives of clients and of the daemon.
 *
 * - pidfd: a connection belongs to the process that made it; its death
 *   reaps the endpoints opened through it at once, even where a forked
 *   child still holds the socket, and a child's death does not touch it.
 *
 * Every test starts a real pinshmd (tests/daemonutil.h) and stops it,
 * checking that it exits cleanly.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemonutil.h"
#include "pinshm.h"
#include "testutil.h"

#define KiB 1024u
#define WAIT_MS 60000 /* for the children of a test */
#define CALL_MS 20000 /* for one blocking call */
#define HOLD_MS 30000 /* the longest a grandchild holds a socket when nobody kills it */

static void attr_small(pinshm_channel_attr_t *a, unsigned producers, unsigned consumers)
{
	tu_attr(a, PINSHM_QUEUE, 64 * KiB, producers, consumers);
}

/* In a child: connect and open, or fail the child. */
static pinshm_channel_t *child_open(const char *sock, const char *name, pinshm_role_t role, pinshm_client_t **c)
{
	pinshm_channel_t *ch;
	int rc = pinshm_connect(sock, c);

	if (rc != 0)
		tu_child_fail(2, "connect: %s (%s)", pinshm_strerror(rc), pinshm_client_error(NULL));
	rc = pinshm_open(*c, name, role, &ch);
	if (rc != 0)
		tu_child_fail(3, "open %s: %s (%s)", name, pinshm_strerror(rc), pinshm_client_error(*c));
	return ch;
}

/* Whether the daemon lists a connection of process @p pid. */
static bool has_client_pid(pinshm_client_t *c, pid_t pid)
{
	pinshm_client_info_t *info;
	size_t n;
	bool found = false;

	CLIENT_RC(c, pinshm_clients(c, &info, &n), 0);
	for (size_t i = 0; i < n; i++)
		found |= info[i].pid == (uint32_t)pid;
	free(info);
	return found;
}

/* ======================================================================== */
/* pidfd                                                                     */
/* ======================================================================== */

struct forker {
	const char *sock;
	struct tu_reporter rep;
};

/* Open the producer, send one message, fork a grandchild that holds the
 * connection (and sleeps), report its pid, wait to be killed. */
static int forking_producer(void *arg, int idx)
{
	struct forker *x = arg;
	pinshm_client_t *c;
	pinshm_channel_t *ch = child_open(x->sock, "fork", PINSHM_PRODUCER, &c);

	(void)idx;
	int rc = pinshm_send(ch, "first", 5, CALL_MS);
	if (rc != 0)
		tu_child_fail(4, "send: %s", pinshm_strerror(rc));
	pid_t g = fork();
	if (g < 0)
		tu_child_fail(5, "fork: %s", strerror(errno));
	if (g == 0) { /* holds the socket and the mapping; no death signal */
		for (int i = 0; i < HOLD_MS / 100; i++)
			tu_sleep_ms(100);
		_exit(0);
	}
	tu_report_vals(&x->rep, 0, 0, (uint64_t)g, (uint64_t)getpid());
	for (int i = 0; i < WAIT_MS / 100; i++) /* until killed */
		tu_sleep_ms(100);
	return 1;
}

/* The producer is killed while a child it forked holds its connection: the
 * consumer gets -EPIPE within a second, and the connection is gone. */
START_TEST(test_pidfd_forked_holder)
{
	struct daemon d;
	struct forker x;
	struct tu_procs ps;
	struct tu_report r;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *cons;
	char buf[16];
	size_t len;

	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0); /* the grandchild is reaped here */
	daemon_start(&d);
	x.sock = d.sock;
	pinshm_client_t *c = connect_ok(&d);
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "fork", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_open(c, "fork", PINSHM_CONSUMER, &cons), 0);
	tu_reporter_open(&x.rep);
	tu_procs_init(&ps);
	int prod = tu_spawn(&ps, "producer", forking_producer, &x, 0);

	TU_RC(tu_collect(&x.rep, &r, WAIT_MS), 0);
	pid_t grandchild = (pid_t)r.v[0];
	ck_assert_int_eq((pid_t)r.v[1], ps.pid[prod]);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert(has_client_pid(c, ps.pid[prod]));

	ck_assert_int_eq(kill(ps.pid[prod], SIGKILL), 0);
	uint64_t t0 = tu_now_ms();
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, 5000), -EPIPE);
	uint64_t waited = tu_now_ms() - t0;
	ck_assert_msg(waited < 1000, "-EPIPE came %llu ms after the kill", (unsigned long long)waited);
	ck_assert_msg(kill(grandchild, 0) == 0, "the grandchild holding the connection is gone already");
	ck_assert(!has_client_pid(c, ps.pid[prod]));

	kill(grandchild, SIGKILL);
	ck_assert_int_eq(waitpid(grandchild, NULL, 0), grandchild);
	tu_wait_all(&ps, WAIT_MS);
	pinshm_channel_close(cons);
	tu_reporter_close(&x.rep);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A child that inherited the connection exits: nothing of the parent's is
 * reaped, and the connection keeps serving it. */
START_TEST(test_pidfd_child_exit)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *prod, *cons;
	char buf[16];
	size_t len;
	int status;

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "fork", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_open(c, "fork", PINSHM_CONSUMER, &cons), 0);
	CLIENT_RC(c, pinshm_open(c, "fork", PINSHM_PRODUCER, &prod), 0);
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0)
		_exit(0);
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	tu_sleep_ms(200); /* time for a wrong reap to happen */

	TU_RC(pinshm_send(prod, "after", 5, CALL_MS), 0);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert_uint_eq(len, 5);
	ck_assert(has_client_pid(c, getpid()));
	pinshm_channel_close(prod);
	pinshm_channel_close(cons);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

static Suite *lifecycle_suite(void)
{
	Suite *s = suite_create("lifecycle");
	TCase *tc = tcase_create("pidfd");

	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_pidfd_forked_holder);
	tcase_add_test(tc, test_pidfd_child_exit);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(lifecycle_suite());
	int failed;

	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
