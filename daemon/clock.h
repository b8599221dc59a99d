/*
 * clock.h - pinshmd's clock for deadlines and ages: CLOCK_MONOTONIC in
 * milliseconds.
 */
#ifndef PINSHMD_CLOCK_H
#define PINSHMD_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#endif /* PINSHMD_CLOCK_H */
