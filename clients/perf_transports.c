/*
 * perf_transports.c - the transports that pinshm-perf compares.
 *
 * Each keeps its state in link->priv, made by setup() in the parent and
 * inherited by both children through fork().  See perf_transports.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <pinshm.h>

#include "perf_transports.h"

/* Ring bytes for messages of @size: 4x the size as a power of two, at least 1 MiB. */
static uint64_t ring_capacity(size_t size)
{
	uint64_t cap = 1u << 20;

	while (cap < 4 * (uint64_t)size)
		cap <<= 1;
	return cap;
}

static int fail(perf_link_t *l, const char *call, int rc)
{
	snprintf(l->err, sizeof(l->err), "%s: %s", call, strerror(-rc));
	return rc;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* An anonymous shared mapping, inherited by fork(); nothing in /dev/shm. */
static int map_shared(perf_link_t *l, size_t len, void **out)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return fail(l, "mmap", -errno);
	*out = p;
	return 0;
}

/* ---- cacheline: the floor ---------------------------------------------- */

/*
 * One cache line, written in turn by each side: the sender bumps seq, the
 * receiver spins until seq moves.  No payload is copied.
 */
struct cl_line {
	alignas(64) _Atomic uint64_t seq; /* bumped by the sender (release) */
	_Atomic uint64_t len;             /* the message length, in the same line */
};

struct cl_link {
	struct cl_line *line;
	uint64_t last; /* the last seq this side wrote or saw */
};

static int cl_setup(perf_link_t *l)
{
	struct cl_link *s = calloc(1, sizeof(*s));
	void *p = NULL;
	int rc;

	if (s == NULL)
		return fail(l, "calloc", -ENOMEM);
	rc = map_shared(l, 4096, &p);
	if (rc < 0) {
		free(s);
		return rc;
	}
	s->line = p;
	l->priv = s;
	return 0;
}

static int cl_init(perf_link_t *l, int side)
{
	l->side = side;
	return 0;
}

static int cl_send(perf_link_t *l, const void *buf, size_t len)
{
	struct cl_link *s = l->priv;

	(void)buf;
	atomic_store_explicit(&s->line->len, len, memory_order_relaxed);
	/* Publishes len: pairs with the acquire load of seq in cl_recv(). */
	atomic_store_explicit(&s->line->seq, ++s->last, memory_order_release);
	return 0;
}

static ssize_t cl_recv(perf_link_t *l, void *buf, size_t cap)
{
	struct cl_link *s = l->priv;
	uint64_t seq;

	(void)buf;
	(void)cap;
	/* Pairs with the release store of seq in cl_send(). */
	while ((seq = atomic_load_explicit(&s->line->seq, memory_order_acquire)) == s->last)
		perf_cpu_relax();
	s->last = seq;
	return (ssize_t)atomic_load_explicit(&s->line->len, memory_order_relaxed);
}

static void cl_fini(perf_link_t *l)
{
	(void)l;
}

static void cl_teardown(perf_link_t *l)
{
	struct cl_link *s = l->priv;

	munmap(s->line, 4096);
	free(s);
	l->priv = NULL;
}

/* ---- textbook: a bare shared-memory ring ---------------------------------- */

/*
 * The textbook single-producer single-consumer ring: a producer index and a
 * consumer index on their own cache lines, busy polling, records of an
 * 8-byte length and the payload (padded to 8), copied in and out in at most
 * two pieces.  Deliberately untuned: each side reloads the other's index on
 * every call, and nothing is batched.
 */
struct tb_ring {
	alignas(64) _Atomic uint64_t head; /* bytes produced: the producer's (release) */
	alignas(64) _Atomic uint64_t tail; /* bytes consumed: the consumer's (release) */
};

#define TB_HDR 4096 /* the indices' page; the data follows */

struct tb_link {
	void *map;
	size_t maplen;
	uint64_t cap;            /* data bytes per ring, a power of two */
	struct tb_ring *ring[2]; /* [0] A to B, [1] B to A */
	struct tb_ring *tx, *rx; /* this side's, after init */
};

static unsigned char *tb_data(struct tb_ring *r)
{
	return (unsigned char *)r + TB_HDR;
}

static int tb_setup(perf_link_t *l)
{
	struct tb_link *s = calloc(1, sizeof(*s));
	int rc;

	if (s == NULL)
		return fail(l, "calloc", -ENOMEM);
	s->cap = ring_capacity(l->size);
	s->maplen = 2 * (TB_HDR + s->cap);
	rc = map_shared(l, s->maplen, &s->map);
	if (rc < 0) {
		free(s);
		return rc;
	}
	s->ring[0] = s->map;
	s->ring[1] = (struct tb_ring *)((unsigned char *)s->map + TB_HDR + s->cap);
	l->priv = s;
	return 0;
}

