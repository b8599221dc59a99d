/*
 * check_lifecycle.c - the lives of clients and of the daemon.
 *
 * - pidfd: a connection belongs to the process that made it; its death
 *   reaps the endpoints opened through it at once, even where a forked
 *   child still holds the socket, and a child's death does not touch it.
 *
 * - autostart: clients that race to connect where no daemon answers start
 *   exactly one (counted by a wrapper script around $PINSHMD), which exits
 *   once idle; a daemon that runs already is used; $PINSHM_AUTOSTART.
 *
 * - restart: kill -9 of the daemon while two processes exchange messages;
 *   the test stands in for systemd's descriptor store ($NOTIFY_SOCKET,
 *   FDSTORE=1, then $LISTEN_FDS for the daemon started next): traffic never
 *   stops, the channels are adopted (listed, pinned, accounted), new
 *   requests are served, and nothing is left over once they are gone; the
 *   same through the clients' hand-back (a HANDBACK request), and hostile hand-backs
 *   (endpoints with pids no owner can have are reaped); a manager that
 *   stops reading: the removals it missed are sent again once it reads, in
 *   order, 64 at most, and no unlinked channel comes back at the restart.
 * - pin_idle: a channel keeps its pin_idle through the descriptor store
 *   (records of version 2); a record of version 1 (an older daemon's) gets
 *   the configured default, as a hand-back does (HANDBACK carries none); a
 *   malformed record is refused; a segment a previous daemon had unlocked
 *   is locked again, charged once; two records of one segment are one
 *   channel, charged once, and one record in the store after.
 * - reap: a producer that dies while no daemon runs (its pid maybe reused
 *   since), or that lives on without coming back (in a PID namespace of its
 *   own too) and dies later: the restarted daemon reaps its endpoint, its
 *   consumer gets -EPIPE, and a new producer takes the endpoint.
 * - judge: hostile hand-backs against the judging of endpoints: 960
 *   endpoints of one live pid (one pidfd, not 960), 300 live processes
 *   (256 known by a pidfd, the most; all reaped when they die), twenty
 *   hand-backs of endpoints whose pids no process has (one scan of /proc
 *   for nested PID namespaces a second, not one each), a pid of 20000
 *   mappings (not read in full: not judged), two containers' pid 1 (the
 *   death of one reaps nothing of the other's), a client in a PID
 *   namespace the daemon cannot see (its live endpoints not reaped).
 * - scale: 200 clients at once, each with its own channel (the daemon's
 *   memory is printed for the record); a daemon short of descriptors keeps
 *   serving and does not spin; a connection that never speaks is closed;
 *   one user gets at most half of the daemon's connections by default.
 *
 * Every test starts a real pinshmd (tests/daemonutil.h) and stops it,
 * checking that it exits cleanly.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "daemonutil.h"
#include "fdpass.h"
#include "layout.h"
#include "pinshm.h"
#include "protocol.h"
#include "testutil.h"

#define KiB 1024u
#define WAIT_MS 60000 /* for the children of a test */
#define CALL_MS 20000 /* for one blocking call */
#define HOLD_MS 30000 /* the longest a grandchild holds a socket when nobody kills it */

static void attr_small(pinshm_channel_attr_t *a, unsigned producers, unsigned consumers)
{
	tu_attr(a, PINSHM_QUEUE, 64 * KiB, producers, consumers);
}

/* Whether the daemon lists a connection of process @p pid. */
static bool has_client_pid(pinshm_client_t *c, pid_t pid)
{
	pinshm_client_info_t *info;
	size_t n;
	bool found = false;

	CLIENT_RC(c, pinshm_clients(c, &info, &n), 0);
	for (size_t i = 0; i < n; i++)
		found |= info[i].pid == (uint32_t)pid;
	free(info);
	return found;
}

/* ======================================================================== */
/* pidfd                                                                     */
/* ======================================================================== */

static void wait_counts(pinshm_client_t *c, uint32_t connections, uint32_t channels);
static void assert_holds_nothing(const struct daemon *d, pinshm_client_t *c, long lck0);

/* Open the producer, send one message, fork a grandchild that holds the
 * connection (and sleeps), report its pid, wait to be killed. */
static int forking_producer(void *arg, int idx)
{
	struct scene *x = arg;
	pinshm_client_t *c;

	(void)idx;
	child_open_send_first(x->d.sock, "fork", CALL_MS, &c);
	pid_t g = fork();
	if (g < 0)
		tu_child_fail(5, "fork: %s", strerror(errno));
	if (g == 0) { /* holds the socket and the mapping; no death signal */
		child_sleep_until_killed(HOLD_MS);
		_exit(0);
	}
	tu_report_vals(&x->rep, 0, 0, (uint64_t)g, (uint64_t)getpid());
	return child_sleep_until_killed(WAIT_MS);
}

/* The producer is killed while a child it forked holds its connection: the
 * consumer gets -EPIPE within a second, and the connection is gone. */
START_TEST(test_pidfd_forked_holder)
{
	struct scene x;
	struct tu_procs *ps = &x.ps;
	struct tu_report r;
	pinshm_channel_t *cons;
	char buf[16];
	size_t len;

	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0); /* the grandchild is reaped here */
	scene_start(&x, "fork");
	pinshm_client_t *c = x.c;
	CLIENT_RC(c, pinshm_open(c, "fork", PINSHM_CONSUMER, &cons), 0);
	int prod = tu_spawn(ps, "producer", forking_producer, &x, 0);

	TU_RC(tu_collect(&x.rep, &r, WAIT_MS), 0);
	pid_t grandchild = (pid_t)r.v[0];
	ck_assert_int_eq((pid_t)r.v[1], ps->pid[prod]);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert(has_client_pid(c, ps->pid[prod]));

	ck_assert_int_eq(kill(ps->pid[prod], SIGKILL), 0);
	uint64_t t0 = tu_now_ms();
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, 5000), -EPIPE);
	uint64_t waited = tu_now_ms() - t0;
	ck_assert_msg(waited < 1000, "-EPIPE came %llu ms after the kill", (unsigned long long)waited);
	ck_assert_msg(kill(grandchild, 0) == 0, "the grandchild holding the connection is gone already");
	ck_assert(!has_client_pid(c, ps->pid[prod]));

	kill(grandchild, SIGKILL);
	ck_assert_int_eq(waitpid(grandchild, NULL, 0), grandchild);
	tu_wait_all(ps, WAIT_MS);
	pinshm_channel_close(cons);
	scene_end(&x);
}
END_TEST

/* A child that inherited the connection exits: nothing of the parent's is
 * reaped, and the connection keeps serving it. */
START_TEST(test_pidfd_child_exit)
{
	struct daemon d;
	pinshm_channel_t *prod, *cons;
	char buf[16];
	size_t len;
	int status;

	daemon_start(&d);
	pinshm_client_t *c = connect_create_small(&d, "fork");
	CLIENT_RC(c, pinshm_open(c, "fork", PINSHM_CONSUMER, &cons), 0);
	CLIENT_RC(c, pinshm_open(c, "fork", PINSHM_PRODUCER, &prod), 0);
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0)
		_exit(0);
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	/* Its exit was there to see before these requests: once the second
	 * is answered, the turn that served the first, and any before, is
	 * over, with whatever that exit made the daemon do. */
	pinshm_status_t st;
	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);

	TU_RC(pinshm_send(prod, "after", 5, CALL_MS), 0);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert_uint_eq(len, 5);
	ck_assert(has_client_pid(c, getpid()));
	pinshm_channel_close(prod);
	pinshm_channel_close(cons);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* ======================================================================== */
/* autostart                                                                 */
/* ======================================================================== */

#define RACERS 8

struct autostart {
	char dir[64];
	char sock[128];
	char starts[128];  /* a line per pinshmd started through the wrapper */
	char wrapper[128];
	int release[2];    /* racers hold their connection until it closes */
	struct tu_reporter rep;
};

/* A folder with a wrapper around the pinshmd just built that counts its
 * starts; $PINSHMD names the wrapper, the daemon exits after 1 s idle. */
static void autostart_prepare(struct autostart *a)
{
	snprintf(a->dir, sizeof(a->dir), "/tmp/pinshm-autostart-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(a->dir));
	snprintf(a->sock, sizeof(a->sock), "%s/sock", a->dir);
	snprintf(a->starts, sizeof(a->starts), "%s/starts", a->dir);
	snprintf(a->wrapper, sizeof(a->wrapper), "%s/pinshmd", a->dir);
	FILE *f = fopen(a->wrapper, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "#!/bin/sh\necho \"$$\" >>'%s'\nexec '%s' \"$@\"\n", a->starts, pinshmd_path());
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(a->wrapper, 0700), 0);
	ck_assert_int_eq(setenv("PINSHMD", a->wrapper, 1), 0);
	ck_assert_int_eq(setenv("PINSHM_AUTOSTART_IDLE", "1", 1), 0);
	unsetenv("PINSHM_AUTOSTART");
	/* The daemons detach: they become this process's children when their
	 * parents exit, to be waited for here. */
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
}

static unsigned count_starts(const struct autostart *a)
{
	FILE *f = fopen(a->starts, "r");
	unsigned n = 0;
	int c;

	if (!f)
		return 0;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* The pid of the daemon that @p c is connected to. */
static pid_t daemon_pid(pinshm_client_t *c)
{
	pinshm_status_t st;

	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	return (pid_t)st.pid;
}

/* Wait until the detached daemon @p pid exits on its own (idle); check
 * that it exited 0 and removed its socket. */
static void wait_idle_exit(const struct autostart *a, pid_t pid, int ms)
{
	int status;
	pid_t w = 0;
	uint64_t deadline = tu_now_ms() + (uint64_t)ms;

	while ((w = waitpid(pid, &status, WNOHANG)) == 0 && tu_now_ms() < deadline)
		tu_sleep_ms(20);
	if (w == 0)
		kill(pid, SIGKILL);
	ck_assert_msg(w == pid, "the auto-started daemon %d did not exit when idle (%s)", (int)pid,
		      w < 0 ? strerror(errno) : "still running");
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the daemon exited with status %#x", status);
	ck_assert_msg(access(a->sock, F_OK) != 0, "the daemon left its socket");
}

/* The sockets that the daemon @p pid holds open (its listening socket and
 * its connections). */
static unsigned daemon_sockets(pid_t pid)
{
	char path[64], link[64];
	unsigned n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *dir = opendir(path);
	ck_assert_msg(dir != NULL, "%s: %s", path, strerror(errno));
	for (struct dirent *e; (e = readdir(dir));) {
		char fd[320];
		snprintf(fd, sizeof(fd), "%s/%s", path, e->d_name);
		ssize_t len = readlink(fd, link, sizeof(link) - 1);
		if (len > 0) {
			link[len] = '\0';
			n += strncmp(link, "socket:[", 8) == 0;
		}
	}
	closedir(dir);
	return n;
}

/* Return once the daemon @p pid, whose client just went (it held @p
 * sockets sockets with it), has closed that connection and then decided
 * that nothing is due: past that point it only wakes for a peer. */
static void wait_daemon_settled(pid_t pid, unsigned sockets)
{
	uint64_t deadline = tu_now_ms() + 20000;

	for (;;) {
		ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "the daemon %d exited", (int)pid);
		if (daemon_sockets(pid) < sockets && daemon_waits_forever(pid))
			return;
		ck_assert_msg(tu_now_ms() < deadline, "the daemon %d never settled", (int)pid);
		tu_sleep_ms(10);
	}
}

static void autostart_cleanup(struct autostart *a)
{
	char path[192];
	const char *files[] = {"sock", "sock.lock", "sock.start", "starts", "pinshmd"};

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", a->dir, files[i]);
		unlink(path);
	}
	rmdir(a->dir);
}

static int racer(void *arg, int idx)
{
	struct autostart *a = arg;
	pinshm_client_t *c;
	pinshm_status_t st;
	char b;

	close(a->release[1]);
	int rc = pinshm_connect_flags(a->sock, PINSHM_CONNECT_AUTOSTART, &c);
	if (rc != 0)
		tu_child_fail(2, "connect: %s (%s)", pinshm_strerror(rc), pinshm_client_error(NULL));
	rc = pinshm_status(c, &st, NULL, NULL);
	if (rc != 0)
		tu_child_fail(3, "status: %s", pinshm_strerror(rc));
	tu_report_vals(&a->rep, idx, 0, st.pid, 0);
	while (read(a->release[0], &b, 1) < 0 && errno == EINTR) /* until released */
		;
	pinshm_disconnect(c);
	return 0;
}

/* RACERS clients connect at once where no daemon runs: one starts, all
 * use it; it exits once they are gone. */
START_TEST(test_autostart_race)
{
	struct autostart a;
	struct tu_procs ps;
	struct tu_report r;
	pid_t pid = 0;

	autostart_prepare(&a);
	ck_assert_int_eq(pipe(a.release), 0);
	tu_reporter_open(&a.rep);
	tu_procs_init(&ps);
	for (int i = 0; i < RACERS; i++)
		tu_spawn(&ps, "racer", racer, &a, i);
	close(a.release[0]);
	for (int i = 0; i < RACERS; i++) {
		TU_RC(tu_collect(&a.rep, &r, WAIT_MS), 0);
		ck_assert_int_ne(r.v[0], 0);
		if (i == 0)
			pid = (pid_t)r.v[0];
		ck_assert_msg((pid_t)r.v[0] == pid, "racer %d uses daemon %d, another %d", r.who, (int)r.v[0],
			      (int)pid);
	}
	ck_assert_uint_eq(count_starts(&a), 1);
	close(a.release[1]);
	tu_wait_all_ok(&ps, WAIT_MS);
	wait_idle_exit(&a, pid, 20000);
	ck_assert_uint_eq(count_starts(&a), 1);
	tu_reporter_close(&a.rep);
	autostart_cleanup(&a);
}
END_TEST

/* A daemon that runs already is used, not started again. */
START_TEST(test_autostart_running)
{
	struct autostart a;
	struct daemon d;
	pinshm_client_t *c;

	daemon_start(&d);
	autostart_prepare(&a);
	CLIENT_RC(NULL, pinshm_connect_flags(d.sock, PINSHM_CONNECT_AUTOSTART, &c), 0);
	ck_assert_int_eq(daemon_pid(c), d.pid);
	ck_assert_uint_eq(count_starts(&a), 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	autostart_cleanup(&a);
}
END_TEST

/* Whether the environment of process @p pid holds a variable @p name. */
static bool environ_has(pid_t pid, const char *name)
{
	char path[64], buf[65536];
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	ck_assert_msg(n > 0, "%s: empty", path);
	size_t len = strlen(name);
	for (ssize_t i = 0; i < n; i += (ssize_t)strnlen(buf + i, (size_t)(n - i)) + 1)
		if (strncmp(buf + i, name, len) == 0 && buf[i + len] == '=')
			return true;
	return false;
}

/* $PINSHM_AUTOSTART: 0 forbids it even to the flag, 1 allows it to a
 * plain pinshm_connect(); unknown flags are refused.  A daemon with a
 * channel alive does not exit idle.  The daemon gets the client's
 * environment but LD_PRELOAD (an MPI rank's preloads the plugin). */
START_TEST(test_autostart_env)
{
	struct autostart a;
	pinshm_client_t *c;
	pinshm_channel_attr_t attr;

	autostart_prepare(&a);
	CLIENT_RC(NULL, pinshm_connect_flags(a.sock, 0x80, &c), -EINVAL);
	CLIENT_RC(NULL, pinshm_connect(a.sock, &c), -ENOENT);
	ck_assert_int_eq(setenv("PINSHM_AUTOSTART", "0", 1), 0);
	CLIENT_RC(NULL, pinshm_connect_flags(a.sock, PINSHM_CONNECT_AUTOSTART, &c), -ENOENT);
	ck_assert_uint_eq(count_starts(&a), 0);

	ck_assert_int_eq(setenv("PINSHM_AUTOSTART", "1", 1), 0);
	ck_assert_int_eq(setenv("LD_PRELOAD", "libc.so.6", 1), 0);
	CLIENT_RC(NULL, pinshm_connect(a.sock, &c), 0);
	unsetenv("LD_PRELOAD");
	ck_assert_uint_eq(count_starts(&a), 1);
	pid_t pid = daemon_pid(c);
	ck_assert_msg(environ_has(pid, "PINSHM_AUTOSTART_IDLE"), "the daemon lacks the client's environment");
	ck_assert_msg(!environ_has(pid, "LD_PRELOAD"), "the daemon got the client's LD_PRELOAD");
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "keep", &attr, 0600, PINSHM_PERSISTENT), 0);
	unsigned sockets = daemon_sockets(pid);
	pinshm_disconnect(c);
	/* The persistent channel keeps it: once the connection is closed, the
	 * daemon arms no idle exit (it would sleep 1 s at most, then exit). */
	wait_daemon_settled(pid, sockets);
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
	CLIENT_RC(NULL, pinshm_connect(a.sock, &c), 0);
	ck_assert_int_eq(daemon_pid(c), pid);
	CLIENT_RC(c, pinshm_unlink(c, "keep"), 0);
	pinshm_disconnect(c);
	wait_idle_exit(&a, pid, 20000);
	ck_assert_uint_eq(count_starts(&a), 1);
	autostart_cleanup(&a);
}
END_TEST

/* ======================================================================== */
/* restart and adoption                                                      */
/* ======================================================================== */

#define STORE_MAX 16

/* What systemd keeps for the unit: descriptors by name. */
struct store {
	int sock; /* $NOTIFY_SOCKET, bound by the test */
	char path[128];
	int fd[STORE_MAX];
	char name[STORE_MAX][256];
	unsigned n;
	unsigned removals;       /* FDSTOREREMOVE=1 received */
	char last_removed[256]; /* the FDNAME of the last of them */
};

static void store_open(struct store *st, const char *dir)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	*st = (struct store){0};
	snprintf(st->path, sizeof(st->path), "%s/notify", dir);
	ck_assert_uint_lt(strlen(st->path), sizeof(sa.sun_path));
	memcpy(sa.sun_path, st->path, strlen(st->path) + 1);
	st->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(st->sock, 0);
	ck_assert_int_eq(bind(st->sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(setenv("NOTIFY_SOCKET", st->path, 1), 0);
}

/* Read every notification waiting: FDSTORE=1 keeps its descriptor under
 * its FDNAME, FDSTOREREMOVE=1 drops those of the name. */
static void store_drain(struct store *st)
{
	char buf[1024];
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * 4)];
	} ctl;

	for (;;) {
		struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf) - 1};
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
				     .msg_controllen = sizeof(ctl.b)};
		ssize_t n = recvmsg(st->sock, &msg, MSG_CMSG_CLOEXEC);
		if (n < 0)
			return;
		buf[n] = '\0';
		int fd = -1;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
				memcpy(&fd, CMSG_DATA(c), sizeof(int));
		const char *name = strstr(buf, "FDNAME=");
		name = name ? name + 7 : "";
		if (strstr(buf, "FDSTORE=1")) {
			ck_assert_int_ge(fd, 0);
			ck_assert_uint_lt(st->n, STORE_MAX);
			st->fd[st->n] = fd;
			snprintf(st->name[st->n], sizeof(st->name[0]), "%.*s", (int)strcspn(name, "\n"), name);
			st->n++;
			continue;
		}
		if (fd >= 0)
			close(fd);
		if (!strstr(buf, "FDSTOREREMOVE=1"))
			continue;
		st->removals++;
		snprintf(st->last_removed, sizeof(st->last_removed), "%.*s", (int)strcspn(name, "\n"), name);
		for (unsigned i = 0; i < st->n; i++)
			if (strncmp(st->name[i], name, strcspn(name, "\n")) == 0 &&
			    st->name[i][strcspn(name, "\n")] == '\0') {
				close(st->fd[i]);
				st->fd[i] = st->fd[--st->n];
				memcpy(st->name[i], st->name[st->n], sizeof(st->name[0]));
				i--;
			}
	}
}

