/*
 * pinshm.h - the public C API of libpinshm.
 *
 * pinshm carries messages between the processes of one machine through
 * channels: shared-memory segments that hold lock-free rings.  A channel is
 * either a QUEUE (many producers, one or more consumers; each message goes to
 * one consumer, in order per producer) or a TOPIC (publish/subscribe; each
 * message goes to every subscriber that had joined when it was published).
 * Accelerators that read and write records by DMA: pinshm_device.h, which
 * this file includes.
 *
 * Errors: every call that can fail returns 0 (or a count) on success and a
 * negative errno value on failure; pinshm_strerror() names it and
 * pinshm_channel_error() says why a call on a channel failed.
 *
 * Thread safety: a pinshm_channel_t is one endpoint of a channel and is used
 * by one thread at a time; calls on the same handle must not overlap.  Two
 * handles, even of the same channel in the same process and of the same
 * client, are independent endpoints and may be used from different threads
 * at once.  A pinshm_client_t may be used by several threads: its requests
 * go one at a time under a lock of its own, which a send never waits for
 * (a wake-up that needs the daemon's help then waits for the request in
 * progress to end).  A pinshm_device_t may be used by handles of several
 * threads at once.
 *
 * fork(): a child inherits the mappings but not the endpoints: it must not
 * use a handle its parent attached (the endpoint belongs to the parent).  It
 * attaches its own from the descriptor, or closes the inherited one with
 * pinshm_channel_forget() or pinshm_channel_close(), which in a child both
 * unmap without touching the shared state.
 *
 * Trust: the segment is shared with other processes, which may write anything
 * into it.  Every index and length read from it is checked before use; a
 * channel whose shared state is found inconsistent returns -EBADMSG from then
 * on, and never makes the caller crash, touch memory outside the segment or
 * wait without bound.
 */
#ifndef PINSHM_H
#define PINSHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PINSHM_BUILDING)
#define PINSHM_EXPORT __attribute__((visibility("default")))
#else
#define PINSHM_EXPORT
#endif

/*
 * Versions.  They change independently:
 * - the library version follows the API (major: incompatible change);
 * - the layout version changes whenever the shared segment layout or the
 *   record format changes: processes of different layout versions cannot
 *   share a channel, and attaching such a channel fails with -EPROTO.
 */
#define PINSHM_VERSION_MAJOR 0
#define PINSHM_VERSION_MINOR 1
#define PINSHM_VERSION_PATCH 0
#define PINSHM_LAYOUT_VERSION 4

/** @return the library version as "MAJOR.MINOR.PATCH". */
PINSHM_EXPORT const char *pinshm_version(void);

/** @return a static description of a negative errno value returned by pinshm. */
PINSHM_EXPORT const char *pinshm_strerror(int err);

/* Timeouts, in milliseconds, for every call that may wait. */
#define PINSHM_NONBLOCK 0   /* never wait: -EAGAIN when the call would block */
#define PINSHM_FOREVER (-1) /* wait until the call can complete */

typedef enum pinshm_kind {
	PINSHM_QUEUE = 1,
	PINSHM_TOPIC = 2,
} pinshm_kind_t;

typedef enum pinshm_role {
	PINSHM_PRODUCER = 1, /* sends; publishes on a topic */
	PINSHM_CONSUMER = 2, /* receives; subscribes on a topic */
} pinshm_role_t;

/* Channel flags. */
#define PINSHM_OVERRUN 0x1u /* topic: never wait for slow subscribers; they count what they lost */

/* Limits of a channel's geometry. */
#define PINSHM_MIN_CAPACITY 4096u
#define PINSHM_MAX_CAPACITY (1ull << 32)
#define PINSHM_MAX_PRODUCERS 1024u
#define PINSHM_MAX_CONSUMERS 64u

/**
 * The geometry and kind of a channel, fixed when its segment is formatted.
 * Initialise with pinshm_channel_attr_init() and change what you need.
 */
typedef struct pinshm_channel_attr {
	uint32_t kind;          /* PINSHM_QUEUE (default) or PINSHM_TOPIC */
	uint32_t flags;         /* PINSHM_OVERRUN (topics only) or 0 */
	uint64_t capacity;      /* ring bytes per producer: a power of two, default 1 MiB */
	uint32_t max_message;   /* largest payload, at most capacity / 2 - 32; 0 (default): that maximum */
	uint32_t max_producers; /* producers attached at once, 1..PINSHM_MAX_PRODUCERS (default 4) */
	uint32_t max_consumers; /* consumers attached at once, 1..PINSHM_MAX_CONSUMERS (default 1) */
} pinshm_channel_attr_t;

/** Set @p attr to the defaults: a queue, 1 MiB per producer, 4 producers, 1 consumer. */
PINSHM_EXPORT void pinshm_channel_attr_init(pinshm_channel_attr_t *attr);

/**
 * Compute the segment size that a channel of geometry @p attr needs.
 * @return 0, or -EINVAL if @p attr is out of range (capacity not a power of
 *         two or out of limits, max_message too large, counts out of range).
 */
PINSHM_EXPORT int pinshm_segment_size(const pinshm_channel_attr_t *attr, size_t *size);

/**
 * Format @p size bytes at @p base (page-aligned memory, shared with the
 * channel's users; it need not be zeroed) as an empty channel.  The daemon formats the segments
 * it hands out; a test or a program that shares memory by itself may too.
 * @return 0, -EINVAL for a bad @p attr, -ENOSPC if @p size is too small.
 */
PINSHM_EXPORT int pinshm_segment_format(void *base, size_t size, const pinshm_channel_attr_t *attr);

/**
 * Create an anonymous channel segment in this process (memfd, sealed against
 * resizing, not pinned and not known to any daemon) and format it.  Share the
 * descriptor with fork() or SCM_RIGHTS, then attach to it.
 * @param fd  set to a new close-on-exec descriptor, owned by the caller.
 * @return 0, -EINVAL for a bad @p attr, or the errno of memfd_create,
 *         ftruncate, fcntl or mmap.
 */
PINSHM_EXPORT int pinshm_segment_create(const pinshm_channel_attr_t *attr, int *fd);

typedef struct pinshm_channel pinshm_channel_t;

