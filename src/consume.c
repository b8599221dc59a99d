/*
 * consume.c - the consuming side of the data path: take, receive, hold
 * and release, round robin over the lanes, the sequential consumer's lane
 * (a shared queue's claims: queue.c; memory ordering: ring.h).
 */
#include <errno.h>
#include <string.h>

#include "ring.h"
#include "wait.h"

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
		/* Start where the last consumer released: what it held is read
		 * again.  Acquire: pairs with its release store of `free`
		 * (sequential_release_lane()). */
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

/* Start fetching the lines of record @p rec (@p size bytes, whole in the
 * ring: rec_extent() checked it) after the one its header is in (those
 * within its first PREFETCH_REST_BYTES), which the producer wrote before
 * its commit word: the caller reads the payload later, and its copy would
 * otherwise wait for each line then.  Longer records are left to the
 * hardware's prefetcher past that. */
#define PREFETCH_REST_BYTES 1024

static inline void prefetch_rest(const struct record_header *rec, uint64_t size)
{
	const uint8_t *line = (const uint8_t *)(((uintptr_t)rec | (PINSHM_CACHELINE - 1)) + 1);
	const uint8_t *end = (const uint8_t *)rec + (size < PREFETCH_REST_BYTES ? size : PREFETCH_REST_BYTES);

	for (; line < end; line += PINSHM_CACHELINE)
		__builtin_prefetch(line);
}

/*
 * A poll that found no record at @p pos also asks for the line after pos's
 * line.  A record longer than what its first line holds is otherwise
 * fetched one line after the other: its commit word's line first, and the
 * rest only once that word is seen (prefetch_rest()).  Asked for at every
 * poll, the next line comes while the commit word's line does, or is
 * already here.  But where records share a
 * line, the next line is where the producer zeroes ahead and writes next,
 * and asking for it at every poll pulls it away from the producer: so it
 * is asked for only where a record as long as the last one taken
 * (`last_size`, a guess) would reach it.  A prefetch is only a hint: it reads nothing this code relies on and faults
 * on no address.
 */
