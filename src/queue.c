/*
 * queue.c - consumers of a shared queue: records claimed, scanned for from
 * `free`, released, `free` advanced past the records done, and a dead
 * consumer's claims handed back (memory ordering: ring.h).
 */
#include <errno.h>

#include "ring.h"

/*
 * Read the record at @p pos of a shared queue's lane, which other consumers
 * move through too: once `free` passes a record, the producer may rewrite
 * its bytes under us - with a new record there, or with payload that covers
 * its header, in any order the copy stores them.  So after the length, `free`
 * is read again behind an acquire fence that pairs with the release fence a
 * producer issues after it read `free` and before it writes into the room
 * (reserve_attempt()): if we read new bytes, we see the `free` that let the
 * producer write them.  A record still at or after `free` cannot have been
 * reused; the word is compared too, for another consumer's claim or release.
 * The word is first read seq_cst (on x86 the same plain load as acquire):
 * shared_advance_free() needs it so.
 * @return 1 (ready: *word, *len, *size set), 0 (not ready), -EAGAIN (it
 * changed or may have been reused: look again from `free`), -EBADMSG
 * (impossible record).
 */
static int shared_read(const struct seg_geometry *g, uint8_t *ring, _Atomic uint64_t *free, uint64_t pos,
		       uint64_t *word, uint32_t *len, uint64_t *size)
{
	struct record_header *rec = rec_at(ring, g->capacity, pos);

	*word = atomic_load_explicit(&rec->commit, memory_order_seq_cst);
	if (!rec_ready(*word, pos))
		return 0;
	*len = atomic_load_explicit(&rec->len, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(free, memory_order_relaxed) > pos ||
	    atomic_load_explicit(&rec->commit, memory_order_relaxed) != *word)
		return -EAGAIN;
	*size = rec_extent(g, *word, pos, *len);
	return *size != 0 ? 1 : -EBADMSG;
}

/* Restarts of a shared scan before it reports an empty lane. */
#define SHARED_RESTARTS 64

/* Shared queue consumers: claim the first unclaimed record of @p lane,
 * scanning from `free` (everything before it is done) over the records
 * that other consumers hold.  Starting there, not at a hint further on,
 * also finds the records that a reap handed back. */
int queue_take(pinshm_channel_t *ch, unsigned lane, struct taken *t, size_t max_len, bool peek)
{
	uint64_t cap = ch->g.capacity;
	uint8_t *ring = lane_ring(ch, lane);
	_Atomic uint64_t *free = &lane_hdr(ch, lane)->free;
	uint64_t pos = atomic_load_explicit(free, memory_order_acquire);
	unsigned restarts = 0;

	for (uint64_t scanned = 0;;) {
		uint64_t word, size;
		uint32_t len;

		if (scanned > cap) {
			/* Other consumers move `free` while we scan: a ring's worth
			 * of records behind us is no damage unless we are more
			 * than a ring ahead of `free`. */
			if (pos - atomic_load_explicit(free, memory_order_acquire) > cap)
				return corrupt_record(ch, lane, pos);
			if (restarts++ >= SHARED_RESTARTS)
				return -EAGAIN;
			scanned = 0;
		}
		if (!pos_aligned(pos))
			return corrupt_record(ch, lane, pos);
		int rc = shared_read(&ch->g, ring, free, pos, &word, &len, &size);
		if (rc == -EAGAIN || rc == 0) {
			/* Changed, or not ready: look again from `free` if it
			 * passed us meanwhile, else here; not ready is the end. */
			uint64_t now = atomic_load_explicit(free, memory_order_acquire);
			if ((rc == -EAGAIN || now > pos) && restarts++ < SHARED_RESTARTS) {
				if (now > pos) {
					pos = now;
					scanned = 0;
				}
				continue;
			}
			return -EAGAIN;
		}
		if (rc < 0)
			return corrupt_record(ch, lane, pos);
		switch (rec_state(word)) {
		case REC_COMMITTED: {
			if (len > max_len) {
				t->len = len;
				return -EMSGSIZE;
			}
			if (peek)
				return 0;
			struct record_header *rec = rec_at(ring, cap, pos);
			if (!atomic_compare_exchange_strong_explicit(&rec->commit, &word,
								     rec_word(pos, consumer_index(ch), REC_CLAIMED),
								     memory_order_acq_rel, memory_order_acquire)) {
				if (restarts++ < SHARED_RESTARTS)
					continue; /* someone else took it: look again */
				return -EAGAIN;
			}
			*t = (struct taken){ lane, pos, pos + size, (uint8_t *)rec + PINSHM_RECORD_HEADER, len, 0 };
			return 0;
		}
		case REC_PADDING:
		case REC_CLAIMED:
		case REC_DONE:
			pos += size;
			scanned += size;
			continue;
		default:
			return corrupt_record(ch, lane, pos);
		}
	}
}
/* Shared queue: room before `free` is reusable once every record before it
 * is done; whoever finds the oldest records done moves `free` past them.
 * Each consumer stores its DONE with a seq_cst CAS (queue_release()), then
 * reads the words here seq_cst (shared_read()) and moves `free` with seq_cst
 * loads and CAS: all in one total order, so of two consumers that finish at
 * once, at least one sees the other's DONE (store-buffer litmus), and the
 * last one to finish always moves `free` past both. */
