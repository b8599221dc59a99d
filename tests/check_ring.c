/*
 * check_ring.c - unit tests of the rings of libpinshm, in one process:
 * producer and consumer handles of the same channel side by side.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "channel.h"
#include "layout.h"
#include "pinshm.h"
#include "seg.h"
#include "testutil.h"
#include "wait.h"

#define KiB 1024u
#define MiB (1024u * KiB)

static uint8_t sbuf[64 * 1024];
static uint8_t rbuf[64 * 1024];

/* Send @p len bytes of pattern @p seed, without waiting; fail unless @p want. */
static void send_pat_rc(pinshm_channel_t *p, size_t len, uint64_t seed, int want)
{
	ck_assert_uint_le(len, sizeof(sbuf));
	tu_pattern(sbuf, len, seed);
	TU_RC(pinshm_send(p, sbuf, len, PINSHM_NONBLOCK), want);
}

static void send_pat(pinshm_channel_t *p, size_t len, uint64_t seed) { send_pat_rc(p, len, seed, 0); }

/* Receive (copy) the next message and check it is @p len bytes of pattern @p seed. */
static void recv_pat(pinshm_channel_t *c, size_t len, uint64_t seed)
{
	size_t got = (size_t)-1;
	long bad;

	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &got, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(got, len);
	bad = tu_pattern_bad(rbuf, got, seed);
	ck_assert_msg(bad < 0, "message (len %zu seed %llu): bad byte at %ld", len, (unsigned long long)seed, bad);
}

/* Receive in place, check, and release. */
static void recv_pat_inplace(pinshm_channel_t *c, size_t len, uint64_t seed)
{
	pinshm_msg_t m;
	long bad;

	memset(&m, 0, sizeof(m));
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(m.len, len);
	ck_assert_msg(((uintptr_t)m.data & 15u) == 0, "in-place data %p not 16-byte aligned", m.data);
	bad = tu_pattern_bad(m.data, m.len, seed);
	ck_assert_msg(bad < 0, "message (len %zu seed %llu): bad byte at %ld", len, (unsigned long long)seed, bad);
	TU_RC(pinshm_release(c, &m), 0);
}

/* Reserve, write pattern in place and commit. */
static void reserve_pat(pinshm_channel_t *p, size_t len, uint64_t seed)
{
	void *buf = NULL;

	TU_RC(pinshm_reserve(p, len, &buf, PINSHM_NONBLOCK), 0);
	ck_assert_ptr_nonnull(buf);
	ck_assert_msg(((uintptr_t)buf & 15u) == 0, "reservation %p not 16-byte aligned", buf);
	tu_pattern(buf, len, seed);
	TU_RC(pinshm_commit(p, len, 0), 0);
}

static void expect_empty(pinshm_channel_t *c)
{
	size_t got;

	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &got, PINSHM_NONBLOCK), -EAGAIN);
}

/* Send pattern messages of @p len until the send fails with @p end (or, if
 * @p end2 is not 0, with @p end2); @return how many were sent. */
static unsigned fill_until(pinshm_channel_t *p, size_t len, uint64_t seed0, unsigned limit, int end, int end2)
{
	unsigned n = 0;

	for (;;) {
		int rc;

		tu_pattern(sbuf, len, seed0 + n);
		rc = pinshm_send(p, sbuf, len, PINSHM_NONBLOCK);
		if (rc == end || (end2 && rc == end2))
			break;
		ck_assert_msg(rc == 0, "send #%u: %d (%s)", n, rc, pinshm_strerror(rc));
		n++;
		ck_assert_msg(n <= limit, "sent %u messages of %zu bytes without the ring filling up", n, len);
	}
	return n;
}

/* Send until the ring is full (-EAGAIN); @return how many were sent. */
static unsigned fill(pinshm_channel_t *p, size_t len, uint64_t seed0, unsigned limit)
{
	return fill_until(p, len, seed0, limit, -EAGAIN, 0);
}

/* The ring of capacity @p cap holds @p n records of @p len: plausible? */
static void check_fill_count(unsigned n, uint64_t cap, size_t len)
{
	uint64_t r = rec_size(len);

	ck_assert_msg(n * r <= cap, "%u records of %llu bytes cannot fit in %llu", n, (unsigned long long)r,
		      (unsigned long long)cap);
	ck_assert_msg(n * r + 16 + 2 * r >= cap, "only %u records of %llu bytes fit in %llu (too much waste)", n,
		      (unsigned long long)r, (unsigned long long)cap);
}

struct pair {
	int fd;
	pinshm_channel_t *p, *c;
};

static struct pair pair_open(pinshm_kind_t kind, uint64_t cap)
{
	struct pair pr;

	pr.fd = tu_channel(kind, cap, 1, 1);
	pr.p = tu_attach(pr.fd, PINSHM_PRODUCER);
	pr.c = tu_attach(pr.fd, PINSHM_CONSUMER);
	return pr;
}

static void close_all(int fd, ...) __attribute__((sentinel));

/* Close the handles that follow @p fd, up to a NULL, each successfully; then @p fd. */
static void close_all(int fd, ...)
{
	pinshm_channel_t *h;
	va_list ap;

	va_start(ap, fd);
	while ((h = va_arg(ap, pinshm_channel_t *)) != NULL)
		TU_RC(pinshm_channel_close(h), 0);
	va_end(ap);
	close(fd);
}

static void pair_close(struct pair *pr)
{
	close_all(pr->fd, pr->p, pr->c, NULL);
}

/* An overrun topic of capacity @p cap, one publisher, up to @p subscribers. @return its descriptor. */
static int overrun_topic(uint64_t cap, unsigned subscribers)
{
	pinshm_channel_attr_t attr;

	tu_attr(&attr, PINSHM_TOPIC, cap, 1, subscribers);
	attr.flags = PINSHM_OVERRUN;
	return tu_create(&attr);
}

/* ======================================================================== */
/* core                                                                      */
/* ======================================================================== */

START_TEST(test_version)
{
	char want[32];
	const int errs[] = {-EAGAIN, -ETIMEDOUT, -EMSGSIZE, -EPIPE, -EBADMSG, -EPROTO, -EBUSY, -EINVAL, -ESTALE, -ENOBUFS};

	snprintf(want, sizeof(want), "%d.%d.%d", PINSHM_VERSION_MAJOR, PINSHM_VERSION_MINOR, PINSHM_VERSION_PATCH);
	ck_assert_ptr_nonnull(pinshm_version());
	ck_assert_str_eq(pinshm_version(), want);
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		const char *s = pinshm_strerror(errs[i]);
		ck_assert_ptr_nonnull(s);
		ck_assert_msg(s[0] != '\0', "pinshm_strerror(%d) is empty", errs[i]);
		for (size_t j = 0; j < i; j++)
			ck_assert_msg(strcmp(s, pinshm_strerror(errs[j])) != 0, "errors %d and %d read the same: %s",
				      errs[i], errs[j], s);
	}
}
END_TEST

