/*
 * pinshm-perf - measure pinshm channels against the usual alternatives.
 *
 * For every pattern, message size and transport, the parent sets the
 * transport up, forks side A and side B, each pinned to its own CPU, and
 * waits for both.  The sides meet at a barrier in a shared control block,
 * run the warm-up and the measured loop (written once here, for every
 * transport, through the vtable of perf_transports.h), and report: side A
 * the round-trip samples of a ping-pong, each side its clock at the ends
 * of a stream.  A side that fails writes why and makes the other stop; the
 * parent kills whatever is left and goes on with the next row.
 *
 * With --socket, the pinshm transports also run on channels created by
 * pinshmd (rows "NAME@pinshmd"), and the "create" pattern times channel
 * creation through the daemon, in the parent alone.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pinshm.h>

#include "perf_options.h"
#include "perf_plot.h"
#include "perf_stats.h"
#include "perf_transports.h"

#define ROW_BYTES (2ull << 30)     /* a row moves at most ~2 GiB each way... */
#define ROW_MIN_ITERATIONS 1000ull /* ...but runs at least this many iterations */
#define ROW_TIMEOUT_S 60 /* plus 100 us per iteration and 10 ns per byte: row_timeout() */
#define MEMCPY_PASSES 5

static const char *prog = PERF_PROG;

/* Shared by the parent and both sides of a row: an anonymous shared mapping. */
struct ctl {
	_Atomic unsigned ready; /* sides ready to start (release; acquired by the other) */
	_Atomic unsigned warm;  /* stream: side B has received the warm-up */
	_Atomic unsigned done;  /* sides past the measured loop */
	_Atomic int abort;      /* a side failed: the other stops waiting */
	_Atomic int unlocked;   /* a side could not lock its memory */
	uint64_t t_start;       /* stream: A's clock before the first measured send */
	uint64_t t_end;         /* stream: B's clock after the last receive */
	char msg[2][320];       /* why each side failed, or "" */
};

struct row {
	const struct opts *o;
	struct ctl *ctl;
	uint64_t *samples; /* shared: side A's round-trip times, for the parent */
	uint64_t iters, warm;
	uint64_t timeout_ns; /* a row that takes longer is killed */
	pid_t parent;
	sigset_t oldmask; /* the signal mask the sides run with */
	int unlocked;     /* a side of some row could not lock its memory */
	unsigned round;   /* the round being measured (0: the first; notes are printed only then) */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *alloc_buf(size_t len, int fill)
{
	void *p = aligned_alloc(64, (len + 63) & ~(size_t)63);

	if (p != NULL)
		memset(p, fill, len); /* touch every page now, not in the loop */
	return p;
}

/* ---- one side (a child) ------------------------------------------------ */

static int side_fail(struct row *r, int side, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->ctl->msg[side], sizeof(r->ctl->msg[side]), fmt, ap);
	va_end(ap);
	atomic_store_explicit(&r->ctl->abort, 1, memory_order_relaxed);
	return -1;
}

/* Spin until *c reaches @target (both sides are on CPUs of their own). */
static int wait_count(struct row *r, _Atomic unsigned *c, unsigned target)
{
	uint64_t deadline = 0;

	/* Pairs with the release increments of the other side. */
	for (unsigned long spins = 0; atomic_load_explicit(c, memory_order_acquire) < target; spins++) {
		if (atomic_load_explicit(&r->ctl->abort, memory_order_relaxed))
			return -ECANCELED;
		if ((spins & 4095) == 0) {
			uint64_t now = now_ns();

			if (deadline == 0)
				deadline = now + r->timeout_ns;
			else if (now > deadline)
				return -ETIMEDOUT;
		}
		perf_cpu_relax();
	}
	return 0;
}

static int recv_one(perf_link_t *l, void *buf, size_t cap)
{
	ssize_t n = l->t->recv(l, buf, cap);

	if (n < 0)
		return (int)n;
	if ((size_t)n != l->size) {
		snprintf(l->err, sizeof(l->err), "received %zd bytes, expected %zu", n, l->size);
		return -EBADMSG;
	}
	return 0;
}

