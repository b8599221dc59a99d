/*
 * check_stress.c - many producers and consumers at once, in processes
 * (fork) and in threads, every message checked; and processes that die at
 * the worst moment, repaired with pinshm_segment_reap().
 *
 * The *threads* tests are the ones to run under ThreadSanitizer.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pinshm.h"
#include "testutil.h"

#define KiB 1024u

/* How long a test waits for its workers, and one call for its peer. */
#define WAIT_MS 90000
#define CALL_MS 20000

/* ======================================================================== */
/* workers: the same code runs in a forked child or in a thread              */
/* ======================================================================== */

struct shared {
	_Atomic uint32_t consumers_ready;
	_Atomic uint32_t producers_done;
	_Atomic uint64_t received;
	_Atomic uint8_t counts[]; /* queue: [producer][seq], deliveries of each message */
};

struct stress {
	int fd;
	pinshm_kind_t kind;
	uint32_t flags;
	unsigned P, C;
	uint64_t N;      /* messages per producer */
	size_t max_len;  /* of the messages sent */
	bool wait_ready; /* producers wait until every consumer has attached (topics) */
	struct shared *sh;
	size_t sh_size;
	struct tu_reporter rep;
};

struct worker {
	struct stress *st;
	int idx;
	int rc;
	uint64_t got; /* consumer: messages received */
	uint64_t lost, stale;
	char why[380];
	pthread_t thread;
};

#define WFAIL(w, ...)                                                                                         \
	do {                                                                                                  \
		snprintf((w)->why, sizeof((w)->why), __VA_ARGS__);                                            \
		return 1;                                                                                     \
	} while (0)

static int wait_consumers_ready(struct worker *w)
{
	uint64_t deadline = tu_now_ms() + WAIT_MS;

	while (atomic_load(&w->st->sh->consumers_ready) < w->st->C) {
		if (tu_now_ms() > deadline)
			WFAIL(w, "producer %d: the consumers never attached", w->idx);
		tu_sleep_ms(1);
	}
	return 0;
}

static int producer_run(struct worker *w)
{
	struct stress *st = w->st;
	const uint32_t me = (uint32_t)w->idx;
	pinshm_channel_t *ch = NULL;
	uint8_t *bufs = malloc(8 * st->max_len);
	uint64_t seq = 0, r = tu_mix(0xabcdef00u + me);
	int rc;

	if (!bufs)
		WFAIL(w, "malloc");
	rc = pinshm_channel_attach(st->fd, PINSHM_PRODUCER, &ch);
	if (rc)
		WFAIL(w, "producer %u: attach: %d (%s)", me, rc, pinshm_strerror(rc));
	pinshm_channel_set_spin(ch, me % 2 ? 0 : 20000);
	if (st->wait_ready && wait_consumers_ready(w))
		return 1;
	while (seq < st->N) {
		unsigned how;
		size_t len = tu_msg_len(me, seq, st->max_len);

		r = tu_mix(r);
		how = (unsigned)(r % 16);
		if (how < 6) {
			/* copy */
			tu_msg_fill(bufs, len, me, seq);
			rc = pinshm_send(ch, bufs, len, CALL_MS);
			if (rc)
				WFAIL(w, "producer %u seq %llu: send(%zu): %d (%s) %s", me, (unsigned long long)seq, len,
				      rc, pinshm_strerror(rc), pinshm_channel_error(ch));
			seq++;
		} else if (how < 11) {
			/* in place, sometimes reserving more than is committed */
			size_t want = len;
			void *b = NULL;

			if (how == 10 && len < st->max_len)
				want = len + (size_t)((r >> 20) % (st->max_len - len + 1));
			rc = pinshm_reserve(ch, want, &b, CALL_MS);
			if (rc)
				WFAIL(w, "producer %u seq %llu: reserve(%zu): %d (%s) %s", me, (unsigned long long)seq,
				      want, rc, pinshm_strerror(rc), pinshm_channel_error(ch));
			if ((uintptr_t)b & 15u)
				WFAIL(w, "reservation %p is not 16-byte aligned", b);
			if (how == 9) {
				/* drop one first */
				memset(b, 0xdd, want);
				rc = pinshm_abort(ch);
				if (rc)
					WFAIL(w, "abort: %d", rc);
				rc = pinshm_reserve(ch, want, &b, CALL_MS);
				if (rc)
					WFAIL(w, "producer %u: reserve after abort: %d (%s)", me, rc,
					      pinshm_strerror(rc));
			}
			tu_msg_fill(b, len, me, seq);
			rc = pinshm_commit(ch, len, (r >> 40) & 1 ? PINSHM_MORE : 0);
			if (rc)
				WFAIL(w, "producer %u seq %llu: commit: %d (%s)", me, (unsigned long long)seq, rc,
				      pinshm_strerror(rc));
			seq++;
		} else {
			/* batch */
			struct iovec iov[8];
			unsigned k = 1 + (unsigned)((r >> 24) % 8);

			if (k > st->N - seq)
				k = (unsigned)(st->N - seq);
			for (unsigned i = 0; i < k; i++) {
				size_t l = tu_msg_len(me, seq + i, st->max_len);
				iov[i].iov_base = bufs + i * st->max_len;
				iov[i].iov_len = l;
				tu_msg_fill(iov[i].iov_base, l, me, seq + i);
			}
			rc = pinshm_send_batch(ch, iov, k, CALL_MS);
			if (rc < 1 || rc > (int)k)
				WFAIL(w, "producer %u seq %llu: send_batch(%u): %d (%s) %s", me,
				      (unsigned long long)seq, k, rc, pinshm_strerror(rc), pinshm_channel_error(ch));
			seq += (unsigned)rc;
		}
	}
	rc = pinshm_flush(ch);
	if (rc)
		WFAIL(w, "flush: %d", rc);
	atomic_fetch_add(&st->sh->producers_done, 1);
	pinshm_channel_close(ch);
	free(bufs);
	return 0;
}

struct cstate {
	uint64_t *next; /* per producer: next expected (strict) or last seen + 1 */
	bool strict;
};

