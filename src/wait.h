/*
 * wait.h - waiting for a peer: spin, yield, then sleep on a shared futex.
 *
 * A waiter registers in a wait_line's `sleepers` (a seq_cst increment),
 * reads the futex word, checks its condition once more and only then
 * sleeps; the waker makes its change visible, then looks at `sleepers`.
 * Of the two, one always sees the other, so no wake-up is lost.  The waker
 * is the hot path, so where the kernel allows, it looks with a plain load
 * behind a compiler fence and the sleeper pays for both with membarrier(2)
 * after its increment (an asymmetric store-buffer litmus; see
 * wait_light_fences).  Elsewhere the waker looks with a read-modify-write
 * of `sleepers` (see wait_has_sleepers()).  Each sleep is bounded
 * (WAIT_SLICE_MS): a peer that corrupts the words costs a waiter latency,
 * never an endless sleep.
 */
#ifndef PINSHM_WAIT_H
#define PINSHM_WAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "layout.h"

#define WAIT_SLICE_MS 50

/* A handle's spin budget (struct wait_spin, channel.h, where handles
 * embed it): its bounds, and the functions that move it. */
struct wait_spin;

#define WAIT_SPIN_FLOOR_NS 2000u
#define WAIT_PROBE_MIN 16u
#define WAIT_PROBE_MAX 4096u
/* What an adaptive spin adds for each byte the peer copies before the
 * event (1 ns: a copy at 1 GB/s, slower than any this library has met),
 * and at most in all (a mebibyte's worth: longer copies pay a sleep). */
#define WAIT_SPIN_NS_PER_BYTE 1u
#define WAIT_SPIN_COPY_MAX_NS 1048576u

/** Fixed at @p ns, or adaptive up to a ceiling of @p ns. */
void wait_spin_init(struct wait_spin *s, uint64_t ns, bool fixed);
/** The spin of a wait that could not be satisfied at once (may be a probe),
 *  for an event that comes after the peer copied about @p bytes: an
 *  adaptive spin that is not 0 is longer by WAIT_SPIN_NS_PER_BYTE each, so
 *  that a peer busy copying a large message is not taken for one that is
 *  not running (the budget would fall to 0 and each message would pay a
 *  sleep and a wake-up). */
uint64_t wait_spin_begin(struct wait_spin *s, uint64_t bytes);
/** After a wait spun @p spun_ns (> 0): @p satisfied while spinning, or ran
 *  out (its own time, or its deadline after at least the ceiling). */
void wait_spin_end(struct wait_spin *s, uint64_t spun_ns, bool satisfied);

/* One attempt at the operation being waited for: 0 or an error to return,
 * -EAGAIN to keep waiting.  A @p quick attempt (one of the spin's) may
 * look at only part of what it waits on, as long as quick attempts in a
 * row look at all of it; one that decides to yield, sleep or give up never
 * is quick. */
typedef int (*wait_attempt_fn)(void *arg, bool quick);

/**
 * Call @p attempt until it returns anything but -EAGAIN or @p timeout_ms
 * (PINSHM_NONBLOCK, PINSHM_FOREVER or milliseconds) runs out: spin as
 * @p spin says for a peer that copies about @p bytes first
 * (wait_spin_begin()), and tell it how that went; yield a little, then
 * sleep on @p wl between attempts.
 * @return the attempt's result, -EAGAIN (non-blocking) or -ETIMEDOUT.
 */
int wait_for(struct wait_line *wl, wait_attempt_fn attempt, void *arg, int timeout_ms, struct wait_spin *spin,
	     uint64_t bytes, _Atomic uint32_t *mark, uint32_t bit);

/*
 * A sleeper is counted in its wait line's `sleepers` and marked in its own
 * endpoint's `sleeping` bits (counted first, marked second; unmarked first,
 * uncounted second), so that the reap of a process that died asleep takes
 * back its count: at worst a count leaks (wake-ups made for nobody), never
 * one too many is taken back (a wake-up missed).
 */
#define SLEEPING_DATA 1u  /* waiting for a message */
#define SLEEPING_SPACE 2u /* waiting for room */
#define SLEEPING_ARMED 4u /* armed on an eventfd: counted on the data line */

/** Count a sleeper on @p wl and mark it in @p mark; then the sleeper's barrier. */
void wait_register(struct wait_line *wl, _Atomic uint32_t *mark, uint32_t bit);
/** Undo wait_register(). */
void wait_unregister(struct wait_line *wl, _Atomic uint32_t *mark, uint32_t bit);
/** Take back the counts of a dead endpoint whose sleeping bits were @p marked. */
void wait_forget_dead(struct wait_line *data, struct wait_line *space, uint32_t marked);

/* Whether this process may use compiler-only fences on the waking side:
 * it is registered for membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), which a
 * sleeper issues instead, so the full barrier is paid only on the way to
 * sleep (an asymmetric Dekker).  Set by wait_init(). */
extern bool wait_light_fences;

/** Register this process for the asymmetric fences, once per process. */
void wait_init(void);

/** Whether @p wl has sleepers to wake, after a change they wait for. */
static inline bool wait_has_sleepers(struct wait_line *wl)
{
	if (__builtin_expect(wait_light_fences, 1)) {
		/* Pairs with the sleeper's seq_cst increment followed by its
		 * membarrier(), which acts as a full fence here too: either we
		 * see the sleeper or it sees our preceding stores. */
		atomic_signal_fence(memory_order_seq_cst);
		return atomic_load_explicit(&wl->sleepers, memory_order_relaxed) != 0;
	}
	/* Without membarrier: a seq_cst CAS of `sleepers` from 0 to 0, in place
	 * of a fence and a load.  If it fails, there are sleepers.  If it
	 * succeeds, it is an RMW that found none registered; every change of
	 * `sleepers` is an RMW too (wait.c), so a sleeper's later increment
	 * reads from our CAS or from an RMW after it (its release sequence):
	 * the increment synchronizes with our CAS, and the sleeper's check
	 * after it sees our preceding stores.  One locked instruction on x86,
	 * as the seq_cst fence was, and one that ThreadSanitizer models (it
	 * ignores fences). */
	uint32_t none = 0;
	return !atomic_compare_exchange_strong_explicit(&wl->sleepers, &none, 0, memory_order_seq_cst,
							memory_order_seq_cst);
}

void wait_wake_all(struct wait_line *wl);



uint64_t wait_now_ns(void);

/* CLOCK_MONOTONIC in milliseconds. */
static inline uint64_t wait_now_ms(void) { return wait_now_ns() / 1000000u; }

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

#endif /* PINSHM_WAIT_H */
