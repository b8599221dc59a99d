/*
 * channel.h - a process's handle on one endpoint of a channel (private).
 *
 * Everything here is process-local: the geometry copied and checked at
 * attach, the producer's own tail, the consumer's own read cursors.  Shared
 * state is reached only through the pointers computed from that geometry.
 */
#ifndef PINSHM_CHANNEL_H
#define PINSHM_CHANNEL_H

#include <stdarg.h>
#include <stdalign.h>
#include <stdbool.h>
#include <sys/types.h>
#include <unistd.h>

#include "layout.h"
#include "pinshm.h"
#include "seg.h"

#define PINSHM_MAX_HELD 64u
/* A consumer of more lanes than SCAN_ALL_LANES looks quickly at HOT_LANES
 * lanes that gave messages lately and COLD_LANES others in turn (consume.c). */
#define SCAN_ALL_LANES 16u
#define HOT_LANES 8u
#define COLD_LANES 8u
#define PINSHM_DEFAULT_SPIN_NS 50000u

/* How a consumer takes records. */
enum consume_mode {
	CONSUME_SEQUENTIAL, /* topic subscriber, or the only consumer of a queue */
	CONSUME_SHARED,     /* one of several consumers of a queue: records are claimed */
};

/* The sending end of a consumer's wake-up socket, given by the caller
 * (pinshm_channel_set_peer_fd()): a datagram socket, or an eventfd of a
 * channel of the caller's own; fd -1: none. */
struct given_peer {
	int fd; /* the caller's */
	bool socket;
};

/*
 * The sending end of a consumer's wake-up socket fetched from pinshmd
 * (wakeup.c, client.c).  `fd` and `gen` are the producer thread's own;
 * the rest is read and written under the client's lock only, by whichever
 * thread holds it (a PEER reply is read by the next holder).
 */
struct fetched_peer {
	int fd;             /* owned by the handle; for the consumer of generation gen */
	uint32_t gen;
	int arrived;        /* a socket from a PEER reply, for arrived_gen, not taken yet; -1: none */
	uint32_t arrived_gen;
	bool in_flight;     /* a PEER request for generation asked_gen is in flight */
	uint32_t asked_gen;
	uint32_t failures;  /* PEER requests refused in a row, for generation failed_gen */
	uint32_t failed_gen;
	uint64_t failed_at; /* when the last one was refused, CLOCK_MONOTONIC ms */
	_Atomic bool wanted; /* set without the lock: the consumer there now wants a wake-up */
};

/*
 * A handle's spin budget.  Fixed (pinshm_channel_set_spin()): every wait
 * spins `budget_ns`.  Adaptive (the default): a spin that runs out its
 * budget without the event (the peer was likely not running: the machine
 * has more runnable threads than cores, and spinning takes the peer's
 * core) halves the budget, which below WAIT_SPIN_FLOOR_NS becomes 0; a
 * wait satisfied while spinning doubles it, up to `ceiling_ns`.  At 0, one
 * wait in `probe_every` spins the ceiling (a probe): a satisfied probe
 * restores the ceiling, a fruitless one doubles the interval, from
 * WAIT_PROBE_MIN to WAIT_PROBE_MAX waits.  Private to its handle (one
 * thread at a time), so plain fields.  Moved by wait.c (wait.h).
 */
struct wait_spin {
	uint64_t budget_ns;   /* the next wait's spin; read by every blocking call */
	uint64_t ceiling_ns;
	uint32_t countdown;   /* waits until the next probe, while budget_ns is 0 */
	uint32_t probe_every;
	bool fixed;
};

/* The states of a producer's reservation (pinshm_channel.reserved). */
enum {
	RESV_NONE = 0,
	RESV_HELD = 1,   /* reserved: the caller writes, then commits or aborts */
	RESV_DEVICE = 2, /* to be committed once a device's event completes (device/commit.c) */
	RESV_LOST = 3,   /* never committed nor reused: a device may still write it (a forked
			  * child's copy of its parent's waiting commit; a failed wait) */
};

/* A record received in place and not yet released. */
struct held_record {
	uint32_t lane;
	uint64_t pos; /* where the record starts */
};

/*
 * A handle.  Allocated on a cache line (channel.c), its fields in the order
 * of use: the lines a send or a receive reads come first, the producer's
 * and the consumer's apart (a handle is one or the other), what serves
 * errors, batches and the daemon after them.
 */
struct pinshm_channel {
	/* Both, on every call (lines 0 and 1). */
	struct seg_geometry g;
	uint8_t *base;
	struct seg_header *hdr;
	struct endpoint *ep;
	unsigned endpoint;
	pinshm_role_t role;
	bool broken;     /* shared state found inconsistent: -EBADMSG from now on */