static int consume_one(struct worker *w, struct cstate *cs, const void *data, size_t len)
{
	struct stress *st = w->st;
	uint32_t who;
	uint64_t seq;
	char why[200];

	if (tu_msg_check(data, len, st->max_len, &who, &seq, why, sizeof(why)) != 0)
		WFAIL(w, "consumer %d: corrupt message after %llu: %s", w->idx, (unsigned long long)w->got, why);
	if (who >= st->P || seq >= st->N)
		WFAIL(w, "consumer %d: message (%u, %llu) out of range", w->idx, who, (unsigned long long)seq);
	if (cs->strict ? seq != cs->next[who] : seq < cs->next[who])
		WFAIL(w, "consumer %d: producer %u: seq %llu, expected %s%llu (loss, duplicate or reorder)", w->idx,
		      who, (unsigned long long)seq, cs->strict ? "" : ">= ", (unsigned long long)cs->next[who]);
	cs->next[who] = seq + 1;
	if (st->kind == PINSHM_QUEUE)
		atomic_fetch_add_explicit(&st->sh->counts[who * st->N + seq], 1, memory_order_relaxed);
	w->got++;
	return 0;
}

static int consumer_run(struct worker *w)
{
	struct stress *st = w->st;
	const uint64_t total = st->P * st->N;
	pinshm_channel_t *ch = NULL;
	struct cstate cs;
	uint8_t *buf = malloc(st->max_len);
	uint64_t r = tu_mix(0x12345600u + (uint64_t)w->idx);
	pinshm_msg_t m[16];
	int rc;

	cs.next = calloc(st->P, sizeof(*cs.next));
	cs.strict = st->kind == PINSHM_TOPIC || st->C == 1;
	if (!buf || !cs.next)
		WFAIL(w, "malloc");
	rc = pinshm_channel_attach(st->fd, PINSHM_CONSUMER, &ch);
	if (rc)
		WFAIL(w, "consumer %d: attach: %d (%s)", w->idx, rc, pinshm_strerror(rc));
	pinshm_channel_set_spin(ch, w->idx % 2 ? 20000 : 0);
	atomic_fetch_add(&st->sh->consumers_ready, 1);
	for (;;) {
		unsigned how;

		if (st->kind == PINSHM_TOPIC && w->got == total)
			break;
		r = tu_mix(r);
		how = (unsigned)(r % 4);
		if (how == 0) {
			size_t len = 0;
			rc = pinshm_recv(ch, buf, st->max_len, &len, CALL_MS);
			if (rc == 0 && consume_one(w, &cs, buf, len))
				return 1;
		} else if (how == 1) {
			rc = pinshm_recv_inplace(ch, &m[0], CALL_MS);
			if (rc == 0) {
				if (((uintptr_t)m[0].data & 15u) != 0)
					WFAIL(w, "in-place data %p not aligned", m[0].data);
				if (consume_one(w, &cs, m[0].data, m[0].len))
					return 1;
				rc = pinshm_release(ch, &m[0]);
				if (rc)
					WFAIL(w, "release: %d (%s)", rc, pinshm_strerror(rc));
			}
		} else if (how == 2) {
			unsigned max = 1 + (unsigned)((r >> 8) % 16);
			rc = pinshm_recv_batch(ch, m, max, CALL_MS);
			if (rc > (int)max)
				WFAIL(w, "recv_batch(%u) returned %d", max, rc);
			if (rc > 0) {
				for (int i = 0; i < rc; i++)
					if (consume_one(w, &cs, m[i].data, m[i].len))
						return 1;
				rc = pinshm_release(ch, &m[rc - 1]);
				if (rc)
					WFAIL(w, "release after batch: %d (%s)", rc, pinshm_strerror(rc));
			}
		} else {
			/* hold a few in place, then release in order or all at once */
			unsigned k = 1 + (unsigned)((r >> 8) % 6), n = 0;
			rc = pinshm_recv_inplace(ch, &m[0], CALL_MS);
			if (rc == 0) {
				n = 1;
				while (n < k && pinshm_recv_inplace(ch, &m[n], PINSHM_NONBLOCK) == 0)
					n++;
				for (unsigned i = 0; i < n; i++)
					if (consume_one(w, &cs, m[i].data, m[i].len))
						return 1;
				for (unsigned i = (r >> 16) & 1 ? 0 : n - 1; i < n; i++) {
					int rr = pinshm_release(ch, &m[i]);
					if (rr)
						WFAIL(w, "release %u of %u held: %d (%s)", i, n, rr, pinshm_strerror(rr));
				}
			}
		}
		if (rc == -EPIPE && st->kind == PINSHM_QUEUE)
			break; /* every producer is gone and the queue is empty */
		if (rc < 0)
			WFAIL(w, "consumer %d after %llu messages: %d (%s) %s", w->idx, (unsigned long long)w->got, rc,
			      pinshm_strerror(rc), pinshm_channel_error(ch));
	}
	if (st->kind == PINSHM_TOPIC)
		for (unsigned p = 0; p < st->P; p++)
			if (cs.next[p] != st->N)
				WFAIL(w, "subscriber %d: producer %u: %llu messages, expected %llu", w->idx, p,
				      (unsigned long long)cs.next[p], (unsigned long long)st->N);
	atomic_fetch_add(&st->sh->received, w->got);
	pinshm_channel_close(ch);
	free(cs.next);
	free(buf);
	return 0;
}

/* ---- running the workers ----------------------------------------------- */

