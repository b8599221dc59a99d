/*
 * check_pool.c - pinshmd's pool of ready segments, filled in slices.
 *
 * Two kinds of test:
 * - steps: daemon/pool.c and daemon/segment.c linked here, refilled step
 *   by step by hand: what is locked (this process's VmLck), what is
 *   charged (the account's pinned sum), what can be taken, after each step
 *   and after a drain, a reload or a failed lock halfway;
 * - daemon: a real pinshmd (--user, as the test's user) with a class of
 *   128 MiB, whose VmLck is read from /proc between requests: a request is
 *   answered while the segment is half locked, STATUS counts it whole, and
 *   a create refused for the budget, a reload and a shutdown halfway
 *   leave nothing locked or charged.  The daemon refills only once no
 *   request has come for 2 ms: a client that asks without pause holds a
 *   refill where it is, which is how these tests keep one half-filled.
 *
 * No timing is asserted: only states, seen in between.  Locking needs
 * CAP_IPC_LOCK (root) or a large RLIMIT_MEMLOCK: without, they skip.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../daemon/account.h"
#include "../daemon/pool.h"
#include "daemonutil.h"
#include "pinshm.h"
#include "testutil.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define SLICE POOL_SLICE_BYTES

/* VmLck of process @p pid, in bytes. */
static uint64_t locked_bytes(pid_t pid)
{
	long kb = proc_status_value_kb(pid, "VmLck:");

	ck_assert_int_ge(kb, 0);
	return (uint64_t)kb * 1024u;
}

/* Whether this process (and a daemon it starts) may lock @p bytes. */
static bool may_lock(uint64_t bytes)
{
	struct rlimit rl;

	if (geteuid() == 0 || (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur >= bytes))
		return true;
	fprintf(stderr, "note: not root, RLIMIT_MEMLOCK under %llu bytes: the test is skipped\n",
		(unsigned long long)bytes);
	return false;
}

