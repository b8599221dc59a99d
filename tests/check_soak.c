/*
 * check_soak.c - many producers and consumers through a real pinshmd, for a
 * bounded time.
 *
 * One daemon; three channels created through it; a process per endpoint,
 * each with its own connection:
 *
 *   soak-q  a shared queue: 3 producers, 2 consumers (small ring: back-pressure);
 *   soak-t  a back-pressure topic: 2 publishers, 2 subscribers;
 *   soak-o  an overrun topic: 1 publisher, 2 subscribers, one of them slow.
 *
 * Every message is {producer, seq, checksum} and filler.  Producers send
 * for PINSHM_SOAK_SECONDS (default 30) and leave; consumers drain until
 * -EPIPE.  The test checks:
 *
 *   - soak-q: every message of every producer delivered exactly once (per
 *     producer: count, sum, sum of squares and a hash of the seqs over both
 *     consumers), in order per producer at each consumer;
 *   - soak-t: each subscriber gets every message of each publisher, in order;
 *   - soak-o: each subscriber's seqs increase; the gaps add up to exactly
 *     what the library counted as lost; received + lost = published;
 *   - memory: VmRSS of every process and the daemon, and the daemon's
 *     pinned bytes and VmLck, sampled every second: the last sample within
 *     a tolerance of the first one taken after a warm-up (flat, no leak).
 *
 * Waits are blocking calls (a short spin, then a futex sleep); the overrun
 * publisher, which never waits, pauses now and then: 2 cores are enough.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
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
#define MAX_LEN 1000u
#define CALL_MS 20000     /* for one blocking call */
#define SPIN_NS 5000      /* short spins: more processes than cores */
#define DEFAULT_SECONDS 30u
#define WARMUP_MS 3000    /* memory after this is the reference */
#define RSS_SLACK_KB 1024 /* memory may grow by this much, and 10% */

enum proc_kind { Q_PRODUCER, Q_CONSUMER, T_PUBLISHER, T_SUBSCRIBER, O_PUBLISHER, O_SUBSCRIBER };

static const struct {
	enum proc_kind kind;
	const char *channel;
	unsigned id; /* producer id in messages, or consumer index */
} procs[] = {
	{Q_PRODUCER, "soak-q", 0},   {Q_PRODUCER, "soak-q", 1},   {Q_PRODUCER, "soak-q", 2},
	{Q_CONSUMER, "soak-q", 0},   {Q_CONSUMER, "soak-q", 1},   {T_PUBLISHER, "soak-t", 0},
	{T_PUBLISHER, "soak-t", 1},  {T_SUBSCRIBER, "soak-t", 0}, {T_SUBSCRIBER, "soak-t", 1},
	{O_PUBLISHER, "soak-o", 0},  {O_SUBSCRIBER, "soak-o", 0}, {O_SUBSCRIBER, "soak-o", 1},
};
#define NPROCS (sizeof(procs) / sizeof(procs[0]))
#define Q_PRODUCERS 3u
#define T_PUBLISHERS 2u

struct soak {
	struct daemon d;
	uint64_t deadline_ms; /* CLOCK_MONOTONIC: producers stop */
	struct tu_reporter rep;
	_Atomic unsigned *joined; /* shared: [0] soak-t's, [1] soak-o's subscribers that have joined */
};

/* What a consumer knows of one producer's seqs. */
struct seen {
	uint64_t count, sum, sumsq, hash, next;
};

static void seen_add(struct seen *s, uint64_t seq)
{
	s->count++;
	s->sum += seq;
	s->sumsq += seq * seq;
	s->hash ^= tu_mix(seq + 1);
	s->next = seq + 1;
}

/* The same figures for seqs 0..n-1, as if each came once. */
static struct seen seen_expected(uint64_t n)
{
	struct seen s = {0};

	for (uint64_t q = 0; q < n; q++)
		seen_add(&s, q);
	return s;
}

static bool is_producer(enum proc_kind k) { return k == Q_PRODUCER || k == T_PUBLISHER || k == O_PUBLISHER; }

/* Report kinds (tu_report.who = kind * 16 + index, v[] per kind). */
enum { R_SENT = 1, R_QUEUE = 2, R_TOPIC = 3, R_OVERRUN = 4 };