static void stress_init(struct stress *st, pinshm_kind_t kind, unsigned P, unsigned C, uint64_t N, uint64_t capacity,
			size_t max_len)
{
	pinshm_channel_attr_t attr;

	memset(st, 0, sizeof(*st));
	st->kind = kind;
	st->P = P;
	st->C = C;
	st->N = N;
	st->max_len = max_len;
	st->wait_ready = kind == PINSHM_TOPIC;
	/* queue: one more producer endpoint for the test's guard */
	tu_attr(&attr, kind, capacity, kind == PINSHM_QUEUE ? P + 1 : P, C);
	ck_assert_uint_le(max_len, attr.max_message);
	ck_assert_uint_ge(max_len, TU_MSG_MIN);
	st->fd = tu_create(&attr);
	st->sh_size = sizeof(struct shared) + (size_t)P * N;
	st->sh = mmap(NULL, st->sh_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(st->sh, MAP_FAILED);
	tu_reporter_open(&st->rep);
}

static void stress_check_counts(struct stress *st)
{
	uint64_t want = st->kind == PINSHM_QUEUE ? st->P * st->N : st->P * st->N * st->C;

	ck_assert_uint_eq(atomic_load(&st->sh->producers_done), st->P);
	ck_assert_msg(atomic_load(&st->sh->received) == want, "received %llu messages in all, expected %llu",
		      (unsigned long long)atomic_load(&st->sh->received), (unsigned long long)want);
	if (st->kind == PINSHM_QUEUE) {
		for (unsigned p = 0; p < st->P; p++)
			for (uint64_t s = 0; s < st->N; s++) {
				unsigned c = atomic_load(&st->sh->counts[p * st->N + s]);
				ck_assert_msg(c == 1, "producer %u seq %llu delivered %u times", p,
					      (unsigned long long)s, c);
			}
	}
}

static void stress_fini(struct stress *st)
{
	munmap(st->sh, st->sh_size);
	tu_reporter_close(&st->rep);
	close(st->fd);
}

static int child_producer(void *arg, int idx)
{
	struct worker w = {.st = arg, .idx = idx};

	if (producer_run(&w)) {
		struct tu_report rep = {.who = idx, .status = 1};
		snprintf(rep.text, sizeof(rep.text), "%s", w.why);
		tu_report(&w.st->rep, &rep);
		tu_child_fail(1, "%s", w.why);
	}
	return 0;
}

static int child_consumer(void *arg, int idx)
{
	struct worker w = {.st = arg, .idx = idx};

	if (consumer_run(&w)) {
		struct tu_report rep = {.who = 100 + idx, .status = 1};
		snprintf(rep.text, sizeof(rep.text), "%s", w.why);
		tu_report(&w.st->rep, &rep);
		tu_child_fail(1, "%s", w.why);
	}
	return 0;
}

/* Wait for @p ps; on failure, fail the test with the children's reasons. */
static void wait_workers(struct stress *st, struct tu_procs *ps, const char *what)
{
	int rc = tu_wait_all(ps, WAIT_MS);
	char msg[4096] = "";
	size_t off = 0;
	bool ok = rc == 0;
	struct tu_report rep;

	for (int i = 0; i < ps->n; i++)
		if (!(WIFEXITED(ps->status[i]) && WEXITSTATUS(ps->status[i]) == 0))
			ok = false;
	if (ok)
		return;
	while (off < sizeof(msg) - 1 && tu_collect(&st->rep, &rep, 0) == 0)
		off += (size_t)snprintf(msg + off, sizeof(msg) - off, " [%s]", rep.text);
	for (int i = 0; i < ps->n && off < sizeof(msg) - 1; i++) {
		char s[48];
		off += (size_t)snprintf(msg + off, sizeof(msg) - off, " %s:%s", ps->name[i],
					tu_status_str(ps->status[i], s, sizeof(s)));
	}
	ck_abort_msg("%s %s:%s", what, rc ? "timed out (killed)" : "failed", msg);
}

/* P producers and C consumers in processes. */
static void run_processes(pinshm_kind_t kind, unsigned P, unsigned C, uint64_t N, uint64_t capacity, size_t max_len)
{
	struct stress st;
	struct tu_procs prod, cons;
	pinshm_channel_t *guard = NULL;

	stress_init(&st, kind, P, C, N / TU_SLOWDOWN, capacity, max_len);
	/* The guard keeps the queue's consumers from seeing -EPIPE before
	 * every producer has attached; closed when they are all done. */
	if (kind == PINSHM_QUEUE)
		guard = tu_attach(st.fd, PINSHM_PRODUCER);
	tu_procs_init(&prod);
	tu_procs_init(&cons);
	for (unsigned i = 0; i < C; i++)
		tu_spawn(&cons, "consumer", child_consumer, &st, (int)i);
	for (unsigned i = 0; i < P; i++)
		tu_spawn(&prod, "producer", child_producer, &st, (int)i);
	wait_workers(&st, &prod, "producers");
	if (guard)
		TU_RC(pinshm_channel_close(guard), 0);
	wait_workers(&st, &cons, "consumers");
	stress_check_counts(&st);
	stress_fini(&st);
}

static void *thread_producer(void *arg)
{
	struct worker *w = arg;

	w->rc = producer_run(w);
	return NULL;
}

static void *thread_consumer(void *arg)
{
	struct worker *w = arg;

	w->rc = consumer_run(w);
	return NULL;
}

static void join_all(struct worker *ws, unsigned n, const char *what)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += WAIT_MS / 1000;
	for (unsigned i = 0; i < n; i++) {
		int rc = pthread_timedjoin_np(ws[i].thread, NULL, &dl);
		ck_assert_msg(rc == 0, "%s %u did not finish in time (%s)", what, i, strerror(rc));
		ck_assert_msg(ws[i].rc == 0, "%s %u: %s", what, i, ws[i].why);
	}
}

/* The same with threads, each with its own handles. */
static void run_threads(pinshm_kind_t kind, unsigned P, unsigned C, uint64_t N, uint64_t capacity, size_t max_len)
{
	struct stress st;
	struct worker prod[8], cons[8];
	pinshm_channel_t *guard = NULL;

	ck_assert_uint_le(P, 8);
	ck_assert_uint_le(C, 8);
	stress_init(&st, kind, P, C, N / TU_SLOWDOWN, capacity, max_len);
	if (kind == PINSHM_QUEUE)
		guard = tu_attach(st.fd, PINSHM_PRODUCER);
	memset(prod, 0, sizeof(prod));
	memset(cons, 0, sizeof(cons));
	for (unsigned i = 0; i < C; i++) {
		cons[i].st = &st;
		cons[i].idx = (int)i;
		ck_assert_int_eq(pthread_create(&cons[i].thread, NULL, thread_consumer, &cons[i]), 0);
	}
	for (unsigned i = 0; i < P; i++) {
		prod[i].st = &st;
		prod[i].idx = (int)i;
		ck_assert_int_eq(pthread_create(&prod[i].thread, NULL, thread_producer, &prod[i]), 0);
	}
	join_all(prod, P, "producer");
	if (guard)
		TU_RC(pinshm_channel_close(guard), 0);
	join_all(cons, C, "consumer");
	stress_check_counts(&st);
	stress_fini(&st);
}

/* ======================================================================== */
/* queues and topics under load                                              */
/* ======================================================================== */

START_TEST(test_queue_3x2) { run_processes(PINSHM_QUEUE, 3, 2, 100000, 8 * KiB, 600); }
END_TEST

START_TEST(test_queue_4x4) { run_processes(PINSHM_QUEUE, 4, 4, 50000, 4 * KiB, 300); }
END_TEST

START_TEST(test_queue_2x1) { run_processes(PINSHM_QUEUE, 2, 1, 100000, 4 * KiB, 200); }
END_TEST

START_TEST(test_queue_1x1_big) { run_processes(PINSHM_QUEUE, 1, 1, 50000, 16 * KiB, 16 * KiB / 2 - 32); }
END_TEST

