/*
 * check_crash.c - kill -9 loops against a real pinshmd.
 *
 * One daemon, five channels created through it, and a loop of kills: each
 * turn forks a victim that connects, opens one channel and works on it with
 * the test process as its peer, and kills it with SIGKILL at a random moment
 * or at a chosen point:
 *
 *   producer  (queue, and topic publisher): mid-stream; between reserve and
 *             commit; in the middle of a batch (commits with PINSHM_MORE, not
 *             flushed); asleep in send() on a full ring;
 *   consumer  (queue, alone or sharing it with the test's consumer):
 *             mid-stream; holding messages received in place and not
 *             released; in the middle of a received batch; asleep in recv()
 *             on an empty queue;
 *   subscriber (back-pressure topic): the same points as a consumer;
 *
 * and some turns kill the victim before it even opened its channel.
 *
 * Victims report what they did on a shared page that only the test and its
 * victims map (no channel, nothing the daemon hands out): a producer says
 * which sequence numbers it is about to commit and which it committed; a
 * consumer says, before it counts a message as delivered, that it holds it,
 * and after release that it released it.  Every message carries
 * {producer, seq, checksum}.  The test checks:
 *
 *   - every message committed before a kill is delivered exactly once and in
 *     order (per producer, at a consumer of its own); where the killed
 *     process was a consumer holding messages unreleased, those may come
 *     again (at least once), and only those;
 *   - the peer of a dead process gets -EPIPE (the queue consumer of a dead
 *     producer, the producer of a dead queue consumer), a dead consumer of
 *     a shared queue is gone for the other, and a dead subscriber no longer
 *     holds its publisher back;
 *   - nothing leaks: once the loop is over and the channels are gone, the
 *     daemon's accounting (pinshm_status) and its locked memory (VmLck) are
 *     back at their baseline, and only the test's connection is left.
 *
 * PINSHM_CRASH_KILLS sets the number of kills (default 1000, about 5 s
 * here); PINSHM_CRASH_SEED replays a run (the seed is printed).
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemonutil.h"
#include "pinshm.h"
#include "testutil.h"

#define KiB 1024u
#define CAPACITY (4 * KiB) /* small rings: full often */
#define MAX_LEN 300u       /* largest test message */
#define MAX_SEQ (1u << 20) /* messages sent to consumer victims, at most */
#define ATTACH_MS 20000    /* for a victim to attach */
#define SETTLE_MS 20000    /* for the daemon to reap a victim (its peer sees it) */
#define VICTIM_MS 120000   /* a victim that lives longer exits with an error */
#define DEFAULT_KILLS 1000u

/* The five kinds of victim, and the channel each one works on. */
enum scenario {
	SC_QUEUE_PRODUCER,  /* "crash-q": victims produce, the test consumes */
	SC_TOPIC_PUBLISHER, /* "crash-t": victims publish, the test subscribes */
	SC_QUEUE_CONSUMER,  /* "crash-qc": the test produces, victims consume */
	SC_TOPIC_SUBSCRIBER, /* "crash-ts": the test publishes and subscribes, victims subscribe */
	SC_SHARED_CONSUMER, /* "crash-qs": the test produces and consumes, victims consume too */
	SC_COUNT
};

static const char *const sc_channel[SC_COUNT] = {"crash-q", "crash-t", "crash-qc", "crash-ts", "crash-qs"};
static const char *const sc_name[SC_COUNT] = {"queue producer", "topic publisher", "queue consumer",
					      "topic subscriber", "shared consumer"};

/* The queues whose deliveries are counted per seq: crash-qc and crash-qs. */
enum { CQ_ALONE, CQ_SHARED, CQ_COUNT };

static int counted_queue(enum scenario sc)
{
	return sc == SC_QUEUE_CONSUMER ? CQ_ALONE : sc == SC_SHARED_CONSUMER ? CQ_SHARED : -1;
}

/* Where a victim stops to be killed (PARK_NONE: killed mid-stream). */
enum park {
	PARK_NONE,
	PARK_EARLY,    /* killed right after fork, before or while it connects and opens */
	PARK_RESERVED, /* producer: between reserve and commit */
	PARK_BATCH,    /* producer: commits with PINSHM_MORE not flushed; consumer: half a batch released */
	PARK_HOLDING,  /* consumer: messages received in place, not released */
	PARK_ASLEEP,   /* asleep in a blocking send (full ring) or recv (empty channel) */
	PARK_COUNT
};

static const char *const park_name[PARK_COUNT] = {"mid-stream", "before open", "reserved", "mid-batch",
						  "holding", "asleep"};

/*
 * What a victim reports.  Written by the victim, read by the test after the
 * victim is dead (or, for the flags, while it runs: each is one atomic).
 * Seq counters are "end" values: seqs below them.
 */
struct victim_state {
	_Atomic uint32_t attached; /* its endpoint is attached */
	_Atomic uint32_t parked;   /* it reached its park point (a blocking call follows for PARK_ASLEEP) */
	_Atomic uint32_t quiet;    /* PARK_ASLEEP: the test must stop feeding it / draining it */
	_Atomic uint32_t quiet_seen; /* written by the test: it saw quiet, and feeds or drains no more */
	_Atomic uint32_t failed;   /* set with why[] before it exits with an error */
	_Atomic uint64_t attempted; /* producer: seqs below may have been committed */
	_Atomic uint64_t committed; /* producer: seqs below were committed */
	_Atomic uint64_t held_from; /* consumer: no seq it holds unreleased is lower (UINT64_MAX: none) */
	_Atomic uint64_t held_end;  /* consumer: none is higher or equal (written before counting it) */
	_Atomic uint64_t got;       /* consumer, subscriber: messages received */
	char why[256];
};

