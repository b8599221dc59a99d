/* wait.c - spin, yield, then sleep on a shared futex (see wait.h). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "channel.h"
#include "pinshm.h"
#include "wait.h"

#define YIELDS 4
/* A sleeper that cannot issue membarrier() may miss a wake-up from a waker
 * that uses light fences; it sleeps in short slices instead. */
#define WAIT_SLICE_NO_MEMBARRIER_MS 1

bool wait_light_fences;
static bool can_membarrier;
static pid_t registered_pid;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

void wait_init(void)
{
	/* Registration belongs to the address space: a forked child registers
	 * again when it attaches.  After the first call in a process nothing
	 * is written again, so the hot path reads the flags without a lock. */
	pthread_mutex_lock(&init_lock);
	if (registered_pid != getpid()) {
		long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
		can_membarrier = cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED);
		wait_light_fences = can_membarrier && (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
				    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
		registered_pid = getpid();
	}
	pthread_mutex_unlock(&init_lock);
}

/* Every change of `sleepers` is an RMW (here, in wait_unregister() and in
 * uncount()): wait_has_sleepers() relies on its release sequences. */
void wait_register(struct wait_line *wl, _Atomic uint32_t *mark, uint32_t bit)
{
	atomic_fetch_add_explicit(&wl->sleepers, 1, memory_order_seq_cst);
	atomic_fetch_or_explicit(mark, bit, memory_order_relaxed);
	/* The sleeper's half of the asymmetric fence (see wait_has_sleepers). */
	if (can_membarrier)
		syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
}

void wait_unregister(struct wait_line *wl, _Atomic uint32_t *mark, uint32_t bit)
{
	atomic_fetch_and_explicit(mark, ~bit, memory_order_relaxed);
	atomic_fetch_sub_explicit(&wl->sleepers, 1, memory_order_relaxed);
}

static void uncount(struct wait_line *wl)
{
	uint32_t n = atomic_load_explicit(&wl->sleepers, memory_order_relaxed);

	while (n > 0 && !atomic_compare_exchange_weak_explicit(&wl->sleepers, &n, n - 1, memory_order_relaxed,
							       memory_order_relaxed))
		;
}

void wait_forget_dead(struct wait_line *data, struct wait_line *space, uint32_t marked)
{
	if (marked & SLEEPING_DATA)
		uncount(data);
	if (marked & SLEEPING_ARMED)
		uncount(data);
	if (marked & SLEEPING_SPACE)
		uncount(space);
}

uint64_t wait_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Shared (not FUTEX_PRIVATE) operations: the word lives in a segment that
 * other processes map. */
static void futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u) };

	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

