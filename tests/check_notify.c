/*
 * check_notify.c - eventfd wake-ups through pinshmd across its restarts.
 *
 * A consumer in an event loop gives the daemon its eventfd (NOTIFY); a
 * producer opened through the daemon that finds it armed asks the daemon
 * for it (PEER) and writes it.  These tests kill the daemon with SIGKILL
 * while a producer has not fetched the eventfd yet, so that its fetch
 * fails, and check that the fetch is not a final answer:
 *
 * - rewake: after a new daemon takes the channel back (the clients
 *   reconnect, explicitly or by themselves), the producer's next messages
 *   wake the armed consumer again; a consumer that came back with a new
 *   generation gets its own eventfd written, not the old one.
 * - bounded: while no daemon answers (a stand-in socket that accepts and
 *   closes, counting), and while the daemon refuses (a consumer that never
 *   handed its eventfd back; the daemon's log at -vv), a producer sending
 *   to an armed consumer asks again at most about every 50 ms, not once a
 *   message.
 *
 * Every test starts a real pinshmd (tests/daemonutil.h); both clients live
 * in the test process.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemonutil.h"
#include "pinshm.h"
#include "testutil.h"

#define WAKE_MS 10000 /* for an eventfd to be written: a generous bound, no timing claim */
#define SEND_EVERY_MS 10 /* between the messages of a producer that waits for a wake-up */
#define RETRY_SPACING_MS 50 /* the least time between two fetches of one eventfd, with slack */
#define BURST (200000u / TU_SLOWDOWN) /* messages sent to an armed consumer that cannot be woken, */
#define BURST_MS 1000                 /* over this long at least: the retries' wait grows to its most */

/* A new daemon on the same socket (its log appended to d->log if @p log). */
static void daemon_restart(struct daemon *d, bool log)
{
	daemon_spawn(d, &(struct daemon_opts){.log = log, .verbose = log});
	daemon_wait_ready(d);
}

/* Receive every message ready on @p cons. @return how many. */
static unsigned drain(pinshm_channel_t *cons)
{
	char buf[64];
	size_t len;
	unsigned n = 0;
	int rc;

	while ((rc = pinshm_recv(cons, buf, sizeof(buf), &len, PINSHM_NONBLOCK)) == 0)
		n++;
	TU_RC(rc, -EAGAIN);
	return n;
}

/* A daemon, queue "n" (one producer, one consumer), consumer @p cons armed
 * on eventfd @p efd through client @p cc, producer @p prod through @p cp. */
struct scene_notify {
	struct daemon d;
	pinshm_client_t *cc, *cp;
	pinshm_channel_t *cons, *prod;
	int efd;
};

static void notify_start(struct scene_notify *s, bool log)
{
	unsetenv("NOTIFY_SOCKET"); /* no descriptor store: the clients hand the channel back */
	ck_assert_int_eq(setenv("PINSHM_AUTOSTART", "0", 1), 0);
	daemon_start_opts(&s->d, &(struct daemon_opts){.log = log, .verbose = log});
	s->cc = connect_create_small(&s->d, "n");
	CLIENT_RC(s->cc, pinshm_open(s->cc, "n", PINSHM_CONSUMER, &s->cons), 0);
	s->efd = notify_fd(s->cc, s->cons);
	TU_RC(pinshm_channel_arm(s->cons), 0);
	s->cp = connect_ok(&s->d);
	CLIENT_RC(s->cp, pinshm_open(s->cp, "n", PINSHM_PRODUCER, &s->prod), 0);
}

/* The daemon killed, then a message: the producer finds the consumer armed
 * and cannot fetch its eventfd, which stays unwritten. */
static void kill_and_send(struct scene_notify *s)
{
	daemon_kill9(&s->d);
	TU_RC(pinshm_send(s->prod, "a", 1, PINSHM_NONBLOCK), 0);
	ck_assert_msg(!tu_efd_written(s->efd, 0), "the eventfd was written with no daemon to fetch it from");
}

static void notify_end(struct scene_notify *s)
{
	pinshm_channel_close(s->prod);
	if (s->cons)
		pinshm_channel_close(s->cons);
	pinshm_disconnect(s->cc);
	pinshm_disconnect(s->cp);
	if (s->d.pid)
		daemon_stop_ok(&s->d);
	else
		daemon_stop(&s->d);
}

/* The consumer, woken or not by its hand-back, receives what came (@p want
 * messages) and arms again. */
