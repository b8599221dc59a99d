/*
 * coll.h - collectives: what coll.c (the decision and the shared area of a
 * communicator) gives coll_ops.c (the calls).
 *
 * The area of a communicator of n ranks is one pinshmd queue channel of n
 * producer lanes that nobody sends on: its pages are pinned and shared,
 * and the ring of lane r (capacity bytes) is rank r's slot:
 *
 *   ring + 0    one line left zero (where a record's commit word would be:
 *               anything that scans the lane sees an empty ring)
 *   ring + 64   rank r's flag line: arrive, done (struct coll_flags),
 *               then two small slots of COLL_SMALL bytes: data of at most
 *               that size posted at step s may lie in slot s & 1 instead
 *               of the half (coll_small()), under the same rules, so that
 *               a reader takes it with the flag's line
 *   ring + 128  rank r's mark line: two words, mark s & 1 (coll_mark()),
 *               which nothing but marks ever reaches (below)
 *   ring + 192  two halves of `half` bytes each: the data rank r posts at
 *               step s lies in half s & 1
 *
 * Steps.  Every call carried on the communicator runs as one or more steps,
 * numbered 1, 2, ... in the same order at every rank (MPI orders the
 * collective calls on a communicator, and how many steps a call takes
 * depends only on what must match at every rank, or on what every rank
 * reads alike at the call's first step: the v variants' lengths, in
 * coll_vops.c, a Bcast's root length and the lengths of Gather, Scatter,
 * Allgather and Alltoall, in coll_ops.c, an Ibcast's root length and an
 * Iallgather's lengths, in coll_nb.c), so the step number is the
 * communicator's sequence: data
 * of one call never meets another's.  At step
 * s a rank may write its half s & 1 once every rank's `done` >= s - 2 (no
 * one reads that half any more), then stores arrive = s (release); a rank
 * reads rank r's half s & 1 once r's arrive >= s (acquire), and stores
 * done = s (release) once it no longer needs any data of step s.  Every
 * rank stores done = s at every step, whatever its part, until one of its
 * waits fails (a member died): from then on it writes nothing into the
 * area (its slot is its own memory, coll.c slot_detach()).
 *
 * Marks.  A rank that writes at most 128 KiB of its half at step s (a
 * Bcast's root, a rank's chunk of a Reduce: coll_ops.c) may store, after
 * each part, (s << 20) | bytes written so far into its mark s & 1
 * (release), so that a reader copies or folds behind it instead of after
 * its post; a reader reads the mark (acquire) and goes no further than it
 * says, nor past the step's piece.  A mark whose step is not s (one of
 * step s - 2, or 0) says nothing is written.
 *
 * The flags are shared memory written by the other ranks: they are only
 * compared with step numbers (a wrong one makes a rank wait or read data
 * too early, never reach outside the area); sizes and offsets come from
 * this process's own geometry (the v variants' lengths, read from the
 * area, bound only how much is copied: never past a piece or the room).
 */
#ifndef PINSHM_MPI_COLL_H
#define PINSHM_MPI_COLL_H

#include <assert.h>
#include <stdatomic.h>
#include <string.h>

#include "plugin.h"

struct coll_flags {
	_Atomic uint64_t arrive; /* the last step whose data this rank posted */
	_Atomic uint64_t done;   /* the last step this rank finished */
};

enum coll_call {
	CALL_BARRIER,
	CALL_BCAST,
	CALL_REDUCE,
	CALL_ALLREDUCE,
	CALL_GATHER,
	CALL_SCATTER,
	CALL_ALLGATHER,
	CALL_ALLTOALL,
	CALL_GATHERV,
	CALL_SCATTERV,
	CALL_ALLGATHERV,
	CALL_ALLTOALLV,
	CALL_REDUCE_SCATTER_BLOCK,
	CALL_REDUCE_SCATTER,
	CALL_SCAN,
	CALL_EXSCAN,
	CALL_IBARRIER, /* the nonblocking ones (coll_nb.c) */
	CALL_IBCAST,
	CALL_IREDUCE,
	CALL_IALLREDUCE,
	CALL_IALLGATHER,
	CALL_COUNT
};

