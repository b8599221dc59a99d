/*
 * segment.h - the memory of a channel: created, sealed, mapped, pinned.
 *
 * Two backends behind one interface:
 *
 * - memfd (PINSHM_BACKEND_MEMFD): a memfd with MFD_ALLOW_SEALING (and
 *   MFD_HUGETLB for huge pages: sealable since Linux 4.16), sized, then
 *   sealed with F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, so that no
 *   holder of its descriptor can resize it and make a mapping fault;
 *   nothing appears under /dev/shm.
 * - POSIX shared memory (PINSHM_BACKEND_SHM): shm_open() of a unique name
 *   with O_EXCL, shm_unlink() at once (the name lives for a few system
 *   calls, nothing is left in /dev/shm whoever dies), then ftruncate().
 *   Any holder of its descriptor can shrink it: every mapping of it then
 *   faults (SIGBUS) beyond the new end, the daemon's too.  So the daemon
 *   touches such a segment only through segment_access(), which checks
 *   the size with fstat() and runs the access under a SIGBUS guard; a
 *   segment found shrunk is marked damaged and never touched again (it is
 *   still unmapped and closed as usual).  No huge pages on this backend.
 *
 * The daemon maps the segment, locks it (mlock populates it) and formats it.  Locking fails where RLIMIT_MEMLOCK forbids it (user
 * mode): the segment then stays unpinned, with a warning logged, and says
 * so (pinned false, pin_error).  The budget of pinned bytes is checked
 * before, by the caller (account.h).
 *
 * What the seals leave open: a holder may punch holes in the file
 * (fallocate), which zeroes pages of that channel and nothing else; the
 * data plane treats it as any other corruption of the channel.  The daemon
 * does the same to a channel it destroys (`release`): every page past the
 * endpoints goes, whoever still holds the descriptor or a mapping of it
 * (see segment_destroy()).  A punched huge page comes back only while a
 * free one is left: without, the next touch faults, and the daemon's
 * touches are guarded as the shm backend's (segment_access()).
 */
#ifndef PINSHMD_SEGMENT_H
#define PINSHMD_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinshm.h"

struct seg_geometry;

struct segment {
	int fd;        /* the memfd or shm object, close-on-exec; handed to clients */
	void *base;    /* the daemon's mapping */
	size_t size;   /* of the memfd and the mapping: what is pinned and charged */
	int node;      /* NUMA node preferred for its pages, PINSHM_NODE_ANY: none,
			* PINSHM_NODE_CONSUMER: not yet (at_consumer) */
	bool at_consumer; /* made near its consumer: placed at the first consumer's open */
	bool hugepages; /* hugetlbfs memfd */
	size_t page;   /* the page size of its file (its huge page), 0: the base page */
	bool pinned;   /* locked in RAM through the daemon's mapping */
	bool sealed;   /* resizing sealed */
	uint32_t backend; /* PINSHM_BACKEND_MEMFD or PINSHM_BACKEND_SHM */
	bool damaged;  /* shm: found shrunk by a client, no longer touched */
	bool unlocked; /* pinned, but unlocked for now (working-set pinning) */
	bool release;  /* destroyed for good: segment_destroy() punches its pages out, */
	size_t keep;   /* but for its first `keep` bytes (rounded up to a page) */
	char pin_error[96]; /* why not pinned, "" if pinned */
};

/* How a segment is made. */
struct segment_opts {
	int node;       /* a node from numa_resolve(), PINSHM_NODE_ANY or PINSHM_NODE_CONSUMER (later) */
	bool hugepages; /* MFD_HUGETLB: size rounded up to a huge page */
	bool shm;       /* the POSIX shared memory backend (not with hugepages) */
	bool shm_fallback; /* a memfd, or shm where this kernel cannot make a sealed memfd (`auto`,
			    * owner-only channels) */
	uint32_t pin_idle; /* working-set pinning (registry.h): seconds idle before it is unlocked,
			    * 0: always locked */
	bool lock_later; /* made and mapped, not locked: segment_lock_step() locks it (the pool) */
};

