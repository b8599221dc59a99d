/*
 * check_daemon.c - pinshmd and the client API, end to end.
 *
 * Every test starts a real pinshmd (the one just built: $PINSHMD) in the
 * foreground on a socket in a fresh folder under /tmp, talks to it through
 * libpinshm and through hand-made packets, and stops it with SIGTERM,
 * checking that it exits cleanly.  The daemon dies with the test process
 * (PR_SET_PDEATHSIG), so a failed test leaves no daemon behind.
 *
 * The permission tests need root: they create the user pinshm-test-a
 * (useradd -M -N) when it is missing and run clients, and a daemon, as it.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "daemonutil.h"
#include "pinshm.h"
#include "protocol.h"
#include "testutil.h"

#define KiB 1024u
#define START_MS 15000 /* for a daemon to accept */
#define STOP_MS 10000  /* for it to exit after SIGTERM */
#define WAIT_MS 60000  /* for the children of a test */
#define CALL_MS 20000  /* for one blocking call */
#define MESSAGES 10000u

/* ======================================================================== */
/* clients                                                                   */
/* ======================================================================== */

static void attr_small(pinshm_channel_attr_t *a, unsigned producers, unsigned consumers)
{
	tu_attr(a, PINSHM_QUEUE, 64 * KiB, producers, consumers);
}

/* ======================================================================== */
/* hand-made packets                                                         */
/* ======================================================================== */

struct pkt {
	uint8_t b[8192];
	size_t len;
};

static void pk_le(struct pkt *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p->b[p->len++] = (uint8_t)(v >> (8 * i));
}

static void pk_bytes(struct pkt *p, const void *src, size_t n)
{
	memcpy(p->b + p->len, src, n);
	p->len += n;
}

static void pk_name(struct pkt *p, const char *name)
{
	uint8_t field[PROTO_NAME_FIELD] = {0};

	memcpy(field, name, strnlen(name, sizeof(field)));
	pk_bytes(p, field, sizeof(field));
}

/* A header, its length field left 0 for pk_end() to fill. */
static void pk_header(struct pkt *p, uint32_t magic, uint16_t version, uint16_t type, uint32_t seq)
{
	p->len = 0;
	pk_le(p, magic, 4);
	pk_le(p, version, 2);
	pk_le(p, type, 2);
	pk_le(p, 0, 4);
	pk_le(p, seq, 4);
}

static void pk_end(struct pkt *p)
{
	for (unsigned i = 0; i < 4; i++)
		p->b[8 + i] = (uint8_t)(p->len >> (8 * i));
}

/* A CREATE of a 64 KiB queue @p name, mode 0600, no node, next to PCI
 * device @p pci ("": none), as the wire has it. */
static void pk_create(struct pkt *p, uint32_t seq, const char *name, const char *pci)
{
	pk_header(p, PROTO_MAGIC, PROTO_VERSION, PROTO_CREATE, seq);
	pk_name(p, name);
	pk_le(p, PINSHM_QUEUE, 4);
	pk_le(p, 0, 4);
	pk_le(p, 64 * KiB, 8);
	pk_le(p, 0, 4);
	pk_le(p, 1, 4);
	pk_le(p, 1, 4);
	pk_le(p, 0600, 4);
	pk_le(p, 0, 4);
	pk_le(p, (uint32_t)PINSHM_NODE_ANY, 4);
	pk_le(p, PINSHM_PIN_DEFAULT, 4);
	pk_name(p, pci);
	pk_end(p);
}

static void pk_hello(struct pkt *p, uint16_t hdr_version, uint32_t version, uint32_t seq)
{
	pk_header(p, PROTO_MAGIC, hdr_version, PROTO_HELLO, seq);
	pk_le(p, version, 4);
	pk_le(p, 0x000100, 4);
	pk_end(p);
}

/* A LIST request with sequence number @p seq. */
static void pk_list(struct pkt *p, uint32_t seq)
{
	pk_header(p, PROTO_MAGIC, PROTO_VERSION, PROTO_LIST, seq);
	pk_le(p, 0, 8);
	pk_end(p);
}

/* A DEVICE report: channel @p id is used from CUDA device 1. */
static void pk_device(struct pkt *p, uint32_t seq, uint64_t id)
{
	pk_header(p, PROTO_MAGIC, PROTO_VERSION, PROTO_DEVICE, seq);
	pk_le(p, id, 8);
	pk_le(p, PINSHM_DEVICE_CUDA, 4);
	pk_le(p, 1, 4);
	pk_end(p);
}

static int raw_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
	return fd;
}

/* Send @p p with @p nfds copies of descriptor @p fd attached. */
static void raw_send(int sock, const struct pkt *p, int fd, unsigned nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(16 * sizeof(int))];
	} control;
	struct iovec iov = {.iov_base = (void *)p->b, .iov_len = p->len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};

	ck_assert_uint_le(nfds, 16);
	if (nfds) {
		memset(&control, 0, sizeof(control));
		msg.msg_control = control.buf;
		msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		for (unsigned i = 0; i < nfds; i++)
			memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof(int));
	}
	ck_assert_msg(sendmsg(sock, &msg, MSG_NOSIGNAL) == (ssize_t)p->len, "sendmsg: %s", strerror(errno));
}

/* Receive one packet, waiting at most @p ms. @return its length, 0 at EOF, -ETIMEDOUT. */
static ssize_t raw_recv(int sock, uint8_t *buf, size_t cap, int ms)
{
	struct pollfd p = {.fd = sock, .events = POLLIN};

	if (poll(&p, 1, ms) != 1)
		return -ETIMEDOUT;
	ssize_t n = recv(sock, buf, cap, MSG_DONTWAIT);
	return n < 0 ? -errno : n;
}

/* Receive and decode one reply. */
static void raw_reply(int sock, struct proto_msg *m)
{
	uint8_t buf[PROTO_MAX_PACKET];
	ssize_t n = raw_recv(sock, buf, sizeof(buf), CALL_MS);

	ck_assert_msg(n > 0, "no reply: %zd", n);
	ck_assert_int_eq(proto_decode(buf, (size_t)n, true, m), 0);
}

/* OPEN @p name as a consumer (sequence number 1) on the raw connection
 * @p sock, which must succeed; the reply into @p m (its descriptor is
 * dropped by recv()). */
static void raw_open_consumer(int sock, const char *name, struct proto_msg *m)
{
	struct pkt p;

	pk_header(&p, PROTO_MAGIC, PROTO_VERSION, PROTO_OPEN, 1);
	pk_name(&p, name);
	pk_le(&p, PINSHM_CONSUMER, 4);
	pk_le(&p, (uint32_t)PINSHM_NODE_ANY, 4);
	pk_le(&p, PROTO_OWNER_ANY, 4);
	pk_end(&p);
	raw_send(sock, &p, -1, 0);
	raw_reply(sock, m);
	ck_assert_int_eq(m->status, 0);
}

/* RELOCK channel @p id (sequence number @p seq) on the raw connection
 * @p sock: @return the reply's status. */
static int32_t raw_relock(int sock, uint64_t id, uint32_t seq)
{
	struct pkt p;
	struct proto_msg m;

	pk_header(&p, PROTO_MAGIC, PROTO_VERSION, PROTO_RELOCK, seq);
	pk_le(&p, id, 8);
	pk_end(&p);
	raw_send(sock, &p, -1, 0);
	raw_reply(sock, &m);
	ck_assert_uint_eq(m.h.type, PROTO_RELOCK | PROTO_REPLY);
	return m.status;
}

/* ======================================================================== */
/* helpers for /proc and /dev/shm                                            */
/* ======================================================================== */

/* Lines of /proc/PID/maps that contain @p what. */
static unsigned proc_maps_count(pid_t pid, const char *what)
{
	char path[64], line[512];
	unsigned n = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (strstr(line, what))
			n++;
	fclose(f);
	return n;
}

/* ======================================================================== */
/* core: create, open, exchange, errors, lifetimes, listings, pinning        */
/* ======================================================================== */

struct exchange {
	const char *sock;
	const char *name;
	size_t max_len;
};

static int exchange_producer(void *arg, int idx)
{
	struct exchange *x = arg;
	pinshm_client_t *c;
	pinshm_channel_t *ch = child_connect_open(x->sock, x->name, PINSHM_PRODUCER, &c);
	uint8_t buf[1024];

	(void)idx;
	for (uint64_t seq = 0; seq < MESSAGES; seq++) {
		size_t len = tu_msg_len(0, seq, x->max_len);
		tu_msg_fill(buf, len, 0, seq);
		int rc = pinshm_send(ch, buf, len, CALL_MS);
		if (rc != 0)
			tu_child_fail(4, "send %llu: %s", (unsigned long long)seq, pinshm_strerror(rc));
	}
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	return 0;
}

static int exchange_consumer(void *arg, int idx)
{
	struct exchange *x = arg;
	pinshm_client_t *c;
	pinshm_channel_t *ch = child_connect_open(x->sock, x->name, PINSHM_CONSUMER, &c);
	uint8_t buf[1024];
	char why[200];

	(void)idx;
	for (uint64_t want = 0; want < MESSAGES; want++) {
		size_t len;
		uint32_t producer;
		uint64_t seq;
		int rc = pinshm_recv(ch, buf, sizeof(buf), &len, CALL_MS);
		if (rc != 0)
			tu_child_fail(4, "recv %llu: %s", (unsigned long long)want, pinshm_strerror(rc));
		if (tu_msg_check(buf, len, x->max_len, &producer, &seq, why, sizeof(why)) != 0)
			tu_child_fail(5, "message %llu: %s", (unsigned long long)want, why);
		if (producer != 0 || seq != want)
			tu_child_fail(6, "got message %u/%llu, want 0/%llu", producer, (unsigned long long)seq,
				      (unsigned long long)want);
	}
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	return 0;
}

START_TEST(test_exchange)
{
	struct daemon d;
	pinshm_list_entry_t e;
	struct tu_procs ps;
	struct exchange x = {.name = "exchange", .max_len = 1000};
	unsigned shm_before = shm_pinshm_entries();

	daemon_start(&d);
	x.sock = d.sock;
	pinshm_client_t *c = connect_create_small(&d, "exchange");
	ck_assert(list_find(c, "exchange", &e, NULL));
	ck_assert_uint_eq(e.producers + e.consumers, 0);

	tu_procs_init(&ps);
	tu_spawn(&ps, "consumer", exchange_consumer, &x, 0);
	tu_spawn(&ps, "producer", exchange_producer, &x, 0);
	tu_wait_all_ok(&ps, WAIT_MS);

	/* Both closed their endpoints; the channel lives while we are connected. */
	ck_assert(list_find(c, "exchange", &e, NULL));
	ck_assert_uint_eq(e.producers, 0);
	ck_assert_uint_eq(e.consumers, 0);
	ck_assert_uint_eq(e.kind, PINSHM_QUEUE);
	ck_assert_uint_eq(e.capacity, 64 * KiB);
	ck_assert_uint_eq(e.mode, 0600);
	ck_assert_uint_eq(e.uid, geteuid());
	ck_assert_uint_eq(shm_pinshm_entries(), shm_before);
	pinshm_disconnect(c);

	/* Not persistent: gone with its last connection. */
	c = connect_ok(&d);
	ck_assert(!list_find(c, "exchange", NULL, NULL));
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

START_TEST(test_errors)
{
	static const char *const bad_names[] = {
		"", ".hidden", "a/b", "sp ace", "tab\t", "caf\xc3\xa9", "semi;colon",
		"0123456789012345678901234567890123456789012345678901234567890123", /* 64 */
	};
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *ch, *ch2;

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	attr_small(&attr, 1, 1);

	CLIENT_RC(c, pinshm_open(c, "missing", PINSHM_CONSUMER, &ch), -ENOENT);
	ck_assert_ptr_null(ch);
	ck_assert(strstr(pinshm_client_error(c), "missing") != NULL);
	CLIENT_RC(c, pinshm_unlink(c, "missing"), -ENOENT);

	CLIENT_RC(c, pinshm_create(c, "dup", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "dup", &attr, 0600, 0), -EEXIST);
	CLIENT_RC(c, pinshm_create(c, "dup", NULL, 0644, PINSHM_PERSISTENT), -EEXIST);

	for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		CLIENT_RC(c, pinshm_create(c, bad_names[i], &attr, 0600, 0), -EINVAL);
		CLIENT_RC(c, pinshm_open(c, bad_names[i], PINSHM_PRODUCER, &ch), -EINVAL);
		CLIENT_RC(c, pinshm_unlink(c, bad_names[i]), -EINVAL);
	}
	CLIENT_RC(c, pinshm_create(c, NULL, &attr, 0600, 0), -EINVAL);
	/* The longest name, and every allowed character. */
	static const char longest[] = "012345678901234567890123456789012345678901234567890123456789012";
	ck_assert_uint_eq(strlen(longest), PINSHM_NAME_MAX);
	CLIENT_RC(c, pinshm_create(c, longest, &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "Az09._-x", &attr, 0600, 0), 0);

	pinshm_channel_attr_t bad = attr;
	bad.capacity = 1000;
	CLIENT_RC(c, pinshm_create(c, "badgeo", &bad, 0600, 0), -EINVAL);
	CLIENT_RC(c, pinshm_create(c, "badmode", &attr, 01600, 0), -EINVAL);
	CLIENT_RC(c, pinshm_create(c, "badflags", &attr, 0600, 0x10), -EINVAL);
	CLIENT_RC(c, pinshm_open(c, "dup", (pinshm_role_t)3, &ch), -EINVAL);

	/* One producer endpoint: the second open is refused, then allowed
	 * again once the first closed. */
	CLIENT_RC(c, pinshm_open(c, "dup", PINSHM_PRODUCER, &ch), 0);
	CLIENT_RC(c, pinshm_open(c, "dup", PINSHM_PRODUCER, &ch2), -EBUSY);
	pinshm_channel_close(ch);
	CLIENT_RC(c, pinshm_open(c, "dup", PINSHM_PRODUCER, &ch2), 0);
	pinshm_channel_close(ch2);

	/* The daemon checks names itself: a hand-made CREATE with a bad name
	 * gets -EINVAL, and the connection stays open. */
	struct pkt p;
	struct proto_msg m;
	int s = raw_connect(d.sock);
	pk_create(&p, 7, "bad/name", "");
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_uint_eq(m.h.type, PROTO_CREATE | PROTO_REPLY);
	ck_assert_uint_eq(m.h.seq, 7);
	ck_assert_int_eq(m.status, -EINVAL);
	/* So are PCI bus ids, which become paths: one that climbs out of sysfs
	 * gets -EINVAL before any file is opened. */
	static const char *const bad_pci[] = {"../../../../etc", "0000:3b:00.0/../../x", "0000:3B:00.0"};
	for (size_t i = 0; i < sizeof(bad_pci) / sizeof(bad_pci[0]); i++) {
		pk_create(&p, 9, "pci-bad", bad_pci[i]);
		raw_send(s, &p, -1, 0);
		raw_reply(s, &m);
		ck_assert_int_eq(m.status, -EINVAL);
		ck_assert_msg(strstr(m.text, "invalid PCI bus id"), "%s", m.text);
	}
	/* A DEVICE report for a channel this connection does not hold. */
	pk_device(&p, 10, 4242);
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_uint_eq(m.h.type, PROTO_DEVICE | PROTO_REPLY);
	ck_assert_int_eq(m.status, -ENOENT);
	/* Nor for one it only references (created, no endpoint attached):
	 * it would keep the channel locked with no device. */
	pk_create(&p, 11, "dev-ref", "");
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_int_eq(m.status, 0);
	pk_device(&p, 12, m.u.create_reply.id);
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_int_eq(m.status, -EPERM);
	ck_assert_msg(strstr(m.text, "holds no endpoint"), "%s", m.text);
	pk_list(&p, 8);
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_int_eq(m.status, 0);
	ck_assert_uint_eq(m.u.list_reply.count, 4);
	close(s);

	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

START_TEST(test_lifetimes)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *prod, *cons, *other;
	uint8_t buf[64];
	size_t len;

	daemon_start(&d);
	attr_small(&attr, 2, 1);

	/* Non-persistent goes with its creator's connection; persistent stays. */
	pinshm_client_t *c1 = connect_ok(&d);
	CLIENT_RC(c1, pinshm_create(c1, "temp", &attr, 0600, 0), 0);
	CLIENT_RC(c1, pinshm_create(c1, "keep", &attr, 0600, PINSHM_PERSISTENT), 0);
	pinshm_disconnect(c1);
	pinshm_client_t *c2 = connect_ok(&d);
	pinshm_list_entry_t e;
	ck_assert(!list_find(c2, "temp", NULL, NULL));
	ck_assert(list_find(c2, "keep", &e, NULL));
	ck_assert(e.state & PINSHM_LIST_PERSISTENT);
	CLIENT_RC(c2, pinshm_open(c2, "temp", PINSHM_PRODUCER, &prod), -ENOENT);

	/* Unlink while open: the holders keep working, the name is free. */
	CLIENT_RC(c2, pinshm_open(c2, "keep", PINSHM_PRODUCER, &prod), 0);
	CLIENT_RC(c2, pinshm_open(c2, "keep", PINSHM_CONSUMER, &cons), 0);
	CLIENT_RC(c2, pinshm_unlink(c2, "keep"), 0);
	ck_assert(!list_find(c2, "keep", NULL, NULL));
	TU_RC(pinshm_send(prod, "after unlink", 12, CALL_MS), 0);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert_uint_eq(len, 12);
	ck_assert(memcmp(buf, "after unlink", 12) == 0);
	CLIENT_RC(c2, pinshm_create(c2, "keep", &attr, 0600, 0), 0);
	pinshm_channel_close(prod);
	pinshm_channel_close(cons);

	/* A connection that goes without closing its endpoint: the daemon reaps
	 * it, and the consumer learns that its only producer is gone. */
	pinshm_client_t *c3 = connect_ok(&d);
	pinshm_client_t *c4 = connect_ok(&d);
	CLIENT_RC(c3, pinshm_open(c3, "keep", PINSHM_PRODUCER, &other), 0);
	CLIENT_RC(c4, pinshm_open(c4, "keep", PINSHM_CONSUMER, &cons), 0);
	TU_RC(pinshm_send(other, "x", 1, CALL_MS), 0);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	pinshm_disconnect(c3);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), -EPIPE);
	pinshm_channel_forget(other); /* its endpoint was reaped: nothing to close */
	ck_assert(list_find(c4, "keep", &e, NULL));
	ck_assert_uint_eq(e.producers, 0);
	ck_assert_uint_eq(e.consumers, 1);
	pinshm_channel_close(cons);

	pinshm_disconnect(c4);
	pinshm_disconnect(c2);
	daemon_stop_ok(&d);
}
END_TEST

