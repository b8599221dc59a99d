/*
 * loop.c - accept, read, serve, reply, close; signals.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fdpass.h"
#include "fdstore.h"
#include "idle.h"
#include "log.h"
#include "loop.h"
#include "timers.h"
#include "watch.h"

/* What an epoll event is about: the first member of each watched object. */
enum watch_kind {
	WATCH_LISTEN,
	WATCH_SIGNAL,
	WATCH_CONN,
	WATCH_PIDFD, /* the connecting process: readable once it has exited */
	WATCH_ORPHANS, /* the registry's watched processes (watch_epfd): one has exited */
};

struct watch {
	enum watch_kind kind;
};

static struct watch listen_watch = {WATCH_LISTEN};
static struct watch signal_watch = {WATCH_SIGNAL};
static struct watch orphans_watch = {WATCH_ORPHANS};

struct conn {
	struct watch w;  /* WATCH_CONN, on fd */
	struct watch pw; /* WATCH_PIDFD, on pidfd */
	int fd;          /* -1 once closed (freed after the current batch of events) */
	int pidfd;       /* the connecting process, -1: not watched */
	uint64_t silent_until; /* CLOCK_MONOTONIC ms: closed then unless it has sent a packet; 0: it has */
	struct reg_client client;
	struct reply *pending; /* a reply waiting for room in the socket */
	bool deferred;         /* its CREATE, hand-back (a HANDBACK request), RELOCK or DEVICE is in progress
				* (registry_step(), watch_judge_step()): not read meanwhile */
	uint32_t deferred_seq; /* that request's */
	struct lock_wait deferred_wait; /* a RELOCK's or DEVICE's: the locking it waits for (request.h) */
	int refused;           /* 0, or why its first request is to be refused (-EACCES, -EUSERS) */
	char refusal[PROTO_TEXT_MAX + 1];
	struct conn *prev, *next;
};

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif

/*
 * A pidfd of the process at the other end of @p fd: SO_PEERPIDFD (no pid
 * reuse race), else pidfd_open() of the SO_PEERCRED pid @p pid.  A process
 * that exited before the fallback pidfd_open() may have its pid reused:
 * its connection is then reaped when it closes, as without pidfds.
 * @return the pidfd, or -1 (no pidfd on this kernel, or no pid).
 */
static int peer_pidfd(int fd, pid_t pid)
{
	int pidfd = -1;
	socklen_t len = sizeof(pidfd);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && len == sizeof(pidfd) && pidfd >= 0)
		return pidfd;
	if (pid <= 0)
		return -1;
#ifdef SYS_pidfd_open
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0); /* close-on-exec */
	return pidfd < 0 ? -1 : pidfd;
#else
	return -1;
#endif
}

static int watch_fd(struct loop *l, int op, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = {.events = events, .data.ptr = ptr};

	return epoll_ctl(l->epfd, op, fd, &ev) == 0 ? 0 : -errno;
}

/* request_clients_fn over the admitted connections.  The list is newest
 * first (ids decrease along it): those of id > cursor are its head, taken
 * backwards from the oldest of them. */
static unsigned loop_clients(void *arg, uint64_t cursor, struct proto_client_entry *out, unsigned max,
			     uint64_t *next, bool *more)
{
	struct loop *l = arg;
	struct conn *c = l->conns, *last = NULL;
	unsigned n = 0;

	*next = cursor;
	*more = false;
	for (; c && c->client.id > cursor; c = c->next)
		last = c;
	for (c = last; c; c = c->prev) {
		if (c->refused)
			continue;
		if (n == max) {
			*more = true;
			break;
		}
		const struct cred *cr = &c->client.cred;
		out[n++] = (struct proto_client_entry){
			.id = c->client.id,
			.pid = (uint32_t)cr->pid,
			.uid = (uint32_t)cr->uid,
			.gid = (uint32_t)cr->gid,
			.channels = c->client.nrefs,
			.endpoints = registry_client_endpoints(&c->client),
		};
		*next = c->client.id;
	}
	return n;
}

static int timers_init(struct loop *l);