START_TEST(test_topic_2x3) { run_processes(PINSHM_TOPIC, 2, 3, 50000, 8 * KiB, 400); }
END_TEST

/* More lanes than a consumer looks at in each quick look (consume.c take_quick()). */
START_TEST(test_queue_many_lanes) { run_processes(PINSHM_QUEUE, 20, 1, 5000, 4 * KiB, 300); }
END_TEST

START_TEST(test_shared_many_lanes) { run_processes(PINSHM_QUEUE, 20, 2, 5000, 4 * KiB, 300); }
END_TEST

START_TEST(test_topic_many_lanes) { run_processes(PINSHM_TOPIC, 20, 2, 5000, 4 * KiB, 300); }
END_TEST

START_TEST(test_threads_queue) { run_threads(PINSHM_QUEUE, 2, 2, 20000, 4 * KiB, 300); }
END_TEST

START_TEST(test_threads_topic) { run_threads(PINSHM_TOPIC, 2, 2, 10000, 4 * KiB, 300); }
END_TEST

/* ---- overrun topic under load ------------------------------------------- */

struct overrun_ctx {
	int fd;
	uint64_t N;
	struct tu_reporter rep;
	_Atomic uint32_t *ready; /* [0]: subscribers attached, [1]: subscribers done */
};

static int overrun_publisher(void *arg, int idx)
{
	struct overrun_ctx *o = arg;
	pinshm_channel_t *ch;
	uint8_t buf[512];
	uint64_t deadline = tu_now_ms() + WAIT_MS;
	int rc = pinshm_channel_attach(o->fd, PINSHM_PRODUCER, &ch);

	(void)idx;
	if (rc)
		tu_child_fail(1, "publisher attach: %d", rc);
	while (atomic_load(&o->ready[0]) < 2)
		if (tu_now_ms() > deadline)
			tu_child_fail(2, "subscribers never attached");
	/* N messages at full speed, then more, slowly, until both subscribers
	 * have seen one numbered N - 1 or later. */
	for (uint64_t s = 0; atomic_load(&o->ready[1]) < 2; s++) {
		size_t len = tu_msg_len(0, s, sizeof(buf));
		if (tu_now_ms() > deadline)
			tu_child_fail(2, "subscribers never done");
		tu_msg_fill(buf, len, 0, s);
		/* Never waits: a non-blocking send always succeeds. */
		rc = pinshm_send(ch, buf, len, PINSHM_NONBLOCK);
		if (rc)
			tu_child_fail(3, "publisher seq %llu: %d (%s)", (unsigned long long)s, rc, pinshm_strerror(rc));
		if (s >= o->N)
			tu_sleep_ms(1);
	}
	pinshm_channel_close(ch);
	return 0;
}

/* A failing subscriber counts as done, so that the publisher stops. */
#define SUB_FAIL(code, ...)                                                                                   \
	do {                                                                                                  \
		atomic_fetch_add(&o->ready[1], 1);                                                            \
		tu_child_fail(code, __VA_ARGS__);                                                             \
	} while (0)

/*
 * One receive of subscriber @p idx within 100 ms, copied or (@p inplace) in
 * place and released.  @return 0 with an intact message (its seq in @p s and,
 * in place, the messages lost before it in @p lost), or -ESTALE (overwritten
 * while held) or -ETIMEDOUT; any other result fails the subscriber.
 */
static int overrun_receive(struct overrun_ctx *o, pinshm_channel_t *ch, int idx, bool inplace, uint64_t *s,
			   uint64_t *lost)
{
	uint8_t buf[512];
	char why[200];
	uint32_t w;
	int rc, bad;

	*lost = 0;
	if (!inplace) {
		size_t len;
		rc = pinshm_recv(ch, buf, sizeof(buf), &len, 100);
		if (rc == -ESTALE || rc == -ETIMEDOUT)
			return rc;
		if (rc)
			SUB_FAIL(3, "recv: %d (%s)", rc, pinshm_strerror(rc));
		if (tu_msg_check(buf, len, sizeof(buf), &w, s, why, sizeof(why)))
			SUB_FAIL(4, "subscriber %d: recv returned a bad message: %s", idx, why);
		return 0;
	}
	pinshm_msg_t m;
	rc = pinshm_recv_inplace(ch, &m, 100);
	if (rc == -ESTALE || rc == -ETIMEDOUT)
		return rc;
	if (rc)
		SUB_FAIL(3, "recv_inplace: %d (%s)", rc, pinshm_strerror(rc));
	/* Check it, then ask whether it was overwritten meanwhile. */
	bad = tu_msg_check(m.data, m.len, sizeof(buf), &w, s, why, sizeof(why));
	rc = pinshm_release(ch, &m);
	if (rc == -ESTALE)
		return rc;
	if (rc)
		SUB_FAIL(3, "release: %d (%s)", rc, pinshm_strerror(rc));
	if (bad)
		SUB_FAIL(4, "subscriber %d: a message released intact was bad: %s", idx, why);
	*lost = m.lost;
	return 0;
}

static int overrun_subscriber(void *arg, int idx)
{
	struct overrun_ctx *o = arg;
	pinshm_channel_t *ch;
	uint64_t next = 0, got = 0, stale = 0, r = (uint64_t)idx + 1;
	uint64_t deadline = tu_now_ms() + WAIT_MS;
	pinshm_channel_info_t info;
	int rc = pinshm_channel_attach(o->fd, PINSHM_CONSUMER, &ch);

	if (rc)
		SUB_FAIL(1, "subscriber attach: %d", rc);
	atomic_fetch_add(&o->ready[0], 1);
	while (next < o->N) {
		uint64_t s, lost;

		if (tu_now_ms() > deadline)
			SUB_FAIL(2, "subscriber %d: stuck at %llu", idx, (unsigned long long)next);
		r = tu_mix(r);
		rc = overrun_receive(o, ch, idx, r % 2 == 0, &s, &lost);
		stale += rc == -ESTALE;
		if (rc)
			continue;
		if (lost && s < next + lost)
			SUB_FAIL(5, "subscriber %d: seq %llu, but %llu lost after %llu", idx, (unsigned long long)s,
				 (unsigned long long)lost, (unsigned long long)next);
		if (s < next)
			SUB_FAIL(5, "subscriber %d: seq %llu after %llu", idx, (unsigned long long)s,
				      (unsigned long long)next);
		next = s + 1;
		got++;
	}
	atomic_fetch_add(&o->ready[1], 1);
	rc = pinshm_channel_info(ch, &info);
	if (rc)
		SUB_FAIL(6, "info: %d", rc);
	/* Every message up to the last one received was either received intact
	 * or lost (a stale one may be counted lost or not). */
	if (got + info.lost > next || got + info.lost + stale < next)
		SUB_FAIL(7, "subscriber %d: %llu received + %llu lost (+ %llu stale) != %llu", idx,
			      (unsigned long long)got, (unsigned long long)info.lost, (unsigned long long)stale,
			      (unsigned long long)next);
	tu_report_vals(&o->rep, idx, 0, got, info.lost);
	pinshm_channel_close(ch);
	return 0;
}
#undef SUB_FAIL

