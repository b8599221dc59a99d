/*
 * client.h - a connection to pinshmd, shared by client.c (requests and
 * replies, one at a time), peer_fetch.c (PEER requests sent from the
 * send path without waiting) and client_error.c (its errors) (private).
 *
 * Locking: every request and every read of a reply happens under `lock`
 * (recursive: a reconnect makes requests inside one).  The send path only
 * ever tries it; where another thread holds it, the send path leaves its
 * wish in `wanted` (and the handle's fetched_peer.wanted), and the
 * holder serves it before it lets go (client_unlock()).
 */
#ifndef PINSHM_CLIENT_H
#define PINSHM_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/un.h>

#include "channel.h"
#include "protocol.h"

/* PEER requests sent without waiting whose replies are not read yet, at
 * most (the list grows to it; past it a PEER is refused as by the daemon). */
#define CLIENT_ASYNC_MAX 4096u

struct async_peer {
	uint32_t seq;          /* of the request */
	pinshm_channel_t *ch;  /* the producer handle that wants it; NULL: closed since */
	unsigned consumer;
	uint32_t gen;
};

#define CLIENT_ERROR_MAX (PROTO_TEXT_MAX + 96)

/* A thread's message about its last request on a client (pinshm_client_error()). */
struct client_error {
	pthread_t thread;
	struct client_error *next;
	char text[CLIENT_ERROR_MAX];
};

struct pinshm_client {
	int fd;
	uint32_t seq;           /* of the last request */
	bool broken;            /* out of step with the daemon: calls fail with `broken_err` */
	int broken_err;
	uint32_t daemon_flags;  /* PROTO_HELLO_* */
	char error[CLIENT_ERROR_MAX]; /* the message of a thread short of memory for its own, else "" */
	pthread_mutex_t error_lock;   /* over `errors`; each thread writes its own text, unlocked */
	struct client_error *errors;  /* the threads' messages, one node a thread that made requests */
	pinshm_channel_t *channels; /* handles opened through it, not closed yet */
	/* Reconnecting (pinshm_reconnect()): where and how it connected, and,
	 * per open handle, a descriptor of its segment to hand back. */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* "": where pinshm_connect(NULL) looks */
	unsigned flags;
	bool reconnecting;
	uint64_t connection;     /* connections made to a daemon: 1 the first, and one more at each reconnect */
	struct kept_segment *kept;
	unsigned nkept, capkept;

	pthread_mutex_t lock;
	unsigned depth;          /* the holder's nesting of client_lock() */
	_Atomic bool wanted;     /* a send path found the lock held: see fetched_peer.wanted */
	/* PEER requests in flight, oldest first (replies come in order): a
	 * ring of async_cap entries. */
	struct async_peer *async;
	unsigned async_cap, async_first, async_count;
};

void client_lock(struct pinshm_client *c);
bool client_trylock(struct pinshm_client *c);
/** Serve what send paths wanted meanwhile, then let go. */
void client_unlock(struct pinshm_client *c);

/* client_error.c */
/** The connection can no longer be trusted to be in step.  @return @p err. */
int client_break(struct pinshm_client *c, int err);
/** The calling thread's message buffer of @p c (CLIENT_ERROR_MAX bytes),
 *  made at its first use (c->error where memory is short). */
char *client_error_buf(struct pinshm_client *c);
/** Set @p c's error detail from @p fmt.  @return @p err. */
int client_fail(struct pinshm_client *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/** Check reply @p rep (decoded with status @p rc, @p nfds descriptors) to a
 *  request of @p type with sequence number @p seq.  @return 0 or -EPROTO
 *  (the reason in c->error). */
int client_check_reply(struct pinshm_client *c, uint16_t type, uint32_t seq, const struct proto_msg *rep, int rc,
		       unsigned nfds);

/* client.c */
/** Send @p req and receive its reply into @p rep, under the lock, after a
 *  reconnect where the daemon went.  @p fd: for OPEN, the descriptor that
 *  came with a successful reply; NULL for the others.  @return the reply's
 *  status (its text in c->error), or a transport error (c then broken). */
int transact(struct pinshm_client *c, struct proto_msg *req, struct proto_msg *rep, int *fd);
/** Copy @p name into a name field, checking it first.  @return 0 or -EINVAL. */
int client_put_name(struct pinshm_client *c, char *field, const char *name);

/* The handle's control plane (struct channel_ctl), which open installs. */
void client_detach_channel(pinshm_channel_t *ch);
int client_register_notify(struct pinshm_client *c, pinshm_channel_t *ch, int fd);
int client_device_report(pinshm_channel_t *ch, pinshm_device_kind_t kind, int delta);
int client_close_endpoint(struct pinshm_client *c, uint64_t id, uint64_t conn, unsigned endpoint);

/* peer_fetch.c (under the lock) */
/** Whether reply @p rep is the oldest PEER in flight's: then it is taken
 *  (its descriptor @p fd too) and 1 is returned; a malformed one breaks
 *  the client (-EPROTO). */
int async_take_reply(struct pinshm_client *c, const struct proto_msg *rep, int rc, int fd, unsigned nfds);
/** Read the replies that have come, without waiting. */
void async_drain(struct pinshm_client *c);
/** Forget the requests in flight (the connection they went on is gone). */
void async_clear(struct pinshm_client *c);
/** Forget what concerns @p ch, closing for good. */
void async_forget_channel(struct pinshm_client *c, pinshm_channel_t *ch);
/** A new daemon took @p ch back: sockets whose PEER was refused are asked
 *  for again at the next wake-up, without waiting. */
void producer_fetch_again(pinshm_channel_t *ch);
/** Serve the wishes that send paths left while the lock was held. */
void async_serve_wanted(struct pinshm_client *c);
/** Serve those of @p ch (before it leaves the client's list). */
void async_serve_channel(struct pinshm_client *c, pinshm_channel_t *ch);
/** struct channel_ctl's peer_fd (not under the lock: it tries it). */
int client_peer_fd(struct pinshm_client *c, pinshm_channel_t *ch, unsigned consumer, uint32_t gen);

#endif /* PINSHM_CLIENT_H */
