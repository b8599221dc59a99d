/*
 * channel.c - a process's handle: attach, close, its endpoint, its settings.
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

/* Take the first endpoint of [first, first + n) that nobody holds. */
static int endpoint_claim(pinshm_channel_t *ch, unsigned first, unsigned n)
{
	int i = seg_endpoint_take(&ch->g, ch->base, first, n, (uint32_t)ch->attach_pid);

	if (i < 0)
		return i;
	ch->endpoint = (unsigned)i;
	ch->ep = seg_endpoint(&ch->g, ch->base, ch->endpoint);
	return 0;
}

/* Take over @p endpoint of [first, first + n), which the daemon claimed
 * for this process. */
static int endpoint_attach_claimed(pinshm_channel_t *ch, unsigned endpoint, unsigned first, unsigned n)
{
	if (endpoint < first || endpoint - first >= n)
		return -EINVAL;
	struct endpoint *ep = seg_endpoint(&ch->g, ch->base, endpoint);
	if (atomic_load_explicit(&ep->state, memory_order_acquire) != EP_ACTIVE)
		return -EBADMSG;
	atomic_store_explicit(&ep->pid, (uint32_t)ch->attach_pid, memory_order_relaxed);
	ch->endpoint = endpoint;
	ch->ep = ep;
	return 0;
}

/*
 * Read a byte of each page from @p from to @p to.  Populating a mapping
 * filled the kernel's page tables, but a hypervisor may fill its own
 * (shadow or nested ones) only at each process's first touch of each page,
 * even after MADV_POPULATE_WRITE, and a message's trip would pay for it
 * through the first lap of a ring.  Paid at attach, once, instead.  The
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
 * of a node's N ranks, N queues of N lanes, and the page tables of all of
 * them would cost each rank memory and MPI_Init time. */
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
	ch->attach_pid = getpid();
	ch->map_size = (size_t)st.st_size;
	ch->role = role;
	wait_spin_init(&ch->spin, PINSHM_DEFAULT_SPIN_NS, false);
	ch->notify_fd = -1;
	ch->notify_send = -1;
	ch->gone_changes = UINT32_MAX;
	ch->live_changes = UINT32_MAX;
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
				  : endpoint_attach_claimed(ch, (unsigned)endpoint, 0, producers);
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
		ch->live_lanes = producers;
		rc = endpoint < 0 ? endpoint_claim(ch, producers, consumers)
				  : endpoint_attach_claimed(ch, (unsigned)endpoint, producers, consumers);
		if (rc != 0)
			goto fail;
		consumer_start(ch);
	}
	map_used_pages(ch);
	seg_endpoints_changed(ch->hdr);
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
		ch->ctl->detach(ch);
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
	/* In a child that inherited the handle across fork(), the endpoint is
	 * its parent's: the handle is only unmapped, nothing released, marked
	 * or sent, as pinshm_channel_forget() does. */
	if (ch->attach_pid != getpid()) {
		pinshm_channel_forget(ch);
		return 0;
	}
	if (ch->dev)
		device_state_close(ch); /* waits for the device before anything is released or committed */
	/* Opened through pinshmd, whose client has disconnected since: the
	 * daemon reaped the endpoint with the connection (or is about to), and
	 * may have handed it, and its lane, to another open already.  It is
	 * this handle's no more: unmapped, nothing written to it. */
	if (ch->ctl && !ch->client) {
		pinshm_channel_forget(ch);
		return 0;
	}
	if (ch->role == PINSHM_PRODUCER) {
		if (ch->reserved)
			pinshm_abort(ch);
		pinshm_flush(ch);
	} else {
		consumer_release_all(ch);
		consumer_disarm(ch);
	}
	seg_topic_cursors_unset(&ch->g, ch->base, ch->endpoint);
	/* Release: whatever this endpoint committed or released is visible to
	 * a peer that sees it closed. */
	atomic_store_explicit(&ch->ep->state, EP_CLOSED, memory_order_release);
	seg_endpoints_changed(ch->hdr);
	if (ch->role == PINSHM_PRODUCER)
		producer_notify_armed(ch); /* an event loop learns of it too */
	struct pinshm_client *c = channel_client(ch);
	const struct channel_ctl *ctl = ch->ctl;
	uint64_t id = ch->daemon_id, conn = ch->daemon_conn;
	unsigned endpoint = ch->endpoint;
	pinshm_channel_forget(ch);
	/* Closed here first: the daemon finds it so and has nothing to reap. */
	return c ? ctl->close_endpoint(c, id, conn, endpoint) : 0;
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
	if (spin_ns == PINSHM_SPIN_ADAPTIVE)
		wait_spin_init(&ch->spin, PINSHM_DEFAULT_SPIN_NS, false);
	else
		wait_spin_init(&ch->spin, spin_ns, true);
}

void pinshm_channel_set_quick_polls(pinshm_channel_t *ch, int on)
{
	ch->quick_polls = on != 0;
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
	if (ch->dev)
		device_info(ch, info);
	return ch->broken ? -EBADMSG : 0;
}
