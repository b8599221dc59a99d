/*
 * fuzz_ring.c - libFuzzer target: producers and consumers of a channel
 * whose shared bytes are under the fuzzer's control.
 *
 * Input: a control byte, then operations, one byte each plus operands.
 * The control byte picks the channel (4 KiB per lane, 2 producers): a
 * queue, a topic or an overrun topic, 1 or 2 consumers, and whether the
 * first 64 bytes of the segment (its geometry) may be written too.  The
 * channel is formatted afresh for each input; the operations then write
 * bytes anywhere in it (the header, endpoints, topic cursors, lane headers,
 * records), attach and close endpoints, send, reserve and commit, receive
 * by copy, in place and in batches, release, arm, reap: every call with
 * PINSHM_NONBLOCK.
 *
 * Invariants: no crash, no access outside the mapping (ASan, and the data
 * of a message received in place is checked to lie inside the handle's
 * mapping and is read whole), no hang (libFuzzer's -timeout), every call
 * returns 0 or one of the errors its contract documents, a message
 * received is no longer than max_message nor the buffer.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "channel.h"
#include "fuzz.h"
#include "layout.h"
#include "pinshm.h"

#define CAPACITY 4096u
#define PRODUCERS 2u
#define GEOMETRY_BYTES 64u /* line 0 of the header */
#define MAX_OPS 256u       /* per input: bounds the run time */

/* One formatted memfd per channel shape, made on first use and reused. */
struct shape {
	int fd;
	size_t size;
	uint8_t *base; /* the harness's own mapping */
	pinshm_channel_attr_t attr;
};

static struct shape shapes[3][2];
static int efd = -1;

struct cursor {
	const uint8_t *p;
	size_t left;
};

static unsigned next(struct cursor *c)
{
	if (c->left == 0)
		return 0;
	c->left--;
	return *c->p++;
}

static unsigned next16(struct cursor *c)
{
	unsigned lo = next(c);
	return lo | next(c) << 8;
}

struct consumer {
	pinshm_channel_t *ch;
	pinshm_msg_t held[PINSHM_MAX_HELD];
	unsigned nheld;
};

struct state {
	struct shape *s;
	bool geometry; /* the geometry may be written */
	pinshm_channel_t *prod[PRODUCERS];
	struct consumer cons[2];
	unsigned nconsumers;
	bool reserved[PRODUCERS];
	size_t resv_len[PRODUCERS];
};

static uint8_t payload[8192], rbuf[8192];
static volatile uint8_t sink;

static struct shape *shape_get(unsigned kind, unsigned consumers)
{
	struct shape *s = &shapes[kind][consumers - 1];

	if (s->base)
		return s;
	pinshm_channel_attr_init(&s->attr);
	s->attr.kind = kind == 0 ? PINSHM_QUEUE : PINSHM_TOPIC;
	s->attr.flags = kind == 2 ? PINSHM_OVERRUN : 0;
	s->attr.capacity = CAPACITY;
	s->attr.max_producers = PRODUCERS;
	s->attr.max_consumers = consumers;
	FUZZ_CHECK(pinshm_segment_size(&s->attr, &s->size) == 0);
	FUZZ_CHECK(pinshm_segment_create(&s->attr, &s->fd) == 0);
	s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	FUZZ_CHECK(s->base != MAP_FAILED);
	return s;
}

static bool is_one_of(int rc, const int *ok)
{
	for (; *ok; ok++)
		if (rc == *ok)
			return true;
	return rc == 0;
}

#define EXPECT(rc, ...)                                                                              \
	do {                                                                                         \
		static const int ok_[] = {__VA_ARGS__, 0};                                            \
		if (!is_one_of((rc), ok_)) {                                                         \
			fprintf(stderr, "%s:%d: undocumented return %d\n", __FILE__, __LINE__, (int)(rc)); \
			abort();                                                                     \
		}                                                                                    \
	} while (0)

