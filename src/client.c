/*
 * client.c - the client side of the control plane: talk to pinshmd.
 *
 * One request at a time: encode, send, wait for the reply with the same
 * seq (at most PINSHM_CLIENT_TIMEOUT_MS), decode and check it.  A reply
 * that does not fit the request, or no reply in time, leaves the connection
 * out of step: it is marked broken and every later call fails at once.
 */
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "autostart.h"
#include "channel.h"
#include "client.h"
#include "fdpass.h"
#include "protocol.h"
#include "wait.h"

/* The segment of an open handle, kept to hand it back to a new daemon. */
struct kept_segment {
	pinshm_channel_t *ch;
	int fd;
	char name[PINSHM_NAME_MAX + 1];
};

static int client_reconnect(pinshm_client_t *c);

/* What a handle opened here asks of its client. */
static const struct channel_ctl client_ctl = {
	.detach = client_detach_channel,
	.register_notify = client_register_notify,
	.peer_fd = client_peer_fd,
	.device_report = client_device_report,
	.close_endpoint = client_close_endpoint,
};

/* Why the last pinshm_connect() of this thread failed. */
static __thread char connect_error[512];

#define LIBRARY_VERSION_CODE                                                                                  \
	((uint32_t)PINSHM_VERSION_MAJOR << 16 | (uint32_t)PINSHM_VERSION_MINOR << 8 | PINSHM_VERSION_PATCH)

/* Whether the daemon closed the connection @p fd (checked before a request). */
static bool hung_up(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLRDHUP};

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

