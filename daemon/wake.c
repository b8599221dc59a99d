/*
 * wake.c - the consumers' wake-up sockets that the daemon keeps (wake.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "record.h"
#include "registry.h"
#include "wake.h"

/* The count of wake-up sockets of user @p uid, NULL: none (not in the table). */
static struct wake_user *wake_user(struct wakeups *w, uid_t uid)
{
	for (unsigned i = 0; i < w->nusers; i++)
		if (w->users[i].uid == uid)
			return &w->users[i];
	return NULL;
}

void wake_forget(struct wakeups *w, struct channel *chan, unsigned ep)
{
	if (!chan->notify_fd || ep < chan->g.max_producers || chan->notify_fd[ep - chan->g.max_producers] < 0)
		return;
	if (chan->stored)
		record_wakeup_remove(chan->name, chan->seg.fd, ep);
	close(chan->notify_fd[ep - chan->g.max_producers]);
	chan->notify_fd[ep - chan->g.max_producers] = -1;
	w->fds--;
	struct wake_user *u = wake_user(w, chan->notify_uid[ep - chan->g.max_producers]);
	if (u && --u->n == 0)
		*u = w->users[--w->nusers];
}

/*
 * Wake the consumer whose wake-up socket's sending end is @p fd: one
 * datagram, never waiting (MSG_DONTWAIT is the call's, not the file's,
 * whose flags any holder may change).  A full socket is readable already.
 */
static void wake_socket(int fd)
{
	uint64_t one = 1;

	if (send(fd, &one, sizeof(one), MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		log_debug("a wake-up not sent: %s", strerror(errno));
}

struct disarm_args {
	const struct seg_geometry *g;
	unsigned endpoint;
};

/* Disarm consumer endpoint a->endpoint, as a producer that wakes it does.
 * @return whether it was armed (its eventfd wants a write). */
static int disarm_fn(void *base, void *arg)
{
	const struct disarm_args *a = arg;
	struct endpoint *ep = seg_endpoint(a->g, base, a->endpoint);

	/* acq_rel, as a producer's exchange: pairs with the consumer's seq_cst
	 * store of armed, and publishes what the daemon wrote before (an
	 * endpoint marked dead) to the consumer that sees it disarmed. */
	return atomic_exchange_explicit(&ep->armed, 0, memory_order_acq_rel) != 0;
}

void wake_armed(struct channel *chan, unsigned ep)
{
	int fd = chan->notify_fd ? chan->notify_fd[ep - chan->g.max_producers] : -1;
	struct disarm_args a = {.g = &chan->g, .endpoint = ep};

	if (fd >= 0 && segment_access(&chan->seg, disarm_fn, &a) == 1) {
		wake_socket(fd);
		log_debug("channel '%s': endpoint %u woken", chan->name, ep);
	}
}

/*
 * Whether @p fd is the sending end of a wake-up socket: a Unix datagram
 * socket connected to an unnamed one, which only a socket pair's other end
 * is (nothing can connect to an unbound socket).  Not one connected to a
 * named socket: producers would send their wake-ups to whoever bound it.
 */
static bool is_wake_socket(int fd)
{
	struct sockaddr_un peer;
	socklen_t len = sizeof(peer);
	int domain, type;
	socklen_t dlen = sizeof(domain), tlen = sizeof(type);

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) != 0 || domain != AF_UNIX ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_DGRAM)
		return false;
	return getpeername(fd, (struct sockaddr *)&peer, &len) == 0 && len == sizeof(sa_family_t);
}

int wake_keep(struct wakeups *w, struct channel *chan, unsigned endpoint, uid_t uid, int *fd, char *why,
	      size_t whylen)
{
	if (*fd < 0 || !is_wake_socket(*fd)) {
		snprintf(why, whylen, "NOTIFY comes with the sending end of a wake-up socket pair (a Unix datagram "
				      "socket pair, pinshm_channel_notify_fd())");
		return -EINVAL;
	}
	unsigned i = endpoint - chan->g.max_producers;
	if (!chan->notify_fd) {
		chan->notify_fd = malloc(chan->g.max_consumers * sizeof(*chan->notify_fd));
		chan->notify_uid = malloc(chan->g.max_consumers * sizeof(*chan->notify_uid));
		if (!chan->notify_fd || !chan->notify_uid) {
			free(chan->notify_fd);
			free(chan->notify_uid);
			chan->notify_fd = NULL;
			chan->notify_uid = NULL;
			snprintf(why, whylen, "out of memory");
			return -ENOMEM;
		}
		for (unsigned k = 0; k < chan->g.max_consumers; k++)
			chan->notify_fd[k] = -1;
	}
	wake_forget(w, chan, endpoint);
	if (w->fds >= REGISTRY_MAX_NOTIFY_FDS) {
		snprintf(why, whylen, "the daemon holds %u wake-up sockets, its most", w->fds);
		return -ENFILE;
	}
	struct wake_user *u = wake_user(w, uid);
	if (u && u->n >= REGISTRY_MAX_NOTIFY_FDS_USER) {
		snprintf(why, whylen, "user %u gave the daemon %u wake-up sockets, the most one user may", (unsigned)uid,
			 u->n);
		return -EDQUOT;
	}
	if (!u) { /* a slot is free: each user in the table holds one of the eventfds at least */
		u = &w->users[w->nusers++];
		*u = (struct wake_user){.uid = uid};
	}
	u->n++;
	chan->notify_fd[i] = *fd;
	chan->notify_uid[i] = uid;
	*fd = -1;
	w->fds++;
	log_debug("channel '%s': endpoint %u's wake-up socket kept", chan->name, endpoint);
	return 0;
}

int wake_dup(struct channel *chan, unsigned endpoint, int *fd, char *why, size_t whylen)
{
	*fd = fcntl(chan->notify_fd[endpoint - chan->g.max_producers], F_DUPFD_CLOEXEC, 0);
	if (*fd < 0) {
		int err = errno;
		snprintf(why, whylen, "dup: %s", strerror(err));
		return -err;
	}
	return 0;
}