/* The channels that connection number @p i (in connection order) references. */
static uint32_t client_channels(pinshm_client_t *c, size_t i)
{
	pinshm_client_info_t *e;
	size_t n;

	CLIENT_RC(c, pinshm_clients(c, &e, &n), 0);
	ck_assert_uint_gt(n, i);
	uint32_t channels = e[i].channels;
	free(e);
	return channels;
}

/* CLOSE: pinshm_channel_close() gives the endpoint back at once and, with
 * the connection's last endpoint of a channel it did not create, its
 * reference: a channel nobody else holds is destroyed without a
 * disconnect.  The creator's reference lasts until it disconnects. */
START_TEST(test_close)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *p1, *p2, *cons;
	pinshm_list_entry_t e;

	daemon_start(&d);
	attr_small(&attr, 2, 1);
	pinshm_client_t *c1 = connect_ok(&d); /* connection 0: creates */
	pinshm_client_t *c2 = connect_ok(&d); /* connection 1: opens */
	CLIENT_RC(c1, pinshm_create(c1, "cl", &attr, 0600, 0), 0);
	CLIENT_RC(c2, pinshm_open(c2, "cl", PINSHM_PRODUCER, &p1), 0);
	CLIENT_RC(c2, pinshm_open(c2, "cl", PINSHM_PRODUCER, &p2), 0);
	CLIENT_RC(c2, pinshm_open(c2, "cl", PINSHM_CONSUMER, &cons), 0);
	ck_assert_uint_eq(client_channels(c1, 1), 1);
	TU_RC(pinshm_channel_close(p1), 0);
	ck_assert(list_find(c1, "cl", &e, NULL));
	ck_assert_uint_eq(e.producers, 1);
	ck_assert_uint_eq(client_channels(c1, 1), 1); /* two endpoints left */

	/* The creator leaves: c2's reference keeps the channel. */
	pinshm_disconnect(c1);
	ck_assert(list_find(c2, "cl", NULL, NULL));
	TU_RC(pinshm_send(p2, "still", 5, CALL_MS), 0);
	TU_RC(pinshm_channel_close(p2), 0);
	ck_assert(list_find(c2, "cl", NULL, NULL));
	ck_assert_uint_eq(client_channels(c2, 0), 1);
	/* The last endpoint: the reference goes, and the channel with it. */
	TU_RC(pinshm_channel_close(cons), 0);
	ck_assert(!list_find(c2, "cl", NULL, NULL));
	ck_assert_uint_eq(client_channels(c2, 0), 0);
	CLIENT_RC(c2, pinshm_create(c2, "cl", &attr, 0600, 0), 0); /* the name is free */

	/* The creator closes its own last endpoint: the channel stays. */
	CLIENT_RC(c2, pinshm_open(c2, "cl", PINSHM_CONSUMER, &cons), 0);
	TU_RC(pinshm_channel_close(cons), 0);
	ck_assert(list_find(c2, "cl", &e, NULL));
	ck_assert_uint_eq(e.consumers, 0);

	/* A handle outlives its client: closing it then tells no one. */
	CLIENT_RC(c2, pinshm_open(c2, "cl", PINSHM_CONSUMER, &cons), 0);
	pinshm_disconnect(c2);
	TU_RC(pinshm_channel_close(cons), 0);

	/* Hand-made CLOSEs: of a channel this connection does not hold, of an
	 * endpoint not its own, then the right one, then again. */
	pinshm_client_t *c3 = connect_ok(&d);
	CLIENT_RC(c3, pinshm_create(c3, "cl-raw", &attr, 0666, 0), 0);
	int s = raw_connect(d.sock);
	struct pkt p;
	struct proto_msg m;
	raw_open_consumer(s, "cl-raw", &m);
	uint64_t id = m.u.open_reply.id;
	uint32_t ep = m.u.open_reply.endpoint;
	ck_assert_uint_eq(ep, 2); /* after the two producers */
	static const struct {
		uint64_t id;
		uint32_t ep;
		int status;
	} closes[] = {{12345, 2, -ENOENT}, {0, 0, -EINVAL}, {0, 99, -EINVAL}, {0, 2, 0}, {0, 2, -ENOENT}};
	for (unsigned i = 0; i < sizeof(closes) / sizeof(closes[0]); i++) {
		pk_header(&p, PROTO_MAGIC, PROTO_VERSION, PROTO_CLOSE, 10 + i);
		pk_le(&p, closes[i].id ? closes[i].id : id, 8);
		pk_le(&p, closes[i].ep, 4);
		pk_end(&p);
		raw_send(s, &p, -1, 0);
		raw_reply(s, &m);
		ck_assert_uint_eq(m.h.type, PROTO_CLOSE | PROTO_REPLY);
		ck_assert_uint_eq(m.h.seq, 10 + i);
		ck_assert_msg(m.status == closes[i].status, "CLOSE %u: %d (%s)", i, m.status, m.text);
	}
	close(s);
	ck_assert(list_find(c3, "cl-raw", &e, NULL));
	ck_assert_uint_eq(e.consumers, 0);

	/* A child that closes a handle it inherited says nothing on its
	 * parent's connection, which stays in step, and leaves the parent's
	 * endpoint open. */
	CLIENT_RC(c3, pinshm_open(c3, "cl-raw", PINSHM_CONSUMER, &cons), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(pinshm_channel_close(cons) == 0 ? 0 : 1);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert(list_find(c3, "cl-raw", &e, NULL));
	ck_assert_uint_eq(e.consumers, 1);
	TU_RC(pinshm_channel_close(cons), 0);
	pinshm_disconnect(c3);
	daemon_stop_ok(&d);
}
END_TEST

/* The state of @p ch's endpoint, as the segment says. */
static uint32_t ep_state(const pinshm_channel_t *ch)
{
	return atomic_load_explicit(&ch->ep->state, memory_order_acquire);
}

/* An endpoint marked closed in the segment whose CLOSE has not reached the
 * daemon yet is still its connection's: an OPEN in between gets another
 * one, and that CLOSE then succeeds. */
START_TEST(test_close_not_yet_told)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *p1, *p2;

	daemon_start(&d);
	attr_small(&attr, 2, 1);
	pinshm_client_t *c1 = connect_ok(&d);
	pinshm_client_t *c2 = connect_ok(&d);
	CLIENT_RC(c1, pinshm_create(c1, "told", &attr, 0600, 0), 0);
	CLIENT_RC(c1, pinshm_open(c1, "told", PINSHM_PRODUCER, &p1), 0);
	/* What pinshm_channel_close() does first; its CLOSE comes later. */
	atomic_store_explicit(&p1->ep->state, EP_CLOSED, memory_order_release);
	CLIENT_RC(c2, pinshm_open(c2, "told", PINSHM_PRODUCER, &p2), 0);
	ck_assert_uint_ne(pinshm_channel_endpoint(p2), pinshm_channel_endpoint(p1));
	TU_RC(pinshm_channel_close(p1), 0);
	ck_assert_uint_eq(ep_state(p2), EP_ACTIVE);
	TU_RC(pinshm_channel_close(p2), 0);
	pinshm_disconnect(c2);
	pinshm_disconnect(c1);
	daemon_stop_ok(&d);
}
END_TEST

/* A handle whose client disconnected: the daemon reaps its endpoint and may
 * hand it to the next open; closing the handle after that leaves the
 * endpoint, another process's now, alone. */
START_TEST(test_close_after_disconnect)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *old, *p, *cons;
	char buf[8];
	size_t len;

	daemon_start(&d);
	attr_small(&attr, 1, 1);
	pinshm_client_t *c1 = connect_ok(&d);
	pinshm_client_t *c2 = connect_ok(&d);
	CLIENT_RC(c2, pinshm_create(c2, "late", &attr, 0600, 0), 0);
	CLIENT_RC(c2, pinshm_open(c2, "late", PINSHM_CONSUMER, &cons), 0);
	CLIENT_RC(c1, pinshm_open(c1, "late", PINSHM_PRODUCER, &old), 0);
	pinshm_disconnect(c1);
	uint64_t deadline = tu_now_ms() + CALL_MS;
	while (ep_state(old) != EP_DEAD) {
		ck_assert_msg(tu_now_ms() < deadline, "the endpoint of a disconnected client is not reaped");
		tu_sleep_ms(1);
	}
	CLIENT_RC(c2, pinshm_open(c2, "late", PINSHM_PRODUCER, &p), 0);
	ck_assert_uint_eq(pinshm_channel_endpoint(p), pinshm_channel_endpoint(old)); /* the only one */
	TU_RC(pinshm_channel_close(old), 0);
	ck_assert_uint_eq(ep_state(p), EP_ACTIVE);
	TU_RC(pinshm_send(p, "mine", 4, CALL_MS), 0);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert_uint_eq(len, 4);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_channel_close(cons), 0);
	pinshm_disconnect(c2);
	daemon_stop_ok(&d);
}
END_TEST

/* STAT: one channel, as LIST shows it; errors for a missing or bad name. */
START_TEST(test_stat)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e, l;
	pinshm_channel_t *ch;

	daemon_start(&d);
	tu_attr(&attr, PINSHM_TOPIC, 64 * KiB, 2, 3);
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_create(c, "st-a", &attr, 0640, PINSHM_PERSISTENT), 0);
	CLIENT_RC(c, pinshm_create(c, "st-b", &attr, 0600, PINSHM_USE_SHM), 0);
	CLIENT_RC(c, pinshm_open(c, "st-a", PINSHM_CONSUMER, &ch), 0);
	CLIENT_RC(c, pinshm_stat(c, "st-a", &e), 0);
	ck_assert(list_find(c, "st-a", &l, NULL));
	/* Field by field: the struct has padding. */
	ck_assert(e.kind == l.kind && e.flags == l.flags && e.capacity == l.capacity &&
		  e.max_message == l.max_message && e.max_producers == l.max_producers &&
		  e.max_consumers == l.max_consumers && e.state == l.state && e.uid == l.uid && e.gid == l.gid &&
		  e.mode == l.mode && e.size == l.size && e.producers == l.producers && e.consumers == l.consumers &&
		  e.node == l.node && e.backend == l.backend);
	ck_assert_str_eq(e.name, "st-a");
	ck_assert_uint_eq(e.kind, PINSHM_TOPIC);
	ck_assert_uint_eq(e.max_consumers, 3);
	ck_assert_uint_eq(e.consumers, 1);
	ck_assert_uint_eq(e.mode, 0640);
	ck_assert(e.state & PINSHM_LIST_PERSISTENT);
	ck_assert_uint_eq(e.backend, PINSHM_BACKEND_MEMFD);
	CLIENT_RC(c, pinshm_stat(c, "st-b", &e), 0);
	ck_assert_uint_eq(e.backend, PINSHM_BACKEND_SHM);
	CLIENT_RC(c, pinshm_stat(c, "st-none", &e), -ENOENT);
	ck_assert_msg(strstr(pinshm_client_error(c), "st-none") != NULL, "%s", pinshm_client_error(c));
	CLIENT_RC(c, pinshm_stat(c, "bad/name", &e), -EINVAL);
	CLIENT_RC(c, pinshm_unlink(c, "st-a"), 0);
	CLIENT_RC(c, pinshm_stat(c, "st-a", &e), -ENOENT); /* unlinked: no name to ask by */
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* This process's mapping of the memfd named "pinshm:@p name": its start. */
static void *mapping_of(const char *name)
{
	char line[512], what[96];
	void *start = NULL;
	FILE *f = fopen("/proc/self/maps", "r");

	ck_assert(f != NULL);
	snprintf(what, sizeof(what), "memfd:pinshm:%s ", name);
	while (!start && fgets(line, sizeof(line), f)) {
		unsigned long lo;
		if (strstr(line, what) && sscanf(line, "%lx-", &lo) == 1)
			start = (void *)lo;
	}
	fclose(f);
	ck_assert_msg(start != NULL, "'%s' is not mapped here", what);
	return start;
}

/* Per-channel statistics: what the producers committed (messages, bytes),
 * what found no room (refused), what subscribers lost to overruns, summed
 * by the daemon from the segment; counters carried over a new producer on
 * the same lane; counters a client wrote garbage into are reported as they
 * are and break nothing. */
START_TEST(test_stats)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *p1, *p2, *cons;
	pinshm_list_entry_t e;
	uint8_t buf[4096] = {0};
	size_t len;

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 2, 1);
	CLIENT_RC(c, pinshm_create(c, "stq", &attr, 0600, PINSHM_USE_MEMFD), 0);
	CLIENT_RC(c, pinshm_stat(c, "stq", &e), 0);
	ck_assert(e.messages == 0 && e.bytes == 0 && e.lost == 0 && e.refused == 0);
	CLIENT_RC(c, pinshm_open(c, "stq", PINSHM_PRODUCER, &p1), 0);
	CLIENT_RC(c, pinshm_open(c, "stq", PINSHM_PRODUCER, &p2), 0);
	CLIENT_RC(c, pinshm_open(c, "stq", PINSHM_CONSUMER, &cons), 0);
	for (int i = 0; i < 10; i++)
		TU_RC(pinshm_send(p1, buf, 100, CALL_MS), 0);
	for (int i = 0; i < 5; i++)
		TU_RC(pinshm_send(p2, buf, 7, CALL_MS), 0);
	struct iovec iov[3] = {{buf, 1}, {buf, 2}, {buf, 3}};
	TU_RC(pinshm_send_batch(p2, iov, 3, CALL_MS), 3);
	CLIENT_RC(c, pinshm_stat(c, "stq", &e), 0);
	ck_assert_uint_eq(e.messages, 18);
	ck_assert_uint_eq(e.bytes, 10 * 100 + 5 * 7 + 6);
	ck_assert_uint_eq(e.refused, 0);

	/* Fill p1's lane: each send that finds no room is refused. */
	unsigned refused = 0;
	for (int i = 0; i < 100 && refused < 3; i++) {
		int rc = pinshm_send(p1, buf, 200, PINSHM_NONBLOCK);
		ck_assert(rc == 0 || rc == -EAGAIN);
		refused += rc == -EAGAIN;
	}
	ck_assert_uint_eq(refused, 3);
	TU_RC(pinshm_send(p1, buf, 200, 10), -ETIMEDOUT);
	CLIENT_RC(c, pinshm_stat(c, "stq", &e), 0);
	ck_assert_uint_eq(e.refused, 4);
	ck_assert_uint_eq(e.lost, 0);
	uint64_t sent = e.messages;
	while (pinshm_recv(cons, buf, sizeof(buf), &len, PINSHM_NONBLOCK) == 0)
		;
	/* A new producer on p1's lane goes on counting. */
	pinshm_channel_close(p1);
	CLIENT_RC(c, pinshm_open(c, "stq", PINSHM_PRODUCER, &p1), 0);
	TU_RC(pinshm_send(p1, buf, 50, CALL_MS), 0);
	CLIENT_RC(c, pinshm_stat(c, "stq", &e), 0);
	ck_assert_uint_eq(e.messages, sent + 1);

	/* Garbage in the counters: reported as it is (summed modulo 2^64). */
	uint8_t *base = mapping_of("stq");
	struct seg_geometry g;
	ck_assert_int_eq(seg_geometry_compute(&attr, &g), 0);
	atomic_store(&seg_lane(&g, base, 0)->messages, UINT64_MAX - 1);
	atomic_store(&seg_lane(&g, base, 1)->messages, 5);
	atomic_store(&seg_lane(&g, base, 0)->bytes, UINT64_MAX);
	atomic_store(&seg_endpoint(&g, base, 2)->lost, 77);
	CLIENT_RC(c, pinshm_stat(c, "stq", &e), 0);
	ck_assert_uint_eq(e.messages, 3);
	ck_assert_uint_eq(e.lost, 77);
	pinshm_channel_close(p1);
	pinshm_channel_close(p2);
	pinshm_channel_close(cons);

	/* An overrun topic: what the subscriber lost is what the daemon says. */
	pinshm_channel_t *pub, *sub;
	pinshm_channel_info_t info;
	tu_attr(&attr, PINSHM_TOPIC, 4 * KiB, 1, 1);
	attr.flags = PINSHM_OVERRUN;
	CLIENT_RC(c, pinshm_create(c, "stt", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_open(c, "stt", PINSHM_CONSUMER, &sub), 0);
	CLIENT_RC(c, pinshm_open(c, "stt", PINSHM_PRODUCER, &pub), 0);
	for (int i = 0; i < 200; i++)
		TU_RC(pinshm_send(pub, buf, 64, CALL_MS), 0);
	unsigned got = 0;
	while (pinshm_recv(sub, buf, sizeof(buf), &len, PINSHM_NONBLOCK) == 0)
		got++;
	ck_assert_int_eq(pinshm_channel_info(sub, &info), 0);
	ck_assert_uint_gt(info.lost, 0);
	ck_assert_uint_eq(got + info.lost, 200);
	CLIENT_RC(c, pinshm_stat(c, "stt", &e), 0);
	ck_assert_uint_eq(e.messages, 200);
	ck_assert_uint_eq(e.lost, info.lost);
	ck_assert_uint_eq(e.refused, 0);
	pinshm_channel_close(pub);
	pinshm_channel_close(sub);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

START_TEST(test_list_pages)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t *e;
	size_t n;
	char name[32];
	const unsigned N = 3 * PROTO_LIST_PAGE + 5;

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_list(c, &e, &n), 0);
	ck_assert_uint_eq(n, 0);
	free(e);
	tu_attr(&attr, PINSHM_TOPIC, 4 * KiB, 1, 2);
	for (unsigned i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "ch-%03u", i);
		CLIENT_RC(c, pinshm_create(c, name, &attr, 0640, 0), 0);
	}
	CLIENT_RC(c, pinshm_list(c, &e, &n), 0);
	ck_assert_uint_eq(n, N);
	for (unsigned i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "ch-%03u", i);
		ck_assert_str_eq(e[i].name, name);
		ck_assert_uint_eq(e[i].kind, PINSHM_TOPIC);
		ck_assert_uint_eq(e[i].max_consumers, 2);
		ck_assert_uint_eq(e[i].mode, 0640);
		ck_assert_uint_eq(e[i].gid, getegid());
	}
	free(e);
	for (unsigned i = 0; i < N; i += 2) {
		snprintf(name, sizeof(name), "ch-%03u", i);
		CLIENT_RC(c, pinshm_unlink(c, name), 0);
	}
	CLIENT_RC(c, pinshm_list(c, &e, &n), 0);
	ck_assert_uint_eq(n, N / 2);
	ck_assert_str_eq(e[0].name, "ch-001");
	free(e);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* Pinned, sealed memfds: locked in the daemon (VmLck), none under /dev/shm. */
