/*
 * ring.c - the data path: records into and out of the lanes of a channel.
 *
 * Memory ordering, edge by edge:
 * - producer -> consumer: payload, len and seq are written first, the
 *   record's commit word last with a release store; a consumer's acquire
 *   load of the commit word makes them visible.
 * - consumer -> producer: a consumer that is done with records publishes a
 *   position (lane free index, or its topic cursor) with a release store,
 *   or, sharing a queue, advances `free` with seq_cst CAS; the producer's
 *   acquire load of it means no consumer still reads what it overwrites.
 * - sleepers: see wait.h (on the waking side a compiler fence that the
 *   sleeper's membarrier(2) completes, or a seq_cst RMW of `sleepers`).
 * - store-buffer litmus (a store, then a load of another word, on each
 *   side): the back-pressure publisher and the shared queue's release scan
 *   use seq_cst RMWs and loads of the words themselves, not a seq_cst fence,
 *   so that ThreadSanitizer, which ignores fences, models their side too.
 *
 * Every value read from the segment is checked before it is used to
 * address memory: records must lie inside the ring, lengths within
 * max_message, positions within one capacity of each other.  A violation
 * makes the handle fail with -EBADMSG.
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "channel.h"
#include "wait.h"

#define HEADROOM PINSHM_RECORD_HEADER
#define ZERO_NEXT_NONE UINT64_MAX /* no word zeroed ahead (zero_ahead()) */

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
static uint64_t rec_extent(const struct seg_geometry *g, uint64_t word, uint64_t pos, uint32_t len)
{
	uint64_t off = pos & (g->capacity - 1);

	if (rec_state(word) == REC_PADDING)
		return off + PINSHM_RECORD_HEADER + len == g->capacity ? g->capacity - off : 0;
	if (len > g->max_message || off + rec_size(len) > g->capacity)
		return 0;
	return rec_size(len);
}

static inline bool pos_aligned(uint64_t pos) { return (pos & (PINSHM_RECORD_ALIGN - 1)) == 0; }

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

/* ---- producer ------------------------------------------------------------ */

/* The steps of a send (reserve, reserve_attempt, stage_reserved,
 * publish_record, commit_reserved, producer_publish, producer_wake) are
 * always inlined into the calls that make them: left to itself, GCC (LTO)
 * called each.  On one core, a reserve, commit, receive in place and
 * release: 604 -> 555 instructions (callgrind); a send and a receive:
 * 22.5-25.4 -> 19.0-20.8 ns.  MPI one-way latency: see the commit.
 * Not reserve_attempt() in the ThreadSanitizer build: TSan ignores its
 * fence either way, and GCC warns (-Wtsan) about each copy inlined. */
#ifdef __SANITIZE_THREAD__
#define SEND_STEP_WITH_FENCE static
#else
#define SEND_STEP_WITH_FENCE static inline __attribute__((always_inline))
#endif

/* Publish the tail, the last record and the message count (once per call,
 * not per record): a subscriber joining a topic starts from the tail, one
 * lapped on an overrun topic from the last record.  The byte count rides
 * along for the statistics (same line, no ordering needed). */
static inline __attribute__((always_inline)) void producer_publish(pinshm_channel_t *ch)
{
	atomic_store_explicit(&ch->lane->messages, ch->seq, memory_order_relaxed);
	atomic_store_explicit(&ch->lane->bytes, ch->bytes, memory_order_relaxed);
	atomic_store_explicit(&ch->lane->last, ch->last, memory_order_relaxed);
	atomic_store_explicit(&ch->lane->tail, ch->committed, memory_order_release);
}

/* A producer takes over a lane: find the true tail, past any record its
 * predecessor committed without publishing the tail. */
void producer_recover_tail(pinshm_channel_t *ch)
{
	uint64_t cap = ch->g.capacity;
	uint64_t pos = atomic_load_explicit(&ch->lane->tail, memory_order_acquire);
	uint64_t seq = atomic_load_explicit(&ch->lane->messages, memory_order_relaxed);
	uint64_t last = atomic_load_explicit(&ch->lane->last, memory_order_relaxed);
	uint64_t bytes = atomic_load_explicit(&ch->lane->bytes, memory_order_relaxed); /* a count only */
	uint32_t rec_seq = 0;
	bool found = false;

	if (!pos_aligned(pos)) {
		channel_fail(ch, -EBADMSG, "lane %u: tail %llu is not a record boundary", ch->endpoint,
			     (unsigned long long)pos);
		return;
	}
	for (uint64_t scanned = 0; scanned < cap;) {
		struct record_header *rec = rec_at(ch->ring, cap, pos);
		uint64_t word = atomic_load_explicit(&rec->commit, memory_order_acquire);
		if (!rec_ready(word, pos))
			break;
		uint32_t len = atomic_load_explicit(&rec->len, memory_order_relaxed);
		uint64_t size = rec_extent(&ch->g, word, pos, len);
		if (size == 0)
			break;
		if (rec_state(word) != REC_PADDING) {
			rec_seq = atomic_load_explicit(&rec->seq, memory_order_relaxed) + 1;
			found = true;
			last = pos;
			bytes += len;
		}
		pos += size;
		scanned += size;
	}
	ch->tail = ch->committed = pos;
	ch->zero_next = ZERO_NEXT_NONE;
	ch->last = last;
	/* Records carry the low 32 bits of their number: the count goes on
	 * from the published one, by the distance (within a ring, far below
	 * 2^31) to the number after the last record found. */
	if (found)
		seq += (uint64_t)(int64_t)(int32_t)(rec_seq - (uint32_t)seq);
	ch->seq = seq;
	ch->bytes = bytes;
	ch->limit = 0;
	atomic_store_explicit(&ch->lane->reserve, pos, memory_order_relaxed);
	producer_publish(ch);
}