START_TEST(test_topic_overrun_stress)
{
	struct overrun_ctx o;
	pinshm_channel_attr_t attr;
	struct tu_procs ps;
	_Atomic uint32_t *ready = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(ready, MAP_FAILED);
	atomic_store(&ready[0], 0);
	atomic_store(&ready[1], 0);
	tu_attr(&attr, PINSHM_TOPIC, 4 * KiB, 1, 2);
	attr.flags = PINSHM_OVERRUN;
	o.fd = tu_create(&attr);
	o.N = 200000 / TU_SLOWDOWN;
	o.ready = ready;
	tu_reporter_open(&o.rep);
	tu_procs_init(&ps);
	tu_spawn(&ps, "subscriber", overrun_subscriber, &o, 0);
	tu_spawn(&ps, "subscriber", overrun_subscriber, &o, 1);
	tu_spawn(&ps, "publisher", overrun_publisher, &o, 0);
	tu_wait_all_ok(&ps, WAIT_MS);
	for (int i = 0; i < 2; i++) {
		struct tu_report rep;
		TU_RC(tu_collect(&o.rep, &rep, 1000), 0);
		ck_assert_uint_ge(rep.v[0], 1);
	}
	tu_reporter_close(&o.rep);
	munmap(ready, 4096);
	close(o.fd);
}
END_TEST

/* ======================================================================== */
/* processes that die                                                        */
/* ======================================================================== */

struct death_ctx {
	int fd;
	int variant;
	unsigned count;
	struct tu_reporter rep;
};

static void expect_killed(struct tu_procs *ps, int i)
{
	char s[48];

	ck_assert_int_eq(tu_wait_one(ps, i, WAIT_MS), 0);
	ck_assert_msg(WIFSIGNALED(ps->status[i]) && WTERMSIG(ps->status[i]) == SIGKILL, "%s: %s, expected SIGKILL",
		      ps->name[i], tu_status_str(ps->status[i], s, sizeof(s)));
}

/* Receive a message (of @p max_len bytes at most) within @p timeout_ms.
 * @return 0 with its producer in @p who and its seq in @p seq, checked
 * intact (or the test fails), or what pinshm_recv() said. */
static int recv_seq(pinshm_channel_t *c, size_t max_len, int timeout_ms, uint32_t *who, uint64_t *seq)
{
	uint8_t buf[8192];
	char why[200];
	size_t len;
	int rc = pinshm_recv(c, buf, sizeof(buf), &len, timeout_ms);

	if (rc == 0)
		ck_assert_msg(tu_msg_check(buf, len, max_len, who, seq, why, sizeof(why)) == 0, "%s", why);
	return rc;
}

static void recv_msg_expect(pinshm_channel_t *c, uint32_t who, uint64_t seq, size_t max_len, int timeout_ms)
{
	uint32_t w;
	uint64_t s;

	TU_RC(recv_seq(c, max_len, timeout_ms, &w, &s), 0);
	ck_assert_msg(w == who && s == seq, "got (%u, %llu), expected (%u, %llu)", w, (unsigned long long)s, who,
		      (unsigned long long)seq);
}

static void send_msg(pinshm_channel_t *p, uint32_t who, uint64_t seq, size_t max_len, int timeout_ms)
{
	uint8_t buf[8192];
	size_t len = tu_msg_len(who, seq, max_len);

	tu_msg_fill(buf, len, who, seq);
	TU_RC(pinshm_send(p, buf, len, timeout_ms), 0);
}

/* The end of a dying child: wait to be killed by the test where
 * @p wait_for_kill, else die of SIGKILL now.  @return never. */
static int child_die(bool wait_for_kill)
{
	if (wait_for_kill)
		for (;;)
			pause();
	raise(SIGKILL);
	return 9;
}

/* Producer child: send `count` messages of 100 bytes, reserve 500 and write
 * half of it, report, then die (variant 2: wait to be killed). */
static int dying_producer(void *arg, int idx)
{
	struct death_ctx *d = arg;
	pinshm_channel_t *ch;
	uint8_t buf[100];
	void *b;
	int rc = pinshm_channel_attach(d->fd, PINSHM_PRODUCER, &ch);

	(void)idx;
	if (rc)
		tu_child_fail(1, "attach: %d", rc);
	for (unsigned s = 0; s < d->count; s++) {
		tu_msg_fill(buf, sizeof(buf), 0, s);
		rc = pinshm_send(ch, buf, sizeof(buf), CALL_MS);
		if (rc)
			tu_child_fail(2, "send %u: %d (%s)", s, rc, pinshm_strerror(rc));
	}
	rc = pinshm_reserve(ch, 500, &b, CALL_MS);
	if (rc)
		tu_child_fail(3, "reserve: %d (%s)", rc, pinshm_strerror(rc));
	/* half a message: a plausible header, then garbage */
	tu_msg_fill(b, 500, 0, d->count);
	memset((uint8_t *)b + 250, 0xab, 250);
	tu_report_vals(&d->rep, 0, 0, pinshm_channel_endpoint(ch), d->count);
	return child_die(d->variant == 2);
}

/* A producer dies between reserve and commit: after the reap, a new
 * producer takes its lane; nothing of the reservation is ever delivered. */
