/*
 * timers.c - the daemon's list of timers (timers.h).
 */
#include <errno.h>
#include <limits.h>

#include "timers.h"

int timers_add(struct timers *ts, const char *name, timer_when_fn *when, timer_fire_fn *fire, void *arg)
{
	if (ts->n == TIMERS_MAX)
		return -ENOSPC;
	ts->t[ts->n++] = (struct timer){.name = name, .when = when, .fire = fire, .arg = arg};
	return 0;
}

void timers_due(struct timers *ts, uint64_t now)
{
	for (unsigned i = 0; i < ts->n; i++) {
		uint64_t due = ts->t[i].when(ts->t[i].arg);
		if (due && due <= now)
			ts->t[i].fire(ts->t[i].arg, now);
	}
}

int timers_next(const struct timers *ts, uint64_t now)
{
	uint64_t first = 0;

	for (unsigned i = 0; i < ts->n; i++) {
		uint64_t due = ts->t[i].when(ts->t[i].arg);
		if (due && (!first || due < first))
			first = due;
	}
	if (!first)
		return -1;
	if (first <= now)
		return 0;
	return first - now > INT_MAX ? INT_MAX : (int)(first - now);
}
