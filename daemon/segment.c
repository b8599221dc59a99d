/*
 * segment.c - memfd and shm segments, mapped, placed, locked and formatted;
 * guarded access to the ones a client can shrink.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "layout.h"
#include "seg.h"
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

/* The page size of the file of @p s: what its mapping is unmapped in, and
 * a hole punched in, whole. */
static size_t page_of(const struct segment *s)
{
	return s->page ? s->page : (size_t)sysconf(_SC_PAGESIZE);
}

/* The bytes of a step of at most @p max from @p at on, rounded up to end on
 * a page of @p s (or at its end); 0 for 0. */
static size_t step_len(const struct segment *s, size_t at, size_t max)
{
	size_t page = page_of(s), left = s->size - at;

	if (max == 0 || max >= left)
		return max == 0 ? 0 : left;
	size_t end = (at + max + page - 1) / page * page; /* at + max < s->size: no overflow */
	return end - at < left ? end - at : left;
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

/* The test hook PINSHMD_TEST_NO_MEMFD=1: behave as a kernel without memfd_create. */
static bool no_memfd_for_tests(void)
{
	const char *t = getenv("PINSHMD_TEST_NO_MEMFD");

	return t && strcmp(t, "1") == 0;
}

/* munlock() by its system call: sanitizer runtimes turn munlock() (like
 * mlock()) into a no-op, and a segment would stay locked. */
static void unlock_range(void *addr, size_t len)
{
	syscall(SYS_munlock, addr, len);
}

/* Lock the daemon's mapping of @p s. */
static void segment_pin(struct segment *s, const char *name)
{
	if (mlock2(s->base, s->size, 0) != 0) {
		/* mlock2, not mlock: sanitizer runtimes turn mlock() into a no-op
		 * that reports success, and a segment would pass for pinned. */
		int err = errno;
		/* A failed mlock may have locked part of the range. */
		unlock_range(s->base, s->size);
		snprintf(s->pin_error, sizeof(s->pin_error), "mlock: %s%s", strerror(err),
			 err == ENOMEM || err == EPERM ? " (RLIMIT_MEMLOCK)" : "");
	} else {
		s->pinned = true;
		return;
	}
	log_warn("segment '%s': %zu bytes left unpinned: %s", name, s->size, s->pin_error);
}

/*
 * An shm object of a unique name, unlinked at once: its name lives for
 * the two system calls between, and nothing is ever left in /dev/shm.
 * The name is never reused (pid, a counter, the clock), and O_EXCL makes
 * sure the object is ours, not one someone made first under that name.
 * @return the descriptor (close-on-exec, as shm_open() makes it) or -errno.
 */
static int shm_create(void)
{
	static unsigned long counter;
	char shm_name[80];

	for (int tries = 0; tries < 16; tries++) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		snprintf(shm_name, sizeof(shm_name), "/pinshm.%ld.%lu.%lx", (long)getpid(), ++counter,
			 (unsigned long)ts.tv_nsec ^ (unsigned long)ts.tv_sec);
		int fd = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd >= 0) {
			shm_unlink(shm_name);
			/* 0600 whatever the umask: mode 0 marks a segment removed
			 * from the descriptor store (adopt.c, REMOVED_MODE). */
			if (fchmod(fd, 0600) != 0) {
				int err = errno;
				close(fd);
				return -err;
			}
			return fd;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

int segment_alloc(struct segment *s, size_t size, const struct segment_opts *o, const char *name)
{
	char memfd_name[96];
	unsigned mfd = MFD_CLOEXEC | MFD_ALLOW_SEALING;
	int rc;

	*s = (struct segment){.fd = -1,
			      .base = MAP_FAILED,
			      .node = o->node,
			      .at_consumer = o->node == PINSHM_NODE_CONSUMER,
			      .hugepages = o->hugepages,
			      .page = o->hugepages ? huge_page_size() : 0,
			      .backend = o->shm ? PINSHM_BACKEND_SHM : PINSHM_BACKEND_MEMFD};
	if (o->shm && o->hugepages)
		return -EINVAL;
	rc = segment_backing_size(size, o, &s->size);
	if (rc != 0) {
		log_warn("segment '%s': huge pages asked for, but this kernel has none", name);
		return rc;
	}
	if (o->shm) {
		s->fd = shm_create();
		if (s->fd < 0) {
			rc = s->fd;
			goto fail;
		}
		if (ftruncate(s->fd, (off_t)s->size) != 0)
			goto fail_errno;
	} else {
		if (o->hugepages)
			mfd |= MFD_HUGETLB;
		snprintf(memfd_name, sizeof(memfd_name), "pinshm:%s", name);
		s->fd = no_memfd_for_tests() ? (errno = ENOSYS, -1) : memfd_create(memfd_name, mfd);
		if (s->fd < 0)
			goto fail_memfd;
		if (ftruncate(s->fd, (off_t)s->size) != 0)
			goto fail_errno;
		/* Refused rather than unsealed where a kernel cannot seal hugetlbfs
		 * (before 4.16): any opener could shrink it under every mapping. */
		if (fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
			goto fail_memfd;
		s->sealed = true;
	}
	/* A hugetlbfs mapping reserves its huge pages here: ENOMEM when too
	 * few are free. */
	s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (s->base == MAP_FAILED) {
		if (o->hugepages && errno == ENOMEM)
			log_warn("segment '%s': %zu huge pages needed, %ld free (vm.nr_hugepages)", name,
				 s->size / huge_page_size(), huge_pages_free());
		goto fail_errno;
	}
	if (o->node >= 0) {
		rc = numa_place(s->base, s->size, o->node);
		if (rc != 0)
			goto fail;
	}
	if (!o->lock_later)
		segment_pin(s, name);
	return 0;
fail_memfd:
	/* No sealed memfd on this kernel (no memfd_create, or no seals). */
	rc = errno == EINVAL || errno == EPERM || errno == ENOSYS ? -EINVAL : -errno;
	if (rc == -EINVAL && o->shm_fallback && !o->hugepages) {
		log_warn("segment '%s': no sealed memfd here (%s): POSIX shared memory instead", name,
			 strerror(errno));
		segment_destroy(s);
		struct segment_opts shm = *o;
		shm.shm = true;
		return segment_alloc(s, size, &shm, name);
	}
	goto fail;
fail_errno:
	rc = -errno;
fail:
	segment_destroy(s);
	return rc;
}

int segment_lock_step(struct segment *s, size_t *locked, size_t max)
{
	size_t len = step_len(s, *locked, max);

	if (len > 0 && mlock2((char *)s->base + *locked, len, 0) != 0) {
		int err = errno;
		/* The slices locked before, and maybe part of this one. */
		unlock_range(s->base, s->size);
		*locked = 0;
		snprintf(s->pin_error, sizeof(s->pin_error), "mlock: %s%s", strerror(err),
			 err == ENOMEM || err == EPERM ? " (RLIMIT_MEMLOCK)" : "");
		return -err;
	}
	*locked += len;
	if (*locked < s->size)
		return 1;
	s->pinned = true;
	return 0;
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

/*
 * The SIGBUS guard.  Why a guard and not pread()/pwrite(): the daemon's
 * accesses to a segment are atomic operations on shared words (claiming an
 * endpoint with a CAS, marking one dead, waking futex sleepers, reading
 * counters), which only a mapping can do.  An fstat() before each access
 * catches a segment already shrunk, but a client can shrink it between the
 * check and the access: the fault that follows is caught by this handler
 * and turned into a jump back to segment_access(), which marks the segment
 * damaged.  A SIGBUS anywhere else is not ours: the handler puts back the
 * default action and returns, so the faulting access faults again and the
 * daemon dies of it as it would have without the handler.
 *
 * The daemon is single-threaded: one guard at a time, in static storage.
 * The SIGBUS handler runs on the faulting thread, which is that thread.
 */
static sigjmp_buf guard_jump;
static volatile sig_atomic_t guard_armed;
static uintptr_t guard_lo, guard_hi; /* the guarded mapping: [lo, hi) */

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
	(void)uctx;
	uintptr_t addr = (uintptr_t)si->si_addr;

	if (guard_armed && addr >= guard_lo && addr < guard_hi) {
		guard_armed = 0;
		siglongjmp(guard_jump, 1);
	}
	signal(sig, SIG_DFL);
}

static int guard_install(void)
{
	static bool installed;
	struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO};

	if (installed)
		return 0;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL) != 0)
		return -errno;
	installed = true;
	return 0;
}

