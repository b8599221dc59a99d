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
 * (produce.c reserve_attempt()): if we read new bytes, we see the `free` that let the
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

/* A shared scan's visitor returns SCAN_PAST (go on past the record),
 * SCAN_AGAIN (it changed under us: read it again, as a restart) or the
 * scan's result; the scan itself may end with the other three. */
#define SCAN_PAST 1
#define SCAN_AGAIN 2
#define SCAN_END 3  /* not ready: the end of what is committed */
#define SCAN_BUSY 4 /* changing through SHARED_RESTARTS restarts */
#define SCAN_LAP 5  /* a ring's worth scanned (one_lap) */

struct shared_scan {
	const struct seg_geometry *g;
	uint8_t *ring;
	_Atomic uint64_t *free;
	uint64_t pos; /* the record looked at (where the scan ended); one_lap: where it starts, if past `free` */
	unsigned restarts;
	uint64_t lap; /* one_lap: the bytes it scans at most (a ring's worth, or less) */
};

typedef int (*scan_visit_fn)(struct shared_scan *s, void *arg, uint64_t word, uint32_t len, uint64_t size);

/* No ready record could be read at s->pos (@p rc from shared_read()): go on
 * from `free` if it passed us meanwhile, or here if the record changed, at
 * most SHARED_RESTARTS times.  @return whether to look again. */
static inline bool scan_follow_free(struct shared_scan *s, int rc, uint64_t *scanned)
{
	uint64_t now = atomic_load_explicit(s->free, memory_order_acquire);

	if ((rc == -EAGAIN || now > s->pos) && s->restarts++ < SHARED_RESTARTS) {
		if (now > s->pos) {
			s->pos = now;
			*scanned = 0;
		}
		return true;
	}
	return false;
}

/*
 * Walk the ready records of a shared queue's lane from `free` (everything
 * before it is done), @p visit called for each.  @p one_lap: from s->pos
 * where that is past `free` (a scan that goes on), and end after s->lap
 * bytes (SCAN_LAP, at most a ring's worth); else other consumers moving `free` while we
 * scan explain a ring's worth behind us (a restart), unless we are more
 * than a ring ahead of `free` (damage).  @p follow_damage: an impossible
 * record is looked past as a changed one if `free` passed it; else it is
 * damage at once.  @return the visitor's result, SCAN_END, SCAN_BUSY,
 * SCAN_LAP, -EBADMSG (s->pos: the record).
 */
static inline __attribute__((always_inline)) int shared_scan(struct shared_scan *s, bool one_lap, bool follow_damage,
							     scan_visit_fn visit, void *arg)
{
	uint64_t cap = s->g->capacity, from = atomic_load_explicit(s->free, memory_order_acquire);

	s->pos = one_lap && s->pos > from ? s->pos : from;
	s->restarts = 0;
	for (uint64_t scanned = 0;;) {
		uint64_t word, size;
		uint32_t len;

		if (one_lap && scanned >= s->lap)
			return SCAN_LAP;
		if (!one_lap && scanned > cap) {
			if (s->pos - atomic_load_explicit(s->free, memory_order_acquire) > cap)
				return -EBADMSG;
			if (s->restarts++ >= SHARED_RESTARTS)
				return SCAN_BUSY;
			scanned = 0;
		}
		if (!pos_aligned(s->pos))
			return -EBADMSG;
		int rc = shared_read(s->g, s->ring, s->free, s->pos, &word, &len, &size);
		if (rc != 1) {
			if ((rc != -EBADMSG || follow_damage) && scan_follow_free(s, rc, &scanned))
				continue;
			return rc == 0 ? SCAN_END : rc == -EAGAIN ? SCAN_BUSY : -EBADMSG;
		}
		rc = visit(s, arg, word, len, size);
		if (rc == SCAN_PAST) {
			s->pos += size;
			scanned += size;
		} else if (rc != SCAN_AGAIN) {
			return rc;
		} else if (s->restarts++ >= SHARED_RESTARTS) {
			return SCAN_BUSY;
		}
	}
}

struct claim_args {
	pinshm_channel_t *ch;
	unsigned lane;
	struct taken *t;
	size_t max_len;
	bool peek;
};

/* queue_take()'s visitor: claim the first committed record (acq_rel CAS;
 * its partner: the producer's release store of the word, or a reap's hand
 * back, ring_unclaim_owner()), past those that others hold. */
static int claim_visit(struct shared_scan *s, void *arg, uint64_t word, uint32_t len, uint64_t size)
{
	struct claim_args *a = arg;

	switch (rec_state(word)) {
	case REC_COMMITTED: {
		if (len > a->max_len) {
			a->t->len = len;
			return -EMSGSIZE;
		}
		if (a->peek)
			return 0;
		struct record_header *rec = rec_at(s->ring, s->g->capacity, s->pos);
		if (!atomic_compare_exchange_strong_explicit(&rec->commit, &word,
							     rec_word(s->pos, consumer_index(a->ch), REC_CLAIMED),
							     memory_order_acq_rel, memory_order_acquire))
			return SCAN_AGAIN; /* someone else took it: look again */
		*a->t = (struct taken){ a->lane, s->pos, s->pos + size, (uint8_t *)rec + PINSHM_RECORD_HEADER, len, 0 };
		return 0;
	}
	case REC_PADDING:
	case REC_CLAIMED:
	case REC_DONE:
		return SCAN_PAST;
	default:
		return -EBADMSG;
	}
}