static void consumer_catch_up(struct scene_notify *s, unsigned want)
{
	(void)tu_efd_written(s->efd, 0); /* the hand-back's NOTIFY wakes it if armed */
	ck_assert_uint_eq(drain(s->cons), want);
	TU_RC(pinshm_channel_arm(s->cons), 0);
}

/* The producer sends a message every SEND_EVERY_MS until eventfd @p efd is
 * written, WAKE_MS at most.  @return how many it sent (the test fails if
 * the eventfd was not written). */
static unsigned send_until_woken(pinshm_channel_t *prod, int efd)
{
	uint64_t deadline = tu_now_ms() + WAKE_MS;
	unsigned sent = 0;

	for (;;) {
		TU_RC(pinshm_send(prod, "m", 1, PINSHM_NONBLOCK), 0);
		sent++;
		if (tu_efd_written(efd, SEND_EVERY_MS))
			return sent;
		ck_assert_msg(tu_now_ms() < deadline, "the armed consumer's eventfd was not written in %d ms (%u sent)",
			      WAKE_MS, sent);
	}
}

/*
 * The producer's fetch failed while no daemon ran; both clients reconnect
 * (pinshm_reconnect()) to a new daemon, the consumer drains and arms
 * again: the producer's next message writes the consumer's eventfd.  (It
 * did not: the failed fetch was kept as the answer for that generation.)
 */
START_TEST(test_rewake_after_reconnect)
{
	struct scene_notify s = {0};
	char buf[16];
	size_t len;

	notify_start(&s, false);
	kill_and_send(&s);
	daemon_restart(&s.d, false);
	CLIENT_RC(s.cc, pinshm_reconnect(s.cc), 0); /* hands "n" back, and NOTIFY */
	CLIENT_RC(s.cp, pinshm_reconnect(s.cp), 0);
	consumer_catch_up(&s, 1);
	TU_RC(pinshm_send(s.prod, "b", 1, PINSHM_NONBLOCK), 0);
	ck_assert_msg(tu_efd_written(s.efd, WAKE_MS), "the armed consumer's eventfd was not written in %d ms", WAKE_MS);
	TU_RC(pinshm_recv(s.cons, buf, sizeof(buf), &len, PINSHM_NONBLOCK), 0);
	ck_assert(len == 1 && buf[0] == 'b');
	notify_end(&s);
}
END_TEST

/*
 * The same where the producer's program does nothing about the restart
 * but one request on its client (a status), which reconnects it by
 * itself: its later messages ask again, and one of them wakes the
 * consumer; every message arrives.
 */
START_TEST(test_rewake_client_reconnects_itself)
{
	struct scene_notify s = {0};
	pinshm_status_t st;

	notify_start(&s, false);
	kill_and_send(&s);
	daemon_restart(&s.d, false);
	CLIENT_RC(s.cc, pinshm_reconnect(s.cc), 0);
	consumer_catch_up(&s, 1);
	CLIENT_RC(s.cp, pinshm_status(s.cp, &st, NULL, NULL), 0);
	unsigned sent = send_until_woken(s.prod, s.efd);
	ck_assert_uint_eq(drain(s.cons), sent);
	notify_end(&s);
}
END_TEST

/*
 * A consumer that left while no daemon ran, and a new one at the same
 * endpoint (a new generation) opened through the new daemon with an
 * eventfd of its own: the producer, whose fetch for the old one failed,
 * writes the new one's eventfd, and never the old one's.
 */
START_TEST(test_rewake_new_generation)
{
	struct scene_notify s = {0};

	notify_start(&s, false);
	kill_and_send(&s);
	int old = dup(s.efd); /* the old consumer's socket, kept to see it is not woken */
	(void)pinshm_channel_close(s.cons); /* CLOSE fails: no daemon; the endpoint is closed */
	s.cons = NULL;
	daemon_restart(&s.d, false);
	CLIENT_RC(s.cp, pinshm_reconnect(s.cp), 0); /* hands "n" back */
	CLIENT_RC(s.cc, pinshm_reconnect(s.cc), 0); /* nothing to hand back */
	CLIENT_RC(s.cc, pinshm_open(s.cc, "n", PINSHM_CONSUMER, &s.cons), 0);
	int efd2 = notify_fd(s.cc, s.cons);
	(void)drain(s.cons); /* "a", if a new consumer of a queue sees it */
	TU_RC(pinshm_channel_arm(s.cons), 0);
	unsigned sent = send_until_woken(s.prod, efd2);
	ck_assert_msg(!tu_efd_written(old, 0), "the old consumer's socket was woken");
	ck_assert_uint_eq(drain(s.cons), sent);
	close(old);
	notify_end(&s);
}
END_TEST