/* Wait until @p fd is readable or @p deadline passes. @return 0, -ETIMEDOUT, -errno. */
static int wait_readable(int fd, uint64_t deadline)
{
	for (;;) {
		uint64_t now = wait_now_ms();
		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n = poll(&p, 1, (int)(deadline - now));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* Before a request: a new connection where the daemon went (a new daemon,
 * if one answers).  @return 0, or why there is no connection to ask on. */
static int client_ready(pinshm_client_t *c)
{
	client_error_buf(c)[0] = '\0';
	if (!c->reconnecting && (c->broken ? c->broken_err == -ECONNRESET : hung_up(c->fd))) {
		int rc = client_reconnect(c);
		if (rc != 0)
			return rc;
		client_error_buf(c)[0] = '\0';
	}
	if (c->broken)
		return client_fail(c, c->broken_err, "the connection to pinshmd was lost earlier");
	return 0;
}

/* Send @p req, with descriptor @p out_fd (-1: none), on the connection as
 * it is and read the reply (see transact()); the replies to PEER requests
 * in flight, which come first, are taken on the way. */
static int exchange(pinshm_client_t *c, struct proto_msg *req, struct proto_msg *rep, int *fd, int out_fd)
{
	uint8_t buf[PROTO_MAX_PACKET];
	int fds[1];
	unsigned nfds = 0;
	uint16_t type = req->h.type;

	if (fd)
		*fd = -1;
	req->h.seq = ++c->seq;
	int len = proto_encode(req, buf);
	if (len < 0)
		return client_fail(c, len, "cannot encode the %s request", proto_type_name(type));
	int rc = fdpass_send(c->fd, buf, (size_t)len, &out_fd, out_fd >= 0 ? 1 : 0, 0);
	if (rc == -EAGAIN)
		rc = -ETIMEDOUT; /* SO_SNDTIMEO ran out */
	if (rc != 0)
		return client_break(c, client_fail(c, rc == -EPIPE ? -ECONNRESET : rc, "sending %s to pinshmd: %s",
						   proto_type_name(type), strerror(-rc)));

	uint64_t deadline = wait_now_ms() + PINSHM_CLIENT_TIMEOUT_MS;
	for (;;) {
		rc = wait_readable(c->fd, deadline);
		ssize_t n = rc == 0 ? fdpass_recv(c->fd, buf, sizeof(buf), fds, 1, &nfds, MSG_DONTWAIT) : rc;
		if (n == 0 || n == -ECONNRESET)
			return client_break(c, client_fail(c, -ECONNRESET, "pinshmd closed the connection"));
		if (n == -ETIMEDOUT)
			return client_break(c, client_fail(c, -ETIMEDOUT, "no reply from pinshmd to %s in %u ms",
							   proto_type_name(type), PINSHM_CLIENT_TIMEOUT_MS));
		if (n == -EAGAIN)
			continue; /* readable, then taken by nobody else: a spurious wake-up */
		if (n < 0) /* -EMSGSIZE, -EPROTO (control data): the daemon is not one we understand */
			return client_break(c, client_fail(c, n == -EMSGSIZE || n == -EPROTO ? -EPROTO : (int)n,
							   "receiving the reply to %s from pinshmd: %s",
							   proto_type_name(type), strerror((int)-n)));
		rc = proto_decode(buf, (size_t)n, true, rep);
		int taken = async_take_reply(c, rep, rc, nfds == 1 ? fds[0] : -1, nfds);
		if (taken < 0)
			return taken; /* broken */
		if (taken == 0)
			break;
	}
	rc = client_check_reply(c, type, req->h.seq, rep, rc, nfds);
	if (rc != 0) {
		if (nfds == 1)
			close(fds[0]);
		return client_break(c, rc);
	}
	if (nfds == 1)
		*fd = fds[0];
	snprintf(client_error_buf(c), CLIENT_ERROR_MAX, "%s", rep->text);
	return rep->status;
}

/*
 * Send @p req (type and fields set) and receive its reply into @p rep,
 * after a reconnect where the daemon went.
 * @param fd  for OPEN: set to the descriptor that came with a successful
 *            reply; NULL for the others (a descriptor then is an error).
 * @return the reply's status (0 or -errno from the daemon, its message in
 *         pinshm_client_error()), or a transport error (the client is then broken).
 */
int transact(pinshm_client_t *c, struct proto_msg *req, struct proto_msg *rep, int *fd)
{
	if (fd)
		*fd = -1;
	client_lock(c);
	int rc = client_ready(c);
	if (rc == 0)
		rc = exchange(c, req, rep, fd, -1);
	client_unlock(c);
	return rc;
}

/*
 * A request that names a channel by the number that a connection gave it:
 * @p id, given by connection @p conn (a handle's daemon_id and daemon_conn,
 * which hand_back() renews for the handles it hands back).  Numbers belong
 * to a connection: the request goes only on the one that gave it, checked
 * after any reconnect, and its number is read then, so that a new daemon
 * never gets a request meant for another of this client's channels.
 * @return the reply's status, or -ENOTCONN where this connection never
 * gave the channel a number (the new daemon did not take it back).
 */
static int transact_named(pinshm_client_t *c, const uint64_t *id, const uint64_t *conn, uint64_t *field,
			  struct proto_msg *req, struct proto_msg *rep, int *fd, int out_fd)
{
	if (fd)
		*fd = -1;
	client_lock(c);
	int rc = client_ready(c);
	if (rc == 0 && *conn != c->connection)
		rc = client_fail(c, -ENOTCONN, "this connection to pinshmd does not have the channel (the daemon "
					       "that opened it went, and the new one did not take it back)");
	if (rc == 0) {
		*field = *id;
		rc = exchange(c, req, rep, fd, out_fd); /* the descriptor with this request only, never a reconnect's */
	}
	client_unlock(c);
	return rc;
}

/* Connect a seqpacket socket to @p path. @return the socket or -errno. */
static int connect_path(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = PINSHM_CLIENT_TIMEOUT_MS / 1000,
			     .tv_usec = (PINSHM_CLIENT_TIMEOUT_MS % 1000) * 1000};

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Bounds connect() (a full backlog) and every send. */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0)
		goto fail;
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		if (errno != EINTR)
			goto fail;
	return fd;
fail: {
	int err = errno == EAGAIN ? ETIMEDOUT : errno;
	close(fd);
	return -err;
}
}

/*
 * Behind the user-mode folder's check (connect_default()), a second guard:
 * talk there only to a daemon of this user or of root, not to another
 * user's process that would see every message of the channels it hands out.
 * @return @p fd, or -EACCES (@p fd closed, the reason in connect_error).
 */
static int check_user_daemon(int fd, const char *where)
{
	struct ucred peer;
	socklen_t len = sizeof(peer);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && len == sizeof(peer) &&
	    (peer.uid == geteuid() || peer.uid == 0))
		return fd;
	snprintf(connect_error, sizeof(connect_error),
		 "refusing the daemon at %s: it does not run as this user (uid %u) or root", where,
		 (unsigned)geteuid());
	close(fd);
	return -EACCES;
}