	/* Producer (lines 2 and 3). */
	alignas(64) uint8_t *ring;
	struct lane_header *lane;
	uint64_t tail;        /* end of what this producer committed (or staged) */
	uint64_t committed;   /* end of what is committed (tail less staged records) */
	uint64_t last;        /* start of the last record committed */
	uint64_t limit;       /* cached: may write below this position without looking */
	uint64_t seq;         /* messages committed on the lane: the next record's number (its low 32 bits) */
	uint64_t bytes;       /* payload bytes committed or staged (lane statistics) */
	uint64_t resv_pos;    /* its record's position (after any padding) */
	uint64_t resv_len;    /* its reserved payload length */
	uint64_t resv_start;  /* where it begins, padding included */
	uint64_t zero_next;   /* a word zeroed ahead, where a next record may end (produce.c zero_ahead()) */
	uint8_t reserved;     /* RESV_*: whether a reservation is pending */
	bool wake_pending;    /* committed with PINSHM_MORE */

	/* Consumer (line 4). */
	alignas(64) unsigned next_lane; /* round-robin start */
	enum consume_mode mode;
	uint64_t *cursor;     /* sequential: next position to read, per lane */
	uint64_t last_size;   /* sequential: bytes of the last record taken (consume.c prefetch_next_line()) */
	unsigned held_first, held_count;
	struct device_state *dev; /* registrations and releases after events; NULL: no device (device/) */
	unsigned empty_polls; /* non-blocking receives that found nothing */
	unsigned oversize_lane; /* 1 + the lane of a message left in place as too long, looked at first; 0: none */
	unsigned live_lanes;  /* lanes below the last whose producer ever attached (consume.c take_ready()) */
	uint32_t live_changes; /* endpoint_changes when live_lanes was counted */
	bool quick_polls;     /* non-blocking receives look quickly (pinshm_channel_set_quick_polls()) */
	bool armed;
	bool notify_own;      /* notify_fd and notify_send are the handle's own socket pair */
	int notify_fd;        /* what the consumer polls: its socket's receiving end, or the caller's eventfd */
	int notify_send;      /* its socket's sending end (pinshm_channel_notify_fd()), or -1 */
	uint32_t *expect_seq; /* topic: next message number expected, per lane */
	uint64_t lost;
	/* Channels of many lanes, quick looks (consume.c take_quick()): the lanes
	 * that gave messages lately, and the next lane to look at in turn. */
	uint32_t hot[HOT_LANES];
	unsigned hot_count, hot_next, hot_oldest;
	unsigned cold_next;
	struct held_record held[PINSHM_MAX_HELD];

	/* Both: the spin of blocking calls (wait.h), read only by those. */
	struct wait_spin spin;
	/* Both: whether every peer has left, as of endpoint_changes == gone_changes. */
	bool gone;
	uint32_t gone_changes;
	size_t map_size;
	struct given_peer *given;     /* producer: per consumer endpoint, from pinshm_channel_set_peer_fd() */
	struct fetched_peer *fetched; /* producer: per consumer endpoint, fetched from pinshmd (PEER) */
	char error[160];
	const struct channel_dev_ops *dev_ops; /* set with the first dev, and kept (device/) */

	/* Opened through pinshmd (pinshm_open): the client it came from, until
	 * that disconnects (NULL: none), in that client's list of handles. */
	struct pinshm_client *client;
	const struct channel_ctl *ctl; /* set with client, and kept: with client NULL, that
					* client disconnected (pinshm_channel_close()) */
	pid_t attach_pid;   /* the process whose endpoint it is (and that opened it): a child
			     * that inherited the handle never speaks on its parent's
			     * connection, and only unmaps the handle at close */
	uint64_t daemon_id; /* the channel's number for the daemon (CLOSE) */
	uint64_t daemon_conn; /* the client's connection that gave that number (client.c) */
	pinshm_channel_t *client_prev, *client_next;
};