START_TEST(test_pinned)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e1, e2;
	pinshm_channel_t *ch;
	unsigned shm_before = shm_pinshm_entries();

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 256 * KiB, 2, 1);
	CLIENT_RC(c, pinshm_create(c, "pin-a", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "pin-b", &attr, 0600, 0), 0);
	ck_assert(list_find(c, "pin-a", &e1, NULL));
	ck_assert(list_find(c, "pin-b", &e2, NULL));
	if (geteuid() == 0) /* CAP_IPC_LOCK: pinned whatever RLIMIT_MEMLOCK says */
		ck_assert_msg(e1.state & PINSHM_LIST_PINNED, "not pinned: %s", pinshm_client_error(c));
	ck_assert(e1.state & PINSHM_LIST_SEALED);
	if (e1.state & PINSHM_LIST_PINNED) {
		long locked = proc_status_value_kb(d.pid, "VmLck:");
		ck_assert_msg(locked >= (long)((e1.size + e2.size) / 1024), "VmLck %ld kB for %llu bytes", locked,
			      (unsigned long long)(e1.size + e2.size));
	}
	CLIENT_RC(c, pinshm_open(c, "pin-a", PINSHM_CONSUMER, &ch), 0);
	ck_assert_uint_eq(proc_maps_count(d.pid, "/dev/shm"), 0);
	ck_assert_uint_ge(proc_maps_count(d.pid, "memfd:pinshm:pin-a"), 1);
	ck_assert_uint_ge(proc_maps_count(getpid(), "memfd:pinshm:pin-a"), 1);
	ck_assert_uint_eq(shm_pinshm_entries(), shm_before);
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A user-mode daemon of an ordinary user, whose RLIMIT_MEMLOCK is 64 KiB:
 * its channels work, unpinned, and it says so. */
START_TEST(test_unpinned)
{
	struct daemon d;
	struct daemon_opts o = {.as_user = true, .memlock = 64 * KiB};
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_channel_t *p, *q;
	uint8_t buf[16];
	size_t len;

	if (!daemon_test_user(&o.uid, &o.gid))
		return;
	daemon_start_opts(&d, &o);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 1024 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "big", &attr, 0600, 0), 0);
	ck_assert_msg(strstr(pinshm_client_error(c), "not pinned") != NULL, "create said: '%s'",
		      pinshm_client_error(c));
	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "small", &attr, 0600, 0), 0);
	ck_assert(list_find(c, "big", &e, NULL));
	ck_assert_msg(!(e.state & PINSHM_LIST_PINNED), "a 1 MiB channel pinned under a 64 KiB RLIMIT_MEMLOCK");
	ck_assert(list_find(c, "small", &e, NULL));
	ck_assert(e.state & PINSHM_LIST_PINNED);
	ck_assert_uint_eq(e.uid, 0); /* the creator, not the daemon */
	CLIENT_RC(c, pinshm_open(c, "big", PINSHM_PRODUCER, &p), 0);
	CLIENT_RC(c, pinshm_open(c, "big", PINSHM_CONSUMER, &q), 0);
	TU_RC(pinshm_send(p, "unpinned", 8, CALL_MS), 0);
	TU_RC(pinshm_recv(q, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert_uint_eq(len, 8);
	pinshm_channel_close(p);
	pinshm_channel_close(q);
	/* A RELOCK of it is told that it cannot be locked, not that it is. */
	int s = raw_connect(d.sock);
	struct proto_msg m;
	raw_open_consumer(s, "big", &m);
	ck_assert_int_eq(raw_relock(s, m.u.open_reply.id, 2), -ENOMEM);
	close(s);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* The default paths: --user without -s listens under $XDG_RUNTIME_DIR, in a
 * 0700 folder, where pinshm_connect(NULL) looks; PINSHM_SOCKET overrides. */
/*
 * Start a user-mode daemon as @p o says, with no -s (o->no_socket), in a
 * fresh $XDG_RUNTIME_DIR @p xdg (owned by o->uid where o->as_user), with
 * $PINSHM_SOCKET unset; wait until it accepts.  Remove @p xdg after
 * daemon_stop_ok().
 */
static void xdg_daemon_start(struct daemon *d, const struct daemon_opts *o, char xdg[32])
{
	ck_assert(o->no_socket);
	snprintf(xdg, 32, "/tmp/pinshm-xdg-XXXXXX");
	ck_assert(mkdtemp(xdg) != NULL);
	if (o->as_user)
		ck_assert_int_eq(chown(xdg, o->uid, o->gid), 0);
	ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", xdg, 1), 0);
	unsetenv("PINSHM_SOCKET");
	snprintf(d->dir, sizeof(d->dir), "%s/pinshm", xdg);
	snprintf(d->sock, sizeof(d->sock), "%s/pinshm/socket", xdg);
	daemon_spawn(d, o);
	daemon_wait_ready(d);
}

START_TEST(test_default_paths)
{
	struct daemon d;
	struct daemon_opts o = {.no_socket = true};
	struct stat st;
	pinshm_client_t *c;
	char xdg[32];

	xdg_daemon_start(&d, &o, xdg);
	ck_assert_int_eq(lstat(d.dir, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0700);
	ck_assert_int_eq(lstat(d.sock, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);

	int rc = pinshm_connect(NULL, &c);
	ck_assert_msg(rc == 0, "%s", pinshm_client_error(NULL));
	pinshm_disconnect(c);

	ck_assert_int_eq(setenv("PINSHM_SOCKET", "/tmp/pinshm-nowhere/socket", 1), 0);
	TU_RC(pinshm_connect(NULL, &c), -ENOENT);
	ck_assert(strstr(pinshm_client_error(NULL), "/tmp/pinshm-nowhere/socket") != NULL);
	ck_assert_ptr_null(c);
	ck_assert_int_eq(setenv("PINSHM_SOCKET", d.sock, 1), 0);
	TU_RC(pinshm_connect(NULL, &c), 0);
	pinshm_disconnect(c);

	daemon_stop_ok(&d);
	rmdir(xdg);
}
END_TEST

/* One daemon per socket; a stale socket is replaced; SHUTDOWN stops it. */
START_TEST(test_socket_lifecycle)
{
	struct daemon d, d2;
	struct daemon_opts o = {0};
	char buf[32];

	daemon_start(&d);
	/* A second daemon on the same path fails at once. */
	d2 = d;
	daemon_spawn(&d2, &o);
	int st = daemon_wait_exit(&d2, START_MS);
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) != 0, "a second daemon: %s",
		      st == -1 ? "still running" : tu_status_str(st, buf, sizeof(buf)));
	ck_assert(accepts(d.sock)); /* the first one still serves */

	/* Killed: its socket stays; the next daemon replaces it. */
	kill(d.pid, SIGKILL);
	ck_assert_int_ne(daemon_wait_exit(&d, STOP_MS), -1);
	struct stat sb;
	ck_assert_int_eq(lstat(d.sock, &sb), 0);
	daemon_spawn(&d, &o);
	daemon_wait_ready(&d);

	/* SHUTDOWN from its own user. */
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_daemon_shutdown(c), 0);
	pinshm_disconnect(c);
	st = daemon_wait_exit(&d, STOP_MS);
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "after SHUTDOWN: %s",
		      st == -1 ? "still running" : tu_status_str(st, buf, sizeof(buf)));
	ck_assert_int_ne(lstat(d.sock, &sb), 0);
	daemon_cleanup_dir(&d);
}
END_TEST

/* ======================================================================== */
/* protocol: versions, unknown types, malformed packets                      */
/* ======================================================================== */

START_TEST(test_versions)
{
	struct daemon d;
	struct pkt p;
	struct proto_msg m;

	daemon_start(&d);
	int s = raw_connect(d.sock);

	/* A header of another version: an ERROR reply, and the connection stays. */
	pk_hello(&p, PROTO_VERSION + 1, PROTO_VERSION + 1, 41);
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_uint_eq(m.h.type, PROTO_ERROR);
	ck_assert_uint_eq(m.h.seq, 41);
	ck_assert_int_eq(m.status, -EPROTO);
	ck_assert(strstr(m.text, "version") != NULL);

	/* A HELLO of our header version asking for another protocol. */
	pk_hello(&p, PROTO_VERSION, 99, 42);
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_uint_eq(m.h.type, PROTO_HELLO | PROTO_REPLY);
	ck_assert_uint_eq(m.h.seq, 42);
	ck_assert_int_eq(m.status, -EPROTO);
	ck_assert(strstr(m.text, "99") != NULL);

	/* The right one. */
	pk_hello(&p, PROTO_VERSION, PROTO_VERSION, 43);
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_int_eq(m.status, 0);
	ck_assert_uint_eq(m.u.hello_reply.version, PROTO_VERSION);
	ck_assert_uint_eq(m.u.hello_reply.flags & PROTO_HELLO_USER_MODE, PROTO_HELLO_USER_MODE);
	close(s);

	pinshm_client_t *c = connect_ok(&d);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

START_TEST(test_unknown_type)
{
	struct daemon d;
	struct pkt p;
	struct proto_msg m;

	daemon_start(&d);
	int s = raw_connect(d.sock);
	static const uint16_t types[] = {0, 77, PROTO_HELLO | PROTO_REPLY, PROTO_ERROR};
	for (unsigned i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		pk_header(&p, PROTO_MAGIC, PROTO_VERSION, types[i], 100 + i);
		pk_le(&p, 0, 8);
		pk_end(&p);
		raw_send(s, &p, -1, 0);
		raw_reply(s, &m);
		ck_assert_uint_eq(m.h.type, PROTO_ERROR);
		ck_assert_uint_eq(m.h.seq, 100 + i);
		ck_assert_int_eq(m.status, -EOPNOTSUPP);
	}
	pk_hello(&p, PROTO_VERSION, PROTO_VERSION, 200);
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_int_eq(m.status, 0);
	close(s);
	daemon_stop_ok(&d);
}
END_TEST

/* The body size of each request type, to make sure a random one is wrong. */
static size_t body_size(uint16_t type)
{
	switch (type) {
	case PROTO_HELLO:
		return 8;
	case PROTO_CREATE:
		return 172;
	case PROTO_OPEN:
		return 76;
	case PROTO_UNLINK:
	case PROTO_STAT:
		return 64;
	case PROTO_LIST:
	case PROTO_STATUS:
	case PROTO_CLIENTS:
		return 8;
	case PROTO_CLOSE:
		return 12;
	case PROTO_RELOCK:
		return 8;
	case PROTO_DEVICE:
		return 16;
	default:
		return 0;
	}
}

#define MALFORMED_FIXED 11
#define MALFORMED_RANDOM 8

/* Build bad packet number @p i; @p nfds: descriptors to attach to it. */
static void malformed_packet(int i, struct pkt *p, unsigned *nfds)
{
	*nfds = 0;
	switch (i) {
	case 0: /* a truncated header */
		pk_hello(p, PROTO_VERSION, PROTO_VERSION, 1);
		p->len = 8;
		break;
	case 1: /* bad magic */
		pk_hello(p, PROTO_VERSION, PROTO_VERSION, 1);
		p->b[0] = 'X';
		break;
	case 2: /* the length field lies */
		pk_hello(p, PROTO_VERSION, PROTO_VERSION, 1);
		p->b[8] = 100;
		break;
	case 3: /* oversized */
		pk_header(p, PROTO_MAGIC, PROTO_VERSION, PROTO_LIST, 1);
		memset(p->b + p->len, 0, 5000 - p->len);
		p->len = 5000;
		pk_end(p);
		break;
	case 4: /* a CREATE body cut short */
		pk_header(p, PROTO_MAGIC, PROTO_VERSION, PROTO_CREATE, 1);
		pk_name(p, "short");
		pk_le(p, PINSHM_QUEUE, 4);
		pk_end(p);
		break;
	case 5: /* a name field without its NUL */
		pk_header(p, PROTO_MAGIC, PROTO_VERSION, PROTO_OPEN, 1);
		memset(p->b + p->len, 'a', PROTO_NAME_FIELD);
		p->len += PROTO_NAME_FIELD;
		pk_le(p, PINSHM_CONSUMER, 4);
		pk_le(p, (uint32_t)PINSHM_NODE_ANY, 4);
		pk_le(p, PROTO_OWNER_ANY, 4);
		pk_end(p);
		break;
	case 6: /* bytes after the name's NUL */
		pk_header(p, PROTO_MAGIC, PROTO_VERSION, PROTO_UNLINK, 1);
		pk_name(p, "name");
		p->b[p->len - 1] = 'z';
		pk_end(p);
		break;
	case 7: /* a HELLO with bytes to spare */
		pk_hello(p, PROTO_VERSION, PROTO_VERSION, 1);
		pk_le(p, 0, 4);
		pk_end(p);
		break;
	case 8: /* an empty packet */
		p->len = 0;
		break;
	case 9: /* a good HELLO with a descriptor nobody asked for */
		pk_hello(p, PROTO_VERSION, PROTO_VERSION, 1);
		*nfds = 1;
		break;
	case 10: /* with more descriptors than the daemon's control buffer */
		pk_hello(p, PROTO_VERSION, PROTO_VERSION, 1);
		*nfds = 12;
		break;
	default: { /* random: a good header, a body of the wrong size, random bytes */
		uint64_t r = tu_mix(0x5eed0000u + (uint64_t)i);
		uint16_t type = (uint16_t)(PROTO_HELLO + r % PROTO_RELOCK);
		size_t len = 1 + (r >> 8) % 300;
		if (len == body_size(type))
			len++;
		pk_header(p, PROTO_MAGIC, PROTO_VERSION, type, (uint32_t)i);
		for (size_t k = 0; k < len; k++)
			p->b[p->len++] = (uint8_t)tu_mix(r + k);
		pk_end(p);
		if (i % 2) /* half of them: random bytes throughout */
			for (size_t k = 0; k < p->len; k++)
				p->b[k] = (uint8_t)tu_mix(r ^ (k << 20));
		break;
	}
	}
}

/* Each bad packet closes its own connection (after an ERROR reply where
 * the daemon can send one); a client connected before keeps working, and
 * new clients are served. */
START_TEST(test_malformed)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *prod, *cons;
	struct pkt p;
	unsigned nfds;
	uint8_t buf[PROTO_MAX_PACKET];
	size_t len;

	daemon_start(&d);
	pinshm_client_t *bystander = connect_ok(&d);
	attr_small(&attr, 1, 1);
	CLIENT_RC(bystander, pinshm_create(bystander, "bystander", &attr, 0600, 0), 0);
	CLIENT_RC(bystander, pinshm_open(bystander, "bystander", PINSHM_PRODUCER, &prod), 0);
	CLIENT_RC(bystander, pinshm_open(bystander, "bystander", PINSHM_CONSUMER, &cons), 0);

	int fds[2];
	ck_assert_int_eq(pipe(fds), 0);
	for (int i = 0; i < MALFORMED_FIXED + MALFORMED_RANDOM; i++) {
		malformed_packet(i, &p, &nfds);
		int s = raw_connect(d.sock);
		raw_send(s, &p, fds[0], nfds);
		/* An ERROR reply maybe, then the end of the connection. */
		bool closed = false;
		for (int k = 0; k < 2 && !closed; k++) {
			ssize_t n = raw_recv(s, buf, sizeof(buf), CALL_MS);
			ck_assert_msg(n >= 0, "case %d: the daemon kept the connection open (%zd)", i, n);
			if (n == 0) {
				closed = true;
				break;
			}
			struct proto_msg m;
			ck_assert_msg(proto_decode(buf, (size_t)n, true, &m) == 0, "case %d: a malformed reply", i);
			ck_assert_msg(m.h.type == PROTO_ERROR && m.status < 0, "case %d: reply %#x status %d", i,
				      m.h.type, m.status);
		}
		ck_assert_msg(closed, "case %d: the connection stayed open", i);
		close(s);

		/* The bystander still works, through the daemon and its channel. */
		ck_assert(list_find(bystander, "bystander", NULL, NULL));
		TU_RC(pinshm_send(prod, &i, sizeof(i), CALL_MS), 0);
		TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	}
	close(fds[0]);
	close(fds[1]);

	pinshm_client_t *c = connect_ok(&d);
	ck_assert(list_find(c, "bystander", NULL, NULL));
	pinshm_disconnect(c);
	pinshm_channel_close(prod);
	pinshm_channel_close(cons);
	pinshm_disconnect(bystander);
	daemon_stop_ok(&d);
}
END_TEST