int loop_init(struct loop *l, int listen_fd, struct registry *reg, struct account *acct, bool user_mode,
	      void (*reload)(void *arg), void *reload_arg)
{
	sigset_t mask;
	int rc;

	*l = (struct loop){.epfd = -1, .listen_fd = listen_fd, .signal_fd = -1, .spare_fd = -1, .next_id = 1,
			   .acct = acct, .reload = reload, .reload_arg = reload_arg};
	l->ctx.reg = reg;
	l->ctx.user_mode = user_mode;
	l->ctx.daemon_uid = geteuid();
	l->ctx.daemon_pid = getpid();
	clock_gettime(CLOCK_MONOTONIC, &l->ctx.started);
	l->ctx.clients = loop_clients;
	l->ctx.clients_arg = l;
	l->ctx.in_fd = -1;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	l->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (l->epfd < 0 || l->signal_fd < 0 || l->spare_fd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = watch_fd(l, EPOLL_CTL_ADD, listen_fd, EPOLLIN, &listen_watch);
	if (rc == 0)
		rc = watch_fd(l, EPOLL_CTL_ADD, l->signal_fd, EPOLLIN, &signal_watch);
	if (rc == 0 && reg->watch_epfd >= 0)
		rc = watch_fd(l, EPOLL_CTL_ADD, reg->watch_epfd, EPOLLIN, &orphans_watch);
	if (rc == 0)
		rc = timers_init(l);
	if (rc == 0)
		return 0;
fail:
	loop_fini(l);
	return rc;
}

/* Stop watching the listening socket (its waiting connection would wake
 * epoll at once, forever) until a connection closes or
 * LOOP_ACCEPT_RETRY_MS have passed. */
static void accept_pause(struct loop *l, int err)
{
	if (watch_fd(l, EPOLL_CTL_MOD, l->listen_fd, 0, &listen_watch) != 0)
		return;
	l->accept_paused = true;
	l->accept_retry_at = clock_now_ms() + LOOP_ACCEPT_RETRY_MS;
	log_warn("cannot accept (%s): not accepting for %u ms, or until a connection closes", strerror(err),
		 LOOP_ACCEPT_RETRY_MS);
}

static void accept_resume(struct loop *l)
{
	if (l->accept_paused && watch_fd(l, EPOLL_CTL_MOD, l->listen_fd, EPOLLIN, &listen_watch) == 0)
		l->accept_paused = false;
}

/*
 * Close @p c: reap what it opened, give back its slot.  Its memory is
 * freed by conn_free_closed() after the current batch of events, which may
 * still name it (its socket and its pidfd are two events).
 */
static void conn_close(struct loop *l, struct conn *c, const char *why)
{
	log_debug("pid %d uid %u: connection closed (%s)", (int)c->client.cred.pid, (unsigned)c->client.cred.uid, why);
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	if (c->pidfd >= 0) {
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->pidfd, NULL);
		close(c->pidfd);
		c->pidfd = -1;
	}
	watch_client_gone(l->ctx.reg, c->client.id); /* its hand-backs' judgings */
	registry_client_gone(l->ctx.reg, &c->client);
	if (c->silent_until)
		l->nsilent--;
	if (c->refused)
		l->nrefused--;
	else
		account_disconnect(l->acct, c->client.cred.uid);
	cred_free(&c->client.cred);
	if (c->pending)
		reply_release_fd(c->pending);
	free(c->pending);
	c->pending = NULL;
	if (c->prev)
		c->prev->next = c->next;
	else
		l->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	l->nconns--;
	c->prev = NULL;
	c->next = l->closed;
	l->closed = c;

	/* A descriptor was freed: accept again if we had to stop. */
	if (l->spare_fd < 0)
		l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	accept_resume(l);
}

static void conn_free_closed(struct loop *l)
{
	while (l->closed) {
		struct conn *c = l->closed;
		l->closed = c->next;
		free(c);
	}
}

/*
 * Whether @p c may stay: the [access] lists, then its user's connections.
 * A refused connection is marked, to be answered at its first request, or
 * @return false where too many wait so already.
 */
