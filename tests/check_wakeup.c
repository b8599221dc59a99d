/*
 * check_wakeup.c - wake-up descriptors that no peer can turn against
 * another, and a client shared by threads whose handles wake consumers.
 *
 * - hostile: a consumer that makes the sending end of its wake-up socket
 *   blocking and fills its queue cannot make a producer's send, flush or
 *   close wait (they used to block for ever in write() on an eventfd whose
 *   counter the consumer had filled); a producer holding the sending end
 *   can neither read the consumer's wake-ups nor change its end's flags.
 * - threads: two threads send on two producer handles of one client while
 *   two threads consume on two handles of another, arming, sleeping in
 *   poll() and now and then leaving and opening again (a new consumer
 *   generation, so the producers fetch its socket again from the send
 *   path); both clients also make requests from those threads meanwhile.
 *   Every message arrives in order, no wake-up is lost, and every reply
 *   each client read answered its request (a mismatch breaks the client:
 *   its next request fails); and two threads that fail requests on one
 *   client at once each read their own reason.  Runs under
 *   ThreadSanitizer in CI.
 *
 * Every test starts its own pinshmd on its own socket (tests/daemonutil.h).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemonutil.h"
#include "pinshm.h"
#include "testutil.h"

#define BLOCK_BOUND_MS 5000 /* far above a send that does not wait; far below the test's timeout */

/* Make @p fd blocking (the flag of the file description its holders share). */
static void make_blocking(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	ck_assert_int_ge(flags, 0);
	ck_assert_int_eq(fcntl(fd, F_SETFL, flags & ~O_NONBLOCK), 0);
}

/* Fill the queue of the socket that @p fd sends to. */
static void fill_queue(int fd)
{
	uint64_t one = 1;
	unsigned queued = 0;

	while (send(fd, &one, sizeof(one), MSG_DONTWAIT) == (ssize_t)sizeof(one))
		queued++;
	ck_assert_msg(errno == EAGAIN && queued > 0, "filling the queue: %u sent, %s", queued, strerror(errno));
}

/*
 * The consumer's attack on its producers: it makes the sending end of its
 * socket blocking, fills its queue and arms.  The producer's send (with a
 * 100 ms timeout), flush and close each return at once, and the consumer
 * gets every message.
 */
START_TEST(test_consumer_cannot_block_producer)
{
	struct daemon d;
	pinshm_channel_t *cons, *prod;
	char buf[16];
	size_t len;

	daemon_start(&d);
	pinshm_client_t *cc = connect_create_small(&d, "w");
	CLIENT_RC(cc, pinshm_open(cc, "w", PINSHM_CONSUMER, &cons), 0);
	int efd = notify_fd(cc, cons);
	int peer = pinshm_channel_notify_peer_fd(cons);
	ck_assert_int_ge(peer, 0);
	make_blocking(peer);
	fill_queue(peer);
	pinshm_client_t *cp = connect_ok(&d);
	CLIENT_RC(cp, pinshm_open(cp, "w", PINSHM_PRODUCER, &prod), 0);

	for (int i = 0; i < 3; i++) {
		TU_RC(pinshm_channel_arm(cons), 0); /* reads some off: fill it again */
		fill_queue(peer);
		uint64_t t0 = tu_now_ms();
		TU_RC(pinshm_send(prod, "m", 1, 100), 0);
		TU_RC(pinshm_flush(prod), 0);
		uint64_t ms = tu_now_ms() - t0;
		ck_assert_msg(ms < BLOCK_BOUND_MS, "a send and a flush took %llu ms", (unsigned long long)ms);
		ck_assert(tu_efd_written(efd, 0)); /* full: readable */
		TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, PINSHM_NONBLOCK), 0);
	}
	TU_RC(pinshm_channel_arm(cons), 0);
	fill_queue(peer);
	uint64_t t0 = tu_now_ms();
	CLIENT_RC(cp, pinshm_channel_close(prod), 0);
	ck_assert_uint_lt(tu_now_ms() - t0, BLOCK_BOUND_MS);
	pinshm_channel_close(cons);
	pinshm_disconnect(cc);
	pinshm_disconnect(cp);
	daemon_stop_ok(&d);
}
END_TEST

/*
 * A producer's attack on its consumer: holding the sending end, it makes
 * it blocking and tries to read the wake-ups off it.  It reads nothing;
 * the consumer's end stays non-blocking, and the consumer, woken, reads
 * its wake-up and its message without waiting.
 */
