/*
 * perf_transports.h - the transports that pinshm-perf compares.
 *
 * Every transport is a small vtable, so that the ping-pong and stream loops
 * of pinshm-perf.c are written once.  A run of one row goes:
 *
 *   parent:  setup()                    creates what both sides share
 *            fork() side A, fork() side B
 *            teardown()                 drops the parent's references
 *   child:   init(side)                 takes this side's end of the link
 *            send()/recv() ...          the measured loop
 *            fini()                     leaves the link
 *
 * Side A (PERF_SIDE_A) sends first: in a ping-pong it sends and waits for
 * the echo, in a stream it sends everything.  Side B receives (and echoes).
 *
 * Every call returns 0 (recv: the message length; batches: a count) or a
 * negative errno value, and on failure writes why into link->err.  setup()
 * may also return PERF_SKIP: the transport cannot do this row (a message
 * queue limit, say), link->err says why, and it is not an error.
 *
 * A PERF_DAEMON transport ("pinshm@pinshmd" and the like) differs from its
 * twin only in where its channels come from: setup() connects to pinshmd
 * at link->socket and creates uniquely named channels there, each side's
 * init() connects on its own and opens them by name (pinshm_open), fini()
 * closes them and disconnects, and teardown() unlinks them and disconnects.
 * Since the channels live while the parent's connection does, its
 * teardown() must come after both sides are done, not right after fork().
 * When setup() succeeds with link->err set, it is a note (the daemon's
 * warning, such as a channel created unpinned).
 *
 * Same work per message: send() copies the message from the caller's
 * private buffer, recv() copies it into the caller's private buffer, once
 * each.  The one exception is "cacheline", the floor, which carries no
 * payload at all.
 */
#ifndef PERF_TRANSPORTS_H
#define PERF_TRANSPORTS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Patterns, as a bit mask of what a transport supports. */
#define PERF_PINGPONG 0x1u
#define PERF_STREAM 0x2u
#define PERF_CREATE 0x4u /* not a transport's: channel creation through pinshmd (perf_create_cycle) */

/* Sides of a link. */
#define PERF_SIDE_A 0
#define PERF_SIDE_B 1

/* setup() result: this row is not applicable (see link->err); not an error. */
#define PERF_SKIP 1

/* Transport flags. */
#define PERF_NO_PAYLOAD 0x1u /* moves no payload: the receiver's buffer is not checked */
#define PERF_DAEMON 0x2u     /* channels made by pinshmd (--socket): see below */

/* The name suffix of the transports of PERF_DAEMON. */
#define PERF_DAEMON_SUFFIX "@pinshmd"

/* Largest message size pinshm-perf accepts (every ring is 4x that). */
#define PERF_MAX_SIZE (256u << 20)

/* Batch size of the batched stream (pinshm-batch). */
#define PERF_BATCH 32u
/* pinshm-batch releases messages of at least this size one by one. */
#define PERF_RELEASE_EACH 4096u

typedef struct perf_link perf_link_t;

typedef struct perf_transport {
	const char *name;
	const char *about; /* one line for --help */
	unsigned patterns; /* PERF_PINGPONG | PERF_STREAM */
	unsigned flags;    /* PERF_NO_PAYLOAD */
	int variant;       /* private to the transport's functions */

	int (*setup)(perf_link_t *l);
	int (*init)(perf_link_t *l, int side);
	int (*send)(perf_link_t *l, const void *buf, size_t len);
	ssize_t (*recv)(perf_link_t *l, void *buf, size_t cap);
	/* Optional (stream only): send @count copies of buf, return how many went. */
	int (*send_batch)(perf_link_t *l, const void *buf, size_t len, unsigned count);
	/* Optional (stream only): receive up to @max messages of link->size bytes,
	 * each copied into buf; return how many came (>= 1), -EBADMSG for a
	 * message of another size. */
	int (*recv_batch)(perf_link_t *l, void *buf, size_t cap, unsigned max);
	void (*fini)(perf_link_t *l);
	void (*teardown)(perf_link_t *l);
} perf_transport_t;

struct perf_link {
	const perf_transport_t *t;
	unsigned pattern; /* PERF_PINGPONG or PERF_STREAM */
	size_t size;      /* the size of every message of the row */
	int side;         /* set by init() */
	const char *socket; /* PERF_DAEMON: pinshmd's socket, NULL: pinshm_connect()'s default */
	void *priv;       /* the transport's state, made by setup() */
	char err[256];    /* why the last call failed */
};

/* @return the transports, in their default order; *count is set to how many. */
const perf_transport_t *perf_transports(size_t *count);

/* @return the transport named @name, or NULL. */
const perf_transport_t *perf_transport_find(const char *name);

/*
 * One iteration of the "create" pattern: connect to pinshmd at @socket
 * (NULL: the default), create a queue named "perf.<pid>.c<n>" of @capacity
 * ring bytes, one producer and one consumer (mode 0600), open it as its
 * consumer, close it, unlink it and disconnect.  @all_ns is set to the time
 * of the whole sequence, @create_ns to that of pinshm_create() alone.
 * @note (may be NULL) is set to the daemon's warning about the create, or "".
 * @return 0, or a negative errno value with @err saying why (the daemon's
 * message included); everything made is undone.
 */
int perf_create_cycle(const char *socket, uint64_t capacity, uint64_t *all_ns, uint64_t *create_ns,
		      char *note, size_t notelen, char *err, size_t errlen);

/* A spin-wait hint for busy-polling loops. */
static inline void perf_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

#endif /* PERF_TRANSPORTS_H */
