/*
 * idle.h - working-set pinning (registry.h): a channel created with a
 * pin_idle of N seconds whose segment shows no activity for N seconds is
 * unlocked, and locked again when the scan sees it used, at an OPEN, a
 * RELOCK or a device registration.  Activity: a change of the messages
 * committed, the queue room given back, or the endpoint changes, all read
 * from the segment (a client could fake activity, or hide it: that costs
 * only its own channel's pinning).  A channel a device may use by DMA
 * (devices.h) stays locked.
 */
#ifndef PINSHMD_IDLE_H
#define PINSHMD_IDLE_H

#include <stddef.h>
#include <stdint.h>

#include "registry.h"

#define IDLE_SCAN_MS 250u /* how often idle_scan() looks at the channels */

/** Lock @p chan's segment again (logged, @p reason in the log line); its idle
 *  time starts afresh.  @return 0 or as segment_relock(). */
int idle_relock(struct channel *chan, const char *reason);

/** Lock @p chan again if it was unlocked for want of use, as asked by a
 *  client.  @return 0, or as segment_relock() with @p why. */
int idle_relock_asked(struct channel *chan, char *why, size_t whylen);

/** Every REGISTRY_TICK_MS: look at the channels of @p r with a pin_idle:
 *  unlock those idle for that long, lock again those used since.  @p now:
 *  CLOCK_MONOTONIC ms. */
void idle_scan(struct registry *r, uint64_t now);

#endif /* PINSHMD_IDLE_H */