START_TEST(test_producer_cannot_drain_consumer)
{
	struct daemon d;
	pinshm_channel_t *cons, *prod;
	char buf[16];
	size_t len;
	uint64_t v;

	daemon_start(&d);
	pinshm_client_t *cc = connect_create_small(&d, "w");
	CLIENT_RC(cc, pinshm_open(cc, "w", PINSHM_CONSUMER, &cons), 0);
	int efd = notify_fd(cc, cons);
	int peer = pinshm_channel_notify_peer_fd(cons); /* the description producers get from pinshmd */
	make_blocking(peer);
	pinshm_client_t *cp = connect_ok(&d);
	CLIENT_RC(cp, pinshm_open(cp, "w", PINSHM_PRODUCER, &prod), 0);
	TU_RC(pinshm_channel_arm(cons), 0);
	TU_RC(pinshm_send(prod, "m", 1, PINSHM_NONBLOCK), 0);
	struct pollfd p = {.fd = efd, .events = POLLIN};
	ck_assert_int_eq(poll(&p, 1, 10000), 1);
	ck_assert_int_eq(recv(peer, &v, sizeof(v), MSG_DONTWAIT), -1); /* nothing comes back on it */
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert(fcntl(efd, F_GETFL) & O_NONBLOCK);
	ck_assert_int_eq(read(efd, &v, sizeof(v)), sizeof(v));
	ck_assert_int_eq(read(efd, &v, sizeof(v)), -1); /* empty: it does not block */
	ck_assert_int_eq(errno, EAGAIN);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, PINSHM_NONBLOCK), 0);
	pinshm_channel_close(prod);
	pinshm_channel_close(cons);
	pinshm_disconnect(cc);
	pinshm_disconnect(cp);
	daemon_stop_ok(&d);
}
END_TEST

/* ---- threads ------------------------------------------------------------ */

#define THREAD_CHANNELS 2
#define THREAD_MESSAGES (3000u / TU_SLOWDOWN)
#define REOPEN_EVERY 500u /* messages between a consumer's leaving and coming back */
#define STATUS_EVERY 200u /* messages between requests from a sending thread */
#define LOST_MS 10000     /* a wake-up this late is taken for lost */

struct thread_scene {
	struct daemon d;
	pinshm_client_t *cp, *cc; /* each shared by the threads of its side */
	char failure[256];
	atomic_bool failed; /* failure[] is written (under lock) */
	pthread_mutex_t lock;
};

struct thread_arg {
	struct thread_scene *s;
	unsigned index;
};

static void scene_fail(struct thread_scene *s, const char *fmt, int a, int b)
{
	pthread_mutex_lock(&s->lock);
	if (!s->failure[0])
		snprintf(s->failure, sizeof(s->failure), fmt, a, b);
	pthread_mutex_unlock(&s->lock);
	atomic_store(&s->failed, true);
}

static void *producer_thread(void *arg)
{
	struct thread_arg *a = arg;
	struct thread_scene *s = a->s;
	char name[16];
	pinshm_channel_t *prod;
	pinshm_status_t st;

	snprintf(name, sizeof(name), "t%u", a->index);
	int rc = pinshm_open(s->cp, name, PINSHM_PRODUCER, &prod);
	if (rc != 0) {
		scene_fail(s, "producer %d: open: %d", (int)a->index, rc);
		return NULL;
	}
	for (uint32_t i = 0; i < THREAD_MESSAGES && !atomic_load(&s->failed); i++) {
		rc = pinshm_send(prod, &i, sizeof(i), 10000);
		if (rc != 0)
			scene_fail(s, "producer %d: send: %d", (int)a->index, rc);
		if (i % STATUS_EVERY == 0 && (rc = pinshm_status(s->cp, &st, NULL, NULL)) != 0)
			scene_fail(s, "producer %d: status: %d", (int)a->index, rc);
		if (i % 4 == 0)
			tu_sleep_ms(1); /* now and then: the consumer goes to sleep */
	}
	pinshm_channel_close(prod);
	return NULL;
}

/* Wait for a wake-up of @p cons, armed, on @p efd; a message found after
 * LOST_MS without one is a lost wake-up.  @return 0 or -1 (failed). */
static int sleep_armed(struct thread_scene *s, unsigned index, pinshm_channel_t *cons, int efd)
{
	int rc = pinshm_channel_arm(cons);

	if (rc == -EAGAIN)
		return 0;
	if (rc != 0) {
		scene_fail(s, "consumer %d: arm: %d", (int)index, rc);
		return -1;
	}
	struct pollfd p = {.fd = efd, .events = POLLIN};
	if (poll(&p, 1, LOST_MS) == 1)
		return 0;
	if (pinshm_channel_arm(cons) == -EAGAIN) {
		scene_fail(s, "consumer %d: a message waited %d ms with no wake-up", (int)index, LOST_MS);
		return -1;
	}
	return 0;
}

