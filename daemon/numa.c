/*
 * numa.c - the topology (real, or injected for tests) and mbind().
 */
#include <ctype.h>
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "numa.h"
#include "pinshm.h"
#include "protocol.h"

#define NUMA_TEST_MAX 64

static struct {
	int real_max;  /* highest real node, -1: no NUMA support (one node, 0) */
	int test_nodes; /* injected node count, 0: none */
	char sysfs[256]; /* where sysfs is: "/sys", or the test's (PINSHMD_TEST_SYSFS) */
} topo = {.real_max = -1, .sysfs = "/sys"};

static bool real_node_exists(int node)
{
	if (topo.real_max < 0)
		return node == 0;
	return node <= topo.real_max && numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)node);
}

/* The sysfs root: /sys, or PINSHMD_TEST_SYSFS (an absolute path). */
static int sysfs_setup(char *why, size_t whylen)
{
	const char *t = getenv("PINSHMD_TEST_SYSFS");

	snprintf(topo.sysfs, sizeof(topo.sysfs), "/sys");
	if (!t || !*t)
		return 0;
	if (t[0] != '/' || strlen(t) >= sizeof(topo.sysfs)) {
		snprintf(why, whylen, "PINSHMD_TEST_SYSFS='%.64s': not an absolute path under %zu bytes", t,
			 sizeof(topo.sysfs));
		return -EINVAL;
	}
	snprintf(topo.sysfs, sizeof(topo.sysfs), "%s", t);
	log_warn("test sysfs in force (PINSHMD_TEST_SYSFS): PCI devices read from %s", topo.sysfs);
	return 0;
}

int numa_setup(char *why, size_t whylen)
{
	const char *t = getenv("PINSHMD_TEST_NUMA_NODES");

	topo.real_max = numa_available() < 0 ? -1 : numa_max_node();
	topo.test_nodes = 0;
	if (t && *t) {
		char *end;
		long n = strtol(t, &end, 10);
		if (!isdigit((unsigned char)*t) || *end || n < 1 || n > NUMA_TEST_MAX) {
			snprintf(why, whylen, "PINSHMD_TEST_NUMA_NODES='%s': not a number of 1 to %d", t, NUMA_TEST_MAX);
			return -EINVAL;
		}
		topo.test_nodes = (int)n;
		log_warn("test topology in force (PINSHMD_TEST_NUMA_NODES): %d nodes, CPU c on node c %% %d", topo.test_nodes,
			 topo.test_nodes);
	}
	return sysfs_setup(why, whylen);
}

/* The CPU @p pid last ran on (field 39 of /proc/PID/stat), or -errno. */
static int cpu_of(pid_t pid)
{
	char path[64], buf[1024];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The command name (field 2) may hold blanks and ')': start after the last ')'. */
	char *p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	int field = 2;
	for (p++; *p && field < 39; p++)
		if (*p == ' ')
			field++;
	if (field != 39 || !isdigit((unsigned char)*p))
		return -EIO;
	return atoi(p);
}

/* The number in file @p path (a sysfs attribute: one line). @return 0 or -errno. */
static int read_int(const char *path, long *v)
{
	char buf[32];
	FILE *f = fopen(path, "re");

	if (!f)
		return -errno;
	char *line = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!line)
		return -EIO;
	char *end;
	errno = 0;
	*v = strtol(buf, &end, 10);
	if (end == buf || (*end != '\n' && *end != '\0') || errno)
		return -EIO;
	return 0;
}

int numa_of_pci(const char *given, int *node, char *why, size_t whylen)
{
	char path[400], bus[24];
	long v = 0;

	*node = PINSHM_NODE_ANY;
	if (!proto_pci_valid(given)) {
		snprintf(why, whylen, "invalid PCI bus id '%.32s': DDDD:BB:SS.F in lower-case hex, e.g. 0000:3b:00.0",
			 given);
		return -EINVAL;
	}
	/* As sysfs names it: the domain in at least 4 digits, no more
	 * (0000:3b:00.0 for 00000000:3b:00.0). */
	char *rest;
	unsigned long domain = strtoul(given, &rest, 16);
	snprintf(bus, sizeof(bus), "%04lx%s", domain, rest);
	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", topo.sysfs, bus);
	int rc = read_int(path, &v);
	if (rc == -ENOENT) {
		snprintf(why, whylen, "no PCI device %s on this machine", bus);
		return -ENODEV;
	}
	if (rc != 0) {
		snprintf(why, whylen, "PCI device %s: cannot read its NUMA node: %s", bus, strerror(-rc));
		return -EIO;
	}
	if (v < 0) {
		log_info("PCI device %s has no NUMA node: no placement", bus);
		return 0;
	}
	if (v > INT32_MAX || !numa_node_known((int)v)) {
		log_warn("PCI device %s is on NUMA node %ld, which this daemon does not know: no placement", bus, v);
		return 0;
	}
	*node = (int)v;
	return 0;
}