/**
 * Attach to the channel in segment @p fd as a producer or a consumer: map it,
 * check its header against the descriptor's size, and take a free endpoint.
 * The descriptor is not kept; the caller may close it.
 * @return 0, -EINVAL (bad role), -EPROTO (not a pinshm segment or another layout version),
 *         -EBADMSG (inconsistent header), -EBUSY (every endpoint of that
 *         role is taken), -ENOMEM, or the errno of fstat/mmap.
 */
PINSHM_EXPORT int pinshm_channel_attach(int fd, pinshm_role_t role, pinshm_channel_t **out);

/**
 * Leave the channel: a pending reservation is dropped, messages received in
 * place and not released are released, the endpoint is marked closed and
 * the segment unmapped.  Peers waiting on this endpoint are woken.
 * A handle from pinshm_open() then also tells the daemon, through the
 * client it came from (a CLOSE request: the endpoint is free for another
 * open at once, and the connection's reference to the channel goes with
 * its last endpoint there unless it created the channel), under the
 * client's lock like its other requests.  Once that client has
 * disconnected, the endpoint is no longer the handle's (the daemon reaps
 * it with the connection, and may give it to another open): the handle is
 * only unmapped, nothing is released, marked or sent.  Likewise in a child
 * that inherited the handle across fork(), where the endpoint is the
 * parent's (as pinshm_channel_forget()).
 * @return 0, or for a handle from pinshm_open() the error of the CLOSE
 *         request (a transport error as pinshm_connect()); the handle is
 *         closed and freed in every case.
 */
PINSHM_EXPORT int pinshm_channel_close(pinshm_channel_t *ch);

/** Unmap and free a handle inherited across fork() without touching the
 *  channel (nor telling the daemon, for a handle from pinshm_open()). */
PINSHM_EXPORT void pinshm_channel_forget(pinshm_channel_t *ch);

/** @return the detail ("why") of the last failure on this handle other than
 *  -EAGAIN/-ETIMEDOUT, or "" if none; a later success does not clear it. */
PINSHM_EXPORT const char *pinshm_channel_error(const pinshm_channel_t *ch);

/** @return this handle's endpoint number in the channel (0..producers+consumers-1). */
PINSHM_EXPORT unsigned pinshm_channel_endpoint(const pinshm_channel_t *ch);

/** pinshm_channel_set_spin(): back to the default, adaptive budget. */
#define PINSHM_SPIN_ADAPTIVE UINT64_MAX

/**
 * Spin budget of blocking calls on this handle: a call that must wait polls
 * for about @p spin_ns nanoseconds, then yields, then sleeps on a futex
 * (each sleep bounded, so a corrupted wake-up flag costs at most a delay);
 * 0 sleeps at once.  A budget set here is fixed: every wait polls that
 * long, whatever the load.
 * The default (and PINSHM_SPIN_ADAPTIVE) adapts per handle, up to 50000 ns,
 * about twice what waking a sleeping process costs: a poll that runs out
 * without the event (the peer was not running: more runnable threads than
 * cores) halves the budget, down to 0; a wait satisfied while polling
 * doubles it back.  At 0, one wait in 16 or more polls the full 50000 ns
 * (one in up to 4096 while those polls keep running out), so that the
 * budget comes back once the peer answers within it again.
 * A wait for a peer that copies a message first polls 1 ns longer per byte
 * of it, 1 ms longer at most (a producer's: the message it sends; a
 * consumer's: the last it received), while the budget is not 0 and in its
 * probes.  A wait whose timeout ends its poll after 50000 ns counts as one
 * that ran out.
 */
PINSHM_EXPORT void pinshm_channel_set_spin(pinshm_channel_t *ch, uint64_t spin_ns);

/**
 * Quick polls on this consumer handle (@p on non-zero; default off): a
 * non-blocking receive on a channel of more than 16 lanes looks at the lanes
 * that gave messages lately and at 8 others in turn, not at every lane, so
 * it may return -EAGAIN while a message waits in a lane it did not look at;
 * non-blocking receives in a row look at every lane (each one within
 * lanes / 8 calls).  For a consumer that polls often, as a progress loop
 * does.  pinshm_channel_arm() and blocking calls that sleep still look at
 * every lane first.
 */
PINSHM_EXPORT void pinshm_channel_set_quick_polls(pinshm_channel_t *ch, int on);

/* ---- sending ---------------------------------------------------------- */

/**
 * Copy @p len bytes from @p buf into the channel as one message (len may be 0).
 * Waits for space up to @p timeout_ms (PINSHM_NONBLOCK, PINSHM_FOREVER or ms).
 * @return 0; -EMSGSIZE if len > max_message; -EAGAIN (non-blocking) or
 *         -ETIMEDOUT when there was no space; -EPIPE when there is no space
 *         and every consumer of a queue has left (after one had attached);
 *         -EBADMSG on a corrupt channel; -EINVAL if a reservation is
 *         pending or the handle is not a producer.
 */
PINSHM_EXPORT int pinshm_send(pinshm_channel_t *ch, const void *buf, size_t len, int timeout_ms);

/**
 * Send @p count messages, each an iovec, with one wake-up check for all.
 * Waits for space for each message as pinshm_send() does (the timeout
 * applies to each wait).
 * @return the number of messages sent (0 if @p count is 0), or a negative
 *         errno if none was sent (as pinshm_send()).  Messages are sent in
 *         order; after a partial send the rest were not sent.
 */
PINSHM_EXPORT int pinshm_send_batch(pinshm_channel_t *ch, const struct iovec *msgs, unsigned count,
				    int timeout_ms);

/* Flags of pinshm_commit(). */
#define PINSHM_MORE 0x1u /* more commits follow at once: defer waking receivers to the next commit */
#define PINSHM_LEN_ONLY 0x2u /* no byte of the reservation past the committed length was written */

/**
 * Reserve room for a message of up to @p len bytes and return where to write
 * it in place (*buf is 16-byte aligned).  Nothing is visible to consumers
 * until pinshm_commit().  One reservation at a time per handle.
 * @return as pinshm_send().
 */
PINSHM_EXPORT int pinshm_reserve(pinshm_channel_t *ch, size_t len, void **buf, int timeout_ms);

