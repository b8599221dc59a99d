/*
 * check_lifecycle.c - the lives of clients and of the daemon.
 *
 * - pidfd: a connection belongs to the process that made it; its death
 *   reaps the endpoints opened through it at once, even where a forked
 *   child still holds the socket, and a child's death does not touch it.
 *
 * - autostart: clients that race to connect where no daemon answers start
 *   exactly one (counted by a wrapper script around $PINSHMD), which exits
 *   once idle; a daemon that runs already is used; $PINSHM_AUTOSTART.
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
#include <sys/stat.h>
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

/* ======================================================================== */
/* autostart                                                                 */
/* ======================================================================== */

#define RACERS 8

struct autostart {
	char dir[64];
	char sock[128];
	char starts[128];  /* a line per pinshmd started through the wrapper */
	char wrapper[128];
	int release[2];    /* racers hold their connection until it closes */
	struct tu_reporter rep;
};

/* A folder with a wrapper around the pinshmd just built that counts its
 * starts; $PINSHMD names the wrapper, the daemon exits after 1 s idle. */
static void autostart_prepare(struct autostart *a)
{
	snprintf(a->dir, sizeof(a->dir), "/tmp/pinshm-autostart-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(a->dir));
	snprintf(a->sock, sizeof(a->sock), "%s/sock", a->dir);
	snprintf(a->starts, sizeof(a->starts), "%s/starts", a->dir);
	snprintf(a->wrapper, sizeof(a->wrapper), "%s/pinshmd", a->dir);
	FILE *f = fopen(a->wrapper, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "#!/bin/sh\necho \"$$\" >>'%s'\nexec '%s' \"$@\"\n", a->starts, pinshmd_path());
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(a->wrapper, 0700), 0);
	ck_assert_int_eq(setenv("PINSHMD", a->wrapper, 1), 0);
	ck_assert_int_eq(setenv("PINSHM_AUTOSTART_IDLE", "1", 1), 0);
	unsetenv("PINSHM_AUTOSTART");
	/* The daemons detach: they become this process's children when their
	 * parents exit, to be waited for here. */
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
}

static unsigned count_starts(const struct autostart *a)
{
	FILE *f = fopen(a->starts, "r");
	unsigned n = 0;
	int c;

	if (!f)
		return 0;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* The pid of the daemon that @p c is connected to. */
static pid_t daemon_pid(pinshm_client_t *c)
{
	pinshm_status_t st;

	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	return (pid_t)st.pid;
}

/* Wait until the detached daemon @p pid exits on its own (idle); check
 * that it exited 0 and removed its socket. */
static void wait_idle_exit(const struct autostart *a, pid_t pid, int ms)
{
	int status;
	pid_t w = 0;
	uint64_t deadline = tu_now_ms() + (uint64_t)ms;

	while ((w = waitpid(pid, &status, WNOHANG)) == 0 && tu_now_ms() < deadline)
		tu_sleep_ms(20);
	if (w == 0)
		kill(pid, SIGKILL);
	ck_assert_msg(w == pid, "the auto-started daemon %d did not exit when idle (%s)", (int)pid,
		      w < 0 ? strerror(errno) : "still running");
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the daemon exited with status %#x", status);
	ck_assert_msg(access(a->sock, F_OK) != 0, "the daemon left its socket");
}

static void autostart_cleanup(struct autostart *a)
{
	char path[192];
	const char *files[] = {"sock", "sock.lock", "sock.start", "starts", "pinshmd"};

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", a->dir, files[i]);
		unlink(path);
	}
	rmdir(a->dir);
}

static int racer(void *arg, int idx)
{
	struct autostart *a = arg;
	pinshm_client_t *c;
	pinshm_status_t st;
	char b;

	close(a->release[1]);
	int rc = pinshm_connect_flags(a->sock, PINSHM_CONNECT_AUTOSTART, &c);
	if (rc != 0)
		tu_child_fail(2, "connect: %s (%s)", pinshm_strerror(rc), pinshm_client_error(NULL));
	rc = pinshm_status(c, &st, NULL, NULL);
	if (rc != 0)
		tu_child_fail(3, "status: %s", pinshm_strerror(rc));
	tu_report_vals(&a->rep, idx, 0, st.pid, 0);
	while (read(a->release[0], &b, 1) < 0 && errno == EINTR) /* until released */
		;
	pinshm_disconnect(c);
	return 0;
}

