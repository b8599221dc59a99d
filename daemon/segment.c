/*
 * segment.c - memfd segments, sealed, mapped, placed, locked and formatted.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "numa.h"
#include "segment.h"

/* The default huge page size (Hugepagesize of /proc/meminfo), 0: none. */
static size_t huge_page_size(void)
{
	static size_t hps = SIZE_MAX;
	char line[128];

	if (hps != SIZE_MAX)
		return hps;
	hps = 0;
	FILE *f = fopen("/proc/meminfo", "re");
	if (!f)
		return hps;
	while (fgets(line, sizeof(line), f)) {
		unsigned long kb;
		if (sscanf(line, "Hugepagesize: %lu kB", &kb) == 1)
			hps = (size_t)kb * 1024;
	}
	fclose(f);
	return hps;
}

/* HugePages_Free of /proc/meminfo, or -1. */
static long huge_pages_free(void)
{
	char line[128];
	long n = -1;
	FILE *f = fopen("/proc/meminfo", "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "HugePages_Free: %ld", &n) == 1)
			break;
	fclose(f);
	return n;
}

int segment_backing_size(size_t size, const struct segment_opts *o, size_t *out)
{
	if (!o->hugepages) {
		*out = size;
		return 0;
	}
	size_t hps = huge_page_size();
	if (hps == 0)
		return -EINVAL;
	if (size > SIZE_MAX - hps)
		return -EINVAL;
	*out = (size + hps - 1) / hps * hps;
	return 0;
}

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
	log_warn("segment '%s': %zu bytes left unpinned: %s", name, s->size, s->pin_error);
}

int segment_alloc(struct segment *s, size_t size, const struct segment_opts *o, const char *name)
{
	char memfd_name[96];
	unsigned mfd = MFD_CLOEXEC | MFD_ALLOW_SEALING;
	int rc;

	*s = (struct segment){.fd = -1, .base = MAP_FAILED, .node = o->node, .hugepages = o->hugepages};
	rc = segment_backing_size(size, o, &s->size);
	if (rc != 0) {
		log_warn("segment '%s': huge pages asked for, but this kernel has none", name);
		return rc;
	}
	if (o->hugepages)
		mfd |= MFD_HUGETLB;
	snprintf(memfd_name, sizeof(memfd_name), "pinshm:%s", name);
	s->fd = memfd_create(memfd_name, mfd);
	if (s->fd < 0)
		goto fail_errno;
	if (ftruncate(s->fd, (off_t)s->size) != 0)
		goto fail_errno;
	/* Refused rather than unsealed where a kernel cannot seal hugetlbfs
	 * (before 4.16): any opener could shrink it under every mapping. */
	if (fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
		rc = errno == EINVAL || errno == EPERM ? -EINVAL : -errno;
		goto fail;
	}
	s->sealed = true;
	/* A hugetlbfs mapping reserves its huge pages here: ENOMEM when too
	 * few are free. */
	s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (s->base == MAP_FAILED) {
		if (o->hugepages && errno == ENOMEM)
			log_warn("segment '%s': %zu huge pages needed, %ld free (vm.nr_hugepages)", name,
				 s->size / huge_page_size(), huge_pages_free());
		goto fail_errno;
	}
	if (o->node != PINSHM_NODE_ANY) {
		rc = numa_place(s->base, s->size, o->node);
		if (rc != 0)
			goto fail;
	}
	segment_pin(s, name);
	return 0;
fail_errno:
	rc = -errno;
fail:
	segment_destroy(s);
	return rc;
}

int segment_format(struct segment *s, const pinshm_channel_attr_t *attr)
{
	return pinshm_segment_format(s->base, s->size, attr);
}

int segment_create(struct segment *s, const pinshm_channel_attr_t *attr, const struct segment_opts *o,
		   const char *name)
{
	size_t size;
	int rc = pinshm_segment_size(attr, &size);

	*s = (struct segment){.fd = -1, .base = MAP_FAILED};
	if (rc != 0)
		return rc;
	rc = segment_alloc(s, size, o, name);
	if (rc != 0)
		return rc;
	rc = segment_format(s, attr);
	if (rc != 0)
		segment_destroy(s);
	return rc;
}

void segment_destroy(struct segment *s)
{
	if (s->base != MAP_FAILED && s->base != NULL)
		munmap(s->base, s->size); /* also unlocks */
	if (s->fd >= 0)
		close(s->fd);
	*s = (struct segment){.fd = -1, .base = MAP_FAILED, .node = PINSHM_NODE_ANY};
}