START_TEST(test_empty)
{
	struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
	pinshm_msg_t m[4];
	size_t len;

	TU_RC(pinshm_recv(pr.c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_recv(pr.c, rbuf, sizeof(rbuf), &len, 20), -ETIMEDOUT);
	TU_RC(pinshm_recv_inplace(pr.c, &m[0], PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_recv_inplace(pr.c, &m[0], 20), -ETIMEDOUT);
	TU_RC(pinshm_recv_batch(pr.c, m, 4, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_recv_batch(pr.c, m, 4, 20), -ETIMEDOUT);
	/* Still works afterwards. */
	send_pat(pr.p, 10, 1);
	recv_pat(pr.c, 10, 1);
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

START_TEST(test_full)
{
	const uint64_t cap = 4 * KiB;
	struct pair pr = pair_open(PINSHM_QUEUE, cap);
	unsigned n, n2;
	void *buf;
	struct iovec iov = {.iov_base = sbuf, .iov_len = 64};

	n = fill(pr.p, 64, 1000, 1000);
	check_fill_count(n, cap, 64);
	/* Every way of sending says the same. */
	TU_RC(pinshm_reserve(pr.p, 64, &buf, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_send_batch(pr.p, &iov, 1, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_send(pr.p, sbuf, 64, PINSHM_NONBLOCK), -EAGAIN);
	for (unsigned i = 0; i < n; i++)
		recv_pat(pr.c, 64, 1000 + i);
	expect_empty(pr.c);
	/* Second lap, starting elsewhere in the ring. */
	n2 = fill(pr.p, 64, 5000, 1000);
	check_fill_count(n2, cap, 64);
	for (unsigned i = 0; i < n2; i++)
		recv_pat(pr.c, 64, 5000 + i);
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

START_TEST(test_full_sizes)
{
	/* Fill and drain with records of several sizes, several laps each. */
	const uint64_t cap = 4 * KiB;
	const size_t sizes[] = {0, 1, 16, 17, 100, 500, 1000, 2016};
	struct pair pr = pair_open(PINSHM_QUEUE, cap);

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		if (sizes[s] == tu_max_message(cap)) { /* a fresh ring, at 0 */
			pair_close(&pr);
			pr = pair_open(PINSHM_QUEUE, cap);
		}
		for (unsigned lap = 0; lap < 3; lap++) {
			uint64_t seed = s * 100000 + lap * 1000;
			unsigned n = fill(pr.p, sizes[s], seed, 1000);

			ck_assert_msg(n >= 1, "size %zu lap %u: nothing fitted in an empty ring", sizes[s], lap);
			if (lap == 0 && sizes[s] == tu_max_message(cap))
				ck_assert_msg(n == 2, "two max_message records fit in an empty ring at 0, not %u", n);
			else
				check_fill_count(n, cap, sizes[s]);
			for (unsigned i = 0; i < n; i++)
				recv_pat(pr.c, sizes[s], seed + i);
			expect_empty(pr.c);
		}
	}
	pair_close(&pr);
}
END_TEST

/* For each start offset in a 4 KiB ring: move the ring there, then send and
 * receive messages that wrap around its end, then fill it there and drain it. */
START_TEST(test_wrap_every_offset)
{
	const uint64_t cap = 4 * KiB;
	const size_t maxm = tu_max_message(cap);
	const size_t lens[] = {0, 1, 15, 16, 17, 31, 32, 33, 100, 255, 256, 500, 1000, 1500, 2000, 2016};

	for (uint64_t off = 0; off < cap; off += 16) {
		struct pair pr = pair_open(PINSHM_QUEUE, cap);
		bool zc = (off / 16) % 2 == 1; /* odd offsets: zero-copy calls */
		uint64_t left = off;
		unsigned k = 0;

		/* Advance: records whose sizes add up to exactly `off`. */
		while (left) {
			uint64_t chunk = left > 1024 ? 1024 : left;
			send_pat(pr.p, chunk - 16, off * 7 + k);
			recv_pat(pr.c, chunk - 16, off * 7 + k);
			left -= chunk;
			k++;
		}
		/* One by one, three rounds of every length (about 6 laps). */
		for (unsigned round = 0; round < 3; round++) {
			for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
				size_t len = lens[i] > maxm ? maxm : lens[i];
				uint64_t seed = off << 20 | round << 8 | i;

				if (zc) {
					reserve_pat(pr.p, len, seed);
					recv_pat_inplace(pr.c, len, seed);
				} else {
					send_pat(pr.p, len, seed);
					recv_pat(pr.c, len, seed);
				}
			}
		}
		/* Two at a time, so that one is in flight across the end (up to
		 * 1000 bytes each, so that any padding plus both always fit). */
		for (size_t i = 0; i + 1 < sizeof(lens) / sizeof(lens[0]) && lens[i + 1] <= 1000; i++) {
			uint64_t seed = off << 20 | 0xf000 | i;
			send_pat(pr.p, lens[i], seed);
			send_pat(pr.p, lens[i + 1], seed + 1);
			recv_pat(pr.c, lens[i], seed);
			if (zc)
				recv_pat_inplace(pr.c, lens[i + 1], seed + 1);
			else
				recv_pat(pr.c, lens[i + 1], seed + 1);
		}
		/* The largest message fits in an empty ring wherever it stands. */
		send_pat(pr.p, maxm, off);
		recv_pat(pr.c, maxm, off);
		/* Full ring at this offset. */
		{
			size_t len = (size_t)((off * 7) % 300);
			unsigned n = fill(pr.p, len, off << 24, 1000);

			ck_assert_msg(n >= 1, "offset %llu: nothing fits", (unsigned long long)off);
			ck_assert_msg(n * rec_size(len) <= cap, "offset %llu: %u records of %zu overflow",
				      (unsigned long long)off, n, len);
			for (unsigned i = 0; i < n; i++) {
				if (zc && i % 2)
					recv_pat_inplace(pr.c, len, (off << 24) + i);
				else
					recv_pat(pr.c, len, (off << 24) + i);
			}
			expect_empty(pr.c);
		}
		pair_close(&pr);
	}
}
END_TEST

START_TEST(test_every_size)
{
	const uint64_t caps[] = {4 * KiB, 16 * KiB};
	const uint64_t cap = caps[_i];
	const size_t maxm = tu_max_message(cap);
	struct pair pr = pair_open(PINSHM_QUEUE, cap);
	pinshm_channel_info_t info;

	TU_RC(pinshm_channel_info(pr.c, &info), 0);
	ck_assert_uint_eq(info.max_message, maxm);
	for (size_t len = 0; len <= maxm; len++) {
		switch (len % 3) {
		case 0:
			send_pat(pr.p, len, len);
			recv_pat(pr.c, len, len);
			break;
		case 1:
			reserve_pat(pr.p, len, len);
			recv_pat_inplace(pr.c, len, len);
			break;
		default: {
			struct iovec iov = {.iov_base = sbuf, .iov_len = len};
			pinshm_msg_t m;
			tu_pattern(sbuf, len, len);
			TU_RC(pinshm_send_batch(pr.p, &iov, 1, PINSHM_NONBLOCK), 1);
			TU_RC(pinshm_recv_batch(pr.c, &m, 1, PINSHM_NONBLOCK), 1);
			ck_assert_uint_eq(m.len, len);
			ck_assert_int_lt(tu_pattern_bad(m.data, m.len, len), 0);
			TU_RC(pinshm_release(pr.c, &m), 0);
			break;
		}
		}
	}
	/* And with a receive buffer of exactly the message's size. */
	for (size_t len = 0; len <= maxm; len += 97) {
		size_t got;
		send_pat(pr.p, len, ~len);
		TU_RC(pinshm_recv(pr.c, rbuf, len, &got, PINSHM_NONBLOCK), 0);
		ck_assert_uint_eq(got, len);
		ck_assert_int_lt(tu_pattern_bad(rbuf, got, ~len), 0);
	}
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

/* Messages longer than the pieces a send copies them in (produce.c
 * copy_in()): every byte arrives, at every length around a piece's end,
 * through pinshm_send() and pinshm_send_batch(). */
START_TEST(test_long_messages)
{
	const uint64_t cap = 4 * MiB;
	const size_t piece = 256 * KiB;
	const size_t lens[] = {piece - 1, piece, piece + 1, piece + 16, 2 * piece + 17, 3 * piece - 5,
			       4 * piece, 4 * piece + 40};
	struct pair pr = pair_open(PINSHM_QUEUE, cap);
	uint8_t *out = malloc(4 * piece + 64), *in = malloc(4 * piece + 64);

	ck_assert_ptr_nonnull(out);
	ck_assert_ptr_nonnull(in);
	for (unsigned lap = 0; lap < 3; lap++) {
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			size_t len = lens[i], got = 0;
			uint64_t seed = lap << 8 | i;
			struct iovec iov = {.iov_base = out, .iov_len = len};

			tu_pattern(out, len, seed);
			if ((lap + i) % 2)
				TU_RC(pinshm_send_batch(pr.p, &iov, 1, PINSHM_NONBLOCK), 1);
			else
				TU_RC(pinshm_send(pr.p, out, len, PINSHM_NONBLOCK), 0);
			TU_RC(pinshm_recv(pr.c, in, 4 * piece + 64, &got, PINSHM_NONBLOCK), 0);
			ck_assert_uint_eq(got, len);
			long bad = tu_pattern_bad(in, got, seed);
			ck_assert_msg(bad < 0, "message of %zu bytes: bad byte at %ld", len, bad);
		}
	}
	expect_empty(pr.c);
	free(out);
	free(in);
	pair_close(&pr);
}
END_TEST

START_TEST(test_too_large)
{
	const uint64_t cap = 4 * KiB;
	const size_t maxm = tu_max_message(cap);
	struct pair pr = pair_open(PINSHM_QUEUE, cap);
	struct iovec iov[2];
	void *buf;
	size_t len;
	pinshm_msg_t m;

	TU_RC(pinshm_send(pr.p, sbuf, maxm + 1, PINSHM_NONBLOCK), -EMSGSIZE);
	TU_RC(pinshm_send(pr.p, sbuf, SIZE_MAX, PINSHM_NONBLOCK), -EMSGSIZE);
	TU_RC(pinshm_send(pr.p, sbuf, (size_t)1 << 33, PINSHM_NONBLOCK), -EMSGSIZE);
	TU_RC(pinshm_reserve(pr.p, maxm + 1, &buf, PINSHM_NONBLOCK), -EMSGSIZE);
	TU_RC(pinshm_reserve(pr.p, SIZE_MAX, &buf, PINSHM_NONBLOCK), -EMSGSIZE);
	iov[0].iov_base = sbuf;
	iov[0].iov_len = maxm + 1;
	TU_RC(pinshm_send_batch(pr.p, iov, 1, PINSHM_NONBLOCK), -EMSGSIZE);
	expect_empty(pr.c);

	/* A partial batch: the first message goes, the too large second does not. */
	tu_pattern(sbuf, 40, 7);
	iov[0].iov_len = 40;
	iov[1].iov_base = sbuf + 1024;
	iov[1].iov_len = maxm + 1;
	TU_RC(pinshm_send_batch(pr.p, iov, 2, PINSHM_NONBLOCK), 1);
	recv_pat(pr.c, 40, 7);
	expect_empty(pr.c);

	/* max_message itself is fine. */
	send_pat(pr.p, maxm, 8);
	recv_pat(pr.c, maxm, 8);

	/* A receive buffer too small: -EMSGSIZE, the needed length, message kept. */
	send_pat(pr.p, 100, 9);
	send_pat(pr.p, 0, 10);
	len = 0;
	TU_RC(pinshm_recv(pr.c, rbuf, 99, &len, PINSHM_NONBLOCK), -EMSGSIZE);
	ck_assert_uint_eq(len, 100);
	len = 0;
	TU_RC(pinshm_recv(pr.c, rbuf, 0, &len, PINSHM_NONBLOCK), -EMSGSIZE);
	ck_assert_uint_eq(len, 100);
	TU_RC(pinshm_recv(pr.c, rbuf, 100, &len, 20), 0);
	ck_assert_uint_eq(len, 100);
	ck_assert_int_lt(tu_pattern_bad(rbuf, 100, 9), 0);
	/* A zero-length message fits a zero-length buffer. */
	len = 1;
	TU_RC(pinshm_recv(pr.c, rbuf, 0, &len, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(len, 0);
	expect_empty(pr.c);

	/* In place, a too small buffer is not an issue. */
	send_pat(pr.p, 1000, 11);
	TU_RC(pinshm_recv(pr.c, rbuf, 10, &len, PINSHM_NONBLOCK), -EMSGSIZE);
	ck_assert_uint_eq(len, 1000);
	TU_RC(pinshm_recv_inplace(pr.c, &m, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(m.len, 1000);
	ck_assert_int_lt(tu_pattern_bad(m.data, m.len, 11), 0);
	TU_RC(pinshm_release(pr.c, &m), 0);
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

/* A zero-length message into no buffer at all (NULL, 0), like read(fd, NULL, 0). */
START_TEST(test_recv_null_zero)
{
	struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
	size_t len = 1;

	send_pat(pr.p, 0, 1);
	send_pat(pr.p, 5, 2);
	TU_RC(pinshm_recv(pr.c, NULL, 0, &len, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(len, 0);
	TU_RC(pinshm_recv(pr.c, NULL, 0, &len, PINSHM_NONBLOCK), -EMSGSIZE);
	ck_assert_uint_eq(len, 5);
	recv_pat(pr.c, 5, 2);
	pair_close(&pr);
}
END_TEST

START_TEST(test_zero_copy_mixed)
{
	struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
	void *b = NULL, *b2 = NULL;
	pinshm_msg_t m1, m2;
	size_t len;

	TU_RC(pinshm_reserve(pr.p, 100, &b, PINSHM_NONBLOCK), 0);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq((uintptr_t)b & 15u, 0);
	/* One reservation at a time; no send meanwhile. */
	TU_RC(pinshm_send(pr.p, sbuf, 10, PINSHM_NONBLOCK), -EINVAL);
	TU_RC(pinshm_reserve(pr.p, 10, &b2, PINSHM_NONBLOCK), -EINVAL);
	{
		struct iovec iov = {.iov_base = sbuf, .iov_len = 10};
		TU_RC(pinshm_send_batch(pr.p, &iov, 1, PINSHM_NONBLOCK), -EINVAL);
	}
	/* Nothing visible before the commit. */
	expect_empty(pr.c);
	tu_pattern(b, 60, 1);
	TU_RC(pinshm_commit(pr.p, 101, 0), -EINVAL); /* more than reserved */
	TU_RC(pinshm_commit(pr.p, 60, 0), 0);
	TU_RC(pinshm_commit(pr.p, 10, 0), -EINVAL); /* nothing reserved */
	TU_RC(pinshm_abort(pr.p), -EINVAL);

	send_pat(pr.p, 33, 2);
	TU_RC(pinshm_reserve(pr.p, 50, &b, PINSHM_NONBLOCK), 0);
	tu_pattern(b, 50, 3);
	TU_RC(pinshm_commit(pr.p, 50, PINSHM_MORE), 0);
	reserve_pat(pr.p, 0, 4); /* zero-length reservation */

	recv_pat(pr.c, 60, 1);
	TU_RC(pinshm_recv_inplace(pr.c, &m1, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(m1.len, 33);
	/* A copy receive while one is held in place. */
	recv_pat(pr.c, 50, 3);
	TU_RC(pinshm_recv_inplace(pr.c, &m2, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(m2.len, 0);
	ck_assert_int_lt(tu_pattern_bad(m1.data, m1.len, 2), 0);
	TU_RC(pinshm_release(pr.c, &m1), 0);
	TU_RC(pinshm_release(pr.c, &m1), -EINVAL);
	TU_RC(pinshm_release(pr.c, &m2), 0);
	TU_RC(pinshm_flush(pr.p), 0);
	expect_empty(pr.c);

	/* Abort drops the reservation: nothing published, no room lost. */
	for (unsigned i = 0; i < 1000; i++) {
		TU_RC(pinshm_reserve(pr.p, 1000 + i % 1000, &b, PINSHM_NONBLOCK), 0);
		memset(b, 0xee, 1000);
		TU_RC(pinshm_abort(pr.p), 0);
	}
	TU_RC(pinshm_abort(pr.p), -EINVAL);
	expect_empty(pr.c);
	send_pat(pr.p, 77, 5);
	recv_pat(pr.c, 77, 5);
	expect_empty(pr.c);
	check_fill_count(fill(pr.p, 64, 100, 1000), 4 * KiB, 64);

	/* Commit less than reserved, several times, interleaved with sends. */
	while (pinshm_recv(pr.c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK) == 0)
		;
	for (unsigned i = 0; i < 300; i++) {
		size_t want = (i * 37) % 700;
		TU_RC(pinshm_reserve(pr.p, 700, &b, PINSHM_NONBLOCK), 0);
		tu_pattern(b, want, 1000 + i);
		TU_RC(pinshm_commit(pr.p, want, i % 2 ? PINSHM_MORE : 0), 0);
		send_pat(pr.p, i % 50, 5000 + i);
		if (i % 3 == 0) {
			recv_pat_inplace(pr.c, want, 1000 + i);
			recv_pat(pr.c, i % 50, 5000 + i);
		} else {
			recv_pat(pr.c, want, 1000 + i);
			recv_pat_inplace(pr.c, i % 50, 5000 + i);
		}
	}
	TU_RC(pinshm_flush(pr.p), 0);
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

/*
 * Reservations longer than their message, the room past the message
 * written over (0xff bytes: no record's word of any lap) or, committed
 * with PINSHM_LEN_ONLY, left as it was, reservations written over and
 * dropped (pinshm_abort()), among sends of other sizes, one to
 * five messages ahead of the consumer, over many laps of a 4 KiB ring: a
 * queue (_i 0) and a topic (1).  Every message arrives whole, and the word
 * a consumer polls after the last one is 0 (the producer may zero it ahead
 * of time, and must zero it again where a reservation covered it:
 * src/produce.c zero_ahead()); a word left as 0xff would make the receive
 * after the last message fail as damage, not report -EAGAIN.
 */
START_TEST(test_commit_shorter)
{
	struct pair pr = pair_open(_i == 0 ? PINSHM_QUEUE : PINSHM_TOPIC, 4 * KiB);

	for (unsigned i = 0; i < 4000;) {
		unsigned ahead = i % 5 + 1, first = i;

		for (; i < first + ahead; i++) {
			size_t len = (i * 7) % 130, extra = (i * 13) % 200 + 1;
			bool len_only = i % 3 == 0;
			void *b = NULL;

			if (i % 7 == 0) { /* a reservation written over and dropped */
				TU_RC(pinshm_reserve(pr.p, 300, &b, PINSHM_NONBLOCK), 0);
				memset(b, 0xff, 300);
				TU_RC(pinshm_abort(pr.p), 0);
			}
			TU_RC(pinshm_reserve(pr.p, len + extra, &b, PINSHM_NONBLOCK), 0);
			if (!len_only)
				memset(b, 0xff, len + extra);
			tu_pattern(b, len, i);
			TU_RC(pinshm_commit(pr.p, len, len_only ? PINSHM_LEN_ONLY : 0), 0);
			send_pat(pr.p, i % 40, 100000 + i);
		}
		for (unsigned j = first; j < i; j++) {
			size_t len = (j * 7) % 130;
			if (j % 2)
				recv_pat(pr.c, len, j);
			else
				recv_pat_inplace(pr.c, len, j);
			recv_pat(pr.c, j % 40, 100000 + j);
		}
		expect_empty(pr.c);
	}
	pair_close(&pr);
}
END_TEST

/*
 * The word a producer zeroes ahead, where a next record of the same size
 * would end on a line (src/produce.c zero_ahead()), each round of four
 * 64-byte records (48-byte messages): one; one from a 200-byte reservation
 * written over (0xff) and committed short, whose end is that word; one
 * after a 300-byte reservation written over and dropped; one that ends on
 * the word zeroed ahead.  Each is received, and the word polled after it
 * must be 0: one left as 0xff, or a word of the lap before, would make the
 * receive fail as damage.  100 rounds: over 6 laps of a 4 KiB queue.
 */
START_TEST(test_zero_ahead_lines)
{
	struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);

	for (unsigned lap = 0; lap < 100; lap++) {
		void *b = NULL;

		send_pat(pr.p, 48, lap);
		TU_RC(pinshm_reserve(pr.p, 200, &b, PINSHM_NONBLOCK), 0);
		memset(b, 0xff, 200);
		tu_pattern(b, 48, 1000 + lap);
		TU_RC(pinshm_commit(pr.p, 48, 0), 0);
		recv_pat(pr.c, 48, lap);
		recv_pat_inplace(pr.c, 48, 1000 + lap);
		expect_empty(pr.c);
		TU_RC(pinshm_reserve(pr.p, 300, &b, PINSHM_NONBLOCK), 0);
		memset(b, 0xff, 300);
		TU_RC(pinshm_abort(pr.p), 0);
		send_pat(pr.p, 48, 2000 + lap);
		recv_pat(pr.c, 48, 2000 + lap);
		expect_empty(pr.c);
		send_pat(pr.p, 48, 3000 + lap);
		recv_pat(pr.c, 48, 3000 + lap);
		expect_empty(pr.c);
	}
	pair_close(&pr);
}
END_TEST

/*
 * Records of one size that fill the ring exactly, each lap at the same
 * places (1008-byte messages, 1024-byte records: 4 in 4 KiB; 1200-byte
 * ones, 1216: 3 a lap and padding): as many stay in flight after every
 * release as fitted in the empty ring, the last one ending where the
 * oldest unreleased record begins, a lap on, and the word after it left
 * as that record's (src/produce.c lap_word_is_empty()); a consumer that
 * caught up takes that word for nothing yet, not damage.  A queue (_i 0)
 * and a topic (1); copied and in place.
 */
START_TEST(test_exact_fit)
{
	const size_t lens[] = {1008, 1200};

	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		struct pair pr = pair_open(_i == 0 ? PINSHM_QUEUE : PINSHM_TOPIC, 4 * KiB);
		uint64_t seed = 0, next = 0;
		unsigned n = fill(pr.p, lens[l], seed, 100);

		seed += n;
		ck_assert_uint_eq(n, 4 * KiB / rec_size(lens[l]));
		for (unsigned round = 0; round < 50; round++) {
			if (round % 2)
				recv_pat(pr.c, lens[l], next++);
			else
				recv_pat_inplace(pr.c, lens[l], next++);
			unsigned more = fill(pr.p, lens[l], seed, 100);
			ck_assert_msg(more == 1, "len %zu round %u: %u sent after one release, not 1", lens[l], round,
				      more);
			seed += more;
		}
		while (next < seed)
			recv_pat(pr.c, lens[l], next++);
		expect_empty(pr.c);
		send_pat(pr.p, lens[l], seed);
		recv_pat(pr.c, lens[l], seed);
		expect_empty(pr.c);
		pair_close(&pr);
	}
}
END_TEST

/*
 * A receive looks only at the lanes up to the last whose producer ever
 * attached (consume.c live_lanes()): producers that attach later, to the
 * next lane and to the last, after the consumer has received from the
 * first, are received from at once, and so is a lane whose producer has
 * left.
 */
START_TEST(test_lanes_attach_late)
{
	int fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 4, 1);
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER), *p[4];

	expect_empty(c);
	p[0] = tu_attach(fd, PINSHM_PRODUCER);
	send_pat(p[0], 10, 1);
	recv_pat(c, 10, 1);
	expect_empty(c);
	for (unsigned i = 1; i < 4; i++) {
		p[i] = tu_attach(fd, PINSHM_PRODUCER);
		send_pat(p[i], 10, 10 + i);
		recv_pat(c, 10, 10 + i);
		expect_empty(c);
	}
	send_pat(p[3], 20, 30);
	TU_RC(pinshm_channel_close(p[3]), 0);
	recv_pat_inplace(c, 20, 30);
	expect_empty(c);
	for (unsigned i = 0; i < 3; i++)
		TU_RC(pinshm_channel_close(p[i]), 0);
	TU_RC(pinshm_channel_close(c), 0);
	close(fd);
}
END_TEST

START_TEST(test_release_order)
{
	struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
	pinshm_msg_t m[5], bogus;

	for (unsigned i = 0; i < 5; i++)
		send_pat(pr.p, 20 + i, 100 + i);
	for (unsigned i = 0; i < 5; i++) {
		TU_RC(pinshm_recv_inplace(pr.c, &m[i], PINSHM_NONBLOCK), 0);
		ck_assert_uint_eq(m[i].len, 20 + i);
	}
	for (unsigned i = 0; i < 5; i++)
		ck_assert_int_lt(tu_pattern_bad(m[i].data, m[i].len, 100 + i), 0);
	memset(&bogus, 0xff, sizeof(bogus));
	TU_RC(pinshm_release(pr.c, &bogus), -EINVAL);
	bogus = m[1];
	bogus.priv[0] ^= 16; /* the identity of no held message */
	TU_RC(pinshm_release(pr.c, &bogus), -EINVAL);
	/* Releasing the third releases the first two as well. */
	TU_RC(pinshm_release(pr.c, &m[2]), 0);
	TU_RC(pinshm_release(pr.c, &m[0]), -EINVAL);
	TU_RC(pinshm_release(pr.c, &m[1]), -EINVAL);
	TU_RC(pinshm_release(pr.c, &m[2]), -EINVAL);
	/* The last two are still held and intact. */
	ck_assert_int_lt(tu_pattern_bad(m[3].data, m[3].len, 103), 0);
	ck_assert_int_lt(tu_pattern_bad(m[4].data, m[4].len, 104), 0);
	TU_RC(pinshm_release(pr.c, &m[3]), 0);
	TU_RC(pinshm_release(pr.c, &m[4]), 0);
	TU_RC(pinshm_release(pr.c, &m[4]), -EINVAL);
	/* A producer handle holds nothing. */
	TU_RC(pinshm_release(pr.p, &m[4]), -EINVAL);
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

/* Messages held in place keep their room: the producer cannot overwrite them. */
START_TEST(test_held_keeps_room)
{
	const uint64_t cap = 4 * KiB;
	struct pair pr = pair_open(PINSHM_QUEUE, cap);
	pinshm_msg_t m[64];
	unsigned n = fill(pr.p, 100, 0, 64), more;

	check_fill_count(n, cap, 100);
	for (unsigned i = 0; i < n; i++)
		TU_RC(pinshm_recv_inplace(pr.c, &m[i], PINSHM_NONBLOCK), 0);
	expect_empty(pr.c);
	send_pat_rc(pr.p, 100, 999, -EAGAIN);
	/* Release the first half: room for about half comes back. */
	TU_RC(pinshm_release(pr.c, &m[n / 2 - 1]), 0);
	more = fill(pr.p, 100, 1000, 64);
	ck_assert_msg(more >= 1 && more <= n / 2 + 1, "after releasing %u of %u, %u more fitted", n / 2, n, more);
	/* The messages still held were not overwritten. */
	for (unsigned i = n / 2; i < n; i++) {
		ck_assert_uint_eq(m[i].len, 100);
		ck_assert_msg(tu_pattern_bad(m[i].data, 100, i) < 0, "held message %u overwritten", i);
	}
	TU_RC(pinshm_release(pr.c, &m[n - 1]), 0);
	for (unsigned i = 0; i < more; i++)
		recv_pat(pr.c, 100, 1000 + i);
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

START_TEST(test_hold_limit)
{
	struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
	pinshm_msg_t m[66];

	for (unsigned i = 0; i < 66; i++)
		send_pat(pr.p, 0, i);
	for (unsigned i = 0; i < 64; i++)
		TU_RC(pinshm_recv_inplace(pr.c, &m[i], PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_recv_inplace(pr.c, &m[64], PINSHM_NONBLOCK), -ENOBUFS);
	TU_RC(pinshm_recv_batch(pr.c, &m[64], 2, PINSHM_NONBLOCK), -ENOBUFS);
	/* The messages stayed. */
	TU_RC(pinshm_release(pr.c, &m[0]), 0);
	TU_RC(pinshm_recv_inplace(pr.c, &m[64], PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_recv_inplace(pr.c, &m[65], PINSHM_NONBLOCK), -ENOBUFS);
	TU_RC(pinshm_release(pr.c, &m[64]), 0);
	TU_RC(pinshm_recv_batch(pr.c, &m[65], 1, PINSHM_NONBLOCK), 1);
	ck_assert_uint_eq(m[65].len, 0);
	TU_RC(pinshm_release(pr.c, &m[65]), 0);
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

START_TEST(test_batches)
{
	const uint64_t cap = 4 * KiB;
	struct pair pr = pair_open(PINSHM_QUEUE, cap);
	const size_t lens[10] = {0, 1, 24, 100, 0, 500, 16, 17, 1000, 0};
	struct iovec iov[10];
	pinshm_msg_t m[64];
	unsigned got = 0, n;
	int rc;

	for (unsigned i = 0; i < 10; i++) {
		iov[i].iov_base = sbuf + i * 1024;
		iov[i].iov_len = lens[i];
		tu_pattern(iov[i].iov_base, lens[i], 50 + i);
	}
	TU_RC(pinshm_send_batch(pr.p, iov, 10, PINSHM_NONBLOCK), 10);
	while (got < 10) {
		rc = pinshm_recv_batch(pr.c, m + got, 64 - got, PINSHM_NONBLOCK);
		ck_assert_msg(rc >= 1 && rc <= (int)(10 - got), "recv_batch: %d with %u of 10 received", rc, got);
		got += (unsigned)rc;
	}
	TU_RC(pinshm_recv_batch(pr.c, m + got, 64 - got, PINSHM_NONBLOCK), -EAGAIN);
	for (unsigned i = 0; i < 10; i++) {
		ck_assert_uint_eq(m[i].len, lens[i]);
		ck_assert_msg(tu_pattern_bad(m[i].data, m[i].len, 50 + i) < 0, "batch message %u corrupt", i);
	}
	/* Releasing the last releases all of them. */
	TU_RC(pinshm_release(pr.c, &m[9]), 0);
	TU_RC(pinshm_release(pr.c, &m[0]), -EINVAL);
	/* All the room is back. */
	n = fill(pr.p, 64, 0, 1000);
	check_fill_count(n, cap, 64);
	/* recv_batch of a full ring: at most 64, in order. */
	got = 0;
	while (got < n) {
		rc = pinshm_recv_batch(pr.c, m, 64, PINSHM_NONBLOCK);
		ck_assert_msg(rc >= 1 && rc <= 64, "recv_batch: %d", rc);
		for (int i = 0; i < rc; i++) {
			ck_assert_uint_eq(m[i].len, 64);
			ck_assert_msg(tu_pattern_bad(m[i].data, 64, got + (unsigned)i) < 0, "message %u", got + i);
		}
		got += (unsigned)rc;
		TU_RC(pinshm_release(pr.c, &m[rc - 1]), 0);
	}
	ck_assert_uint_eq(got, n);
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

START_TEST(test_batch_partial)
{
	const uint64_t cap = 4 * KiB;
	struct pair pr = pair_open(PINSHM_QUEUE, cap);
	struct iovec iov[10];
	unsigned n = fill(pr.p, 100, 0, 1000);
	int rc;

	for (unsigned i = 0; i < 10; i++) {
		iov[i].iov_base = sbuf + 2048 + i * 128;
		iov[i].iov_len = 100;
		tu_pattern(iov[i].iov_base, 100, 10000 + i);
	}
	TU_RC(pinshm_send_batch(pr.p, iov, 10, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_send_batch(pr.p, iov, 10, 20), -ETIMEDOUT);
	for (unsigned i = 0; i < 3; i++)
		recv_pat(pr.c, 100, i);
	rc = pinshm_send_batch(pr.p, iov, 10, PINSHM_NONBLOCK);
	ck_assert_msg(rc >= 1 && rc <= 3, "room for 3 records freed; send_batch of 10 returned %d", rc);
	for (unsigned i = 3; i < n; i++)
		recv_pat(pr.c, 100, i);
	for (int i = 0; i < rc; i++)
		recv_pat(pr.c, 100, 10000 + (unsigned)i);
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

START_TEST(test_roles)
{
	struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
	void *b;
	size_t len;
	pinshm_msg_t m;
	struct iovec iov = {.iov_base = sbuf, .iov_len = 8};

	TU_RC(pinshm_send(pr.c, sbuf, 8, PINSHM_NONBLOCK), -EINVAL);
	TU_RC(pinshm_send_batch(pr.c, &iov, 1, PINSHM_NONBLOCK), -EINVAL);
	TU_RC(pinshm_reserve(pr.c, 8, &b, PINSHM_NONBLOCK), -EINVAL);
	TU_RC(pinshm_commit(pr.c, 0, 0), -EINVAL);
	TU_RC(pinshm_abort(pr.c), -EINVAL);
	TU_RC(pinshm_recv(pr.p, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), -EINVAL);
	TU_RC(pinshm_recv_inplace(pr.p, &m, PINSHM_NONBLOCK), -EINVAL);
	TU_RC(pinshm_recv_batch(pr.p, &m, 1, PINSHM_NONBLOCK), -EINVAL);
	/* Nothing went through. */
	expect_empty(pr.c);
	send_pat(pr.p, 8, 1);
	recv_pat(pr.c, 8, 1);
	pair_close(&pr);
}
END_TEST

START_TEST(test_info)
{
	pinshm_channel_attr_t attr;
	pinshm_channel_info_t info;
	pinshm_channel_t *p0, *p1, *c0;
	size_t size;
	int fd;

	tu_attr(&attr, PINSHM_QUEUE, 8 * KiB, 3, 2);
	attr.max_message = 1000;
	TU_RC(pinshm_segment_size(&attr, &size), 0);
	fd = tu_create(&attr);
	ck_assert_uint_ge(tu_fd_size(fd), size);
	p0 = tu_attach(fd, PINSHM_PRODUCER);
	p1 = tu_attach(fd, PINSHM_PRODUCER);
	c0 = tu_attach(fd, PINSHM_CONSUMER);
	memset(&info, 0xa5, sizeof(info));
	TU_RC(pinshm_channel_info(c0, &info), 0);
	ck_assert_uint_eq(info.kind, PINSHM_QUEUE);
	ck_assert_uint_eq(info.flags, 0);
	ck_assert_uint_eq(info.capacity, 8 * KiB);
	ck_assert_uint_eq(info.max_message, 1000);
	ck_assert_uint_eq(info.max_producers, 3);
	ck_assert_uint_eq(info.max_consumers, 2);
	ck_assert_uint_eq(info.producers, 2);
	ck_assert_uint_eq(info.consumers, 1);
	ck_assert_uint_eq(info.segment_size, size);
	ck_assert_uint_eq(info.lost, 0);
	/* max_message is enforced as set. */
	TU_RC(pinshm_send(p0, sbuf, 1001, PINSHM_NONBLOCK), -EMSGSIZE);
	send_pat(p0, 1000, 1);
	recv_pat(c0, 1000, 1);
	TU_RC(pinshm_channel_close(p1), 0);
	memset(&info, 0xa5, sizeof(info));
	TU_RC(pinshm_channel_info(p0, &info), 0);
	ck_assert_uint_eq(info.producers, 1);
	ck_assert_uint_eq(info.consumers, 1);
	ck_assert_uint_eq(info.segment_size, size);
	close_all(fd, p0, c0, NULL);

	/* A topic reports its kind and flags. */
	fd = overrun_topic(4 * KiB, 4);
	c0 = tu_attach(fd, PINSHM_CONSUMER);
	TU_RC(pinshm_channel_info(c0, &info), 0);
	ck_assert_uint_eq(info.kind, PINSHM_TOPIC);
	ck_assert_uint_eq(info.flags, PINSHM_OVERRUN);
	ck_assert_uint_eq(info.producers, 0);
	ck_assert_uint_eq(info.consumers, 1);
	ck_assert_uint_eq(info.max_consumers, 4);
	ck_assert_str_eq(pinshm_channel_error(c0), "");
	TU_RC(pinshm_channel_close(c0), 0);
	close(fd);
}
END_TEST

/* Closing a consumer that holds messages in place releases them (they are
 * consumed: a later consumer does not get them again). */
START_TEST(test_close_with_held)
{
	const uint64_t cap = 4 * KiB;
	struct pair pr = pair_open(PINSHM_QUEUE, cap);
	pinshm_msg_t m[64];
	unsigned n = fill(pr.p, 100, 0, 64), more;

	for (unsigned i = 0; i < n; i++)
		TU_RC(pinshm_recv_inplace(pr.c, &m[i], PINSHM_NONBLOCK), 0);
	send_pat_rc(pr.p, 100, 999, -EAGAIN);
	TU_RC(pinshm_channel_close(pr.c), 0);
	/* The room came back although no consumer is attached now (and, with
	 * the consumers gone, a full ring may say -EPIPE rather than -EAGAIN). */
	more = fill_until(pr.p, 100, 1000, 64, -EAGAIN, -EPIPE);
	check_fill_count(more, cap, 100);
	pr.c = tu_attach(pr.fd, PINSHM_CONSUMER);
	for (unsigned i = 0; i < more; i++)
		recv_pat(pr.c, 100, 1000 + i);
	expect_empty(pr.c);
	pair_close(&pr);
}
END_TEST

/* Closing a producer with a pending reservation publishes nothing. */
START_TEST(test_close_drops_reservation)
{
	struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
	void *b;

	send_pat(pr.p, 30, 1);
	TU_RC(pinshm_reserve(pr.p, 200, &b, PINSHM_NONBLOCK), 0);
	memset(b, 0x77, 200);
	TU_RC(pinshm_channel_close(pr.p), 0);
	pr.p = tu_attach(pr.fd, PINSHM_PRODUCER);
	send_pat(pr.p, 40, 2);
	recv_pat(pr.c, 30, 1);
	recv_pat(pr.c, 40, 2);
	expect_empty(pr.c);
	/* The new producer of the lane goes on wrapping normally. */
	for (unsigned i = 0; i < 200; i++) {
		send_pat(pr.p, (i * 13) % 400, i);
		recv_pat(pr.c, (i * 13) % 400, i);
	}
	pair_close(&pr);
}
END_TEST

/*
 * A dead shared consumer's reap in steps of 256 bytes, while the producer
 * and the other consumer move the lane's `free` past the reap's place at
 * every step, records always ahead of it: the reap ends within about a
 * lap's worth of steps (it held nothing, and nothing behind `free` needs
 * another look).
 */
START_TEST(test_shared_reap_under_traffic)
{
	int fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 1, 2);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER);
	pinshm_channel_t *c[2] = {tu_attach(fd, PINSHM_CONSUMER), tu_attach(fd, PINSHM_CONSUMER)};
	uint64_t sent = 0, taken = 0;
	struct unclaim_cursor cur = {0};
	unsigned steps = 0;
	int rc;

	for (; sent < 20; sent++)
		send_pat(p, 100, sent);
	while ((rc = seg_endpoint_reap_step(&c[0]->g, c[0]->base, c[0]->endpoint, &cur, 256)) == 1) {
		ck_assert_msg(++steps < 64, "the reap of a 4 KiB lap in 256-byte steps did not end in %u steps", steps);
		for (unsigned i = 0; i < 4; i++, sent++, taken++) { /* 4 records of 128 bytes: past the step */
			send_pat(p, 100, sent);
			recv_pat(c[1], 100, taken);
		}
	}
	TU_RC(rc, 0);
	pinshm_channel_forget(c[0]); /* its endpoint is dead now */
	for (; taken < sent; taken++)
		recv_pat(c[1], 100, taken);
	expect_empty(c[1]);
	close_all(fd, p, c[1], NULL);
}
END_TEST

/* Two consumers of one queue in one process: each message goes to exactly one. */
START_TEST(test_shared_queue)
{
	int fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 1, 2);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER);
	pinshm_channel_t *c[2] = {tu_attach(fd, PINSHM_CONSUMER), tu_attach(fd, PINSHM_CONSUMER)};
	unsigned seen[40] = {0};
	pinshm_msg_t held[3];
	size_t len;

	for (unsigned i = 0; i < 20; i++)
		send_pat(p, 50, i);
	/* c0 holds three; c1 takes the next ones, not blocked by them. */
	for (unsigned i = 0; i < 3; i++) {
		TU_RC(pinshm_recv_inplace(c[0], &held[i], PINSHM_NONBLOCK), 0);
		ck_assert_int_lt(tu_pattern_bad(held[i].data, 50, i), 0);
		seen[i]++;
	}
	for (unsigned i = 3; i < 20; i++) {
		pinshm_channel_t *who = c[i % 2];
		TU_RC(pinshm_recv(who, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), 0);
		ck_assert_uint_eq(len, 50);
		/* In order: message i, whoever takes it. */
		ck_assert_msg(tu_pattern_bad(rbuf, 50, i) < 0, "message %u out of order or corrupt", i);
		seen[i]++;
	}
	expect_empty(c[0]);
	expect_empty(c[1]);
	TU_RC(pinshm_release(c[0], &held[2]), 0);
	for (unsigned i = 0; i < 20; i++)
		ck_assert_uint_eq(seen[i], 1);
	/* Lap the ring a few times with both consuming, holding and releasing. */
	for (unsigned i = 0; i < 500; i++) {
		pinshm_msg_t m;
		send_pat(p, (i * 31) % 300, 1000 + i);
		if (i % 3 == 0) {
			TU_RC(pinshm_recv_inplace(c[i % 2], &m, PINSHM_NONBLOCK), 0);
			ck_assert_uint_eq(m.len, (i * 31) % 300);
			ck_assert_int_lt(tu_pattern_bad(m.data, m.len, 1000 + i), 0);
			TU_RC(pinshm_release(c[i % 2], &m), 0);
		} else {
			recv_pat(c[i % 2], (i * 31) % 300, 1000 + i);
		}
	}
	expect_empty(c[0]);
	expect_empty(c[1]);
	/* A consumer closing while holding: the held ones are consumed. */
	for (unsigned i = 0; i < 4; i++)
		send_pat(p, 10, 2000 + i);
	TU_RC(pinshm_recv_inplace(c[0], &held[0], PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_recv_inplace(c[0], &held[1], PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_channel_close(c[0]), 0);
	recv_pat(c[1], 10, 2002);
	recv_pat(c[1], 10, 2003);
	expect_empty(c[1]);
	check_fill_count(fill(p, 100, 3000, 100), 4 * KiB, 100);
	close_all(fd, p, c[1], NULL);
}
END_TEST

/* ======================================================================== */
/* limits                                                                    */
/* ======================================================================== */

START_TEST(test_attr_defaults)
{
	pinshm_channel_attr_t attr;
	pinshm_channel_info_t info;
	pinshm_channel_t *c;
	size_t size = 0;
	int fd;

	memset(&attr, 0xff, sizeof(attr));
	pinshm_channel_attr_init(&attr);
	ck_assert_uint_eq(attr.kind, PINSHM_QUEUE);
	ck_assert_uint_eq(attr.flags, 0);
	ck_assert_uint_eq(attr.capacity, 1024 * KiB);
	ck_assert_uint_eq(attr.max_producers, 4);
	ck_assert_uint_eq(attr.max_consumers, 1);
	ck_assert_msg(attr.max_message == 0 || attr.max_message == 1024 * KiB / 2 - 32, "default max_message %u",
		      attr.max_message);
	TU_RC(pinshm_segment_size(&attr, &size), 0);
	ck_assert_uint_ge(size, 4 * 1024 * KiB);
	fd = tu_create(&attr);
	c = tu_attach(fd, PINSHM_CONSUMER);
	TU_RC(pinshm_channel_info(c, &info), 0);
	ck_assert_uint_eq(info.max_message, 1024 * KiB / 2 - 32);
	ck_assert_uint_eq(info.capacity, 1024 * KiB);
	ck_assert_uint_eq(info.max_producers, 4);
	ck_assert_uint_eq(info.max_consumers, 1);
	ck_assert_uint_eq(info.segment_size, size);
	TU_RC(pinshm_channel_close(c), 0);
	close(fd);
}
END_TEST

START_TEST(test_attr_validation)
{
	pinshm_channel_attr_t a;
	size_t size;
	int fd = -1;

#define BAD(stmt)                                                                                             \
	do {                                                                                                  \
		tu_attr(&a, PINSHM_QUEUE, 4 * KiB, 2, 2);                                                     \
		stmt;                                                                                         \
		size = 12345;                                                                                 \
		TU_RC(pinshm_segment_size(&a, &size), -EINVAL);                                               \
		TU_RC(pinshm_segment_create(&a, &fd), -EINVAL);                                               \
	} while (0)
#define GOOD(stmt)                                                                                            \
	do {                                                                                                  \
		tu_attr(&a, PINSHM_QUEUE, 4 * KiB, 2, 2);                                                     \
		stmt;                                                                                         \
		TU_RC(pinshm_segment_size(&a, &size), 0);                                                     \
	} while (0)

	GOOD((void)0);
	BAD(a.capacity = 0);
	BAD(a.capacity = 1000);
	BAD(a.capacity = 4096 + 16);
	BAD(a.capacity = 3 * 4096);
	BAD(a.capacity = 2048; a.max_message = 100);
	BAD(a.capacity = PINSHM_MAX_CAPACITY * 2);
	BAD(a.capacity = (uint64_t)1 << 63);
	BAD(a.capacity = UINT64_MAX);
	BAD(a.max_message = 4096 / 2 - 31);
	BAD(a.max_message = 4096);
	BAD(a.max_message = UINT32_MAX);
	BAD(a.max_producers = 0);
	BAD(a.max_producers = PINSHM_MAX_PRODUCERS + 1);
	BAD(a.max_producers = UINT32_MAX);
	BAD(a.max_consumers = 0);
	BAD(a.max_consumers = PINSHM_MAX_CONSUMERS + 1);
	BAD(a.max_consumers = UINT32_MAX);
	BAD(a.kind = 0);
	BAD(a.kind = 3);
	BAD(a.flags = 0x2);
	BAD(a.flags = PINSHM_OVERRUN); /* overrun is for topics only */
	GOOD(a.max_message = 4096 / 2 - 32);
	GOOD(a.max_message = 1);
	GOOD(a.max_producers = PINSHM_MAX_PRODUCERS);
	GOOD(a.max_consumers = PINSHM_MAX_CONSUMERS);
	GOOD(a.kind = PINSHM_TOPIC; a.flags = PINSHM_OVERRUN);
	GOOD(a.capacity = 8192; a.max_message = 8192 / 2 - 32);
	/* The largest capacity is valid (only its size is computed). */
	GOOD(a.capacity = PINSHM_MAX_CAPACITY; a.max_message = (uint32_t)(PINSHM_MAX_CAPACITY / 2 - 32));
	ck_assert_uint_ge(size, 2 * PINSHM_MAX_CAPACITY);
	GOOD(a.capacity = PINSHM_MAX_CAPACITY; a.max_message = 100; a.max_producers = PINSHM_MAX_PRODUCERS;
	     a.max_consumers = PINSHM_MAX_CONSUMERS);
	ck_assert_uint_ge(size, PINSHM_MAX_PRODUCERS * PINSHM_MAX_CAPACITY);
	ck_assert_int_eq(fd, -1);
#undef BAD
#undef GOOD
}
END_TEST

/* pinshm_segment_format() on memory shared by hand. */
START_TEST(test_segment_format)
{
	pinshm_channel_attr_t a;
	pinshm_channel_t *p, *c;
	size_t size;
	void *base;
	int fd;

	tu_attr(&a, PINSHM_QUEUE, 4 * KiB, 1, 1);
	TU_RC(pinshm_segment_size(&a, &size), 0);
	fd = memfd_create("pinshm-test", MFD_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(base, MAP_FAILED);
	TU_RC(pinshm_segment_format(base, size - 1, &a), -ENOSPC);
	TU_RC(pinshm_segment_format(base, 64, &a), -ENOSPC);
	a.capacity = 1000;
	TU_RC(pinshm_segment_format(base, size, &a), -EINVAL);
	a.capacity = 4 * KiB;
	TU_RC(pinshm_segment_format(base, size, &a), 0);
	p = tu_attach(fd, PINSHM_PRODUCER);
	c = tu_attach(fd, PINSHM_CONSUMER);
	for (unsigned i = 0; i < 100; i++) {
		send_pat(p, i * 10, i);
		recv_pat(c, i * 10, i);
	}
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_channel_close(c), 0);
	munmap(base, size);
	close(fd);
}
END_TEST

START_TEST(test_attach_limits)
{
	int fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 2, 3);
	pinshm_channel_t *p[3] = {0}, *c[4] = {0}, *x = NULL;

	p[0] = tu_attach(fd, PINSHM_PRODUCER);
	p[1] = tu_attach(fd, PINSHM_PRODUCER);
	TU_RC(pinshm_channel_attach(fd, PINSHM_PRODUCER, &x), -EBUSY);
	for (unsigned i = 0; i < 3; i++)
		c[i] = tu_attach(fd, PINSHM_CONSUMER);
	TU_RC(pinshm_channel_attach(fd, PINSHM_CONSUMER, &x), -EBUSY);
	TU_RC(pinshm_channel_attach(fd, PINSHM_PRODUCER, &x), -EBUSY);
	/* A closed endpoint can be taken again. */
	TU_RC(pinshm_channel_close(p[0]), 0);
	p[2] = tu_attach(fd, PINSHM_PRODUCER);
	TU_RC(pinshm_channel_attach(fd, PINSHM_PRODUCER, &x), -EBUSY);
	TU_RC(pinshm_channel_close(c[1]), 0);
	c[3] = tu_attach(fd, PINSHM_CONSUMER);
	TU_RC(pinshm_channel_attach(fd, PINSHM_CONSUMER, &x), -EBUSY);
	/* Attach and close many times: nothing leaks. */
	for (unsigned i = 0; i < 500; i++) {
		TU_RC(pinshm_channel_close(p[1]), 0);
		p[1] = tu_attach(fd, PINSHM_PRODUCER);
	}
	send_pat(p[1], 5, 1);
	send_pat(p[2], 6, 2);
	{
		/* One of the consumers of this shared queue gets each. */
		size_t len;
		unsigned got = 0;
		for (unsigned i = 0; i < 4; i++) {
			if (!c[i] || i == 1)
				continue;
			while (pinshm_recv(c[i], rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK) == 0) {
				ck_assert_msg(len == 5 || len == 6, "len %zu", len);
				got++;
			}
		}
		ck_assert_uint_eq(got, 2);
	}
	close_all(fd, p[1], p[2], c[0], c[2], c[3], NULL);
}
END_TEST

/* Bytes of the mapping holding @p addr that this process has mapped
 * (its Rss in /proc/self/smaps), or -1 if none holds it. */
static long mapped_bytes(const void *addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool inside = false;
	long rss = -1;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end;
		long kib;
		if (sscanf(line, "%lx-%lx ", &start, &end) == 2)
			inside = (uintptr_t)addr >= start && (uintptr_t)addr < end;
		else if (inside && sscanf(line, "Rss: %ld kB", &kib) == 1) {
			rss = kib * 1024;
			break;
		}
	}
	fclose(f);
	return rss;
}

/* A producer maps (and touches) the header and its own lane, not the other
 * lanes; a consumer maps the whole segment. */
START_TEST(test_attach_maps_used_pages)
{
	const uint64_t capacity = 256 * KiB;
	int fd = tu_channel(PINSHM_QUEUE, capacity, 8, 1);
	size_t size = tu_fd_size(fd);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *c = tu_attach(fd, PINSHM_CONSUMER);
	void *in_lane;
	pinshm_msg_t m;

	TU_RC(pinshm_reserve(p, 8, &in_lane, PINSHM_NONBLOCK), 0);
	long producer = mapped_bytes(in_lane);
	TU_RC(pinshm_commit(p, 8, 0), 0);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	long consumer = mapped_bytes(m.data);
	ck_assert_msg(producer >= (long)capacity && producer < (long)(size / 4),
		      "producer maps %ld bytes of a %zu-byte segment of 8 lanes of %llu", producer, size,
		      (unsigned long long)capacity);
	ck_assert_msg(consumer >= (long)size - 4096, "consumer maps %ld bytes of %zu", consumer, size);
	TU_RC(pinshm_release(c, &m), 0);
	close_all(fd, p, c, NULL);
}
END_TEST

START_TEST(test_endpoint_numbers)
{
	int fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 3, 2);
	pinshm_channel_t *p0 = tu_attach(fd, PINSHM_PRODUCER);
	pinshm_channel_t *c0 = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_channel_t *p1 = tu_attach(fd, PINSHM_PRODUCER);
	pinshm_channel_t *c1 = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_channel_t *p2 = tu_attach(fd, PINSHM_PRODUCER);

	ck_assert_uint_eq(pinshm_channel_endpoint(p0), 0);
	ck_assert_uint_eq(pinshm_channel_endpoint(p1), 1);
	ck_assert_uint_eq(pinshm_channel_endpoint(p2), 2);
	ck_assert_uint_eq(pinshm_channel_endpoint(c0), 3);
	ck_assert_uint_eq(pinshm_channel_endpoint(c1), 4);
	TU_RC(pinshm_channel_close(p1), 0);
	p1 = tu_attach(fd, PINSHM_PRODUCER);
	ck_assert_uint_eq(pinshm_channel_endpoint(p1), 1);
	TU_RC(pinshm_channel_close(c0), 0);
	c0 = tu_attach(fd, PINSHM_CONSUMER);
	ck_assert_uint_eq(pinshm_channel_endpoint(c0), 3);
	close_all(fd, p0, p1, p2, c0, c1, NULL);
}
END_TEST

/* ======================================================================== */
/* timeouts and wake-ups                                                     */
/* ======================================================================== */

START_TEST(test_timeouts)
{
	struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
	size_t len;
	void *b;
	struct iovec iov = {.iov_base = sbuf, .iov_len = 100};
	pinshm_msg_t m;

	TU_RC(pinshm_recv(pr.c, rbuf, sizeof(rbuf), &len, 20), -ETIMEDOUT);
	TU_RC(pinshm_recv(pr.c, rbuf, sizeof(rbuf), &len, 1), -ETIMEDOUT);
	TU_RC(pinshm_recv_inplace(pr.c, &m, 20), -ETIMEDOUT);
	TU_RC(pinshm_recv_batch(pr.c, &m, 1, 20), -ETIMEDOUT);
	fill(pr.p, 100, 0, 1000);
	TU_RC(pinshm_send(pr.p, sbuf, 100, 20), -ETIMEDOUT);
	TU_RC(pinshm_send(pr.p, sbuf, 100, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_reserve(pr.p, 100, &b, 20), -ETIMEDOUT);
	TU_RC(pinshm_reserve(pr.p, 100, &b, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_send_batch(pr.p, &iov, 1, 20), -ETIMEDOUT);
	/* The handle still works after timeouts. */
	recv_pat(pr.c, 100, 0);
	TU_RC(pinshm_reserve(pr.p, 100, &b, 20), 0);
	tu_pattern(b, 100, 77);
	TU_RC(pinshm_commit(pr.p, 100, 0), 0);
	pair_close(&pr);
}
END_TEST

struct later {
	pinshm_channel_t *ch;
	unsigned delay_ms;
	int what; /* 0: send 100 bytes pattern 4242; 1: receive one; 2: close */
	int rc;
	uint8_t buf[256];
};

static void *later_main(void *arg)
{
	struct later *l = arg;
	size_t len;

	tu_sleep_ms(l->delay_ms);
	switch (l->what) {
	case 0:
		tu_pattern(l->buf, 100, 4242);
		l->rc = pinshm_send(l->ch, l->buf, 100, 5000);
		break;
	case 1:
		l->rc = pinshm_recv(l->ch, l->buf, sizeof(l->buf), &len, 5000);
		break;
	default:
		l->rc = pinshm_channel_close(l->ch);
		break;
	}
	return NULL;
}

static pthread_t later_start(struct later *l, pinshm_channel_t *ch, unsigned delay, int what)
{
	pthread_t t;

	l->ch = ch;
	l->delay_ms = delay;
	l->what = what;
	l->rc = -12345;
	ck_assert_int_eq(pthread_create(&t, NULL, later_main, l), 0);
	return t;
}

/* A waiting receiver is woken by a send from another thread. */
START_TEST(test_wakeup_recv)
{
	for (unsigned spin = 0; spin < 2; spin++) {
		struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
		struct later l;
		pthread_t t;
		size_t len = 0;

		pinshm_channel_set_spin(pr.c, spin ? 20000 : 0);
		pinshm_channel_set_spin(pr.p, spin ? 20000 : 0);
		t = later_start(&l, pr.p, 50, 0);
		TU_RC(pinshm_recv(pr.c, rbuf, sizeof(rbuf), &len, 10000), 0);
		ck_assert_int_eq(pthread_join(t, NULL), 0);
		TU_RC(l.rc, 0);
		ck_assert_uint_eq(len, 100);
		ck_assert_int_lt(tu_pattern_bad(rbuf, 100, 4242), 0);
		/* In place too. */
		{
			pinshm_msg_t m;
			t = later_start(&l, pr.p, 30, 0);
			TU_RC(pinshm_recv_inplace(pr.c, &m, 10000), 0);
			ck_assert_int_eq(pthread_join(t, NULL), 0);
			ck_assert_uint_eq(m.len, 100);
			ck_assert_int_lt(tu_pattern_bad(m.data, 100, 4242), 0);
			TU_RC(pinshm_release(pr.c, &m), 0);
		}
		pair_close(&pr);
	}
}
END_TEST

/* A sender waiting for room is woken when the consumer frees some. */
START_TEST(test_wakeup_send)
{
	for (unsigned spin = 0; spin < 2; spin++) {
		struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
		struct later l;
		pthread_t t;
		unsigned n;
		void *b;

		pinshm_channel_set_spin(pr.c, spin ? 20000 : 0);
		pinshm_channel_set_spin(pr.p, spin ? 20000 : 0);
		n = fill(pr.p, 100, 0, 1000);
		t = later_start(&l, pr.c, 50, 1);
		tu_pattern(sbuf, 100, n);
		TU_RC(pinshm_send(pr.p, sbuf, 100, 10000), 0);
		ck_assert_int_eq(pthread_join(t, NULL), 0);
		TU_RC(l.rc, 0);
		ck_assert_int_lt(tu_pattern_bad(l.buf, 100, 0), 0);
		/* reserve waits the same way. */
		t = later_start(&l, pr.c, 30, 1);
		TU_RC(pinshm_reserve(pr.p, 100, &b, 10000), 0);
		tu_pattern(b, 100, n + 1);
		TU_RC(pinshm_commit(pr.p, 100, 0), 0);
		ck_assert_int_eq(pthread_join(t, NULL), 0);
		TU_RC(l.rc, 0);
		for (unsigned i = 2; i < n + 2; i++)
			recv_pat(pr.c, 100, i);
		expect_empty(pr.c);
		pair_close(&pr);
	}
}
END_TEST

/* ======================================================================== */
/* several producers                                                         */
/* ======================================================================== */

/*
 * Receive up to @p limit messages (tu_msg_fill(), @p max_len bytes at most)
 * that @p c has now, of producers 0 to @p producers - 1: each intact, and
 * each producer's in order from @p next[producer].  @return how many.
 */
static unsigned recv_in_order(pinshm_channel_t *c, size_t max_len, unsigned producers, uint64_t *next,
			      unsigned limit)
{
	char why[200];
	unsigned n = 0;

	for (; n < limit; n++) {
		size_t len;
		uint32_t who;
		uint64_t seq;
		int rc = pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK);
		if (rc == -EAGAIN)
			break;
		TU_RC(rc, 0);
		ck_assert_msg(tu_msg_check(rbuf, len, max_len, &who, &seq, why, sizeof(why)) == 0, "%s", why);
		ck_assert_uint_lt(who, producers);
		ck_assert_msg(seq == next[who], "producer %u: got seq %llu, expected %llu", who,
			      (unsigned long long)seq, (unsigned long long)next[who]);
		next[who]++;
	}
	return n;
}

/* A queue of 4 KiB lanes, @p producers producers and a consumer attached. */
struct lanes {
	int fd;
	unsigned n;
	pinshm_channel_t **p, *c;
};

static void lanes_open(struct lanes *q, unsigned producers)
{
	q->fd = tu_channel(PINSHM_QUEUE, 4 * KiB, producers, 1);
	q->n = producers;
	q->p = calloc(producers, sizeof(*q->p));
	ck_assert_ptr_nonnull(q->p);
	for (unsigned i = 0; i < producers; i++)
		q->p[i] = tu_attach(q->fd, PINSHM_PRODUCER);
	q->c = tu_attach(q->fd, PINSHM_CONSUMER);
}

static void lanes_close(struct lanes *q)
{
	for (unsigned i = 0; i < q->n; i++)
		TU_RC(pinshm_channel_close(q->p[i]), 0);
	TU_RC(pinshm_channel_close(q->c), 0);
	free(q->p);
	close(q->fd);
}

START_TEST(test_multi_producer)
{
	enum { P = 3, N = 3000 };
	struct lanes q;
	uint64_t sent[P] = {0}, next[P] = {0};
	uint64_t r = 1, total = 0;

	lanes_open(&q, P);
	pinshm_channel_t **p = q.p, *c = q.c;
	while (total < (uint64_t)P * N) {
		/* A few sends on random producers, then a few receives. */
		unsigned ns = (unsigned)((r = tu_mix(r)) % 6), nr = (unsigned)((r >> 8) % 6);
		for (unsigned k = 0; k < ns; k++) {
			unsigned w = (unsigned)((r >> (16 + k * 2)) % P);
			size_t len;
			int rc;
			if (sent[w] == N)
				continue;
			len = tu_msg_len(w, sent[w], 300);
			tu_msg_fill(sbuf, len, w, sent[w]);
			rc = pinshm_send(p[w], sbuf, len, PINSHM_NONBLOCK);
			ck_assert_msg(rc == 0 || rc == -EAGAIN, "send: %d", rc);
			if (rc == 0)
				sent[w]++;
		}
		total += recv_in_order(c, 300, P, next, ns == 0 && nr == 0 ? 1 : nr);
	}
	for (unsigned i = 0; i < P; i++)
		ck_assert_uint_eq(next[i], N);
	expect_empty(c);
	lanes_close(&q);
}
END_TEST

/*
 * A consumer of a few lanes takes them in turn (round robin), whichever
 * receive call it makes: with 4 producers that each have 3 messages
 * waiting, 12 receives give producers 3 0 1 2 3 0 1 2 3 0 1 2 (the turn
 * starts after producer 2, which gave the last message).  A skipped record
 * (padding, here after a producer wrapped) does not break the turn.
 */
START_TEST(test_round_robin_calls)
{
	enum { P = 4, EACH = 3, CALLS = 4 };
	char why[200];

	for (unsigned call = 0; call < CALLS; call++) {
		struct lanes q;
		uint64_t sent[P] = {0};

		lanes_open(&q, P);
		/* Producer 2 is near the end of its lane: its records wrap, after padding. */
		for (unsigned k = 0; k < 31; k++) {
			size_t len;
			TU_RC(pinshm_send(q.p[2], sbuf, 112, PINSHM_NONBLOCK), 0);
			TU_RC(pinshm_recv(q.c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), 0);
		}
		for (unsigned k = 0; k < EACH; k++)
			for (unsigned w = 0; w < P; w++) {
				size_t len = tu_msg_len(w, sent[w], 200);
				tu_msg_fill(sbuf, len, w, sent[w]++);
				TU_RC(pinshm_send(q.p[w], sbuf, len, PINSHM_NONBLOCK), 0);
			}
		for (unsigned i = 0; i < P * EACH; i++) {
			pinshm_msg_t m;
			size_t len = 0;
			const void *data = rbuf;
			uint32_t who;
			uint64_t seq;
			int rc;
			switch (call) {
			case 0:
				rc = pinshm_recv(q.c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK);
				break;
			case 1:
				rc = pinshm_recv(q.c, rbuf, sizeof(rbuf), &len, 1000);
				break;
			case 2:
				rc = pinshm_recv_inplace(q.c, &m, PINSHM_NONBLOCK);
				data = m.data, len = m.len;
				break;
			default:
				rc = pinshm_recv_batch(q.c, &m, 1, 1000);
				rc = rc == 1 ? 0 : rc;
				data = m.data, len = m.len;
				break;
			}
			TU_RC(rc, 0);
			ck_assert_msg(tu_msg_check(data, len, 200, &who, &seq, why, sizeof(why)) == 0, "%s", why);
			ck_assert_msg(who == (3 + i) % P && seq == i / P, "call %u, receive %u: producer %u seq %llu", call, i,
				      who, (unsigned long long)seq);
			if (call >= 2)
				TU_RC(pinshm_release(q.c, &m), 0);
		}
		expect_empty(q.c);
		lanes_close(&q);
	}
}
END_TEST

/*
 * A consumer of many lanes looks quickly, while it spins, at the lanes that
 * gave it messages lately and at a few others in turn: a message on another
 * lane is still taken within a round of the lanes however busy those are.
 */
START_TEST(test_many_lanes_fair)
{
	enum { P = 40, HOT = 8, COLD = 33 };
	struct lanes q;
	uint64_t sent[P] = {0};
	char why[200];
	unsigned k;

	lanes_open(&q, P);
	pinshm_channel_t **p = q.p, *c = q.c;
	pinshm_channel_set_spin(c, 1000000); /* every receive here spins first */
	for (unsigned round = 0; round < 3; round++)
		for (unsigned i = 0; i < HOT; i++) {
			size_t len = tu_msg_len(i, sent[i], 100);
			tu_msg_fill(sbuf, len, i, sent[i]++);
			TU_RC(pinshm_send(p[i], sbuf, len, PINSHM_NONBLOCK), 0);
		}
	tu_msg_fill(sbuf, tu_msg_len(COLD, 0, 100), COLD, 0);
	TU_RC(pinshm_send(p[COLD], sbuf, tu_msg_len(COLD, 0, 100), PINSHM_NONBLOCK), 0);
	/* Each message taken from a hot lane is sent again there: they are
	 * never empty. */
	for (k = 0; k < 2 * P; k++) {
		size_t len;
		uint32_t who;
		uint64_t seq;
		TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, 5000), 0);
		ck_assert_msg(tu_msg_check(rbuf, len, 100, &who, &seq, why, sizeof(why)) == 0, "%s", why);
		if (who == COLD)
			break;
		ck_assert_uint_lt(who, HOT);
		len = tu_msg_len(who, sent[who], 100);
		tu_msg_fill(sbuf, len, who, sent[who]++);
		TU_RC(pinshm_send(p[who], sbuf, len, PINSHM_NONBLOCK), 0);
	}
	ck_assert_msg(k < 2 * P, "the message of lane %u was not taken in %u receives", COLD, 2 * P);
	lanes_close(&q);
}
END_TEST

/*
 * Quick polls (pinshm_channel_set_quick_polls()): a non-blocking receive on a
 * channel of many lanes looks at some of them, in turn, so that polls in a
 * row find a message on any lane; arming the eventfd looks at all of them.
 * Up to 16 lanes, every poll looks at all.
 */
START_TEST(test_quick_polls)
{
	const unsigned P = _i ? 40 : 16, lane = P - 7;
	struct lanes q;
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	unsigned polls = 0;
	size_t len;
	int rc;

	ck_assert_int_ge(efd, 0);
	lanes_open(&q, P);
	pinshm_channel_t **p = q.p, *c = q.c;
	pinshm_channel_set_quick_polls(c, 1);
	TU_RC(pinshm_channel_set_notify_fd(c, efd), 0);
	tu_pattern(sbuf, 100, 77);
	TU_RC(pinshm_send(p[lane], sbuf, 100, PINSHM_NONBLOCK), 0);
	/* A fresh handle looks first at lanes 0 to 7: the message is past them. */
	rc = pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK);
	polls++;
	if (P > 16) {
		TU_RC(rc, -EAGAIN);
		TU_RC(pinshm_channel_arm(c), -EAGAIN); /* it looks at every lane */
		while ((rc = pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK)) == -EAGAIN && polls < 100)
			polls++;
		polls++;
		ck_assert_uint_le(polls, P / 8 + 1);
	}
	TU_RC(rc, 0);
	ck_assert_uint_eq(len, 100);
	ck_assert_int_lt(tu_pattern_bad(rbuf, 100, 77), 0);
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), -EAGAIN);
	lanes_close(&q);
	close(efd);
}
END_TEST

/*
 * A message too long for the call that met it stays in place, and the next
 * call meets it again, even where other lanes got messages meanwhile: with
 * 4 lanes (every lane looked at), 20 lanes waiting (a quick look) and 20
 * lanes polling quickly.
 */
START_TEST(test_oversize_met_again)
{
	const unsigned P = _i ? 20 : 4;
	const int timeout = _i == 2 ? PINSHM_NONBLOCK : 1000;
	struct lanes q;
	size_t len = 0;

	lanes_open(&q, P);
	pinshm_channel_t **p = q.p, *c = q.c;
	pinshm_channel_set_quick_polls(c, _i == 2);
	tu_pattern(sbuf, 100, 5);
	TU_RC(pinshm_send(p[2], sbuf, 100, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_recv(c, rbuf, 10, &len, timeout), -EMSGSIZE);
	ck_assert_uint_eq(len, 100);
	TU_RC(pinshm_send(p[0], "first", 5, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_send(p[1], "other", 5, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, timeout), 0);
	ck_assert_uint_eq(len, 100);
	ck_assert_int_lt(tu_pattern_bad(rbuf, 100, 5), 0);
	for (unsigned i = 0; i < 2; i++)
		TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, 1000), 0);
	lanes_close(&q);
}
END_TEST

/* A queue of PINSHM_MAX_PRODUCERS (1024) producers: every lane delivers, in
 * order, to a consumer that waits for each message. */
START_TEST(test_max_producers)
{
	enum { P = PINSHM_MAX_PRODUCERS, N = 2 };
	struct lanes q;
	uint64_t *next = calloc(P, sizeof(*next));
	char why[200];

	ck_assert_ptr_nonnull(next);
	lanes_open(&q, P);
	pinshm_channel_t **p = q.p, *c = q.c;
	for (uint64_t seq = 0; seq < N; seq++)
		for (unsigned i = 0; i < P; i++) {
			size_t len = tu_msg_len(i, seq, 100);
			tu_msg_fill(sbuf, len, i, seq);
			TU_RC(pinshm_send(p[i], sbuf, len, PINSHM_NONBLOCK), 0);
		}
	for (unsigned k = 0; k < P * N; k++) {
		size_t len;
		uint32_t who;
		uint64_t seq;
		TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, 5000), 0);
		ck_assert_msg(tu_msg_check(rbuf, len, 100, &who, &seq, why, sizeof(why)) == 0, "%s", why);
		ck_assert_uint_lt(who, P);
		ck_assert_uint_eq(seq, next[who]);
		next[who]++;
	}
	expect_empty(c);
	lanes_close(&q);
	free(next);
}
END_TEST

/* ======================================================================== */
/* topics                                                                    */
/* ======================================================================== */

static void topic_recv_msg(pinshm_channel_t *c, uint32_t who, uint64_t seq)
{
	char why[200];
	uint32_t w;
	uint64_t s;
	size_t len;

	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), 0);
	ck_assert_msg(tu_msg_check(rbuf, len, 200, &w, &s, why, sizeof(why)) == 0, "%s", why);
	ck_assert_msg(w == who && s == seq, "got (%u, %llu), expected (%u, %llu)", w, (unsigned long long)s, who,
		      (unsigned long long)seq);
}

static void topic_send_msg(pinshm_channel_t *p, uint32_t who, uint64_t seq, int want)
{
	size_t len = tu_msg_len(who, seq, 200);

	tu_msg_fill(sbuf, len, who, seq);
	TU_RC(pinshm_send(p, sbuf, len, PINSHM_NONBLOCK), want);
}

START_TEST(test_topic_basic)
{
	int fd = tu_channel(PINSHM_TOPIC, 4 * KiB, 1, 3);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER);
	pinshm_channel_t *a = tu_attach(fd, PINSHM_CONSUMER), *b = tu_attach(fd, PINSHM_CONSUMER), *c;
	pinshm_channel_info_t info;

	for (unsigned i = 0; i < 10; i++)
		topic_send_msg(p, 0, i, 0);
	for (unsigned i = 0; i < 10; i++)
		topic_recv_msg(a, 0, i);
	expect_empty(a);
	/* A subscriber joining now does not get what was published before. */
	c = tu_attach(fd, PINSHM_CONSUMER);
	expect_empty(c);
	for (unsigned i = 0; i < 10; i++) {
		pinshm_msg_t m;
		char why[200];
		uint32_t w;
		uint64_t s;
		TU_RC(pinshm_recv_inplace(b, &m, PINSHM_NONBLOCK), 0);
		ck_assert_uint_eq(m.lost, 0);
		ck_assert_int_eq(tu_msg_check(m.data, m.len, 200, &w, &s, why, sizeof(why)), 0);
		ck_assert_uint_eq(s, i);
		TU_RC(pinshm_release(b, &m), 0);
	}
	expect_empty(b);
	for (unsigned i = 10; i < 15; i++)
		topic_send_msg(p, 0, i, 0);
	for (unsigned i = 10; i < 15; i++) {
		topic_recv_msg(a, 0, i);
		topic_recv_msg(b, 0, i);
		topic_recv_msg(c, 0, i);
	}
	expect_empty(a);
	expect_empty(b);
	expect_empty(c);
	/* Many laps with every subscriber keeping up. */
	for (unsigned i = 15; i < 3000; i++) {
		topic_send_msg(p, 0, i, 0);
		topic_recv_msg(a, 0, i);
		topic_recv_msg(b, 0, i);
		topic_recv_msg(c, 0, i);
	}
	TU_RC(pinshm_channel_info(a, &info), 0);
	ck_assert_uint_eq(info.lost, 0);
	ck_assert_uint_eq(info.consumers, 3);
	close_all(fd, a, b, c, p, NULL);
}
END_TEST

START_TEST(test_topic_two_publishers)
{
	int fd = tu_channel(PINSHM_TOPIC, 4 * KiB, 2, 2);
	pinshm_channel_t *p[2] = {tu_attach(fd, PINSHM_PRODUCER), tu_attach(fd, PINSHM_PRODUCER)};
	pinshm_channel_t *s[2] = {tu_attach(fd, PINSHM_CONSUMER), tu_attach(fd, PINSHM_CONSUMER)};
	uint64_t sent[2] = {0}, next[2][2] = {{0}};
	uint64_t r = 7;

	for (unsigned round = 0; round < 2000; round++) {
		unsigned w = (unsigned)((r = tu_mix(r)) % 2);
		size_t len = tu_msg_len(w, sent[w], 200);
		tu_msg_fill(sbuf, len, w, sent[w]);
		TU_RC(pinshm_send(p[w], sbuf, len, PINSHM_NONBLOCK), 0);
		sent[w]++;
		/* Each subscriber drains at its own pace. */
		for (unsigned k = 0; k < 2; k++) {
			if (!((r >> (8 + k)) & 1 && round % 7 != 0))
				recv_in_order(s[k], 200, 2, next[k], UINT_MAX);
		}
	}
	for (unsigned k = 0; k < 2; k++) {
		recv_in_order(s[k], 200, 2, next[k], UINT_MAX);
		ck_assert_uint_eq(next[k][0], sent[0]);
		ck_assert_uint_eq(next[k][1], sent[1]);
	}
	for (unsigned k = 0; k < 2; k++) {
		TU_RC(pinshm_channel_close(p[k]), 0);
		TU_RC(pinshm_channel_close(s[k]), 0);
	}
	close(fd);
}
END_TEST

/*
 * Publish 100-byte pattern messages from seed @p seed0 until the ring is
 * full, each received at once by @p a (and by @p b where not NULL); fail with
 * @p why after @p limit.  @return how many were published.
 */
static unsigned publish_until_full(pinshm_channel_t *p, uint64_t seed0, unsigned limit, const char *why,
				   pinshm_channel_t *a, pinshm_channel_t *b)
{
	unsigned n = 0;

	for (;;) {
		tu_pattern(sbuf, 100, seed0 + n);
		int rc = pinshm_send(p, sbuf, 100, PINSHM_NONBLOCK);
		if (rc == -EAGAIN)
			break;
		TU_RC(rc, 0);
		recv_pat(a, 100, seed0 + n);
		if (b)
			recv_pat(b, 100, seed0 + n);
		n++;
		ck_assert_msg(n <= limit, "%s", why);
	}
	return n;
}

START_TEST(test_topic_backpressure)
{
	const uint64_t cap = 4 * KiB;
	int fd = tu_channel(PINSHM_TOPIC, cap, 1, 2);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER);
	pinshm_channel_t *a = tu_attach(fd, PINSHM_CONSUMER), *b = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_channel_info_t info;
	unsigned n, more;

	/* a keeps up, b reads nothing: the publisher stops when the ring is full. */
	n = publish_until_full(p, 0, 64, "the publisher did not wait for the slow subscriber", a, NULL);
	check_fill_count(n, cap, 100);
	expect_empty(a);
	TU_RC(pinshm_send(p, sbuf, 100, 20), -ETIMEDOUT);
	/* b gets everything; then the publisher goes on. */
	for (unsigned i = 0; i < n; i++)
		recv_pat(b, 100, i);
	expect_empty(b);
	more = fill(p, 100, n, 64);
	check_fill_count(more, cap, 100);
	for (unsigned i = 0; i < more; i++) {
		recv_pat(a, 100, n + i);
		recv_pat_inplace(b, 100, n + i);
	}
	expect_empty(a);
	expect_empty(b);
	TU_RC(pinshm_channel_info(a, &info), 0);
	ck_assert_uint_eq(info.lost, 0);
	TU_RC(pinshm_channel_info(b, &info), 0);
	ck_assert_uint_eq(info.lost, 0);
	/* A subscriber holding messages in place holds the publisher back too. */
	{
		pinshm_msg_t m;
		send_pat(p, 100, 1);
		recv_pat(a, 100, 1);
		TU_RC(pinshm_recv_inplace(b, &m, PINSHM_NONBLOCK), 0);
		publish_until_full(p, 2, 64, "a message held in place was overwritten", a, b);
		ck_assert_int_lt(tu_pattern_bad(m.data, 100, 1), 0);
		TU_RC(pinshm_release(b, &m), 0);
		send_pat(p, 100, 5);
		recv_pat(a, 100, 5);
		recv_pat(b, 100, 5);
	}
	close_all(fd, a, b, p, NULL);
}
END_TEST

/* A subscriber that leaves does not hold the publisher back. */
START_TEST(test_topic_subscriber_leaves)
{
	int fd = tu_channel(PINSHM_TOPIC, 4 * KiB, 1, 2);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER);
	pinshm_channel_t *a = tu_attach(fd, PINSHM_CONSUMER), *b = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_msg_t m;

	send_pat(p, 100, 0);
	recv_pat(a, 100, 0);
	TU_RC(pinshm_recv_inplace(b, &m, PINSHM_NONBLOCK), 0);
	for (unsigned i = 1; i < 10; i++) {
		send_pat(p, 100, i);
		recv_pat(a, 100, i);
	}
	TU_RC(pinshm_channel_close(b), 0);
	for (unsigned i = 10; i < 1000; i++) {
		send_pat(p, 100, i);
		recv_pat(a, 100, i);
	}
	/* A new subscriber takes the endpoint, and starts from now. */
	b = tu_attach(fd, PINSHM_CONSUMER);
	expect_empty(b);
	send_pat(p, 100, 1000);
	recv_pat(a, 100, 1000);
	recv_pat(b, 100, 1000);
	close_all(fd, a, b, p, NULL);
}
END_TEST

/* With no subscriber, publishing never blocks. */
START_TEST(test_topic_no_subscriber)
{
	int fd = tu_channel(PINSHM_TOPIC, 4 * KiB, 1, 2);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *a;

	for (unsigned i = 0; i < 500; i++)
		send_pat(p, 100, i);
	a = tu_attach(fd, PINSHM_CONSUMER);
	expect_empty(a);
	send_pat(p, 100, 500);
	recv_pat(a, 100, 500);
	expect_empty(a);
	close_all(fd, a, p, NULL);
}
END_TEST

/* Publish message @p seq of producer 0, 100 bytes, which must go at once. */
static void send_seq(pinshm_channel_t *p, uint64_t seq)
{
	tu_msg_fill(sbuf, 100, 0, seq);
	TU_RC(pinshm_send(p, sbuf, 100, PINSHM_NONBLOCK), 0);
}

/* Receive what @p c has; check seq == previous + 1 + lost (in place) or
 * seq > previous (copies); @return how many, adding the lost to *lost. */
static uint64_t overrun_drain(pinshm_channel_t *c, bool inplace, uint64_t *prev, uint64_t *lost)
{
	char why[200];
	uint64_t got = 0;

	for (;;) {
		uint32_t w;
		uint64_t s;
		int rc;

		if (inplace) {
			pinshm_msg_t m;
			rc = pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK);
			if (rc == -EAGAIN)
				break;
			TU_RC(rc, 0);
			ck_assert_msg(tu_msg_check(m.data, m.len, 0, &w, &s, why, sizeof(why)) == 0, "%s", why);
			ck_assert_msg(s == *prev + 1 + m.lost, "seq %llu after %lld with %llu lost",
				      (unsigned long long)s, (long long)*prev, (unsigned long long)m.lost);
			TU_RC(pinshm_release(c, &m), 0);
			*lost += m.lost;
		} else {
			size_t len;
			rc = pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK);
			if (rc == -EAGAIN)
				break;
			TU_RC(rc, 0);
			ck_assert_msg(tu_msg_check(rbuf, len, 0, &w, &s, why, sizeof(why)) == 0, "%s", why);
			ck_assert_msg(*prev == UINT64_MAX || s > *prev, "seq %llu after %llu", (unsigned long long)s,
				      (unsigned long long)*prev);
		}
		*prev = s;
		got++;
		ck_assert_uint_le(got, 4 * KiB / rec_size(100));
	}
	return got;
}

START_TEST(test_topic_overrun)
{
	enum { N = 2000, M = 100 };
	const uint64_t cap = 4 * KiB;
	pinshm_channel_t *p, *fast, *slow, *slow2;
	pinshm_channel_info_t info;
	uint64_t lost = 0, got = 0, prev = UINT64_MAX, lost2 = 0, got2 = 0, prev2 = UINT64_MAX;
	char why[200];
	int fd = overrun_topic(cap, 3);

	p = tu_attach(fd, PINSHM_PRODUCER);
	fast = tu_attach(fd, PINSHM_CONSUMER);
	slow = tu_attach(fd, PINSHM_CONSUMER);
	slow2 = tu_attach(fd, PINSHM_CONSUMER);
	for (unsigned i = 0; i < N; i++) {
		pinshm_msg_t m;
		uint32_t w;
		uint64_t s;
		/* The publisher never waits. */
		send_seq(p, i);
		TU_RC(pinshm_recv_inplace(fast, &m, PINSHM_NONBLOCK), 0);
		ck_assert_uint_eq(m.lost, 0);
		ck_assert_int_eq(tu_msg_check(m.data, m.len, 0, &w, &s, why, sizeof(why)), 0);
		ck_assert_uint_eq(s, i);
		TU_RC(pinshm_release(fast, &m), 0);
	}
	TU_RC(pinshm_channel_info(fast, &info), 0);
	ck_assert_uint_eq(info.lost, 0);
	/* The slow ones were lapped many times: what they get (perhaps nothing
	 * of what is still in the ring) is intact and in order. */
	got += overrun_drain(slow, true, &prev, &lost);
	got2 += overrun_drain(slow2, false, &prev2, &lost2);
	/* Then they keep up with what comes next, and account for the rest. */
	for (unsigned i = N; i < N + M; i++) {
		send_seq(p, i);
		ck_assert_uint_eq(overrun_drain(fast, true, &(uint64_t){i - 1}, &(uint64_t){0}), 1);
		got += overrun_drain(slow, true, &prev, &lost);
		got2 += overrun_drain(slow2, false, &prev2, &lost2);
	}
	ck_assert_uint_eq(prev, N + M - 1);
	ck_assert_uint_eq(prev2, N + M - 1);
	ck_assert_uint_gt(lost, 0);
	ck_assert_uint_ge(got, M);
	ck_assert_uint_eq(got + lost, N + M);
	TU_RC(pinshm_channel_info(slow, &info), 0);
	ck_assert_uint_eq(info.lost, lost);
	TU_RC(pinshm_channel_info(slow2, &info), 0);
	ck_assert_uint_gt(info.lost, 0);
	ck_assert_uint_eq(info.lost + got2, N + M);
	TU_RC(pinshm_channel_info(fast, &info), 0);
	ck_assert_uint_eq(info.lost, 0);
	close_all(fd, fast, slow, slow2, p, NULL);
}
END_TEST

/* On an overrun topic a message held in place may be overwritten; release says so. */
START_TEST(test_topic_overrun_held)
{
	int fd = overrun_topic(4 * KiB, 1);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *s = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_msg_t m;
	char why[200];
	uint32_t w;
	uint64_t seq;
	int rc;

	send_seq(p, 0);
	TU_RC(pinshm_recv_inplace(s, &m, PINSHM_NONBLOCK), 0);
	ck_assert_int_eq(tu_msg_check(m.data, m.len, 0, &w, &seq, why, sizeof(why)), 0);
	for (unsigned i = 1; i < 200; i++)
		send_seq(p, i);
	TU_RC(pinshm_release(s, &m), -ESTALE);
	/* The subscriber goes on, in order and intact: with what is left in
	 * the ring, or else with the next message. */
	rc = pinshm_recv_inplace(s, &m, PINSHM_NONBLOCK);
	if (rc == -EAGAIN) {
		send_seq(p, 200);
		rc = pinshm_recv_inplace(s, &m, PINSHM_NONBLOCK);
	}
	TU_RC(rc, 0);
	ck_assert_uint_gt(m.lost, 0);
	ck_assert_int_eq(tu_msg_check(m.data, m.len, 0, &w, &seq, why, sizeof(why)), 0);
	ck_assert_uint_eq(seq, 1 + m.lost);
	TU_RC(pinshm_release(s, &m), 0);
	close_all(fd, s, p, NULL);
}
END_TEST

/* A subscriber lapped before it received anything: the messages still in
 * the ring are intact and it gets (at least) the newest of them, with the
 * count of those it lost before. */
START_TEST(test_topic_overrun_newest)
{
	int fd = overrun_topic(4 * KiB, 1);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *s = tu_attach(fd, PINSHM_CONSUMER);
	uint64_t prev = UINT64_MAX, lost = 0;

	for (unsigned i = 0; i < 200; i++)
		send_seq(p, i);
	/* Each in place: intact, and seq == previous + 1 + lost, until -EAGAIN. */
	uint64_t got = overrun_drain(s, true, &prev, &lost);
	ck_assert_msg(got >= 1 && prev == 199, "lapped subscriber got %u messages, the last %lld; the newest (199) "
					       "was intact in the ring",
		      (unsigned)got, (long long)prev);
	close_all(fd, s, p, NULL);
}
END_TEST

/* ======================================================================== */
/* peers gone: -EPIPE                                                        */
/* ======================================================================== */

START_TEST(test_epipe_consumer)
{
	int fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 2, 1);
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER), *p, *p2;
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pinshm_msg_t m;
	size_t len;

	ck_assert_int_ge(efd, 0);
	TU_RC(pinshm_channel_set_notify_fd(c, efd), 0);
	TU_RC(pinshm_channel_arm(c), 0);

	/* No producer ever attached: just empty. */
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, 10), -ETIMEDOUT);
	p = tu_attach(fd, PINSHM_PRODUCER);
	p2 = tu_attach(fd, PINSHM_PRODUCER);
	for (unsigned i = 0; i < 3; i++)
		send_pat(p, 10, i);
	TU_RC(pinshm_channel_close(p), 0);
	/* One producer is left. */
	for (unsigned i = 0; i < 3; i++)
		recv_pat(c, 10, i);
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), -EAGAIN);
	send_pat(p2, 11, 3);
	TU_RC(pinshm_channel_close(p2), 0);
	/* What was sent before the close is still delivered, then -EPIPE. */
	recv_pat(c, 11, 3);
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), -EPIPE);
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, 5000), -EPIPE);
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_FOREVER), -EPIPE);
	TU_RC(pinshm_recv_inplace(c, &m, 5000), -EPIPE);
	TU_RC(pinshm_recv_batch(c, &m, 1, 5000), -EPIPE);
	TU_RC(pinshm_channel_arm(c), -EPIPE);
	/* A new producer: no longer -EPIPE. */
	p = tu_attach(fd, PINSHM_PRODUCER);
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), -EAGAIN);
	send_pat(p, 12, 4);
	recv_pat(c, 12, 4);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, 5000), -EPIPE);
	TU_RC(pinshm_channel_close(c), 0);
	close(efd);
	close(fd);
}
END_TEST

