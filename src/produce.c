/*
 * produce.c - the producing side of the data path: reserve, commit, send,
 * batches, and waking the consumers (memory ordering: ring.h).
 */
#include <errno.h>
#include <string.h>

#include "ring.h"
#include "wait.h"

#define ZERO_NEXT_NONE UINT64_MAX /* no word zeroed ahead (zero_ahead()) */

/* The steps of a send (reserve, reserve_attempt, stage_reserved,
 * publish_record, commit_reserved, producer_publish, producer_wake) are
 * always inlined into the calls that make them: left to itself, GCC (LTO)
 * called each, at a cost that tests/check_insn.sh sees.
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
	/* Read first: the compiler would read them again after each store. */
	struct lane_header *lane = ch->lane;
	uint64_t seq = ch->seq, bytes = ch->bytes, last = ch->last, committed = ch->committed;

	atomic_store_explicit(&lane->messages, seq, memory_order_relaxed);
	atomic_store_explicit(&lane->bytes, bytes, memory_order_relaxed);
	atomic_store_explicit(&lane->last, last, memory_order_relaxed);
	/* Release: pairs with the acquire load of `tail` by a joining
	 * subscriber (consume.c consumer_start()) and by the lane's next
	 * producer (producer_recover_tail()). */
	atomic_store_explicit(&lane->tail, committed, memory_order_release);
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
		/* Acquire: pairs with the release store of `free` by a
		 * sequential consumer (consume.c sequential_release_lane()) or
		 * the CAS of a shared one (queue.c shared_advance_free()). */
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
		/* Acquire: pairs with the subscriber's release store of its
		 * cursor (consume.c sequential_release_lane(), consumer_start()). */
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

/*
 * Whether the record ending at `limit` may be published without zeroing
 * the word there (layout.h): `limit` is one ring past the oldest position
 * a consumer has not released, a record's start (or padding's), so the
 * word there is that record's commit word, of the lap before, which a
 * sequential consumer takes for "nothing yet" (consume.c
 * word_of_lap_before()).  Without this, 16 bytes would cost a whole record
 * of room where records of one size fill the ring exactly (4 records of 1
 * MiB + 16 in 4 MiB: 2 in flight instead of 3).  Not for a shared queue,
 * whose consumers (queue.c) claim words in place.
 */
static inline bool lap_word_is_empty(const pinshm_channel_t *ch)
{
	return !(ch->g.kind == PINSHM_QUEUE && ch->g.max_consumers > 1) && !is_overrun(ch);
}

struct reserve_args {
	pinshm_channel_t *ch;
	size_t len;
};

/* Where a record of @p len bytes reserved now would end: after *@p pad
 * bytes of padding (the rest of the ring, where it would not fit before
 * the ring's end), its rec_size(). */
static inline __attribute__((always_inline)) uint64_t room_end(const pinshm_channel_t *ch, size_t len,
								uint64_t *pad)
{
	uint64_t cap = ch->g.capacity, size = rec_size(len);
	uint64_t to_end = cap - (ch->tail & (cap - 1));
	*pad = size > to_end ? to_end : 0;
	return ch->tail + *pad + size;
}

/* Hold the room of a record of @p len bytes that fits, after @p pad bytes
 * of padding, up to @p end. */
