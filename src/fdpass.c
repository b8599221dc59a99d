/*
 * fdpass.c - send and receive one packet with SCM_RIGHTS descriptors.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdpass.h"

/* A control buffer aligned for struct cmsghdr, with room for FDPASS_MAX. */
union fdpass_control {
	struct cmsghdr align;
	char buf[CMSG_SPACE(FDPASS_MAX * sizeof(int))];
};

int fdpass_send(int sock, const void *buf, size_t len, const int *fds, unsigned nfds, int flags)
{
	union fdpass_control control;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};

	if (nfds > FDPASS_MAX)
		return -EINVAL;
	if (nfds > 0) {
		memset(&control, 0, sizeof(control));
		msg.msg_control = control.buf;
		msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
		if (n >= 0)
			return (size_t)n == len ? 0 : -EMSGSIZE; /* a packet goes whole or not at all */
		if (errno != EINTR)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
}

static void close_all(const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
}

ssize_t fdpass_recv(int sock, void *buf, size_t cap, int *fds, unsigned max_fds, unsigned *nfds, int flags)
{
	union fdpass_control control;
	struct iovec iov = {.iov_base = buf, .iov_len = cap};
	struct msghdr msg;
	ssize_t n;

	*nfds = 0;
	for (;;) {
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = control.buf;
		msg.msg_controllen = sizeof(control.buf);
		n = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
		if (n >= 0)
			break;
		if (errno != EINTR)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}

	/* Collect every descriptor that arrived, whatever else went wrong,
	 * so that none is left open on an error. */
	int got[FDPASS_MAX * 2];
	unsigned ngot = 0;
	bool odd = false;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0)) {
			odd = true;
			continue;
		}
		size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < count; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (ngot < sizeof(got) / sizeof(got[0]))
				got[ngot++] = fd;
			else
				close(fd); /* cannot happen with our buffer; stay safe */
		}
	}

	if (msg.msg_flags & MSG_TRUNC) {
		close_all(got, ngot);
		return -EMSGSIZE;
	}
	if (odd || (msg.msg_flags & MSG_CTRUNC) || ngot > max_fds) {
		close_all(got, ngot);
		return -EPROTO;
	}
	if (ngot > 0)
		memcpy(fds, got, ngot * sizeof(int));
	*nfds = ngot;
	return n;
}