/* handle.c */
bool channel_peers_gone(pinshm_channel_t *ch);
int channel_fail(pinshm_channel_t *ch, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* channel.c */
/** pinshm_channel_attach() to @p endpoint, already claimed for this process.
 *  @return as pinshm_channel_attach(); -EINVAL if @p endpoint is not one of
 *  @p role's, -EBADMSG if it is not active. */
int channel_attach_claimed(int fd, pinshm_role_t role, unsigned endpoint, pinshm_channel_t **out);

/*
 * What the data path asks of the control plane that opened a handle
 * (ch->ctl, which pinshm_open() installs; a handle of
 * pinshm_channel_attach() has none).  The data path calls only through
 * it, so that it calls no function of the client's (client.c, peer_fetch.c).
 */
struct channel_ctl {
	/** Take @p ch out of its client's list (ch->client set). */
	void (*detach)(pinshm_channel_t *ch);
	/** Give the daemon @p fd, the sending end of consumer handle @p ch's
	 *  wake-up socket (NOTIFY; the caller keeps @p fd).  @return 0 or the
	 *  error of the request.
	 *  These requests name the channel by the number the connection that
	 *  opened or took it back gave (daemon_id, daemon_conn): -ENOTCONN where
	 *  the current connection never gave it one. */
	int (*register_notify)(struct pinshm_client *c, pinshm_channel_t *ch, int fd);
	/**
	 * For producer handle @p ch, on its send path: the sending end of consumer
	 * @p consumer's wake-up socket for generation @p gen, if a PEER reply
	 * brought it (a new descriptor, the handle's from now on); else -1, after
	 * making sure that a PEER request for it is on its way (pinshmd wakes the
	 * consumer, if armed, after it replied).  Never waits: no reconnect, no
	 * reply awaited; where another thread holds the client, that thread
	 * sends the request when it is done.
	 */
	int (*peer_fd)(struct pinshm_client *c, pinshm_channel_t *ch, unsigned consumer, uint32_t gen);
	/** Tell the daemon that handle @p ch made (@p delta +1) or dropped (-1)
	 *  a registration with a device of @p kind (DEVICE), where it was opened
	 *  through pinshmd by this process; 0 where not (nothing to tell).
	 *  @return 0 or the error of the request (with +1, its detail in ch->error). */
	int (*device_report)(pinshm_channel_t *ch, pinshm_device_kind_t kind, int delta);
	/** Tell the daemon that endpoint @p endpoint of channel @p id (the number
	 *  connection @p conn gave) is closed (CLOSE).  @return 0 (also where this
	 *  connection never had the channel) or the error of the request. */
	int (*close_endpoint)(struct pinshm_client *c, uint64_t id, uint64_t conn, unsigned endpoint);
};

/** The client to ask the daemon through for @p ch, or NULL: none, or this
 *  process is not the one that opened it (a child after fork()). */
static inline struct pinshm_client *channel_client(const pinshm_channel_t *ch)
{
	return ch->client && ch->attach_pid == getpid() ? ch->client : NULL;
}

/* device/: only where ch->dev is set; kept out of line (cold, noinline), so
 * that the paths of the handles without devices keep their shape. */
struct device_state;
/*
 * What the ring (produce.c, consume.c) calls of the device layer, for a
 * handle with ch->dev set: ch->dev_ops, installed with the handle's first
 * registration and kept (device/register.c).  The ring calls only through
 * it, so that it calls no function of the device layer, which calls the ring.
 */
struct channel_dev_ops {
	int (*progress)(pinshm_channel_t *ch);                          /* device_progress() */
	int (*release)(pinshm_channel_t *ch, const pinshm_msg_t *msg);  /* device_release() */
	int (*commit_progress)(pinshm_channel_t *ch);                   /* device_commit_progress() */
};
int device_progress(pinshm_channel_t *ch) __attribute__((cold, noinline));
int device_release(pinshm_channel_t *ch, const pinshm_msg_t *msg) __attribute__((cold, noinline));
void device_state_close(pinshm_channel_t *ch);
/** Tell the daemon of @p ch's client again of every registration of
 *  @p ch (after a hand-back to a new daemon).  @return 0 or the first error. */
int device_report_all(pinshm_channel_t *ch);
/** The devices of @p ch (pinshm_channel_info()'s devices and commit_waits). */
void device_info(const pinshm_channel_t *ch, pinshm_channel_info_t *info);
/** A producer's reservation waits for its event (RESV_DEVICE): commit it
 *  if the event completed.  @return 0 (committed now), 1 (still waiting),
 *  -EIO (the device's command failed: the reservation was dropped). */
int device_commit_progress(pinshm_channel_t *ch) __attribute__((cold, noinline));
void device_state_forget(pinshm_channel_t *ch);
/** Where @p ch's device state is a forked parent's, forget it without
 *  driver calls (its registrations and events are the parent's), its
 *  waiting commit made RESV_LOST.  Called at every device entry point. */
void device_fork_check(pinshm_channel_t *ch);

/* wakeup.c */
void wake_send(int fd, bool socket);
/** Take consumer endpoint @p ep's arming and wake it on @p fd, the socket of
 *  its generation @p gen.  @return true: woken, or not armed; false: armed
 *  by a consumer of another generation, whose arming is given back (the
 *  caller asks for its socket). */
bool wake_armed_gen(struct endpoint *ep, int fd, uint32_t gen);
/** Wake the armed consumers (a commit found sleepers, or the handle closes). */
void producer_notify_armed(pinshm_channel_t *ch);
/** Close the handle's own wake-up socket, if any. */
void notify_close(pinshm_channel_t *ch);

/* produce.c */
void producer_recover_tail(pinshm_channel_t *ch);
/* The ring's byte @p ahead bytes past the end of what this producer wrote:
 * where its next record begins (0 ahead) and the lines after, unless that
 * record goes to the ring's start for want of room at its end.  Only for
 * hints (a prefetch): nothing is reserved. */
static inline const uint8_t *producer_ahead(const pinshm_channel_t *ch, uint64_t ahead)
{
	return ch->ring + ((ch->tail + ahead) & (ch->g.capacity - 1));
}

/* consume.c */
void consumer_start(pinshm_channel_t *ch);
void consumer_disarm(pinshm_channel_t *ch);
void consumer_release_all(pinshm_channel_t *ch);
int consumer_has_message(pinshm_channel_t *ch);
/** The position of @p msg among the records held, oldest first; -1: not held. */
int ring_held_index(const pinshm_channel_t *ch, const pinshm_msg_t *msg);
/** pinshm_release() of held record @p i (ring_held_index()), without devices. */
int ring_release_held(pinshm_channel_t *ch, unsigned i);

#endif /* PINSHM_CHANNEL_H */
