/*
 * idle.h - working-set pinning (registry.h): a channel created with a
 * pin_idle of N seconds whose segment shows no activity for N seconds is
 * unlocked, and locked again when the scan sees it used, at an OPEN, a
 * RELOCK or a device registration; both a slice a loop turn (locking.h).  Activity: a change of the messages
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

/** Start locking @p chan's segment again if it is unlocked (or being
 *  unlocked), a slice a turn through @p r's locking queue (locking.h),
 *  for @p reason (a static string, in the log line at its end, which
 *  starts its idle time afresh).  @return 0: locked; 1: being locked. */
int idle_relock(struct registry *r, struct channel *chan, const char *reason);

/** Lock @p chan again if it was unlocked for want of use, as asked by a
 *  client: its first slice at once, the rest a slice a turn through @p q.
 *  @return 0 (locked), -EINPROGRESS (being locked, @p why: the reply
 *  waits for its end, request_relocked()), or as segment_relock_step()
 *  with @p why (it stays unlocked). */
int idle_relock_asked(struct locking *q, struct channel *chan, char *why, size_t whylen);

/** Every REGISTRY_TICK_MS: look at the channels of @p r with a pin_idle:
 *  start unlocking those idle for that long, and locking again those used
 *  since (locking.h: a slice a turn, never a whole segment in one).
 *  @p now: CLOCK_MONOTONIC ms. */
void idle_scan(struct registry *r, uint64_t now);
#endif /* PINSHMD_IDLE_H */