/* A consumer waiting for a message is woken with -EPIPE when the last producer leaves. */
START_TEST(test_epipe_consumer_wakeup)
{
	int fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 1, 1);
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER), *p = tu_attach(fd, PINSHM_PRODUCER);
	struct later l;
	pthread_t t;
	size_t len;

	pinshm_channel_set_spin(c, 0);
	t = later_start(&l, p, 50, 2);
	TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, 10000), -EPIPE);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	TU_RC(l.rc, 0);
	TU_RC(pinshm_channel_close(c), 0);
	close(fd);
}
END_TEST

START_TEST(test_epipe_producer)
{
	const uint64_t cap = 4 * KiB;
	int fd = tu_channel(PINSHM_QUEUE, cap, 1, 2);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *c, *c2;
	void *b;
	unsigned n = 0;
	int rc;

	/* No consumer ever attached: the ring fills, -EAGAIN. */
	n = fill(p, 100, 0, 1000);
	check_fill_count(n, cap, 100);
	TU_RC(pinshm_send(p, sbuf, 100, 10), -ETIMEDOUT);
	c = tu_attach(fd, PINSHM_CONSUMER);
	c2 = tu_attach(fd, PINSHM_CONSUMER);
	for (unsigned i = 0; i < n; i++)
		recv_pat(i % 2 ? c : c2, 100, i);
	TU_RC(pinshm_channel_close(c), 0);
	send_pat(p, 100, 7);
	recv_pat(c2, 100, 7);
	TU_RC(pinshm_channel_close(c2), 0);
	/* Every consumer left: the producer gets -EPIPE when it must wait. */
	for (n = 0;; n++) {
		tu_pattern(sbuf, 100, n);
		rc = pinshm_send(p, sbuf, 100, 2000);
		if (rc == -EPIPE)
			break;
		ck_assert_msg(rc == 0, "send after the consumers left: %d (%s)", rc, pinshm_strerror(rc));
		ck_assert_msg(n <= cap / 128, "no -EPIPE once the ring is full");
	}
	TU_RC(pinshm_send(p, sbuf, 100, PINSHM_FOREVER), -EPIPE);
	TU_RC(pinshm_reserve(p, 100, &b, 2000), -EPIPE);
	/* A consumer comes back: it gets what was sent, and -EPIPE is gone. */
	c = tu_attach(fd, PINSHM_CONSUMER);
	for (unsigned i = 0; i < n; i++)
		recv_pat(c, 100, i);
	expect_empty(c);
	send_pat(p, 100, 8);
	recv_pat(c, 100, 8);
	close_all(fd, c, p, NULL);
}
END_TEST