static inline void prefetch_next_line(const pinshm_channel_t *ch, const uint8_t *ring, uint64_t pos)
{
	if ((pos & (PINSHM_CACHELINE - 1)) + ch->last_size > PINSHM_CACHELINE)
		__builtin_prefetch(ring + (((pos | (PINSHM_CACHELINE - 1)) + 1) & (ch->g.capacity - 1)));
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

/* Whether @p word at @p pos is the commit word of a record (or padding)
 * one lap before: a producer may leave it there rather than zero it
 * (produce.c lap_word_is_empty()), and it means nothing yet, as 0 does. */
static inline bool word_of_lap_before(const struct seg_geometry *g, uint64_t word, uint64_t pos)
{
	uint64_t before = pos - g->capacity;

	return word == rec_word(before, 0, REC_COMMITTED) || word == rec_word(before, 0, REC_PADDING);
}

/* take_committed(), take_ready(): nothing at the cursor (every lane's), so
 * take() would find nothing; or something they do not decide: take() looks. */
#define TAKE_EMPTY (-EAGAIN)
#define TAKE_LOOK 1

/* Sequential consumers: take the record of @p size bytes (@p len of payload,
 * numbered @p seq) at @p pos of @p lane, its header @p rec: *t set, a
 * topic's losses counted, the cursor past it.  How every sequential take
 * ends (take_sequential_lane(), take_committed()). */
static inline __attribute__((always_inline)) void take_at_cursor(pinshm_channel_t *ch, unsigned lane,
								 struct record_header *rec, uint64_t pos, uint64_t size,
								 uint32_t len, uint32_t seq, struct taken *t)
{
	ch->cursor[lane] = pos + size;
	ch->last_size = size;
	*t = (struct taken){ lane, pos, pos + size, (uint8_t *)rec + PINSHM_RECORD_HEADER, len,
			     topic_count_lost(ch, lane, seq) };
}

/* Sequential consumers' short cut, without take()'s general checks: the
 * record at @p lane's cursor (@p ring: the lane's), if its word is exactly
 * a committed record's there (committed_at()) and it fits @p max_len.
 * @p poll: a receive's look, which prefetches (prefetch_rest(),
 * prefetch_next_line()).  @return 0 (taken), TAKE_EMPTY (the word is 0),
 * TAKE_LOOK (anything else: nothing taken, take_sequential_lane()
 * decides). */
static inline __attribute__((always_inline)) int take_committed(pinshm_channel_t *ch, unsigned lane, uint8_t *ring,
								struct taken *t, size_t max_len, bool poll)
{
	uint64_t pos = ch->cursor[lane], size;
	struct record_header *rec = rec_at(ring, ch->g.capacity, pos);
	/* Acquire: pairs with the producer's release store of the word
	 * (produce.c publish_record()). */
	uint64_t word = atomic_load_explicit(&rec->commit, memory_order_acquire);
	uint32_t len;

	if (!committed_at(&ch->g, rec, word, pos, &len, &size) || len > max_len) {
		if (__builtin_expect(word != 0, 0) && !word_of_lap_before(&ch->g, word, pos))
			return TAKE_LOOK;
		if (poll)
			prefetch_next_line(ch, ring, pos);
		return TAKE_EMPTY;
	}
	take_at_cursor(ch, lane, rec, pos, size, len, atomic_load_explicit(&rec->seq, memory_order_relaxed), t);
	if (poll)
		prefetch_rest(rec, size);
	return 0;
}

/* Overrun topic, lapped at @p lane's cursor: start again at the newest
 * record (its seq tells what was lost), *@p pos there, once (*@p resynced).
 * @return 0 (look again at *@p pos), -EAGAIN (lapped again at once:
 * later), -EBADMSG. */
static inline int overrun_resync(pinshm_channel_t *ch, unsigned lane, uint64_t *pos, bool *resynced)
{
	if (*resynced)
		return -EAGAIN;
	*pos = ch->cursor[lane] = atomic_load_explicit(&lane_hdr(ch, lane)->last, memory_order_acquire);
	if (!pos_aligned(*pos))
		return corrupt_record(ch, lane, *pos);
	*resynced = true;
	return 0;
}

/*
 * Sequential consumers: the next record of @p lane at this handle's cursor.
 * @return 0 (taken unless @p peek), -EAGAIN, -EMSGSIZE (longer than
 * @p max_len, left in place), -EBADMSG.  Inlined into each caller: it is
 * the polling loop of a waiting consumer.  The callers note a message too
 * long (-EMSGSIZE) where they return it, out of the loop, not at each
 * lane looked at.
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
		/* Acquire: pairs with produce.c publish_record()'s release. */
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
				int rc = overrun_resync(ch, lane, &pos, &resynced);
				if (rc != 0)
					return rc;
				continue;
			}
			/* At our cursor the producer writes only zero (ahead of
			 * time), or leaves a word of the lap before, and then
			 * the record: anything else is damage. */
			if (word == 0 || word_of_lap_before(&ch->g, word, pos)) {
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
			int rc = overrun_resync(ch, lane, &pos, &resynced);
			if (rc != 0)
				return rc;
			continue;
		}
		if (len > max_len) {
			t->len = len;
			return -EMSGSIZE;
		}
		if (peek)
			return 0;
		take_at_cursor(ch, lane, rec, pos, size, len, seq, t);
		prefetch_rest(rec, size);
		return 0;
	}
}

