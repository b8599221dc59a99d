/*
 * feed_bench.c - pinshm-feed --bench copy: host-to-device and
 * device-to-host GB/s, for sizes from min to max (x4 each step), from
 *   pinshm-registered: a record reserved on a registered producer handle;
 *   runtime-pinned: the runtime's own pinned allocation;
 *   pageable: malloc() memory;
 *   pinshm-unregistered: a record reserved on a handle not registered;
 * then what registering and unregistering a channel costs per GiB, and the
 * time from opening a channel (attach, register, receive in place) to the
 * end of its first copy.  Each figure is the wall time of synchronous
 * copies, after one copy to warm up.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feed.h"

#define BENCH_BYTES (512ull << 20) /* per figure, roughly */
#define BENCH_MIN_REPS 3
#define BENCH_MAX_REPS 2000
#define REGISTER_REPS 5
#define FIRST_COPY (4u << 20)

enum { SRC_REGISTERED, SRC_PINNED, SRC_PAGEABLE, SRC_UNREGISTERED, SRC_COUNT };
static const char *const src_names[SRC_COUNT] = { "pinshm-registered", "runtime-pinned", "pageable",
						   "pinshm-unregistered" };

static const char *const bench_cols[] = { "what", "size", "h2d_GB_s", "d2h_GB_s", "ms_per_GiB", "first_copy_us" };
static const bool bench_text[] = { true, false, false, false, false, false };

/* GB/s of copies of @p len bytes between @p h and the device; < 0: -errno. */
static double rate(struct feed_dev *d, bool to_device, const struct feed_host *h, size_t len, char *why)
{
	unsigned reps = (unsigned)(BENCH_BYTES / len);
	int rc = d->ops->copy_sync(d, to_device, h, len, why);

	reps = reps < BENCH_MIN_REPS ? BENCH_MIN_REPS : reps > BENCH_MAX_REPS ? BENCH_MAX_REPS : reps;
	double t0 = feed_now();
	for (unsigned i = 0; rc == 0 && i < reps; i++)
		rc = d->ops->copy_sync(d, to_device, h, len, why);
	double t = feed_now() - t0;
	return rc != 0 ? rc : (double)len * reps / t / 1e9;
}

static void row(struct feed_report *r, const char *what, size_t size, double h2d, double d2h, double ms, double us)
{
	char v[6][32];

	snprintf(v[0], 32, "%s", what);
	snprintf(v[1], 32, "%zu", size);
	snprintf(v[2], 32, h2d >= 0 ? "%.3f" : "-", h2d);
	snprintf(v[3], 32, d2h >= 0 ? "%.3f" : "-", d2h);
	snprintf(v[4], 32, ms >= 0 ? "%.3f" : "-", ms);
	snprintf(v[5], 32, us >= 0 ? "%.1f" : "-", us);
	feed_report_row(r, v, bench_text);
}

/* A segment whose records may be @p max bytes; attached twice as a producer. */
static int bench_channel(size_t max, int *fd, pinshm_channel_t **reg, pinshm_channel_t **unreg)
{
	pinshm_channel_attr_t attr;

	pinshm_channel_attr_init(&attr);
	attr.capacity = feed_capacity(max);
	attr.max_producers = 2;
	int rc = pinshm_segment_create(&attr, fd);
	if (rc == 0)
		rc = pinshm_channel_attach(*fd, PINSHM_PRODUCER, reg);
	if (rc == 0)
		rc = pinshm_channel_attach(*fd, PINSHM_PRODUCER, unreg);
	return rc;
}

/* Every source at @p size: h2d and d2h. */
static int bench_size(struct feed_dev *d, pinshm_channel_t *reg, pinshm_channel_t *unreg, struct feed_host *pinned,
		      void *pageable, size_t size, struct feed_report *r, char *why)
{
	pinshm_device_t *dev = d->ops->device(d);
	void *a, *b;
	int rc = pinshm_reserve(reg, size, &a, PINSHM_NONBLOCK);

	if (rc == 0 && (rc = pinshm_reserve(unreg, size, &b, PINSHM_NONBLOCK)) != 0)
		pinshm_abort(reg);
	if (rc != 0)
		return rc;
	pinshm_device_addr_t at = { 0 };
	int arc = pinshm_device_addr(reg, dev, a, size, &at);
	struct feed_host h[SRC_COUNT] = {
		[SRC_REGISTERED] = { .ptr = a, .buffer = at.buffer, .offset = at.offset },
		[SRC_PINNED] = *pinned,
		[SRC_PAGEABLE] = { .ptr = pageable },
		[SRC_UNREGISTERED] = { .ptr = b },
	};
	memset(a, 1, size);
	memset(b, 1, size);
	memset(pageable, 1, size);
	memset(pinned->ptr, 1, size);
	for (int s = 0; rc == 0 && s < SRC_COUNT; s++) {
		if (s == SRC_REGISTERED && arc != 0 && arc != -ENOTSUP) {
			rc = arc;
			break;
		}
		double up = rate(d, true, &h[s], size, why), down = rate(d, false, &h[s], size, why);
		if (up < 0 || down < 0)
			rc = up < 0 ? (int)up : (int)down;
		else
			row(r, src_names[s], size, up, down, -1, -1);
	}
	pinshm_abort(reg);
	pinshm_abort(unreg);
	return rc;
}

