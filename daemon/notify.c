/*
 * notify.c - the sd_notify datagram.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "notify.h"

/* When a send last waited its limit in vain (0: not since one got through). */
static uint64_t gave_up_at;

/* Send @p state with @p fd (-1: none); @p may_wait: as notify.h says,
 * else never waiting. */
static int send_state(const char *state, int fd, bool may_wait)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	size_t len;

	if (!path || !path[0])
		return 0;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract namespace */
	int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -errno;
	/* A full queue (the manager not reading: 10 datagrams by default)
	 * blocks a send; the loop serves everyone, so it waits a bounded time
	 * and the notification is given up (the caller logs it).  After one
	 * was given up, sends do not wait at all until one gets through or
	 * NOTIFY_BACKOFF_MS pass: a manager that stopped reading costs the
	 * loop a second now and then, not at every request. */
	bool patient = may_wait && (clock_now_ms() >= gave_up_at + NOTIFY_BACKOFF_MS || gave_up_at == 0);
	struct timeval limit = {.tv_sec = NOTIFY_SEND_LIMIT_MS / 1000, .tv_usec = NOTIFY_SEND_LIMIT_MS % 1000 * 1000};
	if (patient && setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit)) != 0) {
		int err = errno;
		close(sock);
		return -err;
	}
	struct iovec iov = {.iov_base = (void *)state, .iov_len = strlen(state)};
	struct msghdr msg = {.msg_name = &sa,
			     .msg_namelen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len),
			     .msg_iov = &iov,
			     .msg_iovlen = 1};
	if (fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | (patient ? 0 : MSG_DONTWAIT));
	int err = n < 0 ? (errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno) : 0;
	if (err == ETIMEDOUT && patient)
		gave_up_at = clock_now_ms();
	else if (!err)
		gave_up_at = 0;
	close(sock);
	return err ? -err : 1;
}

int notify_systemd(const char *state)
{
	return send_state(state, -1, true);
}

int notify_systemd_fd(const char *state, int fd)
{
	return send_state(state, fd, true);
}

int notify_systemd_try(const char *state, int fd)
{
	return send_state(state, fd, false);
}
