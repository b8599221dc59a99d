/*
 * wakeup.c - wake-up descriptors: how producers wake a consumer that sleeps
 * in poll/epoll rather than on the segment's futex.
 *
 * A consumer's descriptor is the receiving end of a Unix datagram socket
 * pair that its handle makes (pinshm_channel_notify_fd()).  No other
 * process holds that end, so none can drain it or change its flags.
 * Producers hold the sending end (from pinshmd, or from the caller for a
 * channel of one's own) and send one 8-byte datagram with MSG_DONTWAIT
 * when they commit a message while the consumer is armed: a per-call flag,
 * which no holder of the shared file description can take away, so a
 * wake-up never blocks; a full queue is readable already, so a wake-up that
 * finds it full is not lost.  (An eventfd's O_NONBLOCK belongs to the file
 * description that every holder shares: a holder that clears it makes the
 * others' writes of a full counter, or reads of an empty one, block.)
 *
 * What a hostile holder of the sending end can do: send wake-ups for
 * nothing (the consumer finds no message and arms again), or reconnect or
 * shut that end so that the consumer's wake-ups are lost; either delays
 * only the channel that holder is a producer (or the consumer) of.
 *
 * Memory ordering: the consumer stores `armed` and registers as a sleeper
 * (seq_cst) before it looks for messages; a producer commits, then finds
 * sleepers (wait.h) and takes `armed` with an exchange (acq_rel): either
 * the consumer sees the message or the producer sees it armed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "channel.h"
#include "wait.h"

/* The most datagrams that one arm reads off the consumer's socket: a
 * producer that keeps sending cannot hold pinshm_channel_arm() in a loop.
 * What is left makes the descriptor readable at once: the caller looks
 * again, finds the channel empty, and arms again. */
#define DRAIN_MAX 64u

/* Wake the holder of @p fd: an 8-byte datagram (the value 1, as an eventfd
 * read would give) on a socket, else an eventfd write (a descriptor the
 * caller gave for a channel of its own: trusted as the caller's).  Never
 * waits on a socket; a full one is readable already. */
void wake_send(int fd, bool socket)
{
	uint64_t one = 1;

	if (socket) {
		ssize_t n = send(fd, &one, sizeof(one), MSG_DONTWAIT | MSG_NOSIGNAL);
		(void)n;
	} else {
		ssize_t n = write(fd, &one, sizeof(one));
		(void)n; /* a full eventfd is already readable */
	}
}

/* Whether @p fd is a datagram socket (else: taken for an eventfd). */
static int peer_kind(int fd, bool *socket)
{
	int type;
	socklen_t len = sizeof(type);

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
		if (errno != ENOTSOCK)
			return -errno;
		*socket = false;
		return 0;
	}
	*socket = true;
	return type == SOCK_DGRAM ? 0 : -EINVAL;
}

int pinshm_channel_notify_fd(pinshm_channel_t *ch)
{
	int sv[2];

	if (ch->role != PINSHM_CONSUMER)
		return channel_fail(ch, -EINVAL, "not a consumer");
	if (ch->notify_send >= 0)
		return ch->notify_fd;
	if (ch->notify_fd >= 0)
		return channel_fail(ch, -EINVAL, "a notify fd was set with pinshm_channel_set_notify_fd()");
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0)
		return channel_fail(ch, -errno, "socketpair: %s", pinshm_strerror(-errno));
	/* Non-blocking: the consumer's end is its alone, its flags too. */
	int flags = fcntl(sv[0], F_GETFL);
	if (flags < 0 || fcntl(sv[0], F_SETFL, flags | O_NONBLOCK) != 0) {
		int err = errno;
		close(sv[0]);
		close(sv[1]);
		return channel_fail(ch, -err, "wake-up socket: %s", pinshm_strerror(-err));
	}
	ch->notify_fd = sv[0];
	ch->notify_send = sv[1];
	ch->notify_own = true;
	/* Opened through pinshmd: it carries the sending end to the producers. */
	if (channel_client(ch)) {
		int rc = ch->ctl->register_notify(ch->client, ch, sv[1]);
		if (rc != 0) {
			notify_close(ch);
			return rc;
		}
	}
	return ch->notify_fd;
}

int pinshm_channel_notify_peer_fd(pinshm_channel_t *ch)
{
	int rc = pinshm_channel_notify_fd(ch);

	return rc < 0 ? rc : ch->notify_send;
}

void notify_close(pinshm_channel_t *ch)
{
	if (ch->notify_own) {
		close(ch->notify_fd);
		close(ch->notify_send);
	}
	ch->notify_fd = ch->notify_send = -1;
	ch->notify_own = false;
}

int pinshm_channel_set_notify_fd(pinshm_channel_t *ch, int efd)
{
	if (ch->role != PINSHM_CONSUMER)
		return channel_fail(ch, -EINVAL, "not a consumer");
	if (ch->client)
		return channel_fail(ch, -EINVAL, "a handle opened through pinshmd takes its wake-up descriptor from "
						 "pinshm_channel_notify_fd()");
	if (ch->notify_own)
		return channel_fail(ch, -EINVAL, "the handle has its own wake-up socket (pinshm_channel_notify_fd())");
	ch->notify_fd = efd;
	return 0;
}