static bool conn_admit(struct loop *l, struct conn *c)
{
	const struct cred *cr = &c->client.cred;

	if (!config_admits(l->acct->cfg, cr, l->ctx.daemon_uid)) {
		c->refused = -EACCES;
		snprintf(c->refusal, sizeof(c->refusal), "uid %u may not connect to this pinshmd (its [access] lists)",
			 (unsigned)cr->uid);
	} else {
		c->refused = account_connect(l->acct, cr->uid, c->refusal, sizeof(c->refusal));
		if (c->refused == 0)
			return true;
	}
	bool keep = l->nrefused < LOOP_MAX_REFUSED;
	log_warn("pid %d uid %u: connection refused: %s%s", (int)cr->pid, (unsigned)cr->uid, c->refusal,
		 keep ? "" : " (closed at once: too many refused connections wait)");
	if (keep)
		l->nrefused++;
	return keep;
}

static void conn_new(struct loop *l, int fd)
{
	struct conn *c = calloc(1, sizeof(*c));
	int rc = c ? cred_from_socket(fd, &c->client.cred) : -ENOMEM;
	bool admitted = false;

	if (rc == 0 && !conn_admit(l, c)) {
		cred_free(&c->client.cred);
		free(c);
		close(fd);
		return;
	}
	if (rc == 0) {
		admitted = true;
		c->pidfd = -1;
		c->w.kind = WATCH_CONN;
		c->fd = fd;
		rc = watch_fd(l, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, c);
	}
	if (rc != 0) {
		log_warn("refusing a connection: %s", strerror(-rc));
		if (admitted && c->refused)
			l->nrefused--;
		else if (admitted)
			account_disconnect(l->acct, c->client.cred.uid);
		if (c)
			cred_free(&c->client.cred);
		free(c);
		close(fd);
		return;
	}
	c->pw.kind = WATCH_PIDFD;
	c->silent_until = clock_now_ms() + LOOP_SILENT_MS;
	if (l->nsilent++ == 0 || c->silent_until < l->silent_check_at)
		l->silent_check_at = c->silent_until;
	c->pidfd = peer_pidfd(fd, c->client.cred.pid);
	if (c->pidfd >= 0 && watch_fd(l, EPOLL_CTL_ADD, c->pidfd, EPOLLIN, &c->pw) != 0) {
		close(c->pidfd);
		c->pidfd = -1;
	}
	if (c->pidfd < 0)
		log_debug("pid %d: not watched with a pidfd: reaped when its connection closes",
			  (int)c->client.cred.pid);
	c->client.id = l->next_id++;
	c->next = l->conns;
	if (l->conns)
		l->conns->prev = c;
	l->conns = c;
	l->nconns++;
	log_debug("pid %d uid %u gid %u: connected", (int)c->client.cred.pid, (unsigned)c->client.cred.uid,
		  (unsigned)c->client.cred.gid);
}

/* Out of descriptors or memory with a connection waiting: give up the spare
 * descriptor to accept and drop it; where even that fails, pause. */