static int tb_init(perf_link_t *l, int side)
{
	struct tb_link *s = l->priv;

	l->side = side;
	s->tx = s->ring[side == PERF_SIDE_A ? 0 : 1];
	s->rx = s->ring[side == PERF_SIDE_A ? 1 : 0];
	return 0;
}

static int tb_send(perf_link_t *l, const void *buf, size_t len)
{
	struct tb_link *s = l->priv;
	struct tb_ring *r = s->tx;
	unsigned char *data = tb_data(r);
	uint64_t mask = s->cap - 1, need = 8 + ((len + 7) & ~(uint64_t)7);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed); /* our own */
	uint64_t hdr = len, at, first;

	if (need > s->cap)
		return fail(l, "textbook send", -EMSGSIZE);
	/* Wait for room; pairs with the release store of tail in tb_recv(). */
	while (s->cap - (head - atomic_load_explicit(&r->tail, memory_order_acquire)) < need)
		perf_cpu_relax();
	memcpy(data + (head & mask), &hdr, 8); /* never wraps: records are 8-aligned */
	at = (head + 8) & mask;
	first = len < s->cap - at ? len : s->cap - at;
	memcpy(data + at, buf, first);
	memcpy(data, (const unsigned char *)buf + first, len - first);
	/* Publishes the record: pairs with the acquire load of head in tb_recv(). */
	atomic_store_explicit(&r->head, head + need, memory_order_release);
	return 0;
}

static ssize_t tb_recv(perf_link_t *l, void *buf, size_t cap)
{
	struct tb_link *s = l->priv;
	struct tb_ring *r = s->rx;
	unsigned char *data = tb_data(r);
	uint64_t mask = s->cap - 1;
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed); /* our own */
	uint64_t len, at, first;

	/* Wait for a record; pairs with the release store of head in tb_send(). */
	while (atomic_load_explicit(&r->head, memory_order_acquire) == tail)
		perf_cpu_relax();
	memcpy(&len, data + (tail & mask), 8);
	if (len > s->cap - 8)
		return fail(l, "textbook recv", -EBADMSG);
	if (len > cap)
		return fail(l, "textbook recv", -EMSGSIZE);
	at = (tail + 8) & mask;
	first = len < s->cap - at ? len : s->cap - at;
	memcpy(buf, data + at, first);
	memcpy((unsigned char *)buf + first, data, len - first);
	/* Frees the room: pairs with the acquire load of tail in tb_send(). */
	atomic_store_explicit(&r->tail, tail + 8 + ((len + 7) & ~(uint64_t)7), memory_order_release);
	return (ssize_t)len;
}

static void tb_fini(perf_link_t *l)
{
	(void)l;
}

static void tb_teardown(perf_link_t *l)
{
	struct tb_link *s = l->priv;

	munmap(s->map, s->maplen);
	free(s);
	l->priv = NULL;
}

/* ---- pinshm ---------------------------------------------------------------- */

enum { PS_COPY, PS_ZC, PS_BATCH, PS_SLEEP };

struct ps_link {
	int fd[2];                /* [0] A to B, [1] B to A (ping-pong only) */
	pinshm_channel_t *tx, *rx; /* this side's, after init */
	/* PERF_DAEMON only: */
	pinshm_client_t *c;       /* the parent's connection, which created the channels */
	pinshm_client_t *side_c;  /* this side's, after init */
	char name[2][PINSHM_NAME_MAX + 1]; /* as fd[]; "" for none */
};

static int ps_fail(perf_link_t *l, pinshm_channel_t *ch, const char *call, int rc)
{
	const char *why = ch != NULL ? pinshm_channel_error(ch) : "";

	snprintf(l->err, sizeof(l->err), "%s: %s%s%s", call, pinshm_strerror(rc), *why ? ": " : "", why);
	return rc;
}

