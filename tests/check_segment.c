/*
 * check_segment.c - pinshmd's segments: NUMA placement, huge pages, the pool,
 * the backends (sealed memfd, shm) and the guard against a shrunk segment.
 *
 * Integration tests: each starts a real pinshmd (--user, as the test's user,
 * on a socket in a temporary folder) and looks at the pages of what it made
 * from a client's mapping: the memory policy (get_mempolicy(MPOL_F_ADDR),
 * move_pages), the page size (/proc/self/smaps), the memfd's name and inode
 * (/proc/self/maps: a pool segment is named "pinshm:pool").
 *
 * This machine has one NUMA node: the daemon's test hook
 * PINSHMD_TEST_NUMA_NODES makes it believe in more, placed on node 0.
 * Huge pages need root to reserve (vm.nr_hugepages, restored after).
 * The shrink tests reach the daemon's segment through /proc/PID/fd (root,
 * or the daemon's user); the guard test links daemon/segment.c.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <numaif.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../daemon/segment.h"
#include "daemonutil.h"
#include "pinshm.h"
#include "protocol.h"
#include "seg.h"
#include "testutil.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define PUNCH_MS 30000u /* for a destroyed channel's pages to be punched out (slices; a wrapper) */

/* ---- the daemon ---------------------------------------------------------- */

/* Start pinshmd -f -vv --user on a fresh folder, with config text @p conf
 * (NULL: none) and PINSHMD_TEST_NUMA_NODES=@p test_nodes (NULL: unset);
 * its stderr goes to d->log.  Waits until it accepts. */
static void seg_daemon_start(struct daemon *d, const char *conf, const char *test_nodes)
{
	struct daemon_opts o = {.tmpl = "/tmp/pinshm-seg-XXXXXX",
				.config = conf != NULL,
				.log = true,
				.verbose = true,
				.numa_env = true,
				.numa_nodes = test_nodes};

	if (conf)
		daemon_start_config(d, &o, "%s", conf);
	else
		daemon_start_opts(d, &o);
}

static pinshm_list_entry_t list_get(pinshm_client_t *c, const char *name)
{
	pinshm_list_entry_t out = {0};

	ck_assert_msg(list_find(c, name, &out, NULL), "'%s' not listed", name);
	return out;
}

/* ---- this process's mappings --------------------------------------------- */

struct mapping {
	void *start;
	size_t len;
	unsigned long inode;
};

/* The mapping of this process whose path contains @p what ("memfd:pinshm:x "). */
static bool find_mapping(const char *what, struct mapping *m)
{
	char line[512];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	ck_assert(f != NULL);
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, ino;
		if (!strstr(line, what) || sscanf(line, "%lx-%lx %*s %*s %*s %lu", &lo, &hi, &ino) != 3)
			continue;
		*m = (struct mapping){(void *)lo, hi - lo, ino};
		found = true;
	}
	fclose(f);
	return found;
}

/* The inodes of this process's mappings of pool segments (up to @p max). */
static int pool_inodes(unsigned long *inos, int max)
{
	char line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	ck_assert(f != NULL);
	while (n < max && fgets(line, sizeof(line), f)) {
		unsigned long ino;
		if (strstr(line, "memfd:pinshm:pool ") && sscanf(line, "%*s %*s %*s %*s %lu", &ino) == 1)
			inos[n++] = ino;
	}
	fclose(f);
	return n;
}