/* Whether the file of @p s still holds its whole mapping. */
static bool whole(const struct segment *s)
{
	struct stat st;

	return fstat(s->fd, &st) == 0 && st.st_size >= 0 && (uint64_t)st.st_size >= s->size;
}

static void mark_damaged(struct segment *s, const char *how)
{
	s->damaged = true;
	log_warn("%s segment of %zu bytes %s: a client shrank it or punched its huge pages; the daemon leaves it alone "
		 "from now on",
		 s->hugepages ? "huge-page" : "shm", s->size, how);
}

int segment_access(struct segment *s, segment_access_fn *fn, void *arg)
{
	/* Sealed, its size cannot change, nor can a page fail to come back:
	 * a punched page of tmpfs comes back zeroed at the next touch.  One of
	 * hugetlbfs needs a free huge page then, and without one the touch
	 * faults (SIGBUS): guarded like the shm backend's. */
	if (s->backend != PINSHM_BACKEND_SHM && !s->hugepages)
		return fn(s->base, arg);
	if (s->damaged)
		return -EBADMSG;
	if (!whole(s)) {
		mark_damaged(s, "found short");
		return -EBADMSG;
	}
	if (guard_install() != 0) {
		log_err("cannot install the SIGBUS guard: %s", strerror(errno));
		return -EBADMSG;
	}
	guard_lo = (uintptr_t)s->base;
	guard_hi = guard_lo + s->size;
	if (sigsetjmp(guard_jump, 1) != 0) {
		/* Back from on_sigbus(): fn() was cut short by the fault. */
		mark_damaged(s, "faulted");
		return -EBADMSG;
	}
	guard_armed = 1;
	int rc = fn(s->base, arg);
	guard_armed = 0;
	return rc;
}