static void *consumer_thread(void *arg)
{
	struct thread_arg *a = arg;
	struct thread_scene *s = a->s;
	char name[16];
	pinshm_channel_t *cons = NULL;
	int efd = -1;

	snprintf(name, sizeof(name), "t%u", a->index);
	bool reopen = true;
	for (uint32_t want = 0; want < THREAD_MESSAGES && !atomic_load(&s->failed);) {
		if (reopen) {
			if (cons)
				pinshm_channel_close(cons); /* leaves: a new generation next */
			int rc = pinshm_open(s->cc, name, PINSHM_CONSUMER, &cons);
			efd = rc == 0 ? pinshm_channel_notify_fd(cons) : rc;
			if (efd < 0) {
				scene_fail(s, "consumer %d: open: %d", (int)a->index, efd);
				break;
			}
			reopen = false;
		}
		uint32_t got;
		size_t len;
		int rc = pinshm_recv(cons, &got, sizeof(got), &len, PINSHM_NONBLOCK);
		if (rc == -EAGAIN) {
			if (sleep_armed(s, a->index, cons, efd) != 0)
				break;
			continue;
		}
		if (rc != 0 || got != want) {
			scene_fail(s, rc != 0 ? "consumer recv: %d (%d)" : "consumer got %d, want %d",
				   rc != 0 ? rc : (int)got, (int)want);
			break;
		}
		want++;
		reopen = want % REOPEN_EVERY == 0;
	}
	if (cons)
		pinshm_channel_close(cons);
	return NULL;
}

START_TEST(test_threads_share_clients)
{
	struct thread_scene s = {.failure = ""};
	struct thread_arg args[THREAD_CHANNELS];
	pthread_t prod[THREAD_CHANNELS], cons[THREAD_CHANNELS];
	pinshm_channel_attr_t attr;
	pinshm_status_t st;
	char name[16];

	pthread_mutex_init(&s.lock, NULL);
	daemon_start(&s.d);
	s.cc = connect_ok(&s.d);
	s.cp = connect_ok(&s.d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * 1024, 1, 1);
	for (unsigned i = 0; i < THREAD_CHANNELS; i++) {
		snprintf(name, sizeof(name), "t%u", i);
		CLIENT_RC(s.cc, pinshm_create(s.cc, name, &attr, 0600, 0), 0);
		args[i] = (struct thread_arg){.s = &s, .index = i};
	}
	for (unsigned i = 0; i < THREAD_CHANNELS; i++) {
		ck_assert_int_eq(pthread_create(&cons[i], NULL, consumer_thread, &args[i]), 0);
		ck_assert_int_eq(pthread_create(&prod[i], NULL, producer_thread, &args[i]), 0);
	}
	for (unsigned i = 0; i < THREAD_CHANNELS; i++) {
		pthread_join(prod[i], NULL);
		pthread_join(cons[i], NULL);
	}
	ck_assert_msg(!s.failure[0], "%s", s.failure);
	CLIENT_RC(s.cp, pinshm_status(s.cp, &st, NULL, NULL), 0); /* neither client out of step */
	CLIENT_RC(s.cc, pinshm_status(s.cc, &st, NULL, NULL), 0);
	pinshm_disconnect(s.cc);
	pinshm_disconnect(s.cp);
	daemon_stop_ok(&s.d);
	pthread_mutex_destroy(&s.lock);
}
END_TEST

#define ERROR_ROUNDS 2000

struct error_arg {
	pinshm_client_t *c;
	const char *mine, *other; /* the missing channel this thread opens, and the other's */
	char failure[256];
};

/* Open a missing channel again and again: each failure's message, read
 * at once, names this thread's channel, whatever the other thread does. */
static void *error_thread(void *arg)
{
	struct error_arg *a = arg;
	pinshm_channel_t *h;

	for (unsigned i = 0; i < ERROR_ROUNDS && !a->failure[0]; i++) {
		int rc = pinshm_open(a->c, a->mine, PINSHM_PRODUCER, &h);
		const char *why = pinshm_client_error(a->c);
		if (rc != -ENOENT || !strstr(why, a->mine) || strstr(why, a->other))
			snprintf(a->failure, sizeof(a->failure), "round %u: %s: '%s'", i, pinshm_strerror(rc), why);
	}
	return NULL;
}

/* Two threads fail requests on one client at once: each reads its own
 * reason, never the other's nor a torn one (a data race for TSan before
 * the reasons were kept per thread). */
START_TEST(test_threads_client_error)
{
	struct daemon d;
	pthread_t t[2];
	struct error_arg a[2];

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	a[0] = (struct error_arg){.c = c, .mine = "missing_first", .other = "missing_second"};
	a[1] = (struct error_arg){.c = c, .mine = "missing_second", .other = "missing_first"};
	for (unsigned i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, error_thread, &a[i]), 0);
	for (unsigned i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (unsigned i = 0; i < 2; i++)
		ck_assert_msg(!a[i].failure[0], "thread %u: %s", i, a[i].failure);
	CLIENT_RC(c, pinshm_open(c, "missing_main", PINSHM_CONSUMER, &(pinshm_channel_t *){NULL}), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pinshm_client_error(c), "missing_main"));
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

static Suite *wakeup_suite(void)
{
	Suite *s = suite_create("wakeup");
	TCase *tc = tcase_create("hostile");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_consumer_cannot_block_producer);
	tcase_add_test(tc, test_producer_cannot_drain_consumer);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_threads_share_clients);
	tcase_add_test(tc, test_threads_client_error);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(wakeup_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
