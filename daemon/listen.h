/*
 * listen.h - the daemon's listening socket: where, who may reach it, and
 * one daemon per socket.
 *
 * Default paths: system mode PROTO_SYSTEM_SOCKET (/run/pinshm/socket, its
 * folder created 0755); user mode $XDG_RUNTIME_DIR/pinshm/socket or
 * /tmp/pinshm-UID/socket (folder created 0700).  A default folder must be
 * a real directory (not a link), owned by the daemon's user and writable
 * by nobody else.  A path given with -s is used as it is.
 *
 * A lock (flock) on PATH.lock, held for the daemon's life, keeps a second
 * daemon off the same path.  Holding it, a socket left at PATH by a daemon
 * that died is removed, after checking that nothing answers on it.  The
 * socket is made with a umask that gives it mode 0600 in user mode and
 * 0666 in system mode (channels have their own permissions).
 */
#ifndef PINSHMD_LISTEN_H
#define PINSHMD_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/un.h>

struct listener {
	int fd;      /* listening, non-blocking, close-on-exec */
	int lock_fd; /* holds the lock on PATH.lock */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t dev;   /* of the socket bound, to remove only ours */
	ino_t ino;
};

/**
 * Listen on @p path, or on the default path of the mode where NULL.
 * @return 0, or -errno with the reason in @p why: -EADDRINUSE (another
 *         daemon holds the path), -ENAMETOOLONG, -EPERM (a default folder
 *         that is not safe), -EEXIST (something else than a socket at the
 *         path), or the errno of the system call that failed.
 */
int listener_open(struct listener *ln, const char *path, bool user_mode, char *why, size_t whylen);

/** Stop listening; remove the socket if it is still the one we bound. */
void listener_close(struct listener *ln);

#endif /* PINSHMD_LISTEN_H */