static void store_close(struct store *st)
{
	for (unsigned i = 0; i < st->n; i++)
		close(st->fd[i]);
	close(st->sock);
	unlink(st->path);
	unsetenv("NOTIFY_SOCKET");
}

/* Start pinshmd on d->sock as @p o says, with the store's descriptors, as
 * systemd does (under $PINSHMD_WRAPPER too). */
static void spawn_with_store_opts(struct daemon *d, const struct store *st, const struct daemon_opts *o)
{
	const char *names[STORE_MAX];
	struct daemon_opts with = *o;

	for (unsigned i = 0; i < st->n; i++)
		names[i] = st->name[i];
	with.listen_fds = st->fd;
	with.listen_names = names;
	with.nlisten = st->n;
	daemon_spawn(d, &with);
}

static void spawn_with_store(struct daemon *d, const struct store *st)
{
	spawn_with_store_opts(d, st, &(struct daemon_opts){0});
}

/* A daemon of options @p o (in its folder, store @p st opened there for it
 * to write to), ready.  @return a client of it. */
static pinshm_client_t *store_daemon_start(struct daemon *d, struct store *st, const struct daemon_opts *o)
{
	daemon_prepare(d, o);
	store_open(st, d->dir);
	daemon_spawn(d, o);
	daemon_wait_ready(d);
	return connect_ok(d);
}

struct traffic {
	const char *sock;
	bool reconnect;             /* the children call pinshm_reconnect() as they go */
	_Atomic uint64_t *received; /* shared: messages the consumer checked */
	int stop[2];                /* the producer stops once it closes */
	struct tu_reporter rep;
};

static int traffic_producer(void *arg, int idx)
{
	struct traffic *x = arg;
	pinshm_client_t *c;
	pinshm_channel_t *ch = child_connect_open(x->sock, "used", PINSHM_PRODUCER, &c);
	uint64_t seq = 0;
	char b;

	(void)idx;
	close(x->stop[1]);
	for (;; seq++) {
		if (seq % 256 == 0 && read(x->stop[0], &b, 1) == 0)
			break;
		if (seq % 256 == 0 && x->reconnect)
			pinshm_reconnect(c); /* fails while no daemon runs */
		int rc = pinshm_send(ch, &seq, sizeof(seq), CALL_MS);
		if (rc != 0)
			tu_child_fail(4, "send %llu: %s", (unsigned long long)seq, pinshm_strerror(rc));
	}
	uint64_t end = UINT64_MAX;
	int rc = pinshm_send(ch, &end, sizeof(end), CALL_MS);
	if (rc != 0)
		tu_child_fail(5, "send the end: %s", pinshm_strerror(rc));
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	return 0;
}

static int traffic_consumer(void *arg, int idx)
{
	struct traffic *x = arg;
	pinshm_client_t *c;
	pinshm_channel_t *ch = child_connect_open(x->sock, "used", PINSHM_CONSUMER, &c);
	uint64_t want = 0, got;
	size_t len;

	(void)idx;
	close(x->stop[0]);
	close(x->stop[1]);
	for (;;) {
		int rc = pinshm_recv(ch, &got, sizeof(got), &len, CALL_MS);
		if (rc != 0)
			tu_child_fail(4, "recv after %llu: %s", (unsigned long long)want, pinshm_strerror(rc));
		if (len != sizeof(got))
			tu_child_fail(5, "a message of %zu bytes", len);
		if (got == UINT64_MAX)
			break;
		if (got != want)
			tu_child_fail(6, "message %llu where %llu was due", (unsigned long long)got,
				      (unsigned long long)want);
		if (want % 256 == 0 && x->reconnect)
			pinshm_reconnect(c);
		want++;
		atomic_store_explicit(x->received, want, memory_order_relaxed);
	}
	tu_report_vals(&x->rep, idx, 0, want, 0);
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	return 0;
}

/* Wait until the consumer has checked more than @p than messages. */
static uint64_t wait_progress(struct traffic *x, uint64_t than)
{
	uint64_t deadline = tu_now_ms() + WAIT_MS, n;

	while ((n = atomic_load_explicit(x->received, memory_order_relaxed)) <= than) {
		ck_assert_msg(tu_now_ms() < deadline, "traffic stopped at %llu messages", (unsigned long long)n);
		tu_sleep_ms(5);
	}
	return n;
}

/* Start a producer and a consumer exchanging messages over the channel
 * "used" of the daemon on @p sock (@p reconnect: they hand it back to a
 * restarted daemon).  @return the messages received once some came. */
static uint64_t traffic_start(struct traffic *x, struct tu_procs *ps, const char *sock, bool reconnect)
{
	x->sock = sock;
	x->reconnect = reconnect;
	x->received = mmap(NULL, sizeof(*x->received), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(x->received != MAP_FAILED);
	ck_assert_int_eq(pipe2(x->stop, O_NONBLOCK | O_CLOEXEC), 0);
	tu_reporter_open(&x->rep);
	tu_procs_init(ps);
	tu_spawn(ps, "producer", traffic_producer, x, 0);
	tu_spawn(ps, "consumer", traffic_consumer, x, 1);
	close(x->stop[0]);
	return wait_progress(x, 1000);
}

/*
 * A service manager that does not read its notifications (its queue full:
 * 10 datagrams) costs a create a bounded wait, not the daemon for ever:
 * every channel is made, those past the queue are not kept in the store,
 * and the daemon says so, for a removal too.
 */
START_TEST(test_store_not_read)
{
	struct daemon d;
	struct store st;
	pinshm_channel_attr_t attr;
	char name[16];

	pinshm_client_t *c = store_daemon_start(&d, &st, &(struct daemon_opts){.log = true});
	attr_small(&attr, 1, 1);
	for (int i = 0; i < 12; i++) {
		snprintf(name, sizeof(name), "q%d", i);
		CLIENT_RC(c, pinshm_create(c, name, &attr, 0600, 0), 0);
	}
	ck_assert(daemon_log_has(&d, "not kept in the descriptor store"));
	/* A removal that cannot be sent is said too (the next start would
	 * find the record). */
	CLIENT_RC(c, pinshm_unlink(c, "q0"), 0);
	ck_assert(daemon_log_has(&d, "not removed"));
	store_drain(&st);
	ck_assert_uint_lt(st.n, 12);
	ck_assert_uint_gt(st.n, 0);
	CLIENT_RC(c, pinshm_create(c, "after", &attr, 0600, 0), 0);
	store_drain(&st);
	ck_assert(st.n > 0 && strcmp(st.name[st.n - 1] + strlen(st.name[st.n - 1]) - 6, ".after") == 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	store_close(&st);
}
END_TEST

static unsigned store_count_prefix(const struct store *st, const char *prefix)
{
	unsigned n = 0;

	for (unsigned i = 0; i < st->n; i++)
		n += strncmp(st->name[i], prefix, strlen(prefix)) == 0;
	return n;
}

/* The records in @p st of channel @p name (pinshm.*.NAME). */
static bool str_ends(const char *s, const char *end)
{
	size_t n = strlen(s), k = strlen(end);

	return n >= k && strcmp(s + n - k, end) == 0;
}

static unsigned store_records_of(const struct store *st, const char *name)
{
	size_t n = strlen(name);
	unsigned k = 0;

	for (unsigned i = 0; i < st->n; i++) {
		size_t len = strlen(st->name[i]);
		k += strncmp(st->name[i], "pinshm.", 7) == 0 && len > n && st->name[i][len - n - 1] == '.' &&
		     strcmp(st->name[i] + len - n, name) == 0;
	}
	return k;
}

/* The manager stops reading: its queue filled with datagrams that mean
 * nothing (store_drain() skips them), until the next one would wait. */
static void store_block(struct store *st)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	unsigned n = 0;

	ck_assert_int_ge(s, 0);
	memcpy(sa.sun_path, st->path, strlen(st->path) + 1);
	while (sendto(s, "X_FILL=1", 8, MSG_DONTWAIT, (struct sockaddr *)&sa, sizeof(sa)) == 8)
		n++;
	ck_assert_msg(errno == EAGAIN, "filling the notify socket: %s", strerror(errno));
	ck_assert_uint_gt(n, 0);
	close(s);
}

/* Channel @p name unlinked and gone with its record, then the end. */
static void idle_unlink_and_stop(struct daemon *d, struct store *st, pinshm_client_t *c, const char *name)
{
	CLIENT_RC(c, pinshm_unlink(c, name), 0);
	wait_counts(c, 1, 0);
	store_drain(st);
	ck_assert_uint_eq(st->n, 0);
	pinshm_disconnect(c);
	daemon_stop_ok(d);
	store_close(st);
}

enum { REMOVAL_TICK, REMOVAL_STOP, REMOVAL_SAME_NAME, REMOVAL_EVENTFD, REMOVAL_COUNT };
static const char *const removal_what[REMOVAL_COUNT] = {
	[REMOVAL_TICK] = "sent again by the loop",
	[REMOVAL_STOP] = "sent again at SIGTERM",
	[REMOVAL_SAME_NAME] = "sent before a new channel of the same name",
	[REMOVAL_EVENTFD] = "an eventfd's, before the new eventfd of the endpoint (one FDNAME)",
};

/*
 * A removal from the store given up while the manager does not read (its
 * queue full) is sent again once it reads: by the loop (REMOVAL_TICK), at a
 * clean stop (REMOVAL_STOP: the loop's retries put off for the test), or
 * before the next store notification, in order
 * (REMOVAL_SAME_NAME: "gone" unlinked and created again, mode 0640; the
 * records differ by their inode).  Before, it was only logged, and the next
 * start adopted the unlinked channel again from its record (the one created
 * again under its name was refused, "exists").  REMOVAL_EVENTFD: a consumer
 * leaves and comes back with a new wake-up socket while the queue is full;
 * both records bear one name, so the new one must go after the removal of
 * the old: the store ends with the new socket alone (it kept the old one
 * before).
 */
START_TEST(test_store_removal_resent)
{
	struct daemon d;
	struct store st;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_channel_t *cons = NULL;
	int efd[2] = {-1, -1};
	unsigned slow = pinshmd_wrapper() ? DAEMON_WRAPPER_SLOWDOWN : 1;

	if (_i == REMOVAL_STOP || _i == REMOVAL_SAME_NAME)
		ck_assert_int_eq(setenv("PINSHMD_TEST_STORE_RETRY_MS", "600000", 1), 0);
	else
		unsetenv("PINSHMD_TEST_STORE_RETRY_MS");
	pinshm_client_t *c = store_daemon_start(&d, &st, &(struct daemon_opts){.log = true});
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "kept", &attr, 0600, PINSHM_PERSISTENT), 0);
	CLIENT_RC(c, pinshm_create(c, "gone", &attr, 0600, PINSHM_PERSISTENT), 0);
	if (_i == REMOVAL_EVENTFD) {
		CLIENT_RC(c, pinshm_open(c, "kept", PINSHM_CONSUMER, &cons), 0);
		efd[0] = pinshm_channel_notify_fd(cons);
		ck_assert_int_ge(efd[0], 0);
	}
	store_drain(&st);
	ck_assert_uint_eq(st.n, _i == REMOVAL_EVENTFD ? 3 : 2);

	store_block(&st);
	if (_i == REMOVAL_EVENTFD) {
		/* The consumer leaves and comes back: the same endpoint, so
		 * its new socket's record bears the old one's name. */
		CLIENT_RC(c, pinshm_channel_close(cons), 0);
		CLIENT_RC(c, pinshm_open(c, "kept", PINSHM_CONSUMER, &cons), 0);
		efd[1] = pinshm_channel_notify_fd(cons);
		ck_assert_int_ge(efd[1], 0);
	} else
		CLIENT_RC(c, pinshm_unlink(c, "gone"), 0);
	ck_assert(daemon_log_has(&d, "not removed"));
	store_drain(&st); /* it reads again */
	if (_i != REMOVAL_TICK && _i != REMOVAL_EVENTFD) /* else the loop's retry may have come already */
		ck_assert_uint_eq(st.n, 2);

	if (_i == REMOVAL_TICK || _i == REMOVAL_EVENTFD) {
		/* A retry a second.  The daemon logs a removal after sending it:
		 * wait for both, or the kill below may come between them. */
		uint64_t deadline = tu_now_ms() + 5000u * slow;
		while ((_i == REMOVAL_TICK ? store_records_of(&st, "gone") != 0 || !daemon_log_has(&d, "removed at last")
					   : !daemon_log_has(&d, "kept at last")) &&
		       tu_now_ms() < deadline) {
			tu_sleep_ms(20);
			store_drain(&st);
		}
		store_drain(&st);
	} else if (_i == REMOVAL_SAME_NAME) {
		CLIENT_RC(c, pinshm_create(c, "gone", &attr, 0640, PINSHM_PERSISTENT), 0);
		store_drain(&st);
	}
	if (_i == REMOVAL_EVENTFD) {
		/* One eventfd record, and it is the second eventfd. */
		ck_assert_uint_eq(store_count_prefix(&st, "pinshm-efd."), 1);
		uint64_t v;
		while (read(efd[1], &v, sizeof(v)) == sizeof(v))
			;
		v = 1;
		for (unsigned i = 0; i < st.n; i++)
			if (strncmp(st.name[i], "pinshm-efd.", 11) == 0)
				ck_assert_int_eq(send(st.fd[i], &v, sizeof(v), MSG_DONTWAIT), sizeof(v));
		ck_assert_msg(read(efd[1], &v, sizeof(v)) == sizeof(v), "the store kept the first socket, not the second");
		ck_assert(daemon_log_has(&d, "kept at last"));
		pinshm_channel_close(cons); /* its record goes too */
	}

	if (_i == REMOVAL_STOP) {
		daemon_term_ok(&d); /* sends it before STOPPING=1 */
		store_drain(&st);
	} else {
		daemon_kill9(&d); /* sent already */
	}
	pinshm_disconnect(c);

	spawn_with_store_opts(&d, &st, &(struct daemon_opts){.log = true});
	daemon_wait_ready(&d);
	c = connect_ok(&d);
	ck_assert(list_find(c, "kept", &e, NULL));
	if (_i == REMOVAL_SAME_NAME) {
		ck_assert_msg(list_find(c, "gone", &e, NULL), "the channel created again was not adopted");
		ck_assert_uint_eq(e.mode, 0640);
	} else if (_i != REMOVAL_EVENTFD) {
		ck_assert_msg(!list_find(c, "gone", &e, NULL), "case %d (%s): 'gone', unlinked, adopted again at the restart",
			      _i, removal_what[_i]);
	}
	ck_assert_uint_eq(store_records_of(&st, "gone"), _i == REMOVAL_TICK || _i == REMOVAL_STOP ? 0 : 1);
	ck_assert_uint_eq(store_records_of(&st, "kept"), 1);
	ck_assert_msg(daemon_log_has(&d, "removed at last"),
		      "case %d (%s): no log line of the removal sent again", _i, removal_what[_i]);

	if (_i != REMOVAL_TICK && _i != REMOVAL_STOP)
		CLIENT_RC(c, pinshm_unlink(c, "gone"), 0);
	idle_unlink_and_stop(&d, &st, c, "kept");
	unsetenv("PINSHMD_TEST_STORE_RETRY_MS");
}
END_TEST

#define STORE_PENDING_MAX 64 /* the daemon's FDSTORE_PENDING_MAX */

/*
 * The removals that wait are bounded: with the manager's queue full, 70
 * channels made (none kept in the store) and unlinked; 64 removals wait,
 * the 6 past them are given up and logged; requests are served at once
 * meanwhile (the loop's retries do not wait); once the manager reads, the
 * 64 come, in order, and no more.
 */
START_TEST(test_store_removals_bounded)
{
	struct daemon d;
	struct store st;
	pinshm_channel_attr_t attr;
	char name[16];
	unsigned slow = pinshmd_wrapper() ? DAEMON_WRAPPER_SLOWDOWN : 1;
	enum { N = STORE_PENDING_MAX + 6 };

	ck_assert_int_eq(setenv("PINSHMD_TEST_STORE_RETRY_MS", "100", 1), 0);
	pinshm_client_t *c = store_daemon_start(&d, &st, &(struct daemon_opts){.log = true});
	attr_small(&attr, 1, 1);
	store_drain(&st);
	store_block(&st);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "b%d", i);
		CLIENT_RC(c, pinshm_create(c, name, &attr, 0600, 0), 0);
	}
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "b%d", i);
		CLIENT_RC(c, pinshm_unlink(c, name), 0);
	}
	ck_assert(daemon_log_has(&d, "notifications wait to be sent, the most"));
	/* The daemon serves its clients across several retries (every 100
	 * ms) while the manager still does not read: list_find() fails on the
	 * client's timeout where a listing is not answered.  (No bound by
	 * time: within NOTIFY_BACKOFF_MS of the first send given up, even a
	 * waiting send would not wait.) */
	for (int i = 0; i < 5; i++) {
		tu_sleep_ms(100);
		ck_assert(!list_find(c, "b0", NULL, NULL));
	}

	uint64_t deadline = tu_now_ms() + 10000u * slow;
	do {
		tu_sleep_ms(20);
		store_drain(&st);
	} while ((st.removals < STORE_PENDING_MAX || !daemon_log_has(&d, ".b63' removed at last")) &&
		 tu_now_ms() < deadline); /* logged after it is sent */
	/* The notifications go in order: once the removal of a channel made
	 * and unlinked now comes, no given-up one can follow. */
	ck_assert_uint_eq(st.removals, STORE_PENDING_MAX);
	CLIENT_RC(c, pinshm_create(c, "fence", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_unlink(c, "fence"), 0);
	deadline = tu_now_ms() + 10000u * slow;
	do {
		tu_sleep_ms(20);
		store_drain(&st);
	} while (!str_ends(st.last_removed, ".fence") && tu_now_ms() < deadline);
	ck_assert_msg(str_ends(st.last_removed, ".fence"), "the last removal is of '%s'", st.last_removed);
	ck_assert_uint_eq(st.removals, STORE_PENDING_MAX + 1);
	ck_assert_uint_eq(st.n, 0);
	ck_assert(daemon_log_has(&d, ".b63' removed at last"));
	ck_assert(!daemon_log_has(&d, ".b64' removed at last")); /* given up */
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	store_close(&st);
	unsetenv("PINSHMD_TEST_STORE_RETRY_MS");
}
END_TEST