/* The errors of a receive (pinshm_recv() and friends) with PINSHM_NONBLOCK. */
#define RECV_ERRORS -EAGAIN, -EPIPE, -EBADMSG, -EMSGSIZE, -ESTALE, -ENOBUFS, -EINVAL
#define SEND_ERRORS -EAGAIN, -EPIPE, -EBADMSG, -EMSGSIZE, -EINVAL

/* A message received in place: inside the handle's mapping, no longer
 * than max_message, and readable to its last byte. */
static void check_inplace(const pinshm_channel_t *ch, const pinshm_msg_t *m)
{
	const uint8_t *d = m->data, *lo = ch->base, *hi = ch->base + ch->map_size;
	uint8_t x = 0;

	FUZZ_CHECK(m->len <= ch->g.max_message);
	FUZZ_CHECK(d >= lo && d <= hi && m->len <= (size_t)(hi - d));
	for (size_t i = 0; i < m->len; i++)
		x ^= d[i];
	sink = x;
}

/* Write fuzz bytes into the segment, below GEOMETRY_BYTES only in the
 * geometry mode. */
static void write_bytes(struct state *st, size_t off, const uint8_t *src, size_t n)
{
	size_t size = st->s->size, floor = st->geometry ? 0 : GEOMETRY_BYTES;

	off = floor + off % (size - floor);
	if (n > size - off)
		n = size - off;
	memcpy(st->s->base + off, src, n);
}

static void attach_producer(struct state *st, unsigned i)
{
	if (st->prod[i])
		return;
	int rc = pinshm_channel_attach(st->s->fd, PINSHM_PRODUCER, &st->prod[i]);
	EXPECT(rc, -EPROTO, -EBADMSG, -EBUSY);
	if (rc != 0) {
		st->prod[i] = NULL;
		return;
	}
	pinshm_channel_set_spin(st->prod[i], 0);
	for (unsigned c = 0; c < st->nconsumers; c++)
		EXPECT(pinshm_channel_set_peer_fd(st->prod[i], PRODUCERS + c, efd), -EINVAL);
	st->reserved[i] = false;
}

static void attach_consumer(struct state *st, unsigned i)
{
	struct consumer *c = &st->cons[i];

	if (c->ch)
		return;
	int rc = pinshm_channel_attach(st->s->fd, PINSHM_CONSUMER, &c->ch);
	EXPECT(rc, -EPROTO, -EBADMSG, -EBUSY);
	if (rc != 0) {
		c->ch = NULL;
		return;
	}
	pinshm_channel_set_spin(c->ch, 0);
	FUZZ_CHECK(pinshm_channel_set_notify_fd(c->ch, efd) == 0);
	c->nheld = 0;
}

static void close_producer(struct state *st, unsigned i)
{
	if (st->prod[i])
		FUZZ_CHECK(pinshm_channel_close(st->prod[i]) == 0);
	st->prod[i] = NULL;
	st->reserved[i] = false;
}

static void close_consumer(struct state *st, unsigned i)
{
	if (st->cons[i].ch)
		FUZZ_CHECK(pinshm_channel_close(st->cons[i].ch) == 0);
	st->cons[i].ch = NULL;
	st->cons[i].nheld = 0;
}

/* Remember messages received in place, in order; the library holds at
 * most PINSHM_MAX_HELD, so this never overflows. */
static void hold(struct consumer *c, const pinshm_msg_t *m, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		check_inplace(c->ch, &m[k]);
		FUZZ_CHECK(c->nheld < PINSHM_MAX_HELD);
		c->held[c->nheld++] = m[k];
	}
}

static void op_send(struct state *st, struct cursor *in)
{
	unsigned i = next(in) & 1, len = next(in) * 9;
	pinshm_channel_t *ch = st->prod[i];

	if (ch) /* -EINVAL while a reservation is pending */
		EXPECT(pinshm_send(ch, payload, len, PINSHM_NONBLOCK), SEND_ERRORS);
}