/*
 * The user-mode folder cannot be trusted (@p why): connect to the system
 * socket instead, and say so in connect_error (kept after a success).
 */
static int connect_system_instead(const char *why, char *where, size_t len)
{
	int fd = connect_path(PROTO_SYSTEM_SOCKET);

	snprintf(where, len, "%s", PROTO_SYSTEM_SOCKET);
	snprintf(connect_error, sizeof(connect_error),
		 "ignoring the user-mode socket folder: %s; %s the system socket %s%s%s", why,
		 fd >= 0 ? "using" : "tried", PROTO_SYSTEM_SOCKET, fd >= 0 ? "" : ": ", fd >= 0 ? "" : strerror(-fd));
	return fd;
}

/*
 * Connect to the first daemon that answers where pinshm_connect(NULL) looks.
 * The user-mode socket is used only in a folder that proto_dir_check()
 * trusts; @p untrusted is set where one exists that it does not.
 */
static int connect_default(char *where, size_t len, bool *untrusted)
{
	const char *env = getenv("PINSHM_SOCKET");
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)], why[sizeof(dir) + 64];

	if (env && env[0]) {
		snprintf(where, len, "%s", env);
		return connect_path(env);
	}
	int rc = proto_user_socket_path(where, len, geteuid());
	if (rc == 0)
		rc = proto_user_socket_dir(dir, sizeof(dir), geteuid());
	if (rc != 0)
		return rc;
	rc = proto_dir_check(dir, why, sizeof(why));
	if (rc != 0 && rc != -ENOENT) {
		*untrusted = true;
		return connect_system_instead(why, where, len);
	}
	int fd = rc == 0 ? connect_path(where) : -ENOENT;
	if (fd >= 0)
		return check_user_daemon(fd, where);
	if (fd != -ENOENT)
		return fd;
	fd = connect_path(PROTO_SYSTEM_SOCKET);
	if (fd == -ENOENT)
		return -ENOENT; /* report the user-mode path, the first looked at */
	snprintf(where, len, "%s", PROTO_SYSTEM_SOCKET);
	return fd;
}

/*
 * Connect to the daemon at @p socket_path (NULL: where pinshm_connect(NULL)
 * looks), starting one where none answers and autostart_allowed() (never in
 * a user-mode folder that cannot be trusted).
 * @return the socket or -errno; @p where: the path tried last.
 */
static int connect_or_start(const char *socket_path, unsigned flags, char *where, size_t len)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	const char *env = getenv("PINSHM_SOCKET");
	bool untrusted = false;
	int fd;

	if (socket_path) {
		snprintf(where, len, "%s", socket_path);
		fd = connect_path(socket_path);
	} else {
		fd = connect_default(where, len, &untrusted);
	}
	if ((fd != -ENOENT && fd != -ECONNREFUSED) || !autostart_allowed(flags))
		return fd;
	if (untrusted) {
		size_t n = strlen(connect_error);
		snprintf(connect_error + n, sizeof(connect_error) - n, "; no pinshmd is started in that folder");
		return fd;
	}
	bool default_path = !socket_path && !(env && env[0]);
	if (default_path) {
		int rc = proto_user_socket_path(path, sizeof(path), geteuid());
		if (rc != 0)
			return rc;
	} else {
		snprintf(path, sizeof(path), "%s", socket_path ? socket_path : env);
	}
	snprintf(where, len, "%s", path);
	int rc = autostart_daemon(path, default_path, connect_error, sizeof(connect_error));
	if (rc != 0)
		return rc;
	fd = connect_path(path);
	return fd >= 0 && default_path ? check_user_daemon(fd, where) : fd;
}