/* KernelPageSize of the smaps entry at @p start, in kB. */
static long kernel_page_kb(void *start)
{
	char line[512], head[32];
	long kb = -1;
	bool in = false;
	FILE *f = fopen("/proc/self/smaps", "r");

	ck_assert(f != NULL);
	snprintf(head, sizeof(head), "%lx-", (unsigned long)start);
	while (fgets(line, sizeof(line), f)) {
		if (strchr(line, '-') && strncmp(line, head, strlen(head)) == 0)
			in = true;
		else if (in && sscanf(line, "KernelPageSize: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

/* The policy the kernel holds for @p addr: @p mode and the node mask's first word. */
static void policy_at(void *addr, int *mode, unsigned long *mask)
{
	unsigned long nodes[16] = {0};

	ck_assert_msg(get_mempolicy(mode, nodes, sizeof(nodes) * 8, addr, MPOL_F_ADDR) == 0, "get_mempolicy: %s",
		      strerror(errno));
	*mask = nodes[0];
}

/* Whether the page at @p addr is in memory: for a shared mapping, mincore(2)
 * looks at the segment's own pages, mapped in this process or not. */
static bool page_resident(void *addr)
{
	long psz = sysconf(_SC_PAGESIZE);
	unsigned char vec = 0;
	void *page = (void *)((uintptr_t)addr & ~(uintptr_t)(psz - 1));

	ck_assert_msg(mincore(page, (size_t)psz, &vec) == 0, "mincore: %s", strerror(errno));
	return vec & 1;
}

/*
 * The node of the page at @p addr (move_pages, querying), which the daemon
 * made and locked.  move_pages() looks in this process's page table: the
 * library populates it when it maps a channel (test_open_populated), but a
 * migration (compaction) may unmap a page for a moment (-ENOENT, "not
 * present").  So: check that the daemon made the page (resident), read it
 * (the fault maps that page, it cannot make another), then ask, and again
 * while -ENOENT.
 */
static int node_of_page(void *addr)
{
	void *pages[1] = {addr};
	int status[1] = {-ENOENT};

	ck_assert_msg(page_resident(addr), "the page at %p is not in memory: the daemon did not populate it", addr);
	for (int tries = 0; tries < 100 && status[0] == -ENOENT; tries++) {
		(void)*(volatile const char *)addr;
		ck_assert_msg(move_pages(0, 1, pages, NULL, status, 0) == 0, "move_pages: %s", strerror(errno));
	}
	return status[0];
}

/* Open @p name as a consumer, find its mapping (memfd named @p memfd). */
static pinshm_channel_t *open_mapped(pinshm_client_t *c, const char *name, const char *memfd, struct mapping *m)
{
	pinshm_channel_t *ch;
	char what[96];

	CLIENT_RC(c, pinshm_open(c, name, PINSHM_CONSUMER, &ch), 0);
	snprintf(what, sizeof(what), "memfd:pinshm:%s ", memfd);
	ck_assert_msg(find_mapping(what, m), "no mapping of '%s' here", what);
	return ch;
}

/* ======================================================================== */
/* NUMA                                                                      */
/* ======================================================================== */

/* Opening a channel maps every page of it at once, so that no page fault
 * stands on the path of a message: a segment of 4 MiB of ring (past any
 * 2 MiB page-table boundary, where the kernel's fault-around stops), every
 * page present in this process's page table before anything reads it. */
START_TEST(test_open_populated)
{
#ifndef MADV_POPULATE_WRITE
	fprintf(stderr, "note: no MADV_POPULATE_WRITE in this C library: channels are mapped as they are touched\n");
#else
	struct daemon d;
	pinshm_channel_attr_t attr;
	struct mapping m;
	long psz = sysconf(_SC_PAGESIZE);

	seg_daemon_start(&d, NULL, NULL);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 4 * 1024 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "pop", &attr, 0600, 0), 0);
	pinshm_channel_t *ch = open_mapped(c, "pop", "pop", &m);
	size_t n = m.len / (size_t)psz, absent = 0;
	void **pages = calloc(n, sizeof(*pages));
	int *status = calloc(n, sizeof(*status));
	ck_assert(pages && status);
	for (size_t i = 0; i < n; i++)
		pages[i] = (char *)m.start + i * (size_t)psz;
	ck_assert_msg(move_pages(0, (unsigned long)n, pages, NULL, status, 0) == 0, "move_pages: %s", strerror(errno));
	for (size_t i = 0; i < n; i++)
		absent += status[i] == -ENOENT;
	ck_assert_msg(absent == 0, "%zu of %zu pages of the channel not mapped after opening it", absent, n);
	free(pages);
	free(status);
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	daemon_stop(&d);
#endif
}
END_TEST

/* Node 0 asked: MPOL_PREFERRED for node 0 on the pages, and the pages there;
 * no node: the default policy.  LIST shows both. */
START_TEST(test_numa_node0)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	struct mapping m;
	int mode;
	unsigned long mask;

	seg_daemon_start(&d, NULL, NULL);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create_on_node(c, "n0", &attr, 0600, 0, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "any", &attr, 0600, 0), 0);
	ck_assert_int_eq(list_get(c, "n0").node, 0);
	ck_assert_int_eq(list_get(c, "any").node, PINSHM_NODE_ANY);

	pinshm_channel_t *ch = open_mapped(c, "n0", "n0", &m);
	for (size_t off = 0; off < m.len; off += m.len / 4) {
		char *p = (char *)m.start + off;
		policy_at(p, &mode, &mask);
		ck_assert_msg(mode == MPOL_PREFERRED, "policy %d at offset %zu, want MPOL_PREFERRED", mode, off);
		ck_assert_msg(mask == 1, "node mask %#lx, want node 0", mask);
		ck_assert_int_eq(node_of_page(p), 0);
	}
	pinshm_channel_close(ch);

	ch = open_mapped(c, "any", "any", &m);
	policy_at(m.start, &mode, &mask);
	ck_assert_msg(mode == MPOL_DEFAULT, "policy %d, want MPOL_DEFAULT", mode);
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

/* A node that does not exist is refused, with a message; the name stays free. */
START_TEST(test_numa_bad_node)
{
	struct daemon d;
	pinshm_channel_attr_t attr;

	seg_daemon_start(&d, NULL, NULL);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create_on_node(c, "bad", &attr, 0600, 0, 1), -EINVAL);
	ck_assert_msg(strstr(pinshm_client_error(c), "no NUMA node 1") != NULL, "%s", pinshm_client_error(c));
	CLIENT_RC(c, pinshm_create_on_node(c, "bad", &attr, 0600, 0, 1000000), -EINVAL);
	CLIENT_RC(c, pinshm_create_on_node(c, "bad", &attr, 0600, 0, -4), -EINVAL); /* by the library */
	CLIENT_RC(c, pinshm_create_on_node(c, "bad", &attr, 0600, 0, PINSHM_NODE_LOCAL), 0);
	ck_assert_int_eq(list_get(c, "bad").node, 0); /* the only node */
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

/* Pin this process to @p cpu. */
static void run_on(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	ck_assert_msg(sched_setaffinity(0, sizeof(set), &set) == 0, "sched_setaffinity: %s", strerror(errno));
	sched_yield();
}

/* An injected topology of 4 nodes (CPU c on node c % 4): nodes 0..3 taken,
 * 4 refused, LOCAL follows the creator's CPU; the pages of node 3 go to the
 * real node 0, preferred. */
START_TEST(test_numa_injected)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	struct mapping m;
	int mode;
	unsigned long mask;

	seg_daemon_start(&d, NULL, "4");
	ck_assert(daemon_log_has(&d, "test topology in force"));
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create_on_node(c, "n3", &attr, 0600, 0, 3), 0);
	ck_assert_int_eq(list_get(c, "n3").node, 3);
	CLIENT_RC(c, pinshm_create_on_node(c, "n4", &attr, 0600, 0, 4), -EINVAL);
	ck_assert_msg(strstr(pinshm_client_error(c), "nodes 0..3") != NULL, "%s", pinshm_client_error(c));

	pinshm_channel_t *ch = open_mapped(c, "n3", "n3", &m);
	policy_at(m.start, &mode, &mask);
	ck_assert_int_eq(mode, MPOL_PREFERRED);
	ck_assert_uint_eq(mask, 1);
	pinshm_channel_close(ch);

	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	for (int cpu = 0; cpu < ncpu && cpu < 4; cpu++) {
		char name[16];
		snprintf(name, sizeof(name), "local%d", cpu);
		run_on(cpu);
		CLIENT_RC(c, pinshm_create_on_node(c, name, &attr, 0600, 0, PINSHM_NODE_LOCAL), 0);
		ck_assert_msg(list_get(c, name).node == cpu % 4, "%s on node %d", name, list_get(c, name).node);
	}
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

/* A bad test hook stops the daemon at start. */
START_TEST(test_numa_bad_hook)
{
	char dir[] = "/tmp/pinshm-seg-XXXXXX", sock[64];
	int st;

	ck_assert(mkdtemp(dir) != NULL);
	snprintf(sock, sizeof(sock), "%s/sock", dir);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, STDERR_FILENO);
		setenv("PINSHMD_TEST_NUMA_NODES", "0", 1);
		execl(pinshmd_path(), "pinshmd", "-f", "--user", "-s", sock, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %#x", st);
	rmdir(dir);
}
END_TEST

/* An OPEN by hand, as @p role, saying the client runs on NUMA node @p node.
 * @return the connection, which holds the endpoint until closed; the
 * reply's status in @p status. */
