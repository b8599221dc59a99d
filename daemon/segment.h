/*
 * segment.h - the memory of a channel: created, sealed, mapped, pinned.
 *
 * Backend (the only one so far): a memfd with MFD_ALLOW_SEALING (and
 * MFD_HUGETLB for huge pages: sealable since Linux 4.16), sized,
 * then sealed with F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, so that no
 * holder of its descriptor can resize it and make a mapping fault; nothing
 * appears under /dev/shm.  The daemon maps it, locks it (mlock populates
 * it) and formats it.  Locking fails where RLIMIT_MEMLOCK forbids it (user
 * mode): the segment then stays unpinned, with a warning logged, and says
 * so (pinned false, pin_error).  The budget of pinned bytes is checked
 * before, by the caller (account.h).
 *
 * What the seals leave open: a holder may punch holes in the file
 * (fallocate), which zeroes pages of that channel and nothing else; the
 * data plane treats it as any other corruption of the channel.
 */
#ifndef PINSHMD_SEGMENT_H
#define PINSHMD_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinshm.h"

struct segment {
	int fd;        /* the memfd, close-on-exec; handed to clients */
	void *base;    /* the daemon's mapping */
	size_t size;   /* of the memfd and the mapping: what is pinned and charged */
	int node;      /* NUMA node preferred for its pages, PINSHM_NODE_ANY: none */
	bool hugepages; /* hugetlbfs memfd */
	bool pinned;   /* locked in RAM through the daemon's mapping */
	bool sealed;   /* resizing sealed */
	char pin_error[96]; /* why not pinned, "" if pinned */
};

/* How a segment is made. */
struct segment_opts {
	int node;       /* a node from numa_resolve(), or PINSHM_NODE_ANY */
	bool hugepages; /* MFD_HUGETLB: size rounded up to a huge page */
};

/**
 * The size of the memfd that holds @p size bytes made as @p o says
 * (rounded up to the huge page size for huge pages).
 * @return 0; -EINVAL: huge pages asked for where the kernel has none.
 */
int segment_backing_size(size_t size, const struct segment_opts *o, size_t *out);

/**
 * Make a segment of at least @p size bytes as @p o says, named @p name
 * (the memfd's name, for /proc): sealed memfd, mapped by the daemon,
 * placed on o->node before any page is touched, then locked (which
 * populates it; unpinned with a warning where RLIMIT_MEMLOCK forbids it).
 * Its contents are zero: segment_format() makes it a channel.
 * @return 0; -EINVAL (huge pages not supported, or not sealable: a channel
 *         of huge pages would be unsealed, and is refused); -ENOMEM (for
 *         huge pages: too few free, see vm.nr_hugepages); or the -errno of
 *         memfd_create, ftruncate, fcntl, mmap or mbind.
 */
int segment_alloc(struct segment *s, size_t size, const struct segment_opts *o, const char *name);

/** Format @p s as a channel of geometry @p attr.  @return 0 or -EINVAL/-ENOSPC. */
int segment_format(struct segment *s, const pinshm_channel_attr_t *attr);

/**
 * segment_alloc() for a channel of geometry @p attr, then segment_format().
 * @return 0, or -EINVAL (bad @p attr), or as segment_alloc().
 */
int segment_create(struct segment *s, const pinshm_channel_attr_t *attr, const struct segment_opts *o,
		   const char *name);

/** Unmap and close @p s (processes that map it keep their mapping). */
void segment_destroy(struct segment *s);

#endif /* PINSHMD_SEGMENT_H */
