/*
 * wake.h - the consumers' wake-up sockets that the daemon keeps (NOTIFY,
 * registry.h): at most REGISTRY_MAX_NOTIFY_FDS, of them at most
 * REGISTRY_MAX_NOTIFY_FDS_USER counted on one user.  The daemon wakes a
 * consumer as a producer does (disarmed, one datagram per arming, never
 * waiting), hands producers copies (PEER), and keeps each in the
 * descriptor store beside its channel's record (record.h).
 */
#ifndef PINSHMD_WAKE_H
#define PINSHMD_WAKE_H

#include <stddef.h>
#include <sys/types.h>

#define REGISTRY_MAX_NOTIFY_FDS 4096u /* consumers' wake-up sockets held at once, all channels */
#define REGISTRY_MAX_NOTIFY_FDS_USER 1024u /* of them, given by one user (a quarter) */

struct channel;

/* The wake-up sockets held, counted. */
struct wakeups {
	unsigned fds; /* held, all channels (REGISTRY_MAX_NOTIFY_FDS) */
	struct wake_user {
		uid_t uid;
		unsigned n; /* counted on it, > 0 (REGISTRY_MAX_NOTIFY_FDS_USER) */
	} users[REGISTRY_MAX_NOTIFY_FDS]; /* each user holding any, in no order */
	unsigned nusers;
};

/**
 * Keep wake-up socket *@p fd (checked: the sending end of a Unix datagram
 * socket pair) for consumer endpoint @p endpoint of @p chan (the caller
 * checked the endpoint), in place of any other, counted on user @p uid.
 * @return 0 (*@p fd taken, set to -1); -EINVAL (not a wake-up socket);
 *         -ENOMEM; -ENFILE, -EDQUOT (the limits above).
 */
int wake_keep(struct wakeups *w, struct channel *chan, unsigned endpoint, uid_t uid, int *fd, char *why,
	      size_t whylen);

/** Close the wake-up socket kept for endpoint @p ep of @p chan, if any, and
 *  take it out of the descriptor store. */
void wake_forget(struct wakeups *w, struct channel *chan, unsigned ep);

/** Wake consumer endpoint @p ep of @p chan on the socket kept for it, if it
 *  is armed: disarmed, one wake-up per arming. */
void wake_armed(struct channel *chan, unsigned ep);

/** A new descriptor (*@p fd, the caller's) of the socket kept for
 *  endpoint @p endpoint of @p chan (there is one).  @return 0 or -errno. */
int wake_dup(struct channel *chan, unsigned endpoint, int *fd, char *why, size_t whylen);

#endif /* PINSHMD_WAKE_H */