static int raw_open(const struct daemon *d, const char *name, pinshm_role_t role, int32_t node, int *status)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct proto_msg req = {.h.type = PROTO_OPEN, .h.seq = 1}, rep;
	uint8_t buf[PROTO_MAX_PACKET];
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(s, 0);
	ck_assert_uint_lt(strlen(d->sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, d->sock, strlen(d->sock) + 1);
	ck_assert_msg(connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
	snprintf(req.u.open.name, sizeof(req.u.open.name), "%s", name);
	req.u.open.role = (uint32_t)role;
	req.u.open.owner = PROTO_OWNER_ANY;
	req.u.open.node = node;
	int len = proto_encode(&req, buf);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(send(s, buf, (size_t)len, MSG_NOSIGNAL), len);
	struct pollfd pf = {.fd = s, .events = POLLIN};
	ck_assert_int_eq(poll(&pf, 1, 10000), 1);
	ssize_t n = recv(s, buf, sizeof(buf), 0); /* the segment's descriptor, unasked, is dropped */
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(proto_decode(buf, (size_t)n, true, &rep), 0);
	*status = rep.status;
	return s;
}

/* Near the consumer, on an injected topology of 2 nodes: unplaced after
 * the create, after a producer's open, after consumers that say no node,
 * or a node that does not exist; placed on the node the first consumer
 * that says a good one reports (then listed there, its pages preferred on
 * the real node that stands for it), and not moved by a later consumer. */
START_TEST(test_numa_consumer_injected)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	struct mapping m;
	int mode, st;
	unsigned long mask;

	seg_daemon_start(&d, NULL, "2");
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_TOPIC, 64 * KiB, 2, 8);
	CLIENT_RC(c, pinshm_create_on_node(c, "nc", &attr, 0600, 0, PINSHM_NODE_CONSUMER), 0);
	ck_assert_int_eq(list_get(c, "nc").node, PINSHM_NODE_CONSUMER);
	ck_assert(daemon_log_has(&d, "unplaced until its first consumer opens it"));

	pinshm_channel_t *prod = NULL;
	CLIENT_RC(c, pinshm_open(c, "nc", PINSHM_PRODUCER, &prod), 0);
	int sp = raw_open(&d, "nc", PINSHM_PRODUCER, 1, &st);
	ck_assert_int_eq(st, 0);
	ck_assert_int_eq(list_get(c, "nc").node, PINSHM_NODE_CONSUMER);
	ck_assert(!daemon_log_has(&d, "near its consumer"));

	int s_unknown = raw_open(&d, "nc", PINSHM_CONSUMER, PINSHM_NODE_ANY, &st);
	ck_assert_int_eq(st, 0);
	ck_assert_int_eq(list_get(c, "nc").node, PINSHM_NODE_CONSUMER);
	daemon_wait_log(&d, "does not know its NUMA node", 1);
	static const int32_t bogus[] = {2, 7, -3, -1000, INT32_MAX};
	int sb[5];
	for (int i = 0; i < 5; i++) {
		sb[i] = raw_open(&d, "nc", PINSHM_CONSUMER, bogus[i], &st);
		ck_assert_int_eq(st, 0); /* the open itself is served */
		ck_assert_int_eq(list_get(c, "nc").node, PINSHM_NODE_CONSUMER);
	}
	daemon_wait_log(&d, "not a node here: ignored", 5);
	ck_assert(daemon_log_has(&d, "says NUMA node 7, not a node here"));

	int s1 = raw_open(&d, "nc", PINSHM_CONSUMER, 1, &st);
	ck_assert_int_eq(st, 0);
	ck_assert_int_eq(list_get(c, "nc").node, 1);
	daemon_wait_log(&d, "pages moved to NUMA node 1, near its consumer", 1);
	int s0 = raw_open(&d, "nc", PINSHM_CONSUMER, 0, &st);
	ck_assert_int_eq(st, 0);
	ck_assert_int_eq(list_get(c, "nc").node, 1); /* the first consumer's */

	/* The producer's mapping sees the preference: node 1 is the real node 0 here. */
	ck_assert(find_mapping("memfd:pinshm:nc ", &m));
	policy_at(m.start, &mode, &mask);
	ck_assert_int_eq(mode, MPOL_PREFERRED);
	ck_assert_uint_eq(mask, 1);

	close(s0);
	close(s1);
	for (int i = 0; i < 5; i++)
		close(sb[i]);
	close(s_unknown);
	close(sp);
	pinshm_channel_close(prod);
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

/* A move that fails (the test hook makes mbind's ENOMEM): the channel is
 * listed with no node, the log says why, and it carries messages. */
START_TEST(test_numa_consumer_move_fails)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *tx, *rx;
	char buf[16];
	size_t len;

	setenv("PINSHMD_TEST_NUMA_MOVE_FAIL", "1", 1);
	seg_daemon_start(&d, NULL, NULL);
	unsetenv("PINSHMD_TEST_NUMA_MOVE_FAIL");
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create_on_node(c, "ncf", &attr, 0600, 0, PINSHM_NODE_CONSUMER), 0);
	CLIENT_RC(c, pinshm_open(c, "ncf", PINSHM_PRODUCER, &tx), 0);
	CLIENT_RC(c, pinshm_open(c, "ncf", PINSHM_CONSUMER, &rx), 0);
	ck_assert_int_eq(list_get(c, "ncf").node, PINSHM_NODE_ANY);
	daemon_wait_log(&d, "pages not moved to NUMA node", 1);
	ck_assert(daemon_log_has(&d, "PINSHMD_TEST_NUMA_MOVE_FAIL"));
	ck_assert_int_eq(pinshm_send(tx, "moved?", 6, 1000), 0);
	ck_assert_int_eq(pinshm_recv(rx, buf, sizeof(buf), &len, 1000), 0);
	ck_assert_uint_eq(len, 6);
	ck_assert(memcmp(buf, "moved?", 6) == 0);
	pinshm_channel_close(rx);
	pinshm_channel_close(tx);
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

/* Near the consumer on this machine's real topology: the pages have the
 * default policy until the first consumer opens through the library (which
 * says the node it runs on, getcpu(2)); then they are preferred on that
 * node, in a mapping made before the move too, and live there.  A
 * placement the library refuses: below PINSHM_NODE_CONSUMER. */