static pinshm_channel_t *soak_open(struct soak *sk, unsigned i, pinshm_client_t **c)
{
	pinshm_channel_t *ch;
	int rc = pinshm_connect(sk->d.sock, c);

	if (rc)
		tu_child_fail(1, "connect: %s", pinshm_strerror(rc));
	rc = pinshm_open(*c, procs[i].channel, is_producer(procs[i].kind) ? PINSHM_PRODUCER : PINSHM_CONSUMER, &ch);
	if (rc)
		tu_child_fail(2, "open %s: %s (%s)", procs[i].channel, pinshm_strerror(rc), pinshm_client_error(*c));
	pinshm_channel_set_spin(ch, SPIN_NS);
	return ch;
}

/* A topic publisher waits until every subscriber joined: its open has
 * returned (attached, it is counted by the channel before it has read
 * where to start, and would miss what is published meanwhile; the losses
 * counted from there would not be those the test counts from seq 0). */
static void wait_subscribers(_Atomic unsigned *joined, unsigned n)
{
	uint64_t deadline = tu_now_ms() + CALL_MS;

	while (atomic_load(joined) < n) {
		if (tu_now_ms() > deadline)
			tu_child_fail(4, "%u subscribers after %d ms, want %u", atomic_load(joined), CALL_MS, n);
		tu_sleep_ms(5);
	}
}

static int producer_main(struct soak *sk, unsigned i, pinshm_channel_t *ch)
{
	uint8_t buf[4 * MAX_LEN];
	uint32_t me = procs[i].id;
	uint64_t seq = 0, r = me + 1;
	int rc;

	if (procs[i].kind != Q_PRODUCER)
		wait_subscribers(&sk->joined[procs[i].kind == O_PUBLISHER], 2);
	while (tu_now_ms() < sk->deadline_ms) {
		r = tu_mix(r);
		if (procs[i].kind == O_PUBLISHER && seq % 64 == 0) {
			/* never blocked: pause, so as not to starve the others */
			struct timespec ts = {0, 200000};
			nanosleep(&ts, NULL);
		}
		if (r % 4 == 0) {
			/* a batch of 4 */
			struct iovec iov[4];
			for (unsigned k = 0; k < 4; k++) {
				size_t len = tu_msg_len(me, seq + k, MAX_LEN);
				iov[k].iov_base = buf + k * MAX_LEN;
				iov[k].iov_len = len;
				tu_msg_fill(iov[k].iov_base, len, me, seq + k);
			}
			rc = pinshm_send_batch(ch, iov, 4, CALL_MS);
			if (rc > 0) {
				seq += (unsigned)rc;
				rc = 0;
			}
		} else if (r % 4 == 1) {
			void *b;
			size_t len = tu_msg_len(me, seq, MAX_LEN);
			rc = pinshm_reserve(ch, len, &b, CALL_MS);
			if (rc == 0) {
				tu_msg_fill(b, len, me, seq);
				rc = pinshm_commit(ch, len, 0);
				seq++;
			}
		} else {
			size_t len = tu_msg_len(me, seq, MAX_LEN);
			tu_msg_fill(buf, len, me, seq);
			rc = pinshm_send(ch, buf, len, CALL_MS);
			if (rc == 0)
				seq++;
		}
		if (rc)
			tu_child_fail(5, "%s producer %u, seq %llu: %s (%s)", procs[i].channel, me,
				      (unsigned long long)seq, pinshm_strerror(rc), pinshm_channel_error(ch));
	}
	pinshm_channel_close(ch);
	tu_report_vals(&sk->rep, R_SENT * 16 + (int)i, 0, me, seq);
	return 0;
}