/* Send BURST messages or more, for BURST_MS at least, to armed consumer
 * @p cons that nobody can wake: each one finds it armed.  A full ring is
 * drained and the consumer armed again; so is the ring at the end.
 * @return the milliseconds it took; *@p sent: how many were sent. */
static uint64_t send_burst(pinshm_channel_t *prod, pinshm_channel_t *cons, unsigned *sent)
{
	uint64_t t0 = tu_now_ms();
	unsigned i = 0;

	while (i < BURST || tu_now_ms() - t0 < BURST_MS) {
		int rc = pinshm_send(prod, &i, sizeof(i), PINSHM_NONBLOCK);
		if (rc == 0) {
			i++;
			continue;
		}
		TU_RC(rc, -EAGAIN);
		ck_assert_uint_gt(drain(cons), 0);
		TU_RC(pinshm_channel_arm(cons), 0);
	}
	uint64_t ms = tu_now_ms() - t0;
	(void)drain(cons);
	TU_RC(pinshm_channel_arm(cons), 0);
	*sent = i;
	return ms;
}

/* What stands at the daemon's socket while it is away: it accepts each
 * connection and closes it at once (the client's HELLO fails at once),
 * counting them. */
struct stand_in {
	int sock;
	atomic_bool stop;
	atomic_uint accepted;
	pthread_t thread;
};

static void *stand_in_run(void *arg)
{
	struct stand_in *f = arg;

	while (!atomic_load(&f->stop)) {
		struct pollfd p = {.fd = f->sock, .events = POLLIN};
		if (poll(&p, 1, 20) != 1)
			continue;
		int c = accept4(f->sock, NULL, NULL, SOCK_CLOEXEC);
		if (c >= 0) {
			atomic_fetch_add(&f->accepted, 1);
			close(c);
		}
	}
	return NULL;
}

static void stand_in_start(struct stand_in *f, const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	unlink(path); /* the killed daemon's */
	f->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(f->sock, 0);
	ck_assert_int_eq(bind(f->sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->sock, 64), 0);
	atomic_init(&f->stop, false);
	atomic_init(&f->accepted, 0);
	ck_assert_int_eq(pthread_create(&f->thread, NULL, stand_in_run, f), 0);
}

static unsigned stand_in_stop(struct stand_in *f, const char *path)
{
	atomic_store(&f->stop, true);
	ck_assert_int_eq(pthread_join(f->thread, NULL), 0);
	close(f->sock);
	unlink(path);
	return atomic_load(&f->accepted);
}

/* Check that @p attempts fetches for @p sent messages over @p ms are at
 * least one (asked again) and at most about one per RETRY_SPACING_MS. */
static void assert_attempts_bounded(unsigned attempts, unsigned sent, uint64_t ms, const char *what)
{
	printf("check_notify: %u messages in %llu ms: %u %s\n", sent, (unsigned long long)ms, attempts, what);
	ck_assert_msg(attempts >= 1, "no %s: the producer never asked again", what);
	ck_assert_msg(attempts <= 2 + ms / RETRY_SPACING_MS, "%u %s for %u messages in %llu ms", attempts, what,
		      sent, (unsigned long long)ms);
}

/*
 * A new consumer of the endpoint, armed soon after the producer's fetch of
 * the previous consumer's eventfd was refused: one message, nothing after,
 * must wake it (the wait after a failure is for the same consumer only).
 */