START_TEST(test_producer_dies_reserved)
{
	/* _i: 0: 10 messages then die; 1: a reservation that wraps; 2: the same,
	 * killed by the test; 3: nothing committed before. */
	static const unsigned counts[] = {10, 31, 31, 0};
	struct death_ctx d = {.variant = _i, .count = counts[_i]};
	struct tu_procs ps;
	struct tu_report rep;
	pinshm_channel_t *c, *p;
	size_t size, len;
	uint8_t buf[600];
	unsigned ep;
	void *base;

	d.fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 1, 1);
	c = tu_attach(d.fd, PINSHM_CONSUMER);
	tu_reporter_open(&d.rep);
	tu_procs_init(&ps);
	tu_spawn(&ps, "producer", dying_producer, &d, 0);
	/* Receive while it sends (31 do not fit at once). */
	for (unsigned s = 0; s < d.count; s++)
		recv_msg_expect(c, 0, s, 0, CALL_MS);
	TU_RC(tu_collect(&d.rep, &rep, WAIT_MS), 0);
	ep = (unsigned)rep.v[0];
	ck_assert_uint_eq(ep, 0);
	if (d.variant == 2)
		ck_assert_int_eq(kill(ps.pid[0], SIGKILL), 0);
	expect_killed(&ps, 0);
	/* Dead but not reaped: just empty. */
	TU_RC(pinshm_recv(c, buf, sizeof(buf), &len, PINSHM_NONBLOCK), -EAGAIN);
	base = tu_map(d.fd, &size);
	TU_RC(pinshm_segment_reap(base, size, ep), 0);
	TU_RC(pinshm_segment_reap(base, size, ep), -EINVAL);
	TU_RC(pinshm_segment_reap(base, size, 1000), -EINVAL);
	/* Its last producer gone, the empty queue says so. */
	TU_RC(pinshm_recv(c, buf, sizeof(buf), &len, PINSHM_NONBLOCK), -EPIPE);
	TU_RC(pinshm_recv(c, buf, sizeof(buf), &len, 5000), -EPIPE);
	/* A new producer takes the same lane and goes on, lap after lap. */
	p = tu_attach(d.fd, PINSHM_PRODUCER);
	ck_assert_uint_eq(pinshm_channel_endpoint(p), ep);
	TU_RC(pinshm_recv(c, buf, sizeof(buf), &len, PINSHM_NONBLOCK), -EAGAIN);
	for (unsigned s = 0; s < 2000; s++) {
		send_msg(p, 1, s, 600, PINSHM_NONBLOCK);
		if (s % 3 != 2)
			continue;
		for (unsigned k = s - 2; k <= s; k++)
			recv_msg_expect(c, 1, k, 600, PINSHM_NONBLOCK);
	}
	recv_msg_expect(c, 1, 1998, 600, PINSHM_NONBLOCK);
	recv_msg_expect(c, 1, 1999, 600, PINSHM_NONBLOCK);
	TU_RC(pinshm_recv(c, buf, sizeof(buf), &len, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_channel_close(c), 0);
	munmap(base, size);
	tu_reporter_close(&d.rep);
	close(d.fd);
}
END_TEST

/* Producer child: stream messages in every way until killed. */
static int streaming_producer(void *arg, int idx)
{
	struct death_ctx *d = arg;
	pinshm_channel_t *ch;
	uint8_t buf[8 * 600];
	uint64_t r = 99, deadline = tu_now_ms() + WAIT_MS;
	int rc = pinshm_channel_attach(d->fd, PINSHM_PRODUCER, &ch);

	(void)idx;
	if (rc)
		tu_child_fail(1, "attach: %d", rc);
	for (uint64_t s = 0;;) {
		size_t len = tu_msg_len(0, s, 600);
		if (tu_now_ms() > deadline)
			tu_child_fail(2, "never killed");
		r = tu_mix(r);
		if (r % 3 == 0) {
			tu_msg_fill(buf, len, 0, s);
			rc = pinshm_send(ch, buf, len, CALL_MS);
			s++;
		} else if (r % 3 == 1) {
			void *b;
			rc = pinshm_reserve(ch, 600, &b, CALL_MS);
			if (rc == 0) {
				/* write slowly, so that deaths land here too */
				memset(b, 0xcc, 600);
				tu_msg_fill(b, len, 0, s);
				rc = pinshm_commit(ch, len, (r >> 9) & 1 ? PINSHM_MORE : 0);
				s++;
			}
		} else {
			struct iovec iov[4];
			for (unsigned i = 0; i < 4; i++) {
				size_t l = tu_msg_len(0, s + i, 600);
				iov[i].iov_base = buf + i * 600;
				iov[i].iov_len = l;
				tu_msg_fill(iov[i].iov_base, l, 0, s + i);
			}
			rc = pinshm_send_batch(ch, iov, 4, CALL_MS);
			if (rc > 0) {
				s += (unsigned)rc;
				rc = 0;
			}
		}
		if (rc)
			tu_child_fail(3, "producer: %d (%s)", rc, pinshm_strerror(rc));
	}
}

/* A producer killed at a random moment: the consumer gets a gapless prefix
 * of its messages, intact, then -EPIPE after the reap. */
START_TEST(test_producer_killed_midstream)
{
	struct death_ctx d = {.variant = 0};
	struct tu_procs ps;
	pinshm_channel_t *c, *p;
	uint64_t next = 0, stop = 500 + (uint64_t)_i * 1733, s;
	uint8_t buf[8192];
	uint32_t w;
	size_t size, len;
	void *base;
	int rc;

	d.fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 1, 1);
	c = tu_attach(d.fd, PINSHM_CONSUMER);
	tu_procs_init(&ps);
	tu_spawn(&ps, "producer", streaming_producer, &d, 0);
	while (next < stop) {
		TU_RC(recv_seq(c, 600, CALL_MS, &w, &s), 0);
		ck_assert_uint_eq(s, next);
		next++;
	}
	ck_assert_int_eq(kill(ps.pid[0], SIGKILL), 0);
	expect_killed(&ps, 0);
	/* What it committed before dying: still a clean sequence. */
	while ((rc = recv_seq(c, 600, PINSHM_NONBLOCK, &w, &s)) == 0) {
		ck_assert_uint_eq(s, next);
		next++;
	}
	TU_RC(rc, -EAGAIN);
	base = tu_map(d.fd, &size);
	TU_RC(pinshm_segment_reap(base, size, 0), 0);
	TU_RC(pinshm_recv(c, buf, sizeof(buf), &len, 5000), -EPIPE);
	p = tu_attach(d.fd, PINSHM_PRODUCER);
	for (unsigned s = 0; s < 500; s++) {
		send_msg(p, 1, s, 600, CALL_MS);
		recv_msg_expect(c, 1, s, 600, PINSHM_NONBLOCK);
	}
	TU_RC(pinshm_recv(c, buf, sizeof(buf), &len, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_channel_close(c), 0);
	munmap(base, size);
	close(d.fd);
}
END_TEST

/* Consumer child of a shared queue: receive two and release them, then hold
 * three in place, report them, and die (variant 1: wait to be killed). */