/**
 * Publish the pending reservation as a message of @p len bytes
 * (len <= the reserved length).  With PINSHM_MORE the receivers are not
 * woken until a later commit or send without it (batching).  With
 * PINSHM_LEN_ONLY the caller promises it wrote nothing past @p len in the
 * reservation (one made longer than the message, to end it on a cache
 * line for instance): the library then need not clear that room again
 * before publishing, a cache line fewer on the message's path.  Broken,
 * the promise does what any producer writing stray bytes in its ring can:
 * its consumers may find the channel corrupt (-EBADMSG) or take those
 * bytes for a message; nothing outside the channel is touched.
 * @return 0, or -EINVAL if nothing is reserved or @p len is too large.
 */
PINSHM_EXPORT int pinshm_commit(pinshm_channel_t *ch, size_t len, unsigned flags);

/** Drop the pending reservation (nothing is published). @return 0 or -EINVAL. */
PINSHM_EXPORT int pinshm_abort(pinshm_channel_t *ch);

/** Wake receivers for messages committed with PINSHM_MORE. @return 0. */
PINSHM_EXPORT int pinshm_flush(pinshm_channel_t *ch);

/* ---- receiving -------------------------------------------------------- */

/** A message received in place; valid until released. */
typedef struct pinshm_msg {
	const void *data; /* the payload, in the segment, 16-byte aligned */
	size_t len;       /* its length in bytes */
	uint64_t lost;    /* topic: messages of this producer lost before this one (overrun) */
	uint64_t priv[2]; /* private to the library */
} pinshm_msg_t;

/**
 * Copy the next message into @p buf.
 * @param len  set to the message length (also on -EMSGSIZE).
 * @return 0; -EMSGSIZE if the message is longer than @p cap (it stays in the
 *         channel, *len says how much room it needs); -EAGAIN/-ETIMEDOUT if
 *         none came; -EPIPE if the channel is empty and every producer has
 *         left (after one had attached); -EBADMSG on a corrupt channel
 *         (a receive that does not wait checks the lanes' positions on the
 *         first call that finds nothing, then once in 64, so that polling
 *         costs the producers nothing); -EINVAL if not a consumer.
 *         On an overrun topic, -ESTALE if the message was overwritten while
 *         being copied (it counts as lost; call again).
 */
PINSHM_EXPORT int pinshm_recv(pinshm_channel_t *ch, void *buf, size_t cap, size_t *len, int timeout_ms);

/**
 * Receive the next message in place.  Release messages in the order received
 * (releasing one also releases those received before it on this handle); at
 * most 64 may be held at once.  On an overrun topic the payload may be
 * overwritten while held: pinshm_release() then says so.
 * @return 0, or as pinshm_recv() (-ENOBUFS when 64 are already held).
 */
PINSHM_EXPORT int pinshm_recv_inplace(pinshm_channel_t *ch, pinshm_msg_t *msg, int timeout_ms);

/**
 * Receive up to @p max messages in place, waiting only for the first.
 * @return the number received (>= 1), or a negative errno as pinshm_recv_inplace().
 */
PINSHM_EXPORT int pinshm_recv_batch(pinshm_channel_t *ch, pinshm_msg_t *msgs, unsigned max, int timeout_ms);

/**
 * Release @p msg (and every message received in place before it) so that
 * its room can be reused.
 * @return 0; -EINVAL if @p msg is not held by this handle; -ESTALE on an
 *         overrun topic if it was overwritten while held; -EBADMSG if the
 *         channel was found corrupt.
 */
PINSHM_EXPORT int pinshm_release(pinshm_channel_t *ch, const pinshm_msg_t *msg);

/* ---- event loops ------------------------------------------------------ */

/**
 * The wake-up descriptor of consumer handle @p ch, for poll/epoll/select:
 * it becomes readable (POLLIN) when a producer commits a message while the
 * handle is armed (pinshm_channel_arm()).  It is the receiving end of a
 * Unix datagram socket pair that the handle makes at the first call and
 * closes with the handle (do not close it yourself); no other process
 * holds it, so no peer can drain it or change its flags.  Producers get
 * the sending end: for a handle from pinshm_open(), the daemon is given it
 * (a NOTIFY request through the handle's client) and producers opened
 * through it fetch it by themselves, without waiting, when they first find
 * this consumer armed (the daemon wakes the consumer meanwhile); for a
 * channel of one's own, hand pinshm_channel_notify_peer_fd() to producers.
 * A producer wakes it with one send() with MSG_DONTWAIT, so a consumer can
 * never make a producer's call block, whatever it does to its socket.
 * @return the descriptor (>= 0), or -EINVAL (a producer), -EMFILE/-ENFILE,
 *         or the error of the NOTIFY request.
 */
PINSHM_EXPORT int pinshm_channel_notify_fd(pinshm_channel_t *ch);

/**
 * The sending end of consumer handle @p ch's wake-up socket (made as
 * pinshm_channel_notify_fd() makes it), for a channel of one's own: give
 * it to the producers' processes (SCM_RIGHTS, or across fork()), which
 * pass it to pinshm_channel_set_peer_fd().  The handle keeps and closes it.
 * @return the descriptor, or an error as pinshm_channel_notify_fd().
 */
PINSHM_EXPORT int pinshm_channel_notify_peer_fd(pinshm_channel_t *ch);

/**
 * Give consumer handle @p ch of a channel of one's own (pinshm_channel_attach())
 * an eventfd (EFD_NONBLOCK) that producers write to when a message arrives
 * while it is armed; producers learn it with pinshm_channel_set_peer_fd().
 * The caller keeps ownership.  An eventfd's flags are shared by every
 * process that holds it: any of them can make the others' reads or writes
 * block, so use it only among processes that trust each other, and prefer
 * pinshm_channel_notify_fd().  Set it once, before the first arm.
 * @return 0, or -EINVAL (a producer; a handle from pinshm_open(), which
 *         takes its wake-up descriptor from pinshm_channel_notify_fd(); or
 *         one that already has its own).
 */
PINSHM_EXPORT int pinshm_channel_set_notify_fd(pinshm_channel_t *ch, int efd);

