/*
 * listen.c - folder, lock, stale socket, bind and listen.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "listen.h"
#include "protocol.h"

#define LISTEN_BACKLOG 128

static int fail(char *why, size_t whylen, int err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Say why in @p why: the formatted subject, then strerror(-err). */
static int fail(char *why, size_t whylen, int err, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(why, whylen, "%s: %s", what, strerror(-err));
	return err;
}

/* Create the default folder @p dir if needed and check that it is safe. */
static int prepare_dir(const char *dir, mode_t mode, char *why, size_t whylen)
{
	if (mkdir(dir, mode) != 0 && errno != EEXIST)
		return fail(why, whylen, -errno, "mkdir %s", dir);
	return proto_dir_check(dir, why, whylen);
}

/* Remove a socket left by a daemon that died; refuse to touch anything else. */
static int remove_stale(const char *path, char *why, size_t whylen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;

	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 : fail(why, whylen, -errno, "%s", path);
	if (!S_ISSOCK(st.st_mode))
		return fail(why, whylen, -EEXIST, "%s exists and is not a socket", path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return fail(why, whylen, -errno, "socket for %s", path);
	strcpy(sa.sun_path, path);
	int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	int err = errno;
	close(fd);
	if (rc == 0 || err == EAGAIN)
		return fail(why, whylen, -EADDRINUSE, "a daemon answers on %s", path);
	if (unlink(path) != 0 && errno != ENOENT)
		return fail(why, whylen, -errno, "removing the stale socket %s", path);
	return 0;
}

int listener_open(struct listener *ln, const char *path, bool user_mode, char *why, size_t whylen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char lock_path[sizeof(ln->path) + 8];
	struct stat st;
	int rc;

	*ln = (struct listener){.fd = -1, .lock_fd = -1};
	if (!path) {
		char dir[sizeof(ln->path)];
		if (user_mode) {
			rc = proto_user_socket_dir(dir, sizeof(dir), geteuid());
			if (rc == 0)
				rc = proto_user_socket_path(ln->path, sizeof(ln->path), geteuid());
			if (rc != 0)
				return fail(why, whylen, rc, "the user-mode socket path");
			rc = prepare_dir(dir, 0700, why, whylen);
		} else {
			snprintf(dir, sizeof(dir), "%s", PROTO_SYSTEM_SOCKET);
			*strrchr(dir, '/') = '\0';
			snprintf(ln->path, sizeof(ln->path), "%s", PROTO_SYSTEM_SOCKET);
			rc = prepare_dir(dir, 0755, why, whylen);
		}
		if (rc != 0)
			return rc;
	} else {
		if (strlen(path) >= sizeof(ln->path) || path[0] == '\0')
			return fail(why, whylen, -ENAMETOOLONG, "socket path '%s'", path);
		snprintf(ln->path, sizeof(ln->path), "%s", path);
	}

	snprintf(lock_path, sizeof(lock_path), "%s.lock", ln->path);
	ln->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (ln->lock_fd < 0) {
		rc = fail(why, whylen, -errno, "%s", lock_path);
		goto fail;
	}
	if (flock(ln->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		rc = errno == EWOULDBLOCK ? fail(why, whylen, -EADDRINUSE, "another pinshmd holds %s", lock_path)
					  : fail(why, whylen, -errno, "lock %s", lock_path);
		goto fail;
	}
	rc = remove_stale(ln->path, why, whylen);
	if (rc != 0)
		goto fail;

	ln->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (ln->fd < 0) {
		rc = fail(why, whylen, -errno, "socket");
		goto fail;
	}
	strcpy(sa.sun_path, ln->path);
	mode_t old = umask(user_mode ? 0177 : 0111);
	rc = bind(ln->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : -errno;
	umask(old);
	if (rc != 0) {
		rc = fail(why, whylen, rc, "bind %s", ln->path);
		goto fail;
	}
	if (stat(ln->path, &st) != 0 || listen(ln->fd, LISTEN_BACKLOG) != 0) {
		rc = fail(why, whylen, -errno, "listen on %s", ln->path);
		unlink(ln->path);
		goto fail;
	}
	ln->dev = st.st_dev;
	ln->ino = st.st_ino;
	return 0;
fail:
	if (ln->fd >= 0)
		close(ln->fd);
	if (ln->lock_fd >= 0)
		close(ln->lock_fd);
	ln->fd = ln->lock_fd = -1;
	return rc;
}

void listener_close(struct listener *ln)
{
	struct stat st;

	if (ln->fd < 0)
		return;
	if (lstat(ln->path, &st) == 0 && st.st_dev == ln->dev && st.st_ino == ln->ino)
		unlink(ln->path);
	close(ln->fd);
	close(ln->lock_fd); /* the lock file stays: removing it would race with a starting daemon */
	ln->fd = ln->lock_fd = -1;
}