/* The `unlocked` word of the header: the daemon's own note for clients. */
static int set_unlocked_fn(void *base, void *arg)
{
	struct seg_header *h = base;

	atomic_store_explicit(&h->unlocked, *(const uint32_t *)arg, memory_order_relaxed);
	return 0;
}

void segment_unlock_begin(struct segment *s)
{
	uint32_t one = 1;

	s->unlocked = true;
	segment_access(s, set_unlocked_fn, &one);
}

int segment_unlock_step(struct segment *s, size_t *done, size_t max)
{
	size_t len = step_len(s, *done, max);

	if (len > 0)
		unlock_range((char *)s->base + *done, len);
	*done += len;
	return *done < s->size ? 1 : 0;
}

/* segment_access(): nothing; the shm size check alone. */
static int nothing_fn(void *base, void *arg)
{
	(void)base;
	(void)arg;
	return 0;
}

int segment_relock_step(struct segment *s, size_t *locked, size_t max)
{
	size_t len = step_len(s, *locked, max);
	uint32_t zero = 0;

	/* shm, shrunk: mlock would populate what is gone. */
	if (s->damaged || segment_access(s, nothing_fn, NULL) != 0) {
		/* All of it: a relock that took over an unlock in progress
		 * finds bytes past *locked still locked. */
		unlock_range(s->base, s->size);
		*locked = 0;
		return -EBADMSG;
	}
	if (len > 0 && mlock2((char *)s->base + *locked, len, 0) != 0) {
		int err = errno;
		unlock_range(s->base, s->size); /* the slices before, and maybe part of this one */
		*locked = 0;
		return -err;
	}
	*locked += len;
	if (*locked < s->size)
		return 1;
	/* Locked whole: only now does the header say so. */
	if (segment_access(s, set_unlocked_fn, &zero) != 0) {
		unlock_range(s->base, s->size);
		*locked = 0;
		return -EBADMSG;
	}
	s->unlocked = false;
	return 0;
}

size_t segment_slice_bytes(const struct segment *s)
{
	size_t page = page_of(s);

	return (SEGMENT_SLICE_BYTES + page - 1) / page * page;
}

/* Punch the pages of the file of @p s in [off, end) out, but for its first
 * s->keep bytes (rounded up to a page); the daemon's mapping of them is
 * gone already.  A punch that fails is logged once, and no more are tried:
 * the pages then go when the last holder closes. */