/**
 * Tell producer handle @p ch how to wake consumer endpoint @p endpoint:
 * @p fd is the sending end of its wake-up socket
 * (pinshm_channel_notify_peer_fd()) or its eventfd
 * (pinshm_channel_set_notify_fd()); -1 forgets it.  The caller keeps
 * ownership.  Not needed for handles from pinshm_open().
 * @return 0 or -EINVAL (not a producer, not a consumer endpoint, or @p fd
 *         a socket of another type than SOCK_DGRAM).
 */
PINSHM_EXPORT int pinshm_channel_set_peer_fd(pinshm_channel_t *ch, unsigned endpoint, int fd);

/**
 * Arm the wake-up descriptor before sleeping in poll/epoll on it.  It first
 * reads off the wake-ups already on the handle's own socket.
 * @return 0: armed, safe to sleep; -EAGAIN: a message is ready (do not
 *         sleep, receive it); -EPIPE: empty and every producer has left;
 *         -EINVAL: not a consumer, or no wake-up descriptor; -EBADMSG.
 * The next receive call on the handle disarms it.  After the descriptor
 * becomes readable, receive with PINSHM_NONBLOCK until -EAGAIN, then arm
 * again (with an eventfd of one's own, read() it first to clear it).
 */
PINSHM_EXPORT int pinshm_channel_arm(pinshm_channel_t *ch);

/* ---- repair (for the daemon) ------------------------------------------ */

/**
 * Repair the channel formatted at @p base after the process that held
 * endpoint @p endpoint died: a producer's uncommitted reservation is
 * discarded (its successor on the lane carries on after its last commit);
 * the messages a queue consumer held unreleased are delivered again
 * (at-least-once) - to the other consumers at once on a shared queue, to
 * the next consumer that attaches on a single-consumer queue; the endpoint
 * is marked dead and every waiter is woken, so that peers left without a
 * counterpart get -EPIPE.  Safe while other
 * endpoints keep using the channel.  @p size is the mapping's true size.
 * @return 0, -EINVAL (bad endpoint, or it is not in use), -EPROTO/-EBADMSG
 *         (not a valid channel).
 */
PINSHM_EXPORT int pinshm_segment_reap(void *base, size_t size, unsigned endpoint);

/** Counters of a channel, read from one handle's view. */
typedef struct pinshm_channel_info {
	uint32_t kind, flags;
	uint64_t capacity;
	uint32_t max_message, max_producers, max_consumers;
	uint32_t producers, consumers; /* endpoints attached now */
	uint64_t segment_size;
	uint64_t lost; /* messages this handle lost to overruns */
	/* The devices this handle is registered with (pinshm_channel_register()),
	 * in no order; none in a forked child. */
	uint32_t ndevices;
	struct pinshm_channel_device {
		struct pinshm_device *dev;
		uint32_t kind;  /* PINSHM_DEVICE_* */
		uint32_t flags; /* PINSHM_REGISTERED, with PINSHM_REGISTERED_READ_ONLY where it may only read */
	} devices[4];
	uint32_t commit_waits; /* producer: 1 while its reservation waits for a device (pinshm_commit_after()) */
} pinshm_channel_info_t;

/** Fill @p info. @return 0 or -EBADMSG. */
PINSHM_EXPORT int pinshm_channel_info(pinshm_channel_t *ch, pinshm_channel_info_t *info);

/* ======================================================================== */
/* ---- the daemon: named channels through pinshmd ----------------------- */
/* ======================================================================== */

/*
 * pinshmd owns the channel segments: it creates them, locks them in RAM
 * where it may, and hands their descriptors to the clients that may open
 * them; it never carries a message.  A client connects once, then creates,
 * opens and unlinks channels by name.  See pinshmd(8) and
 * pinshm-protocol(7).
 *
 * The connection is the client's lease on what it opened: when it closes
 * (pinshm_disconnect(), exit, kill -9), the daemon marks every endpoint
 * opened through it that is still attached as dead in the segment, so that
 * its peers get -EPIPE, and a channel that no open connection created or
 * opened any more is destroyed, unless it was created PINSHM_PERSISTENT
 * and is still named.  Keep the client connected while its channels are in
 * use.  When the daemon goes (killed, restarted), the channels keep
 * working, and the client hands them back to the next daemon when it next
 * talks to it (pinshm_reconnect()).
 *
 * A connection belongs to the process that made it (the pid the daemon
 * reads with SO_PEERCRED at connect).  The daemon watches that process
 * with a pidfd: when it exits, the connection is reaped at once (its
 * endpoints marked dead, its references dropped) and closed, even where a
 * child forked after pinshm_connect() still holds the socket.  A child's
 * exit reaps nothing.  fork(): the child shares the connection until the
 * parent exits; it should pinshm_disconnect() its copy (which closes
 * nothing for the parent) and connect by itself to use the daemon.  On a
 * kernel without pidfds (before Linux 5.3) the connection is reaped only
 * when every process holding it has closed it or exited.
 *
 * Threads (the rule is at the top of this file): pinshm_client_error()
 * tells each thread the reason of its own last request.  Every call waits
 * for the daemon's reply at most PINSHM_CLIENT_TIMEOUT_MS (plus the time
 * another thread's request holds the client's lock).  A send on a handle
 * opened through it makes no request that waits: see
 * pinshm_channel_notify_fd().
 *
 * The protocol version changes whenever a message's layout or meaning
 * changes; a library and a daemon of different protocol versions refuse to
 * talk (-EPROTO, with a message saying both versions).
 */
#define PINSHM_PROTOCOL_VERSION 8
#define PINSHM_CLIENT_TIMEOUT_MS 10000

/*
 * A channel name: 1..PINSHM_NAME_MAX characters of [A-Za-z0-9._-], not
 * starting with '.'; or an owned name "@UID.REST" ('@' first, UID a uid in
 * decimal without leading zeros, then '.' and at least one more character
 * of that set), which belongs to that uid: only it, or root, may create it
 * (pinshm_name_own() makes one for the caller).  The administrator may
 * reserve other names to a user or group, or allow only owned and reserved
 * names (pinshmd.conf(5), [names] and shared_names).
 */
#define PINSHM_NAME_MAX 63

/* pinshm_open_owned()'s owner: any user. */
#define PINSHM_OWNER_ANY ((uid_t)-1)

