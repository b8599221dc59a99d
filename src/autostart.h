/*
 * autostart.h - start a user-mode pinshmd where none answers, as D-Bus
 * starts a session bus.
 *
 * Who allows it: $PINSHM_AUTOSTART=0 never, =1 on every pinshm_connect()
 * of the default path or of $PINSHM_SOCKET, else only a caller that passes
 * PINSHM_CONNECT_AUTOSTART.
 *
 * How: the clients that race take an exclusive flock on SOCKET.start (in
 * the user-mode folder for the default path, made 0700 if missing and
 * checked: a real folder, ours, writable by nobody else).  The one that
 * holds it looks again whether a daemon answers; if none does, it starts
 * `pinshmd --user [-s SOCKET] --exit-idle $PINSHM_AUTOSTART_IDLE` (default
 * AUTOSTART_IDLE_S) with posix_spawn (stdio on /dev/null, signals
 * default, unblocked; descriptors beyond stdio closed where glibc can),
 * waits until it answers, and lets go of the lock: those waiting then find
 * it serving.  The binary: $PINSHMD, else the install path
 * (sbindir/pinshmd).  Every wait (the lock, the daemon's start) ends at
 * one deadline, PINSHM_AUTOSTART_TIMEOUT_MS after the call.  A daemon that
 * fails to start (one exiting idle still holds the path) is started again
 * until then.
 */
#ifndef PINSHM_AUTOSTART_H
#define PINSHM_AUTOSTART_H

#include <stdbool.h>
#include <stddef.h>

#define AUTOSTART_IDLE_S 60u /* --exit-idle of an auto-started daemon */

/** Whether a connection may start a daemon, given pinshm_connect_flags()'s @p flags and the environment. */
bool autostart_allowed(unsigned flags);

/**
 * Make sure a daemon answers on @p path: start one as above unless one
 * answers once the start lock is held.  @p default_path: @p path is the
 * user-mode default (its folder is made and checked, and the daemon is
 * started without -s so that it checks it too).
 * @return 0 (connect now), or -errno with the reason in @p why:
 *         -ETIMEDOUT (no daemon answered in time), -EPERM (an unsafe
 *         folder), -ENAMETOOLONG, or the errno of open, flock, posix_spawn.
 */
int autostart_daemon(const char *path, bool default_path, char *why, size_t whylen);

#endif /* PINSHM_AUTOSTART_H */