START_TEST(test_numa_consumer_real)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	struct mapping m;
	int mode;
	unsigned long mask;
	unsigned cpu, node;

	ck_assert_int_eq(getcpu(&cpu, &node), 0);
	run_on((int)cpu); /* so that the library says this node when it opens */
	seg_daemon_start(&d, NULL, NULL);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create_on_node(c, "ncr", &attr, 0600, 0, PINSHM_NODE_CONSUMER - 1), -EINVAL);
	CLIENT_RC(c, pinshm_create_on_node(c, "ncr", &attr, 0600, 0, PINSHM_NODE_CONSUMER), 0);
	ck_assert_int_eq(list_get(c, "ncr").node, PINSHM_NODE_CONSUMER);

	pinshm_channel_t *prod;
	CLIENT_RC(c, pinshm_open(c, "ncr", PINSHM_PRODUCER, &prod), 0);
	ck_assert(find_mapping("memfd:pinshm:ncr ", &m));
	policy_at(m.start, &mode, &mask);
	ck_assert_msg(mode == MPOL_DEFAULT, "policy %d before a consumer, want MPOL_DEFAULT", mode);
	ck_assert_int_eq(list_get(c, "ncr").node, PINSHM_NODE_CONSUMER);

	pinshm_channel_t *cons;
	CLIENT_RC(c, pinshm_open(c, "ncr", PINSHM_CONSUMER, &cons), 0);
	ck_assert_int_eq(list_get(c, "ncr").node, (int)node);
	for (size_t off = 0; off < m.len; off += m.len / 4) {
		char *p = (char *)m.start + off;
		policy_at(p, &mode, &mask);
		ck_assert_msg(mode == MPOL_PREFERRED, "policy %d at offset %zu, want MPOL_PREFERRED", mode, off);
		ck_assert_msg(mask == 1ul << node, "node mask %#lx, want node %u", mask, node);
		ck_assert_int_eq(node_of_page(p), (int)node);
	}
	ck_assert(daemon_log_has(&d, "near its consumer"));
	pinshm_channel_close(cons);
	pinshm_channel_close(prod);
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

/* ======================================================================== */
/* huge pages                                                                */
/* ======================================================================== */

static bool huge_held; /* tu_huge_begin() */

static void huge_setup(void)
{
	huge_held = tu_huge_begin();
}

static void huge_teardown(void)
{
	tu_huge_end();
}

/* None free: a clean -ENOMEM.  Some reserved: the channel gets them
 * (2 MiB pages in the client's mapping, HugePages_Free down), size rounded
 * up, and it carries messages. */
START_TEST(test_hugepages)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	struct mapping m;

	if (!huge_held) {
		fprintf(stderr, "check_segment: huge pages: not root, skipped\n");
		return;
	}
	long hp_kb = tu_meminfo("Hugepagesize:");
	ck_assert_int_gt(hp_kb, 0);
	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);

	seg_daemon_start(&d, NULL, NULL);
	pinshm_client_t *c = connect_ok(&d);
	if (tu_huge_set(0) && tu_meminfo("HugePages_Free:") == 0) {
		CLIENT_RC(c, pinshm_create(c, "h0", &attr, 0600, PINSHM_HUGEPAGES), -ENOMEM);
		ck_assert_msg(strstr(pinshm_client_error(c), "huge pages") != NULL, "%s", pinshm_client_error(c));
	}
	if (!tu_huge_set(4) || tu_meminfo("HugePages_Free:") < 2) {
		fprintf(stderr, "check_segment: huge pages: the kernel reserved %ld, skipped\n",
			tu_meminfo("HugePages_Free:"));
		pinshm_disconnect(c);
		daemon_stop(&d);
		return;
	}
	long before = tu_meminfo("HugePages_Free:");
	CLIENT_RC(c, pinshm_create(c, "h1", &attr, 0600, PINSHM_HUGEPAGES), 0);
	pinshm_list_entry_t e = list_get(c, "h1");
	ck_assert(e.state & PINSHM_LIST_HUGEPAGES);
	ck_assert(e.state & PINSHM_LIST_SEALED);
	ck_assert(e.state & PINSHM_LIST_PINNED);
	ck_assert_uint_eq(e.size, (uint64_t)hp_kb * 1024);
	ck_assert_int_eq(tu_meminfo("HugePages_Free:"), before - 1);

	pinshm_channel_t *rx = open_mapped(c, "h1", "h1", &m);
	ck_assert_int_eq(kernel_page_kb(m.start), hp_kb);
	pinshm_channel_t *tx;
	CLIENT_RC(c, pinshm_open(c, "h1", PINSHM_PRODUCER, &tx), 0);
	char buf[64];
	size_t len;
	ck_assert_int_eq(pinshm_send(tx, "huge", 5, 1000), 0);
	ck_assert_int_eq(pinshm_recv(rx, buf, sizeof(buf), &len, 1000), 0);
	ck_assert_uint_eq(len, 5);
	ck_assert_str_eq(buf, "huge");
	pinshm_channel_close(tx);
	pinshm_channel_close(rx);
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

#define SLICE_ODD (3u * MiB) /* a slice that ends inside a huge page of 2 MiB */
#define SLICE_PAGES 8u        /* of the segment locked in such slices */

/* What the daemon's segment of huge pages has, huge pages, from @p free0
 * free ones before it was made. */
static long huge_taken(long free0)
{
	return free0 - tu_meminfo("HugePages_Free:");
}

/* Made of huge pages, and attached again as a restart or a hand-back does:
 * both know the page of the file, and slice in whole pages of it. */
static void hugepage_attach(long hp)
{
	struct segment s, a;
	struct segment_opts o = {.node = PINSHM_NODE_ANY, .hugepages = true};
	pinshm_channel_attr_t attr;
	struct seg_geometry g;
	char why[128] = "";

	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	TU_RC(seg_geometry_compute(&attr, &g), 0);
	TU_RC(segment_create(&s, &attr, &o, "attached"), 0);
	ck_assert(s.hugepages);
	ck_assert_uint_eq(s.page, (size_t)hp);
	int fd = dup(s.fd);
	ck_assert_int_ge(fd, 0);
	ck_assert_msg(segment_attach(fd, &g, PINSHM_NODE_ANY, &a, why, sizeof(why)) == 0, "attach: %s", why);
	ck_assert(a.hugepages);
	ck_assert_uint_eq(a.page, (size_t)hp);
	ck_assert_uint_eq(segment_slice_bytes(&a) % (size_t)hp, 0);
	segment_destroy(&a);
	segment_destroy(&s);
}

/*
 * A segment of huge pages locked and destroyed in slices of 3 MiB, which
 * end inside a huge page of 2 MiB: no step fails, each ends on a huge page,
 * populates whole pages and none twice (the huge pages taken are what it
 * says it locked), and the destroy, a hole punched after each slice,
 * gives every page back and leaves no mapping (munmap() and a punch of
 * hugetlbfs take whole huge pages only).  And the same page size known
 * from a descriptor alone (a restart, a hand-back).
 */