/*
 * A faulty pinshmd, for the client's paging of LIST, STATUS and CLIENTS: it
 * answers HELLO, then each paged request with pages that break the rules as
 * its fault says (fake_page()), until the client hangs up.
 */
enum page_fault {
	LIST_STUCK,        /* more follow, but `next` is the cursor asked for */
	LIST_EMPTY_MORE,   /* more follow, but the page is empty */
	USERS_BACKWARDS,   /* uid 5, then uid 3 */
	USERS_REPEATED,    /* the second page starts before its cursor */
	CLIENTS_BACKWARDS, /* id 3, then id 2 */
	CLIENTS_BAD_NEXT,  /* `next` is not the last id */
	CLIENTS_TWO_PAGES, /* a correct answer in two pages: ids 1, 2, then 3 */
	STATUS_VERSION_5,  /* a STATUS reply of protocol version 5 (before the pool), well formed */
	PAGE_FAULTS
};

struct fake {
	char dir[64], sock[96];
	int lfd;
	enum page_fault fault;
};

/* A STATUS page (from pid 4242) of the users @p uids. */
static void users_page(struct proto_msg *rep, uint32_t count, const uint32_t *uids, uint64_t next, uint32_t flags)
{
	rep->u.status_reply.pid = 4242;
	rep->u.status_reply.count = count;
	for (uint32_t i = 0; i < count; i++)
		rep->u.status_reply.users[i].uid = uids[i];
	rep->u.status_reply.next = next;
	rep->u.status_reply.flags = flags;
}

/* A CLIENTS page of the connections @p ids (pids 100, 101...). */
static void clients_page(struct proto_msg *rep, uint32_t count, const uint64_t *ids, uint64_t next, uint32_t flags)
{
	rep->u.clients_reply.count = count;
	for (uint32_t i = 0; i < count; i++)
		rep->u.clients_reply.entries[i] = (struct proto_client_entry){.id = ids[i], .pid = 100 + i};
	rep->u.clients_reply.next = next;
	rep->u.clients_reply.flags = flags;
}

/* The reply to a paged request asked from @p cursor under @p fault. */
static void fake_page(enum page_fault fault, uint64_t cursor, struct proto_msg *rep)
{
	switch (fault) {
	case LIST_STUCK:
		rep->u.list_reply.count = 1;
		snprintf(rep->u.list_reply.entries[0].name, sizeof(rep->u.list_reply.entries[0].name), "stuck");
		rep->u.list_reply.flags = PROTO_LIST_MORE;
		rep->u.list_reply.next = cursor;
		break;
	case LIST_EMPTY_MORE:
		rep->u.list_reply.flags = PROTO_LIST_MORE;
		rep->u.list_reply.next = cursor + 1;
		break;
	case USERS_BACKWARDS:
		users_page(rep, 2, (uint32_t[]){5, 3}, 4, 0);
		break;
	case USERS_REPEATED:
		users_page(rep, 1, (uint32_t[]){7}, 8, cursor == 0 ? PROTO_STATUS_MORE : 0);
		break;
	case CLIENTS_BACKWARDS:
		clients_page(rep, 2, (uint64_t[]){3, 2}, 2, 0);
		break;
	case CLIENTS_BAD_NEXT:
		clients_page(rep, 1, (uint64_t[]){4}, 9, 0);
		break;
	default: /* CLIENTS_TWO_PAGES */
		if (cursor == 0)
			clients_page(rep, 2, (uint64_t[]){1, 2}, 2, PROTO_CLIENTS_MORE);
		else
			clients_page(rep, 1, (uint64_t[]){3}, 3, 0);
		break;
	}
}

/* A STATUS reply of protocol version 5, well formed for that version: the
 * daemon's 56 bytes of figures, then @p nusers users, and no pool. */
static void pk_status_v5(struct pkt *p, uint32_t seq, uint32_t nusers)
{
	pk_header(p, PROTO_MAGIC, 5, PROTO_STATUS | PROTO_REPLY, seq);
	pk_le(p, 0, 4); /* status */
	pk_le(p, 0, 2); /* no text */
	pk_le(p, 4242, 4);
	pk_le(p, 0, 4);       /* flags */
	pk_le(p, 1000, 8);    /* uptime */
	pk_le(p, 1u << 30, 8); /* budget */
	pk_le(p, 1u << 20, 8); /* pinned */
	pk_le(p, 1, 4);
	pk_le(p, 0, 4);
	pk_le(p, 1, 4);
	pk_le(p, nusers, 4);
	pk_le(p, nusers ? 1000 + nusers : 0, 8); /* next */
	for (uint32_t i = 0; i < nusers; i++) {
		pk_le(p, 1000 + i, 4);
		pk_le(p, 1, 4);
		pk_le(p, 1, 4);
		pk_le(p, 1u << 20, 8);
		pk_le(p, 1u << 20, 8);
		pk_le(p, UINT64_MAX, 8);
	}
	pk_end(p);
}

/* The fake daemon's process: one connection, served until it closes. */
static int fake_daemon(void *arg, int idx)
{
	const struct fake *f = arg;
	struct proto_msg *req = malloc(sizeof(*req)), *rep = malloc(sizeof(*rep));
	uint8_t buf[PROTO_MAX_PACKET];
	int s = accept(f->lfd, NULL, NULL);

	(void)idx;
	if (s < 0 || !req || !rep)
		tu_child_fail(2, "accept: %s", strerror(errno));
	for (;;) {
		ssize_t n = recv(s, buf, sizeof(buf), 0);
		if (n <= 0)
			break;
		if (proto_decode(buf, (size_t)n, false, req) != 0)
			tu_child_fail(3, "the client sent a malformed request");
		memset(rep, 0, sizeof(*rep));
		rep->h.type = req->h.type | PROTO_REPLY;
		rep->h.seq = req->h.seq;
		if (req->h.type == PROTO_HELLO)
			rep->u.hello_reply.version = PROTO_VERSION;
		else if (req->h.type == PROTO_LIST)
			fake_page(f->fault, req->u.list.cursor, rep);
		else if (req->h.type == PROTO_STATUS)
			fake_page(f->fault, req->u.status.cursor, rep);
		else if (req->h.type == PROTO_CLIENTS)
			fake_page(f->fault, req->u.clients.cursor, rep);
		else
			tu_child_fail(4, "unexpected request %u", req->h.type);
		if (f->fault == STATUS_VERSION_5 && req->h.type == PROTO_STATUS) {
			struct pkt old;
			pk_status_v5(&old, req->h.seq, 1);
			if (send(s, old.b, old.len, MSG_NOSIGNAL) != (ssize_t)old.len)
				tu_child_fail(5, "reply: %s", strerror(errno));
			continue;
		}
		int len = proto_encode(rep, buf);
		if (len < 0 || send(s, buf, (size_t)len, MSG_NOSIGNAL) != len)
			tu_child_fail(5, "reply: %d, %s", len, strerror(errno));
	}
	free(req);
	free(rep);
	return 0;
}

/* The client refuses pages that break the rules (out of order, or saying
 * more follow without moving on) with -EPROTO and a reason, at once rather
 * than asking for ever, and the connection is done with; a correct answer
 * in two pages is read whole. */