int pinshm_channel_set_peer_fd(pinshm_channel_t *ch, unsigned endpoint, int fd)
{
	bool socket = false;

	if (ch->role != PINSHM_PRODUCER || endpoint < ch->g.max_producers ||
	    endpoint >= ch->g.max_producers + ch->g.max_consumers)
		return channel_fail(ch, -EINVAL, "endpoint %u is not a consumer of this channel", endpoint);
	if (fd >= 0) {
		int rc = peer_kind(fd, &socket);
		if (rc != 0)
			return channel_fail(ch, rc, "not an eventfd or a datagram socket: %s", pinshm_strerror(rc));
	}
	ch->given[endpoint - ch->g.max_producers] = (struct given_peer){.fd = fd, .socket = socket};
	return 0;
}

/* Read off what producers sent to the handle's own socket (at most
 * DRAIN_MAX datagrams), so that the descriptor is readable again only
 * for wake-ups to come. */
static void notify_drain(pinshm_channel_t *ch)
{
	uint64_t buf;

	for (unsigned i = 0; i < DRAIN_MAX; i++)
		if (recv(ch->notify_fd, &buf, sizeof(buf), MSG_DONTWAIT) < 0)
			break;
}

int pinshm_channel_arm(pinshm_channel_t *ch)
{
	if (ch->role != PINSHM_CONSUMER || ch->notify_fd < 0)
		return channel_fail(ch, -EINVAL, ch->role != PINSHM_CONSUMER ? "not a consumer" : "no notify fd set");
	if (ch->broken)
		return -EBADMSG;
	if (ch->notify_own)
		notify_drain(ch);
	/* Armed (seq_cst) before looking for messages: a producer either sees
	 * us or we see its message.  Stored again when already armed: a
	 * producer that woke us took it.  Counted as a sleeper once. */
	atomic_store_explicit(&ch->ep->armed, 1, memory_order_seq_cst);
	if (!ch->armed) {
		wait_register(&ch->hdr->data, &ch->ep->sleeping, SLEEPING_ARMED);
		ch->armed = true;
	}
	int rc = consumer_has_message(ch);
	if (rc == 0)
		return -EAGAIN;
	if (rc == -EAGAIN && channel_peers_gone(ch))
		return consumer_has_message(ch) == 0 ? -EAGAIN : -EPIPE;
	return rc == -EAGAIN ? 0 : rc;
}

/*
 * The sending end of armed consumer @p c's socket, for a handle opened
 * through pinshmd: the one fetched for its current generation, else -1
 * after asking the daemon, without waiting, for the socket and to wake
 * that consumer (its control plane's peer_fd).
 */
static int fetched_peer_fd(pinshm_channel_t *ch, unsigned c, struct endpoint *ep)
{
	struct fetched_peer *f = &ch->fetched[c];
	uint32_t gen = atomic_load_explicit(&ep->generation, memory_order_relaxed);

	if (f->fd >= 0 && f->gen == gen)
		return f->fd;
	struct pinshm_client *client = channel_client(ch);
	if (!client)
		return -1;
	int fd = ch->ctl->peer_fd(client, ch, c, gen);
	if (fd < 0)
		return -1;
	if (f->fd >= 0)
		close(f->fd);
	f->fd = fd;
	f->gen = gen;
	return fd;
}

bool wake_armed_gen(struct endpoint *ep, int fd, uint32_t gen)
{
	if (!atomic_exchange_explicit(&ep->armed, 0, memory_order_acq_rel))
		return true;
	/* The exchange read the arming consumer's seq_cst store of armed,
	 * which its endpoint's claim (the bump of generation) precedes. */
	if (atomic_load_explicit(&ep->generation, memory_order_acquire) != gen) {
		atomic_store_explicit(&ep->armed, 1, memory_order_seq_cst);
		return false;
	}
	wake_send(fd, true);
	return true;
}

/* Wake every armed consumer whose socket we know (given by
 * pinshm_channel_set_peer_fd(), else fetched from pinshmd); pinshmd wakes
 * the others when it is asked for theirs. */
void producer_notify_armed(pinshm_channel_t *ch)
{
	for (unsigned c = 0; c < ch->g.max_consumers; c++) {
		struct endpoint *ep = seg_endpoint(&ch->g, ch->base, ch->g.max_producers + c);
		int fd = ch->given[c].fd;
		if (fd >= 0) {
			if (atomic_exchange_explicit(&ep->armed, 0, memory_order_acq_rel))
				wake_send(fd, ch->given[c].socket);
			continue;
		}
		if (!atomic_load_explicit(&ep->armed, memory_order_relaxed))
			continue;
		fd = fetched_peer_fd(ch, c, ep);
		/* A newer consumer armed since the socket was chosen: ask for its own. */
		if (fd >= 0 && !wake_armed_gen(ep, fd, ch->fetched[c].gen))
			(void)fetched_peer_fd(ch, c, ep);
	}
}