static unsigned open_fds(void)
{
	unsigned n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* ======================================================================== */
/* Steps: the pool driven by hand                                            */
/* ======================================================================== */

struct bench {
	struct config cfg;
	struct account acct;
	struct pool pool;
	uint64_t locked0; /* this process's VmLck before */
};

/* A pool of @p per_size segments of each of @p nsizes @p sizes, against a
 * budget of @p budget bytes.  @return false: the test is skipped. */
static bool bench_init(struct bench *b, uint64_t budget, const uint64_t *sizes, unsigned nsizes, unsigned per_size)
{
	memset(b, 0, sizeof(*b));
	if (!may_lock(32 * MiB))
		return false;
	b->cfg.budget = budget;
	b->acct.cfg = &b->cfg;
	b->locked0 = locked_bytes(getpid());
	pool_init(&b->pool, &b->acct);
	ck_assert_int_eq(pool_configure(&b->pool, sizes, nsizes, per_size, NULL), 0);
	return true;
}

static uint64_t locked_now(const struct bench *b)
{
	return locked_bytes(getpid()) - b->locked0;
}

/* Nothing of bench @p b stays charged, locked or open (@p fds0: the
 * descriptors open before it).  A macro: a failure names its caller's line. */
#define ASSERT_NOTHING_HELD(b, fds0)                            \
	do {                                                    \
		ck_assert_uint_eq((b)->acct.pinned, 0);         \
		ck_assert_uint_eq(locked_now(b), 0);            \
		ck_assert_uint_eq(open_fds(), (fds0));          \
	} while (0)

/* What the pool fills, and how much of it is locked. */
static uint64_t filling(const struct bench *b, uint64_t *locked)
{
	return pool_filling_bytes(&b->pool, locked);
}

/* A segment is locked slice by slice, charged whole from the first step,
 * and can be taken only once wholly locked. */
START_TEST(test_steps_fill)
{
	const uint64_t size = 4 * SLICE;
	struct bench b;
	struct segment s;
	uint64_t locked;

	if (!bench_init(&b, UINT64_MAX, &size, 1, 1))
		return;
	ck_assert(pool_wants(&b.pool));
	ck_assert_uint_eq(pool_bytes(&b.pool), 0);
	for (unsigned step = 1; step < 4; step++) {
		pool_refill(&b.pool);
		ck_assert_uint_eq(filling(&b, &locked), size);
		ck_assert_uint_eq(locked, step * SLICE);
		ck_assert_uint_eq(locked_now(&b), step * SLICE);
		ck_assert_uint_eq(b.acct.pinned, size); /* whole from the first step */
		ck_assert_uint_eq(pool_bytes(&b.pool), size);
		ck_assert(pool_wants(&b.pool));
		ck_assert_msg(!pool_take(&b.pool, size, &s), "a half-filled segment was taken at step %u", step);
		ck_assert_uint_eq(b.acct.pinned, size);
	}
	pool_refill(&b.pool);
	ck_assert_uint_eq(filling(&b, &locked), 0);
	ck_assert_uint_eq(locked, 0);
	ck_assert_uint_eq(locked_now(&b), size);
	ck_assert_uint_eq(b.acct.pinned, size);
	ck_assert(!pool_wants(&b.pool));
	ck_assert(pool_take(&b.pool, size, &s));
	ck_assert(s.pinned && s.sealed);
	ck_assert_uint_eq(s.size, size);
	ck_assert_uint_eq(b.acct.pinned, 0); /* its charge left with it */
	ck_assert_uint_eq(((volatile unsigned char *)s.base)[size - 1], 0);
	segment_destroy(&s);
	ck_assert_uint_eq(locked_now(&b), 0);
	pool_fini(&b.pool);
}
END_TEST

/* A class smaller than a slice fills in one step; one that is not a
 * multiple of the slice ends with a short one. */
START_TEST(test_steps_odd_sizes)
{
	const uint64_t sizes[] = {64 * KiB, SLICE + 64 * KiB};
	struct bench b;
	uint64_t locked;

	if (!bench_init(&b, UINT64_MAX, sizes, 2, 1))
		return;
	pool_refill(&b.pool); /* both lack one: the first class */
	ck_assert_uint_eq(filling(&b, NULL), 0);
	ck_assert_uint_eq(pool_bytes(&b.pool), 64 * KiB);
	pool_refill(&b.pool);
	ck_assert_uint_eq(filling(&b, &locked), SLICE + 64 * KiB);
	ck_assert_uint_eq(locked, SLICE);
	pool_refill(&b.pool);
	ck_assert_uint_eq(filling(&b, NULL), 0);
	ck_assert_uint_eq(locked_now(&b), 2 * 64 * KiB + SLICE);
	ck_assert_uint_eq(b.acct.pinned, 2 * 64 * KiB + SLICE);
	ck_assert(!pool_wants(&b.pool));
	pool_fini(&b.pool);
	ck_assert_uint_eq(b.acct.pinned, 0);
	ck_assert_uint_eq(locked_now(&b), 0);
}
END_TEST

/* pool_stat(): each class's size, wanted and ready counts, and which one
 * fills, with the bytes locked of it so far; bounded by its max. */
START_TEST(test_steps_stat)
{
	const uint64_t sizes[] = {3 * SLICE, 64 * KiB};
	struct bench b;
	struct pool_class_stat cs[3];
	struct segment s;

	if (!bench_init(&b, UINT64_MAX, sizes, 2, 2))
		return;
	memset(cs, 0xa5, sizeof(cs));
	ck_assert_uint_eq(pool_stat(&b.pool, cs, 3), 2);
	ck_assert_uint_eq(cs[0].size, 64 * KiB); /* smallest first */
	ck_assert_uint_eq(cs[1].size, 3 * SLICE);
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(cs[i].wanted, 2);
		ck_assert_uint_eq(cs[i].ready, 0);
		ck_assert_uint_eq(cs[i].filling, 0);
		ck_assert_uint_eq(cs[i].locked, 0);
	}
	pool_refill(&b.pool); /* the small one, ready at once */
	pool_refill(&b.pool); /* the large one's first slice (it lacks most, with the small one's second) */
	ck_assert_uint_eq(pool_stat(&b.pool, cs, 3), 2);
	ck_assert_uint_eq(cs[0].ready + cs[1].ready, 1);
	uint64_t locked;
	uint64_t fill = pool_filling_bytes(&b.pool, &locked);
	unsigned which = fill == 3 * SLICE ? 1 : 0;
	ck_assert_uint_eq(cs[which].filling, 1);
	ck_assert_uint_eq(cs[which].locked, locked);
	ck_assert_uint_eq(cs[1 - which].filling, 0);
	ck_assert_uint_eq(cs[1 - which].locked, 0);
	while (pool_wants(&b.pool))
		pool_refill(&b.pool);
	ck_assert_uint_eq(pool_stat(&b.pool, cs, 3), 2);
	ck_assert_uint_eq(cs[0].ready, 2);
	ck_assert_uint_eq(cs[1].ready, 2);
	ck_assert_uint_eq(cs[0].filling + cs[1].filling, 0);
	/* A take moves the count of its class only. */
	ck_assert(pool_take(&b.pool, 3 * SLICE, &s));
	ck_assert_uint_eq(pool_stat(&b.pool, cs, 3), 2);
	ck_assert_uint_eq(cs[0].ready, 2);
	ck_assert_uint_eq(cs[1].ready, 1);
	segment_destroy(&s);
	/* Bounded by max: the smallest classes only, nothing written past. */
	memset(cs, 0xa5, sizeof(cs));
	ck_assert_uint_eq(pool_stat(&b.pool, cs, 1), 1);
	ck_assert_uint_eq(cs[0].size, 64 * KiB);
	ck_assert_uint_eq(cs[1].size, 0xa5a5a5a5a5a5a5a5ull);
	pool_fini(&b.pool);
	ck_assert_uint_eq(pool_stat(&b.pool, cs, 3), 0);
}
END_TEST