/* Registering and unregistering @p ch: ms per GiB of its mapping. */
static int bench_register(struct feed_dev *d, int fd, struct feed_report *r)
{
	pinshm_channel_t *ch;
	int rc = pinshm_channel_attach(fd, PINSHM_CONSUMER, &ch);
	size_t size = 0;

	if (rc != 0)
		return rc;
	double t0 = feed_now();
	for (int i = 0; rc == 0 && i < REGISTER_REPS; i++) {
		rc = pinshm_channel_register(ch, d->ops->device(d), 0);
		if (rc == 0)
			rc = pinshm_channel_unregister(ch, d->ops->device(d));
	}
	double t = (feed_now() - t0) / REGISTER_REPS;
	off_t end = lseek(fd, 0, SEEK_END);
	size = end > 0 ? (size_t)end : 0;
	if (rc != 0)
		fprintf(stderr, "pinshm-feed: register: %s\n", pinshm_channel_error(ch));
	else
		row(r, "register+unregister", size, -1, -1, t * 1e3 / ((double)size / (1u << 30)), -1);
	pinshm_channel_close(ch);
	return rc;
}

/* Open a channel holding one record: attach, register, receive, copy. */
static int bench_first_copy(struct feed_dev *d, size_t size, struct feed_report *r, char *why)
{
	pinshm_channel_attr_t attr;
	pinshm_channel_t *p, *c = NULL;
	pinshm_msg_t m;
	void *room;
	int fd;

	pinshm_channel_attr_init(&attr);
	attr.capacity = feed_capacity(size);
	int rc = pinshm_segment_create(&attr, &fd);
	if (rc == 0 && (rc = pinshm_channel_attach(fd, PINSHM_PRODUCER, &p)) == 0) {
		if ((rc = pinshm_reserve(p, size, &room, PINSHM_NONBLOCK)) == 0) {
			memset(room, 7, size);
			pinshm_commit(p, size, 0);
		}
		double t0 = feed_now();
		struct feed_host h = { 0 };
		if (rc == 0)
			rc = pinshm_channel_attach(fd, PINSHM_CONSUMER, &c);
		if (rc == 0)
			rc = pinshm_channel_register(c, d->ops->device(d), 0);
		if (rc == 0)
			rc = pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK);
		if (rc == 0) {
			pinshm_device_addr_t a = { 0 };
			pinshm_device_addr(c, d->ops->device(d), m.data, m.len, &a);
			h = (struct feed_host){ .ptr = (void *)m.data, .buffer = a.buffer, .offset = a.offset };
			rc = d->ops->copy_sync(d, true, &h, size, why);
		}
		if (rc == 0)
			row(r, "first-copy-after-open", size, -1, -1, -1, (feed_now() - t0) * 1e6);
		if (c)
			pinshm_channel_close(c);
		pinshm_channel_close(p);
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

int feed_bench_copy(struct feed_dev *d, size_t min_size, size_t max_size, struct feed_report *r)
{
	pinshm_channel_t *reg = NULL, *unreg = NULL;
	struct feed_host pinned = { 0 };
	char why[FEED_WHY] = "";
	int fd = -1;
	void *pageable = malloc(max_size);
	int rc = pageable ? bench_channel(max_size, &fd, &reg, &unreg) : -ENOMEM;

	if (rc == 0 && (rc = pinshm_channel_register(reg, d->ops->device(d), 0)) != 0)
		snprintf(why, FEED_WHY, "register: %s", pinshm_channel_error(reg));
	if (rc == 0)
		rc = d->ops->host_alloc(d, max_size, &pinned, why);
	feed_report_begin(r, r->format, bench_cols, 6);
	for (size_t size = min_size; rc == 0 && size <= max_size; size *= 4)
		rc = bench_size(d, reg, unreg, &pinned, pageable, size, r, why);
	if (rc == 0)
		rc = bench_register(d, fd, r);
	if (rc == 0)
		rc = bench_first_copy(d, FIRST_COPY < max_size ? FIRST_COPY : max_size, r, why);
	feed_report_end(r);
	if (rc != 0)
		fprintf(stderr, "pinshm-feed: --bench copy: %s (%s)\n", pinshm_strerror(rc), why);
	if (pinned.ptr)
		d->ops->host_free(d, &pinned);
	if (unreg)
		pinshm_channel_close(unreg);
	if (reg)
		pinshm_channel_close(reg);
	if (fd >= 0)
		close(fd);
	free(pageable);
	return rc;
}