START_TEST(test_hugepage_slices)
{
	long hp = tu_meminfo("Hugepagesize:") * 1024;
	struct segment s;
	struct segment_opts o = {.node = PINSHM_NODE_ANY, .hugepages = true, .lock_later = true};
	struct mapping m;
	size_t locked = 0, done = 0;
	int rc;

	if (!huge_held || hp != 2 * MiB || !tu_huge_reserve(SLICE_PAGES + 1)) {
		fprintf(stderr, "check_segment: huge page slices: need root and %u free huge pages of 2 MiB, skipped\n",
			SLICE_PAGES + 1);
		return;
	}
	long free0 = tu_meminfo("HugePages_Free:");
	TU_RC(segment_alloc(&s, SLICE_PAGES * (size_t)hp - 4096, &o, "slices"), 0);
	ck_assert_uint_eq(s.size, SLICE_PAGES * (size_t)hp);
	/* A huge page a turn (SEGMENT_SLICE_BYTES rounded up to one), not the segment. */
	ck_assert_uint_eq(segment_slice_bytes(&s), (SEGMENT_SLICE_BYTES + (size_t)hp - 1) / (size_t)hp * (size_t)hp);
	ck_assert_uint_lt(segment_slice_bytes(&s), s.size);
	ck_assert_int_eq(huge_taken(free0), 0); /* reserved, none populated */
	do {
		rc = segment_lock_step(&s, &locked, SLICE_ODD);
		ck_assert_msg(rc >= 0, "a lock step failed at %zu: %s", locked, s.pin_error);
		ck_assert_msg(locked % (size_t)hp == 0, "a lock step ended inside a huge page, at %zu", locked);
		ck_assert_int_eq(huge_taken(free0), (long)(locked / (size_t)hp));
	} while (rc > 0);
	ck_assert(s.pinned);
	ck_assert(find_mapping("memfd:pinshm:slices", &m));
	s.release = true; /* destroyed for good: punched slice by slice */
	do {
		rc = segment_destroy_step(&s, &done, SLICE_ODD);
		ck_assert_msg(done % (size_t)hp == 0, "a destroy step ended inside a huge page, at %zu", done);
		ck_assert_int_eq(huge_taken(free0), (long)(SLICE_PAGES - done / (size_t)hp));
	} while (rc > 0);
	ck_assert_msg(!find_mapping("memfd:pinshm:slices", &m), "the segment is still mapped at %p", m.start);
	hugepage_attach(hp);
	ck_assert_int_eq(huge_taken(free0), 0);
}
END_TEST

/* ======================================================================== */
/* the pool                                                                  */
/* ======================================================================== */

static size_t seg_size(const pinshm_channel_attr_t *attr)
{
	size_t size;

	ck_assert_int_eq(pinshm_segment_size(attr, &size), 0);
	return size;
}

/* A create of a pool size takes a ready segment (its memfd is the pool's),
 * another size does not; a segment handed out is never handed out again,
 * even once its channel is gone; the pool fills again from idle time. */
START_TEST(test_pool_hit_miss)
{
	struct daemon d;
	pinshm_channel_attr_t attr, other;
	struct mapping m1, m2, mo;
	char conf[256];

	tu_attr(&attr, PINSHM_QUEUE, 1 * MiB, 1, 1);
	tu_attr(&other, PINSHM_QUEUE, 64 * KiB, 1, 1);
	snprintf(conf, sizeof(conf), "[daemon]\npool_segments = 2\npool_sizes = %zu\n", seg_size(&attr));
	seg_daemon_start(&d, conf, NULL);
	daemon_wait_log(&d, "pool: ready segment", 2);

	pinshm_client_t *c1 = connect_ok(&d);
	CLIENT_RC(c1, pinshm_create(c1, "p1", &attr, 0600, 0), 0);
	ck_assert(daemon_log_has(&d, "'p1' created") && daemon_log_has(&d, "from the pool"));
	ck_assert(daemon_log_has(&d, "pool hit"));
	pinshm_channel_t *ch1 = open_mapped(c1, "p1", "pool", &m1);
	ck_assert_uint_eq(list_get(c1, "p1").size, seg_size(&attr));

	CLIENT_RC(c1, pinshm_create(c1, "o1", &other, 0600, 0), 0);
	ck_assert(daemon_log_has(&d, "pool miss"));
	pinshm_channel_t *cho = open_mapped(c1, "o1", "o1", &mo);
	pinshm_channel_close(cho);

	/* p1 goes (its creator leaves); this process keeps its mapping, whose
	 * pages went with it (punched out): written again, they are this
	 * process's own. */
	memset((char *)m1.start + m1.len - 64, 0x5a, 64);
	pinshm_disconnect(c1);
	daemon_wait_log(&d, "channel 'p1' destroyed", 1);
	/* The pages go a slice a loop turn after the channel (pinshmd(8)). */
	volatile unsigned char *last = (unsigned char *)m1.start + m1.len - 1;
	for (uint64_t end = tu_now_ms() + PUNCH_MS; *last != 0 && tu_now_ms() < end;)
		tu_sleep_ms(10);
	ck_assert_uint_eq(*last, 0);
	memset((char *)m1.start + m1.len - 64, 0x5a, 64);
	daemon_wait_log(&d, "pool: ready segment", 3); /* refilled */

	pinshm_client_t *c2 = connect_ok(&d);
	for (int i = 0; i < 3; i++) { /* 2 ready, then a miss or a refilled one */
		char name[16];
		snprintf(name, sizeof(name), "p2-%d", i);
		CLIENT_RC(c2, pinshm_create(c2, name, &attr, 0600, 0), 0);
	}
	ck_assert_uint_ge(daemon_log_count(&d, "from the pool"), 3);
	pinshm_channel_t *ch2;
	unsigned long inos[4];
	CLIENT_RC(c2, pinshm_open(c2, "p2-0", PINSHM_CONSUMER, &ch2), 0);
	ck_assert_int_eq(pool_inodes(inos, 4), 2);
	ck_assert_msg(inos[0] != inos[1], "a handed-out segment (inode %lu) was handed out again", m1.inode);
	ck_assert(find_mapping("memfd:pinshm:pool ", &m2));
	if (m2.inode == m1.inode) { /* the other one */
		char *lo = (char *)m1.start;
		FILE *f = fopen("/proc/self/maps", "r");
		char line[512];
		while (fgets(line, sizeof(line), f)) {
			unsigned long a, b, ino;
			if (strstr(line, "memfd:pinshm:pool ") &&
			    sscanf(line, "%lx-%lx %*s %*s %*s %lu", &a, &b, &ino) == 3 && (char *)a != lo)
				m2 = (struct mapping){(void *)a, b - a, ino};
		}
		fclose(f);
	}
	/* Every pool segment this process maps now is a different one. */
	for (int i = 1; i < 3; i++) {
		char name[16];
		pinshm_channel_t *ch;
		snprintf(name, sizeof(name), "p2-%d", i);
		CLIENT_RC(c2, pinshm_open(c2, name, PINSHM_CONSUMER, &ch), 0);
		pinshm_channel_close(ch);
	}
	ck_assert_uint_eq(((unsigned char *)m1.start)[m1.len - 1], 0x5a);
	ck_assert_uint_eq(((unsigned char *)m2.start)[m2.len - 1], 0);
	pinshm_channel_close(ch2);
	pinshm_channel_close(ch1);
	pinshm_disconnect(c2);
	daemon_stop(&d);
}
END_TEST