/* A drain halfway (a create refused for the budget) destroys the
 * half-filled segment: nothing stays locked, open or charged. */
START_TEST(test_steps_drain)
{
	const uint64_t size = 4 * SLICE;
	struct bench b;

	unsigned fds0 = open_fds();
	if (!bench_init(&b, UINT64_MAX, &size, 1, 2))
		return;
	for (int i = 0; i < 6; i++) /* one ready, the second half-filled */
		pool_refill(&b.pool);
	ck_assert_uint_eq(filling(&b, NULL), size);
	ck_assert_uint_eq(locked_now(&b), size + 2 * SLICE);
	ck_assert_uint_eq(b.acct.pinned, 2 * size);
	ck_assert_uint_eq(pool_drain(&b.pool, NULL), 2 * size);
	ck_assert_uint_eq(pool_bytes(&b.pool), 0);
	ck_assert_uint_eq(filling(&b, NULL), 0);
	ASSERT_NOTHING_HELD(&b, fds0);
	ck_assert(pool_wants(&b.pool)); /* it fills again */
	pool_refill(&b.pool);
	ck_assert_uint_eq(b.acct.pinned, size);
	pool_fini(&b.pool);
	ASSERT_NOTHING_HELD(&b, fds0);
}
END_TEST

/* A drain for a create: the ready and the half-filled segment leave the
 * pool and the budget at once, but are unmapped a slice a loop turn
 * (dying_step()), not in the drain: their pages stay locked until then. */
START_TEST(test_steps_drain_later)
{
	const uint64_t size = 4 * SLICE;
	struct bench b;
	struct dying *q = NULL;
	unsigned steps = 0;

	unsigned fds0 = open_fds();
	if (!bench_init(&b, UINT64_MAX, &size, 1, 2))
		return;
	for (int i = 0; i < 6; i++) /* one ready, the second half-filled */
		pool_refill(&b.pool);
	ck_assert_uint_eq(pool_drain(&b.pool, &q), 2 * size);
	ck_assert_uint_eq(b.acct.pinned, 0);
	ck_assert_uint_eq(pool_bytes(&b.pool), 0);
	ck_assert_uint_eq(filling(&b, NULL), 0);
	ck_assert_uint_eq(locked_now(&b), size + 2 * SLICE); /* nothing unmapped yet */
	ck_assert_ptr_nonnull(q);
	while (dying_step(&q))
		steps++;
	ck_assert_uint_eq(steps + 1, 2 * size / SLICE); /* a slice a step */
	ck_assert_uint_eq(locked_now(&b), 0);
	ck_assert_uint_eq(open_fds(), fds0);
	pool_fini(&b.pool);
}
END_TEST

/* A reload halfway: the half-filled segment goes with the old classes,
 * then the new ones fill. */
START_TEST(test_steps_reload)
{
	const uint64_t size = 4 * SLICE, other = 2 * SLICE;
	struct bench b;

	unsigned fds0 = open_fds();
	if (!bench_init(&b, UINT64_MAX, &size, 1, 1))
		return;
	pool_refill(&b.pool);
	pool_refill(&b.pool);
	ck_assert_uint_eq(locked_now(&b), 2 * SLICE);
	ck_assert_int_eq(pool_configure(&b.pool, &other, 1, 1, NULL), 0);
	ASSERT_NOTHING_HELD(&b, fds0);
	while (pool_wants(&b.pool))
		pool_refill(&b.pool);
	ck_assert_uint_eq(b.acct.pinned, other);
	ck_assert_uint_eq(locked_now(&b), other);
	ck_assert_int_eq(pool_configure(&b.pool, NULL, 0, 0, NULL), 0);
	ASSERT_NOTHING_HELD(&b, fds0);
}
END_TEST