/* As ps_fail(), with the daemon's message about the last request on @c (NULL: the last connect). */
static int client_fail(char *err, size_t len, const pinshm_client_t *c, const char *call, int rc)
{
	const char *why = pinshm_client_error(c);

	snprintf(err, len, "%s: %s%s%s", call, pinshm_strerror(rc), *why ? ": " : "", why);
	return rc;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A channel name of this process not used before: "perf.<pid>.<tag><n>". */
static void unique_name(char *buf, size_t len, const char *tag)
{
	static unsigned seq;

	snprintf(buf, len, "perf.%ld.%s%u", (long)getpid(), tag, seq++);
}

static void ps_teardown(perf_link_t *l)
{
	struct ps_link *s = l->priv;

	close_fd(&s->fd[0]);
	close_fd(&s->fd[1]);
	if (s->c != NULL) {
		for (int i = 0; i < 2; i++)
			if (s->name[i][0] != '\0')
				pinshm_unlink(s->c, s->name[i]); /* best effort: disconnecting destroys it too */
		pinshm_disconnect(s->c);
	}
	free(s);
	l->priv = NULL;
}

/* The geometry of every pinshm row: a queue, one producer, one consumer. */
static void ps_attr(perf_link_t *l, pinshm_channel_attr_t *attr)
{
	pinshm_channel_attr_init(attr);
	attr->capacity = ring_capacity(l->size);
	attr->max_producers = 1;
	attr->max_consumers = 1;
	/* 0 is "the largest"; a fixed default sized for 1 MiB may be too small. */
	if (attr->max_message != 0 && attr->max_message < l->size)
		attr->max_message = (uint32_t)(attr->capacity / 2 - 32);
}

/* PERF_DAEMON: connect and create the channels of the row, named. */
static int ps_daemon_setup(perf_link_t *l, struct ps_link *s, const pinshm_channel_attr_t *attr)
{
	char note[sizeof(l->err)] = "";
	int rc = pinshm_connect(l->socket, &s->c);

	if (rc < 0) {
		s->c = NULL;
		return client_fail(l->err, sizeof(l->err), NULL, "pinshm_connect", rc);
	}
	for (int i = 0; i < (l->pattern == PERF_PINGPONG ? 2 : 1); i++) {
		char name[PINSHM_NAME_MAX + 1];

		unique_name(name, sizeof(name), "");
		rc = pinshm_create(s->c, name, attr, 0600, 0);
		if (rc < 0)
			return client_fail(l->err, sizeof(l->err), s->c, "pinshm_create", rc);
		strcpy(s->name[i], name);
		if (note[0] == '\0' && pinshm_client_error(s->c)[0] != '\0')
			snprintf(note, sizeof(note), "pinshm_create: %s", pinshm_client_error(s->c));
	}
	strcpy(l->err, note); /* a note, not an error: see perf_transports.h */
	return 0;
}

static int ps_setup(perf_link_t *l)
{
	struct ps_link *s = calloc(1, sizeof(*s));
	pinshm_channel_attr_t attr;
	int rc;

	if (s == NULL)
		return fail(l, "calloc", -ENOMEM);
	s->fd[0] = s->fd[1] = -1;
	l->priv = s;
	l->err[0] = '\0';
	ps_attr(l, &attr);
	if (l->t->flags & PERF_DAEMON) {
		rc = ps_daemon_setup(l, s, &attr);
		if (rc < 0)
			ps_teardown(l);
		return rc;
	}
	for (int i = 0; i < (l->pattern == PERF_PINGPONG ? 2 : 1); i++) {
		rc = pinshm_segment_create(&attr, &s->fd[i]);
		if (rc < 0) {
			ps_fail(l, NULL, "pinshm_segment_create", rc);
			ps_teardown(l);
			return rc;
		}
	}
	return 0;
}

/* PERF_DAEMON: this side connects on its own and opens the channels by name. */
static int ps_daemon_init(perf_link_t *l, struct ps_link *s, int a)
{
	int rc = pinshm_connect(l->socket, &s->side_c);

	if (rc < 0) {
		s->side_c = NULL;
		return client_fail(l->err, sizeof(l->err), NULL, "pinshm_connect", rc);
	}
	rc = pinshm_open(s->side_c, s->name[0], a ? PINSHM_PRODUCER : PINSHM_CONSUMER, a ? &s->tx : &s->rx);
	if (rc < 0)
		return client_fail(l->err, sizeof(l->err), s->side_c, "pinshm_open", rc);
	if (s->name[1][0] != '\0') {
		rc = pinshm_open(s->side_c, s->name[1], a ? PINSHM_CONSUMER : PINSHM_PRODUCER,
				 a ? &s->rx : &s->tx);
		if (rc < 0)
			return client_fail(l->err, sizeof(l->err), s->side_c, "pinshm_open", rc);
	}
	return 0;
}

static int ps_init(perf_link_t *l, int side)
{
	struct ps_link *s = l->priv;
	int a = side == PERF_SIDE_A;
	int rc;

	l->side = side;
	s->tx = s->rx = NULL;
	s->side_c = NULL;
	if (l->t->flags & PERF_DAEMON) {
		rc = ps_daemon_init(l, s, a);
		if (rc < 0)
			return rc;
		goto attached;
	}
	rc = pinshm_channel_attach(s->fd[0], a ? PINSHM_PRODUCER : PINSHM_CONSUMER, a ? &s->tx : &s->rx);
	if (rc < 0)
		return ps_fail(l, NULL, "pinshm_channel_attach", rc);
	if (s->fd[1] >= 0) {
		rc = pinshm_channel_attach(s->fd[1], a ? PINSHM_CONSUMER : PINSHM_PRODUCER,
					   a ? &s->rx : &s->tx);
		if (rc < 0)
			return ps_fail(l, NULL, "pinshm_channel_attach", rc);
	}
	/* The descriptors are not kept by the channel. */
	close_fd(&s->fd[0]);
	close_fd(&s->fd[1]);
attached:
	if (l->t->variant == PS_SLEEP) {
		/* Every wait goes to the futex at once: the peer sleeps between messages. */
		if (s->tx != NULL)
			pinshm_channel_set_spin(s->tx, 0);
		if (s->rx != NULL)
			pinshm_channel_set_spin(s->rx, 0);
	}
	return 0;
}

static void ps_fini(perf_link_t *l)
{
	struct ps_link *s = l->priv;

	if (s->tx != NULL)
		pinshm_channel_close(s->tx);
	if (s->rx != NULL)
		pinshm_channel_close(s->rx);
	s->tx = s->rx = NULL;
	/* Channels first, then the connection (PERF_DAEMON); the parent's is not this side's to close. */
	pinshm_disconnect(s->side_c);
	s->side_c = NULL;
}

static int ps_send(perf_link_t *l, const void *buf, size_t len)
{
	struct ps_link *s = l->priv;
	int rc = pinshm_send(s->tx, buf, len, PINSHM_FOREVER);

	return rc < 0 ? ps_fail(l, s->tx, "pinshm_send", rc) : 0;
}

static ssize_t ps_recv(perf_link_t *l, void *buf, size_t cap)
{
	struct ps_link *s = l->priv;
	size_t len = 0;
	int rc = pinshm_recv(s->rx, buf, cap, &len, PINSHM_FOREVER);

	return rc < 0 ? ps_fail(l, s->rx, "pinshm_recv", rc) : (ssize_t)len;
}

static int zc_send(perf_link_t *l, const void *buf, size_t len)
{
	struct ps_link *s = l->priv;
	void *p = NULL;
	int rc = pinshm_reserve(s->tx, len, &p, PINSHM_FOREVER);

	if (rc < 0)
		return ps_fail(l, s->tx, "pinshm_reserve", rc);
	memcpy(p, buf, len);
	rc = pinshm_commit(s->tx, len, 0);
	return rc < 0 ? ps_fail(l, s->tx, "pinshm_commit", rc) : 0;
}

static ssize_t zc_recv(perf_link_t *l, void *buf, size_t cap)
{
	struct ps_link *s = l->priv;
	pinshm_msg_t msg;
	int rc = pinshm_recv_inplace(s->rx, &msg, PINSHM_FOREVER);

	if (rc < 0)
		return ps_fail(l, s->rx, "pinshm_recv_inplace", rc);
	if (msg.len > cap) {
		pinshm_release(s->rx, &msg);
		return fail(l, "pinshm_recv_inplace", -EMSGSIZE);
	}
	memcpy(buf, msg.data, msg.len);
	rc = pinshm_release(s->rx, &msg);
	return rc < 0 ? ps_fail(l, s->rx, "pinshm_release", rc) : (ssize_t)msg.len;
}

static int batch_send(perf_link_t *l, const void *buf, size_t len, unsigned count)
{
	struct ps_link *s = l->priv;
	struct iovec iov[PERF_BATCH];
	int rc;

	if (count > PERF_BATCH)
		count = PERF_BATCH;
	for (unsigned i = 0; i < count; i++)
		iov[i] = (struct iovec){ .iov_base = (void *)buf, .iov_len = len };
	rc = pinshm_send_batch(s->tx, iov, count, PINSHM_FOREVER);
	return rc < 0 ? ps_fail(l, s->tx, "pinshm_send_batch", rc) : rc;
}

static int batch_recv(perf_link_t *l, void *buf, size_t cap, unsigned max)
{
	struct ps_link *s = l->priv;
	pinshm_msg_t msgs[PERF_BATCH];
	int n, rc;

	if (max > PERF_BATCH)
		max = PERF_BATCH;
	n = pinshm_recv_batch(s->rx, msgs, max, PINSHM_FOREVER);
	if (n < 0)
		return ps_fail(l, s->rx, "pinshm_recv_batch", n);
	for (int i = 0; i < n; i++) {
		if (msgs[i].len != l->size || msgs[i].len > cap) {
			snprintf(l->err, sizeof(l->err), "pinshm_recv_batch: received %zu bytes, expected %zu",
				 msgs[i].len, l->size);
			pinshm_release(s->rx, &msgs[n - 1]);
			return -EBADMSG;
		}
		memcpy(buf, msgs[i].data, msgs[i].len);
		/* Large messages are released one by one, so that the sender
		 * refills their room while the rest are copied; small ones
		 * all at once (releasing the last releases those before it). */
		if (msgs[i].len >= PERF_RELEASE_EACH && i + 1 < n) {
			rc = pinshm_release(s->rx, &msgs[i]);
			if (rc < 0)
				return ps_fail(l, s->rx, "pinshm_release", rc);
		}
	}
	rc = pinshm_release(s->rx, &msgs[n - 1]);
	return rc < 0 ? ps_fail(l, s->rx, "pinshm_release", rc) : n;
}

/* ---- pipe and unix: byte streams ----------------------------------------------- */

/*
 * A byte stream keeps no message boundaries.  Every message of a row has
 * the same size, so the receiver reads exactly that many bytes, as a
 * fixed-size protocol would (no length prefix: the best case for these
 * transports).  A 0-byte message travels as a 1-byte token.
 */
struct fd_link {
	int fd[4]; /* pipe: A->B read, A->B write, B->A read, B->A write; unix: A's, B's */
	int tx, rx; /* this side's, after init */
};

static size_t wire_len(size_t size)
{
	return size ? size : 1;
}

static void fd_teardown(perf_link_t *l)
{
	struct fd_link *s = l->priv;

	for (int i = 0; i < 4; i++)
		close_fd(&s->fd[i]);
	free(s);
	l->priv = NULL;
}

static struct fd_link *fd_alloc(perf_link_t *l)
{
	struct fd_link *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		fail(l, "calloc", -ENOMEM);
		return NULL;
	}
	for (int i = 0; i < 4; i++)
		s->fd[i] = -1;
	s->tx = s->rx = -1;
	l->priv = s;
	return s;
}