static int stream_send(perf_link_t *l, const void *buf, uint64_t count)
{
	const perf_transport_t *t = l->t;
	int rc;

	while (count > 0) {
		if (t->send_batch != NULL) {
			rc = t->send_batch(l, buf, l->size, count < PERF_BATCH ? (unsigned)count : PERF_BATCH);
			if (rc < 0)
				return rc;
			count -= (uint64_t)rc;
		} else {
			rc = t->send(l, buf, l->size);
			if (rc < 0)
				return rc;
			count--;
		}
	}
	return 0;
}

static int stream_recv(perf_link_t *l, void *buf, size_t cap, uint64_t count)
{
	const perf_transport_t *t = l->t;
	int rc;

	while (count > 0) {
		if (t->recv_batch != NULL) {
			rc = t->recv_batch(l, buf, cap, count < PERF_BATCH ? (unsigned)count : PERF_BATCH);
			if (rc < 0)
				return rc;
			count -= (uint64_t)rc;
		} else {
			rc = recv_one(l, buf, cap);
			if (rc < 0)
				return rc;
			count--;
		}
	}
	return 0;
}

/* Side A of a ping-pong: one timestamp per round trip. */
static int pingpong_a(struct row *r, perf_link_t *l, void *sbuf, void *rbuf, size_t cap, uint64_t *samples)
{
	uint64_t total = r->warm + r->iters, prev = now_ns(), now;
	int rc;

	for (uint64_t i = 0; i < total; i++) {
		rc = l->t->send(l, sbuf, l->size);
		if (rc < 0)
			return rc;
		rc = recv_one(l, rbuf, cap);
		if (rc < 0)
			return rc;
		now = now_ns();
		if (i >= r->warm)
			samples[i - r->warm] = now - prev;
		prev = now;
	}
	return 0;
}

/* Side B of a ping-pong: echo a message of the same size. */
static int pingpong_b(struct row *r, perf_link_t *l, void *sbuf, void *rbuf, size_t cap)
{
	uint64_t total = r->warm + r->iters;
	int rc;

	for (uint64_t i = 0; i < total; i++) {
		rc = recv_one(l, rbuf, cap);
		if (rc < 0)
			return rc;
		rc = l->t->send(l, sbuf, l->size);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Side A of a stream: warm up, wait until B has drained it, then send. */
static int stream_a(struct row *r, perf_link_t *l, void *sbuf)
{
	int rc = stream_send(l, sbuf, r->warm);

	if (rc < 0)
		return rc;
	rc = wait_count(r, &r->ctl->warm, 1);
	if (rc < 0)
		return rc;
	r->ctl->t_start = now_ns();
	return stream_send(l, sbuf, r->iters);
}

static int stream_b(struct row *r, perf_link_t *l, void *rbuf, size_t cap)
{
	int rc = stream_recv(l, rbuf, cap, r->warm);

	if (rc < 0)
		return rc;
	atomic_store_explicit(&r->ctl->warm, 1, memory_order_release);
	rc = stream_recv(l, rbuf, cap, r->iters);
	if (rc < 0)
		return rc;
	r->ctl->t_end = now_ns();
	return 0;
}

/* The payload that arrived last must be the peer's fill byte. */
static int check_payload(const unsigned char *buf, size_t len, int fill)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != (unsigned char)fill)
			return -EBADMSG;
	return 0;
}

