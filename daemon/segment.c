/*
 * segment.c - memfd segments, sealed, mapped, locked and formatted.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "segment.h"

/* Lock the daemon's mapping of @p s. */
static void segment_pin(struct segment *s, const char *name)
{
	if (mlock2(s->base, s->size, 0) != 0) {
		/* mlock2, not mlock: sanitizer runtimes turn mlock() into a no-op
		 * that reports success, and a segment would pass for pinned. */
		int err = errno;
		/* A failed mlock may have locked part of the range. */
		munlock(s->base, s->size);
		snprintf(s->pin_error, sizeof(s->pin_error), "mlock: %s%s", strerror(err),
			 err == ENOMEM || err == EPERM ? " (RLIMIT_MEMLOCK)" : "");
	} else {
		s->pinned = true;
		return;
	}
	log_warn("channel '%s': %zu bytes left unpinned: %s", name, s->size, s->pin_error);
}

int segment_create(struct segment *s, const pinshm_channel_attr_t *attr, const char *name)
{
	char memfd_name[96];
	size_t size;
	int rc = pinshm_segment_size(attr, &size);

	*s = (struct segment){.fd = -1, .base = MAP_FAILED};
	if (rc != 0)
		return rc;
	s->size = size;
	snprintf(memfd_name, sizeof(memfd_name), "pinshm:%s", name);
	s->fd = memfd_create(memfd_name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (s->fd < 0)
		goto fail_errno;
	if (ftruncate(s->fd, (off_t)size) != 0)
		goto fail_errno;
	if (fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		goto fail_errno;
	s->sealed = true;
	s->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (s->base == MAP_FAILED)
		goto fail_errno;
	segment_pin(s, name);
	rc = pinshm_segment_format(s->base, size, attr);
	if (rc != 0)
		goto fail;
	return 0;
fail_errno:
	rc = -errno;
fail:
	segment_destroy(s);
	return rc;
}

void segment_destroy(struct segment *s)
{
	if (s->base != MAP_FAILED && s->base != NULL)
		munmap(s->base, s->size); /* also unlocks */
	if (s->fd >= 0)
		close(s->fd);
	*s = (struct segment){.fd = -1, .base = MAP_FAILED};
}