static int shared_advance_free(const struct seg_geometry *g, void *base, unsigned lane)
{
	uint64_t cap = g->capacity;
	uint8_t *ring = seg_ring(g, base, lane);
	struct lane_header *lh = seg_lane(g, base, lane);
	uint64_t free = atomic_load_explicit(&lh->free, memory_order_seq_cst);
	unsigned restarts = 0;

	for (uint64_t scanned = 0; scanned <= cap;) {
		uint64_t word, size;
		uint32_t len;

		if (!pos_aligned(free))
			return -EBADMSG;
		int rc = shared_read(g, ring, &lh->free, free, &word, &len, &size);
		if (rc == -EAGAIN || (rc == -EBADMSG && atomic_load_explicit(&lh->free, memory_order_acquire) != free)) {
			/* Another consumer moved on: follow it.  Whoever moved
			 * `free` also goes on advancing it, so giving up after
			 * a while loses nothing. */
			if (restarts++ >= SHARED_RESTARTS)
				return 0;
			free = atomic_load_explicit(&lh->free, memory_order_seq_cst);
			continue;
		}
		if (rc < 0)
			return rc;
		if (rc == 0 || (rec_state(word) != REC_DONE && rec_state(word) != REC_PADDING))
			return 0;
		uint64_t expected = free;
		if (atomic_compare_exchange_strong_explicit(&lh->free, &expected, free + size, memory_order_seq_cst,
							    memory_order_seq_cst)) {
			free += size;
			scanned += size;
		} else {
			free = expected;
		}
	}
	return 0; /* a ring's worth moved: others finishing go on from here */
}
int queue_release(pinshm_channel_t *ch, unsigned lane, uint64_t pos)
{
	struct record_header *rec = rec_at(lane_ring(ch, lane), ch->g.capacity, pos);
	uint64_t claimed = rec_word(pos, consumer_index(ch), REC_CLAIMED);
	if (!atomic_compare_exchange_strong_explicit(&rec->commit, &claimed, rec_word(pos, consumer_index(ch), REC_DONE),
						     memory_order_seq_cst, memory_order_relaxed))
		return channel_fail(ch, -EBADMSG, "lane %u: a record this consumer held was changed", lane);
	if (shared_advance_free(&ch->g, ch->base, lane) != 0)
		return corrupt_record(ch, lane, pos);
	return 0;
}

/* Hand back the records that dead consumer @p owner had claimed, and move
 * each lane's `free` past the records done. */
int ring_unclaim_owner(const struct seg_geometry *g, void *base, unsigned owner)
{
	uint64_t cap = g->capacity;

	for (unsigned lane = 0; lane < g->max_producers; lane++) {
		uint8_t *ring = seg_ring(g, base, lane);
		_Atomic uint64_t *free = &seg_lane(g, base, lane)->free;
		uint64_t pos = atomic_load_explicit(free, memory_order_acquire);
		unsigned restarts = 0;

		for (uint64_t scanned = 0; scanned < cap;) {
			uint64_t word, size;
			uint32_t len;

			if (!pos_aligned(pos))
				return -EBADMSG;
			int rc = shared_read(g, ring, free, pos, &word, &len, &size);
			if (rc == -EAGAIN || rc == 0 || rc == -EBADMSG) {
				uint64_t now = atomic_load_explicit(free, memory_order_acquire);
				if ((rc == -EAGAIN || now > pos) && restarts++ < SHARED_RESTARTS) {
					if (now > pos) {
						pos = now;
						scanned = 0;
					}
					continue;
				}
				if (rc == 0)
					break;
				return -EBADMSG; /* impossible, or changing without end */
			}
			if (rec_state(word) == REC_CLAIMED && rec_owner(word) == owner)
				atomic_compare_exchange_strong_explicit(&rec_at(ring, cap, pos)->commit, &word,
									rec_word(pos, 0, REC_COMMITTED),
									memory_order_release, memory_order_relaxed);
			pos += size;
			scanned += size;
		}
		/* The consumer may have died between marking a record DONE and
		 * moving `free` past it: move it as it would have, or a full ring
		 * whose other records are done too would hold its producer for
		 * ever, with nothing left for the other consumers to release. */
		int rc = shared_advance_free(g, base, lane);
		if (rc != 0)
			return rc;
	}
	return 0;
}