/* A client, not connected yet. */
static pinshm_client_t *client_new(void)
{
	pthread_mutexattr_t attr;
	pinshm_client_t *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	int rc = pthread_mutex_init(&c->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	if (rc == 0 && (rc = pthread_mutex_init(&c->error_lock, NULL)) != 0)
		pthread_mutex_destroy(&c->lock);
	if (rc != 0) {
		free(c);
		return NULL;
	}
	return c;
}

int pinshm_connect(const char *socket_path, pinshm_client_t **out)
{
	return pinshm_connect_flags(socket_path, 0, out);
}

/* HELLO on @p c's new socket. @return 0 or as transact(). */
static int client_hello(pinshm_client_t *c)
{
	struct proto_msg req = {.h.type = PROTO_HELLO}, rep;

	req.u.hello.version = PROTO_VERSION;
	req.u.hello.library = LIBRARY_VERSION_CODE;
	int rc = transact(c, &req, &rep, NULL);
	if (rc == 0 && rep.u.hello_reply.version != PROTO_VERSION)
		rc = client_fail(c, -EPROTO, "pinshmd speaks protocol version %u, this library %u",
				 rep.u.hello_reply.version, PROTO_VERSION);
	if (rc == 0)
		c->daemon_flags = rep.u.hello_reply.flags;
	return rc;
}

int pinshm_connect_flags(const char *socket_path, unsigned flags, pinshm_client_t **out)
{
	char where[sizeof(((struct sockaddr_un *)0)->sun_path) + 16];
	int rc;

	*out = NULL;
	connect_error[0] = '\0';
	if (flags & ~PINSHM_CONNECT_AUTOSTART) {
		snprintf(connect_error, sizeof(connect_error), "unknown connect flags %#x",
			 flags & ~PINSHM_CONNECT_AUTOSTART);
		return -EINVAL;
	}
	/* A second try where a daemon exiting idle closed the first connection. */
	for (int attempt = 0;; attempt++) {
		pinshm_client_t *c = client_new();
		if (!c)
			return -ENOMEM;
		c->flags = flags;
		snprintf(c->path, sizeof(c->path), "%s", socket_path ? socket_path : "");
		c->reconnecting = true; /* no reconnect while connecting */
		c->fd = connect_or_start(socket_path, flags, where, sizeof(where));
		c->connection = 1;
		if (c->fd < 0) {
			rc = c->fd;
			if (!connect_error[0])
				snprintf(connect_error, sizeof(connect_error), "cannot connect to pinshmd at %s: %s",
					 where, strerror(-rc));
			pthread_mutex_destroy(&c->lock);
			free(c);
			return rc;
		}

		rc = client_hello(c);
		if (rc == 0) {
			c->reconnecting = false;
			*out = c;
			return 0;
		}
		snprintf(connect_error, sizeof(connect_error), "pinshmd at %s: %s", where,
			 pinshm_client_error(c)[0] ? pinshm_client_error(c) : strerror(-rc));
		pinshm_disconnect(c);
		if (rc != -ECONNRESET || attempt > 0 || !autostart_allowed(flags))
			return rc;
		connect_error[0] = '\0';
	}
}

int pinshm_disconnect(pinshm_client_t *c)
{
	if (!c)
		return 0;
	for (unsigned i = 0; i < c->nkept; i++)
		close(c->kept[i].fd);
	free(c->kept);
	/* Its handles stay mapped, but their endpoints go with the connection
	 * (the daemon reaps them): pinshm_channel_close() only unmaps them. */
	for (pinshm_channel_t *ch = c->channels, *next; ch; ch = next) {
		next = ch->client_next;
		async_forget_channel(c, ch);
		ch->client = NULL;
		ch->client_prev = ch->client_next = NULL;
	}
	close(c->fd);
	free(c->async);
	while (c->errors) {
		struct client_error *e = c->errors;
		c->errors = e->next;
		free(e);
	}
	pthread_mutex_destroy(&c->error_lock);
	pthread_mutex_destroy(&c->lock);
	free(c);
	return 0;
}

const char *pinshm_client_error(const pinshm_client_t *c)
{
	if (!c)
		return connect_error;
	pinshm_client_t *m = (pinshm_client_t *)c; /* the list changes under its lock, not the client */
	pthread_t self = pthread_self();
	const struct client_error *e;

	pthread_mutex_lock(&m->error_lock);
	for (e = m->errors; e && !pthread_equal(e->thread, self); e = e->next)
		;
	pthread_mutex_unlock(&m->error_lock);
	return e ? e->text : c->error;
}

/* Copy @p name into a name field, checking it first. */
int client_put_name(pinshm_client_t *c, char *field, const char *name)
{
	if (!proto_name_valid(name))
		return client_fail(c, -EINVAL, "invalid channel name: 1 to %d characters of A-Z a-z 0-9 . _ -, "
						"not starting with '.', or @UID. and such characters",
				   PINSHM_NAME_MAX);
	snprintf(field, PROTO_NAME_FIELD, "%s", name);
	return 0;
}

int pinshm_create(pinshm_client_t *c, const char *name, const pinshm_channel_attr_t *attr, mode_t mode,
		  unsigned flags)
{
	return pinshm_create_on_node(c, name, attr, mode, flags, PINSHM_NODE_ANY);
}

int pinshm_create_on_node(pinshm_client_t *c, const char *name, const pinshm_channel_attr_t *attr, mode_t mode,
			  unsigned flags, int node)
{
	return pinshm_create_full(c, name, attr, mode, flags, node, PINSHM_PIN_DEFAULT);
}

static int create_locked(pinshm_client_t *c, const char *name, const pinshm_channel_attr_t *attr, mode_t mode,
			 unsigned flags, int node, uint32_t pin_idle, const char *pci)
{
	struct proto_msg req = {.h.type = PROTO_CREATE}, rep;
	pinshm_channel_attr_t defaults;
	size_t size;

	client_error_buf(c)[0] = '\0';
	int rc = client_put_name(c, req.u.create.name, name);
	if (rc != 0)
		return rc;
	if (!attr) {
		pinshm_channel_attr_init(&defaults);
		attr = &defaults;
	}
	if (pinshm_segment_size(attr, &size) != 0)
		return client_fail(c, -EINVAL, "invalid channel geometry");
	if (mode & ~(mode_t)0777)
		return client_fail(c, -EINVAL, "invalid mode %#o: permission bits 0..0777 only", (unsigned)mode);
	const unsigned known = PINSHM_PERSISTENT | PINSHM_HUGEPAGES | PINSHM_USE_MEMFD | PINSHM_USE_SHM;
	if (flags & ~known)
		return client_fail(c, -EINVAL, "unknown flags %#x", flags & ~known);
	if (node < PINSHM_NODE_CONSUMER)
		return client_fail(c, -EINVAL, "invalid NUMA node %d", node);
	if (pin_idle > PINSHM_PIN_IDLE_MAX && pin_idle != PINSHM_PIN_DEFAULT)
		return client_fail(c, -EINVAL, "invalid pin_idle %u: 0 (always pinned) or 1 to %u seconds", pin_idle,
				   PINSHM_PIN_IDLE_MAX);
	req.u.create.geo = proto_geometry_from_attr(attr);
	req.u.create.mode = (uint32_t)mode;
	req.u.create.flags = flags;
	req.u.create.node = node;
	req.u.create.pin_idle = pin_idle;
	if (pci && !proto_pci_valid(pci))
		return client_fail(c, -EINVAL, "invalid PCI bus id '%.32s': DDDD:BB:SS.F in lower-case hex, e.g. "
					       "0000:3b:00.0",
				   pci);
	if (pci)
		snprintf(req.u.create.pci, sizeof(req.u.create.pci), "%s", pci);
	return transact(c, &req, &rep, NULL);
}

int pinshm_create_full(pinshm_client_t *c, const char *name, const pinshm_channel_attr_t *attr, mode_t mode,
		       unsigned flags, int node, uint32_t pin_idle)
{
	client_lock(c);
	int rc = create_locked(c, name, attr, mode, flags, node, pin_idle, NULL);
	client_unlock(c);
	return rc;
}

int pinshm_create_near_pci(pinshm_client_t *c, const char *name, const pinshm_channel_attr_t *attr, mode_t mode,
			   unsigned flags, const char *pci_bus, uint32_t pin_idle)
{
	client_lock(c);
	int rc = pci_bus ? create_locked(c, name, attr, mode, flags, PINSHM_NODE_ANY, pin_idle, pci_bus)
			 : client_fail(c, -EINVAL, "no PCI bus id");
	client_unlock(c);
	return rc;
}

/* Keep @p fd, the segment of @p ch opened as @p name, for a reconnect. */
static int keep_segment(pinshm_client_t *c, pinshm_channel_t *ch, const char *name, int fd)
{
	if (c->nkept == c->capkept) {
		unsigned cap = c->capkept ? c->capkept * 2 : 8;
		struct kept_segment *k = realloc(c->kept, cap * sizeof(*k));
		if (!k)
			return -ENOMEM;
		c->kept = k;
		c->capkept = cap;
	}
	struct kept_segment *k = &c->kept[c->nkept++];
	k->ch = ch;
	k->fd = fd;
	snprintf(k->name, sizeof(k->name), "%s", name);
	return 0;
}

/* Whether the attached segment has the geometry the daemon announced. */
static bool geometry_matches(const pinshm_channel_t *ch, const struct proto_msg *rep)
{
	const struct proto_geometry *g = &rep->u.open_reply.geo;

	return ch->g.kind == g->kind && ch->g.flags == g->flags && ch->g.capacity == g->capacity &&
	       ch->g.max_message == g->max_message && ch->g.max_producers == g->max_producers &&
	       ch->g.max_consumers == g->max_consumers && ch->g.size == rep->u.open_reply.size &&
	       ch->endpoint == rep->u.open_reply.endpoint;
}

/* The NUMA node of the CPU this thread runs on now, PINSHM_NODE_ANY where
 * the kernel does not say (getcpu(2), called directly: older C libraries
 * have no wrapper). */
static int32_t current_node(void)
{
	unsigned cpu, node;

	if (syscall(SYS_getcpu, &cpu, &node, NULL) != 0 || node > INT32_MAX)
		return PINSHM_NODE_ANY;
	return (int32_t)node;
}

int pinshm_name_own(char *buf, size_t len, const char *rest)
{
	char name[PINSHM_NAME_MAX + 2];
	int n = snprintf(name, sizeof(name), "@%lu.%s", (unsigned long)geteuid(), rest);

	if (n < 0 || !rest[0])
		return -EINVAL;
	if ((size_t)n > PINSHM_NAME_MAX)
		return -ENAMETOOLONG;
	if (!proto_name_valid(name))
		return -EINVAL;
	if ((size_t)n >= len)
		return -ENAMETOOLONG;
	memcpy(buf, name, (size_t)n + 1);
	return 0;
}

int pinshm_open(pinshm_client_t *c, const char *name, pinshm_role_t role, pinshm_channel_t **out)
{
	return pinshm_open_owned(c, name, role, PINSHM_OWNER_ANY, out);
}

static int open_locked(pinshm_client_t *c, const char *name, pinshm_role_t role, uid_t owner,
		       pinshm_channel_t **out)
{
	struct proto_msg req = {.h.type = PROTO_OPEN}, rep;
	uid_t named;
	int fd;

	*out = NULL;
	client_error_buf(c)[0] = '\0';
	int rc = client_put_name(c, req.u.open.name, name);
	if (rc != 0)
		return rc;
	if (role != PINSHM_PRODUCER && role != PINSHM_CONSUMER)
		return client_fail(c, -EINVAL, "invalid role %d", (int)role);
	/* An owned name is opened only as its owner's. */
	if (proto_name_owner(name, &named)) {
		if (owner != PINSHM_OWNER_ANY && owner != named)
			return client_fail(c, -EINVAL, "'%s' belongs to uid %lu, not to the owner asked for (uid %lu)",
					   name, (unsigned long)named, (unsigned long)owner);
		owner = named;
	}
	static_assert(PINSHM_OWNER_ANY == PROTO_OWNER_ANY, "the library's and the wire's 'any owner' agree");
	req.u.open.owner = (uint32_t)owner;
	req.u.open.role = (uint32_t)role;
	req.u.open.node = current_node(); /* where a channel placed near its consumer goes */
	rc = transact(c, &req, &rep, &fd);
	if (rc != 0)
		return rc;

	pinshm_channel_t *ch;
	rc = channel_attach_claimed(fd, role, rep.u.open_reply.endpoint, &ch);
	bool mismatch = rc == 0 && !geometry_matches(ch, &rep);
	if (mismatch) {
		pinshm_channel_close(ch);
		rc = -EPROTO;
	}
	if (rc != 0) {
		close(fd);
		/* The endpoint goes back (reaped if the segment still marks it). */
		client_close_endpoint(c, rep.u.open_reply.id, c->connection, rep.u.open_reply.endpoint);
		if (mismatch)
			return client_fail(c, rc, "the segment of '%s' does not have the geometry pinshmd announced",
					   name);
		return client_fail(c, rc, "attaching to endpoint %u of '%s': %s", rep.u.open_reply.endpoint, name,
				   pinshm_strerror(rc));
	}
	ch->client = c;
	ch->ctl = &client_ctl;
	ch->daemon_id = rep.u.open_reply.id;
	ch->daemon_conn = c->connection;
	ch->client_next = c->channels;
	if (c->channels)
		c->channels->client_prev = ch;
	c->channels = ch;
	if (keep_segment(c, ch, name, fd) != 0)
		close(fd); /* not handed back after a restart */
	*out = ch;
	return 0;
}

int pinshm_open_owned(pinshm_client_t *c, const char *name, pinshm_role_t role, uid_t owner,
		      pinshm_channel_t **out)
{
	client_lock(c);
	int rc = open_locked(c, name, role, owner, out);
	client_unlock(c);
	return rc;
}

void client_detach_channel(pinshm_channel_t *ch)
{
	pinshm_client_t *c = ch->client;
	/* A child after fork() has its copy of the client alone: the lock may
	 * be a copy of one that another thread of the parent held. */
	bool locked = ch->attach_pid == getpid();

	if (locked) {
		client_lock(c);
		async_serve_channel(c, ch); /* its wishes: a PEER sent now still wakes */
	}
	async_forget_channel(c, ch);
	for (unsigned i = 0; i < c->nkept; i++)
		if (c->kept[i].ch == ch) {
			close(c->kept[i].fd);
			c->kept[i] = c->kept[--c->nkept];
			break;
		}
	if (ch->client_prev)
		ch->client_prev->client_next = ch->client_next;
	else
		ch->client->channels = ch->client_next;
	if (ch->client_next)
		ch->client_next->client_prev = ch->client_prev;
	ch->client = NULL;
	ch->client_prev = ch->client_next = NULL;
	if (locked)
		client_unlock(c);
}

int pinshm_channel_relock(pinshm_channel_t *ch)
{
	struct proto_msg req = {.h.type = PROTO_RELOCK}, rep;

	/* The daemon's note in the header: a hint (anyone could write it). */
	if (!atomic_load_explicit(&ch->hdr->unlocked, memory_order_relaxed))
		return 0;
	if (!channel_client(ch))
		return channel_fail(ch, -ENOTCONN, "unlocked by pinshmd, and no connection to ask it again");
	return transact_named(ch->client, &ch->daemon_id, &ch->daemon_conn, &req.u.relock.id, &req, &rep, NULL,
			      -1);
}

int client_register_notify(pinshm_client_t *c, pinshm_channel_t *ch, int fd)
{
	struct proto_msg req = {.h.type = PROTO_NOTIFY}, rep;

	req.u.notify.endpoint = ch->endpoint;
	return transact_named(c, &ch->daemon_id, &ch->daemon_conn, &req.u.notify.id, &req, &rep, NULL, fd);
}

int client_device_report(pinshm_channel_t *ch, pinshm_device_kind_t kind, int delta)
{
	struct proto_msg req = {.h.type = PROTO_DEVICE}, rep;
	pinshm_client_t *c = channel_client(ch);

	if (!c)
		return 0;
	req.u.device.kind = (uint32_t)kind;
	req.u.device.delta = delta;
	int rc = transact_named(c, &ch->daemon_id, &ch->daemon_conn, &req.u.device.id, &req, &rep, NULL, -1);
	if (rc != 0 && delta > 0)
		channel_fail(ch, rc, "pinshmd: %s", c->error);
	return rc;
}

int client_close_endpoint(pinshm_client_t *c, uint64_t id, uint64_t conn, unsigned endpoint)
{
	struct proto_msg req = {.h.type = PROTO_CLOSE}, rep;

	req.u.close.endpoint = endpoint;
	int rc = transact_named(c, &id, &conn, &req.u.close.id, &req, &rep, NULL, -1);
	/* A connection that never had the channel has nothing to close: the
	 * daemon that adopts it finds the endpoint closed in the segment. */
	return rc == -ENOTCONN && conn != c->connection ? 0 : rc;
}

/* Hand the segment of @p k back to the daemon of @p c's new connection;
 * a consumer's wake-up socket (pinshm_channel_notify_fd()) goes with it
 * (NOTIFY) where its endpoint is claimed again: the new daemon did not
 * have it, and writes it to wake the consumer if it is armed (what it
 * missed while no daemon ran), and its device registrations (DEVICE).  A
 * refused NOTIFY or DEVICE leaves the hand-back done. */
static int hand_back(pinshm_client_t *c, const struct kept_segment *k)
{
	struct proto_msg req = {.h.type = PROTO_HANDBACK}, rep;
	const pinshm_channel_t *ch = k->ch;

	snprintf(req.u.handback.name, sizeof(req.u.handback.name), "%s", k->name);
	req.u.handback.geo = (struct proto_geometry){.kind = ch->g.kind,
						  .flags = ch->g.flags,
						  .capacity = ch->g.capacity,
						  .max_message = ch->g.max_message,
						  .max_producers = ch->g.max_producers,
						  .max_consumers = ch->g.max_consumers};
	req.u.handback.role = (uint32_t)ch->role;
	req.u.handback.endpoint = ch->endpoint;
	int rc = exchange(c, &req, &rep, NULL, k->fd); /* within client_reconnect(): connected */
	if (rc != 0)
		return rc;
	k->ch->daemon_id = rep.u.handback_reply.id;
	k->ch->daemon_conn = c->connection;
	if (ch->role == PINSHM_PRODUCER)
		producer_fetch_again(k->ch); /* the new daemon may have the sockets it could not give */
	if (ch->role == PINSHM_CONSUMER && ch->notify_send >= 0 && (rep.u.handback_reply.flags & PROTO_HANDBACK_ENDPOINT)) {
		int r = client_register_notify(c, k->ch, ch->notify_send);
		if (r != 0 && c->broken)
			return r;
	}
	/* The new daemon keeps a registered channel locked too. */
	int r = ch->dev ? device_report_all(k->ch) : 0;
	if (r != 0 && c->broken)
		return r;
	return 0;
}

/*
 * A new connection where the daemon closed this one (it was restarted, or
 * it exited idle): connect as pinshm_connect_flags() did, then hand back
 * the segment of every open handle (HANDBACK).  A channel the new daemon
 * refuses is still usable; only a failure of the connection is returned.
 */
static int client_reconnect(pinshm_client_t *c)
{
	char where[sizeof(((struct sockaddr_un *)0)->sun_path) + 16];
	unsigned refused = 0;

	c->reconnecting = true;
	connect_error[0] = '\0';
	int fd = connect_or_start(c->path[0] ? c->path : NULL, c->flags, where, sizeof(where));
	if (fd < 0) {
		c->reconnecting = false;
		return client_fail(c, fd, "the connection to pinshmd was lost, and reconnecting failed: %s",
				   connect_error[0] ? connect_error : strerror(-fd));
	}
	close(c->fd);
	async_clear(c); /* their replies went with the old connection */
	c->fd = fd;
	c->connection++;
	c->broken = false;
	c->broken_err = 0;
	int rc = client_hello(c);
	for (unsigned i = 0; rc == 0 && i < c->nkept; i++) {
		int r = hand_back(c, &c->kept[i]);
		if (r != 0 && c->broken)
			rc = r;
		refused += r != 0;
	}
	c->reconnecting = false;
	if (rc == 0 && refused)
		snprintf(client_error_buf(c), CLIENT_ERROR_MAX, "reconnected to pinshmd at %s; it did not take back %u channel%s",
			 where, refused, refused == 1 ? "" : "s");
	return rc;
}

int pinshm_reconnect(pinshm_client_t *c)
{
	int rc = 0;

	client_lock(c);
	client_error_buf(c)[0] = '\0';
	if (c->broken && c->broken_err != -ECONNRESET)
		rc = client_fail(c, c->broken_err, "the connection to pinshmd is out of step: connect again");
	else if (c->broken || hung_up(c->fd))
		rc = client_reconnect(c);
	client_unlock(c);
	return rc;
}

static int unlink_locked(pinshm_client_t *c, const char *name)
{
	struct proto_msg req = {.h.type = PROTO_UNLINK}, rep;

	client_error_buf(c)[0] = '\0';
	int rc = client_put_name(c, req.u.unlink.name, name);
	if (rc != 0)
		return rc;
	return transact(c, &req, &rep, NULL);
}

int pinshm_unlink(pinshm_client_t *c, const char *name)
{
	client_lock(c);
	int rc = unlink_locked(c, name);
	client_unlock(c);
	return rc;
}

int pinshm_daemon_shutdown(pinshm_client_t *c)
{
	struct proto_msg req = {.h.type = PROTO_SHUTDOWN}, rep;

	return transact(c, &req, &rep, NULL);
}