/* In a child: receive in place into @p m, an intact message whose seq goes into @p seq, or fail. */
static void child_recv_inplace(pinshm_channel_t *ch, pinshm_msg_t *m, uint64_t *seq)
{
	char why[200];
	uint32_t w;
	int rc = pinshm_recv_inplace(ch, m, CALL_MS);

	if (rc)
		tu_child_fail(2, "recv_inplace: %d", rc);
	if (tu_msg_check(m->data, m->len, 0, &w, seq, why, sizeof(why)))
		tu_child_fail(3, "%s", why);
}

static int dying_consumer(void *arg, int idx)
{
	struct death_ctx *d = arg;
	pinshm_channel_t *ch;
	pinshm_msg_t m[3];
	struct tu_report rep = {.who = idx};
	int rc = pinshm_channel_attach(d->fd, PINSHM_CONSUMER, &ch);

	if (rc)
		tu_child_fail(1, "attach: %d", rc);
	rep.v[0] = pinshm_channel_endpoint(ch);
	for (unsigned i = 0; i < 2; i++)
		child_recv_inplace(ch, &m[i], &rep.v[1 + i]);
	rc = pinshm_release(ch, &m[1]);
	if (rc)
		tu_child_fail(4, "release: %d", rc);
	for (unsigned i = 0; i < 3; i++)
		child_recv_inplace(ch, &m[i], &rep.v[3 + i]);
	tu_report(&d->rep, &rep);
	return child_die(d->variant == 1);
}

/* A consumer of a shared queue dies holding messages in place: after the
 * reap they go to the other consumer; everything else exactly once. */
START_TEST(test_consumer_dies_holding)
{
	enum { N = 40 };
	struct death_ctx d = {.variant = _i};
	struct tu_procs ps;
	struct tu_report rep;
	pinshm_channel_t *p, *b, *c3;
	unsigned seen[N] = {0}, expect[N];
	uint32_t w;
	uint64_t s;
	size_t size;
	void *base;
	int rc;

	d.fd = tu_channel(PINSHM_QUEUE, 16 * KiB, 1, 2);
	p = tu_attach(d.fd, PINSHM_PRODUCER);
	b = tu_attach(d.fd, PINSHM_CONSUMER);
	for (unsigned s = 0; s < N; s++)
		send_msg(p, 0, s, 300, PINSHM_NONBLOCK);
	tu_reporter_open(&d.rep);
	tu_procs_init(&ps);
	tu_spawn(&ps, "consumer", dying_consumer, &d, 0);
	TU_RC(tu_collect(&d.rep, &rep, WAIT_MS), 0);
	for (unsigned s = 0; s < N; s++)
		expect[s] = 1;
	for (unsigned i = 1; i <= 2; i++) {
		ck_assert_uint_lt(rep.v[i], N);
		expect[rep.v[i]] = 0; /* released: consumed for good */
	}
	if (d.variant == 1) {
		/* b takes some while the dying one holds three. */
		for (unsigned i = 0; i < 5; i++) {
			TU_RC(recv_seq(b, 300, PINSHM_NONBLOCK, &w, &s), 0);
			ck_assert_uint_lt(s, N);
			seen[s]++;
		}
		ck_assert_int_eq(kill(ps.pid[0], SIGKILL), 0);
	}
	expect_killed(&ps, 0);
	base = tu_map(d.fd, &size);
	TU_RC(pinshm_segment_reap(base, size, (unsigned)rep.v[0]), 0);
	while ((rc = recv_seq(b, 300, PINSHM_NONBLOCK, &w, &s)) == 0) {
		ck_assert_uint_lt(s, N);
		seen[s]++;
	}
	TU_RC(rc, -EAGAIN);
	for (unsigned s = 0; s < N; s++)
		ck_assert_msg(seen[s] == expect[s], "seq %u: delivered %u times to the survivor, expected %u (held: "
						    "%llu %llu %llu, released %llu %llu)",
			      s, seen[s], expect[s], (unsigned long long)rep.v[3], (unsigned long long)rep.v[4],
			      (unsigned long long)rep.v[5], (unsigned long long)rep.v[1],
			      (unsigned long long)rep.v[2]);
	/* The dead one's endpoint can be taken again, and no room was lost. */
	c3 = tu_attach(d.fd, PINSHM_CONSUMER);
	for (unsigned s = N; s < N + 3000; s++) {
		send_msg(p, 0, s, 300, PINSHM_NONBLOCK);
		recv_msg_expect(s % 2 ? b : c3, 0, s, 300, PINSHM_NONBLOCK);
	}
	TU_RC(pinshm_channel_close(c3), 0);
	TU_RC(pinshm_channel_close(b), 0);
	TU_RC(pinshm_channel_close(p), 0);
	munmap(base, size);
	tu_reporter_close(&d.rep);
	close(d.fd);
}
END_TEST

/* ---- peers gone ----------------------------------------------------------- */

/* Attach as role v[idx], fill the ring if a producer, report, then:
 * idle: wait to be killed; blocked: wait FOREVER and exit 0 on -EPIPE. */
struct gone_ctx {
	int fd;
	struct tu_reporter rep;
};

static int idle_endpoint(void *arg, int role)
{
	struct gone_ctx *g = arg;
	pinshm_channel_t *ch;
	int rc = pinshm_channel_attach(g->fd, (pinshm_role_t)role, &ch);

	if (rc)
		tu_child_fail(1, "attach: %d", rc);
	tu_report_vals(&g->rep, role, 0, pinshm_channel_endpoint(ch), 0);
	for (;;)
		pause();
}

static int blocked_endpoint(void *arg, int role)
{
	struct gone_ctx *g = arg;
	pinshm_channel_t *ch;
	uint8_t buf[100] = {0};
	size_t len;
	int rc = pinshm_channel_attach(g->fd, (pinshm_role_t)role, &ch);

	if (rc)
		tu_child_fail(1, "attach: %d", rc);
	pinshm_channel_set_spin(ch, 0);
	if (role == PINSHM_PRODUCER) {
		while ((rc = pinshm_send(ch, buf, sizeof(buf), PINSHM_NONBLOCK)) == 0)
			;
		if (rc != -EAGAIN)
			tu_child_fail(2, "filling: %d", rc);
	}
	tu_report_vals(&g->rep, role, 0, pinshm_channel_endpoint(ch), 0);
	if (role == PINSHM_PRODUCER)
		rc = pinshm_send(ch, buf, sizeof(buf), PINSHM_FOREVER);
	else
		rc = pinshm_recv(ch, buf, sizeof(buf), &len, PINSHM_FOREVER);
	if (rc != -EPIPE)
		tu_child_fail(3, "blocked %s returned %d (%s), expected -EPIPE",
			      role == PINSHM_PRODUCER ? "send" : "recv", rc, pinshm_strerror(rc));
	pinshm_channel_close(ch);
	return 0;
}

