/*
 * channel.c - segment geometry, format, attach/close, endpoints and repair.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "channel.h"
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

struct lane_header *seg_lane(const struct seg_geometry *g, void *base, unsigned lane)
{
	return (struct lane_header *)((uint8_t *)base + g->lanes_off + lane * g->lane_stride);
}

uint8_t *seg_ring(const struct seg_geometry *g, void *base, unsigned lane)
{
	return (uint8_t *)seg_lane(g, base, lane) + sizeof(struct lane_header);
}

struct endpoint *seg_endpoint(const struct seg_geometry *g, void *base, unsigned endpoint)
{
	return (struct endpoint *)((uint8_t *)base + g->endpoints_off) + endpoint;
}

_Atomic uint64_t *seg_cursor(const struct seg_geometry *g, void *base, unsigned consumer, unsigned lane)
{
	return (_Atomic uint64_t *)((uint8_t *)base + g->cursors_off) + consumer * g->cursor_stride + lane;
}

/* True when no endpoint in [first, first + n) is attached but one had been. */
static bool endpoints_gone(const struct seg_geometry *g, void *base, unsigned first, unsigned n)
{
	bool seen = false;

	for (unsigned i = first; i < first + n; i++) {
		uint32_t state = atomic_load_explicit(&seg_endpoint(g, base, i)->state, memory_order_acquire);
		if (state == EP_ACTIVE)
			return false;
		if (state == EP_CLOSED || state == EP_DEAD)
			seen = true;
	}
	return seen;
}

/* Whether every endpoint of the other role has left, looked at again only
 * when an endpoint changed state. */
bool channel_peers_gone(pinshm_channel_t *ch)
{
	uint32_t changes = atomic_load_explicit(&ch->hdr->endpoint_changes, memory_order_acquire);

	if (changes != ch->gone_changes) {
		ch->gone_changes = changes;
		if (ch->role == PINSHM_PRODUCER)
			ch->gone = endpoints_gone(&ch->g, ch->base, ch->g.max_producers, ch->g.max_consumers);
		else
			ch->gone = endpoints_gone(&ch->g, ch->base, 0, ch->g.max_producers);
	}
	return ch->gone;
}

int channel_fail(pinshm_channel_t *ch, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ch->error, sizeof(ch->error), fmt, ap);
	va_end(ap);
	if (err == -EBADMSG)
		ch->broken = true;
	return err;
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

/* Take the first endpoint of [first, first + n) that nobody holds, for
 * process @p pid.  @return its number or -EBUSY. */
static int endpoint_take(const struct seg_geometry *g, void *base, unsigned first, unsigned n, uint32_t pid)
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

/* Take the first endpoint of [first, first + n) that nobody holds. */
static int endpoint_claim(pinshm_channel_t *ch, unsigned first, unsigned n)
{
	int i = endpoint_take(&ch->g, ch->base, first, n, (uint32_t)getpid());

	if (i < 0)
		return i;
	ch->endpoint = (unsigned)i;
	ch->ep = seg_endpoint(&ch->g, ch->base, ch->endpoint);
	return 0;
}

/* Take over @p endpoint of [first, first + n), which the daemon claimed
 * for this process. */
static int endpoint_adopt(pinshm_channel_t *ch, unsigned endpoint, unsigned first, unsigned n)
{
	if (endpoint < first || endpoint - first >= n)
		return -EINVAL;
	struct endpoint *ep = seg_endpoint(&ch->g, ch->base, endpoint);
	if (atomic_load_explicit(&ep->state, memory_order_acquire) != EP_ACTIVE)
		return -EBADMSG;
	atomic_store_explicit(&ep->pid, (uint32_t)getpid(), memory_order_relaxed);
	ch->endpoint = endpoint;
	ch->ep = ep;
	return 0;
}

/* A topic subscriber leaves: its cursors no longer hold publishers back,
 * and its successor on the endpoint starts from unset ones. */