/* A producer waiting for room is woken with -EPIPE when the last consumer leaves. */
START_TEST(test_epipe_producer_wakeup)
{
	int fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 1, 1);
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER), *p = tu_attach(fd, PINSHM_PRODUCER);
	struct later l;
	pthread_t t;

	pinshm_channel_set_spin(p, 0);
	fill(p, 100, 0, 1000);
	t = later_start(&l, c, 50, 2);
	TU_RC(pinshm_send(p, sbuf, 100, 10000), -EPIPE);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	TU_RC(l.rc, 0);
	TU_RC(pinshm_channel_close(p), 0);
	close(fd);
}
END_TEST

/* ======================================================================== */
/* eventfd                                                                   */
/* ======================================================================== */

static bool readable(int fd, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	int rc = poll(&pfd, 1, timeout_ms);

	ck_assert_int_ge(rc, 0);
	return rc == 1 && (pfd.revents & POLLIN);
}

static void clear_efd(int efd)
{
	uint64_t v;

	ck_assert_int_eq(read(efd, &v, sizeof(v)), (int)sizeof(v));
	ck_assert_uint_ge(v, 1);
}

START_TEST(test_eventfd)
{
	int fd = tu_channel(PINSHM_QUEUE, 4 * KiB, 2, 1);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *p2 = tu_attach(fd, PINSHM_PRODUCER);
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER);
	unsigned cep = pinshm_channel_endpoint(c);
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	void *b;

	ck_assert_int_ge(efd, 0);
	TU_RC(pinshm_channel_set_notify_fd(p, efd), -EINVAL);
	TU_RC(pinshm_channel_set_notify_fd(c, efd), 0);
	TU_RC(pinshm_channel_set_peer_fd(p, 0, efd), -EINVAL);   /* a producer endpoint */
	TU_RC(pinshm_channel_set_peer_fd(p, 100, efd), -EINVAL); /* no such endpoint */
	TU_RC(pinshm_channel_set_peer_fd(c, cep, efd), -EINVAL); /* not a producer */
	TU_RC(pinshm_channel_set_peer_fd(p, cep, efd), 0);
	TU_RC(pinshm_channel_set_peer_fd(p2, cep, efd), 0);

	/* Armed while empty; a send wakes it. */
	TU_RC(pinshm_channel_arm(c), 0);
	ck_assert(!readable(efd, 0));
	send_pat(p, 10, 1);
	ck_assert_msg(readable(efd, 2000), "eventfd not signalled after arm + send");
	clear_efd(efd);
	/* A message is ready: arm says so. */
	TU_RC(pinshm_channel_arm(c), -EAGAIN);
	recv_pat(c, 10, 1);
	expect_empty(c);
	/* Not armed (the receive disarmed it): a send does not write the eventfd. */
	send_pat(p, 10, 2);
	ck_assert_msg(!readable(efd, 50), "eventfd signalled although not armed");
	recv_pat(c, 10, 2);
	/* Armed again, from the other producer. */
	TU_RC(pinshm_channel_arm(c), 0);
	TU_RC(pinshm_channel_arm(c), 0);
	send_pat(p2, 10, 3);
	ck_assert(readable(efd, 2000));
	clear_efd(efd);
	recv_pat(c, 10, 3);
	/* PINSHM_MORE defers the wake-up to the flush. */
	TU_RC(pinshm_channel_arm(c), 0);
	TU_RC(pinshm_reserve(p, 10, &b, PINSHM_NONBLOCK), 0);
	tu_pattern(b, 10, 4);
	TU_RC(pinshm_commit(p, 10, PINSHM_MORE), 0);
	ck_assert_msg(!readable(efd, 50), "woken despite PINSHM_MORE");
	TU_RC(pinshm_flush(p), 0);
	ck_assert(readable(efd, 2000));
	clear_efd(efd);
	recv_pat(c, 10, 4);
	/* A batch wakes it too. */
	TU_RC(pinshm_channel_arm(c), 0);
	{
		struct iovec iov[3] = {{sbuf, 5}, {sbuf, 0}, {sbuf, 7}};
		TU_RC(pinshm_send_batch(p, iov, 3, PINSHM_NONBLOCK), 3);
	}
	ck_assert(readable(efd, 2000));
	clear_efd(efd);
	for (unsigned i = 0; i < 3; i++) {
		size_t len;
		TU_RC(pinshm_recv(c, rbuf, sizeof(rbuf), &len, PINSHM_NONBLOCK), 0);
	}
	expect_empty(c);
	/* Forgotten peer fd: no write. */
	TU_RC(pinshm_channel_set_peer_fd(p, cep, -1), 0);
	TU_RC(pinshm_channel_arm(c), 0);
	send_pat(p, 10, 5);
	ck_assert(!readable(efd, 50));
	recv_pat(c, 10, 5);
	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_channel_close(p2), 0);
	close(efd);
	close(fd);
}
END_TEST