/* How far this producer may write: everything below `limit` is free. */
static int producer_refresh_limit(pinshm_channel_t *ch)
{
	uint64_t cap = ch->g.capacity, tail = ch->tail;

	if (ch->g.kind == PINSHM_QUEUE) {
		uint64_t free = atomic_load_explicit(&ch->lane->free, memory_order_acquire);
		if (free > tail || tail - free > cap || !pos_aligned(free))
			return channel_fail(ch, -EBADMSG, "lane %u: free index %llu outside the ring (tail %llu)",
					    ch->endpoint, (unsigned long long)free, (unsigned long long)tail);
		ch->limit = free + cap;
		return 0;
	}
	if (is_overrun(ch)) {
		ch->limit = tail + cap;
		return 0;
	}
	/* Back-pressure topic: the slowest subscriber sets the limit.  We
	 * publish the tail (the end of what is committed, staged records
	 * aside) with a seq_cst exchange, then read each subscriber's state
	 * seq_cst; a joining subscriber makes its state active, then a seq_cst
	 * fence, then reads the tails (consumer_start()).  So either we see it
	 * active, or it starts at a tail no older than this one and the limit
	 * computed without it is safe.  (An RMW, not a store and a fence: on
	 * x86 one xchg instead of a store and a locked fence.) */
	(void)atomic_exchange_explicit(&ch->lane->tail, ch->committed, memory_order_seq_cst);
	uint64_t limit = ch->committed + cap;
	unsigned first = ch->g.max_producers;
	for (unsigned c = 0; c < ch->g.max_consumers; c++) {
		struct endpoint *ep = seg_endpoint(&ch->g, ch->base, first + c);
		if (atomic_load_explicit(&ep->state, memory_order_seq_cst) != EP_ACTIVE)
			continue;
		uint64_t cursor = atomic_load_explicit(seg_cursor(&ch->g, ch->base, c, ch->endpoint),
						       memory_order_acquire);
		if (cursor == TOPIC_CURSOR_UNSET) {
			if (ch->limit < limit)
				limit = ch->limit;
			continue;
		}
		if (cursor > tail || tail - cursor > cap || !pos_aligned(cursor))
			return channel_fail(ch, -EBADMSG, "subscriber %u: cursor %llu outside the ring (tail %llu)",
					    c, (unsigned long long)cursor, (unsigned long long)tail);
		if (cursor + cap < limit)
			limit = cursor + cap;
	}
	ch->limit = limit;
	return 0;
}

/* Wake consumers asleep on the futex or armed on a wake-up descriptor. */
static inline __attribute__((always_inline)) void producer_wake(pinshm_channel_t *ch)
{
	ch->wake_pending = false;
	if (!wait_has_sleepers(&ch->hdr->data))
		return;
	wait_wake_all(&ch->hdr->data);
	producer_notify_armed(ch);
}

struct reserve_args {
	pinshm_channel_t *ch;
	size_t len;
};