struct pm_coll {
	bool on;                   /* agreed by every rank: carried through the area */
	pinshm_channel_t *ch;      /* the area's channel, or NULL (one rank, or off) */
	int rank, size;
	uint8_t **half;            /* rank -> its two halves */
	struct coll_flags **flags; /* rank -> its flag line */
	size_t half_bytes;         /* bytes of one half */
	uint64_t step;             /* steps begun */
	uint64_t known_done;       /* every rank's done was seen >= this (coll_wait_free()) */
	void *scratch;             /* half_bytes of this rank's own, for reductions */
	struct coll_live *live;    /* the members' liveness (coll.c), or NULL */
	struct pm_hier *hier;      /* spanning nodes: the agreed layout (coll_hier.c), or NULL */
	uint64_t cma_min;          /* agreed: blocks of this many bytes up are read straight from
				      the other ranks' memory (coll_read()); 0: never */
	int *pid;                  /* rank -> its process, where cma_min is set */
	bool lead_first;           /* ranks of the node outnumber its cores: a Barrier's rank 0
				      leaves first (coll_barrier()); need not agree */
	uint64_t stream_min;       /* pieces of this many bytes up go into the area with streaming
				      stores (coll_copy_in()); 0: never; need not agree */
	uint8_t *detached;         /* after a failed wait: this rank's slot, of its own (coll.c) */
	uint64_t key;              /* the name the area was made under (coll.c) */
	struct coll_agreeing *agreeing; /* the agreement under way (coll.c), or NULL: decided */
	MPI_Comm lib_comm;         /* after an agreement that a nonblocking call began: where the
				      calls that waited for it go when not carried (coll.c) */
};

/* The area of @p comm if its collectives are carried (deciding at the
 * first call, collectively over @p comm), else NULL: the caller passes the
 * call to the MPI library.  Every rank of @p comm gets the same answer. */
struct pm_coll *pm_coll_for(MPI_Comm comm);

/*
 * Nonblocking collectives (coll_nb.c).  A call reserves its steps when it
 * is made (co->step moves past them then, as a blocking call's would), so
 * calls on a communicator take the same steps at every rank in whatever
 * mix of blocking and nonblocking calls; an Ibcast or Iallgather whose
 * lengths, read at its first step, take other steps than this rank's own
 * count moves its end and the calls reserved after it then.  This rank runs the steps of a
 * communicator strictly in order, one at a time: step s begins only once
 * its own done = s - 1.  That keeps arrive and done meaning "every step up
 * to s" and the two halves' rule (write half s & 1 once every done >=
 * s - 2) sound, with one step's data and the previous one's in the halves
 * at most.  So a blocking call, which takes the next steps at once, first
 * lets every pending nonblocking call on the communicator finish here
 * (coll_nb_drain(): own done reaches the steps reserved, progressing them
 * and everything else meanwhile); the other ranks reach those steps
 * without it (the progress engine, or their own blocking call).
 */
/* The area of @p comm for a nonblocking call, or NULL where the call goes
 * to the MPI library; never waits.  *@p agreeing: the communicator's
 * agreement, which its first nonblocking call starts, is under way (the
 * area is not usable yet: the call waits for it, coll_nb.c).  Every rank
 * gets the same answer once the agreement ends. */
struct pm_coll *pm_coll_nb_area(MPI_Comm comm, bool *agreeing);
/* Whether @p co's agreement has ended (@p wait: until it has); its end
 * decides co->on. */
bool coll_agree_test(struct pm_coll *co, bool wait);
/* @p co's agreement ended: the nonblocking calls that waited for it start,
 * in the order they were made (coll_nb.c). */
void coll_nb_agreed(struct pm_coll *co);
/* Until this rank has finished every step reserved on @p co. */
void coll_nb_drain(struct pm_coll *co);

static inline uint8_t *coll_half(const struct pm_coll *co, int r, uint64_t s)
{
	return co->half[r] + (s & 1) * co->half_bytes;
}

#define COLL_SMALL 24u /* bytes of a small slot */
static_assert(sizeof(struct coll_flags) + 2 * COLL_SMALL <= 64, "the small slots fit the flag line");

