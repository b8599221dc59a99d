/*
 * segment.h - the memory of a channel: created, sealed, mapped, pinned.
 *
 * Backend (the only one so far): a memfd with MFD_ALLOW_SEALING, sized,
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
	size_t size;
	bool pinned;   /* locked in RAM through the daemon's mapping */
	bool sealed;   /* resizing sealed */
	char pin_error[96]; /* why not pinned, "" if pinned */
};

/**
 * Create a segment for a channel of geometry @p attr named @p name (the
 * memfd's name, for /proc), pin it if possible, and format it.
 * @return 0, or -EINVAL (bad @p attr), or the -errno of memfd_create,
 *         ftruncate, fcntl or mmap.
 */
int segment_create(struct segment *s, const pinshm_channel_attr_t *attr, const char *name);

/** Unmap and close @p s (processes that map it keep their mapping). */
void segment_destroy(struct segment *s);

#endif /* PINSHMD_SEGMENT_H */