/* Flags of pinshm_create(). */
#define PINSHM_PERSISTENT 0x1u /* the channel outlives its users, until unlinked */
#define PINSHM_HUGEPAGES 0x2u  /* back the segment with huge pages (vm.nr_hugepages) */
/* The segment's backend.  Neither: the daemon's default (pinshmd.conf(5)
 * `backend`; unless set, `auto`: a sealed memfd, or shm for an owner-only
 * channel where the kernel has no sealed memfd). */
#define PINSHM_USE_MEMFD 0x4u  /* a memfd sealed against resizing: no holder can shrink it */
#define PINSHM_USE_SHM 0x8u    /* shm_open(), unlinked at once; not with huge pages.  Any holder of
				* its descriptor can shrink it and make every process that maps
				* it fault (SIGBUS): only for channels whose users trust each other */

/* The NUMA node of pinshm_create_on_node(): a node number (0, 1...) or: */
#define PINSHM_NODE_ANY (-1)   /* no placement: the kernel's default policy */
#define PINSHM_NODE_LOCAL (-2) /* the node of the CPU the creator runs on when asking */
#define PINSHM_NODE_CONSUMER (-3) /* the node of the CPU of the first consumer, when it opens
				   * the channel; a listing shows this value until then */

typedef struct pinshm_client pinshm_client_t;

/**
 * Connect to pinshmd and check that it speaks this library's protocol.
 * @param socket_path  the daemon's socket; NULL: $PINSHM_SOCKET if set and
 *        not empty, else the user-mode socket ($XDG_RUNTIME_DIR/pinshm/socket,
 *        or /tmp/pinshm-UID/socket without XDG_RUNTIME_DIR), else, if that
 *        does not exist, the system socket /run/pinshm/socket.
 * @param out  set to the new client (close-on-exec socket), NULL on failure.
 * @return 0; -ENOENT (no socket there), -ECONNREFUSED (nobody listens),
 *         -EACCES (the socket is not ours to use, or the daemon's [access]
 *         lists do not admit the caller), -EUSERS (the caller's user has
 *         as many connections open as the daemon allows it), -ENAMETOOLONG,
 *         -EPROTO (another protocol version: pinshm_client_error(NULL) says
 *         which), -ETIMEDOUT, -ECONNRESET, -ENOMEM.  The reason of a failure
 *         is kept for this thread in pinshm_client_error(NULL).
 */
PINSHM_EXPORT int pinshm_connect(const char *socket_path, pinshm_client_t **out);

/* Flags of pinshm_connect_flags(). */
#define PINSHM_CONNECT_AUTOSTART 0x1u /* start a user-mode pinshmd where none answers */

/* How long pinshm_connect_flags() may take to start a daemon, in all. */
#define PINSHM_AUTOSTART_TIMEOUT_MS 10000

/**
 * pinshm_connect(), and where no daemon answers (-ENOENT, -ECONNREFUSED)
 * and starting one is allowed, start a user-mode pinshmd, as D-Bus starts
 * a session bus, then connect to it.  Only one starts when many clients
 * race: they take turns on a lock file (SOCKET.start) and find the first
 * one's daemon serving.  The daemon runs as the caller, on @p socket_path
 * (NULL: $PINSHM_SOCKET if set and not empty, else the user-mode default;
 * the system socket is used, not started, where it answers), and exits
 * once no client has been connected and no channel alive for
 * $PINSHM_AUTOSTART_IDLE seconds (default 60).  The binary:
 * $PINSHMD, else the pinshmd of the install (sbindir).
 *
 * Allowed: $PINSHM_AUTOSTART=0 never; =1 always (plain pinshm_connect()
 * too); unset or anything else: where @p flags has PINSHM_CONNECT_AUTOSTART.
 * @param flags  0 or PINSHM_CONNECT_AUTOSTART.
 * @return as pinshm_connect(), and -EINVAL (unknown flags), -ETIMEDOUT
 *         (the daemon started did not answer within
 *         PINSHM_AUTOSTART_TIMEOUT_MS), -EPERM (the user-mode folder is
 *         not the caller's, or open to others), or the errno of the
 *         daemon's spawn (-ENOENT: no pinshmd there); the reason in
 *         pinshm_client_error(NULL).
 */
PINSHM_EXPORT int pinshm_connect_flags(const char *socket_path, unsigned flags, pinshm_client_t **out);

/**
 * Close the connection and free @p c (NULL is ignored).  Endpoints opened
 * through it that are still attached are marked dead by the daemon, and may
 * be given to other opens at once: close channels first.  A handle left
 * open is its endpoint's no longer; pinshm_channel_close() then only unmaps
 * it.  @return 0.
 */
PINSHM_EXPORT int pinshm_disconnect(pinshm_client_t *c);

/**
 * Connect again where the daemon closed the connection (it was killed or
 * restarted, or it exited idle): to the same place, as
 * pinshm_connect_flags() did (starting a daemon where it was allowed to),
 * then hand back to the new daemon the segment of every channel open
 * through @p c (a HANDBACK request with its descriptor: the client keeps one
 * descriptor per open handle for this), so that it locks, accounts and
 * serves them again and claims their endpoints for the new connection.
 * Every other call on @p c does this by itself before its request when it
 * finds the connection closed; a call cut short by the daemon's death
 * fails with -ECONNRESET, and the next one reconnects.
 *
 * What the new daemon trusts: a channel it has already (its descriptor
 * store, or another client's hand-back of the same segment) keeps its
 * record; one it learns from a client belongs to that client's user, mode
 * 0600, not persistent, and keeps its name where the name is free.  Only
 * handles from pinshm_open() are handed back: a channel that its creator
 * never opened is gone with the old daemon, unless the store kept it.
 * @return 0 (also where the connection was fine, or where the daemon took
 *         back fewer channels: pinshm_client_error() says how many), or as
 *         pinshm_connect_flags(); -EPROTO/-ETIMEDOUT for a connection out
 *         of step (connect again).
 */
PINSHM_EXPORT int pinshm_reconnect(pinshm_client_t *c);