START_TEST(test_faulty_daemon_pages)
{
	struct fake f = {.fault = (enum page_fault)_i};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct tu_procs ps;
	pinshm_client_t *c;
	pinshm_list_entry_t *le;
	pinshm_user_usage_t *u;
	pinshm_client_info_t *ci;
	pinshm_status_t st;
	size_t n;
	int rc;

	snprintf(f.dir, sizeof(f.dir), "/tmp/pinshm-fake-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f.dir));
	snprintf(f.sock, sizeof(f.sock), "%s/sock", f.dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f.sock);
	f.lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(f.lfd, 0);
	ck_assert_int_eq(bind(f.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f.lfd, 1), 0);
	tu_procs_init(&ps);
	tu_spawn(&ps, "fake pinshmd", fake_daemon, &f, 0);
	CLIENT_RC(NULL, pinshm_connect(f.sock, &c), 0);

	const char *why = NULL;
	char old_version[96];
	switch (f.fault) {
	case LIST_STUCK:
	case LIST_EMPTY_MORE:
		rc = pinshm_list(c, &le, &n);
		why = "pinshmd's channel list does not advance";
		ck_assert_ptr_null(le);
		break;
	case USERS_BACKWARDS:
		/* Without the users, only the first page's figures are read. */
		CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
		ck_assert_uint_eq(st.pid, 4242);
		/* fall through */
	case USERS_REPEATED:
		rc = pinshm_status(c, &st, &u, &n);
		why = "pinshmd's user list is out of order";
		ck_assert_ptr_null(u);
		break;
	case STATUS_VERSION_5: {
		/* Versions refuse to talk (pinshm-protocol(7) VERSIONS): the old
		 * reply is not misread as a malformed new one, nor read at all;
		 * the client names both versions. */
		pinshm_pool_t pool;
		rc = pinshm_status_pool(c, &st, &pool, &u, &n);
		snprintf(old_version, sizeof(old_version), "pinshmd speaks protocol version 5, this library %u",
			 PROTO_VERSION);
		why = old_version;
		ck_assert_ptr_null(u);
		break;
	}
	case CLIENTS_BACKWARDS:
	case CLIENTS_BAD_NEXT:
		rc = pinshm_clients(c, &ci, &n);
		why = "pinshmd's connection list is out of order";
		ck_assert_ptr_null(ci);
		break;
	default:
		CLIENT_RC(c, pinshm_clients(c, &ci, &n), 0);
		ck_assert_uint_eq(n, 3);
		for (unsigned i = 0; i < 3; i++)
			ck_assert_uint_eq(ci[i].id, i + 1);
		ck_assert_uint_eq(ci[1].pid, 101);
		ck_assert_uint_eq(ci[2].pid, 100); /* the first of its page */
		free(ci);
		rc = 0;
		break;
	}
	if (why) {
		TU_RC(rc, -EPROTO);
		ck_assert_uint_eq(n, 0);
		ck_assert_msg(strcmp(pinshm_client_error(c), why) == 0, "error '%s', want '%s'", pinshm_client_error(c),
			      why);
		/* Out of step: nothing more is asked on this connection. */
		TU_RC(pinshm_clients(c, &ci, &n), -EPROTO);
	}
	pinshm_disconnect(c);
	tu_wait_all_ok(&ps, WAIT_MS);
	close(f.lfd);
	unlink(f.sock);
	rmdir(f.dir);
}
END_TEST

/* ======================================================================== */
/* protocol: the STATUS reply and its pool (version 6)                        */
/* ======================================================================== */

/* A STATUS reply of @p classes pool classes and @p users users, every field
 * a distinct value (seeded by @p seed) so that a swap or a miss shows. */
static void status_reply_fill(struct proto_msg *m, uint32_t classes, uint32_t users, uint64_t seed)
{
	memset(m, 0, sizeof(*m));
	m->h.type = PROTO_STATUS | PROTO_REPLY;
	m->h.seq = (uint32_t)seed;
	typeof(m->u.status_reply) *s = &m->u.status_reply;
	s->pid = (uint32_t)tu_mix(seed + 1);
	s->flags = PROTO_STATUS_USER_MODE | PROTO_STATUS_MORE;
	s->uptime_ms = tu_mix(seed + 2);
	s->budget = tu_mix(seed + 3);
	s->pinned = tu_mix(seed + 4);
	s->channels_pinned = (uint32_t)tu_mix(seed + 5);
	s->channels_unpinned = (uint32_t)tu_mix(seed + 6);
	s->connections = (uint32_t)tu_mix(seed + 7);
	s->count = users;
	s->next = tu_mix(seed + 8);
	s->pool_pinned = tu_mix(seed + 9);
	s->pool_hits = tu_mix(seed + 10);
	s->pool_misses = tu_mix(seed + 11);
	s->pool_flags = PROTO_POOL_STOPPED;
	s->pool_count = classes;
	for (uint32_t i = 0; i < classes; i++)
		s->pool[i] = (struct proto_pool_class){
			.size = tu_mix(seed + 100 + 5 * i),
			.wanted = (uint32_t)tu_mix(seed + 101 + 5 * i),
			.ready = (uint32_t)tu_mix(seed + 102 + 5 * i),
			.filling = (uint32_t)tu_mix(seed + 103 + 5 * i),
			.locked = tu_mix(seed + 104 + 5 * i),
		};
	for (uint32_t i = 0; i < users; i++)
		s->users[i] = (struct proto_user_entry){
			.uid = (uint32_t)tu_mix(seed + 1000 + 6 * i),
			.channels = (uint32_t)tu_mix(seed + 1001 + 6 * i),
			.connections = (uint32_t)tu_mix(seed + 1002 + 6 * i),
			.pinned = tu_mix(seed + 1003 + 6 * i),
			.charged = tu_mix(seed + 1004 + 6 * i),
			.quota = tu_mix(seed + 1005 + 6 * i),
		};
}

static void status_reply_same(const struct proto_msg *a, const struct proto_msg *b)
{
	const typeof(a->u.status_reply) *x = &a->u.status_reply, *y = &b->u.status_reply;

	ck_assert_uint_eq(a->h.seq, b->h.seq);
	ck_assert_uint_eq(x->pid, y->pid);
	ck_assert_uint_eq(x->flags, y->flags);
	ck_assert_uint_eq(x->uptime_ms, y->uptime_ms);
	ck_assert_uint_eq(x->budget, y->budget);
	ck_assert_uint_eq(x->pinned, y->pinned);
	ck_assert_uint_eq(x->channels_pinned, y->channels_pinned);
	ck_assert_uint_eq(x->channels_unpinned, y->channels_unpinned);
	ck_assert_uint_eq(x->connections, y->connections);
	ck_assert_uint_eq(x->count, y->count);
	ck_assert_uint_eq(x->next, y->next);
	ck_assert_uint_eq(x->pool_pinned, y->pool_pinned);
	ck_assert_uint_eq(x->pool_hits, y->pool_hits);
	ck_assert_uint_eq(x->pool_misses, y->pool_misses);
	ck_assert_uint_eq(x->pool_flags, y->pool_flags);
	ck_assert_uint_eq(x->pool_count, y->pool_count);
	for (uint32_t i = 0; i < x->pool_count; i++) {
		ck_assert_uint_eq(x->pool[i].size, y->pool[i].size);
		ck_assert_uint_eq(x->pool[i].wanted, y->pool[i].wanted);
		ck_assert_uint_eq(x->pool[i].ready, y->pool[i].ready);
		ck_assert_uint_eq(x->pool[i].filling, y->pool[i].filling);
		ck_assert_uint_eq(x->pool[i].locked, y->pool[i].locked);
	}
	for (uint32_t i = 0; i < x->count; i++) {
		ck_assert_uint_eq(x->users[i].uid, y->users[i].uid);
		ck_assert_uint_eq(x->users[i].channels, y->users[i].channels);
		ck_assert_uint_eq(x->users[i].connections, y->users[i].connections);
		ck_assert_uint_eq(x->users[i].pinned, y->users[i].pinned);
		ck_assert_uint_eq(x->users[i].charged, y->users[i].charged);
		ck_assert_uint_eq(x->users[i].quota, y->users[i].quota);
	}
}

/* The length of a STATUS reply of @p classes classes and @p users users. */
static size_t status_reply_len(uint32_t classes, uint32_t users)
{
	return PROTO_HEADER_SIZE + 4 + 2 + PROTO_STATUS_FIXED_SIZE + PROTO_POOL_FIXED_SIZE +
	       classes * PROTO_POOL_CLASS_SIZE + users * PROTO_USER_ENTRY_SIZE;
}

/* Encoded and decoded again, a STATUS reply is the same, whatever the
 * counts up to their bounds; over them, it is not encoded. */
START_TEST(test_status_round_trip)
{
	static const uint32_t classes[] = {0, 1, 2, PROTO_POOL_CLASSES};
	static const uint32_t users[] = {0, 1, PROTO_STATUS_PAGE};
	static struct proto_msg m, back;
	uint8_t buf[PROTO_MAX_PACKET];

	for (unsigned i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
		for (unsigned k = 0; k < sizeof(users) / sizeof(users[0]); k++) {
			status_reply_fill(&m, classes[i], users[k], 77 * i + k);
			int len = proto_encode(&m, buf);
			ck_assert_int_eq(len, (int)status_reply_len(classes[i], users[k]));
			memset(&back, 0xa5, sizeof(back));
			ck_assert_int_eq(proto_decode(buf, (size_t)len, true, &back), 0);
			status_reply_same(&m, &back);
		}
	/* The fullest fits in a packet. */
	ck_assert_uint_le(status_reply_len(PROTO_POOL_CLASSES, PROTO_STATUS_PAGE) + PROTO_TEXT_MAX, PROTO_MAX_PACKET);

	status_reply_fill(&m, PROTO_POOL_CLASSES, 1, 5);
	m.u.status_reply.pool_count = PROTO_POOL_CLASSES + 1;
	ck_assert_int_eq(proto_encode(&m, buf), -EINVAL);
	status_reply_fill(&m, 1, PROTO_STATUS_PAGE, 5);
	m.u.status_reply.count = PROTO_STATUS_PAGE + 1;
	ck_assert_int_eq(proto_encode(&m, buf), -EINVAL);
}
END_TEST

/* Set the u32 at @p off of packet @p b to @p v. */
static void put32_at(uint8_t *b, size_t off, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		b[off + i] = (uint8_t)(v >> (8 * i));
}

/* The offset of the pool's class count in a STATUS reply without text. */
#define POOL_COUNT_OFF (PROTO_HEADER_SIZE + 6 + PROTO_STATUS_FIXED_SIZE + 28)
#define POOL_FLAGS_OFF (POOL_COUNT_OFF - 4)

/* Malformed STATUS replies are refused (-EBADMSG), never read past their
 * end: cut short anywhere, an absurd or lying class count, unknown pool
 * flags, a byte too many; one of version 5 is not decoded (-EPROTO). */
START_TEST(test_status_malformed)
{
	static struct proto_msg m, back;
	uint8_t good[PROTO_MAX_PACKET], b[PROTO_MAX_PACKET + 64];

	status_reply_fill(&m, 2, 1, 9);
	m.u.status_reply.pool_flags = 0;
	int len = proto_encode(&m, good);
	ck_assert_int_eq(len, (int)status_reply_len(2, 1));
	ck_assert_int_eq(proto_decode(good, (size_t)len, true, &back), 0);
	ck_assert_uint_eq(back.u.status_reply.pool_count, 2);

	/* Truncated anywhere, the length field saying so. */
	for (int cut = PROTO_HEADER_SIZE; cut < len; cut++) {
		memcpy(b, good, (size_t)cut);
		put32_at(b, 8, (uint32_t)cut);
		ck_assert_msg(proto_decode(b, (size_t)cut, true, &back) == -EBADMSG, "cut at %d", cut);
	}
	/* One byte too many. */
	memcpy(b, good, (size_t)len);
	b[len] = 0;
	put32_at(b, 8, (uint32_t)len + 1);
	ck_assert_int_eq(proto_decode(b, (size_t)len + 1, true, &back), -EBADMSG);

	/* Class counts that do not match the body, or beyond any bound. */
	static const uint32_t counts[] = {0, 1, 3, PROTO_POOL_CLASSES + 1, 1000, 0x7fffffff, UINT32_MAX};
	for (unsigned i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		memcpy(b, good, (size_t)len);
		put32_at(b, POOL_COUNT_OFF, counts[i]);
		ck_assert_msg(proto_decode(b, (size_t)len, true, &back) == -EBADMSG, "class count %u", counts[i]);
	}
	/* A count over the bound whose body is long enough for it: refused
	 * still, before a class is read. */
	status_reply_fill(&m, PROTO_POOL_CLASSES, 0, 3);
	int full = proto_encode(&m, b);
	ck_assert_int_gt(full, 0);
	size_t over = (size_t)full + PROTO_POOL_CLASS_SIZE;
	memset(b + full, 0x11, PROTO_POOL_CLASS_SIZE);
	put32_at(b, 8, (uint32_t)over);
	put32_at(b, POOL_COUNT_OFF, PROTO_POOL_CLASSES + 1);
	ck_assert_int_eq(proto_decode(b, over, true, &back), -EBADMSG);
	put32_at(b, POOL_COUNT_OFF, PROTO_POOL_CLASSES);
	ck_assert_int_eq(proto_decode(b, over, true, &back), -EBADMSG); /* a class's bytes to spare */

	/* Unknown pool flags. */
	memcpy(b, good, (size_t)len);
	put32_at(b, POOL_FLAGS_OFF, 0x2);
	ck_assert_int_eq(proto_decode(b, (size_t)len, true, &back), -EBADMSG);
	put32_at(b, POOL_FLAGS_OFF, PROTO_POOL_STOPPED);
	ck_assert_int_eq(proto_decode(b, (size_t)len, true, &back), 0);
	ck_assert_uint_eq(back.u.status_reply.pool_flags, PROTO_POOL_STOPPED);

	/* A reply of version 5 (no pool): the header is read, to say which
	 * version it is, and nothing more (pinshm-protocol(7) VERSIONS). */
	struct pkt old;
	pk_status_v5(&old, 31, 2);
	memset(&back, 0xa5, sizeof(back));
	ck_assert_int_eq(proto_decode(old.b, old.len, true, &back), -EPROTO);
	ck_assert_uint_eq(back.h.version, 5);
	ck_assert_uint_eq(back.h.seq, 31);
	ck_assert_uint_eq(back.h.type, PROTO_STATUS | PROTO_REPLY);
	/* The same body under this version's header is malformed, not misread. */
	old.b[4] = (uint8_t)PROTO_VERSION;
	old.b[5] = (uint8_t)(PROTO_VERSION >> 8);
	ck_assert_int_eq(proto_decode(old.b, old.len, true, &back), -EBADMSG);
}
END_TEST

/* A client of protocol version 5 asks this daemon for STATUS: an ERROR of
 * status -EPROTO naming both versions, in this daemon's version, its seq
 * echoed, and the connection stays for a STATUS of this version. */
START_TEST(test_status_old_client)
{
	struct daemon d;
	struct pkt p;
	struct proto_msg m;
	char want[96];

	daemon_start(&d);
	int s = raw_connect(d.sock);
	pk_header(&p, PROTO_MAGIC, 5, PROTO_STATUS, 51);
	pk_le(&p, 0, 8);
	pk_end(&p);
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_uint_eq(m.h.type, PROTO_ERROR);
	ck_assert_uint_eq(m.h.version, PROTO_VERSION);
	ck_assert_uint_eq(m.h.seq, 51);
	ck_assert_int_eq(m.status, -EPROTO);
	snprintf(want, sizeof(want), "protocol version 5 not supported: this daemon speaks %u", PROTO_VERSION);
	ck_assert_str_eq(m.text, want);

	pk_header(&p, PROTO_MAGIC, PROTO_VERSION, PROTO_STATUS, 52);
	pk_le(&p, 0, 8);
	pk_end(&p);
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_uint_eq(m.h.type, PROTO_STATUS | PROTO_REPLY);
	ck_assert_uint_eq(m.h.seq, 52);
	ck_assert_int_eq(m.status, 0);
	/* A user-mode daemon without a configuration has no pool. */
	ck_assert_uint_eq(m.u.status_reply.pool_count, 0);
	ck_assert_uint_eq(m.u.status_reply.pool_pinned, 0);
	ck_assert_uint_eq(m.u.status_reply.pool_flags, 0);
	close(s);
	daemon_stop_ok(&d);
}
END_TEST

/* ======================================================================== */
/* death: clients killed                                                     */
/* ======================================================================== */

static int death_producer(void *arg, int idx)
{
	struct scene *x = arg;
	pinshm_client_t *c;

	(void)idx;
	child_open_send_first(x->d.sock, "death", CALL_MS, &c);
	return child_sleep_until_killed(WAIT_MS);
}

static int death_consumer(void *arg, int idx)
{
	struct scene *x = arg;
	pinshm_client_t *c;
	pinshm_channel_t *ch = child_connect_open(x->d.sock, "death", PINSHM_CONSUMER, &c);
	char buf[16];
	size_t len;

	(void)idx;
	int rc = pinshm_recv(ch, buf, sizeof(buf), &len, CALL_MS);
	if (rc != 0)
		tu_child_fail(4, "first recv: %s", pinshm_strerror(rc));
	tu_report_vals(&x->rep, 0, 0, 1, 0); /* ready: now blocked in recv */
	rc = pinshm_recv(ch, buf, sizeof(buf), &len, CALL_MS);
	tu_report_vals(&x->rep, 0, rc, 2, 0);
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	return 0;
}

START_TEST(test_producer_killed)
{
	struct scene x;
	struct tu_procs *ps = &x.ps;
	struct tu_report r;

	scene_start(&x, "death");
	int prod = tu_spawn(ps, "producer", death_producer, &x, 0);
	tu_spawn(ps, "consumer", death_consumer, &x, 1);

	TU_RC(tu_collect(&x.rep, &r, WAIT_MS), 0);
	ck_assert_uint_eq(r.v[0], 1);
	tu_sleep_ms(50); /* let it go to sleep */
	ck_assert_int_eq(kill(ps->pid[prod], SIGKILL), 0);
	uint64_t t0 = tu_now_ms();
	TU_RC(tu_collect(&x.rep, &r, 5000), 0);
	uint64_t waited = tu_now_ms() - t0;
	ck_assert_uint_eq(r.v[0], 2);
	TU_RC(r.status, -EPIPE);
	ck_assert_msg(waited < 1000, "-EPIPE came %llu ms after the kill", (unsigned long long)waited);

	tu_wait_all(ps, WAIT_MS);
	ck_assert(WIFSIGNALED(ps->status[prod]));
	ck_assert_int_eq(ps->status[1], 0);
	scene_end(&x);
}
END_TEST

static int death_holder(void *arg, int idx)
{
	struct scene *x = arg;
	pinshm_client_t *c;
	pinshm_channel_t *ch = child_connect_open(x->d.sock, "death", PINSHM_CONSUMER, &c);

	(void)idx;
	(void)ch;
	tu_report_vals(&x->rep, 0, 0, 1, 0);
	return child_sleep_until_killed(WAIT_MS);
}

/* A consumer killed: its endpoint is reaped and can be opened again. */
START_TEST(test_consumer_killed)
{
	struct scene x;
	struct tu_report r;
	pinshm_list_entry_t e;
	pinshm_channel_t *ch;

	scene_start(&x, "death");
	pinshm_client_t *c = x.c;
	tu_spawn(&x.ps, "holder", death_holder, &x, 0);
	TU_RC(tu_collect(&x.rep, &r, WAIT_MS), 0);
	CLIENT_RC(c, pinshm_open(c, "death", PINSHM_CONSUMER, &ch), -EBUSY);
	tu_kill_all(&x.ps);

	uint64_t deadline = tu_now_ms() + 5000;
	do {
		ck_assert(list_find(c, "death", &e, NULL));
		if (e.consumers == 0)
			break;
		tu_sleep_ms(5);
	} while (tu_now_ms() < deadline);
	ck_assert_uint_eq(e.consumers, 0);
	CLIENT_RC(c, pinshm_open(c, "death", PINSHM_CONSUMER, &ch), 0);
	pinshm_channel_close(ch);
	scene_end(&x);
}
END_TEST

/* A client that rewrote the geometry in the segment's header before its
 * connection closed: the daemon reaps with its own record of the geometry,
 * and the peer still gets -EPIPE. */
START_TEST(test_reap_corrupt_header)
{
	struct daemon d;
	pinshm_channel_t *prod, *cons;
	uint8_t buf[16];
	size_t len;

	daemon_start(&d);
	pinshm_client_t *c = connect_create_small(&d, "corrupt");
	pinshm_client_t *hostile = connect_ok(&d);
	CLIENT_RC(hostile, pinshm_open(hostile, "corrupt", PINSHM_PRODUCER, &prod), 0);
	CLIENT_RC(c, pinshm_open(c, "corrupt", PINSHM_CONSUMER, &cons), 0);
	TU_RC(pinshm_send(prod, "x", 1, CALL_MS), 0);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);

	struct seg_header *h = (struct seg_header *)prod->base;
	h->magic = 0;
	h->max_producers = 3;
	pinshm_disconnect(hostile);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, 5000), -EPIPE);
	pinshm_channel_forget(prod);
	pinshm_channel_close(cons);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* ======================================================================== */
/* limits: clients that do not read, running out of descriptors              */
/* ======================================================================== */

/* A client that sends requests, never reads the replies and shuts down its
 * writing side: the daemon holds one reply for it without spinning, serves
 * the others, and delivers every reply, in order, once it reads. */
START_TEST(test_unread_replies)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	struct pkt p;
	struct proto_msg m;
	uint8_t buf[PROTO_MAX_PACKET];
	char name[32];

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, 1);
	for (unsigned i = 0; i < PROTO_LIST_PAGE; i++) { /* a LIST reply of 4 KiB */
		snprintf(name, sizeof(name), "full-%02u", i);
		CLIENT_RC(c, pinshm_create(c, name, &attr, 0600, 0), 0);
	}

	/* Send until the daemon stops reading (its replies fill our socket). */
	int s = raw_connect(d.sock);
	uint32_t sent = 0;
	uint64_t last_sent = tu_now_ms();
	while (tu_now_ms() - last_sent < 300) {
		pk_list(&p, sent);
		if (send(s, p.b, p.len, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)p.len) {
			sent++;
			last_sent = tu_now_ms();
		} else {
			ck_assert_msg(errno == EAGAIN, "send: %s", strerror(errno));
			tu_sleep_ms(5);
		}
	}
	ck_assert_uint_gt(sent, 0);
	ck_assert_int_eq(shutdown(s, SHUT_WR), 0);
	tu_sleep_ms(50);
	daemon_assert_idle(&d, 500, "with a client that does not read its replies");
	ck_assert(list_find(c, "full-00", NULL, NULL));

	for (uint32_t i = 0; i < sent; i++) {
		ssize_t n = raw_recv(s, buf, sizeof(buf), CALL_MS);
		ck_assert_msg(n > 0, "reply %u of %u: %zd", i, sent, n);
		ck_assert_int_eq(proto_decode(buf, (size_t)n, true, &m), 0);
		ck_assert_uint_eq(m.h.seq, i);
		ck_assert_uint_eq(m.u.list_reply.count, PROTO_LIST_PAGE);
	}
	ck_assert_int_eq(raw_recv(s, buf, sizeof(buf), CALL_MS), 0); /* then the daemon closes */
	close(s);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A daemon with few descriptors: connections beyond them are dropped at
 * once, without the loop spinning, and it serves again once some close. */
START_TEST(test_out_of_descriptors)
{
	enum { CONNS = 40 };
	struct daemon d;
	struct daemon_opts o = {.nofile = 24};
	struct pkt p;
	uint8_t buf[PROTO_MAX_PACKET];
	int s[CONNS];
	unsigned served = 0, dropped = 0;

	daemon_start_opts(&d, &o);
	bool sent[CONNS];
	for (int i = 0; i < CONNS; i++) {
		s[i] = raw_connect(d.sock);
		pk_hello(&p, PROTO_VERSION, PROTO_VERSION, (uint32_t)i);
		/* A connection the daemon dropped already refuses the HELLO. */
		sent[i] = send(s[i], p.b, p.len, MSG_NOSIGNAL) == (ssize_t)p.len;
		ck_assert_msg(sent[i] || errno == EPIPE || errno == ECONNRESET, "send: %s", strerror(errno));
	}
	for (int i = 0; i < CONNS; i++) {
		if (!sent[i]) {
			dropped++;
			continue;
		}
		ssize_t n = raw_recv(s[i], buf, sizeof(buf), CALL_MS);
		/* Dropped with its HELLO unread: -ECONNRESET. */
		ck_assert_msg(n >= 0 || n == -ECONNRESET, "connection %d: neither served nor dropped (%zd)", i, n);
		if (n > 0)
			served++;
		else
			dropped++;
	}
	ck_assert_uint_gt(served, 0);
	ck_assert_uint_gt(dropped, 0);
	daemon_assert_idle(&d, 500, "out of descriptors");
	for (int i = 0; i < CONNS; i++)
		close(s[i]);

	/* Served again: a connection, and a channel (a descriptor each). */
	uint64_t deadline = tu_now_ms() + 5000;
	pinshm_client_t *c = NULL;
	while (pinshm_connect(d.sock, &c) != 0) {
		ck_assert_msg(tu_now_ms() < deadline, "no connection after the others closed: %s",
			      pinshm_client_error(NULL));
		tu_sleep_ms(10);
	}
	pinshm_channel_attr_t attr;
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "after", &attr, 0600, 0), 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A descriptor limit below what the daemon wants (the unit's LimitNOFILE
 * was 8192 for 11072) is said once at start, with the limit it got; a
 * daemon that gets enough says nothing of it (review finding). */