void wait_wake_all(struct wait_line *wl)
{
	atomic_fetch_add_explicit(&wl->seq, 1, memory_order_release);
	syscall(SYS_futex, (uint32_t *)&wl->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void wait_spin_init(struct wait_spin *s, uint64_t ns, bool fixed)
{
	*s = (struct wait_spin){ .budget_ns = ns, .ceiling_ns = ns, .countdown = WAIT_PROBE_MIN,
				 .probe_every = WAIT_PROBE_MIN, .fixed = fixed };
}

uint64_t wait_spin_begin(struct wait_spin *s, uint64_t bytes)
{
	uint64_t copy_ns = bytes < WAIT_SPIN_COPY_MAX_NS / WAIT_SPIN_NS_PER_BYTE ? bytes * WAIT_SPIN_NS_PER_BYTE
									 : WAIT_SPIN_COPY_MAX_NS;

	if (s->fixed)
		return s->budget_ns;
	if (s->budget_ns > 0)
		return s->budget_ns + copy_ns;
	if (s->countdown > 1) {
		s->countdown--;
		return 0;
	}
	s->countdown = s->probe_every; /* a probe cut short by its deadline: the next one as usual */
	return s->ceiling_ns + copy_ns;
}

void wait_spin_end(struct wait_spin *s, uint64_t spun_ns, bool satisfied)
{
	if (s->fixed || spun_ns == 0)
		return;
	if (satisfied) {
		s->budget_ns = s->budget_ns == 0 || s->budget_ns > s->ceiling_ns / 2 ? s->ceiling_ns : 2 * s->budget_ns;
		s->probe_every = WAIT_PROBE_MIN;
	} else if (s->budget_ns == 0) {
		if (s->probe_every < WAIT_PROBE_MAX)
			s->probe_every *= 2;
	} else if ((s->budget_ns /= 2) < WAIT_SPIN_FLOOR_NS) {
		s->budget_ns = 0;
	}
	s->countdown = s->probe_every;
}

/* The spin of a wait: the peer is probably running on another core right
 * now.  Updates *now; the attempt's result, -EAGAIN when the spin ran out. */
static int spin_phase(wait_attempt_fn attempt, void *arg, struct wait_spin *spin, uint64_t spin_ns,
		      uint64_t start, uint64_t deadline, uint64_t *now)
{
	while (*now - start < spin_ns && *now < deadline) {
		for (int i = 0; i < 32; i++) {
			cpu_relax();
			int rc = attempt(arg, true);
			if (rc != -EAGAIN) {
				wait_spin_end(spin, spin_ns, true);
				return rc;
			}
		}
		*now = wait_now_ns();
	}
	/* Ran out, or its deadline cut it short after the ceiling: a wait
	 * whose timeout is shorter than its copy allowance would otherwise
	 * spin to its deadline each time, and never learn. */
	if (*now - start >= spin_ns || *now - start >= spin->ceiling_ns)
		wait_spin_end(spin, spin_ns, false);
	return -EAGAIN;
}

int wait_for(struct wait_line *wl, wait_attempt_fn attempt, void *arg, int timeout_ms, struct wait_spin *spin,
	     uint64_t bytes, _Atomic uint32_t *mark, uint32_t bit)
{
	/* The first attempt is the spin's first, unless it decides. */
	int rc = attempt(arg, timeout_ms != PINSHM_NONBLOCK && spin->budget_ns > 0);

	if (rc != -EAGAIN || timeout_ms == PINSHM_NONBLOCK)
		return rc;

	uint64_t spin_ns = wait_spin_begin(spin, bytes);
	uint64_t start = wait_now_ns();
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000000u;
	uint64_t now = start;

	rc = spin_phase(attempt, arg, spin, spin_ns, start, deadline, &now);
	if (rc != -EAGAIN)
		return rc;
	/* Yield: the peer may need this core (not when told to sleep at once). */
	for (int i = 0; spin_ns > 0 && i < YIELDS && now < deadline; i++) {
		sched_yield();
		rc = attempt(arg, false);
		if (rc != -EAGAIN)
			return rc;
		now = wait_now_ns();
	}
	/* Sleep, registered as a sleeper so that the peer wakes us. */
	for (;;) {
		if (now >= deadline) {
			rc = attempt(arg, false); /* the spin may have run out the time: one look at everything */
			return rc == -EAGAIN ? -ETIMEDOUT : rc;
		}
		wait_register(wl, mark, bit);
		uint32_t seq = atomic_load_explicit(&wl->seq, memory_order_acquire);
		rc = attempt(arg, false);
		if (rc == -EAGAIN) {
			uint64_t slice = (uint64_t)(can_membarrier ? WAIT_SLICE_MS : WAIT_SLICE_NO_MEMBARRIER_MS) * 1000000u;
			if (deadline - now < slice)
				slice = deadline - now;
			futex_wait(&wl->seq, seq, slice);
		}
		wait_unregister(wl, mark, bit);
		if (rc != -EAGAIN)
			return rc;
		rc = attempt(arg, false);
		if (rc != -EAGAIN)
			return rc;
		now = wait_now_ns();
	}
}