bool numa_node_known(int node)
{
	return node >= 0 && (topo.test_nodes ? node < topo.test_nodes : real_node_exists(node));
}

int numa_resolve(int requested, pid_t creator, int *node, char *why, size_t whylen)
{
	*node = PINSHM_NODE_ANY;
	if (requested == PINSHM_NODE_ANY)
		return 0;
	if (requested == PINSHM_NODE_CONSUMER) {
		*node = PINSHM_NODE_CONSUMER; /* at the first consumer's OPEN */
		return 0;
	}
	if (requested == PINSHM_NODE_LOCAL) {
		int cpu = cpu_of(creator);
		if (cpu < 0) {
			/* Gone already, or /proc hidden: no placement, not a failure. */
			log_warn("NUMA node of pid %d unknown (%s): no placement", (int)creator, strerror(-cpu));
			return 0;
		}
		if (topo.test_nodes)
			*node = cpu % topo.test_nodes;
		else if (topo.real_max < 0)
			*node = PINSHM_NODE_ANY; /* no NUMA here: nothing to place */
		else if ((*node = numa_node_of_cpu(cpu)) < 0)
			*node = PINSHM_NODE_ANY;
		return 0;
	}
	if (!numa_node_known(requested)) {
		int nodes = topo.test_nodes ? topo.test_nodes : topo.real_max >= 0 ? topo.real_max + 1 : 1;
		snprintf(why, whylen, "no NUMA node %d: nodes 0..%d here, or -1 (any), -2 (near the creator) or -3 "
			 "(near the consumer)",
			 requested, nodes - 1);
		return -EINVAL;
	}
	*node = requested;
	return 0;
}

#define NUMA_MASK_WORDS 16 /* 1024 nodes, libnuma's most */

/* The mask of the real node that stands for @p node. @return 0 or -EINVAL. */
static int real_mask(int node, unsigned long mask[NUMA_MASK_WORDS])
{
	int real = node;

	if (topo.test_nodes) {
		int nreal = topo.real_max < 0 ? 1 : topo.real_max + 1;
		real = node % nreal;
		while (real > 0 && !real_node_exists(real))
			real--;
	}
	if (real < 0 || real >= NUMA_MASK_WORDS * 64)
		return -EINVAL;
	memset(mask, 0, NUMA_MASK_WORDS * sizeof(mask[0]));
	mask[real / 64] |= 1ul << (real % 64);
	return 0;
}

int numa_place(void *base, size_t size, int node)
{
	unsigned long mask[NUMA_MASK_WORDS];

	if (real_mask(node, mask) != 0)
		return -EINVAL;
	if (mbind(base, size, MPOL_PREFERRED, mask, NUMA_MASK_WORDS * 64, 0) != 0) {
		/* A preference the kernel or a sandbox does not let us state
		 * (ENOSYS, EPERM) costs the placement, not the channel. */
		if (errno == ENOSYS || errno == EPERM) {
			log_warn("NUMA placement on node %d not possible here (%s): none", node, strerror(errno));
			return 0;
		}
		return -errno;
	}
	return 0;
}

int numa_move(void *base, size_t size, int node, char *why, size_t whylen)
{
	unsigned long mask[NUMA_MASK_WORDS];

	if (!numa_node_known(node) || real_mask(node, mask) != 0) {
		snprintf(why, whylen, "no NUMA node %d here", node);
		return -EINVAL;
	}
	const char *t = getenv("PINSHMD_TEST_NUMA_MOVE_FAIL");
	if (t && strcmp(t, "1") == 0) {
		snprintf(why, whylen, "mbind: %s (test hook PINSHMD_TEST_NUMA_MOVE_FAIL)", strerror(ENOMEM));
		return -ENOMEM;
	}
	/* MPOL_MF_STRICT: EIO where some page could not be moved. */
	unsigned flags = MPOL_MF_MOVE_ALL | MPOL_MF_STRICT;
	int rc = mbind(base, size, MPOL_PREFERRED, mask, NUMA_MASK_WORDS * 64, flags);
	if (rc != 0 && errno == EPERM) { /* no CAP_SYS_NICE: only the pages no one else maps */
		flags = MPOL_MF_MOVE | MPOL_MF_STRICT;
		rc = mbind(base, size, MPOL_PREFERRED, mask, NUMA_MASK_WORDS * 64, flags);
	}
	if (rc == 0)
		return 0;
	int err = errno;
	if (err == EIO)
		snprintf(why, whylen, "some pages stay where they are (%s)",
			 flags & MPOL_MF_MOVE_ALL ? "no room on the node"
						  : "mapped by other processes, and no CAP_SYS_NICE to move those");
	else
		snprintf(why, whylen, "mbind: %s", strerror(err));
	return -err;
}