/*
 * A removal that waits (the manager's queue full) dies with a daemon
 * killed (kill -9): the next start finds the record of a channel unlinked
 * before, and of its consumer's eventfd.  The daemon marks the segment
 * file removed (mode 0) before asking for the removal, so the next start
 * drops both records and does not adopt the channel again.  Before, it
 * came back under its name.
 */
static unsigned store_find_channel(const struct store *st, const char *name);

START_TEST(test_store_removal_lost)
{
	struct daemon d;
	struct store st;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_channel_t *cons = NULL;
	struct stat sb;

	/* No retry by the loop before the kill. */
	ck_assert_int_eq(setenv("PINSHMD_TEST_STORE_RETRY_MS", "600000", 1), 0);
	pinshm_client_t *c = store_daemon_start(&d, &st, &(struct daemon_opts){.log = true});
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "kept", &attr, 0600, PINSHM_PERSISTENT), 0);
	CLIENT_RC(c, pinshm_create(c, "gone", &attr, 0600, PINSHM_PERSISTENT), 0);
	CLIENT_RC(c, pinshm_open(c, "gone", PINSHM_CONSUMER, &cons), 0);
	ck_assert_int_ge(pinshm_channel_notify_fd(cons), 0);
	store_drain(&st);
	ck_assert_uint_eq(st.n, 3);

	store_block(&st);
	CLIENT_RC(c, pinshm_unlink(c, "gone"), 0); /* still open: it lives on */
	ck_assert(daemon_log_has(&d, "not removed"));
	daemon_kill9(&d);
	pinshm_channel_close(cons);
	pinshm_disconnect(c);
	store_drain(&st);
	ck_assert_uint_eq(st.removals, 0);
	ck_assert_uint_eq(store_records_of(&st, "gone"), 1);
	ck_assert_uint_eq(store_count_prefix(&st, "pinshm-efd."), 1);
	unsigned i = store_find_channel(&st, "gone");
	ck_assert_int_eq(fstat(st.fd[i], &sb), 0);
	ck_assert_msg((sb.st_mode & 07777) == 0, "the segment of 'gone' has mode %o, not 0 (removed)",
		      (unsigned)(sb.st_mode & 07777));
	i = store_find_channel(&st, "kept");
	ck_assert_int_eq(fstat(st.fd[i], &sb), 0);
	ck_assert_uint_ne(sb.st_mode & 07777, 0);

	spawn_with_store_opts(&d, &st, &(struct daemon_opts){.log = true});
	daemon_wait_ready(&d);
	c = connect_ok(&d);
	ck_assert(list_find(c, "kept", &e, NULL));
	ck_assert_msg(!list_find(c, "gone", &e, NULL), "'gone', unlinked, adopted again at the restart");
	ck_assert(daemon_log_has(&d, "'gone' was unlinked before the last stop"));
	store_drain(&st);
	ck_assert_uint_eq(store_records_of(&st, "gone"), 0);
	ck_assert_uint_eq(store_count_prefix(&st, "pinshm-efd."), 0);
	ck_assert_uint_eq(store_records_of(&st, "kept"), 1);

	idle_unlink_and_stop(&d, &st, c, "kept");
	unsetenv("PINSHMD_TEST_STORE_RETRY_MS");
}
END_TEST

/*
 * Only a segment the daemon stored is marked removed at its unlink: one a
 * client hands back (HANDBACK) may be any file it could open, another user's
 * too, and its mode is not the daemon's to change.  A channel stored by
 * the first daemon, killed; the second, in service mode too, does not get
 * the store back, so the client hands the channel back; its unlink leaves
 * the file's mode as it was.
 */
START_TEST(test_store_unlink_handed_back)
{
	struct daemon d;
	struct store st;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_channel_t *prod = NULL;
	struct stat sb;

	pinshm_client_t *c = store_daemon_start(&d, &st, &(struct daemon_opts){.log = true});
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "back", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_open(c, "back", PINSHM_PRODUCER, &prod), 0);
	store_drain(&st);
	unsigned i = store_find_channel(&st, "back");
	ck_assert_int_eq(fstat(st.fd[i], &sb), 0);
	unsigned mode = sb.st_mode & 07777;
	ck_assert_uint_ne(mode, 0);

	daemon_kill9(&d);
	daemon_spawn(&d, &(struct daemon_opts){.log = true}); /* NOTIFY_SOCKET set: service mode */
	daemon_wait_ready(&d);
	uint64_t deadline = tu_now_ms() + 20000;
	while (!list_find(c, "back", &e, NULL) && tu_now_ms() < deadline)
		tu_sleep_ms(20);
	ck_assert_msg(list_find(c, "back", &e, NULL), "the channel was not handed back");
	CLIENT_RC(c, pinshm_unlink(c, "back"), 0);
	ck_assert_int_eq(fstat(st.fd[i], &sb), 0);
	ck_assert_msg((sb.st_mode & 07777) == mode, "a handed-back segment's mode went from %o to %o at its unlink",
		      mode, (unsigned)(sb.st_mode & 07777));

	pinshm_channel_close(prod);
	wait_counts(c, 1, 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	store_close(&st);
}
END_TEST

/*
 * A segment of the shm backend (no memfd) has mode 0600 whatever the
 * daemon's umask: a umask that clears it (a unit's UMask=0077 leaves 0600;
 * 0777 here) would otherwise make it look removed (mode 0), and the next
 * start would drop its record.
 */
START_TEST(test_store_shm_mode_umask)
{
	struct daemon d;
	struct store st;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	struct stat sb;

	const struct daemon_opts o = {.log = true};
	daemon_prepare(&d, &o);
	store_open(&st, d.dir);
	ck_assert_int_eq(setenv("PINSHMD_TEST_NO_MEMFD", "1", 1), 0);
	mode_t old = umask(0777); /* the daemon's, inherited */
	daemon_spawn(&d, &o);
	umask(old);
	unsetenv("PINSHMD_TEST_NO_MEMFD");
	daemon_wait_ready(&d);
	pinshm_client_t *c = connect_ok(&d);
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "kept", &attr, 0600, PINSHM_PERSISTENT), 0);
	store_drain(&st);
	ck_assert_int_eq(fstat(st.fd[store_find_channel(&st, "kept")], &sb), 0);
	ck_assert_msg((sb.st_mode & 07777) == 0600, "an shm segment of mode %o", (unsigned)(sb.st_mode & 07777));

	daemon_stop_ok(&d);
	pinshm_disconnect(c);
	spawn_with_store_opts(&d, &st, &o);
	daemon_wait_ready(&d);
	c = connect_ok(&d);
	ck_assert_msg(list_find(c, "kept", &e, NULL), "the shm segment was not adopted again");
	idle_unlink_and_stop(&d, &st, c, "kept");
}
END_TEST

START_TEST(test_restart_fdstore)
{
	struct daemon d;
	struct store st;
	struct traffic x;
	struct tu_procs ps;
	struct tu_report r;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_status_t s;

	ck_assert_int_eq(setenv("PINSHMD_TEST_ADOPT_GRACE_MS", "1000", 1), 0);
	pinshm_client_t *c = store_daemon_start(&d, &st, &(struct daemon_opts){0});
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "kept", &attr, 0640, PINSHM_PERSISTENT), 0);
	CLIENT_RC(c, pinshm_create(c, "used", &attr, 0600, 0), 0);
	ck_assert(list_find(c, "used", &e, NULL));
	uint64_t size = e.size;
	bool pinned = e.state & PINSHM_LIST_PINNED;

	uint64_t before = traffic_start(&x, &ps, d.sock, false);

	store_drain(&st);
	ck_assert_uint_eq(st.n, 2);
	daemon_kill9(&d);
	pinshm_disconnect(c);
	uint64_t during = wait_progress(&x, before); /* no daemon: the channel works on */

	spawn_with_store(&d, &st);
	daemon_wait_ready(&d);
	c = connect_ok(&d);
	ck_assert(list_find(c, "kept", &e, NULL));
	ck_assert_uint_eq(e.mode, 0640);
	ck_assert_uint_eq(e.uid, getuid());
	ck_assert(e.state & PINSHM_LIST_PERSISTENT);
	ck_assert(list_find(c, "used", &e, NULL));
	ck_assert_uint_eq(e.producers, 1); /* as the segment says */
	ck_assert_uint_eq(e.consumers, 1);
	ck_assert_uint_eq(e.size, size);
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	if (pinned) {
		ck_assert(e.state & PINSHM_LIST_PINNED);
		ck_assert_uint_eq(s.pinned, 2 * size);
		ck_assert_int_ge(proc_status_value_kb(d.pid, "VmLck:"), (long)(2 * size / 1024));
	}
	pinshm_client_t *c2 = connect_ok(&d); /* new requests are served */
	CLIENT_RC(c2, pinshm_create(c2, "after", &attr, 0600, PINSHM_PERSISTENT), 0);
	pinshm_disconnect(c2);
	wait_progress(&x, during);

	close(x.stop[1]); /* the producer ends; the consumer checked every message */
	TU_RC(tu_collect(&x.rep, &r, WAIT_MS), 0);
	ck_assert_uint_gt(r.v[0], during);
	tu_wait_all_ok(&ps, WAIT_MS);

	/* Nothing left: "used" goes with its grace, the others when unlinked. */
	CLIENT_RC(c, pinshm_unlink(c, "kept"), 0);
	CLIENT_RC(c, pinshm_unlink(c, "after"), 0);
	wait_counts(c, 1, 0);
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	ck_assert_uint_eq(s.pinned, 0);
	ck_assert_int_eq(daemon_locked_kb_at_most(d.pid, 0), 0);
	store_drain(&st);
	ck_assert_uint_eq(st.n, 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	store_close(&st);
	tu_reporter_close(&x.rep);
}
END_TEST

/* The daemon killed again and again while two processes exchange
 * messages (issue 5: "kill -9 of the daemon itself, repeatedly"): traffic
 * goes on throughout, every new daemon gets the channel handed back, locked
 * and charged once, serves a new request, and the last one, once the
 * processes are gone, holds nothing. */
#define RESTARTS 5

static uint32_t endpoints_claimed(pinshm_client_t *c)
{
	pinshm_client_info_t *info;
	size_t n;
	uint32_t endpoints = 0;

	CLIENT_RC(c, pinshm_clients(c, &info, &n), 0);
	for (size_t i = 0; i < n; i++)
		endpoints += info[i].endpoints;
	free(info);
	return endpoints;
}

/* A daemon that is killed and restarted while two processes use its channel "used". */
struct restart {
	struct daemon d;
	long lck0;          /* the daemon's VmLck before any channel, kB */
	pinshm_client_t *c; /* it created "used" (persistent, mode 0640) */
	uint64_t size;      /* of "used", as first listed */
	bool pinned;        /* "used" was pinned */
};

static void restart_start(struct restart *t)
{
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;

	unsetenv("NOTIFY_SOCKET");
	daemon_start(&t->d);
	t->lck0 = proc_status_value_kb(t->d.pid, "VmLck:");
	t->c = connect_ok(&t->d);
	attr_small(&attr, 1, 1);
	CLIENT_RC(t->c, pinshm_create(t->c, "used", &attr, 0640, PINSHM_PERSISTENT), 0);
	ck_assert(list_find(t->c, "used", &e, NULL));
	t->size = e.size;
	t->pinned = e.state & PINSHM_LIST_PINNED;
}

/* The restarted daemon holds "used" (listed as @p e) once: one channel, of
 * its size, charged once and pinned as before; it serves a new request. */
static void restart_check_adopted(struct restart *t, const pinshm_list_entry_t *e)
{
	pinshm_channel_attr_t attr;
	pinshm_status_t s;

	ck_assert_uint_eq(e->size, t->size);
	CLIENT_RC(t->c, pinshm_status(t->c, &s, NULL, NULL), 0);
	ck_assert_uint_eq(s.channels_pinned + s.channels_unpinned, 1);
	if (t->pinned) {
		ck_assert(e->state & PINSHM_LIST_PINNED);
		ck_assert_uint_eq(s.pinned, t->size);
	}
	attr_small(&attr, 1, 1);
	CLIENT_RC(t->c, pinshm_create(t->c, "after", &attr, 0600, 0), 0);
	CLIENT_RC(t->c, pinshm_unlink(t->c, "after"), 0);
}

/* Stop the traffic (its consumer checked more than @p received messages);
 * once its processes are gone the daemon holds nothing and has unlocked
 * what it locked.  Then stop the daemon. */
static void restart_finish(struct restart *t, struct traffic *x, struct tu_procs *ps, uint64_t received)
{
	struct tu_report r;

	close(x->stop[1]);
	TU_RC(tu_collect(&x->rep, &r, WAIT_MS), 0);
	ck_assert_uint_gt(r.v[0], received);
	tu_wait_all_ok(ps, WAIT_MS);
	pinshm_disconnect(t->c);
	t->c = connect_ok(&t->d);
	assert_holds_nothing(&t->d, t->c, t->lck0);
	pinshm_disconnect(t->c);
	daemon_stop_ok(&t->d);
	tu_reporter_close(&x->rep);
}

START_TEST(test_restart_repeatedly)
{
	struct restart t;
	struct traffic x;
	struct tu_procs ps;
	pinshm_list_entry_t e;

	restart_start(&t);
	uint64_t seen = traffic_start(&x, &ps, t.d.sock, true);

	for (int round = 0; round < RESTARTS; round++) {
		daemon_kill9(&t.d);
		seen = wait_progress(&x, seen); /* no daemon: the channel works on */
		daemon_spawn(&t.d, &(struct daemon_opts){0});
		daemon_wait_ready(&t.d);
		uint64_t deadline = tu_now_ms() + 20000;
		while (!(list_find(t.c, "used", &e, NULL) && endpoints_claimed(t.c) == 2) && tu_now_ms() < deadline)
			tu_sleep_ms(20);
		ck_assert_msg(list_find(t.c, "used", &e, NULL), "restart %d: the channel was not handed back", round);
		ck_assert_uint_eq(endpoints_claimed(t.c), 2);
		restart_check_adopted(&t, &e);
		seen = wait_progress(&x, seen);
	}
	restart_finish(&t, &x, &ps, seen - 1);
}
END_TEST

/* Without a descriptor store: the two processes hand their segment back
 * to the new daemon as they reconnect.  The channel is adopted once (the
 * same segment from both), named again, owned by their user with mode
 * 0600 (what the daemon can trust), locked and charged; both endpoints are
 * claimed again, so that their closes and exits leave nothing behind. */
START_TEST(test_restart_handback)
{
	struct restart t;
	struct traffic x;
	struct tu_procs ps;
	pinshm_list_entry_t e;

	restart_start(&t);
	uint64_t before = traffic_start(&x, &ps, t.d.sock, true);

	daemon_kill9(&t.d);
	uint64_t during = wait_progress(&x, before); /* no daemon: the channel works on */

	daemon_spawn(&t.d, &(struct daemon_opts){0});
	daemon_wait_ready(&t.d);
	/* c reconnects by itself (it has nothing to hand back). */
	uint64_t deadline = tu_now_ms() + 20000;
	while (!list_find(t.c, "used", &e, NULL) && tu_now_ms() < deadline)
		tu_sleep_ms(20);
	ck_assert_msg(list_find(t.c, "used", &e, NULL), "the channel was not handed back");
	ck_assert_uint_eq(e.mode, 0600);
	ck_assert_uint_eq(e.uid, getuid());
	ck_assert(!(e.state & PINSHM_LIST_PERSISTENT));
	/* Both endpoints claimed again, by the two connections. */
	deadline = tu_now_ms() + 20000;
	while (endpoints_claimed(t.c) != 2 && tu_now_ms() < deadline)
		tu_sleep_ms(20);
	ck_assert_uint_eq(endpoints_claimed(t.c), 2);
	restart_check_adopted(&t, &e); /* one channel for the two hand-backs */
	if (t.pinned)
		ck_assert_int_ge(proc_status_value_kb(t.d.pid, "VmLck:"), (long)(t.size / 1024));
	wait_progress(&x, during);
	/* "used" goes with its last user, "after" went with c's old connection */
	restart_finish(&t, &x, &ps, during);
}
END_TEST

/*
 * Endpoints whose processes die while no daemon runs (issue 3: peers get
 * -EPIPE, not a wait for ever).  A producer and a consumer (the test
 * process) use the queue "gone"; the daemon is killed (or stopped); then:
 * - REAP_DIED: the producer is killed -9 before the daemon restarts: the
 *   restarted daemon, as it adopts the channel, reaps its endpoint;
 * - REAP_REUSED: the same, and the producer's pid in the segment is then
 *   that of another live process (a pid reused): reaped all the same;
 * - REAP_LATER: the producer lives on and never hands the channel back:
 *   its endpoint is kept, the channel too after the adoption's grace, and
 *   the daemon reaps it when the producer is killed later.
 * Either way the consumer gets -EPIPE, a new producer takes the endpoint
 * and its message comes through, and once all are gone nothing is left.
 */
enum reap_case { REAP_DIED, REAP_REUSED, REAP_LATER };

struct reap_opts {
	bool store;  /* the daemon adopts from the descriptor store at its start (the consumer
		      * never reconnects); else the consumer hands the channel back */
	bool nested; /* the producer runs in a PID namespace of its own (pid 1 there, the pid it
		      * records in the segment) */
	bool term;   /* the daemon is stopped with SIGTERM, not killed */
	bool eventfd; /* the consumer waits on its eventfd (armed) instead of in pinshm_recv() */
};

#define REAP_GRACE_MS 1000 /* PINSHMD_TEST_ADOPT_GRACE_MS */
#define REAP_MS 10000      /* for -EPIPE once the daemon can know (longer under a wrapper) */

struct reap_producer_args {
	const char *sock;
	bool nested;
};

static int reap_producer(void *arg, int idx)
{
	const struct reap_producer_args *a = arg;
	pinshm_client_t *c;

	(void)idx;
	if (a->nested) {
		if (unshare(CLONE_NEWPID) != 0)
			tu_child_fail(2, "unshare(CLONE_NEWPID): %s", strerror(errno));
		pid_t g = fork(); /* pid 1 of the new namespace */
		if (g < 0)
			tu_child_fail(3, "fork: %s", strerror(errno));
		if (g > 0) {
			int st;
			while (waitpid(g, &st, 0) < 0 && errno == EINTR)
				;
			return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
		}
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* killed with the producer's first process */
		if (getpid() != 1)
			tu_child_fail(4, "pid %d in a new PID namespace", (int)getpid());
	}
	child_open_send_first(a->sock, "gone", CALL_MS, &c);
	return child_sleep_until_killed(WAIT_MS); /* never hands the channel back */
}