static int side_main(struct row *r, perf_link_t *l, int side)
{
	const perf_transport_t *t = l->t;
	const char *name = side == PERF_SIDE_A ? "A" : "B";
	int fill = side == PERF_SIDE_A ? 0xa5 : 0x5a, peer_fill = side == PERF_SIDE_A ? 0x5a : 0xa5;
	size_t cap = l->size > 64 ? l->size : 64;
	unsigned char *sbuf, *rbuf;
	uint64_t *samples = NULL;
	cpu_set_t set;
	int rc;

	/* Die with the parent; it may already be gone. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		return side_fail(r, side, "side %s: prctl(PR_SET_PDEATHSIG): %s", name, strerror(errno));
	if (getppid() != r->parent)
		return -1;
	/* A dead peer must show as EPIPE, not kill this side. */
	if (sigprocmask(SIG_SETMASK, &r->oldmask, NULL) < 0 || signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		return side_fail(r, side, "side %s: signals: %s", name, strerror(errno));

	CPU_ZERO(&set);
	CPU_SET(r->o->cpu[side], &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		return side_fail(r, side, "side %s: sched_setaffinity(CPU %d): %s", name, r->o->cpu[side],
				 strerror(errno));

	sbuf = alloc_buf(cap, fill);
	rbuf = alloc_buf(cap, 0);
	if (side == PERF_SIDE_A && l->pattern == PERF_PINGPONG)
		samples = alloc_buf(r->iters * sizeof(*samples), 0);
	if (sbuf == NULL || rbuf == NULL || (side == PERF_SIDE_A && l->pattern == PERF_PINGPONG && !samples))
		return side_fail(r, side, "side %s: out of memory", name);

	rc = t->init(l, side);
	if (rc < 0)
		return side_fail(r, side, "side %s: %s", name, l->err);
	/* Pin and populate every page now (the rings included), as the daemon would. */
	if (mlockall(MCL_CURRENT) < 0)
		atomic_store_explicit(&r->ctl->unlocked, 1, memory_order_relaxed);

	atomic_fetch_add_explicit(&r->ctl->ready, 1, memory_order_release);
	rc = wait_count(r, &r->ctl->ready, 2);
	if (rc == 0) {
		if (l->pattern == PERF_PINGPONG)
			rc = side == PERF_SIDE_A ? pingpong_a(r, l, sbuf, rbuf, cap, samples)
						 : pingpong_b(r, l, sbuf, rbuf, cap);
		else
			rc = side == PERF_SIDE_A ? stream_a(r, l, sbuf) : stream_b(r, l, rbuf, cap);
	}
	if (rc == -ECANCELED)
		return -1; /* the other side failed and said why */
	if (rc == -ETIMEDOUT)
		return side_fail(r, side, "side %s: the other side did not come within %llu s", name,
				 (unsigned long long)(r->timeout_ns / 1000000000ull));
	if (rc < 0)
		return side_fail(r, side, "side %s: %s", name, l->err);

	atomic_fetch_add_explicit(&r->ctl->done, 1, memory_order_release);
	rc = wait_count(r, &r->ctl->done, 2);
	if (rc < 0)
		return rc == -ECANCELED ? -1 : side_fail(r, side, "side %s: the other side did not finish", name);

	if (!(t->flags & PERF_NO_PAYLOAD) && (side == PERF_SIDE_B || l->pattern == PERF_PINGPONG) &&
	    check_payload(rbuf, l->size, peer_fill) < 0)
		return side_fail(r, side, "side %s: the payload received is not the one sent", name);
	if (samples != NULL)
		memcpy(r->samples, samples, r->iters * sizeof(*samples));
	t->fini(l);
	return 0;
}

/* ---- the parent --------------------------------------------------------- */

static const char *pattern_name(unsigned pattern)
{
	return pattern == PERF_PINGPONG ? "pingpong" : pattern == PERF_STREAM ? "stream" : "create";
}

static void describe_status(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "stopped");
}

static void reap_blocking(pid_t pid, int *status)
{
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
}

/*
 * Wait for both sides.  When one fails, kill the other; after the row
 * timeout, kill both.  SIGCHLD is blocked, so sigtimedwait() sleeps until a
 * side exits.  @return 0 if both exited with status 0; @why says otherwise.
 */
static int wait_sides(pid_t pid[2], uint64_t timeout_ns, char *why, size_t whylen)
{
	uint64_t deadline = now_ns() + timeout_ns;
	sigset_t chld;
	int live = 2, failed = 0, status;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	why[0] = '\0';
	while (live > 0) {
		for (int i = 0; i < 2; i++) {
			if (pid[i] <= 0)
				continue;
			pid_t got = waitpid(pid[i], &status, WNOHANG);

			if (got == 0 || (got < 0 && errno == EINTR))
				continue;
			pid[i] = -1;
			live--;
			if (got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
				if (!failed && got > 0) {
					char st[96];

					describe_status(status, st, sizeof(st));
					snprintf(why, whylen, "side %s %s", i == 0 ? "A" : "B", st);
				}
				failed = 1;
			}
		}
		if (live == 0)
			break;
		uint64_t now = now_ns();

		if (failed || now >= deadline) {
			if (!failed)
				snprintf(why, whylen, "timed out after %llu s",
					 (unsigned long long)(timeout_ns / 1000000000ull));
			failed = 1;
			for (int i = 0; i < 2; i++)
				if (pid[i] > 0) {
					kill(pid[i], SIGKILL);
					reap_blocking(pid[i], &status);
					pid[i] = -1;
				}
			break;
		}
		uint64_t left = deadline - now;
		struct timespec ts = { .tv_sec = (time_t)(left / 1000000000ull),
				       .tv_nsec = (long)(left % 1000000000ull) };

		/* A side exited, or the time is up (EAGAIN), or a signal came (EINTR). */
		if (sigtimedwait(&chld, NULL, &ts) < 0 && errno != EAGAIN && errno != EINTR) {
			snprintf(why, whylen, "sigtimedwait: %s", strerror(errno));
			failed = 1; /* kill both on the next turn */
		}
	}
	return failed ? -1 : 0;
}

static void row_error(const perf_transport_t *t, unsigned pattern, size_t size, const char *what)
{
	fprintf(stderr, "%s: error: %s %s %zu bytes: %s\n", prog, t->name, pattern_name(pattern), size, what);
}

/*
 * Measure one row.  @return 0 with @res filled, PERF_SKIP (a note was
 * printed), or -1 (an error was printed).
 */
static int run_row(struct row *r, const perf_transport_t *t, unsigned pattern, size_t size,
		   perf_result_t *res)
{
	perf_link_t link = { .t = t, .pattern = pattern, .size = size, .socket = r->o->socket };
	int daemon = (t->flags & PERF_DAEMON) != 0;
	pid_t pid[2] = { -1, -1 };
	char why[160];
	int rc;

	memset(r->ctl, 0, sizeof(*r->ctl)); /* no side is running: a plain reset */
	rc = t->setup(&link);
	if (rc == PERF_SKIP) {
		if (r->round == 0) /* said once, not once a round */
			fprintf(stderr, "%s: note: %s %s %zu bytes skipped: %s\n", prog, t->name, pattern_name(pattern),
			size, link.err);
		return PERF_SKIP;
	}
	if (rc < 0) {
		row_error(t, pattern, size, link.err);
		return -1;
	}
	if (link.err[0] != '\0' && r->round == 0)
		fprintf(stderr, "%s: note: %s %s %zu bytes: %s\n", prog, t->name, pattern_name(pattern), size,
			link.err);

	fflush(NULL); /* nothing buffered may be written twice */
	for (int side = 0; side < 2; side++) {
		pid[side] = fork();
		if (pid[side] == 0)
			_exit(side_main(r, &link, side) < 0 ? 1 : 0);
		if (pid[side] < 0) {
			snprintf(why, sizeof(why), "fork: %s", strerror(errno));
			if (side == 1) {
				int status;

				kill(pid[0], SIGKILL);
				reap_blocking(pid[0], &status);
			}
			t->teardown(&link);
			row_error(t, pattern, size, why);
			return -1;
		}
	}
	/* The sides hold what they need; channels of pinshmd live while the
	 * parent's connection does, which goes once the sides are done. */
	if (!daemon)
		t->teardown(&link);

	rc = wait_sides(pid, r->timeout_ns, why, sizeof(why));
	if (daemon)
		t->teardown(&link);
	if (atomic_load_explicit(&r->ctl->unlocked, memory_order_relaxed))
		r->unlocked = 1;
	if (rc < 0) {
		int said = 0;

		for (int side = 0; side < 2; side++)
			if (r->ctl->msg[side][0] != '\0') {
				row_error(t, pattern, size, r->ctl->msg[side]);
				said = 1;
			}
		if (!said)
			row_error(t, pattern, size, why);
		return -1;
	}

	*res = (perf_result_t){ .transport = t->name, .pattern = pattern_name(pattern), .size = size,
				.iterations = r->iters };
	if (pattern == PERF_PINGPONG)
		rc = perf_stats_pingpong(r->samples, r->iters, res);
	else
		rc = r->ctl->t_end > r->ctl->t_start ? perf_stats_stream(r->ctl->t_end - r->ctl->t_start, res)
						     : -EINVAL;
	if (rc < 0) {
		row_error(t, pattern, size, "no usable timing");
		return -1;
	}
	if (t->flags & PERF_NO_PAYLOAD)
		res->gb_per_s = 0; /* no byte was moved */
	return 0;
}

/* Single-thread memcpy between two private buffers on CPU A: the table's reference. */
static int measure_memcpy(const struct opts *o, size_t size, uint64_t iters, perf_result_t *res)
{
	cpu_set_t old, one;
	unsigned char *src, *dst;
	uint64_t best = UINT64_MAX;
	int pinned;

	pinned = sched_getaffinity(0, sizeof(old), &old) == 0;
	if (pinned) {
		CPU_ZERO(&one);
		CPU_SET(o->cpu[0], &one);
		pinned = sched_setaffinity(0, sizeof(one), &one) == 0;
	}
	src = alloc_buf(size, 0xa5);
	dst = alloc_buf(size, 0);
	if (src != NULL && dst != NULL) {
		for (int pass = 0; pass < MEMCPY_PASSES; pass++) {
			uint64_t t0 = now_ns();

			for (uint64_t i = 0; i < iters; i++) {
				memcpy(dst, src, size);
				__asm__ __volatile__("" : : "r"(dst) : "memory"); /* keep every copy */
			}
			uint64_t dt = now_ns() - t0;

			if (dt < best)
				best = dt;
		}
	}
	free(src);
	free(dst);
	if (pinned)
		sched_setaffinity(0, sizeof(old), &old);
	if (best == UINT64_MAX)
		return -ENOMEM;
	*res = (perf_result_t){ .transport = "memcpy", .pattern = "stream", .size = size, .iterations = iters };
	return perf_stats_stream(best ? best : 1, res);
}

/*
 * The "create" rows of one capacity: N timed iterations of perf_create_cycle()
 * after N/10 (at least 1) unmeasured ones, in the parent pinned to CPU A.
 * @rows gets "pinshmd-create" and "pinshmd-connect-create-open".
 * @return 0, or -1 (an error was printed).
 */
static int measure_create(const struct opts *o, uint64_t capacity, uint64_t iters, perf_result_t rows[2])
{
	uint64_t warm = iters / 10 ? iters / 10 : 1;
	uint64_t *all = malloc(iters * sizeof(*all)), *create = malloc(iters * sizeof(*create));
	char err[320], note[320], first_note[320] = "";
	cpu_set_t old, one;
	int pinned, rc = 0;

	pinned = sched_getaffinity(0, sizeof(old), &old) == 0;
	if (pinned) {
		CPU_ZERO(&one);
		CPU_SET(o->cpu[0], &one);
		pinned = sched_setaffinity(0, sizeof(one), &one) == 0;
	}
	if (all == NULL || create == NULL) {
		snprintf(err, sizeof(err), "out of memory");
		rc = -ENOMEM;
	}
	for (uint64_t i = 0; rc == 0 && i < warm + iters; i++) {
		uint64_t a = 0, c = 0;

		rc = perf_create_cycle(o->socket, capacity, &a, &c, note, sizeof(note), err, sizeof(err));
		if (rc == 0 && first_note[0] == '\0' && note[0] != '\0')
			strcpy(first_note, note);
		if (rc == 0 && i >= warm) {
			all[i - warm] = a;
			create[i - warm] = c;
		}
	}
	if (pinned)
		sched_setaffinity(0, sizeof(old), &old);
	if (first_note[0] != '\0')
		fprintf(stderr, "%s: note: create %llu bytes: %s\n", prog, (unsigned long long)capacity, first_note);
	if (rc == 0) {
		rows[0] = (perf_result_t){ .transport = "pinshmd-create", .pattern = "create", .size = capacity };
		rows[1] = (perf_result_t){ .transport = "pinshmd-connect-create-open", .pattern = "create",
					   .size = capacity };
		if (perf_stats_pingpong(create, iters, &rows[0]) < 0 || perf_stats_pingpong(all, iters, &rows[1]) < 0) {
			snprintf(err, sizeof(err), "no usable timing");
			rc = -EINVAL;
		}
		rows[0].gb_per_s = rows[1].gb_per_s = 0; /* no byte is moved */
	}
	free(all);
	free(create);
	if (rc < 0) {
		fprintf(stderr, "%s: error: create %llu bytes: %s\n", prog, (unsigned long long)capacity, err);
		return -1;
	}
	return 0;
}

/* Iterations of a row: min(N, max(1000, 2 GiB / size)), so that big sizes stay short. */
static uint64_t row_iterations(uint64_t n, size_t size)
{
	uint64_t cap;

	if (size == 0)
		return n;
	cap = ROW_BYTES / size;
	if (cap < ROW_MIN_ITERATIONS)
		cap = ROW_MIN_ITERATIONS;
	return n < cap ? n : cap;
}

/* Warm-up: 10% of the row, at least 100 (or the whole row if shorter). */
static uint64_t row_warmup(uint64_t iters)
{
	uint64_t w = iters / 10;

	if (w < 100)
		w = iters < 100 ? iters : 100;
	return w;
}

/* Time allowed to a row: generous, since a slow transport on a slow machine must finish. */
static uint64_t row_timeout(uint64_t iters, uint64_t warm, size_t size)
{
	uint64_t n = iters + warm;

	return ROW_TIMEOUT_S * 1000000000ull + n * 100000ull + n * 2 * (uint64_t)size * 10;
}

/* ---- main ----------------------------------------------------------------- */

/*
 * Measure one pattern and size: every transport that supports the pattern
 * once a round, in turn, for --rounds rounds (one without it), with the
 * cache line's round trip in each round (with --rounds: its own row where
 * it is among the transports of a ping-pong, else a row measured for it);
 * then reduce the rounds into one row per transport (perf_rounds_reduce).
 * @rows gets them (MAX_TRANSPORTS at most), *@n their number.
 * @return the number of rows that failed, or -1 when out of memory.
 */
static int measure_group(const struct opts *o, struct row *r, unsigned pattern, size_t size, perf_result_t *rows,
			 size_t *n)
{
	const perf_transport_t *tr[MAX_TRANSPORTS], *cacheline = perf_transport_find("cacheline");
	size_t rounds = o->rounds ? o->rounds : 1, ntr = 0;
	perf_result_t *grid = calloc(rounds * MAX_TRANSPORTS, sizeof(*grid));
	unsigned char *ok = calloc(rounds * MAX_TRANSPORTS, 1);
	double *cl_ns = calloc(rounds, sizeof(*cl_ns));
	int base = -1, own_cl = -1, failures = 0;

	*n = 0;
	if (grid == NULL || ok == NULL || cl_ns == NULL) {
		fprintf(stderr, "%s: error: out of memory for %zu rounds\n", prog, rounds);
		failures = -1;
		goto out;
	}
	for (size_t ti = 0; ti < o->ntr; ti++) {
		const perf_transport_t *t = o->tr[ti];

		if (!(t->patterns & pattern))
			continue; /* not meaningful for this pattern */
		if (strcmp(t->name, "textbook") == 0)
			base = (int)ntr;
		if (t == cacheline && pattern == PERF_PINGPONG)
			own_cl = (int)ntr;
		tr[ntr++] = t;
	}
	for (size_t k = 0; k < rounds; k++) {
		perf_result_t cl;

		r->round = (unsigned)k;
		if (o->rounds && own_cl < 0 && cacheline != NULL &&
		    run_row(r, cacheline, PERF_PINGPONG, size, &cl) == 0)
			cl_ns[k] = cl.median_ns;
		for (size_t t = 0; t < ntr; t++) {
			int rc = run_row(r, tr[t], pattern, size, &grid[k * ntr + t]);

			ok[k * ntr + t] = rc == 0;
			failures += rc < 0;
		}
		if (own_cl >= 0 && ok[k * ntr + (size_t)own_cl])
			cl_ns[k] = grid[k * ntr + (size_t)own_cl].median_ns;
	}
	r->round = 0;
	*n = perf_rounds_reduce(grid, ok, rounds, ntr, base, cl_ns, rows);
out:
	free(grid);
	free(ok);
	free(cl_ns);
	return failures;
}

/*
 * Measure every pattern and size: write each group to @out and keep it in
 * @plot (may be NULL).  @return the number of rows that failed.
 */
static int measure_all(const struct opts *o, struct row *r, perf_output_t *out, perf_plot_t *plot)
{
	static const unsigned patterns[] = { PERF_PINGPONG, PERF_STREAM };
	int failures = 0, rc;

	for (size_t pi = 0; pi < sizeof(patterns) / sizeof(patterns[0]); pi++) {
		unsigned pattern = patterns[pi];

		if (!(o->patterns & pattern))
			continue;
		for (size_t si = 0; si < o->nsizes; si++) {
			size_t size = o->sizes[si];
			perf_result_t rows[MAX_TRANSPORTS + 1], mc;
			size_t n = 0;

			r->iters = row_iterations(o->iterations, size);
			r->warm = row_warmup(r->iters);
			r->timeout_ns = row_timeout(r->iters, r->warm, size);
			rc = measure_group(o, r, pattern, size, rows, &n);
			if (rc < 0)
				return failures + 1;
			failures += rc;
			/* The memcpy reference: a line of the table and of the plot. */
			int with_memcpy = (o->fmt == PERF_FMT_TABLE || plot != NULL) && pattern == PERF_STREAM &&
					  n > 0 && size > 0 && measure_memcpy(o, size, r->iters, &mc) == 0;

			perf_output_group(out, rows, n, with_memcpy ? &mc : NULL);
			if (with_memcpy)
				rows[n] = mc;
			if (plot != NULL && perf_plot_add(plot, rows, n + (size_t)with_memcpy) < 0) {
				fprintf(stderr, "%s: error: out of memory for the plot\n", prog);
				failures++;
			}
		}
	}
	for (size_t si = 0; (o->patterns & PERF_CREATE) && si < o->nsizes; si++) {
		perf_result_t rows[2];

		if (measure_create(o, o->sizes[si], o->create_iterations, rows) == 0)
			perf_output_group(out, rows, 2, NULL);
		else
			failures++;
	}
	return failures;
}

/* Draw the plot of --plot. @return 0, or -1 (an error was printed). */
static int finish_plot(perf_plot_t *plot, const char *title)
{
	char err[8400];

	if (perf_plot_finish(plot, title, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: error: --plot: %s\n", prog, err);
		return -1;
	}
	fprintf(stderr, "%s: plot written to %s (its data and gnuplot script beside it: %s.dat, %s.gp)\n",
		prog, plot->file, plot->stem, plot->stem);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct row r = { .o = &o };
	struct rlimit unlimited = { RLIM_INFINITY, RLIM_INFINITY };
	perf_output_t out;
	perf_plot_t plot;
	sigset_t chld;
	char title[4200], err[4400];
	int failures = 0, rc;
	void *p;

	rc = perf_parse_options(argc, argv, &o);
	if (rc >= 0)
		return rc;
	/* Before measuring: a run that cannot plot stops here. */
	if (o.plot != NULL && perf_plot_init(&plot, o.plot, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: --plot: %s; nothing was measured\n", prog, err);
		return 2;
	}

	/* SIGCHLD stays pending until wait_sides() takes it. */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &chld, &r.oldmask) < 0) {
		fprintf(stderr, "%s: sigprocmask: %s\n", prog, strerror(errno));
		return 1;
	}
	/* Best effort: lets the sides lock their memory without CAP_IPC_LOCK. */
	setrlimit(RLIMIT_MEMLOCK, &unlimited);

	p = mmap(NULL, sizeof(struct ctl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "%s: mmap: %s\n", prog, strerror(errno));
		return 1;
	}
	r.ctl = p;
	p = mmap(NULL, o.iterations * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "%s: mmap of %llu samples: %s\n", prog, (unsigned long long)o.iterations,
			strerror(errno));
		return 1;
	}
	r.samples = p;
	r.parent = getpid();

	if (o.daemon)
		snprintf(title, sizeof(title), "%s: libpinshm %s, sides on CPUs %d and %d, pinshmd at %s", prog,
			 pinshm_version(), o.cpu[0], o.cpu[1], o.socket ? o.socket : "the default socket");
	else
		snprintf(title, sizeof(title), "%s: libpinshm %s, sides on CPUs %d and %d", prog,
			 pinshm_version(), o.cpu[0], o.cpu[1]);
	perf_output_begin(&out, o.fmt, stdout, title, o.rounds);
	failures = measure_all(&o, &r, &out, o.plot != NULL ? &plot : NULL);
	perf_output_end(&out);
	if (o.plot != NULL) {
		size_t used = strlen(title);

		if (o.rounds > 1)
			snprintf(title + used, sizeof(title) - used, ", medians of %u rounds", o.rounds);
		if (finish_plot(&plot, title) < 0)
			failures++;
		perf_plot_free(&plot);
	}

	if (r.unlocked)
		fprintf(stderr, "%s: note: the sides could not lock their memory (mlockall); "
				"first-touch page faults may show in the tails\n", prog);
	munmap(r.samples, o.iterations * sizeof(uint64_t));
	munmap(r.ctl, sizeof(struct ctl));
	return failures ? 1 : 0;
}