static void topic_cursors_unset(const struct seg_geometry *g, void *base, unsigned endpoint)
{
	if (g->kind != PINSHM_TOPIC || endpoint < g->max_producers)
		return;
	for (unsigned l = 0; l < g->max_producers; l++)
		atomic_store_explicit(seg_cursor(g, base, endpoint - g->max_producers, l), TOPIC_CURSOR_UNSET,
				      memory_order_relaxed);
}

/* An endpoint came or went: wake every waiter so that it looks again. */
static void endpoints_changed(struct seg_header *h)
{
	atomic_fetch_add_explicit(&h->endpoint_changes, 1, memory_order_seq_cst);
	wait_wake_all(&h->data);
	wait_wake_all(&h->space);
}

int seg_endpoint_claim(const struct seg_geometry *g, void *base, pinshm_role_t role, uint32_t pid)
{
	int i;

	if (role == PINSHM_PRODUCER)
		i = endpoint_take(g, base, 0, g->max_producers, pid);
	else if (role == PINSHM_CONSUMER)
		i = endpoint_take(g, base, g->max_producers, g->max_consumers, pid);
	else
		return -EINVAL;
	if (i >= 0)
		endpoints_changed(base);
	return i;
}

/*
 * Read a byte of each page from @p from to @p to.  Populating a mapping
 * filled the kernel's page tables, but a hypervisor may fill its own
 * (shadow or nested ones) only at each process's first touch of each page:
 * on a paravirtualized Zen 5 guest that first read cost 5 to 9 us a page
 * even after MADV_POPULATE_WRITE, and through the first lap of a 2 MiB
 * ring it doubled an MPI ping-pong's one-way time (0 bytes, vCPUs far
 * apart, its first 50 ms: 0.55 to 0.85 us, and 0.32 to 0.41 once both
 * processes had touched every page).  Paid at attach, once, instead.  The
 * bytes are discarded and may be changing (another thread's messages):
 * ThreadSanitizer need not watch these reads.
 */
__attribute__((no_sanitize("thread"))) static void touch_pages(const void *from, const void *to)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);

	for (uintptr_t p = (uintptr_t)from & ~(page - 1); p < (uintptr_t)to; p += page)
		(void)*(const volatile uint8_t *)p;
}

/* Map the pages from @p from to @p to now (MADV_POPULATE_WRITE: a pinned
 * segment has all its pages, but the kernel maps only a few around each
 * fault), then touch them for a hypervisor's tables.  Best effort: an older
 * kernel, or a segment shrunk under us, leaves it to the faults (Linux 5.14;
 * C libraries before glibc 2.35 do not name it). */
static void map_pages(uint8_t *from, uint8_t *to)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t start = (uintptr_t)from & ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
	(void)madvise((void *)start, (uintptr_t)to - start, MADV_POPULATE_WRITE);
#endif
	touch_pages(from, to);
}

/* Map every page this handle uses, now rather than on the path of a
 * message: a producer, the shared part before the lanes and its own lane;
 * a consumer, the whole segment.  A producer never touches the other
 * lanes, so their pages stay unmapped here: the MPI plugin maps, in each
 * of a node's N ranks, N queues of N lanes, and mapping all of them took
 * 72 MiB of page tables and 4.4 to 4.9 s of MPI_Init and a barrier for 32
 * ranks on 2 cores (Intel Xeon guest), against 17.5 MiB and 2.0 to 2.3 s. */
static void map_used_pages(const pinshm_channel_t *ch)
{
	uint8_t *base = ch->base, *lane = (uint8_t *)ch->lane;

	if (ch->role == PINSHM_PRODUCER) {
		map_pages(base, base + ch->g.lanes_off);
		map_pages(lane, lane + ch->g.lane_stride);
	} else {
		map_pages(base, base + ch->g.size);
	}
}

/* Attach as pinshm_channel_attach(), to @p endpoint if it is not negative
 * (claimed by the daemon), else to a free endpoint of @p role. */