/* A segment starts only where the budget has room for it whole. */
START_TEST(test_steps_budget)
{
	const uint64_t size = 4 * SLICE;
	struct bench b;

	if (!bench_init(&b, size + size / 2, &size, 1, 2))
		return;
	while (pool_wants(&b.pool))
		pool_refill(&b.pool);
	ck_assert_uint_eq(pool_bytes(&b.pool), size);
	ck_assert_uint_eq(filling(&b, NULL), 0);
	ck_assert_uint_eq(b.acct.pinned, size);
	/* Room for a second half-filled one, charged whole, there is not:
	 * nothing started, nothing locked beyond the first. */
	pool_refill(&b.pool);
	ck_assert_uint_eq(filling(&b, NULL), 0);
	ck_assert_uint_eq(locked_now(&b), size);
	pool_fini(&b.pool);
}
END_TEST

/* A segment put back (taken, then not handed out) while another of its
 * class fills: the class is full when that one is done, which is then
 * destroyed, not written past the class. */
START_TEST(test_steps_put_back)
{
	const uint64_t size = 2 * SLICE;
	struct bench b;
	struct segment s;

	if (!bench_init(&b, UINT64_MAX, &size, 1, 1))
		return;
	pool_refill(&b.pool);
	pool_refill(&b.pool);
	ck_assert(pool_take(&b.pool, size, &s));
	pool_refill(&b.pool); /* the next one, half-filled */
	ck_assert_uint_eq(filling(&b, NULL), size);
	pool_put_back(&b.pool, &s);
	ck_assert_uint_eq(b.acct.pinned, 2 * size);
	pool_refill(&b.pool);
	ck_assert_uint_eq(filling(&b, NULL), 0);
	ck_assert_uint_eq(pool_bytes(&b.pool), size);
	ck_assert_uint_eq(b.acct.pinned, size);
	ck_assert_uint_eq(locked_now(&b), size);
	ck_assert(!pool_wants(&b.pool));
	pool_fini(&b.pool);
	ck_assert_uint_eq(locked_now(&b), 0);
}
END_TEST

/* The body of test_steps_lock_fails, in a child without CAP_IPC_LOCK and
 * with 3 slices of RLIMIT_MEMLOCK: @return 0, or the number of the check
 * that failed. */
static int lock_fails_child(void)
{
	const uint64_t size = 6 * SLICE;
	struct rlimit rl = {.rlim_cur = 3 * SLICE, .rlim_max = 3 * SLICE};
	struct config cfg = {.budget = UINT64_MAX};
	struct account acct = {.cfg = &cfg};
	struct pool pool;

	if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0)
		return 100;
	if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
		return 101;
	unsigned fds0 = open_fds();
	pool_init(&pool, &acct);
	if (pool_configure(&pool, &size, 1, 1, NULL) != 0)
		return 102;
	for (int step = 0; step < 3; step++) {
		pool_refill(&pool);
		if (pool_filling_bytes(&pool, NULL) != size || acct.pinned != size)
			return 1; /* the 3 slices within the limit */
	}
	pool_refill(&pool); /* the fourth is refused */
	if (pool_filling_bytes(&pool, NULL) != 0 || pool_bytes(&pool) != 0 || acct.pinned != 0)
		return 2;
	if (locked_bytes(getpid()) != 0)
		return 3;
	if (open_fds() != fds0)
		return 4;
	if (pool_wants(&pool))
		return 5; /* stopped until the next configure */
	pool_refill(&pool);
	if (acct.pinned != 0 || locked_bytes(getpid()) != 0)
		return 6;
	pool_fini(&pool);
	return 0;
}

/* A lock refused halfway (RLIMIT_MEMLOCK): what was locked of the segment
 * is unlocked, its charge goes, and the pool stops filling. */