static void punch(struct segment *s, size_t off, off_t end)
{
	size_t page = page_of(s);
	off_t from = (off_t)((s->keep + page - 1) / page * page);

	if ((off_t)off > from)
		from = (off_t)off;
	if (end > from && fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, from, end - from) != 0) {
		log_warn("segment of %zu bytes: its pages not released (fallocate: %s): they stay while a client "
			 "holds it",
			 s->size, strerror(errno));
		s->release = false;
	}
}

int segment_destroy_step(struct segment *s, size_t *done, size_t max)
{
	size_t len = step_len(s, *done, max);
	struct stat st;

	if (len > 0 && s->base != MAP_FAILED && s->base != NULL)
		munmap((char *)s->base + *done, len); /* also unlocks: the punch frees unlocked pages */
	if (len > 0 && s->fd >= 0 && s->release)
		punch(s, *done, (off_t)(*done + len));
	*done += len;
	if (*done < s->size)
		return 1;
	/* shm: a client may have grown it and filled what it added. */
	if (s->fd >= 0 && s->release && fstat(s->fd, &st) == 0 && st.st_size > (off_t)s->size)
		punch(s, s->size, st.st_size);
	if (s->fd >= 0)
		close(s->fd);
	*s = (struct segment){.fd = -1, .base = MAP_FAILED, .node = PINSHM_NODE_ANY};
	return 0;
}

void segment_destroy(struct segment *s)
{
	size_t done = 0;

	segment_destroy_step(s, &done, SIZE_MAX);
}

/* segment_access(): the header matches the record's geometry. */
static int header_matches(void *base, void *arg)
{
	const struct seg_geometry *want = arg;
	struct seg_geometry g;
	int rc = seg_geometry_read(base, want->size, &g);

	if (rc != 0)
		return rc;
	return memcmp(&g, want, sizeof(g)) == 0 ? 0 : -EBADMSG;
}

int segment_attach(int fd, const struct seg_geometry *g, int node, struct segment *s, char *why, size_t len)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	*s = (struct segment){.fd = fd, .node = node, .at_consumer = node == PINSHM_NODE_CONSUMER};
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, len, "not a shared memory file");
		return -EINVAL;
	}
	if ((uint64_t)st.st_size < g->size || (uint64_t)st.st_size > SIZE_MAX) {
		snprintf(why, len, "a file of %lld bytes for a geometry of %zu", (long long)st.st_size, g->size);
		return -EINVAL;
	}
	s->size = (size_t)st.st_size;
	s->sealed = seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW);
	s->backend = s->sealed ? PINSHM_BACKEND_MEMFD : PINSHM_BACKEND_SHM;
	/* hugetlbfs: its page size, the default huge page's or not (a client's
	 * memfd of MFD_HUGE_1GB).  Asked of the file system, not st_blksize,
	 * which other file systems set as they like. */
	struct statfs sf;
	s->hugepages = fstatfs(fd, &sf) == 0 && sf.f_type == HUGETLBFS_MAGIC && sf.f_bsize > 0;
	s->page = s->hugepages ? (size_t)sf.f_bsize : 0;
	s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (s->base == MAP_FAILED) {
		s->base = NULL;
		snprintf(why, len, "mmap: %s", strerror(errno));
		return -EINVAL;
	}
	int rc = segment_access(s, header_matches, (void *)g);
	if (rc != 0) {
		snprintf(why, len, "its header does not match the daemon's record (%s)", pinshm_strerror(rc));
		munmap(s->base, s->size);
		s->base = NULL;
		return rc;
	}
	return 0;
}

int segment_attach_pin(struct segment *s, size_t *locked, size_t max)
{
	uint32_t one = 1, zero = 0;

	if (*locked == 0)
		segment_access(s, set_unlocked_fn, &one);
	int rc = segment_lock_step(s, locked, max);
	if (rc <= 0)
		segment_access(s, set_unlocked_fn, &zero);
	return rc;
}

void segment_lock_abandon(struct segment *s, const char *why)
{
	uint32_t zero = 0;

	unlock_range(s->base, s->size);
	segment_access(s, set_unlocked_fn, &zero);
	snprintf(s->pin_error, sizeof(s->pin_error), "%s", why);
}
