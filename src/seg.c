/*
 * seg.c - a segment's geometry and format, its endpoints' claim and reap.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "seg.h"
#include "wait.h"

#define PAGE 4096u

static uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

int seg_geometry_compute(const pinshm_channel_attr_t *attr, struct seg_geometry *g)
{
	uint64_t cap = attr->capacity;
	uint64_t largest = cap / 2 - 32;

	if (attr->kind != PINSHM_QUEUE && attr->kind != PINSHM_TOPIC)
		return -EINVAL;
	if (attr->flags & ~PINSHM_OVERRUN || (attr->flags & PINSHM_OVERRUN && attr->kind != PINSHM_TOPIC))
		return -EINVAL;
	if (cap < PINSHM_MIN_CAPACITY || cap > PINSHM_MAX_CAPACITY || (cap & (cap - 1)) != 0)
		return -EINVAL;
	if (attr->max_message > largest)
		return -EINVAL;
	if (attr->max_producers < 1 || attr->max_producers > PINSHM_MAX_PRODUCERS)
		return -EINVAL;
	if (attr->max_consumers < 1 || attr->max_consumers > PINSHM_MAX_CONSUMERS)
		return -EINVAL;

	*g = (struct seg_geometry){
		.capacity = cap,
		.kind = attr->kind,
		.flags = attr->flags,
		.max_message = attr->max_message ? attr->max_message : (uint32_t)largest,
		.max_producers = attr->max_producers,
		.max_consumers = attr->max_consumers,
	};
	uint64_t endpoints = attr->max_producers + attr->max_consumers;
	g->endpoints_off = sizeof(struct seg_header);
	g->cursors_off = g->endpoints_off + endpoints * sizeof(struct endpoint);
	g->cursor_stride = round_up(attr->max_producers, PINSHM_CACHELINE / sizeof(uint64_t));
	uint64_t cursors = attr->kind == PINSHM_TOPIC ? attr->max_consumers * g->cursor_stride * sizeof(uint64_t) : 0;
	g->lanes_off = round_up(g->cursors_off + cursors, PAGE);
	g->lane_stride = sizeof(struct lane_header) + cap;
	g->size = round_up(g->lanes_off + attr->max_producers * g->lane_stride, PAGE);
	return 0;
}

int seg_geometry_read(const void *base, size_t size, struct seg_geometry *g)
{
	const struct seg_header *h = base;

	if (size < sizeof(*h) || h->magic != PINSHM_SEG_MAGIC || h->layout_version != PINSHM_LAYOUT_VERSION)
		return -EPROTO;
	/* Each field is read once, into local memory, and checked there. */
	pinshm_channel_attr_t attr = {
		.kind = h->kind,
		.flags = h->flags,
		.capacity = h->capacity,
		.max_message = h->max_message,
		.max_producers = h->max_producers,
		.max_consumers = h->max_consumers,
	};
	uint64_t declared = h->segment_size;

	if (attr.max_message == 0 || seg_geometry_compute(&attr, g) != 0)
		return -EBADMSG;
	if (g->size != declared || g->size > size)
		return -EBADMSG;
	return 0;
}

void pinshm_channel_attr_init(pinshm_channel_attr_t *attr)
{
	*attr = (pinshm_channel_attr_t){
		.kind = PINSHM_QUEUE,
		.capacity = 1u << 20,
		.max_producers = 4,
		.max_consumers = 1,
	};
}

int pinshm_segment_size(const pinshm_channel_attr_t *attr, size_t *size)
{
	struct seg_geometry g;
	int rc = seg_geometry_compute(attr, &g);

	if (rc == 0)
		*size = g.size;
	return rc;
}

int pinshm_segment_format(void *base, size_t size, const pinshm_channel_attr_t *attr)
{
	struct seg_geometry g;
	int rc = seg_geometry_compute(attr, &g);

	if (rc != 0)
		return rc;
	if (size < g.size)
		return -ENOSPC;

	/* Everything a reader looks at before a producer wrote it is zeroed
	 * here, so the memory need not come zeroed. */
	memset(base, 0, g.lanes_off);
	for (unsigned l = 0; l < g.max_producers; l++) {
		memset(seg_lane(&g, base, l), 0, sizeof(struct lane_header));
		memset(seg_ring(&g, base, l), 0, PINSHM_RECORD_HEADER);
	}
	for (unsigned c = 0; g.kind == PINSHM_TOPIC && c < g.max_consumers; c++)
		for (unsigned l = 0; l < g.max_producers; l++)
			atomic_init(seg_cursor(&g, base, c, l), TOPIC_CURSOR_UNSET);

	struct seg_header *h = base;
	h->layout_version = PINSHM_LAYOUT_VERSION;
	h->kind = g.kind;
	h->flags = g.flags;
	h->max_message = g.max_message;
	h->capacity = g.capacity;
	h->max_producers = g.max_producers;
	h->max_consumers = g.max_consumers;
	h->segment_size = g.size;
	atomic_thread_fence(memory_order_release);
	h->magic = PINSHM_SEG_MAGIC;
	return 0;
}