static int consumer_main(struct soak *sk, unsigned i, pinshm_channel_t *ch)
{
	enum proc_kind k = procs[i].kind;
	struct seen seen[Q_PRODUCERS] = {{0}};
	uint64_t last = UINT64_MAX, gaps = 0, stale = 0, got = 0;
	uint8_t buf[MAX_LEN];
	char why[200];
	int rc;

	for (;;) {
		uint32_t who;
		uint64_t seq;
		size_t len;
		if (k == T_SUBSCRIBER && got % 2 == 1) {
			/* in place, now and then */
			pinshm_msg_t m;
			rc = pinshm_recv_inplace(ch, &m, CALL_MS);
			if (rc == 0) {
				len = m.len;
				memcpy(buf, m.data, len <= sizeof(buf) ? len : sizeof(buf));
				rc = pinshm_release(ch, &m);
			}
		} else {
			rc = pinshm_recv(ch, buf, sizeof(buf), &len, CALL_MS);
		}
		if (rc == -EPIPE)
			break;
		if (rc == -ESTALE && k == O_SUBSCRIBER) {
			stale++;
			continue;
		}
		if (rc)
			tu_child_fail(6, "%s consumer %u: %s (%s)", procs[i].channel, procs[i].id, pinshm_strerror(rc),
				      pinshm_channel_error(ch));
		if (tu_msg_check(buf, len, MAX_LEN, &who, &seq, why, sizeof(why)) != 0)
			tu_child_fail(7, "%s: %s", procs[i].channel, why);
		got++;
		switch (k) {
		case Q_CONSUMER:
			if (who >= Q_PRODUCERS || (seen[who].count && seq < seen[who].next))
				tu_child_fail(8, "soak-q: (%u, %llu) after seq %llu", who, (unsigned long long)seq,
					      (unsigned long long)seen[who < Q_PRODUCERS ? who : 0].next);
			seen_add(&seen[who], seq);
			break;
		case T_SUBSCRIBER:
			if (who >= T_PUBLISHERS || seq != seen[who].next)
				tu_child_fail(9, "soak-t: (%u, %llu), want seq %llu: lost, duplicated or reordered", who,
					      (unsigned long long)seq, (unsigned long long)seen[who < T_PUBLISHERS ? who : 0].next);
			seen_add(&seen[who], seq);
			break;
		default: /* O_SUBSCRIBER */
			if (who != 0 || (last != UINT64_MAX && seq <= last))
				tu_child_fail(10, "soak-o: (%u, %llu) after seq %llu", who, (unsigned long long)seq,
					      (unsigned long long)last);
			gaps += seq - (last == UINT64_MAX ? 0 : last + 1);
			last = seq;
			if (procs[i].id == 1 && got % 128 == 0) {
				/* the slow one */
				struct timespec ts = {0, 2000000};
				nanosleep(&ts, NULL);
			}
			break;
		}
	}
	if (k == Q_CONSUMER) {
		for (unsigned p = 0; p < Q_PRODUCERS; p++) {
			struct tu_report rep = {.who = R_QUEUE * 16 + (int)i,
						.v = {p, seen[p].count, seen[p].sum, seen[p].sumsq, seen[p].hash}};
			tu_report(&sk->rep, &rep);
		}
	} else if (k == T_SUBSCRIBER) {
		for (unsigned p = 0; p < T_PUBLISHERS; p++)
			tu_report_vals(&sk->rep, R_TOPIC * 16 + (int)i, 0, p, seen[p].count);
	} else {
		pinshm_channel_info_t info;
		if (pinshm_channel_info(ch, &info) != 0)
			tu_child_fail(11, "channel info");
		struct tu_report rep = {.who = R_OVERRUN * 16 + (int)i, .v = {got, gaps, info.lost, stale, last}};
		tu_report(&sk->rep, &rep);
	}
	pinshm_channel_close(ch);
	return 0;
}

static int soak_child(void *arg, int idx)
{
	struct soak *sk = arg;
	pinshm_client_t *c;
	unsigned i = (unsigned)idx;
	pinshm_channel_t *ch = soak_open(sk, i, &c);
	if (procs[i].kind == T_SUBSCRIBER || procs[i].kind == O_SUBSCRIBER)
		atomic_fetch_add(&sk->joined[procs[i].kind == O_SUBSCRIBER], 1);
	int rc = is_producer(procs[i].kind) ? producer_main(sk, i, ch) : consumer_main(sk, i, ch);

	pinshm_disconnect(c);
	return rc;
}

static unsigned soak_seconds(void)
{
	const char *s = getenv("PINSHM_SOAK_SECONDS");
	char *end;

	if (!s || !*s)
		return DEFAULT_SECONDS;
	unsigned long v = strtoul(s, &end, 10);
	ck_assert_msg(*end == '\0' && v >= 1 && v <= 7 * 24 * 3600, "PINSHM_SOAK_SECONDS=%s: 1 to 604800", s);
	return (unsigned)v;
}

/* Memory of each process (VmRSS, kB), the daemon last, and its pinned
 * bytes and VmLck. */
struct sample {
	long rss[NPROCS + 1];
	uint64_t pinned;
	long locked;
};