/* Whether this process may make a PID namespace (root, and not refused). */
static bool pid_namespaces_here(void)
{
	int st;
	pid_t p = fork();

	ck_assert_int_ge(p, 0);
	if (p == 0)
		_exit(unshare(CLONE_NEWPID) == 0 ? 0 : 1);
	ck_assert_int_eq(waitpid(p, &st, 0), p);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int reap_sleeper(void *arg, int idx)
{
	(void)arg;
	(void)idx;
	return child_sleep_until_killed(WAIT_MS);
}

/* Mark endpoint @p i of the segment @p fd attached (the endpoints follow
 * the segment's header) with pid @p pid, as a process could. */
static void set_endpoint(int fd, unsigned i, uint32_t pid)
{
	size_t len = sizeof(struct seg_header) + (i + 1) * sizeof(struct endpoint);
	uint8_t *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	ck_assert(base != MAP_FAILED);
	struct endpoint *ep = (struct endpoint *)(base + sizeof(struct seg_header)) + i;
	atomic_store(&ep->state, EP_ACTIVE);
	atomic_store(&ep->pid, pid);
	munmap(base, len);
}

static void kill_child(struct tu_procs *ps, int i)
{
	ck_assert_int_eq(kill(ps->pid[i], SIGKILL), 0);
	TU_RC(tu_wait_one(ps, i, WAIT_MS), 0);
}

/* Nothing for @p cons yet (a short wait ends empty); with eventfd @p efd
 * (not -1), cleared (a wake-up for nothing: the hand-back's NOTIFY wakes
 * an armed consumer) and armed again after it, to sleep on @p efd. */
static void reap_nothing_yet(pinshm_channel_t *cons, int efd)
{
	char buf[16];
	size_t len;
	uint64_t n;

	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, 200), -ETIMEDOUT);
	if (efd >= 0) {
		ck_assert(read(efd, &n, sizeof(n)) == sizeof(n) || errno == EAGAIN);
		TU_RC(pinshm_channel_arm(cons), 0);
	}
}

/* Wait up to @p ms for eventfd @p efd of an armed consumer to be written,
 * once (one write per arming), and clear it. */
static void reap_woken(int efd, int ms, const char *by)
{
	struct pollfd p = {.fd = efd, .events = POLLIN};
	uint64_t n = 0;

	ck_assert_msg(poll(&p, 1, ms) == 1, "the armed consumer's eventfd was not written in %d ms (%s)", ms, by);
	ck_assert_int_eq(read(efd, &n, sizeof(n)), sizeof(n));
	ck_assert_uint_eq(n, 1);
}

static void reap_scenario(enum reap_case how, struct reap_opts o)
{
	struct daemon d;
	struct store st;
	struct tu_procs ps;
	pinshm_channel_t *cons, *prod;
	pinshm_list_entry_t e;
	char buf[16], grace[16];
	size_t len;
	bool store = o.store;

	snprintf(grace, sizeof(grace), "%d", REAP_GRACE_MS);
	ck_assert_int_eq(setenv("PINSHMD_TEST_ADOPT_GRACE_MS", grace, 1), 0);
	daemon_prepare(&d, &(struct daemon_opts){0});
	if (store)
		store_open(&st, d.dir);
	else
		unsetenv("NOTIFY_SOCKET");
	daemon_spawn(&d, &(struct daemon_opts){0});
	daemon_wait_ready(&d);
	tu_procs_init(&ps);
	/* Forked before the test maps the channel: it does not map it. */
	int sleeper = how == REAP_REUSED ? tu_spawn(&ps, "sleeper", reap_sleeper, NULL, 1) : -1;
	pinshm_client_t *cc = connect_create_small(&d, "gone");
	CLIENT_RC(cc, pinshm_open(cc, "gone", PINSHM_CONSUMER, &cons), 0);
	struct reap_producer_args pa = {.sock = d.sock, .nested = o.nested};
	int producer = tu_spawn(&ps, "producer", reap_producer, &pa, 0);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert(len == 5 && memcmp(buf, "first", 5) == 0);
	int efd = -1;
	if (o.eventfd) {
		efd = pinshm_channel_notify_fd(cons);
		ck_assert_int_ge(efd, 0);
	}
	if (store) {
		store_drain(&st);
		ck_assert_uint_eq(st.n, (o.eventfd ? 2u : 1u)); /* the segment, the consumer's eventfd */
	}

	if (o.term) {
		ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
		int status = daemon_wait_exit(&d, DAEMON_STOP_MS * (pinshmd_wrapper() ? DAEMON_WRAPPER_SLOWDOWN : 1));
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "pinshmd: status %#x at SIGTERM", status);
	} else {
		daemon_kill9(&d);
	}
	if (how != REAP_LATER)
		kill_child(&ps, producer);
	if (how == REAP_REUSED)
		set_endpoint(st.fd[0], 0, (uint32_t)ps.pid[sleeper]);
	/* No daemon: nobody reaps, the consumer's waits end empty. */
	reap_nothing_yet(cons, efd);

	if (store)
		spawn_with_store(&d, &st);
	else
		daemon_spawn(&d, &(struct daemon_opts){0});
	daemon_wait_ready(&d);
	pinshm_client_t *c = connect_ok(&d);
	if (!store)
		CLIENT_RC(cc, pinshm_reconnect(cc), 0); /* hands "gone" back */
	if (how == REAP_LATER) {
		/* Past the grace: kept for its live processes, watched without a busy loop. */
		daemon_assert_idle(&d, REAP_GRACE_MS + 500, "while it watches the processes of an adopted channel");
		ck_assert_msg(list_find(c, "gone", &e, NULL), "a channel of live processes went with the grace");
		ck_assert_uint_eq(e.producers, 1);
		reap_nothing_yet(cons, efd);
		kill_child(&ps, producer);
	}
	uint64_t t0 = tu_now_ms();
	int reap_ms = REAP_MS * (pinshmd_wrapper() ? DAEMON_WRAPPER_SLOWDOWN : 1);
	if (efd >= 0) {
		reap_woken(efd, reap_ms, "its producer reaped");
		TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, PINSHM_NONBLOCK), -EPIPE);
	} else {
		TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, reap_ms), -EPIPE);
	}
	printf("reap %d%s%s%s%s: -EPIPE %llu ms after the %s\n", (int)how, store ? " (store)" : " (hand-back)",
	       o.nested ? " (nested)" : "", o.term ? " (SIGTERM)" : "", efd >= 0 ? " (eventfd)" : "",
	       (unsigned long long)(tu_now_ms() - t0), how == REAP_LATER ? "kill" : "restart");
	ck_assert(list_find(c, "gone", &e, NULL));
	ck_assert_uint_eq(e.producers, 0);
	ck_assert_uint_eq(e.consumers, 1);

	/* The endpoint is free again: a new producer's message comes through. */
	CLIENT_RC(c, pinshm_open(c, "gone", PINSHM_PRODUCER, &prod), 0);
	if (efd >= 0)
		TU_RC(pinshm_channel_arm(cons), 0); /* woken by the new producer (PEER) */
	TU_RC(pinshm_send(prod, "second", 6, CALL_MS), 0);
	if (efd >= 0)
		reap_woken(efd, CALL_MS, "a new producer's message");
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, efd >= 0 ? PINSHM_NONBLOCK : CALL_MS), 0);
	ck_assert(len == 6 && memcmp(buf, "second", 6) == 0);

	pinshm_channel_close(prod);
	pinshm_channel_close(cons);
	pinshm_disconnect(cc);
	tu_kill_all(&ps);
	wait_counts(c, 1, 0); /* "gone" went with its last user */
	pinshm_status_t s;
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	ck_assert_uint_eq(s.pinned, 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	if (store) {
		store_drain(&st);
		ck_assert_uint_eq(st.n, 0);
		store_close(&st);
	}
}

START_TEST(test_reap_died_store)
{
	reap_scenario(REAP_DIED, (struct reap_opts){.store = true});
}
END_TEST

START_TEST(test_reap_died_handback)
{
	reap_scenario(REAP_DIED, (struct reap_opts){0});
}
END_TEST

START_TEST(test_reap_reused_pid)
{
	reap_scenario(REAP_REUSED, (struct reap_opts){.store = true});
}
END_TEST

START_TEST(test_reap_later_store)
{
	reap_scenario(REAP_LATER, (struct reap_opts){.store = true});
}
END_TEST

START_TEST(test_reap_later_handback)
{
	reap_scenario(REAP_LATER, (struct reap_opts){0});
}
END_TEST

/* The daemon stopped cleanly (SIGTERM) rather than killed: the same. */
START_TEST(test_reap_died_term)
{
	reap_scenario(REAP_DIED, (struct reap_opts){.store = true, .term = true});
}
END_TEST

/*
 * A consumer in an event loop (armed on its eventfd, which it gave the
 * daemon with NOTIFY) hands the channel back: the new daemon learns its
 * eventfd again (the client's NOTIFY after the hand-back) and writes it as
 * it reaps the producer that died while no daemon ran, or later when it
 * dies; a new producer's message wakes it too (PEER).
 */
START_TEST(test_reap_died_handback_eventfd)
{
	reap_scenario(REAP_DIED, (struct reap_opts){.eventfd = true});
}
END_TEST

START_TEST(test_reap_later_handback_eventfd)
{
	reap_scenario(REAP_LATER, (struct reap_opts){.eventfd = true});
}
END_TEST

/* The same with the descriptor store, the consumer never reconnecting:
 * its eventfd is kept in the store with the segment, and the restarted
 * daemon has it back before it reaps; once the channel goes, the store
 * holds neither. */
START_TEST(test_reap_died_store_eventfd)
{
	reap_scenario(REAP_DIED, (struct reap_opts){.store = true, .eventfd = true});
}
END_TEST

START_TEST(test_reap_later_store_eventfd)
{
	reap_scenario(REAP_LATER, (struct reap_opts){.store = true, .eventfd = true});
}
END_TEST

/* Add eventfd @p efd (a duplicate) to the store as @p name, as a hostile
 * or older record would stand there. */
static void store_add(struct store *st, const char *name, int efd)
{
	ck_assert_uint_lt(st->n, STORE_MAX);
	st->fd[st->n] = fcntl(efd, F_DUPFD_CLOEXEC, 0);
	ck_assert_int_ge(st->fd[st->n], 0);
	snprintf(st->name[st->n], sizeof(st->name[0]), "%s", name);
	st->n++;
}

/*
 * Eventfd records name their channel exactly (review finding: they named
 * the segment's inode only, so a file of the same inode number on another
 * device, handed back by another user, took a victim's wake-ups after a
 * restart).  Two channels' consumers give eventfds; beside their records
 * the store holds a record of the old form naming "a"'s inode, one of the
 * right form on another device, and one naming no channel.  After the
 * restart the forged ones are closed and out of the store, and each
 * producer's message wakes its own consumer's eventfd and no other.
 */
START_TEST(test_restart_store_eventfd_exact)
{
	struct daemon d;
	struct store st;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *cons[2], *prod;
	const char *names[2] = {"a", "b"};
	int efd[2], forged[2]; /* a socket pair's sending end given to the store under false names */
	char buf[16], rec[256];
	size_t len;
	struct stat sa = {0};

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, forged), 0);
	ck_assert_int_eq(setenv("PINSHMD_TEST_ADOPT_GRACE_MS", "300", 1), 0);
	pinshm_client_t *cc = store_daemon_start(&d, &st, &(struct daemon_opts){0});
	attr_small(&attr, 1, 1);
	for (int i = 0; i < 2; i++) {
		CLIENT_RC(cc, pinshm_create(cc, names[i], &attr, 0600, PINSHM_PERSISTENT), 0);
		CLIENT_RC(cc, pinshm_open(cc, names[i], PINSHM_CONSUMER, &cons[i]), 0);
		efd[i] = pinshm_channel_notify_fd(cons[i]);
		ck_assert_int_ge(efd[i], 0);
	}
	store_drain(&st);
	ck_assert_uint_eq(st.n, 4);
	ck_assert_uint_eq(store_count_prefix(&st, "pinshm-efd."), 2);
	for (unsigned i = 0; i < st.n; i++)
		if (strncmp(st.name[i], "pinshm.", 7) == 0 && strcmp(strrchr(st.name[i], '.'), ".a") == 0)
			ck_assert_int_eq(fstat(st.fd[i], &sa), 0);
	ck_assert_uint_ne(sa.st_ino, 0);
	snprintf(rec, sizeof(rec), "pinshm-efd.1.%llu.1", (unsigned long long)sa.st_ino);
	store_add(&st, rec, forged[1]);
	snprintf(rec, sizeof(rec), "pinshm-efd.2.%llu.%llu.1.a", (unsigned long long)sa.st_dev + 1,
		 (unsigned long long)sa.st_ino);
	store_add(&st, rec, forged[1]);
	snprintf(rec, sizeof(rec), "pinshm-efd.2.%llu.%llu.1.nochannel", (unsigned long long)sa.st_dev,
		 (unsigned long long)sa.st_ino);
	store_add(&st, rec, forged[1]);

	daemon_kill9(&d);
	spawn_with_store(&d, &st);
	daemon_wait_ready(&d);
	pinshm_client_t *c = connect_ok(&d);
	store_drain(&st);
	ck_assert_msg(st.n == 4, "the store holds %u records after the restart, not 4", st.n);
	ck_assert_uint_eq(store_count_prefix(&st, "pinshm-efd.2."), 2);
	for (int i = 0; i < 2; i++) {
		TU_RC(pinshm_channel_arm(cons[i]), 0);
		CLIENT_RC(c, pinshm_open(c, names[i], PINSHM_PRODUCER, &prod), 0);
		TU_RC(pinshm_send(prod, "m", 1, CALL_MS), 0);
		ck_assert_msg(tu_efd_written(efd[i], CALL_MS), "'%s': its consumer's eventfd not written", names[i]);
		ck_assert_msg(!tu_efd_written(efd[1 - i], 0), "'%s': the other consumer's eventfd written", names[i]);
		ck_assert_msg(!tu_efd_written(forged[0], 0), "'%s': a forged record's socket woken", names[i]);
		TU_RC(pinshm_recv(cons[i], buf, sizeof(buf), &len, PINSHM_NONBLOCK), 0);
		pinshm_channel_close(prod);
	}
	for (int i = 0; i < 2; i++) {
		pinshm_channel_close(cons[i]);
		CLIENT_RC(c, pinshm_unlink(c, names[i]), 0);
	}
	close(forged[0]);
	close(forged[1]);
	pinshm_disconnect(cc);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	store_drain(&st);
	ck_assert_uint_eq(st.n, 0);
	store_close(&st);
}
END_TEST

/*
 * A channel handed back by a client is not in the store (its owner, mode
 * and name are the client's word), so neither is its consumer's eventfd:
 * it was, alone, and a second restart dropped it (review finding).  The
 * eventfd still works for the daemon (a producer's message wakes it).
 */
START_TEST(test_handback_eventfd_not_stored)
{
	struct daemon d;
	struct store st;
	pinshm_channel_t *cons, *prod;
	pinshm_status_t s;
	char buf[16];
	size_t len;

	ck_assert_int_eq(setenv("PINSHMD_TEST_ADOPT_GRACE_MS", "300", 1), 0);
	unsetenv("NOTIFY_SOCKET");
	daemon_prepare(&d, &(struct daemon_opts){0});
	daemon_spawn(&d, &(struct daemon_opts){0});
	daemon_wait_ready(&d);
	pinshm_client_t *cc = connect_create_small(&d, "h");
	CLIENT_RC(cc, pinshm_open(cc, "h", PINSHM_CONSUMER, &cons), 0);
	int efd = pinshm_channel_notify_fd(cons);
	ck_assert_int_ge(efd, 0);

	daemon_kill9(&d);
	store_open(&st, d.dir); /* the next daemon runs with a store */
	daemon_spawn(&d, &(struct daemon_opts){0});
	daemon_wait_ready(&d);
	CLIENT_RC(cc, pinshm_reconnect(cc), 0); /* hands "h" back, and NOTIFY */
	CLIENT_RC(cc, pinshm_status(cc, &s, NULL, NULL), 0);
	store_drain(&st);
	ck_assert_msg(st.n == 0, "the store holds %u records of a handed-back channel (%s)", st.n,
		      st.n ? st.name[0] : "");

	(void)tu_efd_written(efd, 0); /* the hand-back's NOTIFY may wake it, for nothing */
	TU_RC(pinshm_channel_arm(cons), 0);
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_open(c, "h", PINSHM_PRODUCER, &prod), 0);
	TU_RC(pinshm_send(prod, "m", 1, CALL_MS), 0);
	ck_assert(tu_efd_written(efd, CALL_MS));
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, PINSHM_NONBLOCK), 0);
	pinshm_channel_close(prod);
	pinshm_channel_close(cons);
	pinshm_disconnect(cc);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	store_drain(&st);
	ck_assert_uint_eq(st.n, 0);
	store_close(&st);
}
END_TEST

/* A producer in a container (a PID namespace of its own, where it is pid
 * 1) is not taken for gone: the daemon finds it by its nested pid. */
START_TEST(test_reap_later_nested)
{
	if (!pid_namespaces_here()) {
		fprintf(stderr, "note: no PID namespaces here (root needed): the nested producer test is skipped\n");
		return;
	}
	reap_scenario(REAP_LATER, (struct reap_opts){.store = true, .nested = true});
}
END_TEST

/* A raw connection to @p d that has said HELLO. */
static int raw_hello(const struct daemon *d)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct proto_msg m = {.h.type = PROTO_HELLO, .h.seq = 1};
	uint8_t buf[PROTO_MAX_PACKET];

	ck_assert_int_ge(fd, 0);
	ck_assert_uint_lt(strlen(d->sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, d->sock, strlen(d->sock) + 1);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	m.u.hello.version = PROTO_VERSION;
	int len = proto_encode(&m, buf);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(fdpass_send(fd, buf, (size_t)len, NULL, 0, 0), 0);
	unsigned nfds;
	ck_assert_int_gt(fdpass_recv(fd, buf, sizeof(buf), NULL, 0, &nfds, 0), 0);
	return fd;
}

/*
 * Send a HANDBACK of @p name with geometry @p attr, endpoint @p endpoint of
 * @p role, and @p nfds copies of @p seg; receive the reply into @p rep.
 * @return the reply's status, or -ECONNRESET when the daemon closed.
 */
static int raw_adopt(int sock, const char *name, const pinshm_channel_attr_t *attr, uint32_t role,
		     uint32_t endpoint, int seg, unsigned nfds, struct proto_msg *rep)
{
	static struct proto_msg m;
	uint8_t buf[PROTO_MAX_PACKET];
	int fds[2] = {seg, seg};
	unsigned got;

	memset(&m, 0, sizeof(m));
	m.h.type = PROTO_HANDBACK;
	m.h.seq = 2;
	snprintf(m.u.handback.name, sizeof(m.u.handback.name), "%s", name);
	m.u.handback.geo = proto_geometry_from_attr(attr);
	m.u.handback.role = role;
	m.u.handback.endpoint = endpoint;
	int len = proto_encode(&m, buf);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(fdpass_send(sock, buf, (size_t)len, fds, nfds, 0), 0);
	ssize_t n = fdpass_recv(sock, buf, sizeof(buf), NULL, 0, &got, 0);
	if (n <= 0)
		return -ECONNRESET;
	ck_assert_int_eq(proto_decode(buf, (size_t)n, true, rep), 0);
	return rep->status;
}