int pinshm_segment_create(const pinshm_channel_attr_t *attr, int *fd_out)
{
	struct seg_geometry g;
	int rc = seg_geometry_compute(attr, &g);

	if (rc != 0)
		return rc;
	int fd = memfd_create("pinshm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	void *base = MAP_FAILED;
	if (ftruncate(fd, (off_t)g.size) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
	    (base = mmap(NULL, g.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		rc = -errno;
		goto out;
	}
	rc = pinshm_segment_format(base, g.size, attr);
	munmap(base, g.size);
out:
	if (rc != 0)
		close(fd);
	else
		*fd_out = fd;
	return rc;
}

int seg_endpoint_take(const struct seg_geometry *g, void *base, unsigned first, unsigned n, uint32_t pid)
{
	for (unsigned i = first; i < first + n; i++) {
		struct endpoint *ep = seg_endpoint(g, base, i);
		uint32_t state = atomic_load_explicit(&ep->state, memory_order_relaxed);
		if (state == EP_ACTIVE)
			continue;
		if (atomic_compare_exchange_strong_explicit(&ep->state, &state, EP_ACTIVE, memory_order_seq_cst,
							    memory_order_relaxed)) {
			atomic_store_explicit(&ep->pid, pid, memory_order_relaxed);
			atomic_store_explicit(&ep->armed, 0, memory_order_relaxed);
			atomic_store_explicit(&ep->sleeping, 0, memory_order_relaxed);
			atomic_fetch_add_explicit(&ep->generation, 1, memory_order_relaxed);
			return (int)i;
		}
	}
	return -EBUSY;
}

void seg_topic_cursors_unset(const struct seg_geometry *g, void *base, unsigned endpoint)
{
	if (g->kind != PINSHM_TOPIC || endpoint < g->max_producers)
		return;
	for (unsigned l = 0; l < g->max_producers; l++)
		atomic_store_explicit(seg_cursor(g, base, endpoint - g->max_producers, l), TOPIC_CURSOR_UNSET,
				      memory_order_relaxed);
}

void seg_endpoints_changed(struct seg_header *h)
{
	atomic_fetch_add_explicit(&h->endpoint_changes, 1, memory_order_seq_cst);
	wait_wake_all(&h->data);
	wait_wake_all(&h->space);
}

int seg_endpoint_reap(const struct seg_geometry *g, void *base, unsigned endpoint)
{
	struct unclaim_cursor cur = {0};

	return seg_endpoint_reap_step(g, base, endpoint, &cur, UINT64_MAX);
}

int seg_endpoint_reap_step(const struct seg_geometry *g, void *base, unsigned endpoint, struct unclaim_cursor *cur,
			   uint64_t bytes)
{
	if (endpoint >= g->max_producers + g->max_consumers)
		return -EINVAL;
	struct endpoint *ep = seg_endpoint(g, base, endpoint);
	if (atomic_load_explicit(&ep->state, memory_order_acquire) != EP_ACTIVE)
		return -EINVAL;

	/* A producer's unfinished reservation was never published: nothing to
	 * undo, its successor on the lane finds the true tail.  A sequential
	 * consumer's durable position is the lane's free index (or its topic
	 * cursor): what it held unreleased is read again by its successor.
	 * A shared consumer's claims are handed back to the others. */
	if (endpoint >= g->max_producers && g->kind == PINSHM_QUEUE && g->max_consumers > 1) {
		int rc = ring_unclaim_step(g, base, endpoint - g->max_producers, cur, bytes);
		if (rc != 0)
			return rc;
	}
	atomic_store_explicit(&ep->armed, 0, memory_order_relaxed);
	seg_topic_cursors_unset(g, base, endpoint);
	struct seg_header *h = base;
	wait_forget_dead(&h->data, &h->space, atomic_exchange_explicit(&ep->sleeping, 0, memory_order_relaxed));
	atomic_store_explicit(&ep->state, EP_DEAD, memory_order_release);
	seg_endpoints_changed(base);
	return 0;
}

int pinshm_segment_reap(void *base, size_t size, unsigned endpoint)
{
	struct seg_geometry g;
	int rc = seg_geometry_read(base, size, &g);

	return rc != 0 ? rc : seg_endpoint_reap(&g, base, endpoint);
}