static int pipe_setup(perf_link_t *l)
{
	struct fd_link *s = fd_alloc(l);

	if (s == NULL)
		return -ENOMEM;
	if (pipe2(&s->fd[0], O_CLOEXEC) < 0 || pipe2(&s->fd[2], O_CLOEXEC) < 0) {
		int rc = fail(l, "pipe2", -errno);

		fd_teardown(l);
		return rc;
	}
	return 0;
}

static int pipe_init(perf_link_t *l, int side)
{
	struct fd_link *s = l->priv;
	int a = side == PERF_SIDE_A;

	l->side = side;
	s->tx = a ? s->fd[1] : s->fd[3];
	s->rx = a ? s->fd[2] : s->fd[0];
	/* Close the ends this side does not use, so that a dead peer shows as EOF/EPIPE. */
	for (int i = 0; i < 4; i++)
		if (s->fd[i] != s->tx && s->fd[i] != s->rx)
			close_fd(&s->fd[i]);
	return 0;
}

static int unix_setup(perf_link_t *l)
{
	struct fd_link *s = fd_alloc(l);

	if (s == NULL)
		return -ENOMEM;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->fd) < 0) {
		int rc = fail(l, "socketpair", -errno);

		fd_teardown(l);
		return rc;
	}
	return 0;
}

