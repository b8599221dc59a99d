/*
 * seg.h - a channel segment's geometry, format, and its endpoints' claim
 * and reap: what both the daemon and a process's handle do to a segment
 * (the layout itself: layout.h).
 *
 * Nothing here keeps state: each call gets the geometry (computed from the
 * attributes, or read once from the segment's header and checked) and the
 * segment's base in the caller's mapping.  The daemon passes its own record
 * of the geometry, never one read back from the segment.
 */
#ifndef PINSHM_SEG_H
#define PINSHM_SEG_H

#include <stdbool.h>
#include <stdint.h>

#include "layout.h"
#include "pinshm.h"

/** The geometry of a segment made with @p attr.  @return 0, -EINVAL. */
int seg_geometry_compute(const pinshm_channel_attr_t *attr, struct seg_geometry *g);
/** The geometry that the header at @p base declares, checked against the
 *  @p size mapped.  @return 0, -EPROTO (not a segment of this layout
 *  version), -EBADMSG (impossible geometry). */
int seg_geometry_read(const void *base, size_t size, struct seg_geometry *g);

/* Where things lie in a segment of geometry @p g mapped at @p base. */
static inline struct lane_header *seg_lane(const struct seg_geometry *g, void *base, unsigned lane)
{
	return (struct lane_header *)((uint8_t *)base + g->lanes_off + lane * g->lane_stride);
}

static inline uint8_t *seg_ring(const struct seg_geometry *g, void *base, unsigned lane)
{
	return (uint8_t *)seg_lane(g, base, lane) + sizeof(struct lane_header);
}

static inline struct endpoint *seg_endpoint(const struct seg_geometry *g, void *base, unsigned endpoint)
{
	return (struct endpoint *)((uint8_t *)base + g->endpoints_off) + endpoint;
}

static inline _Atomic uint64_t *seg_cursor(const struct seg_geometry *g, void *base, unsigned consumer,
					   unsigned lane)
{
	return (_Atomic uint64_t *)((uint8_t *)base + g->cursors_off) + consumer * g->cursor_stride + lane;
}

/** Take the first endpoint of [@p first, @p first + @p n) that nobody
 *  holds, for process @p pid: active (seq_cst CAS, so that a back-pressure
 *  publisher sees it: produce.c producer_refresh_limit()), generation bumped.
 *  The caller then calls seg_endpoints_changed().  @return its number or
 *  -EBUSY. */
int seg_endpoint_take(const struct seg_geometry *g, void *base, unsigned first, unsigned n, uint32_t pid);
/** An endpoint came or went: count it (seq_cst) and wake every waiter so
 *  that it looks again. */
void seg_endpoints_changed(struct seg_header *h);
/** A topic subscriber @p endpoint leaves: its cursors no longer hold
 *  publishers back, and its successor starts from unset ones.  Nothing on
 *  a queue or for a producer. */
void seg_topic_cursors_unset(const struct seg_geometry *g, void *base, unsigned endpoint);

/*
 * Endpoints handed out by the daemon: pinshmd claims one in its own mapping
 * (seg_endpoint_take() on an endpoint no connection holds, registry.c),
 * sends the descriptor and the endpoint's number, and the client attaches
 * to exactly that one (channel.h channel_attach_claimed).
 */
/** pinshm_segment_reap() with geometry @p g, the daemon's own record of the
 *  segment (never read back from it).  @return 0, -EINVAL (@p endpoint out
 *  of range, or not attached), -EBADMSG. */
int seg_endpoint_reap(const struct seg_geometry *g, void *base, unsigned endpoint);

/** Where seg_endpoint_reap_step() goes on: {0} to begin. */
struct unclaim_cursor {
	unsigned lane;    /* the lane scanned now */
	uint64_t pos;     /* where in it, 0: from its `free` */
	uint64_t scanned; /* bytes of its lap scanned so far */
};

/** seg_endpoint_reap() in steps: each scans about @p bytes of the rings
 *  for a shared queue's dead consumer's claims (the endpoint stays
 *  attached meanwhile).  @return 1: call again with @p cur; else as
 *  seg_endpoint_reap(). */
int seg_endpoint_reap_step(const struct seg_geometry *g, void *base, unsigned endpoint, struct unclaim_cursor *cur,
			   uint64_t bytes);

/* queue.c: the shared queue's part of a reap. */
/** Hand back the records that dead consumer @p owner of a shared queue had
 *  claimed, and move each lane's `free` past the records done.
 *  @return 0, -EBADMSG. */
int ring_unclaim_owner(const struct seg_geometry *g, void *base, unsigned owner);
/** ring_unclaim_owner() in steps of about @p bytes scanned, from @p cur.
 *  @return 1 (call again), 0 (done), -EBADMSG. */
int ring_unclaim_step(const struct seg_geometry *g, void *base, unsigned owner, struct unclaim_cursor *cur,
		      uint64_t bytes);

#endif /* PINSHM_SEG_H */