static void op_send_batch(struct state *st, struct cursor *in)
{
	unsigned i = next(in) & 1, count = next(in) % 8;
	struct iovec v[8];
	pinshm_channel_t *ch = st->prod[i];

	if (!ch)
		return;
	for (unsigned k = 0; k < count; k++)
		v[k] = (struct iovec){payload, next(in) * 5};
	int rc = pinshm_send_batch(ch, v, count, PINSHM_NONBLOCK);
	FUZZ_CHECK(rc <= (int)count);
	if (rc < 0)
		EXPECT(rc, SEND_ERRORS);
}

static void op_reserve(struct state *st, struct cursor *in)
{
	unsigned i = next(in) & 1, len = next(in) * 9, what = next(in);
	pinshm_channel_t *ch = st->prod[i];
	void *buf;

	if (!ch)
		return;
	if (!st->reserved[i]) {
		int rc = pinshm_reserve(ch, len, &buf, PINSHM_NONBLOCK);
		EXPECT(rc, SEND_ERRORS);
		if (rc == 0) {
			memset(buf, (int)what, len); /* the whole reservation is ours */
			st->reserved[i] = true;
			st->resv_len[i] = len;
		}
		return;
	}
	if (what & 1) {
		FUZZ_CHECK(pinshm_abort(ch) == 0);
	} else {
		size_t n = st->resv_len[i] - (what >> 2) % (st->resv_len[i] + 1);
		EXPECT(pinshm_commit(ch, n, (what & 2) ? PINSHM_MORE : 0), -EINVAL, -EBADMSG);
	}
	st->reserved[i] = false;
}

static void op_recv(struct state *st, struct cursor *in)
{
	struct consumer *c = &st->cons[next(in) & 1];
	size_t cap = next(in) * 9, len = SIZE_MAX;

	if (!c->ch)
		return;
	int rc = pinshm_recv(c->ch, rbuf, cap, &len, PINSHM_NONBLOCK);
	EXPECT(rc, RECV_ERRORS);
	if (rc == 0)
		FUZZ_CHECK(len <= cap && len <= c->ch->g.max_message);
	if (rc == -EMSGSIZE)
		FUZZ_CHECK(len > cap && len <= c->ch->g.max_message);
}

static void op_recv_inplace(struct state *st, struct cursor *in)
{
	struct consumer *c = &st->cons[next(in) & 1];
	pinshm_msg_t m;

	if (!c->ch)
		return;
	int rc = pinshm_recv_inplace(c->ch, &m, PINSHM_NONBLOCK);
	EXPECT(rc, RECV_ERRORS);
	if (rc == 0)
		hold(c, &m, 1);
}

static void op_recv_batch(struct state *st, struct cursor *in)
{
	struct consumer *c = &st->cons[next(in) & 1];
	unsigned max = next(in) % 8 + 1;
	pinshm_msg_t m[8];

	if (!c->ch)
		return;
	int rc = pinshm_recv_batch(c->ch, m, max, PINSHM_NONBLOCK);
	FUZZ_CHECK(rc <= (int)max && rc != 0);
	if (rc < 0)
		EXPECT(rc, RECV_ERRORS);
	else
		hold(c, m, (unsigned)rc);
}

static void op_release(struct state *st, struct cursor *in)
{
	struct consumer *c = &st->cons[next(in) & 1];
	unsigned k = next(in);

	if (!c->ch)
		return;
	if (c->nheld == 0 || k == 0xff) {
		/* A message this handle does not hold. */
		pinshm_msg_t bogus = {.data = rbuf, .len = 1, .priv = {k, k << 8}};
		EXPECT(pinshm_release(c->ch, &bogus), -EINVAL, -EBADMSG, -ESTALE);
		return;
	}
	k %= c->nheld;
	EXPECT(pinshm_release(c->ch, &c->held[k]), -EINVAL, -EBADMSG, -ESTALE);
	/* Released with every message received before it. */
	memmove(c->held, c->held + k + 1, (c->nheld - k - 1) * sizeof(c->held[0]));
	c->nheld -= k + 1;
}