static int unix_init(perf_link_t *l, int side)
{
	struct fd_link *s = l->priv;
	int mine = side == PERF_SIDE_A ? 0 : 1;

	l->side = side;
	s->tx = s->rx = s->fd[mine];
	close_fd(&s->fd[1 - mine]);
	return 0;
}

static int fd_send(perf_link_t *l, const void *buf, size_t len)
{
	struct fd_link *s = l->priv;
	const unsigned char *p = buf;
	size_t left = wire_len(len);

	while (left > 0) {
		ssize_t n = write(s->tx, p, left);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return fail(l, "write", -errno);
		}
		p += n;
		left -= (size_t)n;
	}
	return 0;
}

static ssize_t fd_recv(perf_link_t *l, void *buf, size_t cap)
{
	struct fd_link *s = l->priv;
	unsigned char *p = buf;
	size_t left = wire_len(l->size);

	if (left > cap)
		return fail(l, "read", -EMSGSIZE);
	while (left > 0) {
		ssize_t n = read(s->rx, p, left);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return fail(l, "read", -errno);
		}
		if (n == 0) {
			snprintf(l->err, sizeof(l->err), "read: end of file (the peer is gone)");
			return -EPIPE;
		}
		p += n;
		left -= (size_t)n;
	}
	return (ssize_t)l->size;
}