/* pool_segments = 0: no pool, every create a miss. */
START_TEST(test_pool_off)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	char conf[256];

	tu_attr(&attr, PINSHM_QUEUE, 1 * MiB, 1, 1);
	snprintf(conf, sizeof(conf), "[daemon]\npool_segments = 0\npool_sizes = %zu\n", seg_size(&attr));
	seg_daemon_start(&d, conf, NULL);
	pinshm_client_t *c = connect_ok(&d);
	/* No class: nothing to fill, ever (the daemon reads its configuration
	 * before it serves). */
	pinshm_status_t st;
	pinshm_pool_t pool;
	CLIENT_RC(c, pinshm_status_pool(c, &st, &pool, NULL, NULL), 0);
	ck_assert_uint_eq(pool.count, 0);
	ck_assert_uint_eq(pool.pinned, 0);
	CLIENT_RC(c, pinshm_create(c, "x", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_status_pool(c, &st, &pool, NULL, NULL), 0);
	ck_assert_uint_eq(pool.count, 0);
	ck_assert_uint_eq(pool.hits, 0);
	ck_assert(!daemon_log_has(&d, "pool: ready segment"));
	ck_assert(!daemon_log_has(&d, "from the pool"));
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

/* Ready segments are charged to the budget and give way to channels: the
 * pool fills what the budget allows, and a create that needs its room
 * drains it. */
START_TEST(test_pool_budget)
{
	struct daemon d;
	pinshm_channel_attr_t attr, other;
	char conf[256];

	tu_attr(&attr, PINSHM_QUEUE, 1 * MiB, 1, 1);
	tu_attr(&other, PINSHM_QUEUE, 512 * KiB, 1, 1);
	size_t size = seg_size(&attr);
	snprintf(conf, sizeof(conf), "[daemon]\nbudget = %zu\npool_segments = 4\npool_sizes = %zu\n", 3 * size,
		 size);
	seg_daemon_start(&d, conf, NULL);
	/* The daemon says when the refill stops for the budget: no more after. */
	daemon_wait_log(&d, "pool: filled as far as the budget allows", 1);
	ck_assert_uint_eq(daemon_log_count(&d, "pool: ready segment"), 3); /* the budget's worth */
	pinshm_client_t *c = connect_ok(&d);
	pinshm_status_t st;
	pinshm_pool_t pool;
	CLIENT_RC(c, pinshm_status_pool(c, &st, &pool, NULL, NULL), 0);
	ck_assert_uint_eq(pool.classes[0].ready, 3);
	ck_assert_uint_eq(pool.classes[0].filling, 0);
	/* Not a pool size: the budget is full of ready segments, which go. */
	CLIENT_RC(c, pinshm_create(c, "o1", &other, 0600, 0), 0);
	ck_assert(daemon_log_has(&d, "bytes of ready segments destroyed"));
	CLIENT_RC(c, pinshm_create(c, "o2", &other, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "p1", &attr, 0600, 0), 0);
	/* 2 * 520K + 1032K pinned of 3096K: 1024K left, no room for 1032K. */
	CLIENT_RC(c, pinshm_create(c, "p2", &attr, 0600, 0), -ENOSPC);
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

/* ======================================================================== */
/* Backends: sealed memfd and POSIX shared memory                            */
/* ======================================================================== */

/* A new descriptor, opened read-write, of the file that the daemon's
 * descriptor whose link holds @p what refers to (as root or its user). */
static int daemon_file(pid_t pid, const char *what)
{
	char dirpath[64], path[320], link[256];
	int fd = -1;

	snprintf(dirpath, sizeof(dirpath), "/proc/%d/fd", (int)pid);
	DIR *dir = opendir(dirpath);
	ck_assert_msg(dir != NULL, "%s: %s", dirpath, strerror(errno));
	for (struct dirent *e; fd < 0 && (e = readdir(dir));) {
		snprintf(path, sizeof(path), "%s/%s", dirpath, e->d_name);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (strstr(link, what))
			fd = open(path, O_RDWR | O_CLOEXEC);
	}
	closedir(dir);
	ck_assert_msg(fd >= 0, "pinshmd %d holds no open file '%s'", (int)pid, what);
	return fd;
}


/* Working-set pinning in slices: an unlock says unlocked (the segment, its
 * header) before its first slice, and each slice unlocks its bytes alone;
 * a relock keeps saying unlocked until its last slice is locked. */
START_TEST(test_unlock_slices)
{
	pinshm_channel_attr_t attr;
	struct segment s;
	struct segment_opts o = {.node = PINSHM_NODE_ANY};
	size_t done = 0, locked = 0;
	int rc;

	tu_attr(&attr, PINSHM_QUEUE, 4 * MiB, 2, 1);
	TU_RC(segment_create(&s, &attr, &o, "unlock"), 0);
	if (!s.pinned) {
		fprintf(stderr, "check_segment: unlock slices: not pinned here (%s), skipped\n", s.pin_error);
		segment_destroy(&s);
		return;
	}
	struct seg_header *h = s.base;
	long lck0 = proc_status_value_kb(getpid(), "VmLck:");
	ck_assert_uint_gt(s.size, 2 * SEGMENT_SLICE_BYTES);
	segment_unlock_begin(&s);
	ck_assert(s.unlocked);
	ck_assert_uint_eq(atomic_load(&h->unlocked), 1);
	ck_assert_int_eq(proc_status_value_kb(getpid(), "VmLck:"), lck0); /* said first, nothing unlocked yet */
	do {
		rc = segment_unlock_step(&s, &done, SEGMENT_SLICE_BYTES);
		ck_assert_int_eq(proc_status_value_kb(getpid(), "VmLck:"), lck0 - (long)(done / 1024));
	} while (rc > 0);
	ck_assert_uint_eq(done, s.size);
	do {
		rc = segment_relock_step(&s, &locked, SEGMENT_SLICE_BYTES);
		ck_assert_int_ge(rc, 0);
		ck_assert_int_eq(proc_status_value_kb(getpid(), "VmLck:"), lck0 - (long)((s.size - locked) / 1024));
		if (rc > 0)
			ck_assert_msg(s.unlocked && atomic_load(&h->unlocked) == 1, "said locked at %zu of %zu bytes",
				      locked, s.size);
	} while (rc > 0);
	ck_assert(!s.unlocked);
	ck_assert_uint_eq(atomic_load(&h->unlocked), 0);
	ck_assert(s.pinned);

	/* A relock that takes over an unlock one slice in (from its first
	 * byte, as locking_relock() does) and finds the segment damaged
	 * unlocks all of it: nothing stays locked behind a channel that says
	 * unlocked. */
	done = locked = 0;
	segment_unlock_begin(&s);
	TU_RC(segment_unlock_step(&s, &done, SEGMENT_SLICE_BYTES), 1);
	ck_assert_int_eq(proc_status_value_kb(getpid(), "VmLck:"), lck0 - (long)(done / 1024));
	s.damaged = true;
	TU_RC(segment_relock_step(&s, &locked, SEGMENT_SLICE_BYTES), -EBADMSG);
	ck_assert_int_eq(proc_status_value_kb(getpid(), "VmLck:"), lck0 - (long)(s.size / 1024));
	ck_assert(s.unlocked);
	segment_destroy(&s);
}
END_TEST

/* The backend asked for, the default (auto: a sealed memfd), shown in the
 * list; an shm channel carries messages and leaves nothing in /dev/shm;
 * requests that make no sense are refused. */
START_TEST(test_backend_choice)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *tx, *rx;
	struct mapping m;
	char buf[16];
	size_t len;
	unsigned before = shm_pinshm_entries();

	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	seg_daemon_start(&d, NULL, NULL);
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_create(c, "b-shm", &attr, 0600, PINSHM_USE_SHM), 0);
	CLIENT_RC(c, pinshm_create(c, "b-memfd", &attr, 0600, PINSHM_USE_MEMFD), 0);
	CLIENT_RC(c, pinshm_create(c, "b-own", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "b-shared", &attr, 0660, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "b-both", &attr, 0600, PINSHM_USE_SHM | PINSHM_USE_MEMFD), -EINVAL);
	CLIENT_RC(c, pinshm_create(c, "b-huge", &attr, 0600, PINSHM_USE_SHM | PINSHM_HUGEPAGES), -EINVAL);
	ck_assert_msg(strstr(pinshm_client_error(c), "huge pages") != NULL, "%s", pinshm_client_error(c));

	pinshm_list_entry_t e = list_get(c, "b-shm");
	ck_assert_uint_eq(e.backend, PINSHM_BACKEND_SHM);
	ck_assert(!(e.state & (PINSHM_LIST_SEALED | PINSHM_LIST_DAMAGED)));
	e = list_get(c, "b-memfd");
	ck_assert_uint_eq(e.backend, PINSHM_BACKEND_MEMFD);
	ck_assert(e.state & PINSHM_LIST_SEALED);
	ck_assert_uint_eq(list_get(c, "b-own").backend, PINSHM_BACKEND_MEMFD);
	ck_assert_uint_eq(list_get(c, "b-shared").backend, PINSHM_BACKEND_MEMFD);

	CLIENT_RC(c, pinshm_open(c, "b-shm", PINSHM_CONSUMER, &rx), 0);
	CLIENT_RC(c, pinshm_open(c, "b-shm", PINSHM_PRODUCER, &tx), 0);
	ck_assert_int_eq(pinshm_send(tx, "posix", 6, 1000), 0);
	ck_assert_int_eq(pinshm_recv(rx, buf, sizeof(buf), &len, 1000), 0);
	ck_assert_str_eq(buf, "posix");
	ck_assert_msg(find_mapping("/dev/shm/pinshm.", &m), "the shm segment is not mapped here");
	ck_assert_uint_eq(shm_pinshm_entries(), before); /* unlinked at once */
	e = list_get(c, "b-shm");
	ck_assert_uint_eq(e.producers, 1);
	ck_assert_uint_eq(e.consumers, 1);
	pinshm_channel_close(tx);
	pinshm_channel_close(rx);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	ck_assert_uint_eq(shm_pinshm_entries(), before);
}
END_TEST

