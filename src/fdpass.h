/*
 * fdpass.h - one packet, with descriptors, over a Unix socket (private).
 *
 * The one pair of helpers that pinshmd and libpinshm use to send and
 * receive packets on their SOCK_SEQPACKET socket, with descriptors attached
 * as SCM_RIGHTS.  Received descriptors are close-on-exec; whatever the
 * receiver did not ask for is closed before the call returns, so a peer
 * cannot make it leak descriptors.
 */
#ifndef PINSHM_FDPASS_H
#define PINSHM_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/* The most descriptors one packet carries (the control buffer's size). */
#define FDPASS_MAX 4u

/**
 * Send one packet of @p len bytes with @p nfds descriptors (at most
 * FDPASS_MAX) from @p fds.  Retries on EINTR; never raises SIGPIPE.
 * @param flags  extra send flags (MSG_DONTWAIT).
 * @return 0, -EAGAIN (the socket is full or timed out), -EINVAL (too many
 *         descriptors), or the send's -errno (-EPIPE: the peer closed).
 */
int fdpass_send(int sock, const void *buf, size_t len, const int *fds, unsigned nfds, int flags);

/**
 * Receive one packet into @p buf (@p cap bytes) and up to @p max_fds
 * descriptors into @p fds (close-on-exec).  Retries on EINTR.
 * @param nfds   set to the number of descriptors received (0 on error).
 * @param flags  extra receive flags (MSG_DONTWAIT).
 * @return the packet's length (0: the peer closed, or sent an empty packet);
 *         -EAGAIN (nothing to read, or timed out);
 *         -EMSGSIZE: the packet was longer than @p cap (its tail is lost);
 *         -EPROTO: the control data was truncated (MSG_CTRUNC), held
 *                  something other than SCM_RIGHTS, or more than @p max_fds
 *                  descriptors;
 *         or the receive's -errno.
 *         On every error, each descriptor that came with the packet is closed.
 */
ssize_t fdpass_recv(int sock, void *buf, size_t cap, int *fds, unsigned max_fds, unsigned *nfds, int flags);

#endif /* PINSHM_FDPASS_H */