/* Claim the first unclaimed record of @p lane, scanning from `free` over
 * the records that other consumers hold.  Starting there, not at a hint
 * further on, also finds the records that a reap handed back. */
int queue_take(pinshm_channel_t *ch, unsigned lane, struct taken *t, size_t max_len, bool peek)
{
	struct shared_scan s = { &ch->g, lane_ring(ch, lane), &lane_hdr(ch, lane)->free, 0, 0, 0 };
	struct claim_args a = { ch, lane, t, max_len, peek };
	int rc = shared_scan(&s, false, false, claim_visit, &a);

	if (rc == SCAN_END || rc == SCAN_BUSY)
		return -EAGAIN;
	return rc == -EBADMSG ? corrupt_record(ch, lane, s.pos) : rc;
}

/* Shared queue: room before `free` is reusable once every record before it
 * is done; whoever finds the oldest records done moves `free` past them.
 * Each consumer stores its DONE with a seq_cst CAS (queue_release()), then
 * reads the words here seq_cst (shared_read()) and moves `free` with seq_cst
 * loads and CAS: all in one total order, so of two consumers that finish at
 * once, at least one sees the other's DONE (store-buffer litmus), and the
 * last one to finish always moves `free` past both.  The CAS that moves
 * `free` also releases the room to the producer (its partner: the acquire
 * load of `free` in produce.c producer_refresh_limit()). */
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
	/* seq_cst: its partner is the seq_cst read of the word by another
	 * consumer's shared_advance_free() (shared_read()). */
	if (!atomic_compare_exchange_strong_explicit(&rec->commit, &claimed, rec_word(pos, consumer_index(ch), REC_DONE),
						     memory_order_seq_cst, memory_order_relaxed))
		return channel_fail(ch, -EBADMSG, "lane %u: a record this consumer held was changed", lane);
	if (shared_advance_free(&ch->g, ch->base, lane) != 0)
		return corrupt_record(ch, lane, pos);
	return 0;
}

/* ring_unclaim_owner()'s visitor: a record that the dead consumer
 * (@p arg) claimed is committed again (release CAS; its partner: the
 * acquire of claim_visit()'s CAS). */
static int unclaim_visit(struct shared_scan *s, void *arg, uint64_t word, uint32_t len, uint64_t size)
{
	(void)len;
	(void)size;
	if (rec_state(word) == REC_CLAIMED && rec_owner(word) == *(const unsigned *)arg)
		atomic_compare_exchange_strong_explicit(&rec_at(s->ring, s->g->capacity, s->pos)->commit, &word,
							rec_word(s->pos, 0, REC_COMMITTED), memory_order_release,
							memory_order_relaxed);
	return SCAN_PAST;
}

int ring_unclaim_step(const struct seg_geometry *g, void *base, unsigned owner, struct unclaim_cursor *cur,
		      uint64_t bytes)
{
	for (; cur->lane < g->max_producers; *cur = (struct unclaim_cursor){.lane = cur->lane + 1}) {
		_Atomic uint64_t *free = &seg_lane(g, base, cur->lane)->free;
		uint64_t from = atomic_load_explicit(free, memory_order_acquire);
		if (cur->pos != 0 && from > cur->pos) {
			/* Every record behind `free` is done (it never passes one
			 * claimed): those bytes count as scanned, and the scan ends
			 * a lap past where it began, which holds every record the
			 * dead consumer can have claimed.  Counted again from each
			 * new `free`, the lap would not end while the others keep
			 * moving it. */
			uint64_t skipped = from - cur->pos, left = g->capacity - cur->scanned;
			cur->scanned += skipped < left ? skipped : left;
		} else if (cur->pos != 0) {
			from = cur->pos;
		}
		uint64_t lap = g->capacity - cur->scanned;
		bool last = lap <= bytes;
		struct shared_scan s = { g, seg_ring(g, base, cur->lane), free, cur->pos, 0, last ? lap : bytes };
		int rc = shared_scan(&s, true, true, unclaim_visit, &owner);
		if (rc != SCAN_END && rc != SCAN_LAP)
			return -EBADMSG; /* impossible, or changing without end */
		if (rc == SCAN_LAP && !last) {
			cur->pos = s.pos;
			cur->scanned += bytes;
			return 1;
		}
		uint64_t spent = (s.pos > from ? s.pos - from : 0) + sizeof(struct record_header); /* a lane costs some */
		bytes -= spent < bytes ? spent : bytes;
		/* The consumer may have died between marking a record DONE and
		 * moving `free` past it: move it as it would have, or a full ring
		 * whose other records are done too would hold its producer for
		 * ever, with nothing left for the other consumers to release. */
		rc = shared_advance_free(g, base, cur->lane);
		if (rc != 0)
			return rc;
		if (bytes == 0 && cur->lane + 1 < g->max_producers) {
			*cur = (struct unclaim_cursor){.lane = cur->lane + 1};
			return 1;
		}
	}
	return 0;
}

int ring_unclaim_owner(const struct seg_geometry *g, void *base, unsigned owner)
{
	struct unclaim_cursor cur = {0};

	return ring_unclaim_step(g, base, owner, &cur, UINT64_MAX);
}