/* A topic: every armed subscriber's eventfd is written. */
START_TEST(test_eventfd_topic)
{
	int fd = tu_channel(PINSHM_TOPIC, 4 * KiB, 1, 2);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER);
	pinshm_channel_t *s[2] = {tu_attach(fd, PINSHM_CONSUMER), tu_attach(fd, PINSHM_CONSUMER)};
	int efd[2];

	for (unsigned i = 0; i < 2; i++) {
		efd[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		ck_assert_int_ge(efd[i], 0);
		TU_RC(pinshm_channel_set_notify_fd(s[i], efd[i]), 0);
		TU_RC(pinshm_channel_set_peer_fd(p, pinshm_channel_endpoint(s[i]), efd[i]), 0);
		TU_RC(pinshm_channel_arm(s[i]), 0);
	}
	send_pat(p, 10, 1);
	for (unsigned i = 0; i < 2; i++) {
		ck_assert(readable(efd[i], 2000));
		clear_efd(efd[i]);
		TU_RC(pinshm_channel_arm(s[i]), -EAGAIN);
		recv_pat(s[i], 10, 1);
		close(efd[i]);
		TU_RC(pinshm_channel_close(s[i]), 0);
	}
	TU_RC(pinshm_channel_close(p), 0);
	close(fd);
}
END_TEST