/* `backend = shm` in the config: every channel on shm, even a shared one,
 * except what asks for a memfd or for huge pages. */
START_TEST(test_backend_config)
{
	struct daemon d;
	pinshm_channel_attr_t attr;

	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	seg_daemon_start(&d, "[daemon]\nbackend = shm\n", NULL);
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_create(c, "c-shared", &attr, 0666, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "c-memfd", &attr, 0600, PINSHM_USE_MEMFD), 0);
	ck_assert_uint_eq(list_get(c, "c-shared").backend, PINSHM_BACKEND_SHM);
	ck_assert_uint_eq(list_get(c, "c-memfd").backend, PINSHM_BACKEND_MEMFD);
	ck_assert(daemon_log_has(&d, "'c-shared' created by uid") && daemon_log_has(&d, "queue, shm,"));
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* Where this kernel has no sealed memfd (the test hook pretends so), `auto`
 * puts an owner-only channel on shm and refuses a shared one. */
START_TEST(test_backend_fallback)
{
	struct daemon d;
	pinshm_channel_attr_t attr;

	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	setenv("PINSHMD_TEST_NO_MEMFD", "1", 1);
	seg_daemon_start(&d, NULL, NULL);
	unsetenv("PINSHMD_TEST_NO_MEMFD");
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_create(c, "f-own", &attr, 0600, 0), 0);
	ck_assert_uint_eq(list_get(c, "f-own").backend, PINSHM_BACKEND_SHM);
	ck_assert(daemon_log_has(&d, "no sealed memfd here"));
	CLIENT_RC(c, pinshm_create(c, "f-shared", &attr, 0640, 0), -EINVAL);
	CLIENT_RC(c, pinshm_create(c, "f-memfd", &attr, 0600, PINSHM_USE_MEMFD), -EINVAL);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* A client shrinks its shm segment to nothing: the daemon does not crash;
 * it reports the channel damaged, refuses to open it, reaps and destroys it
 * as usual, and keeps serving.  A sealed segment cannot be shrunk at all. */