/**
 * The size of the memfd that holds @p size bytes made as @p o says
 * (rounded up to the huge page size for huge pages).
 * @return 0; -EINVAL: huge pages asked for where the kernel has none.
 */
int segment_backing_size(size_t size, const struct segment_opts *o, size_t *out);

/**
 * Make a segment of at least @p size bytes as @p o says, named @p name
 * (the memfd's name, for /proc): sealed memfd or shm object (o->shm, or
 * o->shm_fallback where memfd_create() or sealing is not supported:
 * ENOSYS, EINVAL; the environment variable PINSHMD_TEST_NO_MEMFD=1
 * pretends so, for the tests), mapped by the daemon,
 * placed on o->node (a node number) before any page is touched, then locked (which
 * populates it; unpinned with a warning where RLIMIT_MEMLOCK forbids it),
 * unless o->lock_later: then it is left unlocked and unpopulated for
 * segment_lock_step().
 * Its contents are zero: segment_format() makes it a channel.
 * @return 0; -EINVAL (huge pages not supported, or not sealable: a channel
 *         of huge pages would be unsealed, and is refused); -ENOMEM (for
 *         huge pages: too few free, see vm.nr_hugepages); or the -errno of
 *         memfd_create, ftruncate, fcntl, mmap or mbind.
 */
int segment_alloc(struct segment *s, size_t size, const struct segment_opts *o, const char *name);

/**
 * Lock the next @p max bytes of @p s, made with o->lock_later, from
 * @p *locked on (mlock2, which populates them), and advance @p *locked: a
 * large segment is locked in slices, between which the caller does other
 * work.  A step ends on a page of the file (@p max rounded up to its huge
 * page): no page is populated by two steps, and *locked counts whole
 * pages.  Of huge pages, mlock only populates them: hugetlb pages are
 * never swapped, and the kernel neither marks nor counts them locked (the
 * daemon's VmLck does not show them).  Once the last slice is locked, the
 * segment is pinned (s->pinned).
 * @return 1: more to lock; 0: the whole segment is locked; or the -errno
 *         of mlock2 (ENOMEM, EAGAIN, EPERM: RLIMIT_MEMLOCK in user mode):
 *         then nothing of it stays locked (the slices before are unlocked
 *         too) and pin_error says why: it stays mapped, unpinned.
 */
int segment_lock_step(struct segment *s, size_t *locked, size_t max);

/** Format @p s as a channel of geometry @p attr.  @return 0 or -EINVAL/-ENOSPC. */
int segment_format(struct segment *s, const pinshm_channel_attr_t *attr);

/**
 * segment_alloc() for a channel of geometry @p attr, then segment_format().
 * @return 0, or -EINVAL (bad @p attr), or as segment_alloc().
 */
int segment_create(struct segment *s, const pinshm_channel_attr_t *attr, const struct segment_opts *o,
		   const char *name);

/** What segment_access() runs on the daemon's mapping at @p base. */
typedef int segment_access_fn(void *base, void *arg);

/**
 * Run @p fn on the daemon's mapping of @p s.  A sealed memfd cannot be
 * resized: @p fn runs directly.  An shm segment can: its size is checked
 * with fstat() first, and @p fn runs with a SIGBUS guard (a handler that
 * siglongjmp()s back here when the fault is inside this mapping), so that
 * a client that shrinks it between the check and the access costs the
 * daemon nothing.  @p fn must therefore touch only the segment and its own
 * locals: no allocation, no lock, no log (it may be cut short anywhere).
 * @return what @p fn returns; -EBADMSG when the segment is (or turns out to
 *         be) shrunk or was found so before: it is marked damaged.
 */
int segment_access(struct segment *s, segment_access_fn *fn, void *arg);

/**
 * Working-set pinning, in slices: a pinned segment @p s is to be unlocked
 * for now (its pages may be swapped out): say so at once, in s->unlocked
 * and in its header (`unlocked`, for the clients), before any page is
 * unlocked; segment_unlock_step() then unlocks it.  It stays pinned for
 * the accounts.
 */
void segment_unlock_begin(struct segment *s);