/* The page shared with the victims (anonymous, MAP_SHARED, made before any fork). */
struct shared {
	struct victim_state v;
	_Atomic uint32_t delivered[CQ_COUNT][MAX_SEQ]; /* crash-qc, crash-qs: deliveries of each seq */
};

struct victim_args {
	const char *sock;
	enum scenario sc;
	enum park park;
	uint32_t gen; /* the producer id of a producing victim */
	uint64_t seed;
	pinshm_client_t *parent_client; /* inherited: dropped at once */
	struct shared *sh;
};

/* ---- victims ------------------------------------------------------------ */

static _Noreturn void victim_fail(struct victim_state *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static _Noreturn void victim_fail(struct victim_state *v, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(v->why, sizeof(v->why), fmt, ap);
	va_end(ap);
	atomic_store(&v->failed, 1);
	_exit(3);
}

static void victim_check_time(struct victim_state *v, uint64_t deadline)
{
	if (tu_now_ms() > deadline)
		victim_fail(v, "never killed");
}

/* PARK_ASLEEP: ask the test to stop feeding or draining the channel, and
 * wait until it has: a drain still under way as the victim fills its ring
 * would free room, and the blocking send that follows would not sleep. */
static void victim_go_quiet(struct victim_state *v, uint64_t deadline)
{
	atomic_store(&v->quiet, 1);
	while (!atomic_load(&v->quiet_seen)) {
		victim_check_time(v, deadline);
		usleep(100);
	}
}

static _Noreturn void victim_park(struct victim_state *v)
{
	atomic_store(&v->parked, 1);
	for (;;)
		pause();
}

/* A producer (queue) or publisher (topic): seqs 0, 1, ... of producer gen. */
static void victim_produce(struct victim_args *a, pinshm_channel_t *ch)
{
	struct victim_state *v = &a->sh->v;
	uint64_t r = a->seed, s = 0, deadline = tu_now_ms() + VICTIM_MS;
	uint8_t buf[4 * MAX_LEN];
	int rc = 0;

	if (a->park == PARK_ASLEEP) {
		/* Fill the ring, then sleep in a blocking send until killed. */
		victim_go_quiet(v, deadline);
		pinshm_channel_set_spin(ch, 0);
		for (;;) {
			size_t len = tu_msg_len(a->gen, s, MAX_LEN);
			tu_msg_fill(buf, len, a->gen, s);
			atomic_store(&v->attempted, s + 1);
			rc = pinshm_send(ch, buf, len, PINSHM_NONBLOCK);
			if (rc == -EAGAIN)
				break;
			if (rc)
				victim_fail(v, "filling: %s", pinshm_strerror(rc));
			atomic_store(&v->committed, ++s);
		}
		atomic_store(&v->parked, 1);
		rc = pinshm_send(ch, buf, tu_msg_len(a->gen, s, MAX_LEN), VICTIM_MS);
		victim_fail(v, "blocking send returned %s", pinshm_strerror(rc));
	}
	for (unsigned op = 0;; op++) {
		victim_check_time(v, deadline);
		r = tu_mix(r);
		/* A park point comes after a few operations. */
		bool park_now = op >= 3 + (r >> 40) % 8;
		if (a->park == PARK_RESERVED && park_now) {
			void *b;
			size_t len = tu_msg_len(a->gen, s, MAX_LEN);
			atomic_store(&v->attempted, s + 1);
			rc = pinshm_reserve(ch, MAX_LEN, &b, 1000);
			if (rc == 0) {
				tu_msg_fill(b, len, a->gen, s);
				victim_park(v);
			}
		} else if (a->park == PARK_BATCH && park_now) {
			/* Two commits with PINSHM_MORE, no flush: committed, receivers not woken. */
			void *b;
			atomic_store(&v->attempted, s + 2);
			for (unsigned i = 0; i < 2; i++) {
				size_t len = tu_msg_len(a->gen, s, MAX_LEN);
				rc = pinshm_reserve(ch, len, &b, 1000);
				if (rc)
					break;
				tu_msg_fill(b, len, a->gen, s);
				rc = pinshm_commit(ch, len, PINSHM_MORE);
				if (rc)
					victim_fail(v, "commit: %s", pinshm_strerror(rc));
				atomic_store(&v->committed, ++s);
			}
			if (rc == 0)
				victim_park(v);
		} else if (r % 3 == 0) {
			size_t len = tu_msg_len(a->gen, s, MAX_LEN);
			tu_msg_fill(buf, len, a->gen, s);
			atomic_store(&v->attempted, s + 1);
			rc = pinshm_send(ch, buf, len, 1000);
			if (rc == 0)
				atomic_store(&v->committed, ++s);
		} else if (r % 3 == 1) {
			void *b;
			size_t len = tu_msg_len(a->gen, s, MAX_LEN);
			atomic_store(&v->attempted, s + 1);
			rc = pinshm_reserve(ch, MAX_LEN, &b, 1000);
			if (rc == 0) {
				memset(b, 0xcc, MAX_LEN); /* slowly: deaths land here too */
				tu_msg_fill(b, len, a->gen, s);
				rc = pinshm_commit(ch, len, (r >> 9) & 1 ? PINSHM_MORE : 0);
				if (rc)
					victim_fail(v, "commit: %s", pinshm_strerror(rc));
				atomic_store(&v->committed, ++s);
			}
		} else {
			struct iovec iov[4];
			for (unsigned i = 0; i < 4; i++) {
				size_t len = tu_msg_len(a->gen, s + i, MAX_LEN);
				iov[i].iov_base = buf + i * MAX_LEN;
				iov[i].iov_len = len;
				tu_msg_fill(iov[i].iov_base, len, a->gen, s + i);
			}
			atomic_store(&v->attempted, s + 4);
			rc = pinshm_send_batch(ch, iov, 4, 1000);
			if (rc > 0) {
				s += (unsigned)rc;
				atomic_store(&v->committed, s);
				rc = 0;
			}
		}
		if (rc != 0 && rc != -ETIMEDOUT)
			victim_fail(v, "producer, op %u: %s", op, pinshm_strerror(rc));
	}
}

/* Count message @p m as delivered to this victim; check that it follows
 * the previous one (*next, UINT64_MAX before the first). */
static void victim_take(struct victim_args *a, const pinshm_msg_t *m, uint64_t *next)
{
	struct victim_state *v = &a->sh->v;
	char why[200];
	uint32_t who;
	uint64_t seq;

	int cq = counted_queue(a->sc);

	if (tu_msg_check(m->data, m->len, MAX_LEN, &who, &seq, why, sizeof(why)) != 0)
		victim_fail(v, "bad message: %s", why);
	/* A shared queue's consumer sees only some seqs, and messages handed
	 * back by a dead consumer late: no order to check. */
	if (who != 0 || (a->sc != SC_SHARED_CONSUMER && *next != UINT64_MAX && seq != *next))
		victim_fail(v, "got (%u, %llu), expected (0, %llu)", who, (unsigned long long)seq,
			    (unsigned long long)*next);
	if (cq >= 0 && seq >= MAX_SEQ)
		victim_fail(v, "seq %llu out of the test's range", (unsigned long long)seq);
	/* Say we hold it before counting it: a kill in between leaves it
	 * counted at most once more when it is delivered again. */
	uint64_t from = atomic_load(&v->held_from), end = atomic_load(&v->held_end);
	if (from == UINT64_MAX || seq < from)
		atomic_store(&v->held_from, seq);
	if (from == UINT64_MAX || seq + 1 > end)
		atomic_store(&v->held_end, seq + 1);
	*next = seq + 1;
	if (cq >= 0)
		atomic_fetch_add(&a->sh->delivered[cq][seq], 1);
	atomic_fetch_add(&v->got, 1);
}

/* Release the held messages up to and including @p m: on a queue of its
 * own, seqs below @p released_end are then released and those from it on
 * still held; on a shared queue, what it holds is not a range of seqs: the
 * range held stays as it is until everything is released (@p all). */
static void victim_release(struct victim_args *a, pinshm_channel_t *ch, const pinshm_msg_t *m,
			   uint64_t released_end, bool all)
{
	struct victim_state *v = &a->sh->v;
	int rc = pinshm_release(ch, m);

	if (rc)
		victim_fail(v, "release: %s", pinshm_strerror(rc));
	if (a->sc != SC_SHARED_CONSUMER)
		atomic_store(&v->held_from, released_end < atomic_load(&v->held_end) ? released_end : UINT64_MAX);
	else if (all)
		atomic_store(&v->held_from, UINT64_MAX);
}

/* A consumer (queue) or subscriber (topic): receives in place only, so that
 * it knows what it holds when it dies. */
static void victim_consume(struct victim_args *a, pinshm_channel_t *ch)
{
	struct victim_state *v = &a->sh->v;
	uint64_t r = a->seed, next = UINT64_MAX, deadline = tu_now_ms() + VICTIM_MS;
	pinshm_msg_t m[8];
	int rc;

	if (a->park == PARK_ASLEEP) {
		/* Drain, then sleep in a blocking recv until killed. */
		victim_go_quiet(v, deadline);
		pinshm_channel_set_spin(ch, 0);
		for (unsigned i = 0;; i++) {
			victim_check_time(v, deadline);
			if (i > 0)
				atomic_store(&v->parked, 1);
			rc = pinshm_recv_inplace(ch, &m[0], i == 0 ? PINSHM_NONBLOCK : VICTIM_MS);
			if (rc == -EAGAIN)
				continue;
			if (rc)
				victim_fail(v, "recv: %s", pinshm_strerror(rc));
			victim_take(a, &m[0], &next);
			victim_release(a, ch, &m[0], next, true);
			i = 0;
		}
	}
	for (unsigned op = 0;; op++) {
		victim_check_time(v, deadline);
		r = tu_mix(r);
		bool park_now = op >= 3 + (r >> 40) % 8;
		unsigned want = (a->park == PARK_HOLDING || a->park == PARK_BATCH) && park_now ? 8 : 1 + (unsigned)(r % 8);
		if (r % 2 == 0 || want == 8)
			rc = pinshm_recv_batch(ch, m, want, 1000);
		else
			rc = pinshm_recv_inplace(ch, &m[0], 1000);
		if (rc == -ETIMEDOUT)
			continue;
		if (rc < 0)
			victim_fail(v, "recv: %s", pinshm_strerror(rc));
		unsigned n = rc > 0 ? (unsigned)rc : 1;
		for (unsigned i = 0; i < n; i++)
			victim_take(a, &m[i], &next);
		if (want == 8 && a->park == PARK_HOLDING)
			victim_park(v);
		if (want == 8 && a->park == PARK_BATCH) {
			/* m[i] is seq next - n + i */
			if (n > 1)
				victim_release(a, ch, &m[n / 2 - 1], next - n + n / 2, false);
			victim_park(v);
		}
		victim_release(a, ch, &m[n - 1], next, true);
	}
}

static int victim_main(void *arg, int idx)
{
	struct victim_args *a = arg;
	struct victim_state *v = &a->sh->v;
	bool producing = a->sc == SC_QUEUE_PRODUCER || a->sc == SC_TOPIC_PUBLISHER;
	pinshm_client_t *c;
	pinshm_channel_t *ch;
	int rc;

	(void)idx;
	pinshm_disconnect(a->parent_client); /* the test's copy: closes nothing for it */
	rc = pinshm_connect(a->sock, &c);
	if (rc)
		victim_fail(v, "connect: %s", pinshm_strerror(rc));
	rc = pinshm_open(c, sc_channel[a->sc], producing ? PINSHM_PRODUCER : PINSHM_CONSUMER, &ch);
	if (rc)
		victim_fail(v, "open %s: %s (%s)", sc_channel[a->sc], pinshm_strerror(rc), pinshm_client_error(c));
	atomic_store(&v->attached, 1);
	if (producing)
		victim_produce(a, ch);
	else
		victim_consume(a, ch);
	return 9;
}

/* ---- the test's side ---------------------------------------------------- */

/* A range of seqs that a killed consumer held unreleased: [from, end). */
struct held {
	uint64_t from, end;
};

/* A queue whose deliveries are counted: the test sends seqs 0, 1, ... */
struct counted {
	pinshm_channel_t *producer, *consumer; /* consumer: crash-qs only */
	uint64_t sent;
	struct held *held; /* ranges killed consumers held */
	size_t nheld, capheld;
};

struct crash {
	struct daemon d;
	struct shared *sh;
	pinshm_client_t *c;
	pinshm_channel_t *q_consumer;   /* of crash-q */
	pinshm_channel_t *t_subscriber; /* of crash-t */
	pinshm_channel_t *ts_publisher; /* of crash-ts */
	pinshm_channel_t *ts_subscriber;
	struct counted cq[CQ_COUNT];    /* crash-qc, crash-qs */
	uint64_t rng;
	uint64_t ts_sent, ts_next; /* seqs of the test's own messages on crash-ts */
	/* figures */
	unsigned kills[SC_COUNT][PARK_COUNT];
	uint64_t ms_to_kill[SC_COUNT], ms_to_settle[SC_COUNT]; /* time spent, per scenario */
	uint64_t verified; /* messages checked by the test */
	uint64_t victim_got;
	unsigned epipes;
};

static uint64_t rnd(struct crash *cr, uint64_t n)
{
	cr->rng = tu_mix(cr->rng);
	return n ? cr->rng % n : 0;
}

static void sleep_us(unsigned us)
{
	struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* $name as a number from 1 to @p max, or @p dflt where it is not set. */
static unsigned env_unsigned(const char *name, unsigned dflt, unsigned long max)
{
	const char *s = getenv(name);
	char *end;

	if (!s || !*s)
		return dflt;
	unsigned long v = strtoul(s, &end, 0);
	ck_assert_msg(*end == '\0' && v > 0 && v <= max, "%s=%s: not a number from 1 to %lu", name, s, max);
	return (unsigned)v;
}

/* Receive one message of the test's own (producer 0) with seq *next on
 * @p ch: -EAGAIN/-ETIMEDOUT/-EPIPE are returned, anything else checked. */
static int recv_expect(struct crash *cr, pinshm_channel_t *ch, uint32_t who, uint64_t *next, int timeout_ms)
{
	uint8_t buf[MAX_LEN];
	char why[200];
	uint32_t w;
	uint64_t s;
	size_t len;
	int rc = pinshm_recv(ch, buf, sizeof(buf), &len, timeout_ms);

	if (rc == -EAGAIN || rc == -ETIMEDOUT || rc == -EPIPE)
		return rc;
	ck_assert_msg(rc == 0, "recv: %s (%s)", pinshm_strerror(rc), pinshm_channel_error(ch));
	ck_assert_msg(tu_msg_check(buf, len, MAX_LEN, &w, &s, why, sizeof(why)) == 0, "%s", why);
	ck_assert_msg(w == who && s == *next, "got (%u, %llu), expected (%u, %llu): lost, duplicated or reordered", w,
		      (unsigned long long)s, who, (unsigned long long)*next);
	(*next)++;
	cr->verified++;
	return 0;
}

/* Send the test's message seq @p s on @p ch. */
static int send_seq(pinshm_channel_t *ch, uint64_t s, int timeout_ms)
{
	uint8_t buf[MAX_LEN];
	size_t len = tu_msg_len(0, s, MAX_LEN);

	tu_msg_fill(buf, len, 0, s);
	return pinshm_send(ch, buf, len, timeout_ms);
}

/* Count one message of counted queue @p q received by the test on its
 * consumer.  @return as pinshm_recv(); -EAGAIN/-ETIMEDOUT returned, other
 * errors fail the test. */
static int counted_take(struct crash *cr, struct counted *q, int cq, int timeout_ms)
{
	uint8_t buf[MAX_LEN];
	char why[200];
	uint32_t w;
	uint64_t s;
	size_t len;
	int rc = pinshm_recv(q->consumer, buf, sizeof(buf), &len, timeout_ms);

	if (rc == -EAGAIN || rc == -ETIMEDOUT)
		return rc;
	ck_assert_msg(rc == 0, "recv: %s (%s)", pinshm_strerror(rc), pinshm_channel_error(q->consumer));
	ck_assert_msg(tu_msg_check(buf, len, MAX_LEN, &w, &s, why, sizeof(why)) == 0, "%s", why);
	ck_assert_msg(w == 0 && s < q->sent, "got (%u, %llu), only seqs below %llu were sent", w, (unsigned long long)s,
		      (unsigned long long)q->sent);
	atomic_fetch_add(&cr->sh->delivered[cq][s], 1);
	cr->verified++;
	return 0;
}

/* Keep the range of seqs that the killed consumer @p v held. */
static void held_add(struct counted *q, struct victim_state *v)
{
	uint64_t from = atomic_load(&v->held_from), end = atomic_load(&v->held_end);

	if (from == UINT64_MAX || end <= from)
		return;
	if (q->nheld == q->capheld) {
		q->capheld = q->capheld ? 2 * q->capheld : 256;
		q->held = realloc(q->held, q->capheld * sizeof(*q->held));
		ck_assert_ptr_nonnull(q->held);
	}
	q->held[q->nheld++] = (struct held){from, end};
}

/* Topic crash-ts: publish one message, draining the test's own subscriber
 * first when the ring is full.  @return as pinshm_send(). */
static int ts_publish(struct crash *cr, int timeout_ms)
{
	int rc = send_seq(cr->ts_publisher, cr->ts_sent, PINSHM_NONBLOCK);

	if (rc == -EAGAIN) {
		while (recv_expect(cr, cr->ts_subscriber, 0, &cr->ts_next, PINSHM_NONBLOCK) == 0)
			;
		rc = send_seq(cr->ts_publisher, cr->ts_sent, timeout_ms);
	}
	if (rc == 0)
		cr->ts_sent++;
	return rc;
}

/* One step of the test's side while the victim runs: feed it or drain it. */
static void pump(struct crash *cr, const struct victim_args *a, uint64_t *next)
{
	bool quiet = atomic_load(&cr->sh->v.quiet);
	int rc;

	/* No earlier step is under way: the victim may go on. */
	if (quiet)
		atomic_store(&cr->sh->v.quiet_seen, 1);

	switch (a->sc) {
	case SC_QUEUE_PRODUCER:
		if (!quiet)
			recv_expect(cr, cr->q_consumer, a->gen, next, PINSHM_NONBLOCK);
		break;
	case SC_TOPIC_PUBLISHER:
		if (!quiet)
			recv_expect(cr, cr->t_subscriber, a->gen, next, PINSHM_NONBLOCK);
		break;
	case SC_QUEUE_CONSUMER:
	case SC_SHARED_CONSUMER: {
		struct counted *q = &cr->cq[counted_queue(a->sc)];
		if (!quiet && q->sent < MAX_SEQ) {
			/* -EPIPE: full, and the victim has not attached yet */
			rc = send_seq(q->producer, q->sent, PINSHM_NONBLOCK);
			ck_assert_msg(rc == 0 || rc == -EAGAIN || rc == -EPIPE, "send: %s", pinshm_strerror(rc));
			if (rc == 0)
				q->sent++;
		}
		if (q->consumer)
			counted_take(cr, q, CQ_SHARED, PINSHM_NONBLOCK);
		break;
	}
	case SC_TOPIC_SUBSCRIBER:
		if (!quiet) {
			rc = send_seq(cr->ts_publisher, cr->ts_sent, PINSHM_NONBLOCK);
			ck_assert_msg(rc == 0 || rc == -EAGAIN, "publish: %s", pinshm_strerror(rc));
			if (rc == 0)
				cr->ts_sent++;
		}
		while (recv_expect(cr, cr->ts_subscriber, 0, &cr->ts_next, PINSHM_NONBLOCK) == 0)
			;
		break;
	default:
		break;
	}
}

/* After the kill: the dead victim's peer (the test) sees it gone. */
static void settle(struct crash *cr, const struct victim_args *a, uint64_t *next)
{
	struct victim_state *v = &cr->sh->v;
	uint64_t deadline = tu_now_ms() + SETTLE_MS;
	int rc;

	switch (a->sc) {
	case SC_QUEUE_PRODUCER:
	case SC_TOPIC_PUBLISHER: {
		/* Everything it committed, in order, then -EPIPE. */
		pinshm_channel_t *ch = a->sc == SC_QUEUE_PRODUCER ? cr->q_consumer : cr->t_subscriber;
		while ((rc = recv_expect(cr, ch, a->gen, next, 200)) != -EPIPE)
			ck_assert_msg(tu_now_ms() < deadline, "%s: no -EPIPE %d s after its producer died (%s)",
				      sc_channel[a->sc], SETTLE_MS / 1000, pinshm_strerror(rc));
		cr->epipes++;
		uint64_t committed = atomic_load(&v->committed), attempted = atomic_load(&v->attempted);
		ck_assert_msg(*next >= committed && *next <= (attempted > committed ? attempted : committed),
			      "%s: %llu messages of producer %u delivered; it had committed %llu (attempted up to "
			      "%llu) when it was killed (%s)",
			      sc_name[a->sc], (unsigned long long)*next, a->gen, (unsigned long long)committed,
			      (unsigned long long)attempted, park_name[a->park]);
		break;
	}
	case SC_SHARED_CONSUMER: {
		/* Record what it held; the daemon reaps it: one consumer left. */
		struct counted *q = &cr->cq[CQ_SHARED];
		pinshm_channel_info_t info;
		held_add(q, v);
		for (;;) {
			TU_RC(pinshm_channel_info(q->consumer, &info), 0);
			if (info.consumers == 1)
				break;
			ck_assert_msg(tu_now_ms() < deadline, "crash-qs: a consumer killed %d s ago is still attached",
				      SETTLE_MS / 1000);
			counted_take(cr, q, CQ_SHARED, 10);
		}
		break;
	}
	case SC_QUEUE_CONSUMER: {
		/* Record what it held; then our sends fill the ring and get -EPIPE. */
		struct counted *q = &cr->cq[CQ_ALONE];
		held_add(q, v);
		for (;;) {
			ck_assert_msg(q->sent < MAX_SEQ, "the test ran out of sequence numbers");
			rc = send_seq(q->producer, q->sent, 100);
			if (rc == 0) {
				q->sent++;
				continue;
			}
			if (rc == -EPIPE)
				break;
			ck_assert_msg(rc == -ETIMEDOUT, "send: %s", pinshm_strerror(rc));
			ck_assert_msg(tu_now_ms() < deadline, "crash-qc: no -EPIPE %d s after its consumer died",
				      SETTLE_MS / 1000);
		}
		cr->epipes++;
		break;
	}
	case SC_TOPIC_SUBSCRIBER: {
		/* It no longer holds the publisher back: three rings' worth go through. */
		uint64_t until = cr->ts_sent + 3 * CAPACITY / 64;
		while (cr->ts_sent < until) {
			rc = ts_publish(cr, 1000);
			ck_assert_msg(rc == 0 || rc == -ETIMEDOUT, "publish: %s", pinshm_strerror(rc));
			ck_assert_msg(tu_now_ms() < deadline, "crash-ts: a subscriber killed %d s ago still holds back "
							      "the publisher",
				      SETTLE_MS / 1000);
		}
		while (recv_expect(cr, cr->ts_subscriber, 0, &cr->ts_next, PINSHM_NONBLOCK) == 0)
			;
		break;
	}
	default:
		break;
	}
}

/* One victim, killed. */
static void one_kill(struct crash *cr, uint32_t gen)
{
	struct victim_state *v = &cr->sh->v;
	struct victim_args a = {
		.sock = cr->d.sock,
		.sc = (enum scenario)rnd(cr, SC_COUNT),
		.gen = gen,
		.seed = cr->rng,
		.parent_client = cr->c,
		.sh = cr->sh,
	};
	struct tu_procs ps;
	uint64_t next = 0, r = rnd(cr, 16);
	char st[48];

	/* 1/16 before open, 5/16 mid-stream, 10/16 at a park point. */
	if (r == 0) {
		a.park = PARK_EARLY;
	} else if (r >= 6) {
		static const enum park producer_parks[] = {PARK_RESERVED, PARK_BATCH, PARK_ASLEEP};
		static const enum park consumer_parks[] = {PARK_HOLDING, PARK_BATCH, PARK_ASLEEP};
		bool producing = a.sc == SC_QUEUE_PRODUCER || a.sc == SC_TOPIC_PUBLISHER;
		a.park = (producing ? producer_parks : consumer_parks)[r % 3];
	}
	memset(v, 0, sizeof(*v));
	atomic_store(&v->held_from, UINT64_MAX);
	tu_procs_init(&ps);
	uint64_t t_fork = tu_now_ms();
	tu_spawn(&ps, "victim", victim_main, &a, 0);

	if (a.park == PARK_EARLY) {
		sleep_us((unsigned)rnd(cr, 3000));
	} else {
		uint64_t deadline = tu_now_ms() + ATTACH_MS;
		while (!atomic_load(&v->attached) && !atomic_load(&v->failed)) {
			ck_assert_msg(tu_now_ms() < deadline, "victim (%s) did not open %s", sc_name[a.sc],
				      sc_channel[a.sc]);
			pump(cr, &a, &next);
			sleep_us(100);
		}
		if (a.park == PARK_NONE) {
			uint64_t until = tu_now_ms() + 1 + rnd(cr, 10);
			while (tu_now_ms() < until && !atomic_load(&v->failed)) {
				pump(cr, &a, &next);
				sleep_us(20);
			}
		} else {
			deadline = tu_now_ms() + ATTACH_MS;
			while (!atomic_load(&v->parked) && !atomic_load(&v->failed)) {
				ck_assert_msg(tu_now_ms() < deadline, "victim (%s) never reached %s", sc_name[a.sc],
					      park_name[a.park]);
				pump(cr, &a, &next);
				sleep_us(20);
			}
			/* Asleep: let it go to sleep in the futex (the test holds either way). */
			sleep_us((unsigned)(a.park == PARK_ASLEEP ? 1000 + rnd(cr, 2000) : rnd(cr, 500)));
		}
	}
	uint64_t t_kill = tu_now_ms();
	cr->ms_to_kill[a.sc] += t_kill - t_fork;
	ck_assert_int_eq(kill(ps.pid[0], SIGKILL), 0);
	ck_assert_int_eq(tu_wait_one(&ps, 0, ATTACH_MS), 0);
	ck_assert_msg(!atomic_load(&v->failed), "victim (%s, %s): %s", sc_name[a.sc], park_name[a.park], v->why);
	ck_assert_msg(WIFSIGNALED(ps.status[0]) && WTERMSIG(ps.status[0]) == SIGKILL, "victim: %s",
		      tu_status_str(ps.status[0], st, sizeof(st)));
	cr->kills[a.sc][a.park]++;
	cr->victim_got += atomic_load(&v->got);
	settle(cr, &a, &next);
	cr->ms_to_settle[a.sc] += tu_now_ms() - t_kill;
}

static pinshm_channel_t *open_ok(pinshm_client_t *c, const char *name, pinshm_role_t role)
{
	pinshm_channel_t *ch = NULL;

	CLIENT_RC(c, pinshm_open(c, name, role, &ch), 0);
	return ch;
}

static void create_ok(pinshm_client_t *c, const char *name, pinshm_kind_t kind, unsigned producers,
		      unsigned consumers)
{
	pinshm_channel_attr_t attr;

	tu_attr(&attr, kind, CAPACITY, producers, consumers);
	attr.max_message = MAX_LEN;
	CLIENT_RC(c, pinshm_create(c, name, &attr, 0600, 0), 0);
}

/* Channels and pinned bytes held by the daemon, and its connections. */
static void daemon_figures(pinshm_client_t *c, pinshm_status_t *st)
{
	CLIENT_RC(c, pinshm_status(c, st, NULL, NULL), 0);
}

/* A counted queue's check: every seq the test sent went out at least once,
 * more than once only where killed consumers held it, and only that often. */
static uint64_t check_deliveries(struct crash *cr, int cq, const char *name)
{
	struct counted *q = &cr->cq[cq];
	uint32_t *allowed = calloc(MAX_SEQ + 1, sizeof(*allowed));
	uint64_t dups = 0;

	ck_assert_ptr_nonnull(allowed);
	/* difference array of the held ranges (modulo 2^32) */
	for (size_t i = 0; i < q->nheld; i++) {
		allowed[q->held[i].from]++;
		allowed[q->held[i].end]--;
	}
	uint32_t extra = 0;
	for (uint64_t s = 0; s < q->sent; s++) {
		extra += allowed[s];
		uint32_t n = atomic_load(&cr->sh->delivered[cq][s]);
		ck_assert_msg(n >= 1, "%s: seq %llu of %llu sent was never delivered", name, (unsigned long long)s,
			      (unsigned long long)q->sent);
		ck_assert_msg(n <= 1 + extra, "%s: seq %llu delivered %u times; killed consumers held it %u times", name,
			      (unsigned long long)s, n, extra);
		dups += n - 1;
	}
	for (uint64_t s = q->sent; s < MAX_SEQ; s++)
		ck_assert_msg(atomic_load(&cr->sh->delivered[cq][s]) == 0, "%s: seq %llu delivered, never sent", name,
			      (unsigned long long)s);
	free(allowed);
	free(q->held);
	return dups;
}

START_TEST(test_kill_loop)
{
	unsigned kills = env_unsigned("PINSHM_CRASH_KILLS", DEFAULT_KILLS, 100000000ul);
	unsigned seed = env_unsigned("PINSHM_CRASH_SEED", (unsigned)time(NULL) ^ (unsigned)getpid(), UINT_MAX);
	struct crash cr = {.rng = seed};
	pinshm_status_t base, st;
	long locked_base, locked;
	uint64_t t0 = tu_now_ms();

	fprintf(stderr, "check_crash: %u kills, PINSHM_CRASH_SEED=%u\n", kills, seed);
	cr.sh = mmap(NULL, sizeof(*cr.sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(cr.sh != MAP_FAILED);
	daemon_start(&cr.d);
	cr.c = connect_ok(&cr.d);
	daemon_figures(cr.c, &base);
	locked_base = proc_status_value_kb(cr.d.pid, "VmLck:");

	create_ok(cr.c, "crash-q", PINSHM_QUEUE, 1, 1);
	create_ok(cr.c, "crash-t", PINSHM_TOPIC, 1, 1);
	create_ok(cr.c, "crash-qc", PINSHM_QUEUE, 1, 1);
	create_ok(cr.c, "crash-ts", PINSHM_TOPIC, 1, 2);
	create_ok(cr.c, "crash-qs", PINSHM_QUEUE, 1, 2);
	cr.q_consumer = open_ok(cr.c, "crash-q", PINSHM_CONSUMER);
	cr.t_subscriber = open_ok(cr.c, "crash-t", PINSHM_CONSUMER);
	cr.cq[CQ_ALONE].producer = open_ok(cr.c, "crash-qc", PINSHM_PRODUCER);
	cr.cq[CQ_SHARED].producer = open_ok(cr.c, "crash-qs", PINSHM_PRODUCER);
	cr.cq[CQ_SHARED].consumer = open_ok(cr.c, "crash-qs", PINSHM_CONSUMER);
	cr.ts_publisher = open_ok(cr.c, "crash-ts", PINSHM_PRODUCER);
	cr.ts_subscriber = open_ok(cr.c, "crash-ts", PINSHM_CONSUMER);
	/* A peer came and went on each side a victim takes, so that a side
	 * left alone gets -EPIPE even if the first victim dies before opening. */
	TU_RC(pinshm_channel_close(open_ok(cr.c, "crash-q", PINSHM_PRODUCER)), 0);
	TU_RC(pinshm_channel_close(open_ok(cr.c, "crash-t", PINSHM_PRODUCER)), 0);
	TU_RC(pinshm_channel_close(open_ok(cr.c, "crash-qc", PINSHM_CONSUMER)), 0);

	for (unsigned k = 0; k < kills; k++)
		one_kill(&cr, k + 1);

	/* What is left in crash-qc goes to a last consumer, the test; the
	 * test's consumer of crash-qs drains it. */
	cr.cq[CQ_ALONE].consumer = open_ok(cr.c, "crash-qc", PINSHM_CONSUMER);
	for (int i = 0; i < CQ_COUNT; i++) {
		int rc;
		while ((rc = counted_take(&cr, &cr.cq[i], i, PINSHM_NONBLOCK)) == 0)
			;
		TU_RC(rc, -EAGAIN);
	}
	uint64_t dups = check_deliveries(&cr, CQ_ALONE, "crash-qc");
	uint64_t dups_shared = check_deliveries(&cr, CQ_SHARED, "crash-qs");
	while (recv_expect(&cr, cr.ts_subscriber, 0, &cr.ts_next, PINSHM_NONBLOCK) == 0)
		;
	ck_assert_uint_eq(cr.ts_next, cr.ts_sent);

	TU_RC(pinshm_channel_close(cr.q_consumer), 0);
	TU_RC(pinshm_channel_close(cr.t_subscriber), 0);
	for (int i = 0; i < CQ_COUNT; i++) {
		TU_RC(pinshm_channel_close(cr.cq[i].producer), 0);
		TU_RC(pinshm_channel_close(cr.cq[i].consumer), 0);
	}
	TU_RC(pinshm_channel_close(cr.ts_publisher), 0);
	TU_RC(pinshm_channel_close(cr.ts_subscriber), 0);
	for (unsigned i = 0; i < SC_COUNT; i++)
		CLIENT_RC(cr.c, pinshm_unlink(cr.c, sc_channel[i]), 0);

	/* Nothing leaked: once the test's connection, which opened the
	 * channels, is closed too, the daemon is back where it started. */
	pinshm_disconnect(cr.c);
	cr.c = connect_ok(&cr.d);
	uint64_t deadline = tu_now_ms() + SETTLE_MS;
	for (;;) {
		daemon_figures(cr.c, &st);
		locked = proc_status_value_kb(cr.d.pid, "VmLck:");
		if ((st.pinned == base.pinned && st.channels_pinned == base.channels_pinned &&
		     st.channels_unpinned == base.channels_unpinned && st.connections == base.connections &&
		     locked == locked_base) ||
		    tu_now_ms() > deadline)
			break;
		tu_sleep_ms(50);
	}
	ck_assert_msg(st.pinned == base.pinned, "pinned bytes: %llu, baseline %llu", (unsigned long long)st.pinned,
		      (unsigned long long)base.pinned);
	ck_assert_msg(st.channels_pinned == base.channels_pinned && st.channels_unpinned == base.channels_unpinned,
		      "channels: %u pinned + %u unpinned, baseline %u + %u", st.channels_pinned, st.channels_unpinned,
		      base.channels_pinned, base.channels_unpinned);
	ck_assert_msg(st.connections == base.connections, "connections: %u, baseline %u", st.connections,
		      base.connections);
	ck_assert_msg(locked == locked_base, "pinshmd VmLck: %ld kB, baseline %ld kB", locked, locked_base);

	unsigned total = 0;
	fprintf(stderr, "check_crash: %u kills in %.1f s:\n", kills, (double)(tu_now_ms() - t0) / 1000.0);
	for (unsigned s = 0; s < SC_COUNT; s++) {
		fprintf(stderr, "  %-16s (%.1f s running, %.1f s settling)", sc_name[s],
			(double)cr.ms_to_kill[s] / 1000.0, (double)cr.ms_to_settle[s] / 1000.0);
		for (unsigned p = 0; p < PARK_COUNT; p++) {
			if (cr.kills[s][p])
				fprintf(stderr, " %s %u,", park_name[p], cr.kills[s][p]);
			total += cr.kills[s][p];
		}
		fprintf(stderr, "\n");
	}
	fprintf(stderr,
		"  messages checked by the test %llu, received by victims %llu; -EPIPE seen %u times; "
		"redelivered after a consumer died holding them: %llu (queue), %llu (shared queue)\n",
		(unsigned long long)cr.verified, (unsigned long long)cr.victim_got, cr.epipes,
		(unsigned long long)dups, (unsigned long long)dups_shared);
	ck_assert_uint_eq(total, kills);

	pinshm_disconnect(cr.c);
	daemon_stop_ok(&cr.d);
	munmap(cr.sh, sizeof(*cr.sh));
}
END_TEST

static Suite *crash_suite(void)
{
	Suite *s = suite_create("crash");
	TCase *tc = tcase_create("kill9");
	unsigned kills = DEFAULT_KILLS;
	const char *e = getenv("PINSHM_CRASH_KILLS");

	if (e && *e)
		kills = (unsigned)strtoul(e, NULL, 0);
	/* About 20 ms a kill here; ten times that, and slack. */
	tcase_set_timeout(tc, 120.0 + kills * 0.2 * TU_SLOWDOWN);
	tcase_add_test(tc, test_kill_loop);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(crash_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