static int attach(int fd, pinshm_role_t role, int endpoint, pinshm_channel_t **out)
{
	struct stat st;
	int rc;

	if (role != PINSHM_PRODUCER && role != PINSHM_CONSUMER)
		return -EINVAL;
	if (fstat(fd, &st) != 0)
		return -errno;
	if (st.st_size < (off_t)sizeof(struct seg_header))
		return -EPROTO;

	wait_init();
	pinshm_channel_t *ch = aligned_alloc(alignof(pinshm_channel_t), sizeof(*ch)); /* its lines as laid out */
	if (!ch)
		return -ENOMEM;
	memset(ch, 0, sizeof(*ch));
	ch->map_size = (size_t)st.st_size;
	ch->role = role;
	ch->spin_ns = PINSHM_DEFAULT_SPIN_NS;
	ch->notify_fd = -1;
	ch->notify_send = -1;
	ch->gone_changes = UINT32_MAX;
	ch->base = mmap(NULL, ch->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ch->base == MAP_FAILED) {
		rc = -errno;
		ch->base = NULL;
		goto fail;
	}
	ch->hdr = (struct seg_header *)ch->base;
	rc = seg_geometry_read(ch->base, ch->map_size, &ch->g);
	if (rc != 0)
		goto fail;

	unsigned producers = ch->g.max_producers, consumers = ch->g.max_consumers;
	if (role == PINSHM_PRODUCER) {
		ch->given = malloc(consumers * sizeof(*ch->given));
		ch->fetched = calloc(consumers, sizeof(*ch->fetched));
		if (!ch->given || !ch->fetched) {
			free(ch->given);
			free(ch->fetched);
			ch->given = NULL;
			ch->fetched = NULL;
			rc = -ENOMEM;
			goto fail;
		}
		for (unsigned i = 0; i < consumers; i++) {
			ch->given[i] = (struct given_peer){.fd = -1};
			ch->fetched[i].fd = ch->fetched[i].arrived = -1;
		}
		rc = endpoint < 0 ? endpoint_claim(ch, 0, producers)
				  : endpoint_adopt(ch, (unsigned)endpoint, 0, producers);
		if (rc != 0)
			goto fail;
		ch->lane = seg_lane(&ch->g, ch->base, ch->endpoint);
		ch->ring = seg_ring(&ch->g, ch->base, ch->endpoint);
		producer_recover_tail(ch);
	} else {
		ch->cursor = calloc(producers, sizeof(uint64_t));
		ch->expect_seq = calloc(producers, sizeof(uint32_t));
		if (!ch->cursor || !ch->expect_seq) {
			rc = -ENOMEM;
			goto fail;
		}
		ch->mode = ch->g.kind == PINSHM_QUEUE && consumers > 1 ? CONSUME_SHARED : CONSUME_SEQUENTIAL;
		rc = endpoint < 0 ? endpoint_claim(ch, producers, consumers)
				  : endpoint_adopt(ch, (unsigned)endpoint, producers, consumers);
		if (rc != 0)
			goto fail;
		consumer_start(ch);
	}
	map_used_pages(ch);
	endpoints_changed(ch->hdr);
	*out = ch;
	return 0;
fail:
	pinshm_channel_forget(ch);
	return rc;
}

int pinshm_channel_attach(int fd, pinshm_role_t role, pinshm_channel_t **out)
{
	return attach(fd, role, -1, out);
}

int channel_attach_claimed(int fd, pinshm_role_t role, unsigned endpoint, pinshm_channel_t **out)
{
	if (endpoint >= PINSHM_MAX_PRODUCERS + PINSHM_MAX_CONSUMERS)
		return -EINVAL;
	return attach(fd, role, (int)endpoint, out);
}