/* Waits until the next probe of a spin budget at 0: the waits that spin 0,
 * then the probe itself (its spin returned). */
static unsigned waits_to_probe(struct wait_spin *s, uint64_t *probe_ns)
{
	for (unsigned n = 1; n <= 2 * WAIT_PROBE_MAX; n++) {
		uint64_t ns = wait_spin_begin(s, 0);
		ck_assert_uint_eq(s->budget_ns, 0);
		if (ns > 0) {
			*probe_ns = ns;
			return n;
		}
	}
	ck_abort_msg("no probe in %u waits", 2 * WAIT_PROBE_MAX);
	return 0;
}

/* The adaptive spin budget: spins that run out shrink it to 0, probes
 * then come at growing intervals, a satisfied probe restores it and a
 * run of satisfied spins grows it back to its ceiling, never above. */
START_TEST(test_spin_adapts)
{
	struct wait_spin s;
	uint64_t ns, was;
	unsigned n, every = WAIT_PROBE_MIN;

	wait_spin_init(&s, 50000, false);
	/* A peer that copies a large message first: a longer spin, and one
	 * that runs out halves the budget alone. */
	ck_assert_uint_eq(wait_spin_begin(&s, 1 << 20), 50000 + (1 << 20) * WAIT_SPIN_NS_PER_BYTE);
	wait_spin_end(&s, 50000 + (1 << 20) * WAIT_SPIN_NS_PER_BYTE, false);
	ck_assert_uint_eq(s.budget_ns, 25000);
	ck_assert_uint_eq(wait_spin_begin(&s, 4096), 25000 + 4096 * WAIT_SPIN_NS_PER_BYTE);
	wait_spin_end(&s, 25000 + 4096 * WAIT_SPIN_NS_PER_BYTE, true);
	ck_assert_uint_eq(s.budget_ns, 50000);
	/* The allowance has a ceiling: a 64 MiB message adds what 1 MiB does. */
	ck_assert_uint_eq(wait_spin_begin(&s, 64u << 20), 50000 + WAIT_SPIN_COPY_MAX_NS);
	ck_assert_uint_eq(wait_spin_begin(&s, UINT64_MAX), 50000 + WAIT_SPIN_COPY_MAX_NS);
	for (n = 0; s.budget_ns > 0; n++) {
		ck_assert_uint_lt(n, 10);
		was = s.budget_ns;
		ns = wait_spin_begin(&s, 0);
		ck_assert_uint_eq(ns, was);
		wait_spin_end(&s, ns, false);
		ck_assert_uint_lt(s.budget_ns, was);
	}
	/* Fruitless probes space themselves out, up to a bound. */
	for (unsigned i = 0; i < 12; i++) {
		ck_assert_uint_eq(waits_to_probe(&s, &ns), every);
		ck_assert_uint_eq(ns, 50000);
		wait_spin_end(&s, ns, false);
		if (every < WAIT_PROBE_MAX)
			every *= 2;
	}
	ck_assert_uint_eq(every, WAIT_PROBE_MAX);
	/* A probe satisfied: the whole budget again, probes frequent again. */
	waits_to_probe(&s, &ns);
	wait_spin_end(&s, ns, true);
	ck_assert_uint_eq(s.budget_ns, 50000);
	/* Down to a small budget, then a run of satisfied spins. */
	for (n = 0; n < 4; n++)
		wait_spin_end(&s, wait_spin_begin(&s, 0), false);
	ck_assert_uint_gt(s.budget_ns, 0);
	ck_assert_uint_le(s.budget_ns, 50000 / 16);
	for (n = 0; s.budget_ns < 50000; n++) {
		ck_assert_uint_lt(n, 5);
		was = s.budget_ns;
		wait_spin_end(&s, wait_spin_begin(&s, 0), true);
		ck_assert_uint_gt(s.budget_ns, was);
	}
	wait_spin_end(&s, wait_spin_begin(&s, 0), true);
	ck_assert_uint_eq(s.budget_ns, 50000);
	/* Back to 0: the first probe comes after WAIT_PROBE_MIN waits again. */
	while (s.budget_ns > 0)
		wait_spin_end(&s, wait_spin_begin(&s, 0), false);
	ck_assert_uint_eq(waits_to_probe(&s, &ns), WAIT_PROBE_MIN);

	/* A fixed budget never moves, and a fixed 0 never probes. */
	wait_spin_init(&s, 20000, true);
	for (n = 0; n < 10; n++) {
		ck_assert_uint_eq(wait_spin_begin(&s, n << 16), 20000);
		wait_spin_end(&s, 20000, false);
	}
	wait_spin_init(&s, 0, true);
	for (n = 0; n < 2 * WAIT_PROBE_MAX; n++)
		ck_assert_uint_eq(wait_spin_begin(&s, 1 << 20), 0);
}
END_TEST

