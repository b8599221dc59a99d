/*
 * notify.h - tell systemd how the daemon stands (sd_notify(3), without
 * libsystemd): one datagram to the socket that $NOTIFY_SOCKET names.
 *
 * Under a unit of Type=notify, pinshmd sends READY=1 once it listens,
 * RELOADING=1 then READY=1 around a reload, STOPPING=1 when it stops,
 * and keeps its channels' segments in the descriptor store (adopt.h,
 * through fdstore.h).
 * Without $NOTIFY_SOCKET (not started by systemd) every call does nothing.
 */
#ifndef PINSHMD_NOTIFY_H
#define PINSHMD_NOTIFY_H

/* A send waits this long at most for room in the manager's queue, and
 * after one waited in vain, the sends of the next NOTIFY_BACKOFF_MS do not
 * wait at all (until one gets through). */
#define NOTIFY_SEND_LIMIT_MS 1000
#define NOTIFY_BACKOFF_MS 10000

/**
 * Send @p state ("READY=1", ..., newline-separated assignments) to the
 * service manager.  An abstract socket is named with a leading '@'.
 * @return 1 sent, 0 no $NOTIFY_SOCKET, or -errno (-ETIMEDOUT: the queue
 *         stayed full NOTIFY_SEND_LIMIT_MS; logged by the caller if it
 *         cares; the daemon serves on either way).
 */
int notify_systemd(const char *state);

/** notify_systemd() with descriptor @p fd (-1: none) passed along
 *  (SCM_RIGHTS), as FDSTORE=1 wants. */
int notify_systemd_fd(const char *state, int fd);

/** notify_systemd_fd() that never waits: -ETIMEDOUT at once where the
 *  queue is full (nor does it put off the sends after it); one that gets
 *  through ends a NOTIFY_BACKOFF_MS as any does. */
int notify_systemd_try(const char *state, int fd);

#endif /* PINSHMD_NOTIFY_H */