static inline uint8_t *coll_small(const struct pm_coll *co, int r, uint64_t s)
{
	return (uint8_t *)(void *)co->flags[r] + sizeof(struct coll_flags) + (s & 1) * COLL_SMALL;
}

static inline _Atomic uint64_t *coll_mark(const struct pm_coll *co, int r, uint64_t s)
{
	return (_Atomic uint64_t *)(void *)((uint8_t *)(void *)co->flags[r] + 64) + (s & 1);
}

/* @p n bytes from @p src to @p dst in this rank's own half with streaming
 * stores (coll_copy.c), ordered before any later release store of this
 * thread (its post, its marks), as memcpy's are. */
void coll_stream_in(void *dst, const void *src, size_t n);

static inline void coll_copy_in(void *dst, const void *src, size_t n, bool stream)
{
	if (stream)
		coll_stream_in(dst, src, n);
	else
		memcpy(dst, src, n);
}

/* Whether a step that writes @p bytes into this rank's half streams them. */
static inline bool coll_streams(const struct pm_coll *co, uint64_t bytes)
{
	return co->stream_min && bytes >= co->stream_min;
}

/* Looks at a flag, a pause between two, before each pass over the rest of
 * the plugin, in a wait (coll.c) or MPI_Wait on a nonblocking call
 * (coll_nb.c): 32 measured faster than 8, 64 and 128 (PERFORMANCE.md,
 * "The collective wait's looks"); fewer where ranks outnumber cores (no
 * spin), whose waits give the core up after each pass. */
static inline unsigned coll_looks(void)
{
	return pm.cfg.spin_ns ? 32u : 8u;
}

/* Every rank's done was seen >= @p s: coll_wait_free() need not look
 * before step s + 2 (a rank posts s only once it finished s - 1, so every
 * arrive >= s shows every done >= s - 1). */
static inline void coll_seen_done(struct pm_coll *co, uint64_t s)
{
	if (co->known_done < s)
		co->known_done = s;
}

/* A spinning look's pause. */
static inline void coll_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* The protocol's steps (above).  A wait that finds a member of the
 * communicator dead (its process left the area without closing it, seen by
 * pinshmd) says so on stderr; that wait and every later one on the area
 * return at once and coll_error() says MPI_ERR_OTHER: the call returns
 * that error through the communicator's error handler (coll_result(), by
 * default the job aborts), its data undefined. */
/* Before writing at step s; at once where an earlier wait showed it: a
 * rank posts step s only once it finished step s - 1, so every rank's
 * arrive >= s (coll_wait_all()) means every done >= s - 1. */
void coll_wait_free(struct pm_coll *co, uint64_t s);
void coll_post(struct pm_coll *co, uint64_t s);        /* arrive = s */
void coll_wait_arrive(struct pm_coll *co, int r, uint64_t s);
void coll_wait_all(struct pm_coll *co, uint64_t s);    /* every rank's arrive >= s */
void coll_finish(struct pm_coll *co, uint64_t s);      /* done = s */
void coll_wait_done(struct pm_coll *co, uint64_t s);   /* every rank's done >= s */
/* Rank 0's done >= s, where rank 0 stores it only once every rank's
 * arrive >= s (a release: every done >= s - 1 then). */
void coll_wait_release(struct pm_coll *co, uint64_t s);
/* @p n bytes at @p addr in rank @p r's memory to @p dst (process_vm_readv:
 * only where co->cma_min is set).  @return MPI_SUCCESS, or MPI_ERR_OTHER
 * (said on stderr) where the kernel did not copy it all. */
int coll_read(struct pm_coll *co, int r, void *dst, uint64_t addr, size_t n);
int coll_error(const struct pm_coll *co);              /* MPI_SUCCESS or the error a wait found */
/* What a blocking call that ran steps returns at its end: coll_error(),
 * passed to the error handler (the area's error communicator: the node
 * communicator of a hierarchical call keeps it for the call's end).  Once
 * a call: the waits never report. */
