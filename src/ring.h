/*
 * ring.h - what the producing (produce.c), consuming (consume.c) and
 * shared-queue (queue.c) parts of the data path share: records, lanes,
 * and a consumer's taken record (private).
 *
 * Memory ordering, edge by edge (each function names its partner):
 * - producer -> consumer: payload, len and seq are written first, the
 *   record's commit word last with a release store (produce.c
 *   publish_record()); a consumer's acquire load of the commit word
 *   (consume.c take_sequential_lane(), take_committed(); queue.c
 *   shared_read()) makes them visible.
 * - consumer -> producer: a consumer that is done with records publishes a
 *   position (lane free index, or its topic cursor) with a release store
 *   (consume.c sequential_release_lane()), or, sharing a queue, advances
 *   `free` with seq_cst CAS (queue.c shared_advance_free()); the producer's
 *   acquire load of it (produce.c producer_refresh_limit()) means no
 *   consumer still reads what it overwrites.
 * - sleepers: see wait.h (on the waking side a compiler fence that the
 *   sleeper's membarrier(2) completes, or a seq_cst RMW of `sleepers`).
 * - store-buffer litmus (a store, then a load of another word, on each
 *   side): the back-pressure publisher (producer_refresh_limit() against
 *   consume.c consumer_start()) and the shared queue's release scan
 *   (queue.c queue_release() against shared_advance_free()) use seq_cst
 *   RMWs and loads of the words themselves, not a seq_cst fence, so that
 *   ThreadSanitizer, which ignores fences, models their side too.
 *
 * Every value read from the segment is checked before it is used to
 * address memory: records must lie inside the ring, lengths within
 * max_message, positions within one capacity of each other.  A violation
 * makes the handle fail with -EBADMSG.
 */
#ifndef PINSHM_RING_H
#define PINSHM_RING_H

#include <errno.h>

#include "channel.h"

#define HEADROOM PINSHM_RECORD_HEADER

static inline struct record_header *rec_at(uint8_t *ring, uint64_t capacity, uint64_t pos)
{
	return (struct record_header *)(ring + (pos & (capacity - 1)));
}

static inline uint8_t *lane_ring(pinshm_channel_t *ch, unsigned lane) { return seg_ring(&ch->g, ch->base, lane); }
static inline struct lane_header *lane_hdr(pinshm_channel_t *ch, unsigned lane) { return seg_lane(&ch->g, ch->base, lane); }
static inline bool is_overrun(const pinshm_channel_t *ch) { return ch->g.flags & PINSHM_OVERRUN; }

/*
 * The size a ready record at @p pos takes, from its state word @p word and
 * length @p len, or 0 if they are impossible.  Padding runs exactly to the
 * end of the ring; a message fits before it and respects max_message.
 */
static inline uint64_t rec_extent(const struct seg_geometry *g, uint64_t word, uint64_t pos, uint32_t len)
{
	uint64_t off = pos & (g->capacity - 1);

	if (rec_state(word) == REC_PADDING)
		return off + PINSHM_RECORD_HEADER + len == g->capacity ? g->capacity - off : 0;
	if (len > g->max_message || off + rec_size(len) > g->capacity)
		return 0;
	return rec_size(len);
}

static inline bool pos_aligned(uint64_t pos) { return (pos & (PINSHM_RECORD_ALIGN - 1)) == 0; }

/* A record taken by a consumer. */
struct taken {
	unsigned lane;
	uint64_t pos, end;
	const uint8_t *data;
	uint32_t len;
	uint64_t lost;
};

static inline unsigned consumer_index(const pinshm_channel_t *ch) { return ch->endpoint - ch->g.max_producers; }

static inline int corrupt_record(pinshm_channel_t *ch, unsigned lane, uint64_t pos)
{
	return channel_fail(ch, -EBADMSG, "lane %u: impossible record at position %llu", lane,
			    (unsigned long long)pos);
}

/* queue.c: consumers of a shared queue (CONSUME_SHARED). */
/** Claim the first unclaimed record of @p lane (unless @p peek): as
 *  consume.c take_sequential_lane(), for a shared queue. */
int queue_take(pinshm_channel_t *ch, unsigned lane, struct taken *t, size_t max_len, bool peek);
/** Mark the record at @p pos of @p lane, claimed by this handle, done, and
 *  move `free` past the records done.  @return 0, -EBADMSG. */
int queue_release(pinshm_channel_t *ch, unsigned lane, uint64_t pos);

#endif /* PINSHM_RING_H */