/* A handle's waits drive its budget: receives that time out on an empty
 * channel shrink the default one to 0 and leave a fixed one alone;
 * PINSHM_SPIN_ADAPTIVE brings the default back. */
START_TEST(test_spin_handle)
{
	struct pair pr = pair_open(PINSHM_QUEUE, 4 * KiB);
	size_t len;

	ck_assert(!pr.c->spin.fixed);
	ck_assert_uint_eq(pr.c->spin.budget_ns, 50000);
	for (unsigned i = 0; i < 5; i++)
		TU_RC(pinshm_recv(pr.c, rbuf, sizeof(rbuf), &len, 2), -ETIMEDOUT);
	ck_assert_uint_eq(pr.c->spin.budget_ns, 0);
	/* One taken at once says nothing of the spin. */
	send_pat(pr.p, 100, 7);
	TU_RC(pinshm_recv(pr.c, rbuf, sizeof(rbuf), &len, 1000), 0);
	ck_assert_uint_eq(pr.c->spin.budget_ns, 0);

	pinshm_channel_set_spin(pr.c, 30000);
	for (unsigned i = 0; i < 3; i++)
		TU_RC(pinshm_recv(pr.c, rbuf, sizeof(rbuf), &len, 2), -ETIMEDOUT);
	ck_assert_uint_eq(pr.c->spin.budget_ns, 30000);
	pinshm_channel_set_spin(pr.c, PINSHM_SPIN_ADAPTIVE);
	ck_assert(!pr.c->spin.fixed);
	ck_assert_uint_eq(pr.c->spin.budget_ns, 50000);
	pair_close(&pr);

	/* After a long message, waits whose 1 ms timeout ends their spin
	 * (its copy allowance is longer) still bring the budget down. */
	pr = pair_open(PINSHM_QUEUE, 8 * MiB);
	static unsigned char big[3 * MiB];
	TU_RC(pinshm_send(pr.p, big, sizeof(big), 1000), 0);
	TU_RC(pinshm_recv(pr.c, big, sizeof(big), &len, 1000), 0);
	ck_assert_uint_eq(len, sizeof(big));
	ck_assert_uint_eq(pr.c->spin.budget_ns, 50000);
	for (unsigned i = 0; i < 6; i++)
		TU_RC(pinshm_recv(pr.c, rbuf, sizeof(rbuf), &len, 1), -ETIMEDOUT);
	ck_assert_uint_eq(pr.c->spin.budget_ns, 0);
	pair_close(&pr);
}
END_TEST