/* Reserve room for a record of @p len bytes without waiting. */
SEND_STEP_WITH_FENCE int reserve_attempt(void *arg, bool quick)
{
	(void)quick; /* one lane: always all of it */
	struct reserve_args *a = arg;
	pinshm_channel_t *ch = a->ch;
	uint64_t cap = ch->g.capacity;
	uint64_t size = rec_size(a->len);
	uint64_t to_end = cap - (ch->tail & (cap - 1));
	uint64_t pad = size > to_end ? to_end : 0;
	uint64_t need = ch->tail + pad + size + HEADROOM;

	if (ch->broken)
		return -EBADMSG;
	if (need > ch->limit) {
		int rc = producer_refresh_limit(ch);
		if (rc != 0)
			return rc;
		if (need > ch->limit) {
			if (ch->g.kind == PINSHM_QUEUE && channel_peers_gone(ch))
				return channel_fail(ch, -EPIPE, "every consumer has left the queue");
			return -EAGAIN;
		}
	}
	/* Announce the bytes about to be written before writing them: no
	 * consumer may be past them, and on an overrun topic (seqlock-style)
	 * subscribers check after reading that they were not overwritten.
	 * Shared queue: a consumer that reads a new length in this room also
	 * sees the commit word we zeroed before (see shared_read()). */
	atomic_store_explicit(&ch->lane->reserve, need - HEADROOM, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	ch->resv_start = ch->tail;
	ch->resv_pos = ch->tail + pad;
	ch->resv_len = a->len;
	ch->reserved = true;
	return 0;
}

static inline __attribute__((always_inline)) int reserve(pinshm_channel_t *ch, size_t len, int timeout_ms)
{
	struct reserve_args args = { ch, len };
	int rc;

	if (ch->role != PINSHM_PRODUCER || ch->reserved)
		return channel_fail(ch, -EINVAL, ch->reserved ? "a reservation is pending" : "not a producer");
	if (len > ch->g.max_message)
		return channel_fail(ch, -EMSGSIZE, "%zu bytes exceed the channel's maximum of %u", len,
				    ch->g.max_message);
	rc = reserve_attempt(&args, false);
	if (rc != -EAGAIN || timeout_ms == PINSHM_NONBLOCK)
		return rc;
	if (ch->wake_pending)
		producer_wake(ch); /* never sleep on messages the consumers were not told of */
	return wait_for(&ch->hdr->space, reserve_attempt, &args, timeout_ms, ch->spin_ns, &ch->ep->sleeping,
			SLEEPING_SPACE);
}

static inline void *reserved_payload(pinshm_channel_t *ch)
{
	return (uint8_t *)rec_at(ch->ring, ch->g.capacity, ch->resv_pos) + PINSHM_RECORD_HEADER;
}

/*
 * Zeroing ahead.  A consumer polls the commit word at the end of the last
 * record it took, so that word must be 0 (or the next record) before the
 * record ending there is published.  Where the record ends inside a line
 * it wrote, zeroing the word costs nothing; where it ends on a line, the
 * word starts a line the consumer holds (since the lap before, or polling
 * it), and zeroing it just before the commit made the commit wait for
 * that line (x86 keeps stores in order).  So queues and back-pressure
 * topics guess: after publishing a record, the producer zeroes the word
 * where a next record of the same size would end, if that starts a line
 * below `limit` (room the consumers released: nobody reads it), and
 * remembers it (`zero_next`).  A record that ends there needs no store
 * before its commit, unless its reservation was longer and may have
 * covered the word; any other is zeroed before, as always.  Overrun
 * topics announce every byte they write (`reserve`): they do not guess.
 * Intel Xeon guest (a cache line 220-240 ns there and back): MPI one-way
 * (records that end on a line, committed with PINSHM_LEN_ONLY), medians
 * of 5 alternating rounds, 0 B 0.212 -> 0.166 us, 8 B 0.227 -> 0.167,
 * 64 B 0.279 -> 0.238 (Open MPI 0.227, 0.273, 0.311); streams of 8 B
 * (pinshm-perf -p stream, 3 and 6 rounds) 37.0-41.7 -> 47.7-54.8 M
 * messages/s.  Zeroing ahead every line start up to the guess cost more
 * instructions; write prefetches (prefetchw) of the lines of the next
 * record cut 512 B latency by 4% but its streams by 25%.
 */
static inline void zero_word(pinshm_channel_t *ch, uint64_t pos)
{
	atomic_store_explicit(&rec_at(ch->ring, ch->g.capacity, pos)->commit, 0, memory_order_relaxed);
}

/* Before publishing the record that ends at @p end (the new tail). */
static inline __attribute__((always_inline)) void zero_before_publish(pinshm_channel_t *ch, uint64_t end)
{
	if (end != ch->zero_next || ch->resv_pos + rec_size(ch->resv_len) > end)
		zero_word(ch, end);
	ch->zero_next = ZERO_NEXT_NONE;
}

/* After publishing records, the last at `last`: guess (see above). */
static inline __attribute__((always_inline)) void zero_ahead(pinshm_channel_t *ch)
{
	uint64_t next = ch->tail + (ch->tail - ch->last);

	if ((next & (PINSHM_CACHELINE - 1)) != 0 || next >= ch->limit || is_overrun(ch))
		return;
	zero_word(ch, next);
	ch->zero_next = next;
}

/*
 * Write the pending reservation's record of @p len bytes, all but its
 * commit word, which publish_record() writes: a batch stages every record
 * first and publishes them together, so that a consumer polling the first
 * one does not pull each line away while the producer writes it.
 */
static inline __attribute__((always_inline)) void stage_reserved(pinshm_channel_t *ch, size_t len)
{
	uint64_t cap = ch->g.capacity;
	struct record_header *rec = rec_at(ch->ring, cap, ch->resv_pos);
	uint64_t end = ch->resv_pos + rec_size(len);

	atomic_store_explicit(&rec->len, (uint32_t)len, memory_order_relaxed);
	atomic_store_explicit(&rec->seq, (uint32_t)ch->seq++, memory_order_relaxed);
	ch->bytes += len;
	/* The next record's word, zeroed before this one is published (or
	 * ahead of time): what a consumer polls next is never a stale word of
	 * an earlier lap. */
	zero_before_publish(ch, end);
	if (ch->resv_pos != ch->resv_start)
		atomic_store_explicit(&rec_at(ch->ring, cap, ch->resv_start)->len,
				      (uint32_t)(ch->resv_pos - ch->resv_start - PINSHM_RECORD_HEADER), memory_order_relaxed);
	ch->tail = end;
	ch->last = ch->resv_pos;
	ch->reserved = false;
}

/* Publish a staged record at @p pos, and the padding at @p start before it. */
static inline __attribute__((always_inline)) void publish_record(pinshm_channel_t *ch, uint64_t start, uint64_t pos)
{
	uint64_t cap = ch->g.capacity;

	atomic_store_explicit(&rec_at(ch->ring, cap, pos)->commit, rec_word(pos, 0, REC_COMMITTED),
			      memory_order_release);
	if (pos != start)
		atomic_store_explicit(&rec_at(ch->ring, cap, start)->commit, rec_word(start, 0, REC_PADDING),
				      memory_order_release);
}

static inline __attribute__((always_inline)) void commit_reserved(pinshm_channel_t *ch, size_t len)
{
	uint64_t start = ch->resv_start, pos = ch->resv_pos;

	stage_reserved(ch, len);
	publish_record(ch, start, pos);
	ch->committed = ch->tail;
}

/* A send that found no room and gives up: counted on the lane (only its
 * producer writes it), for the statistics.  @return @p rc. */
static int count_refused(pinshm_channel_t *ch, int rc)
{
	if ((rc == -EAGAIN || rc == -ETIMEDOUT) && ch->role == PINSHM_PRODUCER) {
		uint64_t n = atomic_load_explicit(&ch->lane->refused, memory_order_relaxed);
		atomic_store_explicit(&ch->lane->refused, n + 1, memory_order_relaxed);
	}
	return rc;
}

int pinshm_reserve(pinshm_channel_t *ch, size_t len, void **buf, int timeout_ms)
{
	int rc = reserve(ch, len, timeout_ms);

	if (rc == 0)
		*buf = reserved_payload(ch);
	return count_refused(ch, rc);
}

int pinshm_commit(pinshm_channel_t *ch, size_t len, unsigned flags)
{
	if (!ch->reserved || len > ch->resv_len)
		return channel_fail(ch, -EINVAL, ch->reserved ? "commit longer than the reservation"
							      : "nothing reserved");
	if (flags & PINSHM_LEN_ONLY)
		ch->resv_len = len; /* the room past it holds what it held: see zero_before_publish() */
	commit_reserved(ch, len);
	producer_publish(ch);
	if (flags & PINSHM_MORE)
		ch->wake_pending = true;
	else
		producer_wake(ch);
	zero_ahead(ch);
	return 0;
}

int pinshm_abort(pinshm_channel_t *ch)
{
	if (!ch->reserved)
		return channel_fail(ch, -EINVAL, "nothing reserved");
	ch->reserved = false;
	ch->zero_next = ZERO_NEXT_NONE; /* the reservation may have written over it */
	if (is_overrun(ch))
		atomic_store_explicit(&ch->lane->reserve, ch->tail, memory_order_relaxed);
	return 0;
}

int pinshm_flush(pinshm_channel_t *ch)
{
	if (ch->role == PINSHM_PRODUCER && ch->wake_pending)
		producer_wake(ch);
	return 0;
}

int pinshm_send(pinshm_channel_t *ch, const void *buf, size_t len, int timeout_ms)
{
	int rc = reserve(ch, len, timeout_ms);

	if (rc != 0)
		return count_refused(ch, rc);
	memcpy(reserved_payload(ch), buf, len);
	commit_reserved(ch, len);
	producer_publish(ch);
	producer_wake(ch);
	zero_ahead(ch);
	return 0;
}

/* Records staged by a batch, not yet published: at most BATCH_STAGED of
 * them and BATCH_STAGED_BYTES (beyond that, a consumer waiting for the
 * first one loses more than publishing each costs). */
#define BATCH_STAGED 64
#define BATCH_STAGED_BYTES 16384
struct staging {
	unsigned count;
	uint64_t bytes;
	uint64_t start[BATCH_STAGED], pos[BATCH_STAGED];
};

static void publish_staged(pinshm_channel_t *ch, struct staging *st)
{
	if (st->count == 0)
		return;
	/* Records staged on the fast path announced nothing: no consumer may
	 * be past what we publish now. */
	if (!is_overrun(ch))
		atomic_store_explicit(&ch->lane->reserve, ch->tail, memory_order_relaxed);
	for (unsigned i = 0; i < st->count; i++)
		publish_record(ch, st->start[i], st->pos[i]);
	st->count = 0;
	st->bytes = 0;
	ch->committed = ch->tail;
	producer_publish(ch);
	producer_wake(ch);
	zero_ahead(ch);
}

int pinshm_send_batch(pinshm_channel_t *ch, const struct iovec *msgs, unsigned count, int timeout_ms)
{
	struct staging st; /* only count and bytes: clearing the arrays would cost more than a message */
	unsigned sent = 0;

	st.count = 0;
	st.bytes = 0;
	int rc = 0;

	while (sent < count) {
		size_t len = msgs[sent].iov_len;
		uint64_t cap = ch->g.capacity, size = rec_size(len);

		/* Fast path: it fits before the end of the ring and below the
		 * known limit.  Otherwise (padding, a new limit, waiting,
		 * errors, an overrun topic's announcements) the general one. */
		if (ch->role == PINSHM_PRODUCER && !ch->reserved && !ch->broken && !is_overrun(ch) &&
		    len <= ch->g.max_message && size <= cap - (ch->tail & (cap - 1)) &&
		    ch->tail + size + HEADROOM <= ch->limit) {
			atomic_thread_fence(memory_order_release); /* see reserve_attempt() */
			ch->resv_start = ch->resv_pos = ch->tail;
			ch->resv_len = len;
			ch->reserved = true;
			rc = 0;
		} else {
			rc = reserve(ch, len, PINSHM_NONBLOCK);
		}
		if (rc == -EAGAIN && timeout_ms != PINSHM_NONBLOCK) {
			publish_staged(ch, &st); /* the consumers make the room we wait for */
			rc = reserve(ch, len, timeout_ms);
		}
		if (rc != 0)
			break;
		memcpy(reserved_payload(ch), msgs[sent].iov_base, len);
		st.start[st.count] = ch->resv_start;
		st.pos[st.count++] = ch->resv_pos;
		stage_reserved(ch, len);
		sent++;
		st.bytes += len;
		if (st.count == BATCH_STAGED || st.bytes >= BATCH_STAGED_BYTES)
			publish_staged(ch, &st);
	}
	publish_staged(ch, &st);
	count_refused(ch, rc); /* the message that found no room */
	return sent > 0 ? (int)sent : rc;
}

/* ---- consumer ------------------------------------------------------------ */

/* A record taken by a consumer. */
struct taken {
	unsigned lane;
	uint64_t pos, end;
	const uint8_t *data;
	uint32_t len;
	uint64_t lost;
};

static inline unsigned consumer_index(const pinshm_channel_t *ch) { return ch->endpoint - ch->g.max_producers; }

static int corrupt_record(pinshm_channel_t *ch, unsigned lane, uint64_t pos)
{
	return channel_fail(ch, -EBADMSG, "lane %u: impossible record at position %llu", lane,
			    (unsigned long long)pos);
}

void consumer_start(pinshm_channel_t *ch)
{
	unsigned producers = ch->g.max_producers;

	if (ch->g.kind == PINSHM_TOPIC) {
		/* Join: we are active (seq_cst) before we read the tails, so a
		 * publisher that misses us never overwrites past them: the
		 * fence pairs with its seq_cst exchange of its tail and load
		 * of our state (producer_refresh_limit()). */
		atomic_thread_fence(memory_order_seq_cst);
		for (unsigned l = 0; l < producers; l++) {
			ch->cursor[l] = atomic_load_explicit(&lane_hdr(ch, l)->tail, memory_order_acquire);
			/* Published no earlier than that tail (producer_publish()):
			 * losses are counted from here, at worst a few too few. */
			uint32_t seq = (uint32_t)atomic_load_explicit(&lane_hdr(ch, l)->messages, memory_order_relaxed);
			ch->expect_seq[l] = seq;
			atomic_store_explicit(seg_cursor(&ch->g, ch->base, consumer_index(ch), l), ch->cursor[l],
					      memory_order_release);
		}
	} else if (ch->mode == CONSUME_SEQUENTIAL) {
		/* Start where the last consumer released: what it held is read again. */
		for (unsigned l = 0; l < producers; l++)
			ch->cursor[l] = atomic_load_explicit(&lane_hdr(ch, l)->free, memory_order_acquire);
	}
	for (unsigned l = 0; l < producers; l++)
		if (ch->mode == CONSUME_SEQUENTIAL && !pos_aligned(ch->cursor[l]))
			channel_fail(ch, -EBADMSG, "lane %u: start position %llu is not a record boundary", l,
				     (unsigned long long)ch->cursor[l]);
}

/*
 * Overrun topic: whether the publisher of @p lane may have overwritten @p pos,
 * asked after reading from it (seqlock-style).  The publisher advances
 * `reserve`, issues a release fence, then writes the room (reserve_attempt());
 * `reserve` must be read after the reads it vouches for, so that if they saw
 * new bytes, it shows the lap.  An acquire load would not do: it orders what
 * follows it, not what precedes it (arm64 may read the data after it).
 * Normally an acquire fence orders them, which costs nothing on x86.
 * ThreadSanitizer ignores fences (gcc warns, -Wtsan), so its build reads
 * `reserve` with an RMW adding 0, acq_rel.  C11 alone does not promise what
 * the fence does here (the publisher's store of `reserve` is relaxed, so
 * nothing synchronizes with the RMW); the CPUs do: on x86 it is a locked
 * instruction, a full barrier; on arm64 its store is a release, which keeps
 * the reads before it ahead of it, and the RMW reads the value just before
 * its own store, so missing the lap would need a cycle the memory model
 * forbids.  Adding 0 changes nothing the publisher wrote; but the RMW takes
 * the publisher's line for writing, on every message, which is why only the
 * TSan build pays for it.
 */
static bool overrun_lapped(pinshm_channel_t *ch, unsigned lane, uint64_t pos)
{
#ifdef __SANITIZE_THREAD__
	uint64_t reserved = atomic_fetch_add_explicit(&lane_hdr(ch, lane)->reserve, 0, memory_order_acq_rel);
#else
	atomic_thread_fence(memory_order_acquire);
	uint64_t reserved = atomic_load_explicit(&lane_hdr(ch, lane)->reserve, memory_order_relaxed);
#endif
	return reserved + HEADROOM > pos + ch->g.capacity;
}

/* A subscriber lost @p n messages: counted here and on its endpoint (only
 * its holder writes it), for the statistics. */
static void count_lost(pinshm_channel_t *ch, uint64_t n)
{
	ch->lost += n;
	uint64_t total = atomic_load_explicit(&ch->ep->lost, memory_order_relaxed);
	atomic_store_explicit(&ch->ep->lost, total + n, memory_order_relaxed);
}

/* Topic: the messages of @p lane lost before the one numbered @p seq.
 * Signed: a subscriber that joined during a batch may see a message or two
 * older than its starting count.  Always 0 on a queue. */
static uint64_t topic_count_lost(pinshm_channel_t *ch, unsigned lane, uint32_t seq)
{
	if (ch->g.kind != PINSHM_TOPIC)
		return 0;
	int32_t gap = (int32_t)(seq - ch->expect_seq[lane]);
	uint64_t lost = gap > 0 ? (uint64_t)gap : 0;
	ch->expect_seq[lane] = seq + 1;
	if (lost > 0)
		count_lost(ch, lost);
	return lost;
}

/* Start fetching the lines of a record after the one its header is in
 * (those within its first PREFETCH_REST_BYTES), which the producer wrote
 * before its commit word: the caller reads the payload later, and its
 * copy would otherwise wait for each line then.  Longer records are left
 * to the hardware's prefetcher past that.  1 KiB rather than 320 bytes
 * (AMD EPYC guest, MPI, 6 alternating rounds, medians): one-way 512 B
 * 0.2245 -> 0.2175 us, 1 KiB 0.294 -> 0.298, 2 KiB 0.386 -> 0.3685;
 * streaming 512 B 4.3 -> 5.4 GB/s, 1 KiB 7.4 -> 9.2, 2 KiB 11.3 -> 14.0. */
#define PREFETCH_REST_BYTES 1024

static inline void prefetch_rest(const uint8_t *ring, uint64_t cap, uint64_t pos, uint64_t size)
{
	uint64_t line = (pos | (PINSHM_CACHELINE - 1)) + 1;
	uint64_t end = pos + (size < PREFETCH_REST_BYTES ? size : PREFETCH_REST_BYTES);

	for (; line < end; line += PINSHM_CACHELINE)
		__builtin_prefetch(ring + (line & (cap - 1)));
}

/*
 * A poll that found no record at @p pos also asks for the line after pos's
 * line.  A record longer than what its first line holds is otherwise
 * fetched one line after the other: its commit word's line first, and the
 * rest only once that word is seen (prefetch_rest()).  Asked for at every
 * poll, the next line comes while the commit word's line does, or is
 * already here.  MPI one-way latency, 2 ranks, vCPUs far apart (a cache
 * line takes 200 ns one way), alternating rounds: 64 bytes (a 2-line
 * record) 0.388 -> 0.294 us, 512 bytes 0.466 -> 0.443; 0 and 8 bytes
 * and every size close together unchanged.  But where records share a
 * line, the next line is where the producer zeroes ahead and writes next,
 * and asking for it at every poll pulls it away from the producer: so it
 * is asked for only where a record as long as the last one taken
 * (`last_size`, a guess) would reach it.  pinshm-perf's round trip, Zen 5
 * guest, vCPUs far apart (a cache line 471 to 480 ns there and back, read
 * around the runs), alternating runs: 0 bytes 791-851 -> 612-630 ns,
 * 8 bytes 692-722 -> 611-621, 48 to 200 unchanged, streams unchanged.  A
 * prefetch is only a hint: it reads nothing this code relies on and faults
 * on no address.
 */
static inline void prefetch_next_line(const pinshm_channel_t *ch, const uint8_t *ring, uint64_t pos)
{
	if ((pos & (PINSHM_CACHELINE - 1)) + ch->last_size > PINSHM_CACHELINE)
		__builtin_prefetch(ring + (((pos | (PINSHM_CACHELINE - 1)) + 1) & (ch->g.capacity - 1)));
}

/*
 * Sequential consumers: the next record of @p lane at this handle's cursor.
 * @return 0 (taken unless @p peek), -EAGAIN, -EMSGSIZE (longer than
 * @p max_len, left in place), -EBADMSG.  Inlined into each caller: it is
 * the polling loop of a waiting consumer (a call per lane looked at cost
 * about 7% of an MPI ping-pong's one-way time at 8 bytes, measured).  The
 * callers note a message too long (-EMSGSIZE) where they return it, out
 * of the loop: noted here, at each lane looked at, it cost 2 to 4%.
 */
static inline __attribute__((always_inline)) int take_sequential_lane(pinshm_channel_t *ch, unsigned lane,
									      struct taken *t, size_t max_len, bool peek)
{
	uint64_t cap = ch->g.capacity;
	uint8_t *ring = lane_ring(ch, lane);
	uint64_t pos = ch->cursor[lane];
	bool resynced = false;
	unsigned pads = 0;

	for (;;) {
		struct record_header *rec = rec_at(ring, cap, pos);
		uint64_t word = atomic_load_explicit(&rec->commit, memory_order_acquire);
		uint64_t size = 0;
		uint32_t len = 0;

		if (rec_ready(word, pos)) {
			len = atomic_load_explicit(&rec->len, memory_order_relaxed);
			size = rec_extent(&ch->g, word, pos, len);
			if (size != 0 && rec_state(word) != REC_PADDING && rec_state(word) != REC_COMMITTED)
				size = 0;
		}
		if (size == 0) {
			if (is_overrun(ch) && overrun_lapped(ch, lane, pos)) {
				if (resynced)
					return -EAGAIN; /* lapped again at once: later */
				/* Lapped: start again at the newest record; seq tells
				 * what was lost. */
				pos = ch->cursor[lane] = atomic_load_explicit(&lane_hdr(ch, lane)->last,
									  memory_order_acquire);
				if (!pos_aligned(pos))
					return corrupt_record(ch, lane, pos);
				resynced = true;
				continue;
			}
			/* At our cursor the producer writes only zero (ahead of
			 * time) and then the record: anything else is damage. */
			if (word == 0) {
				prefetch_next_line(ch, ring, pos);
				return -EAGAIN;
			}
			return corrupt_record(ch, lane, pos);
		}
		if (rec_state(word) == REC_PADDING) {
			/* A producer pads once before the record that wraps: a
			 * chain of padding is a writer racing us. */
			if (++pads > 2)
				return corrupt_record(ch, lane, pos);
			pos = ch->cursor[lane] = pos + size;
			continue;
		}
		uint32_t seq = atomic_load_explicit(&rec->seq, memory_order_relaxed);
		if (is_overrun(ch) && overrun_lapped(ch, lane, pos)) {
			/* What we read may be the publisher's new bytes. */
			if (resynced)
				return -EAGAIN;
			pos = ch->cursor[lane] = atomic_load_explicit(&lane_hdr(ch, lane)->last, memory_order_acquire);
			if (!pos_aligned(pos))
				return corrupt_record(ch, lane, pos);
			resynced = true;
			continue;
		}
		if (len > max_len) {
			t->len = len;
			return -EMSGSIZE;
		}
		if (peek)
			return 0;
		*t = (struct taken){ lane, pos, pos + size, (uint8_t *)rec + PINSHM_RECORD_HEADER, len,
				     topic_count_lost(ch, lane, seq) };
		ch->cursor[lane] = t->end;
		ch->last_size = size;
		prefetch_rest(ring, cap, pos, size);
		return 0;
	}
}

/* Shared queue consumers: claim the first unclaimed record of @p lane,
 * scanning from `free` (everything before it is done) over the records
 * that other consumers hold.  Starting there, not at a hint further on,
 * also finds the records that a reap handed back. */
static int take_shared_lane(pinshm_channel_t *ch, unsigned lane, struct taken *t, size_t max_len, bool peek)
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

static inline __attribute__((always_inline)) int take_lane(pinshm_channel_t *ch, unsigned lane, struct taken *t,
								  size_t max_len, bool peek)
{
	return ch->mode == CONSUME_SHARED ? take_shared_lane(ch, lane, t, max_len, peek)
					  : take_sequential_lane(ch, lane, t, max_len, peek);
}

/* Lane @p lane gave a message: among the hot lanes from now on, in place of
 * the one that came first (channels of more than SCAN_ALL_LANES lanes). */
static void lane_gave(pinshm_channel_t *ch, unsigned lane)
{
	if (ch->g.max_producers <= SCAN_ALL_LANES)
		return;
	for (unsigned i = 0; i < ch->hot_count; i++)
		if (ch->hot[i] == lane)
			return;
	if (ch->hot_count < HOT_LANES) {
		ch->hot[ch->hot_count++] = lane;
		return;
	}
	ch->hot[ch->hot_oldest] = lane;
	ch->hot_oldest = (ch->hot_oldest + 1) % HOT_LANES;
}

/* A message too long for the call that met it stays in place, and its lane
 * is looked at first by the next take, which meets it again (pinshm(3)). */
static int take_oversize_first(pinshm_channel_t *ch, struct taken *t, size_t max_len)
{
	unsigned lane = ch->oversize_lane - 1;

	ch->oversize_lane = 0;
	int rc = take_lane(ch, lane, t, max_len, false);
	if (rc == -EMSGSIZE)
		ch->oversize_lane = lane + 1;
	else if (rc == 0)
		lane_gave(ch, lane);
	return rc;
}

/* Take the next record from any lane, round robin. */
static int take(pinshm_channel_t *ch, struct taken *t, size_t max_len, bool peek)
{
	unsigned lanes = ch->g.max_producers, lane = ch->next_lane;

	if (ch->broken)
		return -EBADMSG;
	if (__builtin_expect(ch->oversize_lane != 0, 0) && !peek) {
		int rc = take_oversize_first(ch, t, max_len);
		if (rc != -EAGAIN)
			return rc;
	}
	for (unsigned i = 0; i < lanes; i++) {
		int rc = take_lane(ch, lane, t, max_len, peek);
		unsigned from = lane;
		if (++lane == lanes)
			lane = 0;
		if (rc != -EAGAIN) {
			if (rc == 0 && !peek) {
				ch->next_lane = lane;
				if (lanes > SCAN_ALL_LANES)
					lane_gave(ch, from);
			} else if (rc == -EMSGSIZE && !peek) {
				ch->oversize_lane = from + 1;
			}
			return rc;
		}
	}
	return -EAGAIN;
}

/* Whether @p word, the commit word of @p rec read at @p pos, is exactly a
 * committed record's there, of a length rec_extent() accepts (*len and
 * *size set): what the short cuts of a sequential consumer take without
 * take()'s general checks (take_ready(), take_more_sequential()). */
static inline bool committed_at(const struct seg_geometry *g, struct record_header *rec, uint64_t word,
				uint64_t pos, uint32_t *len, uint64_t *size)
{
	if (word != rec_word(pos, 0, REC_COMMITTED))
		return false;
	*len = atomic_load_explicit(&rec->len, memory_order_relaxed);
	*size = rec_extent(g, word, pos, *len);
	return *size != 0;
}

/* take_ready(): nothing at any lane's cursor, so take() would find nothing;
 * or something it does not decide: take() looks. */
#define TAKE_EMPTY (-EAGAIN)
#define TAKE_LOOK 1

/*
 * The common case of take(), in fewer steps: a sequential consumer of at
 * most SCAN_ALL_LANES lanes, not of an overrun topic, with no message left
 * in place as too long, looks at each lane from next_lane as take() does
 * and takes the first record whose word is exactly a committed record's at
 * the cursor, of a length that rec_extent() accepts and that fits @p
 * max_len.  At anything else at a cursor (padding, a record too long, a
 * word of another lap, damage) it stops and returns TAKE_LOOK, having
 * taken nothing: take() then decides, in the same order.  TAKE_EMPTY when
 * every lane's word is 0.  Every receive's attempt (recv_attempt(), also
 * at each poll of a wait's spin) looks so first: the steps between seeing
 * a record and returning it are the consumer's part of a message's trip.
 */
static inline __attribute__((always_inline)) int take_ready(pinshm_channel_t *ch, struct taken *t, size_t max_len)
{
	unsigned lanes = ch->g.max_producers, lane = ch->next_lane;
	uint64_t cap = ch->g.capacity;

	if (ch->mode != CONSUME_SEQUENTIAL || lanes > SCAN_ALL_LANES || is_overrun(ch) || ch->broken ||
	    ch->oversize_lane != 0)
		return TAKE_LOOK;
	for (unsigned i = 0; i < lanes; i++) {
		uint8_t *ring = lane_ring(ch, lane);
		uint64_t pos = ch->cursor[lane];
		struct record_header *rec = rec_at(ring, cap, pos);
		uint64_t word = atomic_load_explicit(&rec->commit, memory_order_acquire);
		uint64_t size;
		uint32_t len;

		if (committed_at(&ch->g, rec, word, pos, &len, &size)) {
			if (len > max_len)
				return TAKE_LOOK;
			uint64_t lost = topic_count_lost(ch, lane, atomic_load_explicit(&rec->seq, memory_order_relaxed));
			*t = (struct taken){ lane, pos, pos + size, (uint8_t *)rec + PINSHM_RECORD_HEADER, len, lost };
			ch->cursor[lane] = pos + size;
			ch->last_size = size;
			ch->next_lane = lane + 1 == lanes ? 0 : lane + 1;
			prefetch_rest(ring, cap, pos, size);
			return 0;
		}
		if (word != 0)
			return TAKE_LOOK;
		prefetch_next_line(ch, ring, pos);
		if (++lane == lanes)
			lane = 0;
	}
	return TAKE_EMPTY;
}

/*
 * Take the next record, looking quickly: on a channel of many lanes (more
 * than SCAN_ALL_LANES), one lane in turn, then the hot lanes (those that
 * gave messages lately), then COLD_LANES - 1 more in turn; take() looks at
 * every lane, which costs more than a message's trip once they are many
 * (one-way 8-byte ping-pong through queues of 256 lanes, one of them used:
 * 340 to 490 ns, against 85 with 2 lanes).  Looking at one lane in turn
 * first keeps busy hot lanes from starving the others; quick takes in a
 * row look at every lane, at least COLD_LANES of them each time.
 */
static int take_quick(pinshm_channel_t *ch, struct taken *t, size_t max_len)
{
	unsigned lanes = ch->g.max_producers;

	if (lanes <= SCAN_ALL_LANES || ch->broken)
		return take(ch, t, max_len, false);
	if (ch->oversize_lane) {
		int rc = take_oversize_first(ch, t, max_len);
		if (rc != -EAGAIN)
			return rc;
	}
	for (unsigned i = 0; i < COLD_LANES; i++) {
		for (unsigned h = 0; i == 1 && h < ch->hot_count; h++) {
			unsigned slot = (ch->hot_next + h) % ch->hot_count;
			int rc = take_lane(ch, ch->hot[slot], t, max_len, false);
			if (rc != -EAGAIN) {
				if (rc == 0)
					ch->hot_next = slot + 1;
				else if (rc == -EMSGSIZE)
					ch->oversize_lane = ch->hot[slot] + 1;
				return rc;
			}
		}
		unsigned lane = ch->cold_next;
		ch->cold_next = lane + 1 == lanes ? 0 : lane + 1;
		int rc = take_lane(ch, lane, t, max_len, false);
		if (rc != -EAGAIN) {
			if (rc == 0)
				lane_gave(ch, lane);
			else if (rc == -EMSGSIZE)
				ch->oversize_lane = lane + 1;
			return rc;
		}
	}
	return -EAGAIN;
}

int consumer_has_message(pinshm_channel_t *ch)
{
	struct taken t;
	int rc = take(ch, &t, SIZE_MAX, true);

	return rc == -EMSGSIZE ? 0 : rc;
}

/* Tell producers waiting for room that some was freed. */
static void consumer_wake_producers(pinshm_channel_t *ch)
{
	if (!is_overrun(ch) && wait_has_sleepers(&ch->hdr->space))
		wait_wake_all(&ch->hdr->space);
}

/* Shared queue: room before `free` is reusable once every record before it
 * is done; whoever finds the oldest records done moves `free` past them.
 * Each consumer stores its DONE with a seq_cst CAS (release_record()), then
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

/* Sequential consumers: release `lane` up to its oldest record still held. */
static void sequential_release_lane(pinshm_channel_t *ch, unsigned lane)
{
	uint64_t pos = ch->cursor[lane];

	for (unsigned i = 0; i < ch->held_count; i++) {
		const struct held_record *h = &ch->held[(ch->held_first + i) % PINSHM_MAX_HELD];
		if (h->lane == lane) {
			pos = h->pos;
			break;
		}
	}
	_Atomic uint64_t *where = ch->g.kind == PINSHM_TOPIC
					  ? seg_cursor(&ch->g, ch->base, consumer_index(ch), lane)
					  : &lane_hdr(ch, lane)->free;
	atomic_store_explicit(where, pos, memory_order_release);
}

/* Release one record that this handle took (and holds no longer). */
static int release_record(pinshm_channel_t *ch, unsigned lane, uint64_t pos)
{
	if (ch->mode == CONSUME_SEQUENTIAL) {
		sequential_release_lane(ch, lane);
		return 0;
	}
	struct record_header *rec = rec_at(lane_ring(ch, lane), ch->g.capacity, pos);
	uint64_t claimed = rec_word(pos, consumer_index(ch), REC_CLAIMED);
	if (!atomic_compare_exchange_strong_explicit(&rec->commit, &claimed, rec_word(pos, consumer_index(ch), REC_DONE),
						     memory_order_seq_cst, memory_order_relaxed))
		return channel_fail(ch, -EBADMSG, "lane %u: a record this consumer held was changed", lane);
	if (shared_advance_free(&ch->g, ch->base, lane) != 0)
		return corrupt_record(ch, lane, pos);
	return 0;
}

/* Release the @p n oldest records held. */
static int release_held(pinshm_channel_t *ch, unsigned n)
{
	int rc = 0;

	for (unsigned i = 0; i < n; i++) {
		struct held_record h = ch->held[ch->held_first];
		ch->held_first = (ch->held_first + 1) % PINSHM_MAX_HELD;
		ch->held_count--;
		/* A sequential consumer publishes a lane's position once for a
		 * run of records of that lane. */
		if (ch->mode == CONSUME_SEQUENTIAL && i + 1 < n && ch->held[ch->held_first].lane == h.lane)
			continue;
		int r = release_record(ch, h.lane, h.pos);
		if (r != 0)
			rc = r;
	}
	consumer_wake_producers(ch);
	return rc;
}

void consumer_release_all(pinshm_channel_t *ch)
{
	if (ch->held_count > 0)
		release_held(ch, ch->held_count);
}

struct recv_args {
	pinshm_channel_t *ch;
	struct taken *t;
	size_t max_len;
};

static int recv_attempt(void *arg, bool quick)
{
	struct recv_args *a = arg;
	int rc = take_ready(a->ch, a->t, a->max_len);

	if (rc == TAKE_LOOK)
		rc = quick && a->ch->g.max_producers > SCAN_ALL_LANES ? take_quick(a->ch, a->t, a->max_len)
								       : take(a->ch, a->t, a->max_len, false);

	if (rc == -EAGAIN && channel_peers_gone(a->ch)) {
		/* They left: whatever they committed before is visible now. */
		rc = take(a->ch, a->t, a->max_len, false);
		if (rc == -EAGAIN)
			rc = channel_fail(a->ch, -EPIPE, "every producer has left the channel");
	}
	return rc;
}

/* Before reporting that nothing came: a position past the end of what the
 * lane's producer reserved is damage, not an empty lane. */
static int consumer_check_positions(pinshm_channel_t *ch, int rc)
{
	for (unsigned l = 0; l < ch->g.max_producers; l++) {
		struct lane_header *lh = lane_hdr(ch, l);
		uint64_t pos = ch->mode == CONSUME_SHARED ? atomic_load_explicit(&lh->free, memory_order_acquire)
							  : ch->cursor[l];
		uint64_t reserve = atomic_load_explicit(&lh->reserve, memory_order_acquire);
		if (!pos_aligned(pos) || pos > reserve)
			return channel_fail(ch, -EBADMSG, "lane %u: position %llu past the producer's end %llu", l,
					    (unsigned long long)pos, (unsigned long long)reserve);
	}
	return rc;
}

static int consumer_take(pinshm_channel_t *ch, struct taken *t, size_t max_len, int timeout_ms)
{
	struct recv_args args = { ch, t, max_len };

	if (ch->role != PINSHM_CONSUMER)
		return channel_fail(ch, -EINVAL, "not a consumer");
	consumer_disarm(ch);
	int rc = timeout_ms == PINSHM_NONBLOCK && ch->quick_polls
			 ? recv_attempt(&args, true)
			 : wait_for(&ch->hdr->data, recv_attempt, &args, timeout_ms, ch->spin_ns, &ch->ep->sleeping,
				    SLEEPING_DATA);
	if (rc != -EAGAIN && rc != -ETIMEDOUT)
		return rc;
	/* The check reads every producer's own line: a consumer that polls
	 * without waiting pays it on its first and then once in 64 polls, so that it
	 * does not pull those lines away from producers writing records. */
	if (timeout_ms == PINSHM_NONBLOCK && (ch->empty_polls++ & 63) != 0)
		return rc;
	return consumer_check_positions(ch, rc);
}

int pinshm_recv(pinshm_channel_t *ch, void *buf, size_t cap, size_t *len, int timeout_ms)
{
	struct taken t;
	int rc = consumer_take(ch, &t, cap, timeout_ms);

	if (rc == -EMSGSIZE)
		*len = t.len;
	if (rc != 0)
		return rc;
	if (t.len > 0)
		memcpy(buf, t.data, t.len);
	*len = t.len;
	if (is_overrun(ch) && overrun_lapped(ch, t.lane, t.pos)) {
		count_lost(ch, 1);
		return channel_fail(ch, -ESTALE, "message overwritten while it was copied");
	}
	rc = release_record(ch, t.lane, t.pos);
	consumer_wake_producers(ch);
	return rc;
}

static void msg_from_taken(pinshm_msg_t *msg, const struct taken *t)
{
	*msg = (pinshm_msg_t){ .data = t->data, .len = t->len, .lost = t->lost, .priv = { t->pos, t->lane } };
}

static void hold(pinshm_channel_t *ch, const struct taken *t)
{
	ch->held[(ch->held_first + ch->held_count) % PINSHM_MAX_HELD] =
		(struct held_record){ .lane = t->lane, .pos = t->pos };
	ch->held_count++;
}

/*
 * A batch, after its first message from @p lane: the messages that follow
 * it there, ready, without the round robin and its general checks (a
 * sequential consumer, not on an overrun topic).  It stops at anything
 * else - padding, the end, damage - and leaves that to take().
 * @return how many of @p room it added to @p msgs (and holds).
 */
static unsigned take_more_sequential(pinshm_channel_t *ch, unsigned lane, pinshm_msg_t *msgs, unsigned room)
{
	uint64_t cap = ch->g.capacity, pos = ch->cursor[lane];
	uint8_t *ring = lane_ring(ch, lane);
	unsigned n = 0;

	while (n < room) {
		struct record_header *rec = rec_at(ring, cap, pos);
		uint64_t word = atomic_load_explicit(&rec->commit, memory_order_acquire);
		uint64_t size;
		uint32_t len;
		if (!committed_at(&ch->g, rec, word, pos, &len, &size))
			break;
		uint64_t lost = topic_count_lost(ch, lane, atomic_load_explicit(&rec->seq, memory_order_relaxed));
		ch->held[(ch->held_first + ch->held_count++) % PINSHM_MAX_HELD] =
			(struct held_record){ .lane = lane, .pos = pos };
		msgs[n++] = (pinshm_msg_t){ .data = (uint8_t *)rec + PINSHM_RECORD_HEADER, .len = len, .lost = lost,
					    .priv = { pos, lane } };
		pos += size;
		ch->last_size = size;
	}
	ch->cursor[lane] = pos;
	return n;
}

int pinshm_recv_batch(pinshm_channel_t *ch, pinshm_msg_t *msgs, unsigned max, int timeout_ms)
{
	struct taken t;
	unsigned n = 0;

	if (max == 0)
		return channel_fail(ch, -EINVAL, "no room for a message");
	if (__builtin_expect(ch->dev != NULL, 0))
		device_progress(ch); /* room for more, where events completed */
	if (ch->role == PINSHM_CONSUMER && ch->held_count == PINSHM_MAX_HELD)
		return channel_fail(ch, -ENOBUFS, "%u messages are held already", PINSHM_MAX_HELD);
	int rc = consumer_take(ch, &t, SIZE_MAX, timeout_ms);
	while (rc == 0) {
		hold(ch, &t);
		msg_from_taken(&msgs[n++], &t);
		if (n < max && ch->mode == CONSUME_SEQUENTIAL && !is_overrun(ch)) {
			unsigned room = PINSHM_MAX_HELD - ch->held_count;
			n += take_more_sequential(ch, t.lane, msgs + n, max - n < room ? max - n : room);
		}
		if (n == max || ch->held_count == PINSHM_MAX_HELD)
			break;
		rc = take_quick(ch, &t, SIZE_MAX); /* more if ready: a quick look will do */
	}
	return n > 0 ? (int)n : rc;
}

int pinshm_recv_inplace(pinshm_channel_t *ch, pinshm_msg_t *msg, int timeout_ms)
{
	int rc = pinshm_recv_batch(ch, msg, 1, timeout_ms);

	return rc < 0 ? rc : 0;
}

int ring_held_index(const pinshm_channel_t *ch, const pinshm_msg_t *msg)
{
	for (unsigned i = 0; i < ch->held_count; i++) {
		const struct held_record *h = &ch->held[(ch->held_first + i) % PINSHM_MAX_HELD];
		if (h->pos == msg->priv[0] && h->lane == msg->priv[1])
			return (int)i;
	}
	return -1;
}

/* Release held record @p i and those before it. */
static int release_through(pinshm_channel_t *ch, const struct held_record *h, unsigned i)
{
	bool stale = is_overrun(ch) && overrun_lapped(ch, h->lane, h->pos);
	int rc = release_held(ch, i + 1);

	if (rc == 0 && stale) {
		count_lost(ch, 1);
		rc = channel_fail(ch, -ESTALE, "message overwritten while it was held");
	}
	return rc;
}

int ring_release_held(pinshm_channel_t *ch, unsigned i)
{
	return release_through(ch, &ch->held[(ch->held_first + i) % PINSHM_MAX_HELD], i);
}

int pinshm_release(pinshm_channel_t *ch, const pinshm_msg_t *msg)
{
	/* A handle that hands records to a device releases them in the
	 * order of their events (device/release.c). */
	if (__builtin_expect(ch->dev != NULL, 0))
		return device_release(ch, msg);
	for (unsigned i = 0; i < ch->held_count; i++) {
		const struct held_record *h = &ch->held[(ch->held_first + i) % PINSHM_MAX_HELD];
		if (h->pos == msg->priv[0] && h->lane == msg->priv[1])
			return release_through(ch, h, i);
	}
	return channel_fail(ch, -EINVAL, "message not held by this handle");
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