SEND_STEP_WITH_FENCE void take_room(pinshm_channel_t *ch, size_t len, uint64_t pad, uint64_t end)
{
	/* Announce the bytes about to be written before writing them: no
	 * consumer may be past them, and on an overrun topic (seqlock-style)
	 * subscribers check after reading that they were not overwritten.
	 * Shared queue: a consumer that reads a new length in this room also
	 * sees the commit word we zeroed before.  The release fence pairs
	 * with the acquire fences of consume.c overrun_lapped() and queue.c
	 * shared_read(). */
	atomic_store_explicit(&ch->lane->reserve, end, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	ch->resv_start = ch->tail;
	ch->resv_pos = ch->tail + pad;
	ch->resv_len = len;
	ch->reserved = RESV_HELD;
}

/* Reserve room for a record of @p len bytes without waiting. */
SEND_STEP_WITH_FENCE int reserve_attempt(void *arg, bool quick)
{
	(void)quick; /* one lane: always all of it */
	struct reserve_args *a = arg;
	pinshm_channel_t *ch = a->ch;
	uint64_t pad, end = room_end(ch, a->len, &pad);
	uint64_t need = end + HEADROOM;

	if (ch->broken)
		return -EBADMSG;
	if (need > ch->limit) {
		int rc = producer_refresh_limit(ch);
		if (rc != 0)
			return rc;
		if (need > ch->limit && !(end == ch->limit && lap_word_is_empty(ch))) {
			if (ch->g.kind == PINSHM_QUEUE && channel_peers_gone(ch))
				return channel_fail(ch, -EPIPE, "every consumer has left the queue");
			return -EAGAIN;
		}
		if (end == ch->limit)
			ch->zero_next = end; /* the word there: see lap_word_is_empty() */
	}
	take_room(ch, a->len, pad, end);
	return 0;
}

/* A reservation that a device may still write: never committed nor
 * reused (its room stays reserved). */
static __attribute__((cold, noinline)) int lost(pinshm_channel_t *ch)
{
	return channel_fail(ch, -EIO, "the reservation is lost: a device may still write it");
}

/* Why a reserve cannot go on; 0 where a reservation that waited for a
 * device's event was committed meanwhile: it may. */
static __attribute__((cold, noinline)) int reserve_refused(pinshm_channel_t *ch)
{
	if (ch->role != PINSHM_PRODUCER)
		return channel_fail(ch, -EINVAL, "not a producer");
	if (ch->reserved == RESV_DEVICE) {
		int rc = ch->dev_ops->commit_progress(ch);
		if (rc <= 0)
			return rc;
		return channel_fail(ch, -EBUSY, "the reservation waits for its device's event to be committed");
	}
	if (ch->reserved == RESV_LOST)
		return lost(ch);
	return channel_fail(ch, -EINVAL, "a reservation is pending");
}

/* Why a commit or an abort is refused; 0 where the reservation waited
 * for a device's event that has completed: it is committed now. */
static __attribute__((cold, noinline)) int commit_refused(pinshm_channel_t *ch)
{
	bool waited = ch->reserved == RESV_DEVICE;
	int rc = waited ? ch->dev_ops->commit_progress(ch) : 0;
	if (rc == 1)
		return channel_fail(ch, -EBUSY, "the reservation waits for its device's event to be committed");
	if (rc < 0 || (waited && ch->reserved != RESV_LOST))
		return rc;
	if (ch->reserved == RESV_LOST)
		return lost(ch);
	if (ch->reserved != RESV_HELD)
		return channel_fail(ch, -EINVAL, "nothing reserved");
	return channel_fail(ch, -EINVAL, "commit longer than the reservation");
}

static inline __attribute__((always_inline)) int reserve(pinshm_channel_t *ch, size_t len, int timeout_ms)
{
	struct reserve_args args = { ch, len };
	int rc;

	if (ch->role != PINSHM_PRODUCER || ch->reserved) {
		int rc = reserve_refused(ch);
		if (rc != 0)
			return rc;
	}
	if (len > ch->g.max_message)
		return channel_fail(ch, -EMSGSIZE, "%zu bytes exceed the channel's maximum of %u", len,
				    ch->g.max_message);
	rc = reserve_attempt(&args, false);
	if (rc != -EAGAIN || timeout_ms == PINSHM_NONBLOCK)
		return rc;
	if (ch->wake_pending)
		producer_wake(ch); /* never sleep on messages the consumers were not told of */
	/* The room comes once a consumer copied out about a record this long. */
	return wait_for(&ch->hdr->space, reserve_attempt, &args, timeout_ms, &ch->spin, rec_size(len),
			&ch->ep->sleeping, SLEEPING_SPACE);
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
	/* Read first: the compiler would read them again after each store
	 * into the ring. */
	uint64_t cap = ch->g.capacity;
	uint8_t *ring = ch->ring;
	uint64_t pos = ch->resv_pos, start = ch->resv_start, seq = ch->seq;
	struct record_header *rec = rec_at(ring, cap, pos);
	uint64_t end = pos + rec_size(len);

	/* The next record's word, zeroed before this one is published (or
	 * ahead of time): what a consumer polls next is never a stale word of
	 * an earlier lap. */
	zero_before_publish(ch, end);
	ch->seq = seq + 1;
	ch->bytes += len;
	ch->tail = end;
	ch->last = pos;
	atomic_store_explicit(&rec->len, (uint32_t)len, memory_order_relaxed);
	atomic_store_explicit(&rec->seq, (uint32_t)seq, memory_order_relaxed);
	if (pos != start)
		atomic_store_explicit(&rec_at(ring, cap, start)->len, (uint32_t)(pos - start - PINSHM_RECORD_HEADER),
				      memory_order_relaxed);
	ch->reserved = RESV_NONE;
}

/* Publish a staged record at @p pos, and the padding at @p start before it.
 * Release: pairs with the acquire load of the commit word by a consumer
 * (consume.c take_committed(), take_sequential_lane(); queue.c
 * shared_read()), which then sees len, seq and the payload. */
static inline __attribute__((always_inline)) void publish_record(pinshm_channel_t *ch, uint64_t start, uint64_t pos)
{
	uint64_t cap = ch->g.capacity;
	uint8_t *ring = ch->ring;

	atomic_store_explicit(&rec_at(ring, cap, pos)->commit, rec_word(pos, 0, REC_COMMITTED), memory_order_release);
	if (pos != start)
		atomic_store_explicit(&rec_at(ring, cap, start)->commit, rec_word(start, 0, REC_PADDING),
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

/* pinshm_reserve() where anything but room that fits now is in question:
 * out of line, so that the common case makes no call (nor saves the
 * registers a call needs). */
static __attribute__((noinline)) int reserve_slow(pinshm_channel_t *ch, size_t len, void **buf, int timeout_ms)
{
	int rc = reserve(ch, len, timeout_ms);

	if (rc == 0)
		*buf = reserved_payload(ch);
	return count_refused(ch, rc);
}

int pinshm_reserve(pinshm_channel_t *ch, size_t len, void **buf, int timeout_ms)
{
	if (ch->role == PINSHM_PRODUCER && !ch->reserved && len <= ch->g.max_message && !ch->broken) {
		/* What reserve_attempt() does when the room is there. */
		uint64_t pad, end = room_end(ch, len, &pad);

		if (end + HEADROOM <= ch->limit) {
			take_room(ch, len, pad, end);
			*buf = reserved_payload(ch);
			return 0;
		}
	}
	return reserve_slow(ch, len, buf, timeout_ms);
}

int pinshm_commit(pinshm_channel_t *ch, size_t len, unsigned flags)
{
	if (ch->reserved != RESV_HELD || len > ch->resv_len)
		return commit_refused(ch);
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
	if (ch->reserved != RESV_HELD)
		return commit_refused(ch);
	ch->reserved = RESV_NONE;
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

/*
 * Copy a message into the ring.  x86 glibc copies a block of at least its
 * rep_movsb_stop_threshold (on AMD the L2 cache's size: 512 KiB or 1 MiB)
 * with a loop of vector stores, and a smaller one with rep movsb.  Into a
 * ring whose lines the consumer's core read last, the loop measured
 * several times slower (PERFORMANCE.md, 1 MiB streams).  So a long
 * message is copied in pieces of COPY_PIECE, below every such threshold;
 * a C library without one copies the pieces as it would the whole.
 */
#define COPY_PIECE (256u << 10)

static void copy_in_pieces(uint8_t *dst, const uint8_t *src, size_t len)
{
	for (; len > COPY_PIECE; len -= COPY_PIECE, dst += COPY_PIECE, src += COPY_PIECE)
		memcpy(dst, src, COPY_PIECE);
	memcpy(dst, src, len);
}

static inline __attribute__((always_inline)) void copy_in(void *dst, const void *src, size_t len)
{
	if (__builtin_expect(len > COPY_PIECE, 0))
		copy_in_pieces(dst, src, len);
	else
		memcpy(dst, src, len);
}

int pinshm_send(pinshm_channel_t *ch, const void *buf, size_t len, int timeout_ms)
{
	int rc = reserve(ch, len, timeout_ms);

	if (rc != 0)
		return count_refused(ch, rc);
	copy_in(reserved_payload(ch), buf, len);
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
			ch->reserved = RESV_HELD;
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
		copy_in(reserved_payload(ch), msgs[sent].iov_base, len);
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