static inline __attribute__((always_inline)) int take_lane(pinshm_channel_t *ch, unsigned lane, struct taken *t,
								  size_t max_len, bool peek)
{
	return ch->mode == CONSUME_SHARED ? queue_take(ch, lane, t, max_len, peek)
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
 * is looked at first by the next take, which meets it again (pinshm-messages(3)). */
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

/* How many lanes take_ready() looks at: up to the last whose producer
 * endpoint ever attached (an endpoint is never free again), counted again
 * when endpoint_changes moved.  A lane that never had a producer has no
 * record.  Acquire: pairs with the seq_cst bump of endpoint_changes that
 * follows a producer's claim of its endpoint (seg.c seg_endpoints_changed(),
 * before the attach returns and so before its first commit): a count
 * that misses it is of an older value, and a later look sees the new one
 * (a consumer going to sleep reads it after its barrier, as it reads the
 * commit words: wait.h).  The states are the segment's: a writer of the
 * channel can mark an attached producer's endpoint free and hide its lane
 * from this count, so the count only decides the quick looks; a receive
 * also looks at every lane (hides_lanes()) at each look of a wait after a
 * yield or a sleep, and on one non-blocking receive in 64 that found
 * nothing (consumer_take()): a hidden record is late, never lost. */
static __attribute__((noinline, cold)) unsigned count_live_lanes(pinshm_channel_t *ch, uint32_t changes)
{
	unsigned live = 0;

	for (unsigned l = 0; l < ch->g.max_producers; l++)
		if (atomic_load_explicit(&seg_endpoint(&ch->g, ch->base, l)->state, memory_order_relaxed) != EP_FREE)
			live = l + 1;
	ch->live_lanes = live > 0 ? live : 1;
	ch->live_changes = changes;
	return ch->live_lanes;
}

static inline unsigned live_lanes(pinshm_channel_t *ch)
{
	uint32_t changes = atomic_load_explicit(&ch->hdr->endpoint_changes, memory_order_acquire);

	return __builtin_expect(changes == ch->live_changes, 1) ? ch->live_lanes : count_live_lanes(ch, changes);
}

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

	if (ch->mode != CONSUME_SEQUENTIAL || lanes > SCAN_ALL_LANES || is_overrun(ch) || ch->broken ||
	    ch->oversize_lane != 0)
		return TAKE_LOOK;
	if (lanes > 1) {
		lanes = live_lanes(ch);
		if (lane >= lanes)
			lane = 0;
	}
	for (unsigned i = 0; i < lanes; i++) {
		int rc = take_committed(ch, lane, lane_ring(ch, lane), t, max_len, true);

		if (rc == 0) {
			ch->next_lane = lane + 1 == lanes ? 0 : lane + 1;
			return 0;
		}
		if (rc == TAKE_LOOK)
			return TAKE_LOOK;
		if (++lane == lanes)
			lane = 0;
	}
	return TAKE_EMPTY;
}

/*
 * Take the next record, looking quickly: on a channel of many lanes (more
 * than SCAN_ALL_LANES), one lane in turn, then the hot lanes (those that
 * gave messages lately), then COLD_LANES - 1 more in turn; take() looks at
 * every lane, which costs more than a message's trip once they are many.
 * Looking at one lane in turn
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

/* A receive call disarms the descriptor that pinshm_channel_arm() armed. */
void consumer_disarm(pinshm_channel_t *ch)
{
	if (!ch->armed)
		return;
	ch->armed = false;
	atomic_store_explicit(&ch->ep->armed, 0, memory_order_relaxed);
	wait_unregister(&ch->hdr->data, &ch->ep->sleeping, SLEEPING_ARMED);
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
	/* Release: our reads of the records before @p pos are done before a
	 * producer's acquire load of the position (produce.c
	 * producer_refresh_limit()) lets it write there. */
	atomic_store_explicit(where, pos, memory_order_release);
}

/* Release one record that this handle took (and holds no longer). */
static int release_record(pinshm_channel_t *ch, unsigned lane, uint64_t pos)
{
	if (ch->mode == CONSUME_SEQUENTIAL) {
		sequential_release_lane(ch, lane);
		return 0;
	}
	return queue_release(ch, lane, pos);
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
	bool waits; /* the receive may wait (not PINSHM_NONBLOCK) */
};

/* Whether take_ready() left lanes out (count_live_lanes()). */
static inline bool hides_lanes(const pinshm_channel_t *ch)
{
	return ch->live_lanes < ch->g.max_producers;
}