static void fd_fini(perf_link_t *l)
{
	struct fd_link *s = l->priv;

	for (int i = 0; i < 4; i++)
		close_fd(&s->fd[i]);
	s->tx = s->rx = -1;
}

/* ---- mq: POSIX message queues --------------------------------------------------- */

/* Two queues, one per direction, unlinked as soon as they are open. */
struct mq_link {
	mqd_t q[2]; /* [0] A to B, [1] B to A */
	mqd_t tx, rx;
};

#define MQ_DEPTH 10 /* the default /proc/sys/fs/mqueue/msg_max */

static long proc_long(const char *path, long dflt)
{
	FILE *f = fopen(path, "r");
	long v;

	if (f == NULL)
		return dflt;
	if (fscanf(f, "%ld", &v) != 1)
		v = dflt;
	fclose(f);
	return v;
}

static int mq_open_anon(struct mq_attr *attr, mqd_t *out)
{
	static unsigned seq;
	char name[64];
	mqd_t q;

	snprintf(name, sizeof(name), "/pinshm-perf.%ld.%u", (long)getpid(), seq++);
	q = mq_open(name, O_RDWR | O_CREAT | O_EXCL, 0600, attr);
	if (q == (mqd_t)-1)
		return -errno;
	if (mq_unlink(name) < 0) {
		int rc = -errno;

		mq_close(q);
		return rc;
	}
	*out = q;
	return 0;
}

/* Raise RLIMIT_MSGQUEUE as far as allowed (to infinity with CAP_SYS_RESOURCE). */
static int mq_raise_rlimit(void)
{
	struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };

	if (setrlimit(RLIMIT_MSGQUEUE, &rl) == 0)
		return 0;
	if (getrlimit(RLIMIT_MSGQUEUE, &rl) < 0 || rl.rlim_cur == rl.rlim_max)
		return -1;
	rl.rlim_cur = rl.rlim_max;
	return setrlimit(RLIMIT_MSGQUEUE, &rl);
}

static void mq_teardown(perf_link_t *l)
{
	struct mq_link *s = l->priv;

	for (int i = 0; i < 2; i++)
		if (s->q[i] != (mqd_t)-1)
			mq_close(s->q[i]);
	free(s);
	l->priv = NULL;
}

static int mq_setup(perf_link_t *l)
{
	struct mq_link *s = calloc(1, sizeof(*s));
	long msg_max = proc_long("/proc/sys/fs/mqueue/msg_max", MQ_DEPTH);
	long size_max = proc_long("/proc/sys/fs/mqueue/msgsize_max", 8192);
	struct mq_attr attr = { 0 };
	int rc = 0, raised = 0;

	if (s == NULL)
		return fail(l, "calloc", -ENOMEM);
	s->q[0] = s->q[1] = s->tx = s->rx = (mqd_t)-1;
	l->priv = s;
	attr.mq_maxmsg = msg_max > 0 && msg_max < MQ_DEPTH ? msg_max : MQ_DEPTH;
	attr.mq_msgsize = (long)wire_len(l->size);
	for (int i = 0; i < 2; i++) {
		/* Beyond the sysctls, only CAP_SYS_RESOURCE (root) opens a queue. */
		rc = mq_open_anon(&attr, &s->q[i]);
		if (rc == -EMFILE && !raised) {
			/* Out of RLIMIT_MSGQUEUE bytes, most likely: raise it once and retry. */
			raised = 1;
			if (mq_raise_rlimit() == 0)
				rc = mq_open_anon(&attr, &s->q[i]);
		}
		if (rc < 0)
			break;
	}
	if (rc == 0)
		return 0;
	if (rc == -EINVAL && attr.mq_msgsize > size_max) {
		snprintf(l->err, sizeof(l->err),
			 "%zu-byte messages exceed /proc/sys/fs/mqueue/msgsize_max (%ld); "
			 "larger ones need CAP_SYS_RESOURCE or a larger limit",
			 l->size, size_max);
		rc = PERF_SKIP;
	} else if (rc == -EMFILE) {
		snprintf(l->err, sizeof(l->err),
			 "two queues of %ld x %zu bytes exceed RLIMIT_MSGQUEUE (ulimit -q)",
			 (long)attr.mq_maxmsg, l->size);
		rc = PERF_SKIP;
	} else {
		fail(l, "mq_open", rc);
	}
	mq_teardown(l);
	return rc;
}

