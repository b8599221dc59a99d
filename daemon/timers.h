/*
 * timers.h - the daemon's periodic and deferred work (a grace that ends,
 * removals from the descriptor store sent again, the idle scan, the tick
 * of watched processes, silent connections, accepting resumed), as a short
 * list the event loop runs: each timer says when it is next due (its
 * owner keeps that state, and may change it at any time) and what to do
 * then.  The loop fires those due, then waits in epoll until the earliest
 * deadline (timers_next()).
 */
#ifndef PINSHMD_TIMERS_H
#define PINSHMD_TIMERS_H

#include <stdint.h>

#define TIMERS_MAX 8u

/** When the timer is next due, CLOCK_MONOTONIC ms; 0: not armed. */
typedef uint64_t timer_when_fn(void *arg);
/** Its work, once due (@p now: CLOCK_MONOTONIC ms); it moves or disarms its deadline. */
typedef void timer_fire_fn(void *arg, uint64_t now);

struct timers {
	struct timer {
		const char *name; /* for the reader */
		timer_when_fn *when;
		timer_fire_fn *fire;
		void *arg;
	} t[TIMERS_MAX];
	unsigned n;
};

/** Add a timer to @p ts.  @return 0, or -ENOSPC (TIMERS_MAX of them). */
int timers_add(struct timers *ts, const char *name, timer_when_fn *when, timer_fire_fn *fire, void *arg);

/** Fire every timer of @p ts due at @p now, in the order they were added. */
void timers_due(struct timers *ts, uint64_t now);

/** @return the ms from @p now to the earliest deadline of @p ts (0: one is
 *  due), or -1: none is armed.  For epoll_wait(). */
int timers_next(const struct timers *ts, uint64_t now);

#endif /* PINSHMD_TIMERS_H */
