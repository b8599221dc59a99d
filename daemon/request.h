/*
 * request.h - serve one request: decode, check every field, act, reply.
 *
 * The event loop hands each packet received on a connection to
 * request_serve() and sends back the reply it builds, with the descriptor
 * it names.  What is wrong with the packet decides what happens to the
 * connection:
 *
 * - malformed (short, bad magic or length, a body that does not fit its
 *   type, a bad name field): an ERROR reply (-EBADMSG), logged, and the
 *   connection is closed after it;
 * - a header of another protocol version: an ERROR reply (-EPROTO); the
 *   connection stays open (the client may retry in our version);
 * - an unknown request type: an ERROR reply (-EOPNOTSUPP); it stays open;
 * - a descriptor with any request but HANDBACK: an ERROR reply (-EPROTO), and
 *   the connection is closed after it;
 * - a well-formed request with bad values (name, role, mode, flags,
 *   geometry) or one that is refused: its reply with a negative status.
 */
#ifndef PINSHMD_REQUEST_H
#define PINSHMD_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "protocol.h"
#include "registry.h"
#include "watch.h"

/**
 * The connections, for CLIENTS (set by the event loop): fill @p out with up
 * to @p max admitted connections of id > @p cursor, in id order.
 * @return the number filled; @p next: the last id filled (the next cursor),
 * or @p cursor if none; @p more: whether connections remain after it.
 */
typedef unsigned request_clients_fn(void *arg, uint64_t cursor, struct proto_client_entry *out, unsigned max,
				    uint64_t *next, bool *more);

struct request_ctx {
	struct registry *reg; /* and its accounts (reg->acct), for STATUS */
	bool user_mode;
	uid_t daemon_uid;
	pid_t daemon_pid;
	struct timespec started; /* CLOCK_MONOTONIC, for the uptime */
	request_clients_fn *clients;
	void *clients_arg;
	bool stop;            /* a SHUTDOWN was accepted */
	int in_fd;            /* the descriptor that came with the packet, or -1; a handler that keeps it
			       * sets -1, the loop closes it otherwise */
	struct proto_msg req; /* scratch */
	struct proto_msg rep; /* scratch */
};

/* A request that waits for the locking of a channel (chan->locking) to end:
 * a RELOCK, or a DEVICE +1 (a device may use the channel on its reply). */
struct lock_wait {
	uint64_t id;   /* the channel, 0: none */
	uint32_t type; /* PROTO_RELOCK or PROTO_DEVICE */
	uint32_t kind; /* a DEVICE's device kind */
};

struct reply {
	uint8_t buf[PROTO_MAX_PACKET];
	size_t len;
	int fd;           /* a descriptor to send with it, or -1: a channel's, not owned; valid while
			   * the connection is open (it references that channel from the OPEN on) */
	bool fd_owned;    /* fd is the reply's own (a PEER reply's dup): closed by reply_release_fd()
			   * once it is sent or dropped, so no later close of the original can make
			   * a pending reply send another descriptor under the same number */
	bool close_after; /* close the connection once it is sent */
	bool deferred;    /* nothing to send yet: a CREATE in progress (registry_create()), whose
			   * reply request_created() builds, a HANDBACK being judged
			   * (request_handed_back()), or a RELOCK or DEVICE +1 of a channel
			   * being locked (request_relocked()); the connection is not read
			   * until then */
	uint32_t seq;     /* with deferred: the request's */
	struct lock_wait wait; /* with deferred: what waits for a channel's locking, if anything */
	bool peer_wake;   /* a PEER reply: registry_peer_replied() once it is sent */
	uint64_t peer_id;
	uint32_t peer_endpoint;
};

/** Close the descriptor of @p r if it owns one (after sending it, or when
 *  the reply is dropped). */
static inline void reply_release_fd(const struct reply *r)
{
	if (r->fd_owned && r->fd >= 0)
		close(r->fd);
}

/** Serve the packet @p pkt of @p len bytes from client @p c into @p out. */
void request_serve(struct request_ctx *ctx, struct reg_client *c, const uint8_t *pkt, size_t len, struct reply *out);

/**
 * The reply to a deferred CREATE (seq @p seq) of client @p c, once
 * registry_step() handed back its half-made channel @p chan:
 * registry_create_end(), and its CREATE reply or error into @p out.
 */
void request_created(struct request_ctx *ctx, struct reg_client *c, struct channel *chan, uint32_t seq,
		     struct reply *out);

/** The reply to a deferred HANDBACK (seq @p seq) whose endpoints are judged
 *  (watch_judge_step()'s @p done). */
void request_handed_back(struct request_ctx *ctx, const struct reg_judged *done, uint32_t seq, struct reply *out);

/** The reply to a deferred RELOCK or DEVICE +1 (@p w, seq @p seq) of client
 *  @p c for @p chan, once registry_step() ended its locking: -ENOMEM where
 *  it could not be locked; else 0 for a RELOCK, and a DEVICE's registration
 *  counted now (devices_report()). */
void request_relocked(struct request_ctx *ctx, struct reg_client *c, struct channel *chan, uint32_t seq,
		      const struct lock_wait *w, struct reply *out);

/** What reply @p out asks for once it is sent (or held for room in the
 *  socket) to client @p c. */
void request_replied(struct request_ctx *ctx, struct reg_client *c, const struct reply *out);

/**
 * Build the ERROR reply (seq 0) for a packet that could not be received
 * whole: @p err -EMSGSIZE (over PROTO_MAX_PACKET), -EPROTO (descriptors or
 * control data that nobody asked for), -EBADMSG (empty).  The connection is
 * to be closed after it.
 */
void request_refuse(int err, struct reply *out);

/**
 * Build the ERROR reply to the packet @p pkt of @p len bytes from a
 * connection that was refused at accept: status @p err (-EACCES, -EUSERS),
 * message @p text, the packet's seq where its header can be read (else 0).
 * The connection is to be closed after it.
 */
void request_deny(const uint8_t *pkt, size_t len, int err, const char *text, struct reply *out);

#endif /* PINSHMD_REQUEST_H */