/**
 * @return the daemon's message about the last request that the calling
 *         thread made on @p c (why it failed, or a warning such as a
 *         channel created unpinned), or "" if none: each thread has its
 *         own, which another thread's requests do not change, valid until
 *         this thread's next request on @p c or pinshm_disconnect(); with
 *         @p c NULL, why the last pinshm_connect() of this thread failed.
 */
PINSHM_EXPORT const char *pinshm_client_error(const pinshm_client_t *c);

/**
 * Create the channel @p name with geometry @p attr (NULL: the defaults of
 * pinshm_channel_attr_init()), owned by the caller's uid and gid, with
 * permission bits @p mode (0..0777: read lets a process open it as a
 * consumer, write as a producer, as for a file; any process that opens it
 * maps the whole segment writable).  Without PINSHM_PERSISTENT in @p flags
 * the channel lives while a connection that created or opened it is open.
 * The segment is charged to the caller's user until the channel is
 * destroyed (pinshmd.conf(5)).  Where the daemon cannot lock the segment
 * in RAM (its RLIMIT_MEMLOCK), the channel is created unpinned:
 * pinshm_client_error() and pinshm_list() say so.
 * @return 0; -EINVAL (bad name, geometry, mode or flags), -EEXIST (the name
 *         is taken), -ENFILE (the daemon's channel table is full), -EMFILE
 *         (this connection references too many channels), -EFBIG (the
 *         segment is over the daemon's max_segment_size), -EUSERS (the user
 *         owns as many channels as it may), -EDQUOT (over the user's
 *         quota), -ENOSPC (over the daemon's budget of pinned memory),
 *         -ENOMEM, or a transport error as pinshm_connect().
 */
PINSHM_EXPORT int pinshm_create(pinshm_client_t *c, const char *name, const pinshm_channel_attr_t *attr,
				mode_t mode, unsigned flags);

/**
 * As pinshm_create(), with the segment's pages placed on NUMA node @p node
 * (PINSHM_NODE_ANY: no placement, as pinshm_create(); PINSHM_NODE_LOCAL:
 * the node of the CPU the caller runs on at the time of the request;
 * PINSHM_NODE_CONSUMER: near the consumer, see below).  The placement is a
 * preference (MPOL_PREFERRED): pages go elsewhere only when the node has no
 * free memory.
 *
 * PINSHM_NODE_CONSUMER leaves the segment unplaced (the listing's node is
 * PINSHM_NODE_CONSUMER) until the first process opens the channel as a
 * consumer: pinshm_open() tells the daemon the node of the CPU it runs on
 * (getcpu(2)), and the daemon then moves the segment's pages, already
 * locked, to that node (mbind(2) with MPOL_MF_MOVE) and lists it there.  A
 * producer's open does not place it.  Where the pages cannot be moved (no
 * node known for that consumer, EPERM, ENOMEM...), the channel keeps
 * working where it is, and the daemon logs why; pages that other processes
 * have mapped already move only where the daemon has CAP_SYS_NICE
 * (MPOL_MF_MOVE_ALL).  With PINSHM_HUGEPAGES in @p flags, the
 * segment is made of huge pages, its size rounded up to a huge page.
 * @return as pinshm_create(); -EINVAL also for a node that does not exist;
 *         -ENOMEM when too few huge pages are free (vm.nr_hugepages).
 */
PINSHM_EXPORT int pinshm_create_on_node(pinshm_client_t *c, const char *name, const pinshm_channel_attr_t *attr,
					mode_t mode, unsigned flags, int node);

/* The pinning policy of pinshm_create_full(): seconds of idleness after
 * which the daemon unlocks the channel's segment (1 to PINSHM_PIN_IDLE_MAX),
 * or: */
#define PINSHM_PIN_ALWAYS 0u            /* never unlocked */
#define PINSHM_PIN_DEFAULT UINT32_MAX   /* the daemon's pin_idle (pinshmd.conf(5); always unless set) */
#define PINSHM_PIN_IDLE_MAX 31536000u   /* a year */

/**
 * As pinshm_create_on_node(), with the channel's working-set pinning
 * policy @p pin_idle.  With N seconds, the daemon unlocks the segment of a
 * channel that nobody used for N seconds (no message committed or
 * released, no endpoint attached or closed: it looks every quarter of a
 * second) and locks it again as soon as it sees it used, or when a client
 * asks (pinshm_channel_relock(), or an open).  Unlocked, the channel still
 * counts whole on the budget and quota, so that locking it again cannot
 * be refused for want of budget.  Only a pinned channel is ever unlocked.
 * @return as pinshm_create_on_node(); -EINVAL also for a @p pin_idle over
 *         PINSHM_PIN_IDLE_MAX (other than PINSHM_PIN_DEFAULT).
 */
PINSHM_EXPORT int pinshm_create_full(pinshm_client_t *c, const char *name, const pinshm_channel_attr_t *attr,
				     mode_t mode, unsigned flags, int node, uint32_t pin_idle);

/**
 * As pinshm_create_full(), with the segment's pages placed on the NUMA
 * node of PCI device @p pci_bus (an accelerator, a network card: the
 * node its DMA reaches fastest), which the daemon reads from
 * /sys/bus/pci/devices/BUS/numa_node.  @p pci_bus is the device's bus id
 * as sysfs names it: "DDDD:BB:SS.F" in lower-case hex, e.g.
 * "0000:3b:00.0" (nvidia-smi's "00000000:3B:00.0" is written
 * "0000:3b:00.0").  A device that has no node (-1 there: a machine of one
 * node) leaves the segment unplaced, as PINSHM_NODE_ANY does; the daemon
 * logs where it went, and pinshm_stat() shows the node.
 * @return as pinshm_create_full(); -EINVAL also for a malformed bus id;
 *         -ENODEV: no such PCI device; -EIO: its node cannot be read.
 */
PINSHM_EXPORT int pinshm_create_near_pci(pinshm_client_t *c, const char *name, const pinshm_channel_attr_t *attr,
					 mode_t mode, unsigned flags, const char *pci_bus, uint32_t pin_idle);

