/*
 * layout.h - the shared layout of a channel segment (PINSHM_LAYOUT_VERSION 4).
 *
 * These structures are an ABI between processes: any change to them or to
 * the record format bumps PINSHM_LAYOUT_VERSION.  There is no pointer in a
 * segment, only offsets from its base, computed from the geometry in the
 * header (read once, checked against the descriptor's size, then kept in
 * the process's own memory: nothing below is trusted after attach).
 *
 *   offset 0  +----------------------------------------------+
 *             | seg_header          geometry (line 0)        |
 *             |                     data wait words (line 1) |
 *             |                     space wait words (line 2)|
 *             |                     endpoint changes, pinning|
 *             |                     state (line 3)           |
 *             +----------------------------------------------+
 *             | endpoint[P + C]     one line each: producers |
 *             |                     0..P-1, consumers P..P+C-1|
 *             +----------------------------------------------+
 *             | cursors[C][P]       topic: each subscriber's |
 *             |                     release position per lane|
 *             |                     (one block of lines per  |
 *             |                     subscriber)              |
 *             +----------------------------------------------+
 *             | lane 0: lane_header (producer line, consumer |
 *             |         line), then `capacity` bytes of ring |
 *             | lane 1 ...                                   |
 *             +----------------------------------------------+
 *
 * A lane is the ring of one producer endpoint: only that producer writes
 * records into it, so a producer never contends with another and a dead
 * producer's unfinished reservation is simply never published.
 *
 * Records (16-byte aligned, contiguous; a wrap writes a padding record):
 *
 *   +--------------------+-------------+-------------+------------------+
 *   | commit (8 bytes)   | len (4)     | seq (4)     | payload, padded  |
 *   +--------------------+-------------+-------------+ to 16 bytes      |
 *
 * `commit` is the record's state word, written last by the producer with a
 * release store (the consumer's acquire load of it makes len, seq and the
 * payload visible).  It encodes the record's position so that a word left
 * from an earlier lap never passes for a new record:
 *
 *   commit = tag(pos) << 12 | owner << 4 | state,  tag(pos) = pos >> 4 (52 bits)
 *
 * Before publishing a record the producer zeroes the commit word of the
 * record that will follow it, so the word a consumer polls next is always
 * either zero or a record of the current lap, never stale payload bytes.
 * The producer keeps 16 bytes of headroom for that word.  (Queues and
 * back-pressure topics may zero it ahead of time, in room the consumers
 * released: produce.c zero_ahead().)  Since layout 4, where a record ends
 * exactly one ring past the oldest record not yet released, the word
 * there is that record's commit word, of the lap before, and it is left
 * as it is: a sequential consumer takes such a word as nothing yet, as
 * it does zero (produce.c lap_word_is_empty(); not a shared queue, whose
 * consumers claim words in place: it keeps the headroom).
 *
 * Positions (tail, free, cursors) are 64-bit byte counts that only
 * grow; offset in the ring = pos & (capacity - 1).
 */
#ifndef PINSHM_LAYOUT_H
#define PINSHM_LAYOUT_H

#include <assert.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PINSHM_CACHELINE 64
#define PINSHM_SEG_MAGIC 0x31304d48534e4950ull /* "PINSHM01" in memory order */
#define PINSHM_RECORD_ALIGN 16u
#define PINSHM_RECORD_HEADER 16u

/* Record states (low 4 bits of commit). */
enum record_state {
	REC_EMPTY = 0,     /* not yet written in this lap */
	REC_COMMITTED = 1, /* a message, ready */
	REC_PADDING = 2,   /* filler up to the end of the ring */
	REC_CLAIMED = 3,   /* shared queue: taken by consumer `owner` */
	REC_DONE = 4,      /* shared queue: consumed, room not yet reclaimed */
};

#define REC_TAG_SHIFT 12
#define REC_OWNER_SHIFT 4
#define REC_OWNER_MASK 0xffu
#define REC_STATE_MASK 0xfu

static inline uint64_t rec_word(uint64_t pos, unsigned owner, unsigned state)
{
	return (pos >> 4) << REC_TAG_SHIFT | (uint64_t)owner << REC_OWNER_SHIFT | state;
}

static inline int rec_tag_matches(uint64_t word, uint64_t pos)
{
	return (word >> REC_TAG_SHIFT) == ((pos >> 4) & (UINT64_MAX >> REC_TAG_SHIFT));
}

/* Whether @p word is a record of position @p pos (a zeroed word is not). */
static inline int rec_ready(uint64_t word, uint64_t pos)
{
	return rec_tag_matches(word, pos) && (word & REC_STATE_MASK) != REC_EMPTY;
}

static inline unsigned rec_state(uint64_t word) { return word & REC_STATE_MASK; }
static inline unsigned rec_owner(uint64_t word) { return (word >> REC_OWNER_SHIFT) & REC_OWNER_MASK; }

/** Bytes a record of payload @p len takes in the ring. */
static inline uint64_t rec_size(uint64_t len)
{
	return (PINSHM_RECORD_HEADER + len + PINSHM_RECORD_ALIGN - 1) & ~(uint64_t)(PINSHM_RECORD_ALIGN - 1);
}