static Suite *ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *tc;

	tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_version);
	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_full);
	tcase_add_test(tc, test_full_sizes);
	tcase_add_test(tc, test_wrap_every_offset);
	tcase_add_loop_test(tc, test_every_size, 0, 2);
	tcase_add_test(tc, test_too_large);
	tcase_add_test(tc, test_recv_null_zero);
	tcase_add_test(tc, test_zero_copy_mixed);
	tcase_add_loop_test(tc, test_commit_shorter, 0, 2);
	tcase_add_test(tc, test_zero_ahead_lines);
	tcase_add_loop_test(tc, test_exact_fit, 0, 2);
	tcase_add_test(tc, test_lanes_attach_late);
	tcase_add_test(tc, test_release_order);
	tcase_add_test(tc, test_held_keeps_room);
	tcase_add_test(tc, test_hold_limit);
	tcase_add_test(tc, test_batches);
	tcase_add_test(tc, test_long_messages);
	tcase_add_test(tc, test_batch_partial);
	tcase_add_test(tc, test_roles);
	tcase_add_test(tc, test_info);
	tcase_add_test(tc, test_close_with_held);
	tcase_add_test(tc, test_close_drops_reservation);
	tcase_add_test(tc, test_shared_queue);
	tcase_add_test(tc, test_shared_reap_under_traffic);
	tcase_add_test(tc, test_multi_producer);
	tcase_add_test(tc, test_round_robin_calls);
	tcase_add_test(tc, test_many_lanes_fair);
	tcase_add_loop_test(tc, test_quick_polls, 0, 2);
	tcase_add_loop_test(tc, test_oversize_met_again, 0, 3);
	tcase_add_test(tc, test_max_producers);
	suite_add_tcase(s, tc);

	tc = tcase_create("limits");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_attr_defaults);
	tcase_add_test(tc, test_attr_validation);
	tcase_add_test(tc, test_segment_format);
	tcase_add_test(tc, test_attach_limits);
	tcase_add_test(tc, test_endpoint_numbers);
	tcase_add_test(tc, test_attach_maps_used_pages);
	suite_add_tcase(s, tc);

	tc = tcase_create("timeouts");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_timeouts);
	tcase_add_test(tc, test_wakeup_recv);
	tcase_add_test(tc, test_wakeup_send);
	tcase_add_test(tc, test_spin_adapts);
	tcase_add_test(tc, test_spin_handle);
	suite_add_tcase(s, tc);

	tc = tcase_create("topic");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_topic_basic);
	tcase_add_test(tc, test_topic_two_publishers);
	tcase_add_test(tc, test_topic_backpressure);
	tcase_add_test(tc, test_topic_subscriber_leaves);
	tcase_add_test(tc, test_topic_no_subscriber);
	tcase_add_test(tc, test_topic_overrun);
	tcase_add_test(tc, test_topic_overrun_held);
	tcase_add_test(tc, test_topic_overrun_newest);
	suite_add_tcase(s, tc);

	tc = tcase_create("epipe");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_epipe_consumer);
	tcase_add_test(tc, test_epipe_consumer_wakeup);
	tcase_add_test(tc, test_epipe_producer);
	tcase_add_test(tc, test_epipe_producer_wakeup);
	suite_add_tcase(s, tc);

	tc = tcase_create("eventfd");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_eventfd);
	tcase_add_test(tc, test_eventfd_topic);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(ring_suite(), false) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