static void op_arm(struct state *st, struct cursor *in)
{
	struct consumer *c = &st->cons[next(in) & 1];
	uint64_t v;

	if (!c->ch)
		return;
	EXPECT(pinshm_channel_arm(c->ch), -EAGAIN, -EPIPE, -EBADMSG);
	if (read(efd, &v, sizeof(v)) < 0) /* clear it; EAGAIN when nothing came */
		sink = 0;
}

static void op_info(struct state *st, struct cursor *in)
{
	unsigned who = next(in) % (PRODUCERS + 2);
	pinshm_channel_t *ch = who < PRODUCERS ? st->prod[who] : st->cons[who - PRODUCERS].ch;
	pinshm_channel_info_t info;

	if (ch)
		EXPECT(pinshm_channel_info(ch, &info), -EBADMSG);
}

static void op_reap(struct state *st, struct cursor *in)
{
	unsigned e = next(in) % (PRODUCERS + st->nconsumers + 1);

	/* The daemon's repair, on the harness's own mapping: of an endpoint
	 * nobody holds, or of one a handle here still uses (a hostile reap). */
	EXPECT(pinshm_segment_reap(st->s->base, st->s->size, e), -EINVAL, -EPROTO, -EBADMSG);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cursor in = {data, size};
	struct state st = {0};

	if (efd < 0) {
		efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		FUZZ_CHECK(efd >= 0);
		for (size_t i = 0; i < sizeof(payload); i++)
			payload[i] = (uint8_t)(i * 131 + 7);
	}
	unsigned ctl = next(&in);
	st.nconsumers = 1 + ((ctl >> 2) & 1);
	st.geometry = (ctl >> 3) & 1;
	st.s = shape_get(ctl % 4 == 3 ? 0 : ctl % 4, st.nconsumers);
	FUZZ_CHECK(pinshm_segment_format(st.s->base, st.s->size, &st.s->attr) == 0);

	for (unsigned n = 0; n < MAX_OPS && in.left > 0; n++) {
		unsigned op = next(&in);
		switch (op % 16) {
		case 0: { /* write up to 32 bytes */
			size_t off = next16(&in), len = next(&in) % 33;
			if (len > in.left)
				len = in.left;
			write_bytes(&st, off, in.p, len);
			in.p += len;
			in.left -= len;
			break;
		}
		case 1: { /* write one 64-bit word, aligned */
			size_t off = next16(&in) & ~(size_t)7;
			uint8_t w[8];
			for (unsigned k = 0; k < 8; k++)
				w[k] = (uint8_t)next(&in);
			write_bytes(&st, off, w, 8);
			break;
		}
		case 2:
			attach_producer(&st, next(&in) & 1);
			break;
		case 3: {
			unsigned i = next(&in) & 1;
			if (i < st.nconsumers)
				attach_consumer(&st, i);
			break;
		}
		case 4:
			op_send(&st, &in);
			break;
		case 5:
			op_send_batch(&st, &in);
			break;
		case 6:
			op_reserve(&st, &in);
			break;
		case 7:
			op_recv(&st, &in);
			break;
		case 8:
			op_recv_inplace(&st, &in);
			break;
		case 9:
			op_recv_batch(&st, &in);
			break;
		case 10:
			op_release(&st, &in);
			break;
		case 11:
			op_arm(&st, &in);
			break;
		case 12: {
			unsigned who = next(&in) % (PRODUCERS + 2);
			if (who < PRODUCERS)
				close_producer(&st, who);
			else
				close_consumer(&st, who - PRODUCERS);
			break;
		}
		case 13: {
			unsigned i = next(&in) & 1;
			if (st.prod[i])
				FUZZ_CHECK(pinshm_flush(st.prod[i]) == 0);
			break;
		}
		case 14:
			op_info(&st, &in);
			break;
		case 15:
			op_reap(&st, &in);
			break;
		}
	}
	for (unsigned i = 0; i < PRODUCERS; i++)
		close_producer(&st, i);
	for (unsigned i = 0; i < 2; i++)
		close_consumer(&st, i);
	return 0;
}