static int recv_attempt(void *arg, bool quick)
{
	struct recv_args *a = arg;
	int rc = take_ready(a->ch, a->t, a->max_len);

	if (rc == TAKE_LOOK)
		rc = quick && a->ch->g.max_producers > SCAN_ALL_LANES ? take_quick(a->ch, a->t, a->max_len)
								       : take(a->ch, a->t, a->max_len, false);
	else if (rc == TAKE_EMPTY && !quick && a->waits && hides_lanes(a->ch))
		rc = take(a->ch, a->t, a->max_len, false); /* after a yield or a sleep: every lane */

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
	struct recv_args args = { ch, t, max_len, timeout_ms != PINSHM_NONBLOCK };

	if (ch->role != PINSHM_CONSUMER)
		return channel_fail(ch, -EINVAL, "not a consumer");
	consumer_disarm(ch);
	int rc = timeout_ms == PINSHM_NONBLOCK && ch->quick_polls
			 ? recv_attempt(&args, true)
			 /* The next message comes once a producer copied in
			  * about one as long as the last (a sequential
			  * consumer's guess; 0 for a shared queue's). */
			 : wait_for(&ch->hdr->data, recv_attempt, &args, timeout_ms, &ch->spin, ch->last_size,
				    &ch->ep->sleeping, SLEEPING_DATA);
	if (rc != -EAGAIN && rc != -ETIMEDOUT)
		return rc;
	/* The check reads every producer's own line: a consumer that polls
	 * without waiting pays it on its first and then once in 64 polls, so that it
	 * does not pull those lines away from producers writing records. */
	if (timeout_ms == PINSHM_NONBLOCK && (ch->empty_polls++ & 63) != 0)
		return rc;
	if (rc == -EAGAIN && hides_lanes(ch)) { /* non-blocking: every lane, as seldom */
		rc = take(ch, t, max_len, false);
		if (rc != -EAGAIN)
			return rc;
	}
	return consumer_check_positions(ch, rc);
}

int pinshm_recv(pinshm_channel_t *ch, void *buf, size_t cap, size_t *len, int timeout_ms)
{
	struct taken t;
	int rc;

	/* A record ready at a sequential consumer's cursor is taken here, as
	 * the wait's first attempt would take it (take_ready()), without the
	 * calls of the wait; anything else goes the general way. */
	if (ch->role == PINSHM_CONSUMER && !ch->armed && take_ready(ch, &t, cap) == 0)
		rc = 0;
	else
		rc = consumer_take(ch, &t, cap, timeout_ms);
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
	if (ch->mode == CONSUME_SEQUENTIAL && ch->held_count == 0 && ch->g.kind == PINSHM_QUEUE) {
		/* Nothing held: the lane is free up to the cursor.  Release:
		 * as sequential_release_lane(). */
		atomic_store_explicit(&lane_hdr(ch, t.lane)->free, ch->cursor[t.lane], memory_order_release);
		rc = 0;
	} else {
		rc = release_record(ch, t.lane, t.pos);
	}
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
	uint8_t *ring = lane_ring(ch, lane);
	struct taken t;
	unsigned n = 0;

	while (n < room && take_committed(ch, lane, ring, &t, SIZE_MAX, false) == 0) {
		hold(ch, &t);
		msg_from_taken(&msgs[n++], &t);
	}
	return n;
}

int pinshm_recv_batch(pinshm_channel_t *ch, pinshm_msg_t *msgs, unsigned max, int timeout_ms)
{
	struct taken t;
	unsigned n = 0;

	if (max == 0)
		return channel_fail(ch, -EINVAL, "no room for a message");
	if (__builtin_expect(ch->dev != NULL, 0))
		ch->dev_ops->progress(ch); /* room for more, where events completed */
	if (ch->role == PINSHM_CONSUMER && ch->held_count == PINSHM_MAX_HELD)
		return channel_fail(ch, -ENOBUFS, "%u messages are held already", PINSHM_MAX_HELD);
	/* As pinshm_recv(): a record ready at the cursor is taken at once. */
	int rc = ch->role == PINSHM_CONSUMER && !ch->armed && take_ready(ch, &t, SIZE_MAX) == 0
			 ? 0
			 : consumer_take(ch, &t, SIZE_MAX, timeout_ms);
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
		return ch->dev_ops->release(ch, msg);
	for (unsigned i = 0; i < ch->held_count; i++) {
		const struct held_record *h = &ch->held[(ch->held_first + i) % PINSHM_MAX_HELD];
		if (h->pos == msg->priv[0] && h->lane == msg->priv[1])
			return release_through(ch, h, i);
	}
	return channel_fail(ch, -EINVAL, "message not held by this handle");
}