struct record_header {
	_Atomic uint64_t commit; /* state word, see above; written last (release) */
	_Atomic uint32_t len;    /* payload bytes (padding: bytes after the header) */
	_Atomic uint32_t seq;    /* per-lane message number, low 32 bits (topic loss counting) */
};
static_assert(sizeof(struct record_header) == PINSHM_RECORD_HEADER, "record header is 16 bytes");

/* Endpoint states. */
enum endpoint_state {
	EP_FREE = 0,   /* never used */
	EP_ACTIVE = 1, /* attached */
	EP_CLOSED = 2, /* detached cleanly */
	EP_DEAD = 3,   /* its process died; repaired by pinshm_segment_reap() */
};

/* Futex word and sleeper count of one kind of wait, on a line of their own. */
struct wait_line {
	alignas(PINSHM_CACHELINE) _Atomic uint32_t seq; /* futex word: bumped by every wake-up */
	_Atomic uint32_t sleepers;                      /* waiters that may sleep on seq */
};
static_assert(sizeof(struct wait_line) == PINSHM_CACHELINE, "one line");

struct seg_header {
	/* Line 0: geometry, written once by pinshm_segment_format(). */
	alignas(PINSHM_CACHELINE) uint64_t magic;
	uint32_t layout_version;
	uint32_t kind;          /* PINSHM_QUEUE or PINSHM_TOPIC */
	uint32_t flags;         /* PINSHM_OVERRUN */
	uint32_t max_message;   /* payload bytes */
	uint64_t capacity;      /* ring bytes per lane, power of two */
	uint32_t max_producers; /* lanes; endpoints 0..max_producers-1 */
	uint32_t max_consumers; /* endpoints max_producers.. */
	uint64_t segment_size;  /* bytes this geometry needs */
	/* Line 1: consumers waiting for messages (also eventfd-armed ones). */
	struct wait_line data;
	/* Line 2: producers waiting for room. */
	struct wait_line space;
	/* Line 3: bumped on every endpoint state change (attach, close, reap). */
	alignas(PINSHM_CACHELINE) _Atomic uint32_t endpoint_changes;
	/* Written by pinshmd only: 1 while it has unlocked the segment for
	 * want of use (working-set pinning), else 0.  A client reads it to ask
	 * for a relock (pinshm_channel_relock()); a hint, never trusted. */
	_Atomic uint32_t unlocked;
};
static_assert(offsetof(struct seg_header, unlocked) == 196, "pinning state beside endpoint_changes");
static_assert(offsetof(struct seg_header, data) == 64, "data wait line");
static_assert(offsetof(struct seg_header, space) == 128, "space wait line");
static_assert(sizeof(struct seg_header) == 256, "segment header is 4 lines");

struct endpoint {
	alignas(PINSHM_CACHELINE) _Atomic uint32_t state; /* enum endpoint_state */
	_Atomic uint32_t pid;                             /* informational: attaching process, its own view */
	_Atomic uint32_t armed;                           /* consumer: its eventfd wants a write on the next message */
	_Atomic uint32_t generation;                      /* bumped on every attach */
	_Atomic uint32_t sleeping;                        /* wait lines it is counted on (SLEEPING_* of wait.h) */
	_Atomic uint64_t lost;                            /* subscriber: messages it lost (overrun), over every
							     attach of this endpoint; written by its holder only,
							     when it loses some (statistics: read, never trusted) */
};
static_assert(offsetof(struct endpoint, lost) == 24, "lost after the 32-bit words");
static_assert(sizeof(struct endpoint) == PINSHM_CACHELINE, "one line per endpoint");

struct lane_header {
	/* Producer line: written only by the lane's producer. */
	alignas(PINSHM_CACHELINE) _Atomic uint64_t tail; /* end of the last committed record (release) */
	_Atomic uint64_t last;                           /* start of the last committed record */
	_Atomic uint64_t messages;                       /* messages committed (its seq + 1) */
	_Atomic uint64_t reserve;                        /* end of the record being written: no reader is past it;
							    overrun topic: the 16 bytes after it are written too */
	/* Statistics, on the producer's own line: published with `messages`
	 * (bytes) or on the slow path (refused); read, never trusted. */
	_Atomic uint64_t bytes;                          /* payload bytes committed */
	_Atomic uint64_t refused;                        /* sends that found no room and gave up (-EAGAIN,
							    -ETIMEDOUT) */
	/* Consumer line. */
	alignas(PINSHM_CACHELINE) _Atomic uint64_t free; /* queue: room before this position is reusable */
};
static_assert(offsetof(struct lane_header, free) == 64, "consumer line");
static_assert(sizeof(struct lane_header) == 128, "lane header is 2 lines");

/* A topic cursor while its subscriber is joining: publishers keep their limit. */
#define TOPIC_CURSOR_UNSET UINT64_MAX

/* Offsets of the parts of a segment, derived from its geometry. */
struct seg_geometry {
	/* What sends and receives use first (one line with the start of a handle). */
	uint64_t capacity;
	uint64_t lanes_off;     /* first lane_header */
	uint64_t lane_stride;   /* lane header + ring */
	uint32_t kind, flags, max_message, max_producers, max_consumers;
	uint64_t endpoints_off; /* struct endpoint[max_producers + max_consumers] */
	uint64_t cursors_off;   /* topic: _Atomic uint64_t [max_consumers][cursor_stride] */
	uint64_t cursor_stride; /* lanes per subscriber block, rounded to whole lines */
	uint64_t size;          /* total */
};

#endif /* PINSHM_LAYOUT_H */