static int mq_init(perf_link_t *l, int side)
{
	struct mq_link *s = l->priv;
	int a = side == PERF_SIDE_A;

	l->side = side;
	s->tx = s->q[a ? 0 : 1];
	s->rx = s->q[a ? 1 : 0];
	return 0;
}

static int mq_tsend(perf_link_t *l, const void *buf, size_t len)
{
	struct mq_link *s = l->priv;

	while (mq_send(s->tx, buf, len, 0) < 0)
		if (errno != EINTR)
			return fail(l, "mq_send", -errno);
	return 0;
}

static ssize_t mq_trecv(perf_link_t *l, void *buf, size_t cap)
{
	struct mq_link *s = l->priv;
	ssize_t n;

	while ((n = mq_receive(s->rx, buf, cap, NULL)) < 0)
		if (errno != EINTR)
			return fail(l, "mq_receive", -errno);
	return n;
}

static void mq_fini(perf_link_t *l)
{
	struct mq_link *s = l->priv;

	for (int i = 0; i < 2; i++)
		if (s->q[i] != (mqd_t)-1)
			mq_close(s->q[i]);
	s->q[0] = s->q[1] = s->tx = s->rx = (mqd_t)-1;
}

/* ---- the list ---------------------------------------------------------------- */

#define BOTH (PERF_PINGPONG | PERF_STREAM)

static const perf_transport_t transports[] = {
	{ .name = "cacheline", .about = "one cache line bounced between the cores: the floor, no payload",
	  .patterns = PERF_PINGPONG, .flags = PERF_NO_PAYLOAD, .setup = cl_setup, .init = cl_init,
	  .send = cl_send, .recv = cl_recv, .fini = cl_fini, .teardown = cl_teardown },
	{ .name = "textbook", .about = "a bare shared-memory ring: busy polling, copy in and out",
	  .patterns = BOTH, .setup = tb_setup, .init = tb_init, .send = tb_send, .recv = tb_recv,
	  .fini = tb_fini, .teardown = tb_teardown },
	{ .name = "pinshm", .about = "pinshm_send / pinshm_recv", .patterns = BOTH, .variant = PS_COPY,
	  .setup = ps_setup, .init = ps_init, .send = ps_send, .recv = ps_recv, .fini = ps_fini,
	  .teardown = ps_teardown },
	{ .name = "pinshm-zc", .about = "pinshm_reserve+commit / pinshm_recv_inplace+release",
	  .patterns = BOTH, .variant = PS_ZC, .setup = ps_setup, .init = ps_init, .send = zc_send,
	  .recv = zc_recv, .fini = ps_fini, .teardown = ps_teardown },
	{ .name = "pinshm-batch", .about = "pinshm_send_batch / pinshm_recv_batch, 32 at a time (stream)",
	  .patterns = PERF_STREAM, .variant = PS_BATCH, .setup = ps_setup, .init = ps_init,
	  .send = ps_send, .recv = ps_recv, .send_batch = batch_send, .recv_batch = batch_recv,
	  .fini = ps_fini, .teardown = ps_teardown },
	{ .name = "pinshm-sleep", .about = "pinshm with spin 0: every wait sleeps on the futex (ping-pong)",
	  .patterns = PERF_PINGPONG, .variant = PS_SLEEP, .setup = ps_setup, .init = ps_init,
	  .send = ps_send, .recv = ps_recv, .fini = ps_fini, .teardown = ps_teardown },
	{ .name = "pinshm" PERF_DAEMON_SUFFIX, .about = "pinshm, channels created by pinshmd (--socket)",
	  .patterns = BOTH, .flags = PERF_DAEMON, .variant = PS_COPY, .setup = ps_setup, .init = ps_init,
	  .send = ps_send, .recv = ps_recv, .fini = ps_fini, .teardown = ps_teardown },
	{ .name = "pinshm-zc" PERF_DAEMON_SUFFIX, .about = "pinshm-zc, channels created by pinshmd (--socket)",
	  .patterns = BOTH, .flags = PERF_DAEMON, .variant = PS_ZC, .setup = ps_setup, .init = ps_init,
	  .send = zc_send, .recv = zc_recv, .fini = ps_fini, .teardown = ps_teardown },
	{ .name = "pinshm-batch" PERF_DAEMON_SUFFIX,
	  .about = "pinshm-batch, channels created by pinshmd (--socket)", .patterns = PERF_STREAM,
	  .flags = PERF_DAEMON, .variant = PS_BATCH, .setup = ps_setup, .init = ps_init, .send = ps_send,
	  .recv = ps_recv, .send_batch = batch_send, .recv_batch = batch_recv, .fini = ps_fini,
	  .teardown = ps_teardown },
	{ .name = "pinshm-sleep" PERF_DAEMON_SUFFIX,
	  .about = "pinshm-sleep, channels created by pinshmd (--socket)", .patterns = PERF_PINGPONG,
	  .flags = PERF_DAEMON, .variant = PS_SLEEP, .setup = ps_setup, .init = ps_init, .send = ps_send,
	  .recv = ps_recv, .fini = ps_fini, .teardown = ps_teardown },
	{ .name = "pipe", .about = "two pipes, one per direction", .patterns = BOTH, .setup = pipe_setup,
	  .init = pipe_init, .send = fd_send, .recv = fd_recv, .fini = fd_fini, .teardown = fd_teardown },
	{ .name = "unix", .about = "a Unix stream socket pair", .patterns = BOTH, .setup = unix_setup,
	  .init = unix_init, .send = fd_send, .recv = fd_recv, .fini = fd_fini, .teardown = fd_teardown },
	{ .name = "mq", .about = "two POSIX message queues, one per direction", .patterns = BOTH,
	  .setup = mq_setup, .init = mq_init, .send = mq_tsend, .recv = mq_trecv, .fini = mq_fini,
	  .teardown = mq_teardown },
};