void pinshm_channel_forget(pinshm_channel_t *ch)
{
	if (!ch)
		return;
	if (ch->dev)
		device_state_forget(ch);
	if (ch->client)
		client_detach_channel(ch);
	if (ch->base)
		munmap(ch->base, ch->map_size);
	notify_close(ch);
	free(ch->given);
	for (unsigned i = 0; ch->fetched && i < ch->g.max_consumers; i++)
		if (ch->fetched[i].fd >= 0)
			close(ch->fetched[i].fd); /* an arrived one: closed at the detach */
	free(ch->fetched);
	free(ch->cursor);
	free(ch->expect_seq);
	free(ch);
}

int pinshm_channel_close(pinshm_channel_t *ch)
{
	if (!ch)
		return 0;
	if (ch->role == PINSHM_PRODUCER) {
		if (ch->reserved)
			pinshm_abort(ch);
		pinshm_flush(ch);
	} else {
		if (ch->dev)
			device_state_close(ch); /* waits for the device before anything is released */
		consumer_release_all(ch);
		consumer_disarm(ch);
	}
	topic_cursors_unset(&ch->g, ch->base, ch->endpoint);
	/* Release: whatever this endpoint committed or released is visible to
	 * a peer that sees it closed. */
	atomic_store_explicit(&ch->ep->state, EP_CLOSED, memory_order_release);
	endpoints_changed(ch->hdr);
	if (ch->role == PINSHM_PRODUCER)
		producer_notify_armed(ch); /* an event loop learns of it too */
	struct pinshm_client *c = channel_client(ch);
	uint64_t id = ch->daemon_id, conn = ch->daemon_conn;
	unsigned endpoint = ch->endpoint;
	pinshm_channel_forget(ch);
	/* Closed here first: the daemon finds it so and has nothing to reap. */
	return c ? client_close_endpoint(c, id, conn, endpoint) : 0;
}

const char *pinshm_channel_error(const pinshm_channel_t *ch)
{
	return ch->error;
}

unsigned pinshm_channel_endpoint(const pinshm_channel_t *ch)
{
	return ch->endpoint;
}

void pinshm_channel_set_spin(pinshm_channel_t *ch, uint64_t spin_ns)
{
	ch->spin_ns = spin_ns;
}

void pinshm_channel_set_quick_polls(pinshm_channel_t *ch, int on)
{
	ch->quick_polls = on != 0;
}

int seg_endpoint_reap(const struct seg_geometry *g, void *base, unsigned endpoint)
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
		int rc = ring_unclaim_owner(g, base, endpoint - g->max_producers);
		if (rc != 0)
			return rc;
	}
	atomic_store_explicit(&ep->armed, 0, memory_order_relaxed);
	topic_cursors_unset(g, base, endpoint);
	struct seg_header *h = base;
	wait_forget_dead(&h->data, &h->space, atomic_exchange_explicit(&ep->sleeping, 0, memory_order_relaxed));
	atomic_store_explicit(&ep->state, EP_DEAD, memory_order_release);
	endpoints_changed(base);
	return 0;
}

int pinshm_segment_reap(void *base, size_t size, unsigned endpoint)
{
	struct seg_geometry g;
	int rc = seg_geometry_read(base, size, &g);

	return rc != 0 ? rc : seg_endpoint_reap(&g, base, endpoint);
}

int pinshm_channel_info(pinshm_channel_t *ch, pinshm_channel_info_t *info)
{
	*info = (pinshm_channel_info_t){
		.kind = ch->g.kind,
		.flags = ch->g.flags,
		.capacity = ch->g.capacity,
		.max_message = ch->g.max_message,
		.max_producers = ch->g.max_producers,
		.max_consumers = ch->g.max_consumers,
		.segment_size = ch->g.size,
		.lost = ch->lost,
	};
	for (unsigned i = 0; i < ch->g.max_producers + ch->g.max_consumers; i++) {
		uint32_t state = atomic_load_explicit(&seg_endpoint(&ch->g, ch->base, i)->state, memory_order_relaxed);
		if (state == EP_ACTIVE && i < ch->g.max_producers)
			info->producers++;
		else if (state == EP_ACTIVE)
			info->consumers++;
	}
	return ch->broken ? -EBADMSG : 0;
}