/* Hostile hand-backs: what is not a segment of the geometry claimed gets a
 * clear error and the connection goes on; a good one is adopted once,
 * owned by the caller with mode 0600, and goes with its last user. */
START_TEST(test_adopt_hostile)
{
	struct daemon d;
	struct proto_msg rep;
	pinshm_channel_attr_t attr, other;
	pinshm_list_entry_t e;
	int p[2];

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	int sock = raw_hello(&d);
	attr_small(&attr, 1, 1);
	other = attr;
	other.capacity *= 2;
	other.max_message = (uint32_t)tu_max_message(other.capacity);

	ck_assert_int_eq(pipe(p), 0);
	TU_RC(raw_adopt(sock, "h", &attr, PINSHM_CONSUMER, 1, p[0], 1, &rep), -EINVAL); /* not a file */
	int zero = memfd_create("zero", MFD_CLOEXEC);
	ck_assert_int_eq(ftruncate(zero, 1 << 20), 0);
	int rc = raw_adopt(sock, "h", &attr, PINSHM_CONSUMER, 1, zero, 1, &rep); /* no header */
	ck_assert_msg(rc == -EPROTO || rc == -EBADMSG, "a zero file: %d", rc);
	int seg = tu_create(&attr);
	rc = raw_adopt(sock, "h", &other, PINSHM_CONSUMER, 1, seg, 1, &rep); /* not its geometry */
	ck_assert_msg(rc == -EBADMSG || rc == -EINVAL, "another geometry: %d", rc);
	int small = memfd_create("small", MFD_CLOEXEC); /* its header, but short of its rings */
	char head[4096];
	ck_assert_int_eq(pread(seg, head, sizeof(head), 0), (ssize_t)sizeof(head));
	ck_assert_int_eq(write(small, head, sizeof(head)), (ssize_t)sizeof(head));
	TU_RC(raw_adopt(sock, "h", &attr, PINSHM_CONSUMER, 1, small, 1, &rep), -EINVAL);
	close(small);
	/* A whole segment in a file that is not shared memory (a file of the
	 * test's directory, where that is not tmpfs): the daemon asks no other
	 * file system anything (a FUSE server could stall it). */
	int disk = open(".", O_TMPFILE | O_RDWR, 0600);
	if (disk >= 0 && fcntl(disk, F_GET_SEALS) < 0) {
		char page[4096];
		for (off_t at = 0; at < (off_t)tu_fd_size(seg); at += (off_t)sizeof(page)) {
			ck_assert_int_eq(pread(seg, page, sizeof(page), at), (ssize_t)sizeof(page));
			ck_assert_int_eq(pwrite(disk, page, sizeof(page), at), (ssize_t)sizeof(page));
		}
		TU_RC(raw_adopt(sock, "h", &attr, PINSHM_CONSUMER, 1, disk, 1, &rep), -EINVAL);
	} else {
		fprintf(stderr, "note: adopt_hostile: no file but of shared memory here (O_TMPFILE in the test's "
				"directory): the disk file's case skipped\n");
	}
	if (disk >= 0)
		close(disk);
	TU_RC(raw_adopt(sock, "h", &attr, PINSHM_CONSUMER, 0, seg, 1, &rep), -EINVAL); /* a producer's endpoint */
	TU_RC(raw_adopt(sock, "h", &attr, 7, 1, seg, 1, &rep), -EINVAL);              /* no such role */
	TU_RC(raw_adopt(sock, ".h", &attr, PINSHM_CONSUMER, 1, seg, 1, &rep), -EINVAL); /* a bad name */
	TU_RC(raw_adopt(sock, "h", &attr, PINSHM_CONSUMER, 1, seg, 0, &rep), -EINVAL);  /* no descriptor */

	TU_RC(raw_adopt(sock, "h", &attr, PINSHM_CONSUMER, 1, seg, 1, &rep), 0);
	ck_assert_uint_eq(rep.u.handback_reply.flags, PROTO_HANDBACK_NAMED); /* new, named, endpoint not attached */
	TU_RC(raw_adopt(sock, "h", &attr, PINSHM_CONSUMER, 1, seg, 1, &rep), 0);
	ck_assert_uint_eq(rep.u.handback_reply.flags, PROTO_HANDBACK_KNOWN | PROTO_HANDBACK_NAMED);
	ck_assert(list_find(c, "h", &e, NULL));
	ck_assert_uint_eq(e.mode, 0600);
	ck_assert_uint_eq(e.uid, getuid());
	ck_assert_uint_eq(e.size, tu_fd_size(seg));
	wait_counts(c, 2, 1);

	/* Two descriptors: the connection is closed, and the channel with it. */
	TU_RC(raw_adopt(sock, "h", &attr, PINSHM_CONSUMER, 1, seg, 2, &rep), -EPROTO);
	char b;
	ck_assert_int_eq(recv(sock, &b, 1, 0), 0);
	wait_counts(c, 1, 0);
	pinshm_status_t st;
	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	ck_assert_uint_eq(st.pinned, 0);
	close(sock);
	close(seg);
	close(zero);
	close(p[0]);
	close(p[1]);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/*
 * A hand-back that the connection has no room to reference (its most,
 * REGISTRY_MAX_REFS channels) is refused before the daemon takes the
 * segment: the daemon destroys what it took and nothing references, and
 * would punch the pages of a channel that its processes still use.
 */
START_TEST(test_adopt_refs_full)
{
	struct daemon d;
	struct proto_msg rep;
	pinshm_channel_attr_t attr;
	char name[32];

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	int sock = raw_hello(&d);
	tu_attr(&attr, PINSHM_QUEUE, PINSHM_MIN_CAPACITY, 1, 1);
	for (unsigned i = 0; i < 1024; i++) { /* the daemon's REGISTRY_MAX_REFS */
		snprintf(name, sizeof(name), "full.%u", i);
		int seg = tu_create(&attr);
		TU_RC(raw_adopt(sock, name, &attr, PINSHM_CONSUMER, 1, seg, 1, &rep), 0);
		close(seg);
	}
	int seg = tu_create(&attr);
	off_t size = (off_t)tu_fd_size(seg);
	const char mark[] = "still here";
	ck_assert_int_eq(pwrite(seg, mark, sizeof(mark), size - 64), (ssize_t)sizeof(mark));
	TU_RC(raw_adopt(sock, "full.last", &attr, PINSHM_CONSUMER, 1, seg, 1, &rep), -EMFILE);
	/* The daemon's destroyed channels are punched a slice a loop turn:
	 * give it turns, then look. */
	pinshm_status_t st;
	for (int i = 0; i < 20; i++) {
		CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
		tu_sleep_ms(10);
	}
	char got[sizeof(mark)] = "";
	ck_assert_int_eq(pread(seg, got, sizeof(got), size - 64), (ssize_t)sizeof(got));
	ck_assert_str_eq(got, mark);
	ck_assert(!list_find(c, "full.last", NULL, NULL));
	close(seg);
	close(sock);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A hand-back of a segment whose endpoints record pids that no owner can
 * have (0, beyond any pid, the daemon's own, a live process that does not
 * map it): each is reaped, and the daemon serves on. */
START_TEST(test_adopt_bogus_pids)
{
	struct daemon d;
	struct proto_msg rep;
	struct tu_procs ps;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;

	daemon_start(&d);
	tu_procs_init(&ps);
	int sleeper = tu_spawn(&ps, "sleeper", reap_sleeper, NULL, 0); /* before the segment exists */
	pinshm_client_t *c = connect_ok(&d);
	int sock = raw_hello(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 4, 1);
	int seg = tu_create(&attr);
	const uint32_t pids[4] = {0, UINT32_MAX, (uint32_t)d.pid, (uint32_t)ps.pid[sleeper]};
	for (unsigned i = 0; i < 4; i++)
		set_endpoint(seg, i, pids[i]);
	set_endpoint(seg, 4, (uint32_t)getpid()); /* the consumer: the caller */

	TU_RC(raw_adopt(sock, "bogus", &attr, PINSHM_CONSUMER, 4, seg, 1, &rep), 0);
	ck_assert_uint_eq(rep.u.handback_reply.flags, PROTO_HANDBACK_NAMED | PROTO_HANDBACK_ENDPOINT);
	ck_assert(list_find(c, "bogus", &e, NULL));
	ck_assert_uint_eq(e.producers, 0);
	ck_assert_uint_eq(e.consumers, 1);

	close(sock); /* the consumer's connection: the channel goes */
	wait_counts(c, 1, 0);
	close(seg);
	tu_kill_all(&ps);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* The state of endpoint @p i of a segment mapped at @p base (the endpoints
 * follow the segment's header). */
static uint32_t endpoint_state(const void *base, unsigned i)
{
	const struct endpoint *ep = (const struct endpoint *)((const uint8_t *)base + sizeof(struct seg_header)) + i;

	return atomic_load(&ep->state);
}

/* The whole segment @p fd, mapped shared. */
static void *map_segment(int fd)
{
	void *base = mmap(NULL, tu_fd_size(fd), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	ck_assert(base != MAP_FAILED);
	return base;
}

/* ======================================================================== */
/* pin_idle across a restart                                                 */
/* ======================================================================== */

#define IDLE_DEFAULT 3600u /* the config's pin_idle: longer than any test */
#define IDLE_WAIT_MS 30000 /* for the idle scan to unlock a channel of pin_idle 1 */
#define RECORD_NUMBERS 13u /* of a record of version 2, before the name */

static const struct daemon_opts idle_opts = {.config = true, .log = true};

/* Start a daemon whose config's pin_idle is IDLE_DEFAULT, logging to
 * d->log; in service mode with the store @p st, unless NULL. */
static void idle_daemon_start(struct daemon *d, struct store *st)
{
	char tmp[160];

	daemon_prepare(d, &idle_opts);
	snprintf(tmp, sizeof(tmp), "%s.new", d->conf);
	FILE *f = fopen(tmp, "w");
	ck_assert_msg(f != NULL, "%s: %s", tmp, strerror(errno));
	fprintf(f, "[daemon]\npin_idle = %u\n", IDLE_DEFAULT);
	ck_assert_int_eq(fchmod(fileno(f), 0644), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(rename(tmp, d->conf), 0);
	if (st)
		store_open(st, d->dir);
	else
		unsetenv("NOTIFY_SOCKET");
	daemon_spawn(d, &idle_opts);
	daemon_wait_ready(d);
}

/* idle_daemon_start() with store @p st, and through a client, persistent
 * channel @p name (mode @p mode, @p pin_idle) kept in the store, its only
 * record; its size and whether it is pinned in *@p size and *@p pinned.
 * @return the client. */
static pinshm_client_t *idle_stored_channel(struct daemon *d, struct store *st, const char *name, mode_t mode,
					    uint32_t pin_idle, uint64_t *size, bool *pinned)
{
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;

	idle_daemon_start(d, st);
	pinshm_client_t *c = connect_ok(d);
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create_full(c, name, &attr, mode, PINSHM_PERSISTENT, PINSHM_NODE_ANY, pin_idle), 0);
	CLIENT_RC(c, pinshm_stat(c, name, &e), 0);
	*size = e.size;
	*pinned = e.state & PINSHM_LIST_PINNED;
	store_drain(st);
	ck_assert_uint_eq(st->n, 1);
	return c;
}

/* The daemon killed -9 (client @p c disconnected), and a new one started
 * with what store @p st holds.  @return a client of the new one. */
static pinshm_client_t *idle_restart_from_store(struct daemon *d, struct store *st, pinshm_client_t *c)
{
	daemon_kill9(d);
	pinshm_disconnect(c);
	spawn_with_store_opts(d, st, &idle_opts);
	daemon_wait_ready(d);
	return connect_ok(d);
}

/* The header's `unlocked` of the segment mapped at @p base. */
static uint32_t header_unlocked(void *base)
{
	return atomic_load(&((struct seg_header *)base)->unlocked);
}

/* Split @p rec, a record of version 2 ("pinshm.2.N1...N13.NAME"): its
 * numbers into @p num, its name into @p name. */
static void record_split(const char *rec, char num[RECORD_NUMBERS][32], char name[PINSHM_NAME_MAX + 1])
{
	ck_assert_msg(strncmp(rec, "pinshm.2.", 9) == 0, "'%s' is not a record of version 2", rec);
	const char *p = rec + 9;
	for (unsigned i = 0; i < RECORD_NUMBERS; i++) {
		const char *dot = strchr(p, '.');
		ck_assert_msg(dot && dot - p < 32, "'%s': number %u", rec, i + 1);
		snprintf(num[i], 32, "%.*s", (int)(dot - p), p);
		p = dot + 1;
	}
	snprintf(name, PINSHM_NAME_MAX + 1, "%s", p);
}

/* "pinshm.VERSION.N1...N@p n.NAME" into @p out. */
static void record_join(char *out, size_t len, const char *version, char num[][32], unsigned n, const char *name)
{
	size_t at = (size_t)snprintf(out, len, "pinshm.%s.", version);

	for (unsigned i = 0; i < n; i++)
		at += (size_t)snprintf(out + at, len - at, "%s.", num[i]);
	snprintf(out + at, len - at, "%s", name);
	ck_assert_uint_lt(strlen(out), len - 1);
}

/* The index in @p st of the record of channel @p name (not an eventfd's). */
static unsigned store_find_channel(const struct store *st, const char *name)
{
	size_t n = strlen(name);

	for (unsigned i = 0; i < st->n; i++) {
		size_t len = strlen(st->name[i]);
		if (strncmp(st->name[i], "pinshm.", 7) == 0 && len > n && st->name[i][len - n - 1] == '.' &&
		    strcmp(st->name[i] + len - n, name) == 0)
			return i;
	}
	ck_abort_msg("no record of '%s' in the store", name);
	return 0;
}

/*
 * Channels created with pin_idle 1, 9, always and the default (the
 * config's) keep them through the descriptor store: STAT after the restart
 * says 1, 9, 0 and IDLE_DEFAULT (it said 0 for all before: the record had
 * no pin_idle).  Where the segments are pinned, "idle1", unlocked by the
 * first daemon, is locked again, then unlocked again by the second one's
 * idle scan after a second unused; each channel is charged once, unlocked
 * or not.
 */
START_TEST(test_restart_store_pin_idle)
{
	static const struct {
		const char *name;
		uint32_t asked, kept;
	} chans[] = {{"idle1", 1, 1},
		     {"idle9", 9, 9},
		     {"always", PINSHM_PIN_ALWAYS, 0},
		     {"dflt", PINSHM_PIN_DEFAULT, IDLE_DEFAULT}};
	const unsigned n = sizeof(chans) / sizeof(chans[0]);
	struct daemon d;
	struct store st;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_status_t s;

	idle_daemon_start(&d, &st);
	pinshm_client_t *c = connect_ok(&d);
	attr_small(&attr, 1, 1);
	for (unsigned i = 0; i < n; i++)
		CLIENT_RC(c, pinshm_create_full(c, chans[i].name, &attr, 0600, PINSHM_PERSISTENT, PINSHM_NODE_ANY,
						 chans[i].asked),
			  0);
	CLIENT_RC(c, pinshm_stat(c, "idle1", &e), 0);
	uint64_t size = e.size;
	bool pinned = e.state & PINSHM_LIST_PINNED;
	if (pinned)
		wait_channel_state(c, "idle1", PINSHM_LIST_UNLOCKED, true, IDLE_WAIT_MS); /* by the first daemon */
	else
		fprintf(stderr, "check_lifecycle: channels not pinned here: their unlocking not tested\n");
	store_drain(&st);
	ck_assert_uint_eq(st.n, n);

	c = idle_restart_from_store(&d, &st, c);
	for (unsigned i = 0; i < n; i++) {
		CLIENT_RC(c, pinshm_stat(c, chans[i].name, &e), 0);
		ck_assert_msg(e.pin_idle == chans[i].kept, "'%s': pin_idle %u after the restart, not %u",
			      chans[i].name, e.pin_idle, chans[i].kept);
	}
	ck_assert_uint_eq(store_count_prefix(&st, "pinshm.2."), n); /* as the first daemon wrote them */
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	ck_assert_uint_eq(s.channels_pinned + s.channels_unpinned, n);
	if (pinned) {
		ck_assert_uint_eq(s.pinned, n * size);
		wait_channel_state(c, "idle1", PINSHM_LIST_UNLOCKED, true, IDLE_WAIT_MS); /* by the second daemon's scan */
		CLIENT_RC(c, pinshm_stat(c, "idle1", &e), 0);
		ck_assert(e.state & PINSHM_LIST_PINNED);
		CLIENT_RC(c, pinshm_stat(c, "always", &e), 0);
		ck_assert(!(e.state & PINSHM_LIST_UNLOCKED));
		CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
		ck_assert_uint_eq(s.pinned, n * size); /* unlocked, still charged */
	}
	for (unsigned i = 0; i < n; i++)
		CLIENT_RC(c, pinshm_unlink(c, chans[i].name), 0);
	wait_counts(c, 1, 0);
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	ck_assert_uint_eq(s.pinned, 0);
	store_drain(&st);
	ck_assert_uint_eq(st.n, 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	store_close(&st);
}
END_TEST

/*
 * A record of version 1, as an older daemon left it (no pin_idle), of a
 * segment that daemon had unlocked for want of use (its header says so):
 * the channel is adopted with the configured pin_idle, locked again (the
 * header's `unlocked` cleared: it stayed 1 before, the channel locked),
 * charged once, and its record in the store is of version 2 from then on
 * (the old one removed).
 */
START_TEST(test_restart_store_v1_record)
{
	struct daemon d;
	struct store st;
	pinshm_list_entry_t e;
	pinshm_status_t s;
	char num[RECORD_NUMBERS][32], name[PINSHM_NAME_MAX + 1], want[64];
	struct stat sa, sb;
	uint64_t size;
	bool pinned;

	pinshm_client_t *c = idle_stored_channel(&d, &st, "old", 0640, 5, &size, &pinned);
	if (strncmp(st.name[0], "pinshm.1.", 9) != 0) { /* (a daemon before version 2 wrote it so) */
		record_split(st.name[0], num, name);
		ck_assert_str_eq(num[RECORD_NUMBERS - 1], "5");
		record_join(st.name[0], sizeof(st.name[0]), "1", num, RECORD_NUMBERS - 1, name);
	}
	ck_assert_int_eq(fstat(st.fd[0], &sa), 0);
	void *base = map_segment(st.fd[0]);
	atomic_store(&((struct seg_header *)base)->unlocked, 1); /* as the older daemon left it */

	c = idle_restart_from_store(&d, &st, c);
	CLIENT_RC(c, pinshm_stat(c, "old", &e), 0);
	ck_assert_msg(e.pin_idle == IDLE_DEFAULT, "pin_idle %u, not the configured %u", e.pin_idle, IDLE_DEFAULT);
	ck_assert_uint_eq(e.mode, 0640);
	ck_assert_msg(header_unlocked(base) == 0, "the header still says unlocked");
	ck_assert(!(e.state & PINSHM_LIST_UNLOCKED));
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	ck_assert_uint_eq(s.channels_pinned + s.channels_unpinned, 1);
	if (pinned) {
		ck_assert(e.state & PINSHM_LIST_PINNED);
		ck_assert_uint_eq(s.pinned, size);
		ck_assert_int_ge(proc_status_value_kb(d.pid, "VmLck:"), (long)(size / 1024));
	}
	ck_assert(daemon_log_has(&d, "an older daemon's record"));
	store_drain(&st);
	ck_assert_uint_eq(st.n, 1);
	record_split(st.name[0], num, name);
	snprintf(want, sizeof(want), "%u", IDLE_DEFAULT);
	ck_assert_str_eq(num[RECORD_NUMBERS - 1], want);
	ck_assert_str_eq(name, "old");
	ck_assert_int_eq(fstat(st.fd[0], &sb), 0);
	ck_assert(sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino);

	munmap(base, size);
	idle_unlink_and_stop(&d, &st, c, "old");
}
END_TEST

/*
 * Records of version 2 that a daemon did not write, each a copy of a good
 * one's with one thing wrong, beside the good one: each is refused with a
 * log line, closed and removed from the store; the good one is adopted
 * with its pin_idle (it was refused too before: version 2 unknown), once.
 */
START_TEST(test_restart_store_bad_records)
{
	/* At most 9: the daemon's removals wait in the store's socket, whose
	 * queue holds 10 (net.unix.max_dgram_qlen) until the test reads it. */
	enum { B_IDLE_MAX, B_IDLE_NEG, B_IDLE_ZERO, B_IDLE_HUGE, B_IDLE_NONE, B_UID_WRAP, B_INODE, B_VERSION,
	       B_V1_UID_WRAP, B_COUNT };
	struct daemon d;
	struct store st;
	pinshm_list_entry_t e;
	pinshm_status_t s;
	char num[RECORD_NUMBERS][32], bad[RECORD_NUMBERS][32], name[PINSHM_NAME_MAX + 1], rec[256], bname[16];
	size_t total;
	uint64_t size;
	bool pinned;

	pinshm_client_t *c = idle_stored_channel(&d, &st, "good", 0600, 9, &size, &pinned);
	record_split(st.name[0], num, name);
	for (int b = 0; b < B_COUNT; b++) {
		const char *version = "2";
		unsigned numbers = RECORD_NUMBERS;
		memcpy(bad, num, sizeof(bad));
		snprintf(bname, sizeof(bname), "bad%d", b);
		switch (b) {
		case B_IDLE_MAX: snprintf(bad[12], 32, "%u", PINSHM_PIN_IDLE_MAX + 1); break;
		case B_IDLE_NEG: snprintf(bad[12], 32, "-5"); break;
		case B_IDLE_ZERO: snprintf(bad[12], 32, "09"); break;
		case B_IDLE_HUGE: snprintf(bad[12], 32, "184467440737095516170"); break;
		case B_IDLE_NONE: numbers--; break;
		case B_UID_WRAP: snprintf(bad[1], 32, "%llu", strtoull(num[1], NULL, 10) + (1ull << 32)); break;
		case B_INODE: snprintf(bad[0], 32, "%llu", strtoull(num[0], NULL, 10) + 1); break;
		case B_VERSION: version = "3"; break;
		case B_V1_UID_WRAP: /* version 1 parsed as strictly: it took the uid modulo 2^32 */
			version = "1";
			numbers--;
			snprintf(bad[1], 32, "%llu", strtoull(num[1], NULL, 10) + (1ull << 32));
			break;
		}
		record_join(rec, sizeof(rec), version, bad, numbers, bname);
		store_add(&st, rec, st.fd[0]);
	}

	c = idle_restart_from_store(&d, &st, c);
	ck_assert_msg(list_find(c, "good", &e, &total), "the good record was not adopted");
	ck_assert_uint_eq(e.pin_idle, 9);
	ck_assert_uint_eq(total, 1);
	for (int b = 0; b < B_COUNT; b++) {
		snprintf(bname, sizeof(bname), "bad%d", b);
		ck_assert_msg(!list_find(c, bname, &e, NULL), "record %d adopted", b);
		snprintf(rec, sizeof(rec), b == B_INODE ? "channel '%s' not adopted: the record names inode"
							 : ".%s' is not a channel's record (",
			 bname);
		ck_assert_msg(daemon_log_has(&d, rec), "record %d: no log line '%s'", b, rec);
	}
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	if (pinned)
		ck_assert_uint_eq(s.pinned, size);
	store_drain(&st);
	ck_assert_msg(st.n == 1, "%u records in the store, not 1", st.n);
	ck_assert_uint_eq(store_find_channel(&st, "good"), 0);
	idle_unlink_and_stop(&d, &st, c, "good");
}
END_TEST

/* How the store holds a second record of one channel's segment, beside
 * the record the daemon wrote (test_restart_store_duplicate). */
enum { DUP_SAME, DUP_V1_FIRST, DUP_V1_FIRST_DEFAULT, DUP_V1_AFTER, DUP_OTHER_NAME, DUP_COUNT };
static const char *const dup_what[DUP_COUNT] = {
	[DUP_SAME] = "the same record twice",
	[DUP_V1_FIRST] = "a record of version 1, then the one of version 2",
	[DUP_V1_FIRST_DEFAULT] = "the same, of a channel of the default pin_idle",
	[DUP_V1_AFTER] = "the record of version 2, then one of version 1",
	[DUP_OTHER_NAME] = "a second record under another channel name",
};

/* A second open file description of the file that @p fd is (through its
 * /proc link): systemd keeps it as an entry of its own, where it drops a
 * dup() of a descriptor it holds. */
static int reopen_fd(int fd)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	int other = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_msg(other >= 0, "%s: %s", path, strerror(errno));
	return other;
}

/* The bytes charged to the test's user (its quota's count) by the daemon
 * of @p c, and how many channels it owns in *@p channels. */
static uint64_t charged_to_me(pinshm_client_t *c, uint32_t *channels)
{
	pinshm_status_t s;
	pinshm_user_usage_t *u = NULL;
	size_t n = 0;
	uint64_t charged = 0;

	*channels = 0;
	CLIENT_RC(c, pinshm_status(c, &s, &u, &n), 0);
	for (size_t i = 0; i < n; i++)
		if (u[i].uid == getuid()) {
			charged = u[i].charged;
			*channels = u[i].channels;
		}
	free(u);
	return charged;
}

/* After a restart in case @p k: channel "dup" is the only one, charged
 * once, and the store holds one record of it (version 2, its name, its
 * segment @p seg). */
static void dup_check_adopted_once(int k, struct store *st, pinshm_client_t *c, const struct stat *seg,
				   uint32_t pin_idle, uint64_t size, const char *when)
{
	pinshm_list_entry_t e;
	char num[RECORD_NUMBERS][32], name[PINSHM_NAME_MAX + 1], want[16];
	size_t total;
	uint32_t channels;
	struct stat sb;

	ck_assert_msg(list_find(c, "dup", &e, &total), "case %d (%s), %s: 'dup' not adopted", k, dup_what[k],
		      when);
	ck_assert_msg(total == 1, "case %d (%s), %s: %zu channels listed, not 1", k, dup_what[k], when, total);
	ck_assert_uint_eq(e.pin_idle, pin_idle);
	uint64_t charged = charged_to_me(c, &channels);
	ck_assert_msg(channels == 1 && charged == size,
		      "case %d (%s), %s: the user owns %u channels, charged %llu bytes, not 1 and %llu", k,
		      dup_what[k], when, channels, (unsigned long long)charged, (unsigned long long)size);
	store_drain(st);
	ck_assert_msg(st->n == 1, "case %d (%s), %s: %u records in the store, not 1", k, dup_what[k], when, st->n);
	record_split(st->name[0], num, name);
	ck_assert_str_eq(name, "dup");
	snprintf(want, sizeof(want), "%u", pin_idle);
	ck_assert_str_eq(num[RECORD_NUMBERS - 1], want);
	ck_assert_int_eq(fstat(st->fd[0], &sb), 0);
	ck_assert(seg->st_dev == sb.st_dev && seg->st_ino == sb.st_ino);
}

/*
 * The store hands the restarted daemon two records of one segment (the
 * same st_dev and st_ino, the second a descriptor of its own, as systemd
 * keeps one not dup()ed from the first): the same record twice, a record
 * of version 1 before or after the one of version 2 (its channel of
 * pin_idle 9, or of the configured one, which the record of version 1
 * gets back), or one under another channel name.  The first is adopted,
 * once: one channel, charged once; the second is closed and logged, and
 * the store ends with one record of the channel, which a second restart
 * adopts again.  Before, the second was adopted as a channel of its own
 * where its name was free (two channels on one segment, charged twice),
 * and refused as a name taken otherwise, its record removed by name: with
 * the name of the first's (the same record twice; version 1 first, its
 * channel of the default pin_idle, stored again as version 2 under the
 * very name of the other), that removal took the first's too
 * (FDSTOREREMOVE drops every descriptor of a name), and the next restart
 * lost the channel.
 */
START_TEST(test_restart_store_duplicate)
{
	struct daemon d;
	struct store st;
	char num[RECORD_NUMBERS][32], name[PINSHM_NAME_MAX + 1], v1[256], v2[256], other[256];
	const char *line = "a second record of the segment of channel 'dup'";
	struct stat sa;
	uint64_t size;
	bool pinned;

	uint32_t asked = _i == DUP_V1_FIRST_DEFAULT ? PINSHM_PIN_DEFAULT : 9;
	pinshm_client_t *c = idle_stored_channel(&d, &st, "dup", 0600, asked, &size, &pinned);
	snprintf(v2, sizeof(v2), "%s", st.name[0]);
	record_split(v2, num, name);
	record_join(v1, sizeof(v1), "1", num, RECORD_NUMBERS - 1, name);
	record_join(other, sizeof(other), "2", num, RECORD_NUMBERS, "other");
	ck_assert_int_eq(fstat(st.fd[0], &sa), 0);
	int second = reopen_fd(st.fd[0]);
	switch (_i) {
	case DUP_SAME: store_add(&st, v2, second); break;
	case DUP_V1_FIRST:
	case DUP_V1_FIRST_DEFAULT:
		snprintf(st.name[0], sizeof(st.name[0]), "%s", v1);
		store_add(&st, v2, second);
		break;
	case DUP_V1_AFTER: store_add(&st, v1, second); break;
	case DUP_OTHER_NAME: store_add(&st, other, second); break;
	}
	close(second);

	/* Adopted from the first record: of version 1, the configured pin_idle. */
	uint32_t pin_idle = _i == DUP_V1_FIRST || _i == DUP_V1_FIRST_DEFAULT ? IDLE_DEFAULT : 9;
	c = idle_restart_from_store(&d, &st, c);
	dup_check_adopted_once(_i, &st, c, &sa, pin_idle, size, "after the restart");
	ck_assert_msg(daemon_log_has(&d, line), "case %d (%s): no log line '%s'", _i, dup_what[_i], line);
	if (pinned) {
		pinshm_status_t s;
		CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
		ck_assert_uint_eq(s.pinned, size);
	}

	c = idle_restart_from_store(&d, &st, c);
	dup_check_adopted_once(_i, &st, c, &sa, pin_idle, size, "after a second restart");
	idle_unlink_and_stop(&d, &st, c, "dup");
}
END_TEST

/*
 * A hand-back (a HANDBACK request) carries no pin_idle, and no reply of the daemon tells
 * a client a channel's (only a STAT, which pinshm_reconnect() does not
 * ask): the channel created with pin_idle 1 and handed back to a restarted
 * daemon gets the configured default (it got 0 before, always locked);
 * unlocked by the first daemon, it is locked again, charged once.
 */
START_TEST(test_restart_handback_pin_idle)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_status_t s;
	pinshm_channel_t *cons;

	idle_daemon_start(&d, NULL);
	pinshm_client_t *c = connect_ok(&d);
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create_full(c, "back", &attr, 0600, 0, PINSHM_NODE_ANY, 1), 0);
	CLIENT_RC(c, pinshm_open(c, "back", PINSHM_CONSUMER, &cons), 0);
	CLIENT_RC(c, pinshm_stat(c, "back", &e), 0);
	ck_assert_uint_eq(e.pin_idle, 1);
	uint64_t size = e.size;
	bool pinned = e.state & PINSHM_LIST_PINNED;
	if (pinned)
		wait_channel_state(c, "back", PINSHM_LIST_UNLOCKED, true, IDLE_WAIT_MS);

	daemon_kill9(&d);
	daemon_spawn(&d, &idle_opts);
	daemon_wait_ready(&d);
	CLIENT_RC(c, pinshm_reconnect(c), 0);
	ck_assert_msg(list_find(c, "back", &e, NULL), "the channel was not handed back");
	ck_assert_msg(e.pin_idle == IDLE_DEFAULT, "pin_idle %u, not the configured %u", e.pin_idle, IDLE_DEFAULT);
	ck_assert(!(e.state & PINSHM_LIST_UNLOCKED));
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	if (pinned) {
		ck_assert(e.state & PINSHM_LIST_PINNED);
		ck_assert_uint_eq(s.pinned, size);
	}
	pinshm_channel_close(cons);
	pinshm_disconnect(c); /* its last user: the channel goes */
	c = connect_ok(&d);
	wait_counts(c, 1, 0);
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	ck_assert_uint_eq(s.pinned, 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A segment handed back whose header says unlocked (a previous daemon
 * unlocked it for want of use): the daemon locks it again and clears the
 * note (it stayed 1 before, the segment locked), charged once. */
START_TEST(test_adopt_unlocked_header)
{
	struct daemon d;
	struct proto_msg rep;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_status_t s;

	idle_daemon_start(&d, NULL);
	pinshm_client_t *c = connect_ok(&d);
	int sock = raw_hello(&d);
	attr_small(&attr, 1, 1);
	int seg = tu_create(&attr);
	void *base = map_segment(seg);
	atomic_store(&((struct seg_header *)base)->unlocked, 1);
	TU_RC(raw_adopt(sock, "h", &attr, PINSHM_CONSUMER, 1, seg, 1, &rep), 0);
	CLIENT_RC(c, pinshm_stat(c, "h", &e), 0);
	ck_assert_msg(header_unlocked(base) == 0, "the header still says unlocked");
	ck_assert_uint_eq(e.pin_idle, IDLE_DEFAULT);
	ck_assert(!(e.state & PINSHM_LIST_UNLOCKED));
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	ck_assert_uint_eq(s.pinned, (e.state & PINSHM_LIST_PINNED) ? e.size : 0);
	close(sock); /* the channel goes with it */
	wait_counts(c, 1, 0);
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	ck_assert_uint_eq(s.pinned, 0);
	munmap(base, tu_fd_size(seg));
	close(seg);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

#define FLOOD_CHANNELS 3
#define FLOOD_SLACK 8 /* descriptors the daemon may open meanwhile for itself (a pool refill) */

/* Hand-backs whose 320 endpoints all record one live process that maps
 * them (what pidfd_flood did): one watch (pidfd) for that process, not
 * one a endpoint; when it exits all are reaped and the channels go. */
START_TEST(test_adopt_flood_one_pid)
{
	struct daemon d;
	struct proto_msg rep;
	struct tu_procs ps;
	pinshm_channel_attr_t attr;
	int seg[FLOOD_CHANNELS];
	void *base[FLOOD_CHANNELS];
	const unsigned total = PINSHM_MAX_PRODUCERS + PINSHM_MAX_CONSUMERS;

	daemon_start(&d);
	tu_procs_init(&ps);
	tu_attr(&attr, PINSHM_QUEUE, PINSHM_MIN_CAPACITY, PINSHM_MAX_PRODUCERS, PINSHM_MAX_CONSUMERS);
	for (unsigned k = 0; k < FLOOD_CHANNELS; k++) {
		seg[k] = tu_create(&attr);
		base[k] = map_segment(seg[k]);
	}
	int owner = tu_spawn(&ps, "owner", reap_sleeper, NULL, 0); /* maps them all, not the sockets */
	pinshm_client_t *c = connect_ok(&d);
	int sock = raw_hello(&d);
	for (unsigned k = 0; k < FLOOD_CHANNELS; k++)
		for (unsigned i = 0; i < total; i++)
			set_endpoint(seg[k], i, (uint32_t)ps.pid[owner]);
	unsigned before = proc_fd_count(d.pid);
	for (unsigned k = 0; k < FLOOD_CHANNELS; k++) {
		char name[16];
		snprintf(name, sizeof(name), "flood-%u", k);
		TU_RC(raw_adopt(sock, name, &attr, PINSHM_CONSUMER, PINSHM_MAX_PRODUCERS, seg[k], 1, &rep), 0);
	}
	unsigned after = proc_fd_count(d.pid);
	printf("flood: %u hand-backs of %u endpoints of one pid: the daemon's descriptors %u -> %u\n", FLOOD_CHANNELS,
	       total, before, after);
	ck_assert_msg(after <= before + FLOOD_CHANNELS + 1 + FLOOD_SLACK,
		      "%u descriptors after %u hand-backs, %u before: more than a segment each and one pidfd", after,
		      FLOOD_CHANNELS, before);
	close(sock); /* kept: their owner lives and maps them */
	wait_counts(c, 1, FLOOD_CHANNELS);

	kill_child(&ps, owner); /* each of its endpoints reaped, the channels gone */
	wait_counts(c, 1, 0);
	for (unsigned k = 0; k < FLOOD_CHANNELS; k++) {
		for (unsigned i = 0; i < total; i++)
			ck_assert_uint_ne(endpoint_state(base[k], i), EP_ACTIVE);
		munmap(base[k], tu_fd_size(seg[k]));
		close(seg[k]);
	}
	ck_assert_uint_le(proc_fd_count(d.pid), before + FLOOD_SLACK);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

#define CAP_PROCS 300 /* more processes than the daemon watches by a pidfd (256) */

/* The endpoints of @p base among the first @p n that are attached. */
static unsigned attached_count(const void *base, unsigned n)
{
	unsigned k = 0;

	for (unsigned i = 0; i < n; i++)
		k += endpoint_state(base, i) == EP_ACTIVE;
	return k;
}

/* A hand-back whose endpoints record 300 distinct live processes that map
 * the segment: the daemon watches 256 of them by a pidfd each and the
 * others by their start time; when all die, the endpoints of all are
 * reaped (those of the others within a few ticks). */
START_TEST(test_adopt_watch_cap)
{
	struct daemon d;
	struct proto_msg rep;
	pinshm_channel_attr_t attr;
	pid_t kids[CAP_PROCS], parent = getpid();
	const unsigned total = PINSHM_MAX_PRODUCERS + PINSHM_MAX_CONSUMERS;
	const unsigned caller = PINSHM_MAX_PRODUCERS; /* the first consumer */

	daemon_start(&d);
	tu_attr(&attr, PINSHM_QUEUE, PINSHM_MIN_CAPACITY, PINSHM_MAX_PRODUCERS, PINSHM_MAX_CONSUMERS);
	int seg = tu_create(&attr);
	void *base = map_segment(seg); /* inherited: the children map it */
	fflush(stdout);
	fflush(stderr);
	for (unsigned i = 0; i < CAP_PROCS; i++) {
		kids[i] = fork();
		ck_assert_int_ge(kids[i], 0);
		if (kids[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent)
				_exit(1);
			for (;;)
				pause();
		}
		set_endpoint(seg, i < caller ? i : i + 1, (uint32_t)kids[i]);
	}
	set_endpoint(seg, caller, (uint32_t)getpid());
	pinshm_client_t *c = connect_ok(&d);
	int sock = raw_hello(&d);
	unsigned before = proc_fd_count(d.pid), pidfds_before = proc_pidfd_count(d.pid);
	TU_RC(raw_adopt(sock, "cap", &attr, PINSHM_CONSUMER, caller, seg, 1, &rep), 0);
	unsigned after = proc_fd_count(d.pid), pidfds = proc_pidfd_count(d.pid) - pidfds_before;
	printf("watch cap: %u processes: the daemon's descriptors %u -> %u, %u pidfds of watches\n", CAP_PROCS, before,
	       after, pidfds);
	ck_assert_msg(after <= before + 1 + 256 + FLOOD_SLACK, "%u descriptors after the hand-back, %u before", after,
		      before);
	ck_assert_uint_le(pidfds, 256);

	/* Alive, none is reaped: neither those known by a pidfd nor those
	 * known by their start time.  Two canaries close the window: the first
	 * child (watched by a pidfd) and the last (past the 256 pidfds: by its
	 * start time; a tick looks at up to 256 such, all 44 at once) die.
	 * Once both are reaped and a round trip is over, the tick that reaped
	 * the last is over, and it looked at every other start time. */
	const unsigned canary[2] = {0, CAP_PROCS - 1};
	int reap_ms = REAP_MS * (pinshmd_wrapper() ? DAEMON_WRAPPER_SLOWDOWN : 1);
	uint64_t deadline = tu_now_ms() + (uint64_t)reap_ms;
	for (unsigned k = 0; k < 2; k++) {
		ck_assert_int_eq(kill(kids[canary[k]], SIGKILL), 0);
		ck_assert_int_eq(waitpid(kids[canary[k]], NULL, 0), kids[canary[k]]);
	}
	while ((endpoint_state(base, canary[0]) == EP_ACTIVE || endpoint_state(base, canary[1]) == EP_ACTIVE) &&
	       tu_now_ms() < deadline)
		usleep(10000);
	pinshm_status_t s;
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0); /* a round trip: that turn of the loop is over */
	ck_assert_msg(endpoint_state(base, canary[0]) != EP_ACTIVE, "the child known by a pidfd not reaped");
	ck_assert_msg(endpoint_state(base, canary[1]) != EP_ACTIVE, "the child known by its start time not reaped");
	ck_assert_uint_eq(attached_count(base, total), 1 + CAP_PROCS - 2);

	for (unsigned i = 1; i < CAP_PROCS - 1; i++)
		ck_assert_int_eq(kill(kids[i], SIGKILL), 0);
	for (unsigned i = 1; i < CAP_PROCS - 1; i++)
		ck_assert_int_eq(waitpid(kids[i], NULL, 0), kids[i]);
	const unsigned left = 1; /* the caller's */
	deadline = tu_now_ms() + (uint64_t)reap_ms;
	while (attached_count(base, total) > left && tu_now_ms() < deadline)
		usleep(10000);
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0);
	ck_assert_uint_eq(attached_count(base, total), left);
	ck_assert_uint_eq(endpoint_state(base, caller), EP_ACTIVE);

	close(sock);
	wait_counts(c, 1, 0);
	munmap(base, tu_fd_size(seg));
	close(seg);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

#define SCAN_HANDBACKS 20
#define SCAN_LINE "scanned /proc for processes of nested PID namespaces"

/* SCAN_HANDBACKS hand-backs in a row whose producer records a pid that no
 * process can have, each sending the daemon to look for it in nested PID
 * namespaces: its endpoint is reaped each time, and /proc is scanned once
 * a second at most, not once a hand-back (which a client could repeat to
 * keep the daemon reading every process's status). */
START_TEST(test_adopt_nested_scan_reused)
{
	struct daemon d;
	struct proto_msg rep;
	pinshm_channel_attr_t attr;
	const struct daemon_opts o = {.log = true, .verbose = true};
	int socks[SCAN_HANDBACKS];

	daemon_start_opts(&d, &o);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	uint64_t t0 = tu_now_ms();
	for (unsigned i = 0; i < SCAN_HANDBACKS; i++) {
		char name[32];
		int seg = tu_create(&attr);
		snprintf(name, sizeof(name), "scan%u", i);
		set_endpoint(seg, 0, (uint32_t)INT_MAX - i); /* beyond any pid_max */
		set_endpoint(seg, 1, (uint32_t)getpid());    /* the consumer: the caller */
		socks[i] = raw_hello(&d);
		TU_RC(raw_adopt(socks[i], name, &attr, PINSHM_CONSUMER, 1, seg, 1, &rep), 0);
		close(seg);
		pinshm_list_entry_t e;
		ck_assert(list_find(c, name, &e, NULL));
		ck_assert_uint_eq(e.producers, 0); /* reaped */
		ck_assert_uint_eq(e.consumers, 1);
	}
	uint64_t took = tu_now_ms() - t0;
	unsigned scans = daemon_log_count(&d, SCAN_LINE);
	printf("nested scan: %u hand-backs in %llu ms: %u scans of /proc\n", SCAN_HANDBACKS,
	       (unsigned long long)took, scans);
	ck_assert_uint_ge(scans, 1);
	ck_assert_uint_le(scans, 1 + took / 1000);

	for (unsigned i = 0; i < SCAN_HANDBACKS; i++)
		close(socks[i]);
	wait_counts(c, 1, 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

#define LONG_MAPS 40000 /* mappings of a process: more bytes of maps (some 2 MB) than the daemon reads (1 MiB) */

/* A child with LONG_MAPS mappings (that never merge), which tells @p arg
 * (a pipe's writing end) when they are made. */
static int long_maps_sleeper(void *arg, int idx)
{
	long page = sysconf(_SC_PAGESIZE);
	char *area = mmap(NULL, (size_t)LONG_MAPS * (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	(void)idx;
	if (area == MAP_FAILED)
		tu_child_fail(2, "mmap: %s", strerror(errno));
	for (long i = 0; i < LONG_MAPS; i += 2)
		if (mprotect(area + i * page, (size_t)page, PROT_READ | PROT_WRITE) != 0)
			tu_child_fail(3, "mprotect: %s", strerror(errno));
	if (write(*(const int *)arg, "r", 1) != 1)
		tu_child_fail(4, "write: %s", strerror(errno));
	return child_sleep_until_killed(WAIT_MS);
}

/* A hand-back whose producers record a live process with very long maps
 * (what slow_maps did: the daemon read them all once an endpoint, 13 s in
 * its event loop): the daemon reads a bounded part, cannot judge it, and
 * takes it for alive without watching it: its endpoints stay attached,
 * and the channel goes with its last connection. */
START_TEST(test_adopt_long_maps)
{
	struct daemon d;
	struct proto_msg rep;
	struct tu_procs ps;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	int ready[2];
	char b;

	daemon_start(&d);
	tu_procs_init(&ps);
	ck_assert_int_eq(pipe(ready), 0);
	int owner = tu_spawn(&ps, "long maps", long_maps_sleeper, &ready[1], 0); /* before the segment */
	ck_assert_int_eq(read(ready[0], &b, 1), 1);
	pinshm_client_t *c = connect_ok(&d);
	int sock = raw_hello(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 64, 1);
	int seg = tu_create(&attr);
	for (unsigned i = 0; i < 64; i++)
		set_endpoint(seg, i, (uint32_t)ps.pid[owner]);
	set_endpoint(seg, 64, (uint32_t)getpid()); /* the consumer: the caller */
	uint64_t t0 = tu_now_ms();
	TU_RC(raw_adopt(sock, "long", &attr, PINSHM_CONSUMER, 64, seg, 1, &rep), 0);
	printf("long maps: %u lines, 64 endpoints: hand-back answered in %llu ms\n", LONG_MAPS,
	       (unsigned long long)(tu_now_ms() - t0));
	ck_assert_uint_eq(rep.u.handback_reply.flags, PROTO_HANDBACK_NAMED | PROTO_HANDBACK_ENDPOINT);
	ck_assert(list_find(c, "long", &e, NULL));
	ck_assert_uint_eq(e.producers, 64); /* not judged: not reaped */
	close(sock);
	wait_counts(c, 1, 0); /* not watched: not kept */
	close(seg);
	close(ready[0]);
	close(ready[1]);
	tu_kill_all(&ps);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

#define MAPS_BUDGET_BYTES (4u << 20) /* of maps the daemon reads for one adoption (pinshmd(8)) */
#define LONG_LINE_OWNERS 4
#define LONG_LINE_MAPS 300 /* mappings of a file of a ~3800-byte path: 1.2 MB of maps a process */

struct long_lines {
	int dirfd;    /* where the file of the long path is */
	int ready[2]; /* each owner writes a byte once mapped */
};

/* A child that maps the file "f" of @p arg's folder LONG_LINE_MAPS times,
 * one page each with a hole between, so that no two mappings merge. */
static int long_lines_owner(void *arg, int idx)
{
	struct long_lines *l = arg;
	long page = sysconf(_SC_PAGESIZE);
	int fd = openat(l->dirfd, "f", O_RDONLY | O_CLOEXEC);

	(void)idx;
	if (fd < 0)
		tu_child_fail(2, "open: %s", strerror(errno));
	char *area = mmap(NULL, (size_t)(2 * LONG_LINE_MAPS) * (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	if (area == MAP_FAILED)
		tu_child_fail(3, "mmap: %s", strerror(errno));
	for (long i = 0; i < LONG_LINE_MAPS; i++)
		if (mmap(area + 2 * i * page, (size_t)page, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
			tu_child_fail(4, "mmap of the file: %s", strerror(errno));
	if (write(l->ready[1], "r", 1) != 1)
		tu_child_fail(5, "write: %s", strerror(errno));
	return child_sleep_until_killed(WAIT_MS);
}

/* The "N bytes of maps read" of the daemon's judging of channel @p name, -1: none. */
static long maps_bytes_logged(const struct daemon *d, const char *name)
{
	char line[1024], want[128];
	long bytes = -1;
	FILE *f = fopen(d->log, "r");

	ck_assert_ptr_nonnull(f);
	snprintf(want, sizeof(want), "channel '%s': of its endpoints attached before the restart", name);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, want)) {
			const char *p = strstr(line, "; ");
			char *q = p ? strstr(p, " bytes of maps read") : NULL;
			for (const char *s = p; q && s && s < q; s = strstr(s + 1, "; "))
				p = s; /* the last "; " before the count */
			if (q && sscanf(p, "; %ld bytes of maps read", &bytes) != 1)
				bytes = -1;
		}
	fclose(f);
	return bytes;
}

/*
 * A hand-back whose producers record 4 live processes of long maps lines
 * (a file of a ~3800-byte path mapped 300 times: 1.2 MB of maps each): the
 * daemon reads no more than its byte budget for the adoption (review
 * finding: it counted lines, a long one once a 511-byte buffer, and read
 * some 16 MB in its event loop), says how much it read, and takes them for
 * alive without watching them.
 */
START_TEST(test_adopt_long_map_lines)
{
	struct daemon d;
	struct proto_msg rep;
	struct tu_procs ps;
	struct long_lines l;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	char part[251], b;

	daemon_start_opts(&d, &(struct daemon_opts){.log = true});
	memset(part, 'p', sizeof(part) - 1);
	part[sizeof(part) - 1] = '\0';
	l.dirfd = open(d.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(l.dirfd, 0);
	for (int i = 0; i < 15; i++) { /* 15 folders of 250 characters */
		ck_assert_int_eq(mkdirat(l.dirfd, part, 0700), 0);
		int sub = openat(l.dirfd, part, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		ck_assert_int_ge(sub, 0);
		close(l.dirfd);
		l.dirfd = sub;
	}
	int f = openat(l.dirfd, "f", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	ck_assert_int_ge(f, 0);
	ck_assert_int_eq(ftruncate(f, sysconf(_SC_PAGESIZE)), 0);
	close(f);
	ck_assert_int_eq(pipe(l.ready), 0);
	tu_procs_init(&ps);
	int owner[LONG_LINE_OWNERS];
	for (int i = 0; i < LONG_LINE_OWNERS; i++) {
		owner[i] = tu_spawn(&ps, "long lines", long_lines_owner, &l, i); /* before the segment */
		ck_assert_int_eq(read(l.ready[0], &b, 1), 1);
	}
	pinshm_client_t *c = connect_ok(&d);
	int sock = raw_hello(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 64, 1);
	int seg = tu_create(&attr);
	for (unsigned i = 0; i < 64; i++)
		set_endpoint(seg, i, (uint32_t)ps.pid[owner[i % LONG_LINE_OWNERS]]);
	set_endpoint(seg, 64, (uint32_t)getpid()); /* the consumer: the caller */
	TU_RC(raw_adopt(sock, "lines", &attr, PINSHM_CONSUMER, 64, seg, 1, &rep), 0);
	ck_assert(list_find(c, "lines", &e, NULL));
	ck_assert_uint_eq(e.producers, 64); /* not judged: not reaped */
	long bytes = maps_bytes_logged(&d, "lines");
	printf("long map lines: %d processes of %d mappings of a long path: %ld bytes of maps read\n",
	       LONG_LINE_OWNERS, LONG_LINE_MAPS, bytes);
	ck_assert_msg(bytes > 0, "the daemon's log does not say how many bytes of maps it read");
	ck_assert_msg(bytes <= (long)MAPS_BUDGET_BYTES, "%ld bytes of maps read for one adoption", bytes);
	close(sock);
	wait_counts(c, 1, 0); /* not watched: not kept */
	close(seg);
	close(l.ready[0]);
	close(l.ready[1]);
	ck_assert_int_eq(unlinkat(l.dirfd, "f", 0), 0);
	for (int i = 0; i < 15; i++) { /* the folders, from the deepest */
		int up = openat(l.dirfd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		ck_assert_int_ge(up, 0);
		close(l.dirfd);
		l.dirfd = up;
		ck_assert_int_eq(unlinkat(l.dirfd, part, AT_REMOVEDIR), 0);
	}
	close(l.dirfd);
	tu_kill_all(&ps);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

struct twin_args {
	int seg;       /* mapped by the test: the child maps it too */
	unsigned endpoint;
	int report;    /* where the container's first process writes the pid of its pid 1 here */
};

/* A container: a PID namespace of its own whose pid 1 attaches endpoint
 * a->endpoint of the segment (it records pid 1) and sleeps until killed. */
static int twin_container(void *arg, int idx)
{
	const struct twin_args *a = arg;
	int st;

	(void)idx;
	if (unshare(CLONE_NEWPID) != 0)
		tu_child_fail(2, "unshare(CLONE_NEWPID): %s", strerror(errno));
	pid_t inner = fork();
	if (inner < 0)
		tu_child_fail(3, "fork: %s", strerror(errno));
	if (inner == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		set_endpoint(a->seg, a->endpoint, (uint32_t)getpid()); /* 1 */
		if (write(a->report, &(pid_t){0}, sizeof(pid_t)) != sizeof(pid_t))
			_exit(4);
		_exit(child_sleep_until_killed(WAIT_MS));
	}
	if (write(a->report, &inner, sizeof(inner)) != sizeof(inner))
		tu_child_fail(5, "write: %s", strerror(errno));
	while (waitpid(inner, &st, 0) < 0 && errno == EINTR)
		;
	return 0;
}

/* Start twin container @p idx for endpoint @p endpoint: @return the pid here of its pid 1. */
static pid_t twin_start(struct tu_procs *ps, struct twin_args *a, int idx)
{
	pid_t inner = 0, attached = -1;
	int p[2];

	ck_assert_int_eq(pipe(p), 0);
	a->report = p[1];
	tu_spawn(ps, "container", twin_container, a, idx);
	/* Its pid here, and a 0 once it attached (in either order). */
	for (int k = 0; k < 2; k++) {
		pid_t v;
		ck_assert_int_eq(read(p[0], &v, sizeof(v)), sizeof(v));
		if (v)
			inner = v;
		else
			attached = 0;
	}
	ck_assert(inner > 0 && attached == 0);
	close(p[0]);
	close(p[1]);
	return inner;
}

/* Two containers, each a pid 1 that attaches a producer of one segment
 * (what twin_pid1 did): both endpoints record pid 1, and the segment does
 * not say which container is whose.  The daemon judged both by the first
 * container and reaped the second one's live endpoint when the first died;
 * now it cannot judge them: neither reaped nor watched.  A plain producer
 * beside them is watched and reaped when it dies. */
START_TEST(test_adopt_twin_nested)
{
	struct daemon d;
	struct proto_msg rep;
	struct tu_procs ps;
	pinshm_channel_attr_t attr;

	if (!pid_namespaces_here()) {
		fprintf(stderr, "note: no PID namespaces here (root needed): the twin containers test is skipped\n");
		return;
	}
	daemon_start(&d);
	tu_procs_init(&ps);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 3, 1);
	int seg = tu_create(&attr);
	void *base = map_segment(seg); /* inherited by the children: they map it */
	struct twin_args a0 = {.seg = seg, .endpoint = 0}, a1 = {.seg = seg, .endpoint = 1};
	pid_t first = twin_start(&ps, &a0, 0);
	twin_start(&ps, &a1, 1);
	int plain = tu_spawn(&ps, "plain", reap_sleeper, NULL, 2);
	set_endpoint(seg, 2, (uint32_t)ps.pid[plain]);
	set_endpoint(seg, 3, (uint32_t)getpid()); /* the consumer: the caller */
	int sock = raw_hello(&d);
	TU_RC(raw_adopt(sock, "twin", &attr, PINSHM_CONSUMER, 3, seg, 1, &rep), 0);

	/* The first container's process dies, then the plain producer: once
	 * the latter is reaped, the daemon has seen the former's exit too. */
	ck_assert_int_eq(kill(first, SIGKILL), 0);
	TU_RC(tu_wait_one(&ps, 0, WAIT_MS), 0);
	kill_child(&ps, plain);
	int reap_ms = REAP_MS * (pinshmd_wrapper() ? DAEMON_WRAPPER_SLOWDOWN : 1);
	uint64_t deadline = tu_now_ms() + (uint64_t)reap_ms;
	while (endpoint_state(base, 2) == EP_ACTIVE && tu_now_ms() < deadline)
		usleep(10000);
	ck_assert_msg(endpoint_state(base, 2) != EP_ACTIVE, "the plain producer not reaped in %d ms", reap_ms);
	pinshm_status_t s;
	CLIENT_RC(c, pinshm_status(c, &s, NULL, NULL), 0); /* a round trip: that turn of the loop is over */
	ck_assert_msg(endpoint_state(base, 1) == EP_ACTIVE, "the second container's live producer was reaped");
	ck_assert_uint_eq(endpoint_state(base, 0), EP_ACTIVE); /* not judged: left as it is */

	close(sock); /* not watched: the channel goes with its connection */
	wait_counts(c, 1, 0);
	tu_kill_all(&ps);
	munmap(base, tu_fd_size(seg));
	close(seg);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A daemon in a PID namespace of its own (as in a container), its client
 * outside (what outer_client did): the daemon sees the client as pid 0,
 * and the client's endpoints record pids the daemon cannot see.  After a
 * restart the client hands its channel back: its live endpoints were
 * taken for gone and reaped, and another process took its producer's
 * place (two producers on a lane of one).  Now they are not judged. */
START_TEST(test_adopt_unseen_client)
{
	struct daemon d;
	pinshm_channel_t *prod, *cons, *other;
	char buf[16];
	size_t len;

	if (!pid_namespaces_here()) {
		fprintf(stderr, "note: no PID namespaces here (root needed): the unseen client test is skipped\n");
		return;
	}
	unsetenv("NOTIFY_SOCKET");
	daemon_prepare(&d, &(struct daemon_opts){0});
	daemon_spawn(&d, &(struct daemon_opts){.own_pid_ns = true});
	daemon_wait_ready(&d);
	pinshm_client_t *cc = connect_create_small(&d, "x");
	CLIENT_RC(cc, pinshm_open(cc, "x", PINSHM_PRODUCER, &prod), 0);
	CLIENT_RC(cc, pinshm_open(cc, "x", PINSHM_CONSUMER, &cons), 0);
	TU_RC(pinshm_send(prod, "one", 3, CALL_MS), 0);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);

	daemon_kill9(&d);
	daemon_spawn(&d, &(struct daemon_opts){.own_pid_ns = true});
	daemon_wait_ready(&d);
	CLIENT_RC(cc, pinshm_reconnect(cc), 0); /* hands "x" back */
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_open(c, "x", PINSHM_PRODUCER, &other), -EBUSY); /* its producer lives */
	TU_RC(pinshm_send(prod, "two", 3, CALL_MS), 0);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert(len == 3 && memcmp(buf, "two", 3) == 0);

	pinshm_channel_close(prod);
	pinshm_channel_close(cons);
	pinshm_disconnect(cc);
	wait_counts(c, 1, 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* ======================================================================== */
/* scale                                                                     */
/* ======================================================================== */

#define SCALE_CLIENTS 200

/* Wait until the daemon counts @p connections and @p channels. */
static void wait_counts(pinshm_client_t *c, uint32_t connections, uint32_t channels)
{
	pinshm_status_t st;
	uint64_t deadline = tu_now_ms() + 10000;

	do {
		CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
		if (st.connections == connections && st.channels_pinned + st.channels_unpinned == channels)
			return;
		tu_sleep_ms(20);
	} while (tu_now_ms() < deadline);
	ck_abort_msg("the daemon counts %u connections and %u channels, want %u and %u", st.connections,
		     st.channels_pinned + st.channels_unpinned, connections, channels);
}

/* The daemon @p d serves @p c alone, holds no channel and nothing pinned, and
 * has no more memory locked than @p lck0 kB (what it had before). */
static void assert_holds_nothing(const struct daemon *d, pinshm_client_t *c, long lck0)
{
	pinshm_status_t st;

	wait_counts(c, 1, 0);
	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	ck_assert_uint_eq(st.pinned, 0);
	ck_assert_int_le(daemon_locked_kb_at_most(d->pid, lck0), lck0);
}

/* One of the 200: its own channel, a message through it, then wait for
 * the release (its pipe closing) and leave. */
static void scale_client(const char *sock, int idx, int ready, int release)
{
	pinshm_client_t *c;
	pinshm_channel_t *prod, *cons;
	pinshm_channel_attr_t attr;
	char name[32], buf[32];
	size_t len;

	snprintf(name, sizeof(name), "scale-%d", idx);
	int rc = pinshm_connect(sock, &c);
	if (rc != 0)
		tu_child_fail(2, "connect %d: %s (%s)", idx, pinshm_strerror(rc), pinshm_client_error(NULL));
	attr_small(&attr, 1, 1);
	if ((rc = pinshm_create(c, name, &attr, 0600, 0)) != 0 ||
	    (rc = pinshm_open(c, name, PINSHM_PRODUCER, &prod)) != 0 ||
	    (rc = pinshm_open(c, name, PINSHM_CONSUMER, &cons)) != 0)
		tu_child_fail(3, "%s: %s (%s)", name, pinshm_strerror(rc), pinshm_client_error(c));
	if ((rc = pinshm_send(prod, name, strlen(name), CALL_MS)) != 0 ||
	    (rc = pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS)) != 0 || len != strlen(name) ||
	    memcmp(buf, name, len) != 0)
		tu_child_fail(4, "%s: the message did not come back (%s)", name, pinshm_strerror(rc));
	if (write(ready, "r", 1) != 1)
		tu_child_fail(5, "ready: %s", strerror(errno));
	while (read(release, buf, 1) < 0 && errno == EINTR)
		;
	pinshm_channel_close(prod);
	pinshm_channel_close(cons);
	pinshm_disconnect(c);
	_exit(0);
}

/* SCALE_CLIENTS processes connected at once, each with its own channel:
 * every one served, counted and accounted; all gone afterwards. */
START_TEST(test_200_clients)
{
	struct daemon d;
	pid_t pids[SCALE_CLIENTS];
	int ready[2], release[2];
	pinshm_status_t st;
	pinshm_list_entry_t *e;
	size_t n;

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	long rss0 = proc_status_value_kb(d.pid, "VmRSS:"), lck0 = proc_status_value_kb(d.pid, "VmLck:");
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(release), 0);
	for (int i = 0; i < SCALE_CLIENTS; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(ready[0]);
			close(release[1]);
			scale_client(d.sock, i, ready[1], release[0]);
		}
	}
	close(ready[1]);
	close(release[0]);
	uint64_t deadline = tu_now_ms() + WAIT_MS;
	for (int got = 0; got < SCALE_CLIENTS;) {
		struct pollfd p = {.fd = ready[0], .events = POLLIN};
		ck_assert_msg(tu_now_ms() < deadline, "%d of %d clients ready", got, SCALE_CLIENTS);
		if (poll(&p, 1, 1000) <= 0)
			continue;
		char b[SCALE_CLIENTS];
		ssize_t r = read(ready[0], b, sizeof(b));
		ck_assert_msg(r > 0, "a client failed before it was ready");
		got += (int)r;
	}

	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	ck_assert_uint_eq(st.connections, SCALE_CLIENTS + 1);
	ck_assert_uint_eq(st.channels_pinned + st.channels_unpinned, SCALE_CLIENTS);
	CLIENT_RC(c, pinshm_list(c, &e, &n), 0);
	ck_assert_uint_eq(n, SCALE_CLIENTS);
	uint64_t bytes = 0;
	for (size_t i = 0; i < n; i++) {
		bytes += e[i].size;
		ck_assert_uint_eq(e[i].producers, 1);
		ck_assert_uint_eq(e[i].consumers, 1);
	}
	free(e);
	long rss = proc_status_value_kb(d.pid, "VmRSS:"), lck = proc_status_value_kb(d.pid, "VmLck:");
	fprintf(stderr, "check_lifecycle: %d clients, %d channels of %llu bytes: pinshmd VmRSS %ld kB (%ld at rest), "
			"VmLck %ld kB (%ld at rest)\n",
		SCALE_CLIENTS, SCALE_CLIENTS, (unsigned long long)(bytes / SCALE_CLIENTS), rss, rss0, lck, lck0);
	if (st.channels_unpinned == 0) {
		ck_assert_uint_eq(st.pinned, bytes);
		ck_assert_int_ge(lck - lck0, (long)(bytes / 1024));
	}

	close(release[1]);
	for (int i = 0; i < SCALE_CLIENTS; i++) {
		int status;
		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "client %d: status %#x", i, status);
	}
	assert_holds_nothing(&d, c, lck0);
	close(ready[0]);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A user creates channels until the daemon's default per-user limit
 * (2048, through three connections: one references at most 1024): the
 * next one gets -EUSERS; the daemon keeps serving (list, status, open)
 * and, once some are unlinked, takes new ones again; its accounting is
 * exact throughout and back to nothing at the end. */
#define MANY_CHANNELS 2048
#define CONNECTION_CHANNELS 1024

START_TEST(test_thousands_of_channels)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_status_t st;
	pinshm_list_entry_t *e;
	pinshm_channel_t *ch;
	pinshm_client_t *cs[3];
	char name[PINSHM_NAME_MAX + 1];
	size_t n;
	int made = 0, rc = 0;

	daemon_start(&d);
	long lck0 = proc_status_value_kb(d.pid, "VmLck:");
	for (int i = 0; i < 3; i++)
		cs[i] = connect_ok(&d);
	pinshm_client_t *c = cs[2];
	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, 1);
	while (made <= MANY_CHANNELS) {
		pinshm_client_t *by = cs[made / CONNECTION_CHANNELS];
		snprintf(name, sizeof(name), "many-%d", made);
		rc = pinshm_create(by, name, &attr, 0600, PINSHM_PERSISTENT);
		if (rc != 0)
			break;
		made++;
	}
	ck_assert_int_eq(made, MANY_CHANNELS);
	ck_assert_msg(rc == -EUSERS, "channel %d: %d (%s)", made + 1, rc, pinshm_client_error(c));

	CLIENT_RC(c, pinshm_list(c, &e, &n), 0); /* still served */
	ck_assert_uint_eq(n, MANY_CHANNELS);
	uint64_t bytes = 0;
	for (size_t i = 0; i < n; i++)
		bytes += e[i].size;
	free(e);
	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	ck_assert_uint_eq(st.channels_pinned + st.channels_unpinned, MANY_CHANNELS);
	if (st.channels_unpinned == 0)
		ck_assert_uint_eq(st.pinned, bytes);
	CLIENT_RC(c, pinshm_open(c, "many-7", PINSHM_CONSUMER, &ch), 0);
	TU_RC(pinshm_channel_close(ch), 0);

	/* The first connection's channels unlinked and let go: room again. */
	for (int i = 0; i < MANY_CHANNELS; i++) {
		snprintf(name, sizeof(name), "many-%d", i);
		CLIENT_RC(c, pinshm_unlink(c, name), 0);
		if (i == CONNECTION_CHANNELS - 1) {
			pinshm_disconnect(cs[0]);
			wait_counts(c, 2, MANY_CHANNELS - CONNECTION_CHANNELS);
			CLIENT_RC(c, pinshm_create(c, "many-again", &attr, 0600, 0), 0);
			CLIENT_RC(c, pinshm_unlink(c, "many-again"), 0);
		}
	}
	pinshm_disconnect(cs[1]);
	wait_counts(c, 1, 1); /* many-again lives while its creator is connected */
	pinshm_disconnect(c);
	c = connect_ok(&d);
	assert_holds_nothing(&d, c, lck0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A daemon with few descriptors under many clients: it refuses what it
 * cannot take, keeps serving the others, does not spin, and takes new
 * clients once descriptors are free again. */
START_TEST(test_emfile_scale)
{
	struct daemon d;
	struct daemon_opts o = {.nofile = 40};
	pinshm_client_t *cs[100];
	pinshm_channel_attr_t attr;
	int connected = 0, created = 0, refused = 0;
	char name[32];

	daemon_start_opts(&d, &o);
	pinshm_client_t *first = connect_ok(&d);
	attr_small(&attr, 1, 1);
	for (int i = 0; i < 100; i++) {
		int rc = pinshm_connect(d.sock, &cs[i]);
		if (rc != 0) {
			cs[i] = NULL;
			refused++;
			continue;
		}
		connected++;
		snprintf(name, sizeof(name), "emfile-%d", i);
		rc = pinshm_create(cs[i], name, &attr, 0600, 0);
		created += rc == 0;
	}
	ck_assert_msg(refused > 0, "every one of 100 connections admitted under RLIMIT_NOFILE 40");
	ck_assert_int_gt(connected, 0);
	/* Served, whether the daemon has a descriptor left for a segment or not. */
	int rc = pinshm_create(first, "emfile-first", &attr, 0600, 0);
	ck_assert_msg(rc == 0 || rc == -EMFILE || rc == -ENFILE, "create: %s (%s)", pinshm_strerror(rc),
		      pinshm_client_error(first));
	pinshm_status_t st;
	CLIENT_RC(first, pinshm_status(first, &st, NULL, NULL), 0);
	ck_assert_uint_eq(st.connections, (uint32_t)connected + 1);
	ck_assert_uint_eq(st.channels_pinned + st.channels_unpinned, (uint32_t)created + (rc == 0));
	daemon_assert_idle(&d, 1000, "out of descriptors with clients waiting");

	for (int i = 0; i < 100; i++)
		pinshm_disconnect(cs[i]);
	wait_counts(first, 1, rc == 0);
	pinshm_client_t *late = connect_ok(&d);
	CLIENT_RC(late, pinshm_create(late, "emfile-late", &attr, 0600, 0), 0);
	pinshm_disconnect(late);
	pinshm_disconnect(first);
	daemon_stop_ok(&d);
}
END_TEST

/* The default per-user limit of connections (pinshmd.conf(5)): 512, half
 * of the daemon's, so one user cannot take them all. */
START_TEST(test_default_user_limit)
{
	struct daemon d;
	pinshm_client_t *cs[512], *over;
	struct rlimit rl;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 600) {
		rl.rlim_cur = rl.rlim_max < 600 ? rl.rlim_max : 600;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < 600) {
		fprintf(stderr, "check_lifecycle: test_default_user_limit skipped: RLIMIT_NOFILE %llu\n",
			(unsigned long long)rl.rlim_cur);
		return;
	}
	daemon_start(&d);
	for (int i = 0; i < 512; i++)
		cs[i] = connect_ok(&d);
	CLIENT_RC(NULL, pinshm_connect(d.sock, &over), -EUSERS);
	pinshm_disconnect(cs[0]);
	wait_counts(cs[1], 511, 0);
	CLIENT_RC(NULL, pinshm_connect(d.sock, &over), 0);
	pinshm_disconnect(over);
	for (int i = 1; i < 512; i++)
		pinshm_disconnect(cs[i]);
	daemon_stop_ok(&d);
}
END_TEST

/* A connection that never sends a packet is closed after LOOP_SILENT_MS
 * (5 s); one that has spoken stays however long it is idle. */
START_TEST(test_silent_connection)
{
	struct daemon d;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char b;

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_uint_lt(strlen(d.sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, d.sock, strlen(d.sock) + 1);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	uint64_t t0 = tu_now_ms();
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ck_assert_int_eq(poll(&p, 1, 15000), 1);
	uint64_t waited = tu_now_ms() - t0;
	ck_assert_int_eq(recv(fd, &b, 1, 0), 0);
	ck_assert_msg(waited >= 4000, "closed after %llu ms, before its time", (unsigned long long)waited);
	close(fd);
	wait_counts(c, 1, 0); /* the client that spoke is still served */
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

static Suite *lifecycle_suite(void)
{
	Suite *s = suite_create("lifecycle");
	TCase *tc = tcase_create("pidfd");

	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_pidfd_forked_holder);
	tcase_add_test(tc, test_pidfd_child_exit);
	suite_add_tcase(s, tc);

	tc = tcase_create("autostart");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_autostart_race);
	tcase_add_test(tc, test_autostart_running);
	tcase_add_test(tc, test_autostart_env);
	suite_add_tcase(s, tc);

	tc = tcase_create("restart");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_restart_fdstore);
	tcase_add_test(tc, test_store_not_read);
	tcase_add_loop_test(tc, test_store_removal_resent, 0, REMOVAL_COUNT);
	tcase_add_test(tc, test_store_removals_bounded);
	tcase_add_test(tc, test_store_removal_lost);
	tcase_add_test(tc, test_store_unlink_handed_back);
	tcase_add_test(tc, test_store_shm_mode_umask);
	tcase_add_test(tc, test_restart_handback);
	tcase_add_test(tc, test_restart_repeatedly);
	tcase_add_test(tc, test_adopt_hostile);
	tcase_add_test(tc, test_adopt_refs_full);
	tcase_add_test(tc, test_adopt_bogus_pids);
	suite_add_tcase(s, tc);

	tc = tcase_create("pin_idle");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_restart_store_pin_idle);
	tcase_add_test(tc, test_restart_store_v1_record);
	tcase_add_test(tc, test_restart_store_bad_records);
	tcase_add_loop_test(tc, test_restart_store_duplicate, 0, DUP_COUNT);
	tcase_add_test(tc, test_restart_handback_pin_idle);
	tcase_add_test(tc, test_adopt_unlocked_header);
	suite_add_tcase(s, tc);

	tc = tcase_create("reap");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_reap_died_store);
	tcase_add_test(tc, test_reap_died_handback);
	tcase_add_test(tc, test_reap_died_term);
	tcase_add_test(tc, test_reap_reused_pid);
	tcase_add_test(tc, test_reap_later_store);
	tcase_add_test(tc, test_reap_later_handback);
	tcase_add_test(tc, test_reap_later_nested);
	tcase_add_test(tc, test_reap_died_handback_eventfd);
	tcase_add_test(tc, test_reap_later_handback_eventfd);
	tcase_add_test(tc, test_reap_died_store_eventfd);
	tcase_add_test(tc, test_reap_later_store_eventfd);
	tcase_add_test(tc, test_restart_store_eventfd_exact);
	tcase_add_test(tc, test_handback_eventfd_not_stored);
	suite_add_tcase(s, tc);

	tc = tcase_create("judge");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_adopt_flood_one_pid);
	tcase_add_test(tc, test_adopt_watch_cap);
	tcase_add_test(tc, test_adopt_nested_scan_reused);
	tcase_add_test(tc, test_adopt_long_maps);
	tcase_add_test(tc, test_adopt_long_map_lines);
	tcase_add_test(tc, test_adopt_twin_nested);
	tcase_add_test(tc, test_adopt_unseen_client);
	suite_add_tcase(s, tc);

	tc = tcase_create("scale");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_200_clients);
	tcase_add_test(tc, test_thousands_of_channels);
	tcase_add_test(tc, test_emfile_scale);
	tcase_add_test(tc, test_silent_connection);
	tcase_add_test(tc, test_default_user_limit);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(lifecycle_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