/* ---- create: channel creation through pinshmd ---------------------------------- */

int perf_create_cycle(const char *socket, uint64_t capacity, uint64_t *all_ns, uint64_t *create_ns,
		      char *note, size_t notelen, char *err, size_t errlen)
{
	pinshm_client_t *c = NULL;
	pinshm_channel_t *ch = NULL;
	pinshm_channel_attr_t attr;
	char name[PINSHM_NAME_MAX + 1];
	uint64_t t0, t1, t2, t3;
	int rc;

	pinshm_channel_attr_init(&attr);
	attr.capacity = capacity;
	attr.max_producers = 1;
	attr.max_consumers = 1;
	unique_name(name, sizeof(name), "c");
	if (note != NULL && notelen > 0)
		note[0] = '\0';

	t0 = mono_ns();
	rc = pinshm_connect(socket, &c);
	if (rc < 0)
		return client_fail(err, errlen, NULL, "pinshm_connect", rc);
	t1 = mono_ns();
	rc = pinshm_create(c, name, &attr, 0600, 0);
	t2 = mono_ns();
	if (rc < 0) {
		client_fail(err, errlen, c, "pinshm_create", rc);
		goto out;
	}
	if (note != NULL && notelen > 0 && pinshm_client_error(c)[0] != '\0')
		snprintf(note, notelen, "pinshm_create: %s", pinshm_client_error(c));
	rc = pinshm_open(c, name, PINSHM_CONSUMER, &ch);
	if (rc < 0) {
		client_fail(err, errlen, c, "pinshm_open", rc);
		pinshm_unlink(c, name);
		goto out;
	}
	pinshm_channel_close(ch);
	rc = pinshm_unlink(c, name);
	if (rc < 0) {
		client_fail(err, errlen, c, "pinshm_unlink", rc);
		goto out;
	}
	rc = pinshm_disconnect(c);
	c = NULL;
	if (rc < 0) {
		client_fail(err, errlen, NULL, "pinshm_disconnect", rc);
		return rc;
	}
	t3 = mono_ns();
	*all_ns = t3 - t0;
	*create_ns = t2 - t1;
	return 0;
out:
	pinshm_disconnect(c); /* destroys what is left: the channel is not persistent */
	return rc;
}

const perf_transport_t *perf_transports(size_t *count)
{
	*count = sizeof(transports) / sizeof(transports[0]);
	return transports;
}

const perf_transport_t *perf_transport_find(const char *name)
{
	for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
		if (strcmp(transports[i].name, name) == 0)
			return &transports[i];
	return NULL;
}