START_TEST(test_nofile_warning)
{
	struct daemon d;
	struct daemon_opts low = {.nofile = 256, .log = true}, plenty = {.log = true};
	struct rlimit rl;
	char line[512];

	daemon_start_opts(&d, &low);
	/* The limit it got: 256 (a wrapper, valgrind, adds some and keeps some). */
	unsigned got = 0;
	FILE *f = fopen(d.log, "r");
	ck_assert_ptr_nonnull(f);
	while (got == 0 && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "descriptor limit ");
		if (p && sscanf(p, "descriptor limit %u, below the ", &got) != 1)
			got = 0;
	}
	fclose(f);
	ck_assert_msg(got > 0, "its log does not say the descriptor limit it got");
	if (pinshmd_wrapper())
		ck_assert_uint_le(got, 256u + DAEMON_WRAPPER_FDS);
	else
		ck_assert_uint_eq(got, 256u);
	daemon_stop_ok(&d);

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max < 16384)
		return; /* this test's own limit is too low for the daemon to get enough */
	daemon_start_opts(&d, &plenty);
	ck_assert(!daemon_log_has(&d, "descriptor limit"));
	daemon_stop_ok(&d);
}
END_TEST

/* ======================================================================== */
/* permissions: other users                                                  */
/* ======================================================================== */

struct perm {
	const char *sock;
	uid_t uid;
	gid_t gid;
	bool root_group; /* supplementary group 0 */
	int report, hold; /* memlock_client: pipes to and from the test */
};

#define EXPECT(c, expr, want)                                                                                 \
	do {                                                                                                  \
		int erc_ = (expr);                                                                            \
		if (erc_ != (want))                                                                           \
			tu_child_fail(10, "%s: got %d (%s), want %d; daemon says: %s", #expr, erc_,           \
				      pinshm_strerror(erc_), (want), pinshm_client_error(c));                 \
	} while (0)

/* In a child of the test (root): become @p uid and @p gid, with the
 * supplementary group 0 only if @p root_group, and die with the test;
 * exit 2 where that fails. */
static void child_become(uid_t uid, gid_t gid, bool root_group)
{
	gid_t root = 0;

	if (setgroups(root_group ? 1 : 0, &root) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
		tu_child_fail(2, "dropping privileges: %s", strerror(errno));
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* cleared by setuid */
}

/* In a child: a connection to the daemon at @p sock, or exit 3. */
static pinshm_client_t *child_connect(const char *sock)
{
	pinshm_client_t *c = NULL;
	int rc = pinshm_connect(sock, &c);

	if (rc != 0)
		tu_child_fail(3, "connect: %s (%s)", pinshm_strerror(rc), pinshm_client_error(NULL));
	return c;
}

static int perm_client(void *arg, int idx)
{
	struct perm *x = arg;
	pinshm_client_t *c;
	pinshm_channel_t *ch;
	pinshm_channel_attr_t attr;

	(void)idx;
	child_become(x->uid, x->gid, x->root_group);
	c = child_connect(x->sock);

	EXPECT(c, pinshm_open(c, "secret", PINSHM_CONSUMER, &ch), -EACCES);
	EXPECT(c, pinshm_open(c, "secret", PINSHM_PRODUCER, &ch), -EACCES);
	/* As for files: a member of the group gets the group bits (none here),
	 * even where the other bits would allow more. */
	EXPECT(c, pinshm_open(c, "open", PINSHM_PRODUCER, &ch), x->root_group ? -EACCES : 0);
	if (!x->root_group)
		pinshm_channel_close(ch);
	EXPECT(c, pinshm_open(c, "readonly", PINSHM_CONSUMER, &ch), 0);
	pinshm_channel_close(ch);
	EXPECT(c, pinshm_open(c, "readonly", PINSHM_PRODUCER, &ch), -EACCES);
	EXPECT(c, pinshm_open(c, "group", PINSHM_CONSUMER, &ch), x->root_group ? 0 : -EACCES);
	if (x->root_group)
		pinshm_channel_close(ch);
	EXPECT(c, pinshm_unlink(c, "open"), -EPERM);
	EXPECT(c, pinshm_daemon_shutdown(c), -EPERM);
	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, 1);
	char name[32];
	snprintf(name, sizeof(name), "mine-%d", x->root_group);
	EXPECT(c, pinshm_create(c, name, &attr, 0600, PINSHM_PERSISTENT), 0);
	pinshm_disconnect(c);
	return 0;
}

START_TEST(test_permissions)
{
	struct daemon d;
	struct daemon_opts o = {.system_mode = true};
	struct perm x;
	struct tu_procs ps;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_channel_t *ch;

	if (!daemon_test_user(&x.uid, &x.gid))
		return;
	daemon_start_opts(&d, &o);
	x.sock = d.sock;
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "secret", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "open", &attr, 0606, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "readonly", &attr, 0644, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "group", &attr, 0660, 0), 0);

	x.root_group = false;
	tu_procs_init(&ps);
	tu_spawn(&ps, "other user", perm_client, &x, 0);
	tu_wait_all_ok(&ps, WAIT_MS);
	x.root_group = true;
	tu_procs_init(&ps);
	tu_spawn(&ps, "other user in group 0", perm_client, &x, 0);
	tu_wait_all_ok(&ps, WAIT_MS);

	/* Root may open anything, and unlink another user's channel. */
	CLIENT_RC(c, pinshm_open(c, "secret", PINSHM_PRODUCER, &ch), 0);
	pinshm_channel_close(ch);
	ck_assert(list_find(c, "mine-0", &e, NULL));
	ck_assert_uint_eq(e.uid, x.uid);
	ck_assert_uint_eq(e.gid, x.gid);
	CLIENT_RC(c, pinshm_unlink(c, "mine-0"), 0);
	CLIENT_RC(c, pinshm_unlink(c, "mine-1"), 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* An ordinary user whose RLIMIT_MEMLOCK is 64 KiB gets a 1 MiB channel
 * pinned through the system daemon, and uses it; the daemon's VmLck counts
 * it.  The child reports the segment's size on a pipe. */
static int memlock_client(void *arg, int idx)
{
	struct perm *x = arg;
	struct rlimit rl = {.rlim_cur = 64 * KiB, .rlim_max = 64 * KiB};
	pinshm_client_t *c;
	pinshm_channel_t *p, *q;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t *e;
	size_t n, len;
	char buf[16];

	(void)idx;
	if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
		tu_child_fail(2, "RLIMIT_MEMLOCK: %s", strerror(errno));
	child_become(x->uid, x->gid, false);
	c = child_connect(x->sock);
	tu_attr(&attr, PINSHM_QUEUE, 1024 * KiB, 1, 1);
	EXPECT(c, pinshm_create(c, "big", &attr, 0600, 0), 0);
	EXPECT(c, pinshm_list(c, &e, &n), 0);
	if (n != 1 || strcmp(e[0].name, "big") != 0 || !(e[0].state & PINSHM_LIST_PINNED) || e[0].uid != x->uid)
		tu_child_fail(4, "the 1 MiB channel is not listed pinned and ours (%zu entries, state %#x)", n,
			      n ? e[0].state : 0u);
	uint64_t size = e[0].size;
	free(e);
	EXPECT(c, pinshm_open(c, "big", PINSHM_PRODUCER, &p), 0);
	EXPECT(c, pinshm_open(c, "big", PINSHM_CONSUMER, &q), 0);
	EXPECT(c, pinshm_send(p, "pinned", 6, CALL_MS), 0);
	EXPECT(c, pinshm_recv(q, buf, sizeof(buf), &len, CALL_MS), 0);
	if (len != 6 || memcmp(buf, "pinned", 6) != 0)
		tu_child_fail(5, "received %zu bytes, not the message", len);
	if (write(x->report, &size, sizeof(size)) != (ssize_t)sizeof(size))
		tu_child_fail(6, "report: %s", strerror(errno));
	/* Hold it until the parent has looked at the daemon's VmLck. */
	if (read(x->hold, buf, 1) < 0)
		tu_child_fail(7, "hold: %s", strerror(errno));
	pinshm_channel_close(p);
	pinshm_channel_close(q);
	pinshm_disconnect(c);
	return 0;
}

START_TEST(test_unprivileged_pinned)
{
	struct daemon d;
	struct daemon_opts o = {.system_mode = true, .config = true};
	struct perm x;
	struct tu_procs ps;
	int report[2], hold[2];
	uint64_t size = 0;

	if (!daemon_test_user(&x.uid, &x.gid))
		return;
	/* No pool: VmLck grows with the channel, not before. */
	daemon_start_config(&d, &o, "[daemon]\npool_segments = 0\n");
	long lck0 = proc_status_value_kb(d.pid, "VmLck:");
	x.sock = d.sock;
	ck_assert_int_eq(pipe2(report, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(hold, O_CLOEXEC), 0);
	x.report = report[1];
	x.hold = hold[0];
	tu_procs_init(&ps);
	tu_spawn(&ps, "user with 64 KiB of RLIMIT_MEMLOCK", memlock_client, &x, 0);
	struct pollfd pf = {.fd = report[0], .events = POLLIN};
	ck_assert_int_eq(poll(&pf, 1, WAIT_MS), 1);
	ck_assert_int_eq(read(report[0], &size, sizeof(size)), (ssize_t)sizeof(size));
	ck_assert_uint_gt(size, 1024 * KiB);
	long lck = proc_status_value_kb(d.pid, "VmLck:");
	ck_assert_msg(lck - lck0 >= (long)(size / 1024), "VmLck %ld kB, %ld before: %llu bytes not counted", lck, lck0,
		      (unsigned long long)size);
	ck_assert_int_eq(write(hold[1], "", 1), 1); /* let it go */
	tu_wait_all_ok(&ps, WAIT_MS);
	close(report[0]);
	close(report[1]);
	close(hold[0]);
	close(hold[1]);
	pinshm_client_t *c = connect_ok(&d);
	pinshm_status_t st;
	uint64_t deadline = tu_now_ms() + WAIT_MS;
	do {
		CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
		if (st.channels_pinned + st.channels_unpinned == 0)
			break;
		tu_sleep_ms(10);
	} while (tu_now_ms() < deadline);
	ck_assert_uint_eq(st.channels_pinned + st.channels_unpinned, 0); /* gone with its user */
	ck_assert_uint_eq(st.pinned, 0);
	ck_assert_int_le(daemon_locked_kb_at_most(d.pid, lck0), lck0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* Where pinshm_connect(NULL) looks in user mode, another user's daemon is
 * refused (it would see every message of its channels): its folder is
 * another user's, so it is ignored for the system socket (absent here,
 * or some system daemon, never the foreign one); a path given explicitly
 * is trusted. */
START_TEST(test_foreign_user_daemon)
{
	struct daemon d;
	struct daemon_opts o = {.as_user = true, .no_socket = true};
	pinshm_client_t *c;
	char xdg[32];

	if (!daemon_test_user(&o.uid, &o.gid))
		return;
	xdg_daemon_start(&d, &o, xdg);

	int rc = pinshm_connect(NULL, &c);
	ck_assert_msg(rc == -ENOENT || rc == -ECONNREFUSED || rc == 0, "pinshm_connect(NULL): %s (%s)",
		      pinshm_strerror(rc), pinshm_client_error(NULL));
	ck_assert_msg(strstr(pinshm_client_error(NULL), "ignoring the user-mode socket folder") != NULL, "%s",
		      pinshm_client_error(NULL));
	pinshm_disconnect(c); /* a system daemon's connection, if one runs */
	TU_RC(pinshm_connect(d.sock, &c), 0);
	pinshm_disconnect(c);

	daemon_stop_ok(&d);
	rmdir(xdg);
}
END_TEST

/* ======================================================================== */
/* accounting: budget, quotas, per-user limits, access, the config file      */
/* ======================================================================== */

#define RELOAD_MS 10000 /* for a SIGHUP to take effect */

static size_t seg_size(const pinshm_channel_attr_t *attr)
{
	size_t size;

	TU_RC(pinshm_segment_size(attr, &size), 0);
	return size;
}

/*
 * The sum that a refused create reports (after @p key, e.g. "bytes
 * pinned"), polled until it is @p want: the daemon releases the channels
 * of a closed connection when it sees the close.  A channel of geometry
 * @p over must be refused with @p err whatever the sums.
 */
static void wait_sum(pinshm_client_t *c, const pinshm_channel_attr_t *over, int err, const char *fmt,
		     unsigned long long want)
{
	uint64_t deadline = tu_now_ms() + RELOAD_MS;
	unsigned long long got = ~0ull;

	for (;;) {
		CLIENT_RC(c, pinshm_create(c, "over", over, 0600, 0), err);
		const char *msg = pinshm_client_error(c);
		const char *p = strstr(msg, "exceeded: ");
		ck_assert_msg(p && sscanf(p, fmt, &got) == 1, "cannot read the sum in '%s'", msg);
		if (got == want)
			return;
		ck_assert_msg(tu_now_ms() < deadline, "the daemon says '%s': want %llu", msg, want);
		tu_sleep_ms(10);
	}
}

/* The budget, and the pinned sum back to 0 when the channels are gone. */
START_TEST(test_budget)
{
	struct daemon d;
	struct daemon_opts o = {.config = true};
	pinshm_channel_attr_t attr, over;
	char name[16];

	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	tu_attr(&over, PINSHM_QUEUE, 4096 * KiB, 1, 1);
	size_t size = seg_size(&attr);
	daemon_start_config(&d, &o, "[daemon]\nbudget = %zu\n", 3 * size + size / 2);

	for (int round = 0; round < 2; round++) {
		pinshm_client_t *c = connect_ok(&d);
		wait_sum(c, &over, -ENOSPC, "exceeded: %llu bytes pinned", 0);
		for (int i = 0; i < 3; i++) {
			snprintf(name, sizeof(name), "b%d", i);
			CLIENT_RC(c, pinshm_create(c, name, &attr, 0600, 0), 0);
		}
		CLIENT_RC(c, pinshm_create(c, "b3", &attr, 0600, 0), -ENOSPC);
		ck_assert_msg(strstr(pinshm_client_error(c), "pin budget exceeded") != NULL, "%s",
			      pinshm_client_error(c));
		ck_assert(!list_find(c, "b3", NULL, NULL));
		wait_sum(c, &over, -ENOSPC, "exceeded: %llu bytes pinned", 3 * size);
		pinshm_disconnect(c); /* destroys b0..b2: the next round starts from 0 */
	}
	daemon_stop_ok(&d);
}
END_TEST

/* A user quota; root has one too. */
START_TEST(test_quota)
{
	struct daemon d;
	struct daemon_opts o = {.config = true};
	pinshm_channel_attr_t attr, over;

	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	tu_attr(&over, PINSHM_QUEUE, 4096 * KiB, 1, 1);
	size_t size = seg_size(&attr);
	daemon_start_config(&d, &o, "[daemon]\ndefault_user_quota = %zu\nbudget = 1G\n", 2 * size + 100);

	pinshm_client_t *c = connect_ok(&d), *c2 = connect_ok(&d);
	CLIENT_RC(c, pinshm_create(c, "q0", &attr, 0600, PINSHM_PERSISTENT), 0);
	CLIENT_RC(c2, pinshm_create(c2, "q1", &attr, 0600, 0), 0); /* the user's, not the connection's */
	CLIENT_RC(c, pinshm_create(c, "q2", &attr, 0600, 0), -EDQUOT);
	ck_assert_msg(strstr(pinshm_client_error(c), "quota of uid 0 exceeded") != NULL, "%s",
		      pinshm_client_error(c));
	wait_sum(c, &over, -EDQUOT, "exceeded: %llu bytes used", 2 * size);
	pinshm_disconnect(c2); /* q1 goes */
	wait_sum(c, &over, -EDQUOT, "exceeded: %llu bytes used", size);
	CLIENT_RC(c, pinshm_create(c, "q2", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_unlink(c, "q0"), 0); /* referenced by c still */
	CLIENT_RC(c, pinshm_create(c, "q3", &attr, 0600, 0), -EDQUOT);
	pinshm_disconnect(c);
	c = connect_ok(&d);
	wait_sum(c, &over, -EDQUOT, "exceeded: %llu bytes used", 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* max_segment_size, and the per-user channel limit of the defaults and of a
 * [user] section. */
START_TEST(test_channel_limits)
{
	struct daemon d;
	struct daemon_opts o = {.config = true};
	pinshm_channel_attr_t attr, big;

	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, 1);
	tu_attr(&big, PINSHM_QUEUE, 1024 * KiB, 1, 1);
	daemon_start_config(&d, &o, "# limits\n[daemon]\nmax_channels_per_user = 1\nmax_segment_size = 512K\n"
			    "[user 0]\nmax_channels = 2\n");

	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_create(c, "big", &big, 0600, 0), -EFBIG);
	CLIENT_RC(c, pinshm_create(c, "c0", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "c1", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "c2", &attr, 0600, 0), -EUSERS);
	ck_assert_msg(strstr(pinshm_client_error(c), "owns 2 channels") != NULL, "%s", pinshm_client_error(c));
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

struct limited {
	const char *sock;
	uid_t uid;
	gid_t gid;
};

/* As the test user: 2 connections, the third refused; 2 channels, the
 * third refused; 1 channel of 1 MiB, unpinned or not, fits its quota. */
static int limited_client(void *arg, int idx)
{
	struct limited *x = arg;
	pinshm_client_t *c[3];
	pinshm_channel_attr_t attr;

	(void)idx;
	child_become(x->uid, x->gid, false);
	for (int i = 0; i < 2; i++)
		if (pinshm_connect(x->sock, &c[i]) != 0)
			tu_child_fail(3, "connect %d: %s", i, pinshm_client_error(NULL));
	int rc = pinshm_connect(x->sock, &c[2]);
	if (rc != -EUSERS || !strstr(pinshm_client_error(NULL), "connections open"))
		tu_child_fail(4, "third connection: %s (%s), want EUSERS", pinshm_strerror(rc),
			      pinshm_client_error(NULL));
	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, 1);
	EXPECT(c[0], pinshm_create(c[0], "u0", &attr, 0600, 0), 0);
	EXPECT(c[1], pinshm_create(c[1], "u1", &attr, 0600, 0), 0);
	EXPECT(c[0], pinshm_create(c[0], "u2", &attr, 0600, 0), -EUSERS);
	pinshm_disconnect(c[1]);
	/* Its channel and connection are given back when the daemon sees the
	 * close: retry for a while. */
	uint64_t deadline = tu_now_ms() + RELOAD_MS;
	while ((rc = pinshm_connect(x->sock, &c[1])) == -EUSERS && tu_now_ms() < deadline)
		tu_sleep_ms(10);
	if (rc != 0)
		tu_child_fail(5, "connect again: %s", pinshm_client_error(NULL));
	while ((rc = pinshm_create(c[1], "u2", &attr, 0600, 0)) == -EUSERS && tu_now_ms() < deadline)
		tu_sleep_ms(10);
	EXPECT(c[1], rc, 0);
	pinshm_disconnect(c[0]);
	pinshm_disconnect(c[1]);
	return 0;
}

/* A [user] section for a user made for the test, in a system daemon; root
 * keeps the defaults. */
START_TEST(test_user_limits)
{
	struct daemon d;
	struct daemon_opts o = {.system_mode = true, .config = true};
	struct limited x;
	struct tu_procs ps;
	pinshm_channel_attr_t attr;

	if (!daemon_test_user(&x.uid, &x.gid))
		return;
	daemon_start_config(&d, &o, "[daemon]\nmax_connections_per_user = 100\nmax_channels_per_user = 1\n"
			    "[user %s]\nmax_connections = 2\nmax_channels = 2\n", TEST_USER);
	x.sock = d.sock;
	tu_procs_init(&ps);
	tu_spawn(&ps, "limited user", limited_client, &x, 0);
	tu_wait_all_ok(&ps, WAIT_MS);

	pinshm_client_t *c = connect_ok(&d), *c2 = connect_ok(&d), *c3 = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "r0", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "r1", &attr, 0600, 0), -EUSERS);
	pinshm_disconnect(c3);
	pinshm_disconnect(c2);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A user-mode daemon of an ordinary user (RLIMIT_MEMLOCK 64 KiB): its
 * unpinned channels count on the quota, not on the budget. */
START_TEST(test_unpinned_quota)
{
	struct daemon d;
	struct daemon_opts o = {.as_user = true, .memlock = 64 * KiB, .config = true};
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;

	if (!daemon_test_user(&o.uid, &o.gid))
		return;
	tu_attr(&attr, PINSHM_QUEUE, 1024 * KiB, 1, 1);
	size_t size = seg_size(&attr);
	daemon_start_config(&d, &o, "[daemon]\nbudget = %zu\ndefault_user_quota = %zu\n", size + size / 2,
			    2 * size + size / 2);

	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_create(c, "big0", &attr, 0600, 0), 0);
	ck_assert_msg(strstr(pinshm_client_error(c), "not pinned") != NULL, "%s", pinshm_client_error(c));
	CLIENT_RC(c, pinshm_create(c, "big1", &attr, 0600, 0), 0); /* not on the budget */
	ck_assert(list_find(c, "big1", &e, NULL));
	ck_assert(!(e.state & PINSHM_LIST_PINNED));
	CLIENT_RC(c, pinshm_create(c, "big2", &attr, 0600, 0), -EDQUOT); /* on the quota */
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A config with an error: the daemon does not start, and says where. */
START_TEST(test_bad_config)
{
	static const char *const bad[] = {
		"[daemon]\nbudget = 1G\nmax_channels_per_user = many\n",
		"[daemon]\nbudget = 1G\nno_such_key = 1\n",
		"[daemon]\n\n[nowhere]\nquota = 1\n",
		"[daemon]\nbudget = 1G\nthis is not ini\n",
		"[access]\nallow_users = root\nallow_groups = pinshm-no-such-group\n",
		"[daemon]\nbudget = 1G\nbudget = 2G\n",
		"[daemon]\n# budget\n[user pinshm-no-such-user]\n",
		"[daemon]\nbackend = tmpfs\n",
		"[daemon]\npin_idle = 0\n",
		"[daemon]\n\npin_idle = soon\n",
		"[names]\nalice_ = alice\n",
		"[names]\n.x = user:root\n",
		"[names]\n@0.x = user:root\n",
		"[names]\nx = user:pinshm-no-such-user\n",
		"[names]\nx = uid:root\n",
		"[daemon]\nshared_names = maybe\n",
		"[daemon]\nshared_names = no\nshared_names = no\n",
	};
	static const unsigned line[] = {3, 3, 4, 3, 3, 3, 0, 2, 2, 3, 2, 2, 2, 2, 2, 2, 3};
	char want[160], buf[32];

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct daemon d;
		struct daemon_opts o = {.config = true, .log = true};
		daemon_prepare(&d, &o);
		daemon_write_config(&d, "%s", bad[i]);
		daemon_spawn(&d, &o);
		int st = daemon_wait_exit(&d, START_MS);
		if (line[i] == 0) { /* a section without keys: ignored */
			ck_assert_int_eq(st, -1);
			daemon_wait_ready(&d);
			daemon_stop_ok(&d);
			continue;
		}
		ck_assert_msg(st != -1, "pinshmd started with config %u", i);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "config %u: %s", i,
			      tu_status_str(st, buf, sizeof(buf)));
		snprintf(want, sizeof(want), "%s:%u: ", d.conf, line[i]);
		ck_assert_msg(daemon_log_has(&d, want), "config %u: its log does not say '%s'", i, want);
		daemon_cleanup_dir(&d);
	}
}
END_TEST

/* SIGHUP: a new limit applies to the next request; a bad file changes
 * nothing. */
START_TEST(test_reload)
{
	struct daemon d;
	struct daemon_opts o = {.config = true, .log = true};
	pinshm_channel_attr_t attr;
	int rc;

	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, 1);
	daemon_start_config(&d, &o, "[daemon]\nmax_channels_per_user = 1\n");
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_create(c, "h0", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "h1", &attr, 0600, 0), -EUSERS);

	daemon_write_config(&d, "[daemon]\nmax_channels_per_user = 3\n");
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	uint64_t deadline = tu_now_ms() + RELOAD_MS;
	while ((rc = pinshm_create(c, "h1", &attr, 0600, 0)) == -EUSERS && tu_now_ms() < deadline)
		tu_sleep_ms(10);
	CLIENT_RC(c, rc, 0);

	daemon_write_config(&d, "[daemon]\nmax_channels_per_user = 9\nbudget = -1\n");
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	daemon_wait_log(&d, "keeping the configuration in force", 1);
	ck_assert(daemon_log_has(&d, ":3: budget"));
	CLIENT_RC(c, pinshm_create(c, "h2", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "h3", &attr, 0600, 0), -EUSERS); /* still 3 */
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