/**
 * If the daemon has unlocked @p ch's segment for want of use (working-set
 * pinning, see pinshm_create_full()), ask it to lock it again now, through
 * the client that opened @p ch (a RELOCK request; the same rule of one
 * thread at a time).  Costs one load from the segment when it is locked.
 * The daemon also relocks a channel by itself within a quarter of a second
 * of seeing it used: this call is for a client that wants it locked before
 * it goes on.
 * @return 0 (locked, or asked and locked again); -ENOTCONN (unlocked, and
 *         @p ch was not opened through a client still connected); -ENOMEM
 *         (the daemon could not lock it: its RLIMIT_MEMLOCK in user mode);
 *         or a transport error as pinshm_connect().
 */
PINSHM_EXPORT int pinshm_channel_relock(pinshm_channel_t *ch);

/**
 * Open the channel @p name as a producer or a consumer: the daemon checks
 * the caller's credentials against the channel's owner, group and mode,
 * takes an endpoint of @p role for this connection and sends the segment,
 * which this process maps and attaches to (as pinshm_channel_attach()).
 * Close the handle with pinshm_channel_close() before disconnecting: it
 * gives the endpoint back to the daemon through @p c.  A handle still open
 * when @p c disconnects stays mapped, but its endpoint is then marked dead
 * by the daemon; once no connection references the channel (and it is not
 * persistent) the daemon destroys it and releases its rings: the handle
 * then gets -EPIPE, and its data is gone.  If the attach fails here after
 * the daemon took the endpoint, it is given back at once.
 * @return 0; -ENOENT (no such channel), -EACCES (not permitted), -EBUSY
 *         (every endpoint of @p role is taken), -EINVAL (bad name or role),
 *         -EMFILE (this connection holds too many channels), -EPROTO (the
 *         segment does not match what the daemon said), or as
 *         pinshm_channel_attach() and pinshm_connect().
 */
PINSHM_EXPORT int pinshm_open(pinshm_client_t *c, const char *name, pinshm_role_t role, pinshm_channel_t **out);

/**
 * As pinshm_open(), but only a channel that belongs to uid @p owner: the
 * daemon refuses one of another owner, so that a caller that opens a
 * shared name knows whose channel it got (a channel made first by someone
 * else under that name is not opened).  pinshm_open() is this with
 * PINSHM_OWNER_ANY, except for a name "@UID.REST", which it opens with
 * owner UID: such a name never opens another user's channel.
 * @return as pinshm_open(); -EPERM (the channel belongs to another user:
 *         pinshm_client_error() names both uids); -EINVAL also for an
 *         @p owner that differs from the UID of an owned name.
 */
PINSHM_EXPORT int pinshm_open_owned(pinshm_client_t *c, const char *name, pinshm_role_t role, uid_t owner,
				    pinshm_channel_t **out);

/**
 * Make the owned name of the calling user for @p rest: "@UID.REST", UID
 * its effective uid (the one pinshmd sees), into @p buf of @p len bytes.
 * Only that user (and root) may create it, and pinshm_open() of it opens
 * only that user's channel.  Needs no daemon.
 * @return 0; -EINVAL (@p rest empty or not of [A-Za-z0-9._-]);
 *         -ENAMETOOLONG (over PINSHM_NAME_MAX characters, or over @p len).
 */
PINSHM_EXPORT int pinshm_name_own(char *buf, size_t len, const char *rest);

/**
 * Remove the name @p name: it can be created again at once, while the
 * processes that opened the old channel keep using it until they leave.
 * @return 0; -ENOENT; -EPERM (only its owner or root may); -EINVAL (bad
 *         name); or a transport error.
 */
PINSHM_EXPORT int pinshm_unlink(pinshm_client_t *c, const char *name);

/* State bits of a listed channel. */
#define PINSHM_LIST_PINNED 0x1u     /* its segment is locked in RAM */
#define PINSHM_LIST_PERSISTENT 0x2u /* created with PINSHM_PERSISTENT */
#define PINSHM_LIST_SEALED 0x4u     /* memfd sealed against resizing */
#define PINSHM_LIST_HUGEPAGES 0x8u  /* made of huge pages */
#define PINSHM_LIST_DAMAGED 0x10u   /* shm segment shrunk by a client: the daemon no longer touches it */
#define PINSHM_LIST_UNLOCKED 0x20u  /* pinned, but unlocked for now for want of use (pin_idle) */
#define PINSHM_LIST_LOCKING 0x40u   /* being locked (adopted at a restart, or handed back): not PINNED yet */

/* The backend of a listed channel. */
#define PINSHM_BACKEND_MEMFD 1u /* sealed memfd */
#define PINSHM_BACKEND_SHM 2u   /* POSIX shared memory (shm_open, unlinked) */

/** One channel, as pinshm_list() reports it. */
typedef struct pinshm_list_entry {
	char name[PINSHM_NAME_MAX + 1];
	uint32_t kind, flags;   /* PINSHM_QUEUE/PINSHM_TOPIC, PINSHM_OVERRUN */
	uint64_t capacity;      /* ring bytes per producer */
	uint32_t max_message, max_producers, max_consumers;
	uint32_t state;         /* PINSHM_LIST_* */
	uint32_t uid, gid, mode; /* owner, group, permission bits */
	uint64_t size;          /* segment bytes */
	uint32_t producers, consumers; /* endpoints attached now */
	int32_t node;           /* NUMA node its pages are placed on, PINSHM_NODE_ANY: none */
	uint32_t backend;       /* PINSHM_BACKEND_* */
	uint32_t pin_idle;      /* working-set pinning: seconds idle before it is unlocked, PINSHM_PIN_ALWAYS: never */
	/* Statistics, from counters that the channel's users keep in its
	 * segment (any of them can write anything there: figures to report,
	 * not to trust).  Since the channel was created: */
	uint64_t messages;      /* messages committed by its producers (mod 2^32 per producer endpoint) */
	uint64_t bytes;         /* payload bytes committed */
	uint64_t lost;          /* messages that overrun subscribers lost (drops) */
	uint64_t refused;       /* sends that found no room and gave up: -EAGAIN, -ETIMEDOUT (drops) */
	/* Registrations of its handles with devices (pinshm_channel_register()),
	 * as the processes that made them told the daemon: */
	uint32_t device_regs;   /* how many, all processes and devices */
	uint32_t device_kinds;  /* their kinds: bit 1 << PINSHM_DEVICE_CUDA, 1 << PINSHM_DEVICE_OPENCL */
} pinshm_list_entry_t;