static void accept_starved(struct loop *l, int err)
{
	int fd = -1;

	if (l->spare_fd >= 0) {
		close(l->spare_fd);
		fd = accept4(l->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			close(fd);
		l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	if (fd >= 0 && l->spare_fd >= 0)
		log_warn("cannot accept (%s): a connection was dropped", strerror(err));
	else
		accept_pause(l, err);
}

static void on_accept(struct loop *l)
{
	for (unsigned i = 0; i < LOOP_BATCH && !l->accept_paused; i++) {
		int fd = accept4(l->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				accept_starved(l, errno);
			else if (errno != EAGAIN)
				accept_pause(l, errno); /* it would fail again at once */
			return;
		}
		if (l->nconns >= LOOP_MAX_CONNECTIONS) {
			log_warn("%u connections open, the most: a connection was refused", l->nconns);
			close(fd);
			continue;
		}
		conn_new(l, fd);
	}
}

/*
 * Send @p rep on @p c, or keep it until the socket has room.  While a reply
 * waits, the connection is watched for EPOLLOUT only (EPOLLHUP and EPOLLERR
 * come anyway, and make the send fail): not EPOLLIN, so that a client that
 * sends without reading is not read, and not EPOLLRDHUP, which stays set
 * once the client shut its writing side and would wake the loop at once,
 * forever, for a client that does not read either.
 * @return false if @p c was closed.
 */
static bool conn_reply(struct loop *l, struct conn *c, const struct reply *rep)
{
	int rc = fdpass_send(c->fd, rep->buf, rep->len, &rep->fd, rep->fd >= 0 ? 1 : 0, MSG_DONTWAIT);

	if (rc != -EAGAIN)
		reply_release_fd(rep); /* sent, or never will be */
	if (rc == -EAGAIN) {
		c->pending = malloc(sizeof(*c->pending));
		if (c->pending && watch_fd(l, EPOLL_CTL_MOD, c->fd, EPOLLOUT, c) == 0) {
			memcpy(c->pending, rep, sizeof(*rep));
			return true;
		}
		free(c->pending);
		c->pending = NULL;
		reply_release_fd(rep);
		rc = -ENOMEM;
	}
	if (rc != 0) {
		conn_close(l, c, strerror(-rc));
		return false;
	}
	if (rep->close_after) {
		conn_close(l, c, "after an error");
		return false;
	}
	return true;
}

/* The held reply may go now: send it, then read the connection again. */
static void on_writable(struct loop *l, struct conn *c)
{
	struct reply *rep = c->pending;

	c->pending = NULL;
	if (conn_reply(l, c, rep) && !c->pending) {
		request_replied(&l->ctx, &c->client, rep);
		if (watch_fd(l, EPOLL_CTL_MOD, c->fd, EPOLLIN | EPOLLRDHUP, c) != 0)
			conn_close(l, c, "epoll");
	}
	free(rep);
}

/* recv returned 0: the peer closed, or sent an empty packet. */
static bool peer_closed(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLRDHUP};
	int n = poll(&p, 1, 0);

	return n < 0 || (n == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
}

/*
 * @p c's CREATE, HANDBACK, RELOCK or DEVICE (@p rep, deferred) is in progress: watch
 * nothing of it but EPOLLHUP and EPOLLERR (a client that goes gives it up)
 * until loop_step() replies (conn_resume()).  What it sends meanwhile
 * waits in its socket.
 */
static void conn_defer(struct loop *l, struct conn *c, const struct reply *rep)
{
	c->deferred = true;
	c->deferred_seq = rep->seq;
	c->deferred_wait = rep->wait;
	if (watch_fd(l, EPOLL_CTL_MOD, c->fd, 0, c) != 0)
		conn_close(l, c, "epoll");
}

/* The connection @p id whose request is in progress, or NULL. */
static struct conn *conn_deferred_of(struct loop *l, uint64_t id)
{
	struct conn *c = l->conns;

	while (c && !(c->deferred && c->client.id == id))
		c = c->next;
	return c;
}

/* Send @p rep, the reply that ends @p c's deferred request (conn_defer()),
 * and read @p c again. */
static void conn_resume(struct loop *l, struct conn *c, const struct reply *rep)
{
	c->deferred = false;
	c->deferred_wait = (struct lock_wait){0};
	if (conn_reply(l, c, rep) && !c->pending && watch_fd(l, EPOLL_CTL_MOD, c->fd, EPOLLIN | EPOLLRDHUP, c) != 0)
		conn_close(l, c, "epoll");
}

/* The replies to the RELOCKs and DEVICEs that waited for the locking of
 * @p chan, ended.
 * A reply that fails closes its connection, and where that connection held
 * the last reference, @p chan is freed: only a connection that still waits
 * (and so holds a reference) looks at it again. */
static void relocks_answer(struct loop *l, struct channel *chan)
{
	const uint64_t id = chan->id;
	struct reply rep;

	for (struct conn *c = l->conns, *next; c; c = next) {
		next = c->next; /* c may be closed */
		if (c->deferred && c->deferred_wait.id == id) {
			request_relocked(&l->ctx, &c->client, chan, c->deferred_seq, &c->deferred_wait, &rep);
			conn_resume(l, c, &rep);
		}
	}
}

/* One slice of the work in progress (registry_step(), watch_judge_step());
 * the replies to the CREATE, HANDBACK, RELOCKs or DEVICEs that it ends. */
static void loop_step(struct loop *l)
{
	struct channel *chan, *lock_done;
	struct reg_judged done;
	struct reply rep;

	if (watch_judge_step(l->ctx.reg, &done)) {
		struct conn *c = conn_deferred_of(l, done.client);
		if (c) { /* else cannot be: a client that goes gives its judging up */
			request_handed_back(&l->ctx, &done, c->deferred_seq, &rep);
			conn_resume(l, c, &rep);
		}
	}
	registry_step(l->ctx.reg, &chan, &lock_done);
	if (lock_done)
		relocks_answer(l, lock_done);
	if (!chan)
		return;
	struct conn *c = conn_deferred_of(l, chan->creator);
	if (!c) { /* cannot be: a creator that goes gives its channel up */
		registry_create_abandon(l->ctx.reg, chan);
		return;
	}
	request_created(&l->ctx, &c->client, chan, c->deferred_seq, &rep);
	conn_resume(l, c, &rep);
}

static void on_readable(struct loop *l, struct conn *c)
{
	uint8_t buf[PROTO_MAX_PACKET];
	struct reply rep;

	for (unsigned i = 0; i < LOOP_BATCH && !c->pending && !c->deferred && !l->ctx.stop; i++) {
		unsigned nfds;
		int fd = -1;
		ssize_t n = fdpass_recv(c->fd, buf, sizeof(buf), &fd, 1, &nfds, MSG_DONTWAIT);
		if (n < 0 || nfds == 0)
			fd = -1;
		if (fd >= 0 && (c->refused || n == 0)) {
			close(fd); /* a request with a descriptor is HANDBACK's alone, served below */
			fd = -1;
			if (n > 0)
				n = -EPROTO;
		}
		if (n == -EAGAIN)
			return;
		if (n == 0 && peer_closed(c->fd)) {
			conn_close(l, c, "by the client");
			return;
		}
		if (n == 0 || n == -EMSGSIZE || n == -EPROTO) {
			int err = n == 0 ? -EBADMSG : (int)n;
			log_warn("pid %d uid %u: %s: closing the connection", (int)c->client.cred.pid,
				 (unsigned)c->client.cred.uid,
				 err == -EMSGSIZE ? "request over 4096 bytes"
				 : err == -EPROTO ? "descriptors or control data not asked for"
						  : "empty request");
			request_refuse(err, &rep);
			conn_reply(l, c, &rep);
			return;
		}
		if (n < 0) {
			conn_close(l, c, strerror((int)-n));
			return;
		}
		l->last_request = clock_now_ms();
		if (c->silent_until) {
			c->silent_until = 0;
			l->nsilent--;
		}
		if (c->refused) {
			request_deny(buf, (size_t)n, c->refused, c->refusal, &rep);
			conn_reply(l, c, &rep);
			return;
		}
		l->ctx.in_fd = fd;
		request_serve(&l->ctx, &c->client, buf, (size_t)n, &rep);
		if (l->ctx.in_fd >= 0)
			close(l->ctx.in_fd);
		l->ctx.in_fd = -1;
		if (rep.deferred) {
			conn_defer(l, c, &rep);
			return;
		}
		if (!conn_reply(l, c, &rep))
			return;
		if (!c->pending) /* sent; a held one is followed up once it goes (on_writable()) */
			request_replied(&l->ctx, &c->client, &rep);
	}
}

static void on_signal(struct loop *l)
{
	struct signalfd_siginfo si;

	while (read(l->signal_fd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			if (l->reload)
				l->reload(l->reload_arg);
			else
				log_notice("SIGHUP: nothing to reload");
			continue;
		}
		log_notice("%s: stopping", strsignal((int)si.ssi_signo));
		l->ctx.stop = true;
	}
}

/* Whether a connection waits in the listening socket's backlog. */
static bool accept_waiting(struct loop *l)
{
	struct pollfd p = {.fd = l->listen_fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1;
}

/* With exit_idle_ms: stop once idle that long.  @return the ms left
 * before it would, or -1 (not idle, or no such limit). */
static int idle_timeout(struct loop *l)
{
	if (!l->exit_idle_ms || l->nconns > 0 || l->ctx.reg->count > 0) {
		l->idle_since = 0;
		return -1;
	}
	uint64_t now = clock_now_ms();
	if (!l->idle_since)
		l->idle_since = now;
	uint64_t end = l->idle_since + l->exit_idle_ms;
	if (now < end)
		return (int)(end - now > INT_MAX ? INT_MAX : end - now);
	if (accept_waiting(l))
		return 0; /* served first */
	log_notice("no connection and no channel for %llu s: exiting", (unsigned long long)(l->exit_idle_ms / 1000));
	l->ctx.stop = true;
	return 0;
}

/* The earlier of two epoll timeouts (-1: none). */
static int earlier(int a, int b)
{
	return a < 0 || (b >= 0 && b < a) ? b : a;
}

/* Timer "silent connections": due at the first silent_until. */
static uint64_t silent_when(void *arg)
{
	struct loop *l = arg;

	return l->nsilent ? l->silent_check_at : 0;
}

/* Close the connections that sent nothing within LOOP_SILENT_MS of their
 * accept; the timer is due again at the next one's. */
static void silent_fire(void *arg, uint64_t now)
{
	struct loop *l = arg;
	uint64_t next = UINT64_MAX;

	for (struct conn *c = l->conns, *after; c; c = after) {
		after = c->next;
		if (!c->silent_until)
			continue;
		if (c->silent_until <= now) {
			log_info("pid %d uid %u: no request in %u ms: closing the connection", (int)c->client.cred.pid,
				 (unsigned)c->client.cred.uid, LOOP_SILENT_MS);
			conn_close(l, c, "silent");
		} else if (c->silent_until < next) {
			next = c->silent_until;
		}
	}
	conn_free_closed(l);
	l->silent_check_at = next;
}

/* With ready segments to make: wait until no request has come for
 * LOOP_POOL_QUIET_MS (a client's burst, such as CREATE then OPEN, is not
 * delayed by a refill).  A refill goes in steps of a millisecond or so
 * (pool.h): a request that comes between two steps is served first, and
 * the next step waits for the quiet again.  @return 0 (a step now), the
 * ms left, or -1. */
static int pool_timeout(struct loop *l)
{
	struct pool *pool = l->ctx.reg->pool;

	if (!pool || !pool_wants(pool))
		return -1;
	uint64_t now = clock_now_ms(), quiet = l->last_request + LOOP_POOL_QUIET_MS;
	return now >= quiet ? 0 : (int)(quiet - now);
}

/* Timer "idle scan": every REGISTRY_TICK_MS while a channel has a
 * pin_idle (working-set pinning, idle.h). */
static uint64_t idle_scan_when(void *arg)
{
	struct loop *l = arg;

	return l->ctx.reg->idle_policies ? l->idle_scan_at : 0;
}

static void idle_scan_fire(void *arg, uint64_t now)
{
	struct loop *l = arg;

	l->idle_scan_at = now + REGISTRY_TICK_MS;
	idle_scan(l->ctx.reg, now);
}

/* Timer "watch tick": every REGISTRY_TICK_MS while an endpoint is watched:
 * the watched processes without a pidfd, the watched endpoints in turn
 * (watch.h). */
static uint64_t watch_tick_when(void *arg)
{
	struct loop *l = arg;

	return l->ctx.reg->norphans ? l->watch_tick_at : 0;
}

static void watch_tick_fire(void *arg, uint64_t now)
{
	struct loop *l = arg;

	l->watch_tick_at = now + REGISTRY_TICK_MS;
	watch_tick(l->ctx.reg);
}

/* Timer "grace end": the channels adopted at the start lose the grace's
 * references (adopt.h). */
static uint64_t grace_when(void *arg)
{
	struct loop *l = arg;

	return l->adopt ? adopt_grace_due(l->adopt) : 0;
}

static void grace_fire(void *arg, uint64_t now)
{
	struct loop *l = arg;

	(void)now;
	adopt_grace_end(l->adopt);
}

/* Timer "store retries": the descriptor store's removals that wait (fdstore.h). */
static uint64_t store_when(void *arg)
{
	(void)arg;
	return fdstore_due();
}

static void store_fire(void *arg, uint64_t now)
{
	(void)arg;
	(void)now;
	fdstore_retry();
}

/* Timer "accept retry": accepting paused (out of descriptors) is tried again. */
static uint64_t accept_when(void *arg)
{
	struct loop *l = arg;

	return l->accept_paused ? l->accept_retry_at : 0;
}

static void accept_fire(void *arg, uint64_t now)
{
	struct loop *l = arg;

	accept_resume(l);
	l->accept_retry_at = now + LOOP_ACCEPT_RETRY_MS;
}

/* The loop's timers, in the order they fire when due together. */
static int timers_init(struct loop *l)
{
	int rc = timers_add(&l->timers, "grace end", grace_when, grace_fire, l);

	l->idle_scan_at = l->watch_tick_at = 1; /* due as soon as armed (0 would disarm them) */

	rc = rc ? rc : timers_add(&l->timers, "store retries", store_when, store_fire, l);
	rc = rc ? rc : timers_add(&l->timers, "idle scan", idle_scan_when, idle_scan_fire, l);
	rc = rc ? rc : timers_add(&l->timers, "watch tick", watch_tick_when, watch_tick_fire, l);
	rc = rc ? rc : timers_add(&l->timers, "silent connections", silent_when, silent_fire, l);
	rc = rc ? rc : timers_add(&l->timers, "accept retry", accept_when, accept_fire, l);
	return rc;
}

/* How long epoll may wait: until a timer is due, an idle daemon is to
 * exit, or the pool may be refilled; the timers due now fire first. */
static int wait_timeout(struct loop *l)
{
	uint64_t now = clock_now_ms();

	timers_due(&l->timers, now);
	int t = earlier(idle_timeout(l), timers_next(&l->timers, clock_now_ms()));
	return earlier(t, pool_timeout(l));
}

int loop_run(struct loop *l)
{
	struct epoll_event events[32];

	while (!l->ctx.stop) {
		int timeout = wait_timeout(l);
		if (l->ctx.stop)
			break; /* idle */
		bool busy = registry_busy(l->ctx.reg); /* a slice each turn, whatever else comes */
		int n = epoll_wait(l->epfd, events, 32, busy ? 0 : timeout);
		if (n == 0 && !busy && pool_timeout(l) == 0) {
			pool_refill(l->ctx.reg->pool); /* nothing waiting, quiet: one step of a refill */
			continue;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			log_err("epoll_wait: %s", strerror(err));
			return -err;
		}
		for (int i = 0; i < n; i++) {
			struct watch *w = events[i].data.ptr;
			uint32_t ev = events[i].events;
			if (w->kind == WATCH_LISTEN) {
				on_accept(l);
			} else if (w->kind == WATCH_SIGNAL) {
				on_signal(l);
			} else if (w->kind == WATCH_ORPHANS) {
				registry_watch_events(l->ctx.reg);
			} else if (w->kind == WATCH_PIDFD) {
				struct conn *c = (struct conn *)((char *)w - offsetof(struct conn, pw));
				if (c->fd >= 0)
					conn_close(l, c, "its process exited");
			} else {
				struct conn *c = (struct conn *)w;
				if (c->fd < 0)
					continue; /* closed earlier in this batch */
				if (c->deferred) /* EPOLLHUP, EPOLLERR: gone */
					conn_close(l, c, "by the client, while its request was in progress");
				else if (c->pending) /* EPOLLOUT, or EPOLLHUP/EPOLLERR: the send says which */
					on_writable(l, c);
				else if (ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR))
					on_readable(l, c);
			}
			if (l->ctx.stop)
				break;
		}
		if (busy && !l->ctx.stop)
			loop_step(l);
		conn_free_closed(l);
	}
	return 0;
}

void loop_fini(struct loop *l)
{
	while (l->conns) {
		struct conn *c = l->conns;
		l->conns = c->next;
		close(c->fd);
		if (c->pidfd >= 0)
			close(c->pidfd);
		registry_client_forget(&c->client);
		cred_free(&c->client.cred);
		if (c->pending)
			reply_release_fd(c->pending);
		free(c->pending);
		free(c);
	}
	l->nconns = 0;
	conn_free_closed(l);
	if (l->spare_fd >= 0)
		close(l->spare_fd);
	if (l->signal_fd >= 0)
		close(l->signal_fd);
	if (l->epfd >= 0)
		close(l->epfd);
	l->spare_fd = l->signal_fd = l->epfd = -1;
}