static void take_sample(struct soak *sk, const struct tu_procs *ps, pinshm_client_t *c, struct sample *s)
{
	pinshm_status_t st;

	for (unsigned i = 0; i < NPROCS; i++)
		s->rss[i] = ps->done[i] ? -1 : proc_status_value_kb(ps->pid[i], "VmRSS:");
	s->rss[NPROCS] = proc_status_value_kb(sk->d.pid, "VmRSS:");
	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	s->pinned = st.pinned;
	s->locked = proc_status_value_kb(sk->d.pid, "VmLck:");
}

START_TEST(test_soak)
{
	struct soak sk;
	struct tu_procs ps;
	struct tu_report rep;
	struct sample first, last;
	pinshm_channel_attr_t attr;
	unsigned seconds = soak_seconds();
	uint64_t sent_q[Q_PRODUCERS] = {0}, sent_t[T_PUBLISHERS] = {0}, sent_o = 0;
	struct seen q_total[Q_PRODUCERS] = {{0}};
	uint64_t t_got[NPROCS][T_PUBLISHERS] = {{0}};
	uint64_t total = 0;

	daemon_start(&sk.d);
	pinshm_client_t *c = connect_ok(&sk.d);
	tu_attr(&attr, PINSHM_QUEUE, 16 * KiB, Q_PRODUCERS, 2);
	attr.max_message = MAX_LEN;
	CLIENT_RC(c, pinshm_create(c, "soak-q", &attr, 0600, 0), 0);
	tu_attr(&attr, PINSHM_TOPIC, 16 * KiB, T_PUBLISHERS, 2);
	attr.max_message = MAX_LEN;
	CLIENT_RC(c, pinshm_create(c, "soak-t", &attr, 0600, 0), 0);
	tu_attr(&attr, PINSHM_TOPIC, 16 * KiB, 1, 2);
	attr.max_message = MAX_LEN;
	attr.flags = PINSHM_OVERRUN;
	CLIENT_RC(c, pinshm_create(c, "soak-o", &attr, 0600, 0), 0);

	fprintf(stderr, "check_soak: %u s (PINSHM_SOAK_SECONDS), %zu processes\n", seconds, NPROCS);
	uint64_t t0 = tu_now_ms();
	sk.deadline_ms = t0 + seconds * 1000ull;
	tu_reporter_open(&sk.rep);
	sk.joined = mmap(NULL, 2 * sizeof(*sk.joined), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sk.joined, MAP_FAILED);
	tu_procs_init(&ps);
	for (unsigned i = 0; i < NPROCS; i++) {
		char name[32];
		snprintf(name, sizeof(name), "%s-%u", procs[i].channel, i);
		tu_spawn(&ps, name, soak_child, &sk, (int)i);
	}

	/* Sample memory every second; the reference after the warm-up. */
	bool have_first = false;
	uint64_t warm = t0 + (seconds * 1000ull > 2 * WARMUP_MS ? WARMUP_MS : seconds * 1000ull / 3);
	while (tu_now_ms() + 1000 < sk.deadline_ms) {
		tu_sleep_ms(1000);
		for (unsigned i = 0; i < NPROCS; i++)
			ck_assert_msg(tu_wait_one(&ps, (int)i, 0) == -ETIMEDOUT, "%s ended early: see its message above",
				      ps.name[i]);
		if (!have_first && tu_now_ms() >= warm) {
			take_sample(&sk, &ps, c, &first);
			have_first = true;
		} else if (have_first) {
			take_sample(&sk, &ps, c, &last);
		}
	}
	tu_wait_all_ok(&ps, (int)(seconds * 1000u) + 60000);
	ck_assert_msg(have_first, "no memory sample: run longer");

	/* Gather the reports. */
	for (unsigned n = 0; n < Q_PRODUCERS + T_PUBLISHERS + 1 + 2 * Q_PRODUCERS + 2 * T_PUBLISHERS + 2; n++) {
		TU_RC(tu_collect(&sk.rep, &rep, 10000), 0);
		unsigned i = (unsigned)rep.who % 16;
		ck_assert_uint_lt(i, NPROCS);
		switch (rep.who / 16) {
		case R_SENT:
			if (procs[i].kind == Q_PRODUCER)
				sent_q[rep.v[0]] = rep.v[1];
			else if (procs[i].kind == T_PUBLISHER)
				sent_t[rep.v[0]] = rep.v[1];
			else
				sent_o = rep.v[1];
			total += rep.v[1];
			break;
		case R_QUEUE: {
			struct seen *s = &q_total[rep.v[0]];
			s->count += rep.v[1];
			s->sum += rep.v[2];
			s->sumsq += rep.v[3];
			s->hash ^= rep.v[4];
			break;
		}
		case R_TOPIC:
			t_got[i][rep.v[0]] = rep.v[1];
			break;
		case R_OVERRUN:
			ck_assert_msg(rep.v[1] == rep.v[2], "soak-o subscriber %u: gaps add up to %llu, the library counted "
							   "%llu lost (%llu stale)",
				      procs[i].id, (unsigned long long)rep.v[1], (unsigned long long)rep.v[2],
				      (unsigned long long)rep.v[3]);
			/* compared with what was published once every report is in */
			t_got[i][0] = rep.v[0] + rep.v[2];
			fprintf(stderr, "  soak-o subscriber %u: %llu received, %llu lost (%llu while being copied)\n",
				procs[i].id, (unsigned long long)rep.v[0], (unsigned long long)rep.v[2],
				(unsigned long long)rep.v[3]);
			break;
		default:
			ck_abort_msg("report %d", rep.who);
		}
	}
	for (unsigned p = 0; p < Q_PRODUCERS; p++) {
		struct seen want = seen_expected(sent_q[p]);
		ck_assert_msg(q_total[p].count == want.count && q_total[p].sum == want.sum &&
				      q_total[p].sumsq == want.sumsq && q_total[p].hash == want.hash,
			      "soak-q producer %u: %llu sent, %llu delivered: lost or duplicated", p,
			      (unsigned long long)sent_q[p], (unsigned long long)q_total[p].count);
	}
	for (unsigned i = 0; i < NPROCS; i++) {
		if (procs[i].kind == T_SUBSCRIBER)
			for (unsigned p = 0; p < T_PUBLISHERS; p++)
				ck_assert_msg(t_got[i][p] == sent_t[p], "soak-t subscriber %u: %llu of publisher %u, %llu sent",
					      procs[i].id, (unsigned long long)t_got[i][p], p, (unsigned long long)sent_t[p]);
		if (procs[i].kind == O_SUBSCRIBER)
			ck_assert_msg(t_got[i][0] == sent_o, "soak-o subscriber %u: received + lost %llu, %llu published",
				      procs[i].id, (unsigned long long)t_got[i][0], (unsigned long long)sent_o);
	}

	/* Memory flat. */
	for (unsigned i = 0; i <= NPROCS; i++) {
		const char *name = i < NPROCS ? ps.name[i] : "pinshmd";
		fprintf(stderr, "  %-10s VmRSS %ld kB after %u ms, %ld kB at the end\n", name, first.rss[i], WARMUP_MS,
			last.rss[i]);
		ck_assert_msg(last.rss[i] <= first.rss[i] + first.rss[i] / 10 + RSS_SLACK_KB,
			      "%s: VmRSS grew from %ld kB to %ld kB", name, first.rss[i], last.rss[i]);
	}
	ck_assert_msg(last.pinned == first.pinned, "pinned bytes %llu, then %llu", (unsigned long long)first.pinned,
		      (unsigned long long)last.pinned);
	ck_assert_msg(last.locked == first.locked, "pinshmd VmLck %ld kB, then %ld kB", first.locked, last.locked);
	fprintf(stderr,
		"check_soak: %llu messages sent in %.1f s (queue %llu, topic %llu, overrun topic %llu), all checked; "
		"pinned %llu bytes throughout\n",
		(unsigned long long)total, (double)(tu_now_ms() - t0) / 1000.0,
		(unsigned long long)(sent_q[0] + sent_q[1] + sent_q[2]), (unsigned long long)(sent_t[0] + sent_t[1]),
		(unsigned long long)sent_o, (unsigned long long)last.pinned);

	tu_reporter_close(&sk.rep);
	munmap((void *)sk.joined, 2 * sizeof(*sk.joined));
	pinshm_disconnect(c);
	daemon_stop_ok(&sk.d);
}
END_TEST

static Suite *soak_suite(void)
{
	Suite *s = suite_create("soak");
	TCase *tc = tcase_create("soak");
	const char *e = getenv("PINSHM_SOAK_SECONDS");
	unsigned seconds = e && *e ? (unsigned)strtoul(e, NULL, 10) : DEFAULT_SECONDS;

	tcase_set_timeout(tc, 120.0 + seconds);
	tcase_add_test(tc, test_soak);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(soak_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