int coll_call_error(const struct pm_coll *co);
/* For a caller that polls the flags of ranks [@p from, @p to) at step @p s
 * itself (coll_nb.c), after a poll that found them short: whether it must
 * give up, because a wait failed before or (every so many calls, counted
 * in *@p passes) a member died: said on stderr and kept (coll_error()),
 * but not passed to the error handler, which the call's completion (its
 * MPI_Wait or MPI_Test) calls. */
bool coll_poll_failed(struct pm_coll *co, unsigned *passes, int from, int to, bool done, uint64_t s);

/* What a call that ran steps returns: the error a wait found (reported
 * through the error handler, coll_call_error()), else @p rc through it. */
static inline int coll_result(const struct pm_coll *co, MPI_Comm comm, int rc)
{
	int e = coll_call_error(co);
	return e != MPI_SUCCESS ? e : pm_comm_error(comm, rc);
}

/* The area of a communicator that no pm_comm entry names (coll_hier.c's
 * node communicators): as pm_coll_for() agrees on one at the first call,
 * collective over @p comm; @p local: member -> its index in the node,
 * @p errcomm: whose error handler its calls' errors go to.  Never NULL (out of
 * memory ends the job); its `on` says whether it is carried. */
struct pm_coll *coll_area_agree(MPI_Comm comm, int rank, int size, const int *local, MPI_Comm errcomm);
void coll_area_free(struct pm_coll *co);
bool coll_wanted(void); /* PINSHM_MPI_COLL is not 0 here */

/*
 * Communicators that span nodes (coll_hier.c).  pm_hier_for() gives the
 * layout agreed at the communicator's first collective call (collective
 * over it, at every rank), or NULL where the call goes to the MPI library
 * whole: the communicator does not span nodes, or some node does not carry
 * (the plugin or its collectives off there, an area not opened).
 */
struct pm_hier;
struct pm_hier *pm_hier_for(MPI_Comm comm);
struct pm_hier *hier_make(struct pm_comm *c); /* the agreement (NULL: not carried) */
void hier_free(struct pm_hier *h);
/* The calls, hierarchically: MPI_SUCCESS or an error, or -1 where the
 * call is not carried so (the caller's own path then takes it, the same
 * at every rank).  @p root < 0: Allreduce. */
int hier_barrier(MPI_Comm comm);
int hier_bcast(void *buffer, int count, MPI_Datatype type, int root, MPI_Comm comm);
int hier_reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
		MPI_Comm comm);
/* Gather to @p root, or (@p all) Allgather. */
int hier_gather(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype,
		int root, bool all, MPI_Comm comm);

/* Scatter (@p scount items a rank) or (@p v) Scatterv. */
int hier_scatter(const void *sendbuf, bool v, const int *scounts, const int *sdispls, int scount,
		 MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype, int root, MPI_Comm comm);
/* Gatherv to @p root, or (@p root < 0) Allgatherv. */
int hier_gatherv(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, const int *rcounts,
		 const int *rdispls, MPI_Datatype rtype, int root, MPI_Comm comm);
/* Reduce_scatter (@p counts) or Reduce_scatter_block (@p counts NULL,
 * @p block each), counted as @p call. */
int hier_reduce_scatter(const void *sendbuf, void *recvbuf, const int *counts, int block, MPI_Datatype type,
			MPI_Op op, MPI_Comm comm, enum coll_call call);
/* Scan or (@p ex) Exscan: only where each node is a block of ranks. */
int hier_scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, bool ex, MPI_Comm comm);
/* Alltoall, Alltoallv (coll_hier_a2a.c). */
int hier_alltoall(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount,
		  MPI_Datatype rtype, MPI_Comm comm);
int hier_alltoallv(const void *sendbuf, const int *scounts, const int *sdispls, MPI_Datatype stype, void *recvbuf,
		   const int *rcounts, const int *rdispls, MPI_Datatype rtype, MPI_Comm comm);

/* Statistics: a call of @p call carried (@p pinshm) or passed on. */
void coll_count(enum coll_call call, bool pinshm, uint64_t bytes);

#endif /* PINSHM_MPI_COLL_H */