/**
 * Describe the channel @p name in @p out, as pinshm_list() would.  Any
 * client may.
 * @return 0; -ENOENT (no channel of that name); -EINVAL (bad name);
 *         -EOPNOTSUPP (a daemon that does not know the request); or a
 *         transport error as pinshm_connect().
 */
PINSHM_EXPORT int pinshm_stat(pinshm_client_t *c, const char *name, pinshm_list_entry_t *out);

/**
 * List every named channel, in the order they were created.
 * @param entries  set to an array allocated with malloc() (free() it), or
 *                 NULL when there is none.
 * @param count    set to its length.
 * @return 0, -ENOMEM, or a transport error.
 */
PINSHM_EXPORT int pinshm_list(pinshm_client_t *c, pinshm_list_entry_t **entries, size_t *count);

/* Flags of pinshm_status_t. */
#define PINSHM_STATUS_USER_MODE 0x1u /* the daemon runs in user mode (--user) */

/** The daemon's figures, as pinshm_status() reports them. */
typedef struct pinshm_status {
	uint32_t pid;             /* the daemon's process */
	uint32_t flags;           /* PINSHM_STATUS_* */
	uint64_t uptime_ms;       /* since it started serving */
	uint64_t budget;          /* pinned bytes allowed, all users; UINT64_MAX: unlimited */
	uint64_t pinned;          /* pinned bytes now, all users */
	uint32_t channels_pinned; /* live channels (unlinked ones still used included) locked in RAM */
	uint32_t channels_unpinned; /* the others */
	uint32_t connections;     /* connections admitted and open */
} pinshm_status_t;

/** What one user holds, as pinshm_status() reports it. */
typedef struct pinshm_user_usage {
	uint32_t uid;
	uint32_t channels;    /* owned, alive (named or not) */
	uint32_t connections; /* open */
	uint64_t pinned;      /* bytes of its channels locked in RAM */
	uint64_t charged;     /* bytes of its channels, pinned or not: what its quota counts */
	uint64_t quota;       /* UINT64_MAX: unlimited */
} pinshm_user_usage_t;

/**
 * Ask the daemon for its figures and what each user holds.  Any client may.
 * @param out     set to the daemon's figures (as of the first page of users).
 * @param users   NULL, or set to an array allocated with malloc() (free()
 *                it), in uid order, of every user that holds a channel or a
 *                connection (the caller's own included), or NULL when empty.
 * @param nusers  set to its length (NULL with @p users NULL).
 * The users come in pages of up to 90, one request each: not a snapshot.
 * @return 0, -ENOMEM, -EOPNOTSUPP (a daemon that does not know the request),
 *         -EPROTO (the pages do not follow each other), or a transport
 *         error as pinshm_connect().
 */
PINSHM_EXPORT int pinshm_status(pinshm_client_t *c, pinshm_status_t *out, pinshm_user_usage_t **users,
				size_t *nusers);

/* Most size classes of the daemon's pool that pinshm_pool_t holds. */
#define PINSHM_POOL_CLASSES_MAX 16

/* Flags of pinshm_pool_t. */
#define PINSHM_POOL_STOPPED 0x1u /* a segment could not be made or locked: the pool fills no more
				  * until the daemon's configuration is reloaded */

/** One size class of the daemon's pool of ready segments. */
typedef struct pinshm_pool_class {
	uint64_t size;    /* bytes of each of its segments */
	uint32_t wanted;  /* ready segments the daemon keeps of it (pinshmd.conf(5) pool_segments) */
	uint32_t ready;   /* made, locked and waiting for a create */
	uint32_t filling; /* being made now, 0 or 1 (the daemon fills one segment at a time) */
	uint64_t locked;  /* bytes of the one being made locked so far (it counts whole in `pinned`) */
} pinshm_pool_class_t;

/**
 * The daemon's pool of ready segments, as pinshm_status_pool() reports it:
 * pinned memory that is charged to no user (see pinshmd.conf(5)).
 */
typedef struct pinshm_pool {
	uint64_t pinned;        /* bytes it holds of pinshm_status_t.pinned: its ready segments and the
				 * one being made, whole */
	uint64_t hits, misses;  /* creates it could serve (no huge pages, no NUMA node) that it did, or not */
	uint32_t flags;         /* PINSHM_POOL_* */
	uint32_t count;         /* classes, smallest first; 0: no pool */
	pinshm_pool_class_t classes[PINSHM_POOL_CLASSES_MAX];
} pinshm_pool_t;

/**
 * pinshm_status(), and the daemon's pool, both from the same reply.
 * @param pool  NULL, or set to the pool as of the first page of users.
 * @return as pinshm_status().
 */
PINSHM_EXPORT int pinshm_status_pool(pinshm_client_t *c, pinshm_status_t *out, pinshm_pool_t *pool,
				     pinshm_user_usage_t **users, size_t *nusers);

/** One connection to the daemon, as pinshm_clients() reports it. */
typedef struct pinshm_client_info {
	uint64_t id;            /* the daemon's number for it, in the order of connection */
	uint32_t pid, uid, gid; /* of the process that connected (SO_PEERCRED) */
	uint32_t channels;      /* channels it created or opened and still holds */
	uint32_t endpoints;     /* endpoints opened through it still attached */
} pinshm_client_info_t;

/**
 * List the connections admitted by the daemon, the caller's own included,
 * in the order they were made.  Any client may.
 * @param clients  set to an array allocated with malloc() (free() it).
 * @param count    set to its length.
 * The daemon sends them in pages of up to 128: not a snapshot.
 * @return 0, -ENOMEM, -EOPNOTSUPP, -EPROTO, or a transport error.
 */
PINSHM_EXPORT int pinshm_clients(pinshm_client_t *c, pinshm_client_info_t **clients, size_t *count);

/**
 * Ask the daemon to stop: it answers, closes every connection and exits;
 * channels already mapped keep working.  @return 0, -EPERM (only root or
 * the daemon's own user may), or a transport error.
 */
PINSHM_EXPORT int pinshm_daemon_shutdown(pinshm_client_t *c);

#ifdef __cplusplus
}
#endif

/* Accelerators that read and write records by DMA. */
#include "pinshm_device.h"

#endif /* PINSHM_H */
