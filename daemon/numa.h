/*
 * numa.h - where a channel's pages go: the NUMA topology and placement.
 *
 * The node of a CREATE is a node number, PINSHM_NODE_ANY (no policy: the
 * kernel's default, first touch by the daemon) or PINSHM_NODE_LOCAL (the
 * node of the CPU the creating process last ran on, read from
 * /proc/PID/stat when the request is served: "near the creator", who is
 * usually one of the parties of the channel), or PINSHM_NODE_CONSUMER
 * ("near the consumer": unplaced until the first consumer's OPEN, which
 * carries the node of that client's CPU; the daemon checks the node, then
 * moves the pages, already locked, with numa_move()).
 *
 * Placement is MPOL_PREFERRED, set with mbind() on the daemon's mapping
 * before the pages are touched (mlock populates them): the pages go to the
 * node while it has free memory, and elsewhere rather than have the OOM
 * killer act inside the node (MPOL_BIND would, and a pinned segment can
 * never be moved or reclaimed afterwards).  A memfd keeps the policy as a
 * shared policy of the file, so every process mapping the channel sees it
 * (get_mempolicy(MPOL_F_ADDR)).
 *
 * Test hook: PINSHMD_TEST_NUMA_NODES=N in the daemon's environment makes it
 * believe in N nodes (1..64), CPU c on node c % N; node n is then placed on
 * the real node n % (real nodes).  Only the test suite sets it; the daemon
 * logs a warning when it is in force.  PINSHMD_TEST_NUMA_MOVE_FAIL=1 makes
 * every numa_move() fail with -ENOMEM, as a full node would.
 * PINSHMD_TEST_SYSFS=DIR makes numa_of_pci() read DIR/bus/pci/devices
 * instead of /sys/bus/pci/devices (read at start, logged likewise): a test
 * gives its daemon PCI devices that the machine does not have.  Both come
 * from the daemon's own environment: no client can set them.
 */
#ifndef PINSHMD_NUMA_H
#define PINSHMD_NUMA_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/** Read the topology (once, at start).  @return 0 or -EINVAL (bad test hook). */
int numa_setup(char *why, size_t whylen);

/**
 * Resolve the node @p requested of a CREATE by process @p creator.
 * @param node  set to a node that exists, PINSHM_NODE_ANY, or
 *              PINSHM_NODE_CONSUMER (placed later, by numa_move()).
 * @return 0; -EINVAL (no such node, with the nodes there are in @p why).
 */
int numa_resolve(int requested, pid_t creator, int *node, char *why, size_t whylen);

/**
 * Prefer node @p node (from numa_resolve(), not PINSHM_NODE_ANY) for the
 * pages of the mapping [@p base, @p base + @p size), none of them touched
 * yet.  @return 0 or the -errno of mbind().
 */
int numa_place(void *base, size_t size, int node);

/**
 * The NUMA node of PCI device @p bus (proto_pci_valid(), checked again
 * here: it becomes a path; its domain written in 4 digits or more, as
 * sysfs does), read from its numa_node in sysfs.
 * @param node  set to a node numa_node_known() knows, or PINSHM_NODE_ANY
 *              where the device has none (-1 there: a machine of one node,
 *              or firmware that does not say) or one this daemon does not
 *              know (logged).
 * @return 0; -EINVAL (not a bus id); -ENODEV (no such device); -EIO (its
 *         numa_node unreadable or not a number); why in @p why.
 */
int numa_of_pci(const char *bus, int *node, char *why, size_t whylen);

/** Whether @p node is a node of this machine (or of the test topology). */
bool numa_node_known(int node);

/**
 * Move the pages of the mapping [@p base, @p base + @p size), populated
 * (and locked) already, to node @p node (numa_node_known()), and prefer it
 * for any page made later: mbind(MPOL_PREFERRED) with MPOL_MF_MOVE_ALL
 * where the daemon may (CAP_SYS_NICE), else MPOL_MF_MOVE, which leaves the
 * pages that other processes map where they are.
 * @return 0 (all moved); -EIO (the policy is set, but some pages stay
 *         where they are: mapped by others, or no room on the node);
 *         or the -errno of mbind() (nothing changed: EPERM, ENOMEM, ...),
 *         with the reason in @p why.
 */
int numa_move(void *base, size_t size, int node, char *why, size_t whylen);

#endif /* PINSHMD_NUMA_H */