/* RACERS clients connect at once where no daemon runs: one starts, all
 * use it; it exits once they are gone. */
START_TEST(test_autostart_race)
{
	struct autostart a;
	struct tu_procs ps;
	struct tu_report r;
	pid_t pid = 0;

	autostart_prepare(&a);
	ck_assert_int_eq(pipe(a.release), 0);
	tu_reporter_open(&a.rep);
	tu_procs_init(&ps);
	for (int i = 0; i < RACERS; i++)
		tu_spawn(&ps, "racer", racer, &a, i);
	close(a.release[0]);
	for (int i = 0; i < RACERS; i++) {
		TU_RC(tu_collect(&a.rep, &r, WAIT_MS), 0);
		ck_assert_int_ne(r.v[0], 0);
		if (i == 0)
			pid = (pid_t)r.v[0];
		ck_assert_msg((pid_t)r.v[0] == pid, "racer %d uses daemon %d, another %d", r.who, (int)r.v[0],
			      (int)pid);
	}
	ck_assert_uint_eq(count_starts(&a), 1);
	close(a.release[1]);
	tu_wait_all_ok(&ps, WAIT_MS);
	wait_idle_exit(&a, pid, 20000);
	ck_assert_uint_eq(count_starts(&a), 1);
	tu_reporter_close(&a.rep);
	autostart_cleanup(&a);
}
END_TEST

/* A daemon that runs already is used, not started again. */
START_TEST(test_autostart_running)
{
	struct autostart a;
	struct daemon d;
	pinshm_client_t *c;

	daemon_start(&d);
	autostart_prepare(&a);
	CLIENT_RC(NULL, pinshm_connect_flags(d.sock, PINSHM_CONNECT_AUTOSTART, &c), 0);
	ck_assert_int_eq(daemon_pid(c), d.pid);
	ck_assert_uint_eq(count_starts(&a), 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	autostart_cleanup(&a);
}
END_TEST

/* $PINSHM_AUTOSTART: 0 forbids it even to the flag, 1 allows it to a
 * plain pinshm_connect(); unknown flags are refused.  A daemon with a
 * channel alive does not exit idle. */
START_TEST(test_autostart_env)
{
	struct autostart a;
	pinshm_client_t *c;
	pinshm_channel_attr_t attr;

	autostart_prepare(&a);
	CLIENT_RC(NULL, pinshm_connect_flags(a.sock, 0x80, &c), -EINVAL);
	CLIENT_RC(NULL, pinshm_connect(a.sock, &c), -ENOENT);
	ck_assert_int_eq(setenv("PINSHM_AUTOSTART", "0", 1), 0);
	CLIENT_RC(NULL, pinshm_connect_flags(a.sock, PINSHM_CONNECT_AUTOSTART, &c), -ENOENT);
	ck_assert_uint_eq(count_starts(&a), 0);

	ck_assert_int_eq(setenv("PINSHM_AUTOSTART", "1", 1), 0);
	CLIENT_RC(NULL, pinshm_connect(a.sock, &c), 0);
	ck_assert_uint_eq(count_starts(&a), 1);
	pid_t pid = daemon_pid(c);
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "keep", &attr, 0600, PINSHM_PERSISTENT), 0);
	pinshm_disconnect(c);
	tu_sleep_ms(2500); /* past the idle time: the persistent channel keeps it */
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
	CLIENT_RC(NULL, pinshm_connect(a.sock, &c), 0);
	ck_assert_int_eq(daemon_pid(c), pid);
	CLIENT_RC(c, pinshm_unlink(c, "keep"), 0);
	pinshm_disconnect(c);
	wait_idle_exit(&a, pid, 20000);
	ck_assert_uint_eq(count_starts(&a), 1);
	autostart_cleanup(&a);
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

	tc = tcase_create("autostart");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_autostart_race);
	tcase_add_test(tc, test_autostart_running);
	tcase_add_test(tc, test_autostart_env);
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