START_TEST(test_steps_lock_fails)
{
	int status;

	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(lock_fails_child());
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed check %d (status %#x)",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -1, status);
}
END_TEST

/* ======================================================================== */
/* A real pinshmd                                                            */
/* ======================================================================== */

#define CLASS (128 * MiB)
#define TRIES 5000 /* requests while waiting for a state; each 3 ms apart at most */

/* pinshmd -f -vv --user with config @p conf, its log in d->log. */
static void pool_daemon_start(struct daemon *d, const char *conf)
{
	struct daemon_opts o = {.tmpl = "/tmp/pinshm-pool-XXXXXX", .config = true, .log = true, .verbose = true};

	daemon_start_config(d, &o, "%s", conf);
}

static pinshm_status_t status_of(pinshm_client_t *c)
{
	pinshm_status_t st;

	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	return st;
}

/* Write @p conf and send SIGHUP. */
static void reload(struct daemon *d, const char *conf)
{
	daemon_write_config(d, "%s", conf);
	ck_assert_int_eq(kill(d->pid, SIGHUP), 0);
}

/* Wait until the daemon has @p bytes locked, asking STATUS 10 ms apart;
 * then its pinned figure must be @p bytes too. */
static void wait_locked(const struct daemon *d, pinshm_client_t *c, uint64_t bytes)
{
	for (int i = 0; i < TRIES && locked_bytes(d->pid) != bytes; i++) {
		status_of(c);
		tu_sleep_ms(10);
	}
	ck_assert_uint_eq(locked_bytes(d->pid), bytes);
	ck_assert_uint_eq(status_of(c).pinned, bytes);
}

/*
 * Ask STATUS 3 ms apart (each pause a refill step or so) until the daemon
 * has locked part of its segment of CLASS bytes, not all: then ask once
 * more at once, and fail unless that reply came while it still was half
 * locked, with the segment charged whole.  @return the bytes locked then,
 * or 0 where the segment was seen locked whole: a daemon that fills it in
 * one go always is, one that fills it in slices only when this process
 * was held off the CPU while it filled (catch_refill() tries again).
 */
static uint64_t catch_half_filled(const struct daemon *d, pinshm_client_t *c)
{
	for (int i = 0; i < TRIES; i++) {
		pinshm_status_t st = status_of(c);
		uint64_t locked = locked_bytes(d->pid);
		ck_assert_uint_le(st.pinned, CLASS);
		if (locked >= CLASS)
			return 0;
		if (locked == 0) {
			tu_sleep_ms(3);
			continue;
		}
		pinshm_pool_t pool;
		CLIENT_RC(c, pinshm_status_pool(c, &st, &pool, NULL, NULL), 0);
		uint64_t after = locked_bytes(d->pid);
		if (after >= CLASS)
			return 0;
		ck_assert_uint_gt(after, 0);
		ck_assert_uint_eq(st.pinned, CLASS); /* charged whole */
		/* STATUS shows why: the pool's, filling, what it had locked when
		 * it answered (between the two readings of VmLck). */
		ck_assert_uint_eq(pool.pinned, CLASS);
		ck_assert_uint_eq(pool.count, 1);
		ck_assert_uint_eq(pool.classes[0].size, CLASS);
		ck_assert_uint_eq(pool.classes[0].ready, 0);
		ck_assert_uint_eq(pool.classes[0].filling, 1);
		ck_assert_uint_ge(pool.classes[0].locked, locked);
		ck_assert_uint_le(pool.classes[0].locked, after);
		return after;
	}
	ck_abort_msg("the daemon was never seen with its segment half locked (%d requests)", TRIES);
	return 0;
}

static const char conf_off[] = "[daemon]\npool_segments = 0\npool_sizes = 128M\n";
static const char conf_on[] = "[daemon]\npool_segments = 1\npool_sizes = 128M\n";

#define FILLS 5 /* pools filled until one is caught half-way */

/* The pool, off and empty, on as @p conf says (SIGHUP) and caught
 * half-filled; else emptied and filled again, FILLS times at most. */
static void catch_refill(struct daemon *d, pinshm_client_t *c, const char *conf)
{
	for (int fill = 0; fill < FILLS; fill++) {
		reload(d, conf);
		if (catch_half_filled(d, c))
			return;
		reload(d, conf_off);
		wait_locked(d, c, 0);
	}
	ck_abort_msg("the daemon locked its %u MiB segment whole between two requests, %d fills in a row",
		     (unsigned)(CLASS / MiB), FILLS);
}

/* A daemon with its pool off, and a client; then the pool on as
 * @p conf_later says, caught half-filled (catch_refill()).
 * @return NULL: the test is skipped. */
static pinshm_client_t *start_half_filled(struct daemon *d, const char *conf_later)
{
	if (!may_lock(2 * CLASS))
		return NULL;
	pool_daemon_start(d, conf_off);
	pinshm_client_t *c = connect_ok(d);
	ck_assert_uint_eq(status_of(c).pinned, 0);
	ck_assert_uint_eq(locked_bytes(d->pid), 0);
	catch_refill(d, c, conf_later);
	return c;
}

/* Requests are served while a large segment fills, and it does fill. */
START_TEST(test_daemon_served_while_filling)
{
	struct daemon d;
	pinshm_client_t *c = start_half_filled(&d, conf_on);

	if (!c)
		return;
	ck_assert(daemon_log_has(&d, "pool: filling a segment of 134217728 bytes"));
	wait_locked(&d, c, CLASS);
	ck_assert(daemon_log_has(&d, "pool: ready segment of 134217728 bytes"));
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A create refused for the budget while the segment is half locked: the
 * pool is emptied, the half-filled segment with it, and the channel made;
 * the pinned figure is the channel's alone, and what is locked too. */
START_TEST(test_daemon_budget_drain)
{
	static const char conf[] = "[daemon]\nbudget = 132M\npool_segments = 1\npool_sizes = 128M\n";
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;

	pinshm_client_t *c = start_half_filled(&d, conf);
	if (!c)
		return;
	tu_attr(&attr, PINSHM_QUEUE, 8 * MiB, 1, 1); /* not the pool's class; with it, over the budget */
	CLIENT_RC(c, pinshm_create(c, "big", &attr, 0600, 0), 0);
	ck_assert(daemon_log_has(&d, "pool: the segment of 134217728 bytes being filled"));
	ck_assert(list_find(c, "big", &e, NULL));
	ck_assert(e.state & PINSHM_LIST_PINNED);
	ck_assert_uint_eq(status_of(c).pinned, e.size);
	ck_assert_uint_eq(locked_bytes(d.pid), e.size);
	/* No room for the class beside the channel: nothing starts. */
	tu_sleep_ms(50);
	ck_assert_uint_eq(status_of(c).pinned, e.size);
	ck_assert_uint_eq(locked_bytes(d.pid), e.size);
	CLIENT_RC(c, pinshm_unlink(c, "big"), 0);
	pinshm_disconnect(c);
	pinshm_client_t *c2 = connect_ok(&d);
	wait_locked(&d, c2, CLASS); /* the channel gone, the pool full */
	pinshm_disconnect(c2);
	daemon_stop_ok(&d);
}
END_TEST

/* A reload while the segment is half locked, to no pool, then to another
 * class: nothing of the first stays locked or charged. */
START_TEST(test_daemon_reload)
{
	struct daemon d;
	pinshm_client_t *c = start_half_filled(&d, conf_on);

	if (!c)
		return;
	for (int round = 1;; round++) {
		reload(&d, conf_off);
		/* Asked without pause, no refill step runs: the reload alone. */
		for (int i = 0; status_of(c).pinned != 0; i++)
			ck_assert_msg(i < 100000, "STATUS never said 0 bytes pinned after the reload");
		wait_locked(&d, c, 0); /* the drained segment is unmapped in slices */
		if (daemon_log_has(&d, "pool: the segment of 134217728 bytes being filled"))
			break;
		/* The fill ended between the last reply and the SIGHUP (this
		 * process held off the CPU): the reload destroyed a ready
		 * segment instead.  Fill it again and catch it half-way. */
		ck_assert(daemon_log_has(&d, "bytes of ready segments destroyed"));
		ck_assert_msg(round < FILLS, "%d reloads came after the fill had ended", FILLS);
		catch_refill(&d, c, conf_on);
	}
	reload(&d, "[daemon]\npool_segments = 1\npool_sizes = 16M\n");
	wait_locked(&d, c, 16 * MiB);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* SIGTERM while the segment is half locked: a clean exit (under
 * $PINSHMD_WRAPPER's valgrind: no leak, no error), the segment destroyed. */
START_TEST(test_daemon_shutdown)
{
	struct daemon d;
	pinshm_client_t *c = start_half_filled(&d, conf_on);

	if (!c)
		return;
	ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
	int st = daemon_wait_exit(&d, DAEMON_STOP_MS * (pinshmd_wrapper() ? DAEMON_WRAPPER_SLOWDOWN : 1));
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "pinshmd: wait status %#x", st);
	ck_assert(daemon_log_has(&d, "pool: the segment of 134217728 bytes being filled"));
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

/* A daemon of an ordinary user whose RLIMIT_MEMLOCK holds 3 slices of a
 * class of 16 MiB: the lock is refused halfway, nothing stays locked or
 * charged, the pool stops filling, and the daemon serves on. */
START_TEST(test_daemon_lock_fails)
{
	struct daemon d;
	struct daemon_opts o = {.tmpl = "/tmp/pinshm-pool-XXXXXX",
				.config = true,
				.log = true,
				.verbose = true,
				.as_user = true,
				.memlock = 3 * SLICE};

	if (!daemon_test_user(&o.uid, &o.gid))
		return;
	daemon_start_config(&d, &o, "[daemon]\npool_segments = 1\npool_sizes = 16M\n");
	pinshm_client_t *c = connect_ok(&d);
	/* The warning comes first, then the line of the segment given up. */
	for (int i = 0; i < TRIES && !daemon_log_has(&d, "pool: the segment of 16777216 bytes being filled"); i++)
		tu_sleep_ms(10);
	ck_assert(daemon_log_has(&d, "(RLIMIT_MEMLOCK), 6291456 of 16777216 bytes locked); the pool stops filling"));
	ck_assert(daemon_log_has(&d, "pool: the segment of 16777216 bytes being filled"));
	ck_assert_uint_eq(locked_bytes(d.pid), 0);
	ck_assert_uint_eq(status_of(c).pinned, 0);
	/* STATUS says the pool stopped, with nothing in it. */
	pinshm_status_t st;
	pinshm_pool_t pool;
	CLIENT_RC(c, pinshm_status_pool(c, &st, &pool, NULL, NULL), 0);
	ck_assert_uint_eq(pool.flags, PINSHM_POOL_STOPPED);
	ck_assert_uint_eq(pool.pinned, 0);
	ck_assert_uint_eq(pool.count, 1);
	ck_assert_uint_eq(pool.classes[0].size, 16 * MiB);
	ck_assert_uint_eq(pool.classes[0].wanted, 1);
	ck_assert_uint_eq(pool.classes[0].ready + pool.classes[0].filling, 0);
	/* Stopped, not retried: after that reply the daemon's loop finds no
	 * refill step due and sleeps until a peer comes. */
	uint64_t deadline = tu_now_ms() + 10000u * (pinshmd_wrapper() ? DAEMON_WRAPPER_SLOWDOWN : 1);
	while (!daemon_waits_forever(d.pid)) {
		ck_assert_msg(tu_now_ms() < deadline, "the daemon never slept without a timeout");
		tu_sleep_ms(5);
	}
	ck_assert_uint_eq(locked_bytes(d.pid), 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* The pool of @p c's daemon once every class holds @p ready segments
 * (asked 10 ms apart; fails after TRIES). */
static pinshm_pool_t wait_pool_ready(pinshm_client_t *c, unsigned ready, pinshm_status_t *st)
{
	pinshm_pool_t pool;

	for (int i = 0; i < TRIES; i++) {
		CLIENT_RC(c, pinshm_status_pool(c, st, &pool, NULL, NULL), 0);
		bool all = pool.count > 0;
		for (uint32_t k = 0; k < pool.count; k++)
			all = all && pool.classes[k].ready == ready && !pool.classes[k].filling;
		if (all)
			return pool;
		tu_sleep_ms(10);
	}
	ck_abort_msg("the pool never held %u ready segments of each class", ready);
	return pool;
}

/*
 * STATUS shows the pool: its classes as configured, ready reaching wanted,
 * what it holds of the pinned figure (the users' and the pool's make the
 * whole).  The budget holds the full pool and one small channel exactly,
 * so a create of the first class's size, served from the pool, leaves it
 * one short until that channel goes: the counts move, and stay moved.
 */
START_TEST(test_daemon_status_pool)
{
	pinshm_channel_attr_t attr, small;
	struct daemon d;
	pinshm_status_t st;
	pinshm_user_usage_t *u;
	pinshm_list_entry_t e;
	size_t seg, small_seg, n;
	char conf[256];

	if (!may_lock(64 * MiB))
		return;
	tu_attr(&attr, PINSHM_QUEUE, 256 * KiB, 1, 1);
	tu_attr(&small, PINSHM_QUEUE, 16 * KiB, 1, 1);
	TU_RC(pinshm_segment_size(&attr, &seg), 0);
	TU_RC(pinshm_segment_size(&small, &small_seg), 0);
	ck_assert_uint_eq(seg % 4096, 0);
	ck_assert_uint_eq(small_seg % 4096, 0);
	const uint64_t full = 2 * seg + 2 * (uint64_t)MiB;
	snprintf(conf, sizeof(conf), "[daemon]\nbudget = %llu\npool_segments = 2\npool_sizes = 1M %zu\n",
		 (unsigned long long)(full + small_seg), seg);
	pool_daemon_start(&d, conf);
	pinshm_client_t *c = connect_ok(&d);

	pinshm_pool_t pool = wait_pool_ready(c, 2, &st);
	ck_assert_uint_eq(pool.count, 2);
	ck_assert_uint_eq(pool.classes[0].size, seg); /* smallest first */
	ck_assert_uint_eq(pool.classes[1].size, MiB);
	ck_assert_uint_eq(pool.classes[0].wanted, 2);
	ck_assert_uint_eq(pool.classes[1].wanted, 2);
	ck_assert_uint_eq(pool.classes[0].locked + pool.classes[1].locked, 0);
	ck_assert_uint_eq(pool.flags, 0);
	ck_assert_uint_eq(pool.pinned, full);
	ck_assert_uint_eq(st.pinned, full); /* nothing else pinned: all the pool's */
	ck_assert_uint_eq(locked_bytes(d.pid), full);
	ck_assert_uint_eq(pool.hits, 0);
	ck_assert_uint_eq(pool.misses, 0);

	/* A channel of no class's size: a miss, the pool unchanged. */
	CLIENT_RC(c, pinshm_create(c, "small", &small, 0600, 0), 0);
	CLIENT_RC(c, pinshm_status_pool(c, &st, &pool, NULL, NULL), 0);
	ck_assert_uint_eq(pool.misses, 1);
	ck_assert_uint_eq(pool.hits, 0);
	ck_assert_uint_eq(pool.pinned, full);
	ck_assert_uint_eq(st.pinned, full + small_seg); /* the budget, exactly */

	/* One of the first class's size, by another client: taken from the
	 * pool, whose charge passes to the user; no room to make another. */
	pinshm_client_t *c2 = connect_ok(&d);
	CLIENT_RC(c2, pinshm_create(c2, "pooled", &attr, 0600, 0), 0);
	ck_assert(list_find(c, "pooled", &e, NULL));
	ck_assert_uint_eq(e.size, seg);
	tu_sleep_ms(20); /* idle turns: a refill would start now if it could */
	CLIENT_RC(c, pinshm_status_pool(c, &st, &pool, &u, &n), 0);
	ck_assert_uint_eq(pool.hits, 1);
	ck_assert_uint_eq(pool.misses, 1);
	ck_assert_uint_eq(pool.classes[0].ready, 1);
	ck_assert_uint_eq(pool.classes[0].filling, 0);
	ck_assert_uint_eq(pool.classes[1].ready, 2);
	ck_assert_uint_eq(pool.pinned, full - seg);
	ck_assert_uint_eq(st.pinned, full + small_seg);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(u[0].pinned, small_seg + seg);
	ck_assert_uint_eq(u[0].pinned + pool.pinned, st.pinned); /* the pinned figure, whole */
	free(u);

	/* The channel gone with its creator: room again, the pool refills. */
	pinshm_disconnect(c2);
	pool = wait_pool_ready(c, 2, &st);
	ck_assert_uint_eq(pool.pinned, full);
	ck_assert_uint_eq(pool.hits, 1);
	ck_assert_uint_eq(st.pinned, full + small_seg);
	ck_assert_uint_eq(locked_bytes(d.pid), full + small_seg);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

Suite *pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("steps");

	tcase_add_test(tc, test_steps_fill);
	tcase_add_test(tc, test_steps_odd_sizes);
	tcase_add_test(tc, test_steps_stat);
	tcase_add_test(tc, test_steps_drain);
	tcase_add_test(tc, test_steps_drain_later);
	tcase_add_test(tc, test_steps_reload);
	tcase_add_test(tc, test_steps_budget);
	tcase_add_test(tc, test_steps_put_back);
	tcase_add_test(tc, test_steps_lock_fails);
	suite_add_tcase(s, tc);

	tc = tcase_create("daemon");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_daemon_served_while_filling);
	tcase_add_test(tc, test_daemon_budget_drain);
	tcase_add_test(tc, test_daemon_reload);
	tcase_add_test(tc, test_daemon_shutdown);
	tcase_add_test(tc, test_daemon_lock_fails);
	tcase_add_test(tc, test_daemon_status_pool);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pool_suite());

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