/* _i 0: a consumer waits in recv(FOREVER), the producer is killed and reaped.
 * _i 1: a producer waits in send(FOREVER) on a full ring, the consumer is
 * killed and reaped.  The waiter gets -EPIPE. */
START_TEST(test_peer_gone)
{
	const int victim_role = _i == 0 ? PINSHM_PRODUCER : PINSHM_CONSUMER;
	const int waiter_role = _i == 0 ? PINSHM_CONSUMER : PINSHM_PRODUCER;
	struct gone_ctx g;
	struct tu_procs ps;
	struct tu_report rep;
	unsigned victim_ep;
	size_t size;
	void *base;

	g.fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 1, 1);
	tu_reporter_open(&g.rep);
	tu_procs_init(&ps);
	tu_spawn(&ps, "victim", idle_endpoint, &g, victim_role);
	TU_RC(tu_collect(&g.rep, &rep, WAIT_MS), 0);
	ck_assert_int_eq(rep.who, victim_role);
	victim_ep = (unsigned)rep.v[0];
	tu_spawn(&ps, "waiter", blocked_endpoint, &g, waiter_role);
	TU_RC(tu_collect(&g.rep, &rep, WAIT_MS), 0);
	ck_assert_int_eq(rep.who, waiter_role);
	tu_sleep_ms(100); /* let it go to sleep (the test passes either way) */
	ck_assert_int_eq(kill(ps.pid[0], SIGKILL), 0);
	expect_killed(&ps, 0);
	base = tu_map(g.fd, &size);
	TU_RC(pinshm_segment_reap(base, size, victim_ep), 0);
	ck_assert_int_eq(tu_wait_one(&ps, 1, 30000), 0);
	{
		char s[48];
		ck_assert_msg(WIFEXITED(ps.status[1]) && WEXITSTATUS(ps.status[1]) == 0, "waiter: %s",
			      tu_status_str(ps.status[1], s, sizeof(s)));
	}
	tu_kill_all(&ps);
	munmap(base, size);
	tu_reporter_close(&g.rep);
	close(g.fd);
}
END_TEST

/* ---- fork: inherited handles ------------------------------------------- */

struct forget_ctx {
	int fd;
	pinshm_channel_t *inherited;
	bool close; /* the child closes the inherited handle instead of forgetting it */
};

static int forgetting_child(void *arg, int idx)
{
	struct forget_ctx *f = arg;
	pinshm_channel_t *c;
	uint8_t buf[1024];
	char why[200];
	size_t len;
	int rc;

	(void)idx;
	rc = 0;
	if (f->close)
		rc = pinshm_channel_close(f->inherited);
	else
		pinshm_channel_forget(f->inherited);
	if (rc)
		tu_child_fail(4, "close of the inherited handle: %d", rc);
	rc = pinshm_channel_attach(f->fd, PINSHM_CONSUMER, &c);
	if (rc)
		tu_child_fail(1, "attach: %d", rc);
	for (uint64_t s = 0; s < 5; s++) {
		uint32_t w;
		uint64_t got;
		rc = pinshm_recv(c, buf, sizeof(buf), &len, CALL_MS);
		if (rc)
			tu_child_fail(2, "recv: %d", rc);
		if (tu_msg_check(buf, len, 300, &w, &got, why, sizeof(why)) || got != s)
			tu_child_fail(3, "bad message %llu: %s", (unsigned long long)s, why);
	}
	pinshm_channel_close(c);
	return 0;
}

/* A child forgets the handle it inherited, or closes it (which in a child
 * only unmaps it); the parent's endpoint lives on. */
START_TEST(test_fork_forget)
{
	struct forget_ctx f = {.close = _i == 1};
	struct tu_procs ps;
	pinshm_channel_info_t info;
	pinshm_channel_t *c;

	f.fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 1, 1);
	f.inherited = tu_attach(f.fd, PINSHM_PRODUCER);
	for (uint64_t s = 0; s < 5; s++)
		send_msg(f.inherited, 0, s, 300, PINSHM_NONBLOCK);
	tu_procs_init(&ps);
	tu_spawn(&ps, "child", forgetting_child, &f, 0);
	tu_wait_all_ok(&ps, WAIT_MS);
	TU_RC(pinshm_channel_info(f.inherited, &info), 0);
	ck_assert_uint_eq(info.producers, 1);
	ck_assert_uint_eq(info.consumers, 0);
	c = tu_attach(f.fd, PINSHM_CONSUMER);
	send_msg(f.inherited, 0, 5, 300, PINSHM_NONBLOCK);
	recv_msg_expect(c, 0, 5, 300, PINSHM_NONBLOCK);
	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_channel_close(f.inherited), 0);
	close(f.fd);
}
END_TEST

static Suite *stress_suite(void)
{
	Suite *s = suite_create("stress");
	TCase *tc;

	tc = tcase_create("concurrency");
	tcase_set_timeout(tc, 150);
	tcase_add_test(tc, test_queue_3x2);
	tcase_add_test(tc, test_queue_4x4);
	tcase_add_test(tc, test_queue_2x1);
	tcase_add_test(tc, test_queue_1x1_big);
	tcase_add_test(tc, test_topic_2x3);
	tcase_add_test(tc, test_queue_many_lanes);
	tcase_add_test(tc, test_shared_many_lanes);
	tcase_add_test(tc, test_topic_many_lanes);
	tcase_add_test(tc, test_topic_overrun_stress);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_set_timeout(tc, 150);
	tcase_add_test(tc, test_threads_queue);
	tcase_add_test(tc, test_threads_topic);
	suite_add_tcase(s, tc);

	tc = tcase_create("death");
	tcase_set_timeout(tc, 150);
	tcase_add_loop_test(tc, test_producer_dies_reserved, 0, 4);
	tcase_add_loop_test(tc, test_producer_killed_midstream, 0, 3);
	tcase_add_loop_test(tc, test_consumer_dies_holding, 0, 2);
	tcase_add_loop_test(tc, test_peer_gone, 0, 2);
	tcase_add_loop_test(tc, test_fork_forget, 0, 2); /* forget, close */
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(stress_suite(), false) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