struct access_try {
	const char *sock;
	uid_t uid;
	gid_t gid;
	int want;          /* what pinshm_connect() returns */
	unsigned retry_ms; /* retry that long until it does */
};

static int access_client(void *arg, int idx)
{
	struct access_try *x = arg;
	pinshm_client_t *c = NULL;
	int rc;

	(void)idx;
	child_become(x->uid, x->gid, false);
	uint64_t deadline = tu_now_ms() + x->retry_ms;
	while ((rc = pinshm_connect(x->sock, &c)) != x->want && tu_now_ms() < deadline)
		tu_sleep_ms(10);
	if (rc != x->want)
		tu_child_fail(3, "connect: %s (%s), want %s", pinshm_strerror(rc), pinshm_client_error(NULL),
			      pinshm_strerror(x->want));
	if (rc == -EACCES && !strstr(pinshm_client_error(NULL), "may not connect"))
		tu_child_fail(4, "refused, but it says: %s", pinshm_client_error(NULL));
	pinshm_disconnect(c);
	return 0;
}

/* [access]: the test user is refused, with a reason logged, until a reload
 * lets its group in; root always connects. */
START_TEST(test_access)
{
	struct daemon d;
	struct daemon_opts o = {.system_mode = true, .config = true, .log = true};
	struct access_try x = {.want = -EACCES};
	struct tu_procs ps;

	if (!daemon_test_user(&x.uid, &x.gid))
		return;
	daemon_prepare(&d, &o);
	ck_assert_int_ne(x.uid, 12345);
	/* A number need not name a user. */
	daemon_write_config(&d, "[access]\nallow_users = 12345\n");
	daemon_spawn(&d, &o);
	daemon_wait_ready(&d);
	x.sock = d.sock;
	tu_procs_init(&ps);
	tu_spawn(&ps, "refused user", access_client, &x, 0);
	tu_wait_all_ok(&ps, WAIT_MS);
	daemon_wait_log(&d, "connection refused", 1);
	pinshm_disconnect(connect_ok(&d)); /* root */

	daemon_write_config(&d, "[access]\nallow_users = 12345\nallow_groups = %u\n", (unsigned)x.gid);
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	x.want = 0;
	x.retry_ms = RELOAD_MS;
	tu_procs_init(&ps);
	tu_spawn(&ps, "admitted user", access_client, &x, 0);
	tu_wait_all_ok(&ps, WAIT_MS);
	daemon_stop_ok(&d);
}
END_TEST

/* Receive one datagram on @p fd as a string, waiting at most @p ms. */
static bool recv_notify(int fd, char *buf, size_t cap, int ms)
{
	ssize_t n = raw_recv(fd, (uint8_t *)buf, cap - 1, ms);

	if (n < 0)
		return false;
	buf[n] = '\0';
	return true;
}

/* sd_notify without libsystemd: READY=1 once listening, RELOADING=1 and
 * READY=1 around a reload, STOPPING=1 at the end. */
START_TEST(test_notify)
{
	struct daemon d;
	struct daemon_opts o = {.config = true};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char buf[256];
	const char *path = sa.sun_path;

	daemon_prepare(&d, &o);
	daemon_write_config(&d, "[daemon]\nmax_channels_per_user = 4\n");
	int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify", d.dir);
	ck_assert(n > 0 && (size_t)n < sizeof(sa.sun_path));
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(setenv("NOTIFY_SOCKET", path, 1), 0);
	daemon_spawn(&d, &o);
	unsetenv("NOTIFY_SOCKET");
	ck_assert_msg(recv_notify(fd, buf, sizeof(buf), START_MS), "no READY=1");
	ck_assert_str_eq(buf, "READY=1");
	ck_assert(accepts(d.sock)); /* ready means listening */
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	ck_assert(recv_notify(fd, buf, sizeof(buf), CALL_MS));
	ck_assert_str_eq(buf, "RELOADING=1");
	ck_assert(recv_notify(fd, buf, sizeof(buf), CALL_MS));
	ck_assert_str_eq(buf, "READY=1");
	kill(d.pid, SIGTERM);
	ck_assert(recv_notify(fd, buf, sizeof(buf), STOP_MS));
	ck_assert_str_eq(buf, "STOPPING=1");
	close(fd);
	unlink(path);
	int st = daemon_wait_exit(&d, STOP_MS);
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "pinshmd did not stop cleanly");
	daemon_cleanup_dir(&d);
}
END_TEST

/* ======================================================================== */

/* ======================================================================== */
/* eventfds carried between processes                                       */
/* ======================================================================== */

#define EV_MESSAGES 3

/* A consumer in its own process that waits in poll() on its eventfd only:
 * it gets every message only if the producer, in another process, learns
 * that eventfd from the daemon and signals it. */
static int ev_consumer(void *arg, int idx)
{
	const char *sock = arg;
	pinshm_client_t *c;
	pinshm_channel_t *ch = child_connect_open(sock, "ev", PINSHM_CONSUMER, &c);
	int efd = pinshm_channel_notify_fd(ch);
	char buf[16];
	size_t len;
	int rc;

	(void)idx;
	if (efd < 0)
		tu_child_fail(4, "notify_fd: %s (%s)", pinshm_strerror(efd), pinshm_client_error(c));
	for (int got = 0; got < EV_MESSAGES;) {
		rc = pinshm_channel_arm(ch);
		if (rc == 0) {
			struct pollfd p = {.fd = efd, .events = POLLIN};
			if (poll(&p, 1, 10000) != 1)
				tu_child_fail(5, "no wake-up on the eventfd in 10 s (%d of %d messages)", got,
					      EV_MESSAGES);
			uint64_t n; /* read as an eventfd would be: one wake-up, the value 1 */
			if (read(efd, &n, sizeof(n)) != sizeof(n) || n != 1)
				tu_child_fail(6, "read the wake-up socket: %s", strerror(errno));
		} else if (rc != -EAGAIN) {
			tu_child_fail(7, "arm: %s", pinshm_strerror(rc));
		}
		while ((rc = pinshm_recv(ch, buf, sizeof(buf), &len, PINSHM_NONBLOCK)) == 0) {
			char want[16];
			snprintf(want, sizeof(want), "m%d", got++);
			if (strcmp(buf, want) != 0)
				tu_child_fail(8, "got '%s', want '%s'", buf, want);
		}
		if (rc != -EAGAIN)
			tu_child_fail(9, "recv: %s", pinshm_strerror(rc));
	}
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	return 0;
}

/* A Unix datagram socket connected to a named (abstract) one: a wake-up
 * socket that would send producers' wake-ups to whoever bound the name.
 * @return it; *@p bound: the named one. */
static int dgram_connected_to_named(int *bound)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "pinshm-check-named-%d", (int)getpid());
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);

	*bound = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert(*bound >= 0 && fd >= 0);
	ck_assert_int_eq(bind(*bound, (struct sockaddr *)&sa, len), 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, len), 0);
	return fd;
}

/* NOTIFY and PEER: a consumer's wake-up socket reaches producers of other
 * processes through the daemon; what is not the sending end of a socket
 * pair (no descriptor, a pipe, an eventfd, a datagram socket connected to
 * a named one), or not the caller's endpoint, is refused. */
START_TEST(test_eventfd_handover)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *tx;
	struct tu_procs ps;

	daemon_start(&d);
	pinshm_client_t *c = connect_ok(&d);
	attr_small(&attr, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "ev", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_open(c, "ev", PINSHM_PRODUCER, &tx), 0);
	tu_procs_init(&ps);
	tu_spawn(&ps, "consumer", ev_consumer, d.sock, 0);
	for (int i = 0; i < EV_MESSAGES; i++) {
		char msg[16];
		tu_sleep_ms(200); /* the consumer goes to sleep in poll() meanwhile */
		snprintf(msg, sizeof(msg), "m%d", i);
		TU_RC(pinshm_send(tx, msg, strlen(msg) + 1, CALL_MS), 0);
	}
	tu_wait_all_ok(&ps, WAIT_MS);
	pinshm_channel_close(tx);

	/* By hand: NOTIFY of an endpoint not its own, with no descriptor, with
	 * a pipe; PEER of an endpoint with no eventfd, then with one. */
	CLIENT_RC(c, pinshm_create(c, "ev-raw", &attr, 0600, 0), 0);
	int s = raw_connect(d.sock);
	struct pkt p;
	struct proto_msg m;
	raw_open_consumer(s, "ev-raw", &m);
	uint64_t id = m.u.open_reply.id;
	uint32_t ep = m.u.open_reply.endpoint;
	int pipefd[2], pair[2], bound;
	ck_assert_int_eq(pipe(pipefd), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair), 0);
	int efd = eventfd(0, EFD_CLOEXEC);
	ck_assert_int_ge(efd, 0);
	int named = dgram_connected_to_named(&bound);
	static const struct {
		uint16_t type;
		uint32_t ep_delta; /* added to the consumer endpoint */
		int which;         /* descriptor: 0 none, 1 pipe, 2 eventfd, 3 connected to a name, 4 a pair's end */
		int status;
	} steps[] = {
		{PROTO_PEER, 0, 0, -ENOENT},   {PROTO_NOTIFY, 0, 0, -EINVAL}, {PROTO_NOTIFY, 0, 1, -EINVAL},
		{PROTO_NOTIFY, 0, 2, -EINVAL}, {PROTO_NOTIFY, 0, 3, -EINVAL}, {PROTO_NOTIFY, 1, 4, -EINVAL},
		{PROTO_PEER, 1, 0, -EINVAL},   {PROTO_NOTIFY, 0, 4, 0},       {PROTO_PEER, 0, 0, 0},
	};
	const int fds[] = {-1, pipefd[1], efd, named, pair[1]};
	for (unsigned i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		int fd = fds[steps[i].which];
		pk_header(&p, PROTO_MAGIC, PROTO_VERSION, steps[i].type, 20 + i);
		pk_le(&p, id, 8);
		pk_le(&p, ep + steps[i].ep_delta, 4);
		pk_end(&p);
		raw_send(s, &p, fd, fd >= 0 ? 1 : 0);
		raw_reply(s, &m); /* a descriptor with the PEER reply is dropped by recv() */
		ck_assert_uint_eq(m.h.seq, 20 + i);
		ck_assert_msg(m.status == steps[i].status, "step %u: %d (%s)", i, m.status, m.text);
	}
	close(s);
	close(pipefd[0]);
	close(pipefd[1]);
	close(pair[0]);
	close(pair[1]);
	close(efd);
	close(named);
	close(bound);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