START_TEST(test_shm_shrunk)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_channel_t *tx, *rx, *ch;
	unsigned before = shm_pinshm_entries();

	tu_attr(&attr, PINSHM_QUEUE, 64 * KiB, 1, 1);
	seg_daemon_start(&d, NULL, NULL);
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_create(c, "s-shm", &attr, 0600, PINSHM_USE_SHM), 0);
	CLIENT_RC(c, pinshm_create(c, "s-sealed", &attr, 0600, PINSHM_USE_MEMFD), 0);
	CLIENT_RC(c, pinshm_open(c, "s-shm", PINSHM_CONSUMER, &rx), 0);
	CLIENT_RC(c, pinshm_open(c, "s-shm", PINSHM_PRODUCER, &tx), 0);

	int fd = daemon_file(d.pid, "memfd:pinshm:s-sealed");
	ck_assert_int_eq(ftruncate(fd, 0), -1);
	ck_assert_int_eq(errno, EPERM);
	close(fd);

	fd = daemon_file(d.pid, "/dev/shm/pinshm.");
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	close(fd);
	/* This process's mappings of it fault now: leave them untouched. */
	pinshm_channel_forget(tx);
	pinshm_channel_forget(rx);

	pinshm_list_entry_t e = list_get(c, "s-shm");
	ck_assert(e.state & PINSHM_LIST_DAMAGED);
	ck_assert_uint_eq(e.producers + e.consumers, 0);
	CLIENT_RC(c, pinshm_open(c, "s-shm", PINSHM_CONSUMER, &ch), -EBADMSG);
	ck_assert(daemon_log_has(&d, "a client shrank it"));
	ck_assert(!(list_get(c, "s-sealed").state & PINSHM_LIST_DAMAGED));
	pinshm_disconnect(c); /* reaps both endpoints, destroys both channels */
	daemon_wait_log(&d, "channel 's-shm' destroyed", 1);

	c = connect_ok(&d);
	CLIENT_RC(c, pinshm_create(c, "s-shm", &attr, 0600, PINSHM_USE_SHM), 0);
	CLIENT_RC(c, pinshm_open(c, "s-shm", PINSHM_CONSUMER, &ch), 0);
	ck_assert(!(list_get(c, "s-shm").state & PINSHM_LIST_DAMAGED));
	pinshm_channel_close(ch);
	pinshm_disconnect(c);
	daemon_stop_ok(&d); /* exits 0: it never took a signal */
	ck_assert_uint_eq(shm_pinshm_entries(), before);
}
END_TEST

/* ---- segment_access(), linked in: the SIGBUS guard itself ----------------- */

struct shrink_arg {
	int fd;
	bool shrink;
	int calls;
};

/* Read the last byte of the segment, after shrinking it first if asked:
 * the read faults exactly where the guard must catch it. */
static int read_last(void *base, void *arg)
{
	struct shrink_arg *a = arg;

	a->calls++;
	if (a->shrink && ftruncate(a->fd, 0) != 0)
		return -errno;
	return ((volatile uint8_t *)base)[64 * KiB - 1];
}

START_TEST(test_guard_sigbus)
{
	struct segment s;
	struct segment_opts o = {.node = PINSHM_NODE_ANY, .shm = true};

	ck_assert_int_eq(segment_alloc(&s, 64 * KiB, &o, "guard"), 0);
	ck_assert_uint_eq(s.backend, PINSHM_BACKEND_SHM);
	((uint8_t *)s.base)[64 * KiB - 1] = 7;
	struct shrink_arg a = {.fd = s.fd};
	ck_assert_int_eq(segment_access(&s, read_last, &a), 7);
	ck_assert(!s.damaged);
	/* Shrunk between the check and the access: the fault comes back as -EBADMSG. */
	a.shrink = true;
	ck_assert_int_eq(segment_access(&s, read_last, &a), -EBADMSG);
	ck_assert(s.damaged);
	ck_assert_int_eq(a.calls, 2);
	/* Damaged: never touched again. */
	ck_assert_int_eq(segment_access(&s, read_last, &a), -EBADMSG);
	ck_assert_int_eq(a.calls, 2);
	segment_destroy(&s);

	/* Shrunk before the access: fstat sees it, the function is not run. */
	ck_assert_int_eq(segment_alloc(&s, 64 * KiB, &o, "guard"), 0);
	ck_assert_int_eq(ftruncate(s.fd, 4096), 0);
	a = (struct shrink_arg){.fd = s.fd};
	ck_assert_int_eq(segment_access(&s, read_last, &a), -EBADMSG);
	ck_assert_int_eq(a.calls, 0);

	/* A fault outside any guard is not swallowed: the process dies of it. */
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		volatile uint8_t *p = s.base;
		_exit(p[64 * KiB - 1] == 0 ? 10 : 11);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "status %#x", st);
	segment_destroy(&s);

	/* A sealed memfd cannot be shrunk: no guard needed. */
	o.shm = false;
	ck_assert_int_eq(segment_alloc(&s, 64 * KiB, &o, "guard"), 0);
	ck_assert(s.sealed);
	ck_assert_int_eq(ftruncate(s.fd, 0), -1);
	ck_assert_int_eq(errno, EPERM);
	a = (struct shrink_arg){.fd = s.fd};
	ck_assert_int_eq(segment_access(&s, read_last, &a), 0);
	segment_destroy(&s);
}
END_TEST

static Suite *segment_suite(void)
{
	Suite *s = suite_create("segment");
	TCase *tc;

	tc = tcase_create("numa");
	tcase_add_test(tc, test_open_populated);
	tcase_add_test(tc, test_numa_node0);
	tcase_add_test(tc, test_numa_bad_node);
	tcase_add_test(tc, test_numa_injected);
	tcase_add_test(tc, test_numa_bad_hook);
	tcase_add_test(tc, test_numa_consumer_injected);
	tcase_add_test(tc, test_numa_consumer_real);
	tcase_add_test(tc, test_numa_consumer_move_fails);
	suite_add_tcase(s, tc);

	tc = tcase_create("hugepages");
	/* In the parent: restored even when the test's child fails. */
	tcase_add_unchecked_fixture(tc, huge_setup, huge_teardown);
	tcase_add_test(tc, test_hugepages);
	tcase_add_test(tc, test_hugepage_slices);
	suite_add_tcase(s, tc);

	tc = tcase_create("backend");
	tcase_add_test(tc, test_backend_choice);
	tcase_add_test(tc, test_backend_config);
	tcase_add_test(tc, test_backend_fallback);
	tcase_add_test(tc, test_shm_shrunk);
	tcase_add_test(tc, test_guard_sigbus);
	tcase_add_test(tc, test_unlock_slices);
	suite_add_tcase(s, tc);

	tc = tcase_create("pool");
	tcase_add_test(tc, test_pool_hit_miss);
	tcase_add_test(tc, test_pool_off);
	tcase_add_test(tc, test_pool_budget);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(segment_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