START_TEST(test_new_consumer_after_refusal)
{
	struct scene_notify s = {0};

	notify_start(&s, false);
	kill_and_send(&s);
	daemon_restart(&s.d, false);
	CLIENT_RC(s.cp, pinshm_reconnect(s.cp), 0); /* the producer is back; the consumer's client is not */
	/* The producer finds the consumer armed; the daemon has no eventfd for it. */
	TU_RC(pinshm_send(s.prod, "r", 1, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(drain(s.cons), 2);
	pinshm_channel_close(s.cons);
	pinshm_client_t *cc2 = connect_ok(&s.d);
	CLIENT_RC(cc2, pinshm_open(cc2, "n", PINSHM_CONSUMER, &s.cons), 0);
	int efd2 = notify_fd(cc2, s.cons);
	TU_RC(pinshm_channel_arm(s.cons), 0);
	TU_RC(pinshm_send(s.prod, "x", 1, PINSHM_NONBLOCK), 0);
	ck_assert_msg(tu_efd_written(efd2, WAKE_MS), "the new consumer's eventfd was not written");
	ck_assert_uint_eq(drain(s.cons), 1);
	pinshm_channel_close(s.cons);
	s.cons = NULL;
	pinshm_disconnect(cc2);
	notify_end(&s);
}
END_TEST

/*
 * A consumer gives its eventfd first after a restart: the client reconnects
 * inside that request, and the descriptor goes with the NOTIFY, not with
 * the reconnect's HELLO (which made the new daemon close the connection
 * and left the client broken for good).
 */
START_TEST(test_notify_fd_after_restart)
{
	struct daemon d = {0};
	pinshm_channel_t *cons, *prod;

	unsetenv("NOTIFY_SOCKET");
	ck_assert_int_eq(setenv("PINSHM_AUTOSTART", "0", 1), 0);
	daemon_start_opts(&d, &(struct daemon_opts){0});
	pinshm_client_t *cc = connect_create_small(&d, "late");
	CLIENT_RC(cc, pinshm_open(cc, "late", PINSHM_CONSUMER, &cons), 0);
	pinshm_client_t *cp = connect_ok(&d);
	CLIENT_RC(cp, pinshm_open(cp, "late", PINSHM_PRODUCER, &prod), 0);
	daemon_kill9(&d);
	daemon_restart(&d, false);
	int efd = notify_fd(cc, cons);
	TU_RC(pinshm_channel_arm(cons), 0);
	CLIENT_RC(cp, pinshm_reconnect(cp), 0);
	TU_RC(pinshm_send(prod, "m", 1, PINSHM_NONBLOCK), 0);
	ck_assert_msg(tu_efd_written(efd, WAKE_MS), "the consumer's eventfd was not written");
	ck_assert_uint_eq(drain(cons), 1);
	pinshm_status_t st;
	CLIENT_RC(cc, pinshm_status(cc, &st, NULL, NULL), 0); /* the client still works */
	pinshm_channel_close(prod);
	pinshm_channel_close(cons);
	pinshm_disconnect(cc);
	pinshm_disconnect(cp);
	daemon_stop_ok(&d);
}
END_TEST

/*
 * Channel numbers belong to a connection.  A client whose connection gave
 * queue A the number 1 reconnects by itself inside its first request after
 * a restart; the new daemon numbered this client's channels in another
 * order (the consumers' client handed B back first).  The producer's
 * fetch of A's eventfd must name A, not the channel that is 1 now.
 */
START_TEST(test_numbers_after_reconnect)
{
	struct daemon d = {0};
	pinshm_channel_attr_t attr;
	pinshm_channel_t *ca, *cb, *pa, *pb;

	unsetenv("NOTIFY_SOCKET");
	ck_assert_int_eq(setenv("PINSHM_AUTOSTART", "0", 1), 0);
	daemon_start_opts(&d, &(struct daemon_opts){0});
	pinshm_client_t *cc = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * 1024, 1, 1);
	CLIENT_RC(cc, pinshm_create(cc, "A", &attr, 0600, 0), 0);
	CLIENT_RC(cc, pinshm_create(cc, "B", &attr, 0600, 0), 0);
	CLIENT_RC(cc, pinshm_open(cc, "B", PINSHM_CONSUMER, &cb), 0);
	CLIENT_RC(cc, pinshm_open(cc, "A", PINSHM_CONSUMER, &ca), 0);
	int efda = notify_fd(cc, ca), efdb = notify_fd(cc, cb);
	pinshm_client_t *cp = connect_ok(&d);
	CLIENT_RC(cp, pinshm_open(cp, "A", PINSHM_PRODUCER, &pa), 0);
	CLIENT_RC(cp, pinshm_open(cp, "B", PINSHM_PRODUCER, &pb), 0);

	daemon_kill9(&d);
	daemon_restart(&d, false);
	CLIENT_RC(cc, pinshm_reconnect(cc), 0);
	(void)tu_efd_written(efda, 0); /* the hand-backs' NOTIFY, for nothing */
	(void)tu_efd_written(efdb, 0);
	TU_RC(pinshm_channel_arm(ca), 0);
	TU_RC(pinshm_channel_arm(cb), 0);
	/* The producer's client reconnects (the send path never does). */
	CLIENT_RC(cp, pinshm_reconnect(cp), 0);
	TU_RC(pinshm_send(pa, "m", 1, PINSHM_NONBLOCK), 0);
	ck_assert_msg(tu_efd_written(efda, WAKE_MS), "A's consumer was not woken");
	ck_assert_msg(!tu_efd_written(efdb, 0), "B's consumer was woken for a message on A");
	ck_assert_uint_eq(drain(ca), 1);
	ck_assert_uint_eq(drain(cb), 0);
	pinshm_channel_close(pa);
	pinshm_channel_close(pb);
	pinshm_channel_close(ca);
	pinshm_channel_close(cb);
	pinshm_disconnect(cc);
	pinshm_disconnect(cp);
	daemon_stop_ok(&d);
}
END_TEST

/*
 * While no daemon answers, a producer sending BURST messages to an armed
 * consumer never tries to connect (the send path never reconnects nor
 * waits): the stand-in socket counts no connection.  After a real daemon
 * is back and both clients reconnected, the producer's next message
 * wakes the consumer: the reconnect cleared the wait between retries.
 */
START_TEST(test_retry_bounded_while_away)
{
	struct scene_notify s = {0};
	struct stand_in f;

	notify_start(&s, false);
	kill_and_send(&s);
	stand_in_start(&f, s.d.sock);
	unsigned sent;
	uint64_t ms = send_burst(s.prod, s.cons, &sent);
	unsigned attempts = stand_in_stop(&f, s.d.sock);
	printf("check_notify: %u messages in %llu ms: %u connection attempts\n", sent, (unsigned long long)ms,
	       attempts);
	ck_assert_msg(attempts == 0, "%u connection attempts from the send path", attempts);

	daemon_restart(&s.d, false);
	CLIENT_RC(s.cc, pinshm_reconnect(s.cc), 0);
	CLIENT_RC(s.cp, pinshm_reconnect(s.cp), 0);
	consumer_catch_up(&s, 0);
	TU_RC(pinshm_send(s.prod, "b", 1, PINSHM_NONBLOCK), 0);
	ck_assert_msg(tu_efd_written(s.efd, WAKE_MS), "the armed consumer's eventfd was not written in %d ms", WAKE_MS);
	ck_assert_uint_eq(drain(s.cons), 1);
	notify_end(&s);
}
END_TEST

/* Lines of the daemon's log (daemon_opts.log) that hold @p what. */
static unsigned log_count(const struct daemon *d, const char *what)
{
	char line[1024];
	unsigned n = 0;
	FILE *f = fopen(d->log, "r");

	ck_assert_msg(f != NULL, "the daemon's log %s cannot be read", d->log);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

/*
 * The daemon refuses: the consumer's client does not come back after the
 * restart, so the new daemon has no eventfd for the consumer (PEER:
 * -ENOENT, logged at -vv).  The producer, reconnected, sends BURST
 * messages to the armed consumer: the daemon logs a bounded number of
 * refusals, not one a message.  Once the consumer's client hands its
 * eventfd back, the producer's messages wake it again.
 */
START_TEST(test_refusals_bounded)
{
	struct scene_notify s = {0};

	notify_start(&s, true);
	kill_and_send(&s);
	daemon_restart(&s.d, true);
	CLIENT_RC(s.cp, pinshm_reconnect(s.cp), 0); /* hands "n" back; the consumer's client does not */
	unsigned sent;
	uint64_t ms = send_burst(s.prod, s.cons, &sent);
	unsigned refused = log_count(&s.d, "PEER: endpoint 1 of 'n' gave no wake-up socket");
	assert_attempts_bounded(refused, sent, ms, "refusals in the daemon's log");

	CLIENT_RC(s.cc, pinshm_reconnect(s.cc), 0); /* hands "n" back, and NOTIFY */
	consumer_catch_up(&s, 0);
	sent = send_until_woken(s.prod, s.efd);
	ck_assert_uint_eq(drain(s.cons), sent);
	notify_end(&s);
}
END_TEST

static Suite *notify_suite(void)
{
	Suite *s = suite_create("notify");
	TCase *tc = tcase_create("rewake");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_rewake_after_reconnect);
	tcase_add_test(tc, test_rewake_client_reconnects_itself);
	tcase_add_test(tc, test_rewake_new_generation);
	tcase_add_test(tc, test_new_consumer_after_refusal);
	tcase_add_test(tc, test_numbers_after_reconnect);
	tcase_add_test(tc, test_notify_fd_after_restart);
	suite_add_tcase(s, tc);

	tc = tcase_create("bounded");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_retry_bounded_while_away);
	tcase_add_test(tc, test_refusals_bounded);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(notify_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