#define USER_EVENTFDS 1024u /* the eventfds one user may give the daemon (pinshmd(8), LIMITS) */

/* Another user: its own channel's consumer gives an eventfd (NOTIFY). */
static int ev_share_other(void *arg, int idx)
{
	struct perm *x = arg;
	pinshm_client_t *c;
	pinshm_channel_t *ch;
	pinshm_channel_attr_t attr;

	(void)idx;
	child_become(x->uid, x->gid, false);
	c = child_connect(x->sock);
	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, 1);
	EXPECT(c, pinshm_create(c, "others", &attr, 0600, 0), 0);
	EXPECT(c, pinshm_open(c, "others", PINSHM_CONSUMER, &ch), 0);
	int efd = pinshm_channel_notify_fd(ch);
	if (efd < 0)
		tu_child_fail(4, "notify_fd: %s (%s)", pinshm_strerror(efd), pinshm_client_error(c));
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	return 0;
}

/*
 * One user may give the daemon a share of its eventfd slots, not all of
 * them (review finding: one user took the 4096 and the others' NOTIFY got
 * -ENFILE): the user's eventfd past its share is refused (-EDQUOT), one
 * freed makes room for the next, and another user's NOTIFY succeeds.
 */
START_TEST(test_eventfd_user_share)
{
	enum { CONSUMERS = 64, CHANNELS = 17 }; /* 1088 consumer endpoints: past the share of 1024 */
	struct daemon d;
	struct daemon_opts o = {.system_mode = true};
	struct perm x;
	struct tu_procs ps;
	pinshm_channel_attr_t attr;
	struct pkt p;
	struct proto_msg m;
	char name[32];
	uint64_t id[CHANNELS];
	uint32_t ep[CHANNELS][CONSUMERS];
	unsigned kept = 0, refused = 0;

	ck_assert_uint_lt(USER_EVENTFDS, CONSUMERS * CHANNELS);
	bool other = daemon_test_user(&x.uid, &x.gid);
	daemon_start_opts(&d, &o);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 4 * KiB, 1, CONSUMERS);
	int s = raw_connect(d.sock);
	int pair[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair), 0);
	int efd = pair[1];
	for (unsigned k = 0; k < CHANNELS; k++) {
		snprintf(name, sizeof(name), "share-%u", k);
		CLIENT_RC(c, pinshm_create(c, name, &attr, 0600, 0), 0);
		for (unsigned i = 0; i < CONSUMERS; i++) {
			raw_open_consumer(s, name, &m);
			id[k] = m.u.open_reply.id;
			ep[k][i] = m.u.open_reply.endpoint;
		}
	}
	for (unsigned k = 0; k < CHANNELS; k++)
		for (unsigned i = 0; i < CONSUMERS; i++) {
			pk_header(&p, PROTO_MAGIC, PROTO_VERSION, PROTO_NOTIFY, 2);
			pk_le(&p, id[k], 8);
			pk_le(&p, ep[k][i], 4);
			pk_end(&p);
			raw_send(s, &p, efd, 1); /* the daemon gets a descriptor of its own each time */
			raw_reply(s, &m);
			ck_assert_msg(m.status == 0 || m.status == -EDQUOT, "NOTIFY %u: %d (%s)", k * CONSUMERS + i,
				      m.status, m.text);
			if (m.status == 0)
				kept++;
			else
				refused++;
		}
	ck_assert_uint_eq(kept, USER_EVENTFDS);
	ck_assert_uint_eq(refused, CONSUMERS * CHANNELS - USER_EVENTFDS);

	if (other) { /* another user is not refused */
		x.sock = d.sock;
		tu_procs_init(&ps);
		tu_spawn(&ps, "other user", ev_share_other, &x, 0);
		tu_wait_all_ok(&ps, WAIT_MS);
	}

	/* One of the user's eventfds forgotten (its endpoint closed): room for one. */
	pk_header(&p, PROTO_MAGIC, PROTO_VERSION, PROTO_CLOSE, 3);
	pk_le(&p, id[0], 8);
	pk_le(&p, ep[0][0], 4);
	pk_end(&p);
	raw_send(s, &p, -1, 0);
	raw_reply(s, &m);
	ck_assert_int_eq(m.status, 0);
	for (int again = 0; again < 2; again++) {
		pk_header(&p, PROTO_MAGIC, PROTO_VERSION, PROTO_NOTIFY, 4);
		pk_le(&p, id[CHANNELS - 1], 8);
		pk_le(&p, ep[CHANNELS - 1][CONSUMERS - 1 - again], 4);
		pk_end(&p);
		raw_send(s, &p, efd, 1);
		raw_reply(s, &m);
		ck_assert_msg(m.status == (again ? -EDQUOT : 0), "NOTIFY after a close (%d): %d (%s)", again,
			      m.status, m.text);
	}
	close(s);
	close(pair[0]);
	close(pair[1]);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

#define EV_REAP_MS 10000 /* for the daemon to reap a killed producer (longer under a wrapper) */

static int ev_dying_producer(void *arg, int idx)
{
	pinshm_client_t *c;

	(void)idx;
	child_open_send_first(arg, "evdead", CALL_MS, &c);
	return child_sleep_until_killed(WAIT_MS);
}

/*
 * A consumer waiting on its wake-up socket (armed, empty queue) whose
 * producer is killed -9: the daemon, as it reaps the producer, wakes it
 * (once: one datagram, the value 1), and a receive then says -EPIPE.
 * With @p full, the consumer made the sending end blocking and filled the
 * socket's queue (a send without MSG_DONTWAIT would block): the daemon
 * must not block on it, and answers a request at once after the reap.
 */
static void ev_dying_producer_scenario(bool full)
{
	struct scene x;
	pinshm_channel_t *cons;
	char buf[16];
	size_t len;
	int reap_ms = EV_REAP_MS * (pinshmd_wrapper() ? DAEMON_WRAPPER_SLOWDOWN : 1);

	scene_start(&x, "evdead");
	CLIENT_RC(x.c, pinshm_open(x.c, "evdead", PINSHM_CONSUMER, &cons), 0);
	int prod = tu_spawn(&x.ps, "producer", ev_dying_producer, x.d.sock, 0);
	TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert(len == 5 && memcmp(buf, "first", 5) == 0);
	int efd = notify_fd(x.c, cons);
	if (full) {
		int peer = pinshm_channel_notify_peer_fd(cons);
		ck_assert_int_ge(peer, 0);
		ck_assert_int_eq(fcntl(peer, F_SETFL, fcntl(peer, F_GETFL) & ~O_NONBLOCK), 0);
		uint64_t one = 1;
		unsigned queued = 0;
		while (send(peer, &one, sizeof(one), MSG_DONTWAIT) == sizeof(one))
			queued++;
		ck_assert_msg(errno == EAGAIN && queued > 0, "filling the wake-up socket: %u, %s", queued,
			      strerror(errno));
	}
	TU_RC(pinshm_channel_arm(cons), 0); /* empty, its producer alive: sleep */

	ck_assert_int_eq(kill(x.ps.pid[prod], SIGKILL), 0);
	TU_RC(tu_wait_one(&x.ps, prod, WAIT_MS), 0);
	if (full) {
		/* Reaped (the futex sleep ends with it), and the daemon serves on. */
		TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, reap_ms), -EPIPE);
		pinshm_status_t s;
		CLIENT_RC(x.c, pinshm_status(x.c, &s, NULL, NULL), 0);
	} else {
		struct pollfd p = {.fd = efd, .events = POLLIN};
		ck_assert_msg(poll(&p, 1, reap_ms) == 1, "the eventfd was not written in %d ms after the kill",
			      reap_ms);
		uint64_t n = 0;
		ck_assert_int_eq(read(efd, &n, sizeof(n)), sizeof(n));
		ck_assert_uint_eq(n, 1);
		ck_assert_msg(!tu_efd_written(efd, 0), "woken twice for one arming");
		TU_RC(pinshm_recv(cons, buf, sizeof(buf), &len, PINSHM_NONBLOCK), -EPIPE);
		TU_RC(pinshm_channel_arm(cons), -EPIPE);
	}
	pinshm_channel_close(cons);
	scene_end(&x);
}

START_TEST(test_eventfd_producer_killed)
{
	ev_dying_producer_scenario(false);
}
END_TEST

START_TEST(test_eventfd_full_producer_killed)
{
	ev_dying_producer_scenario(true);
}
END_TEST

/* ======================================================================== */
/* working-set pinning                                                       */
/* ======================================================================== */

/* A channel unused for its pin_idle is unlocked (the daemon's VmLck drops,
 * the listing says so, it stays charged), and locked again when a client
 * asks (RELOCK) or when the daemon sees it used; pin_idle comes from the
 * request or the config; a channel that is always pinned stays locked. */
START_TEST(test_working_set)
{
	struct daemon d;
	struct daemon_opts o = {.config = true, .log = true, .verbose = true};
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_channel_t *tx, *rx;
	pinshm_status_t st;
	char buf[16];
	size_t len;

	daemon_start_config(&d, &o, "[daemon]\npin_idle = 1\n");
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 1024 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create_full(c, "ws-idle", &attr, 0600, 0, PINSHM_NODE_ANY, PINSHM_PIN_DEFAULT), 0);
	CLIENT_RC(c, pinshm_create_full(c, "ws-always", &attr, 0600, 0, PINSHM_NODE_ANY, PINSHM_PIN_ALWAYS), 0);
	CLIENT_RC(c, pinshm_create_full(c, "ws-bad", &attr, 0600, 0, PINSHM_NODE_ANY, PINSHM_PIN_IDLE_MAX + 1),
		  -EINVAL);
	CLIENT_RC(c, pinshm_stat(c, "ws-idle", &e), 0);
	ck_assert_uint_eq(e.pin_idle, 1);
	CLIENT_RC(c, pinshm_stat(c, "ws-always", &e), 0);
	ck_assert_uint_eq(e.pin_idle, 0);
	if (!(e.state & PINSHM_LIST_PINNED)) { /* nothing to unlock without CAP_IPC_LOCK or a large RLIMIT_MEMLOCK */
		fprintf(stderr, "check_daemon: working-set pinning: channels not pinned here, skipped\n");
		pinshm_disconnect(c);
		daemon_stop_ok(&d);
		return;
	}
	CLIENT_RC(c, pinshm_open(c, "ws-idle", PINSHM_CONSUMER, &rx), 0);
	CLIENT_RC(c, pinshm_open(c, "ws-idle", PINSHM_PRODUCER, &tx), 0);
	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	uint64_t pinned = st.pinned;
	long locked = proc_status_value_kb(d.pid, "VmLck:");
	uint64_t t0 = tu_now_ms();

	/* Unused for a second: unlocked, still charged. */
	wait_channel_state(c, "ws-idle", PINSHM_LIST_UNLOCKED, true, 10000);
	ck_assert_uint_ge(tu_now_ms() - t0, 900);
	CLIENT_RC(c, pinshm_stat(c, "ws-idle", &e), 0);
	ck_assert(e.state & PINSHM_LIST_PINNED);
	long size_kb = (long)(e.size / 1024);
	ck_assert_msg(proc_status_value_kb(d.pid, "VmLck:") <= locked - size_kb, "VmLck %ld kB, was %ld, channel %ld kB",
		      proc_status_value_kb(d.pid, "VmLck:"), locked, size_kb);
	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	ck_assert_uint_eq(st.pinned, pinned);
	CLIENT_RC(c, pinshm_stat(c, "ws-always", &e), 0);
	ck_assert(!(e.state & PINSHM_LIST_UNLOCKED));
	ck_assert(daemon_log_has(&d, "'ws-idle': unlocked after 1 s unused"));

	/* A client asks: locked again at once. */
	TU_RC(pinshm_channel_relock(rx), 0);
	CLIENT_RC(c, pinshm_stat(c, "ws-idle", &e), 0);
	ck_assert(!(e.state & PINSHM_LIST_UNLOCKED));
	ck_assert_int_ge(proc_status_value_kb(d.pid, "VmLck:"), locked);
	ck_assert(daemon_log_has(&d, "'ws-idle': locked again (asked)"));
	TU_RC(pinshm_channel_relock(rx), 0); /* locked: nothing asked */

	/* Unused again, then used: the daemon sees it and locks it again. */
	wait_channel_state(c, "ws-idle", PINSHM_LIST_UNLOCKED, true, 10000);
	TU_RC(pinshm_send(tx, "wake", 5, CALL_MS), 0);
	wait_channel_state(c, "ws-idle", PINSHM_LIST_UNLOCKED, false, 10000);
	ck_assert(daemon_log_has(&d, "'ws-idle': locked again (used again)"));
	TU_RC(pinshm_recv(rx, buf, sizeof(buf), &len, CALL_MS), 0);
	ck_assert_str_eq(buf, "wake");

	/* RELOCK of a channel this connection does not hold. */
	int s = raw_connect(d.sock);
	ck_assert_int_eq(raw_relock(s, 4242, 5), -ENOENT);
	close(s);

	pinshm_channel_close(tx);
	pinshm_channel_close(rx);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

static Suite *daemon_suite(void)
{
	Suite *s = suite_create("daemon");
	TCase *tc;

	tc = tcase_create("core");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_exchange);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_lifetimes);
	tcase_add_test(tc, test_close);
	tcase_add_test(tc, test_close_not_yet_told);
	tcase_add_test(tc, test_close_after_disconnect);
	tcase_add_test(tc, test_stat);
	tcase_add_test(tc, test_stats);
	tcase_add_test(tc, test_list_pages);
	tcase_add_test(tc, test_pinned);
	tcase_add_test(tc, test_unpinned);
	tcase_add_test(tc, test_default_paths);
	tcase_add_test(tc, test_socket_lifecycle);
	suite_add_tcase(s, tc);

	tc = tcase_create("protocol");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_versions);
	tcase_add_test(tc, test_unknown_type);
	tcase_add_test(tc, test_malformed);
	tcase_add_loop_test(tc, test_faulty_daemon_pages, 0, PAGE_FAULTS);
	tcase_add_test(tc, test_status_round_trip);
	tcase_add_test(tc, test_status_malformed);
	tcase_add_test(tc, test_status_old_client);
	suite_add_tcase(s, tc);

	tc = tcase_create("death");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_producer_killed);
	tcase_add_test(tc, test_consumer_killed);
	tcase_add_test(tc, test_reap_corrupt_header);
	suite_add_tcase(s, tc);

	tc = tcase_create("limits");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_unread_replies);
	tcase_add_test(tc, test_out_of_descriptors);
	tcase_add_test(tc, test_nofile_warning);
	suite_add_tcase(s, tc);

	tc = tcase_create("permissions");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_permissions);
	tcase_add_test(tc, test_unprivileged_pinned);
	tcase_add_test(tc, test_foreign_user_daemon);
	suite_add_tcase(s, tc);

	tc = tcase_create("accounting");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_budget);
	tcase_add_test(tc, test_quota);
	tcase_add_test(tc, test_channel_limits);
	tcase_add_test(tc, test_user_limits);
	tcase_add_test(tc, test_unpinned_quota);
	tcase_add_test(tc, test_bad_config);
	tcase_add_test(tc, test_reload);
	tcase_add_test(tc, test_access);
	tcase_add_test(tc, test_notify);
	suite_add_tcase(s, tc);

	tc = tcase_create("events");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_eventfd_handover);
	tcase_add_test(tc, test_eventfd_user_share);
	tcase_add_test(tc, test_eventfd_producer_killed);
	tcase_add_test(tc, test_eventfd_full_producer_killed);
	suite_add_tcase(s, tc);

	tc = tcase_create("pinning");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_working_set);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(daemon_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