/** Unlock the next @p max bytes of @p s from @p *done on (munlock, rounded
 *  up to a page of its file as segment_lock_step()), and advance @p *done.
 *  @return 1: more to unlock; 0: unlocked whole. */
int segment_unlock_step(struct segment *s, size_t *done, size_t max);

/**
 * Lock @p s again after segment_unlock_begin(), in slices: the next @p max
 * bytes from @p *locked on (mlock2, which faults them back in), as
 * segment_lock_step().  s->unlocked and the header's `unlocked` stay set
 * until the last slice is locked, which clears them.
 * @return 1: more to lock; 0: locked whole; -EBADMSG (a damaged segment:
 *         left alone); or the -errno of mlock2 (ENOMEM, EAGAIN:
 *         RLIMIT_MEMLOCK in user mode).  On failure nothing of it stays
 *         locked (@p *locked back to 0) and it stays unlocked.
 */
int segment_relock_step(struct segment *s, size_t *locked, size_t max);

/**
 * Unmap and close @p s.  Where s->release is set (a channel destroyed for
 * good, not a daemon that stops: channels outlive it), the pages of the
 * file from s->keep (rounded up to a page, or a huge page) to its end are
 * punched out between the two (fallocate PUNCH_HOLE|KEEP_SIZE, which the
 * seals allow; an shm object as far as it has grown), after the unmap,
 * which unlocks them: a process that still holds the descriptor or a
 * mapping keeps the size and the first pages only, reads zeros past them,
 * and a page it touches again is a fresh one, unlocked and charged to it
 * (of huge pages: one taken from the free huge pages, SIGBUS where none
 * is).  Otherwise processes that map it keep their mapping and its pages.
 */
void segment_destroy(struct segment *s);

/* Bytes a slice of segment_lock_step() or segment_destroy_step() takes by
 * default: about a millisecond of the loop's time. */
#define SEGMENT_SLICE_BYTES (2u * 1024u * 1024u)

/** The slice for @p s: SEGMENT_SLICE_BYTES rounded up to whole pages of
 *  its file (a mapping of huge pages is unmapped, and a hole punched in
 *  it, in whole huge pages only; one of 1 GiB pages, a page a slice). */
size_t segment_slice_bytes(const struct segment *s);

/**
 * segment_destroy() in slices: unmap the next @p max bytes of @p s from
 * @p *done on (rounded up to a page of its file, as segment_lock_step()),
 * and punch them out where s->release says so; advance @p *done.  The
 * slice that reaches the end closes the file.
 * @return 1: more to do; 0: destroyed (as segment_destroy()).
 */
int segment_destroy_step(struct segment *s, size_t *done, size_t max);

/**
 * Map the segment @p fd that the daemon did not make (a record of the
 * descriptor store, a client's hand-back) into @p s, of geometry @p g,
 * placed on @p node: a regular file at least g->size bytes large whose
 * header matches @p g.  Not locked (segment_attach_pin()).  @return 0 (s->fd is
 * @p fd), or -EINVAL, -EPROTO/-EBADMSG (its header) with @p why.
 */
int segment_attach(int fd, const struct seg_geometry *g, int node, struct segment *s, char *why, size_t len);

/**
 * Lock @p s, attached, in RAM, as segment_alloc() would have: the next
 * @p max bytes from *@p locked on, as segment_lock_step() (SIZE_MAX: all
 * at once; 0: none, the header's note only).  Whatever a previous daemon
 * did, it is locked again (or not pinned at all, pin_error set), never
 * left unlocked for want of use.  The header's `unlocked` says 1 from the
 * first call (*@p locked 0) until the last slice, or the failure, clears
 * it: a client that wants the segment locked asks (a RELOCK, which waits).
 * @return as segment_lock_step().
 */
int segment_attach_pin(struct segment *s, size_t *locked, size_t max);

/** Give up locking @p s in slices: what was locked is unlocked, and it
 *  stays unpinned for @p why (pin_error); the header's `unlocked` cleared. */
void segment_lock_abandon(struct segment *s, const char *why);

#endif /* PINSHMD_SEGMENT_H */
