/*
 * coll.c - collectives: each communicator's decision, its shared area,
 * the steps of the protocol (coll.h), statistics.
 *
 * Which calls are carried.  A communicator's collectives go through pinshm
 * when the plugin carries the communicator (an intracommunicator it saw
 * created, below MPI_THREAD_MULTIPLE), all its ranks are on this (pretend)
 * node, and at its first collective call every rank agreed: collectives
 * are on at every rank (PINSHM_MPI_COLL is not 0) and every rank opened the
 * area.  That agreement is an allgather over the communicator (below), so
 * every rank takes the same path for every later call.  The rest is consistent
 * without talking: a communicator is carried at all its ranks or none
 * (every rank of a node carries or none does; one that spans nodes is
 * mixed at every rank), and what a call then does depends only on its
 * arguments that MPI requires to match.  The area lives until the
 * communicator's entry goes (MPI_Comm_free, MPI_Finalize).  A communicator
 * that spans nodes has no area of its own: where every node of the job
 * carries (pm.all_active), its first blocking collective call agrees on a
 * node layout instead (coll_hier.c), which its later calls use, the
 * nonblocking ones too (coll_nb.c); MPI_COMM_WORLD's is agreed at
 * MPI_Init (pm_coll_world_layout()).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "channel.h" /* the area's mapping: base and geometry of a handle */
#include "coll.h"

#define SLOT_DEFAULT (1024u * 1024) /* ring bytes per rank, halved to fit the bound */
#define SLOT_MIN (8u * 1024)
#define AREA_DEFAULT (64ull << 20)
#define CMA_DEFAULT 0 /* PINSHM_MPI_COLL_CMA: off (a copy through the area measured faster here) */
#define STREAM_DEFAULT 0 /* PINSHM_MPI_COLL_STREAM: off (PERFORMANCE.md, "Streaming stores") */
#define SLOT_HEAD 192u /* the zero line, the flag line, the mark line */
#define KEPT_DEFAULT 4 /* PINSHM_MPI_COLL_KEEP */
#define KEPT_MAX 64

static bool coll_enabled = true;
static uint64_t area_max = AREA_DEFAULT;
static uint64_t cma_min = CMA_DEFAULT;
static uint64_t stream_min = STREAM_DEFAULT;
static uint64_t keep_max; /* PINSHM_MPI_COLL_KEEP: areas of freed communicators kept (below) */

static const char *const call_names[CALL_COUNT] = {
	"barrier", "bcast", "reduce", "allreduce", "gather", "scatter", "allgather", "alltoall",
	"gatherv", "scatterv", "allgatherv", "alltoallv", "reduce_scatter_block", "reduce_scatter", "scan", "exscan",
	"ibarrier", "ibcast", "ireduce", "iallreduce", "iallgather"};
static struct {
	uint64_t pinshm_calls, pinshm_bytes, mpi_calls;
} counts[CALL_COUNT];
static uint64_t areas_made, areas_taken; /* areas joined, kept ones taken (below) */

void pm_coll_config(void)
{
	const char *v = getenv("PINSHM_MPI_COLL");
	coll_enabled = !(v && strcmp(v, "0") == 0);
	area_max = pm_env_size("PINSHM_MPI_COLL_AREA", AREA_DEFAULT, 2 * SLOT_MIN, UINT64_MAX);
	cma_min = pm_env_size("PINSHM_MPI_COLL_CMA", CMA_DEFAULT, 0, INT64_MAX);
	stream_min = pm_env_size("PINSHM_MPI_COLL_STREAM", STREAM_DEFAULT, 0, INT64_MAX);
	keep_max = pm_env_size("PINSHM_MPI_COLL_KEEP", KEPT_DEFAULT, 0, KEPT_MAX);
	if (pm.cfg.cma_set && pm.cfg.cma == 0) /* PINSHM_MPI_CMA=0: never copied so */
		cma_min = 0;
}

void coll_count(enum coll_call call, bool pinshm, uint64_t bytes)
{
	if (pm.multiple || call >= CALL_COUNT)
		return;
	if (pinshm) {
		counts[call].pinshm_calls++;
		counts[call].pinshm_bytes += bytes;
	} else {
		counts[call].mpi_calls++;
	}
}

void pm_coll_print_stats(void)
{
	fprintf(stderr, "pinshm-mpi coll areas: rank=%d joined=%" PRIu64 " kept_taken=%" PRIu64 "\n", pm.world_rank,
		areas_made, areas_taken);
	for (int k = 0; k < CALL_COUNT; k++)
		fprintf(stderr,
			"pinshm-mpi coll stats: rank=%d call=%s pinshm_calls=%" PRIu64 " pinshm_bytes=%" PRIu64
			" mpi_calls=%" PRIu64 "\n",
			pm.world_rank, call_names[k], counts[k].pinshm_calls, counts[k].pinshm_bytes,
			counts[k].mpi_calls);
}

/* ---- the area ------------------------------------------------------------ */

/* Ring bytes per rank: SLOT_DEFAULT, halved until the @p n slots fit in
 * PINSHM_MPI_COLL_AREA, never below SLOT_MIN. */
static uint64_t slot_bytes(int n)
{
	uint64_t slot = SLOT_DEFAULT;
	while (slot > SLOT_MIN && slot * (uint64_t)n > area_max)
		slot /= 2;
	return slot;
}

static void area_name(char *buf, size_t size, uint64_t token)
{
	char rest[PINSHM_NAME_MAX + 1];
	snprintf(rest, sizeof(rest), "mpic.%016" PRIx64, token);
	if (pinshm_name_own(buf, size, rest) != 0)
		buf[0] = '\0';
}

/* Open the area named by @p token and find every rank's slot.
 * @return 0 or a negative errno. */
static int area_open(struct pm_coll *co, uint64_t token)
{
	char name[PINSHM_NAME_MAX + 1];
	area_name(name, sizeof(name), token);
	int rc = pinshm_open(pm.client, name, PINSHM_PRODUCER, &co->ch);
	if (rc < 0) {
		co->ch = NULL;
		return rc;
	}
	const struct seg_geometry *g = &co->ch->g;
	if (g->max_producers < (uint32_t)co->size || g->capacity < 4 * SLOT_HEAD)
		return -EBADMSG;
	co->half = calloc((size_t)co->size, sizeof(*co->half));
	co->flags = calloc((size_t)co->size, sizeof(*co->flags));
	co->half_bytes = (size_t)((g->capacity - SLOT_HEAD) / 2) & ~(size_t)63;
	co->stream_min = stream_min;
	co->scratch = aligned_alloc(64, co->half_bytes);
	if (!co->half || !co->flags || !co->scratch)
		return -ENOMEM;
	for (int r = 0; r < co->size; r++) {
		uint8_t *ring = seg_ring(g, co->ch->base, (unsigned)r);
		co->flags[r] = (struct coll_flags *)(void *)(ring + 64);
		co->half[r] = ring + SLOT_HEAD;
	}
	return 0;
}

/* ---- liveness ----------------------------------------------------------- */

/*
 * Each member's process holds one producer endpoint of the area; pinshmd
 * marks it dead when that process goes without closing it.  The endpoint
 * of member r is the active one whose pid is r's (found once every member
 * opened the area), with its generation then: it is dead when pinshmd
 * marked it so, or it was taken again (the generation moved).  Where no
 * endpoint shows the pid (another pid namespace), the process itself is
 * asked (kill 0).  A member that closed the area left after its last
 * call: not dead.  Endpoints are shared memory: a wrong value can only
 * make a wait fail.
 */
struct coll_live {
	MPI_Comm comm;  /* for its error handler */
	int error;      /* MPI_SUCCESS, or what a wait found */
	unsigned *ep;   /* member -> its endpoint, or UINT_MAX: none found */
	uint32_t *gen;  /* member -> that endpoint's generation when found */
	int *pid;       /* member -> its process */
};

static void live_free(struct coll_live *lv)
{
	if (!lv)
		return;
	free(lv->ep);
	free(lv->gen);
	free(lv->pid);
	free(lv);
}

/* Find every member's endpoint (after all opened the area); @p local:
 * member -> its index in the node. */
static struct coll_live *live_find(const struct pm_coll *co, const int *local, MPI_Comm errcomm)
{
	struct coll_live *lv = calloc(1, sizeof(*lv));
	if (!lv || !(lv->ep = calloc((size_t)co->size, sizeof(unsigned))) ||
	    !(lv->gen = calloc((size_t)co->size, sizeof(uint32_t))) ||
	    !(lv->pid = calloc((size_t)co->size, sizeof(int)))) {
		live_free(lv);
		return NULL;
	}
	lv->comm = errcomm;
	const struct seg_geometry *g = &co->ch->g;
	for (int r = 0; r < co->size; r++) {
		int node = local[r];
		lv->pid[r] = node >= 0 && node < pm.nlocal ? pm.local_pid[node] : 0;
		lv->ep[r] = UINT_MAX;
		for (unsigned e = 0; e < g->max_producers && lv->pid[r] > 0; e++) {
			struct endpoint *ep = seg_endpoint(g, co->ch->base, e);
			if (atomic_load_explicit(&ep->state, memory_order_acquire) == EP_ACTIVE &&
			    atomic_load_explicit(&ep->pid, memory_order_relaxed) == (uint32_t)lv->pid[r]) {
				lv->ep[r] = e;
				lv->gen[r] = atomic_load_explicit(&ep->generation, memory_order_relaxed);
				break;
			}
		}
	}
	return lv;
}

/* Whether member @p r is known to be dead. */
static bool live_gone(const struct pm_coll *co, int r)
{
	const struct coll_live *lv = co->live;
	if (lv->ep[r] != UINT_MAX) {
		struct endpoint *ep = seg_endpoint(&co->ch->g, co->ch->base, lv->ep[r]);
		uint32_t state = atomic_load_explicit(&ep->state, memory_order_acquire);
		return state == EP_DEAD || state == EP_FREE ||
		       (state == EP_ACTIVE && atomic_load_explicit(&ep->generation, memory_order_relaxed) != lv->gen[r]);
	}
	return lv->pid[r] > 0 && kill(lv->pid[r], 0) != 0 && errno == ESRCH;
}

int coll_error(const struct pm_coll *co)
{
	return co->live ? co->live->error : MPI_SUCCESS;
}

int coll_call_error(const struct pm_coll *co)
{
	const struct coll_live *lv = co->live;
	if (!lv || lv->error == MPI_SUCCESS)
		return MPI_SUCCESS;
	int e = lv->error; /* the handler may free the communicator, and the area with it */
	PMPI_Comm_call_errhandler(lv->comm, e);
	return e;
}

static void area_close(struct pm_coll *co)
{
	if (co->ch)
		pinshm_channel_close(co->ch);
	co->ch = NULL;
	free(co->half);
	free(co->flags);
	free(co->detached);
	co->detached = NULL;
	free(co->scratch);
	free(co->pid);
	co->pid = NULL;
	co->cma_min = 0;
	live_free(co->live);
	co->live = NULL;
	co->half = NULL;
	co->flags = NULL;
	co->scratch = NULL;
}

/* ---- single copy -------------------------------------------------------- */

/* What a rank reads in every other one's memory when the area is agreed:
 * whether the kernel lets it (ptrace rules). */
static const uint64_t cma_probe = 0x636f6c6c2d636d61ull;

int coll_read(struct pm_coll *co, int r, void *dst, uint64_t addr, size_t n)
{
	size_t done = 0;
	while (done < n) {
		struct iovec local = {(char *)dst + done, n - done};
		struct iovec remote = {(void *)(uintptr_t)(addr + done), n - done};
		ssize_t got = process_vm_readv((pid_t)co->pid[r], &local, 1, &remote, 1, 0);
		if (got <= 0) {
			fprintf(stderr,
				"pinshm-mpi: rank %d (world rank %d): the data of rank %d (process %d) could not be "
				"read: %s\n",
				co->rank, pm.world_rank, r, co->pid[r], got < 0 ? strerror(errno) : "nothing copied");
			return MPI_ERR_OTHER;
		}
		done += (size_t)got;
	}
	return MPI_SUCCESS;
}

/* Each rank's part of the agreement: whether it joined, its probe's
 * address, its single-copy threshold, its area's name, the area's last
 * step (a kept area, below: the steps go on from there). */
#define AGREE_WORDS 5

/* Whether blocks go straight from memory to memory on this area, agreed by
 * every rank: only where every rank asks for it (@p every: rank r's
 * threshold at every[AGREE_WORDS r + 2], its probe's address at
 * every[AGREE_WORDS r + 1]),
 * then (collective over @p comm) each reads every other one's probe, and
 * the largest threshold is taken, or none where a rank cannot read. */
static void cma_agree(struct pm_coll *co, const int *local, const int64_t *every, MPI_Comm comm)
{
	int64_t most = 0;
	for (int r = 0; r < co->size; r++) {
		if (every[AGREE_WORDS * r + 2] <= 0)
			return; /* the same at every rank: no one asks more */
		most = every[AGREE_WORDS * r + 2] > most ? every[AGREE_WORDS * r + 2] : most;
	}
	int can = co->size > 1 && (co->pid = calloc((size_t)co->size, sizeof(int))) != NULL;
	for (int r = 0; r < co->size && can; r++) {
		int node = local[r];
		uint64_t seen = 0;
		struct iovec l = {&seen, sizeof(seen)}, rem = {(void *)(uintptr_t)every[AGREE_WORDS * r + 1], sizeof(seen)};
		can = node >= 0 && node < pm.nlocal;
		if (can)
			co->pid[r] = pm.local_pid[node];
		if (can && r != co->rank)
			can = process_vm_readv((pid_t)co->pid[r], &l, 1, &rem, 1, 0) == (ssize_t)sizeof(seen) &&
			      seen == cma_probe;
	}
	int agreed = 0;
	PMPI_Allreduce(&can, &agreed, 1, MPI_INT, MPI_MIN, comm);
	co->cma_min = agreed ? (uint64_t)most : 0;
	if (!co->cma_min) {
		free(co->pid);
		co->pid = NULL;
	}
}

/*
 * The agreement.  The area has a name that every rank knows: made from the
 * node's token, the communicator's context and its rank 0's process (the
 * communicators that share a context share no process), or, where some
 * ranks cannot know those (a communicator with members of another job, a
 * node communicator of coll_hier.c), a random token that rank 0 broadcasts
 * first.  Every rank joins the area under that name (creates it, or opens
 * it where another rank created it first), then every rank's result goes
 * to every rank in one allgather: the area is on where every rank joined.
 * The rank that created the name removes it once that allgather is done
 * (every rank had joined before it gave its result).
 *
 * A communicator's first collective call agrees.  A blocking one waits for
 * the allgather; a nonblocking one starts it (MPI_Iallgather) and a
 * duplicate of the communicator (MPI_Comm_idup), and returns: its call,
 * and every later nonblocking one on the communicator, waits in coll_nb.c
 * until the engine sees both end (coll_agree_test()); a blocking one that
 * would use the area waits for them.  The calls that waited and are not
 * carried then go to the library on the duplicate (co->lib_comm): by then
 * the ranks may have made other collective calls of the library on the
 * communicator, in one order at every rank, but each rank at its own time
 * relative to those.  The allgather and the duplicate are the first
 * collective calls of the communicator's sequence at every rank.
 */
struct coll_agreeing {
	MPI_Request req[2];   /* the allgather, the duplicate (a nonblocking agreement) */
	MPI_Comm lib;         /* the duplicate */
	int64_t mine[AGREE_WORDS];
	int64_t *every;       /* the same of every rank */
	bool created;         /* this rank created the name */
	bool testing;         /* coll_agree_test() is in the library (whose progress may call it) */
	const int *local;     /* member -> its index in the node */
	MPI_Comm comm, errcomm;
};

/* The name of @p c's area that every member computes alike, or 0 where
 * some member cannot (another job's members: their node's token is not
 * this one). */
static uint64_t area_key(const struct pm_comm *c)
{
	if (c->foreign || c->mixed || c->local[0] < 0 || c->local[0] >= pm.nlocal)
		return 0;
	uint64_t pid = (uint64_t)pm.local_pid[c->local[0]];
	return pm_splitmix64(pm.node_token ^ pm_splitmix64(c->ctx ^ pm_splitmix64(pid))) | 1;
}

#define JOIN_LOOKS 100000u /* opens of a name that another rank is creating, 100 us apart */

/* Create the area named by @p key, or open it where another rank did
 * first: pinshmd says the name exists while that rank's create is under
 * way (its pages being locked) but opens it only once made, so an open
 * that finds no channel looks again, and creates it where the other
 * create failed.  This waits for pinshmd only, never for another rank.
 * @return 0 or a negative errno. */
static int area_join(struct pm_coll *co, uint64_t key, bool *created)
{
	pinshm_channel_attr_t attr;
	pinshm_channel_attr_init(&attr);
	attr.kind = PINSHM_QUEUE;
	attr.capacity = slot_bytes(co->size);
	attr.max_producers = (uint32_t)co->size;
	attr.max_consumers = 1;
	char name[PINSHM_NAME_MAX + 1];
	area_name(name, sizeof(name), key);
	int rc;
	areas_made++;
	for (unsigned looks = 0;; looks++) {
		rc = pinshm_create(pm.client, name, &attr, 0600, 0);
		if (rc != -EEXIST)
			break;
		rc = area_open(co, key);
		if (rc != -ENOENT || looks == JOIN_LOOKS)
			return rc;
		struct timespec nap = {0, 100000};
		nanosleep(&nap, NULL);
	}
	*created = rc == 0;
	/* Rank 0 says so, once a process: every communicator may fail alike,
	 * and every rank's create then fails alike too. */
	static bool warned;
	if (rc < 0 && co->rank == 0 && !warned) {
		warned = true;
		fprintf(stderr,
			"pinshm-mpi: warning: rank %d: the collective area of a communicator of %d ranks "
			"(%" PRIu64 " bytes) could not be made: %s (%s); its collectives go to the MPI library\n",
			pm.world_rank, co->size, (uint64_t)attr.capacity * (uint64_t)co->size, pinshm_strerror(rc),
			*pinshm_client_error(pm.client) ? pinshm_client_error(pm.client) : "no more said");
	}
	return rc < 0 ? rc : area_open(co, key);
}

static struct pm_coll *coll_new(int rank, int size)
{
	struct pm_coll *co = calloc(1, sizeof(*co));
	if (!co) {
		fprintf(stderr, "pinshm-mpi: out of memory\n");
		PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
		return NULL;
	}
	co->rank = rank;
	co->size = size;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	co->lead_first = cores > 0 && pm.nlocal > cores;
	co->lib_comm = MPI_COMM_NULL;
	return co;
}

/* This rank's part of @p co's agreement (more than one rank): join the
 * area named by @p key, make the allgather's buffers. */
static struct coll_agreeing *agree_begin(struct pm_coll *co, uint64_t key, const int *local, MPI_Comm comm,
					 MPI_Comm errcomm)
{
	struct coll_agreeing *a = calloc(1, sizeof(*a));
	if (a)
		a->every = calloc((size_t)co->size, sizeof(a->mine));
	if (!a || !a->every) {
		fprintf(stderr, "pinshm-mpi: out of memory\n");
		PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
		return NULL;
	}
	a->local = local;
	a->comm = comm;
	a->errcomm = errcomm;
	a->req[0] = a->req[1] = MPI_REQUEST_NULL;
	a->lib = MPI_COMM_NULL;
	bool kept = co->ch != NULL; /* a kept area (below): joined already */
	if (!kept)
		co->key = key;
	int ok = kept || (coll_enabled && area_join(co, key, &a->created) == 0 && (uint64_t)co->size <= co->half_bytes);
	a->mine[0] = ok;
	a->mine[1] = (int64_t)(uintptr_t)&cma_probe;
	a->mine[2] = (int64_t)cma_min;
	a->mine[3] = (int64_t)co->key;
	a->mine[4] = (int64_t)co->step;
	return a;
}

/* The allgather of @p a is done: the area is on where every rank joined;
 * @p cma: whether to agree on single copies too (collective over the
 * communicator: a blocking call only). */
static void agree_end(struct pm_coll *co, struct coll_agreeing *a, bool cma)
{
	int all = 1;
	for (int r = 0; r < co->size; r++)
		all = all && a->every[AGREE_WORDS * r] != 0 && a->every[AGREE_WORDS * r + 3] == a->mine[3] &&
		      a->every[AGREE_WORDS * r + 4] == a->mine[4];
	if (a->created) {
		char name[PINSHM_NAME_MAX + 1];
		area_name(name, sizeof(name), co->key);
		pinshm_unlink(pm.client, name);
	}
	co->on = all != 0;
	if (co->on) {
		co->live = live_find(co, a->local, a->errcomm); /* NULL (out of memory): not watched */
		if (cma)
			cma_agree(co, a->local, a->every, a->comm);
	} else {
		area_close(co);
	}
	co->lib_comm = a->lib;
	free(a->every);
	free(a);
}

/* The area @p co of @p comm (@p local: member -> index in the node,
 * @p errcomm: whose error handler its calls' errors go to): a kept one,
 * or one named by @p key, or (0) by rank 0's token (collective over
 * @p comm, at every rank).  A communicator whose ranks outnumber a half's bytes is
 * refused: a Scatter's or Alltoall's step puts one piece of at least one
 * byte per rank in one half (coll_ops.c). */
static struct pm_coll *area_agree(struct pm_coll *co, MPI_Comm comm, const int *local, MPI_Comm errcomm,
				  uint64_t key)
{
	if (co->size == 1) { /* nothing to share */
		co->on = coll_enabled;
		return co;
	}
	if (!key) {
		if (co->rank == 0)
			key = pm_token() | 1; /* reads /dev/urandom: once */
		PMPI_Bcast(&key, 1, MPI_UINT64_T, 0, comm);
	}
	struct coll_agreeing *a = agree_begin(co, key, local, comm, errcomm);
	PMPI_Allgather(a->mine, AGREE_WORDS, MPI_INT64_T, a->every, AGREE_WORDS, MPI_INT64_T, comm);
	agree_end(co, a, true);
	return co;
}

struct pm_coll *coll_area_agree(MPI_Comm comm, int rank, int size, const int *local, MPI_Comm errcomm)
{
	return area_agree(coll_new(rank, size), comm, local, errcomm, 0);
}

bool coll_agree_test(struct pm_coll *co, bool wait)
{
	struct coll_agreeing *a = co->agreeing;
	if (!a)
		return true;
	if (a->testing)
		return false;
	int flag = 1;
	a->testing = true;
	if (wait)
		PMPI_Waitall(2, a->req, MPI_STATUSES_IGNORE);
	else
		PMPI_Testall(2, a->req, &flag, MPI_STATUSES_IGNORE);
	a->testing = false;
	if (!flag)
		return false;
	co->agreeing = NULL;
	agree_end(co, a, false);
	return true;
}

void coll_area_free(struct pm_coll *co)
{
	if (!co)
		return;
	coll_agree_test(co, true); /* every rank started it: it ends */
	area_close(co);
	if (co->lib_comm != MPI_COMM_NULL)
		PMPI_Comm_free(&co->lib_comm);
	free(co);
}

bool coll_wanted(void)
{
	return coll_enabled;
}

/*
 * Kept areas.  Making an area costs milliseconds (pinshmd pins its pages,
 * each rank maps its lane), a hundred times what Open MPI takes to make a
 * communicator.  So the areas of the last freed communicators
 * (PINSHM_MPI_COLL_KEEP, 4 unless set) are kept, open, each for the next
 * communicator of the same processes in the same order (a dup
 * of one made and freed in a loop), which takes it with its steps going
 * on from the last one: the protocol is then that of one communicator
 * whose calls go on, so nothing in the area needs clearing, and a rank
 * still reading the freed communicator's last step is waited for as any
 * earlier step's.  A rank proposes its kept area in the agreement (its
 * name and last step); where the ranks' proposals differ (one rank freed
 * the old communicator only after the new one's first call, or let it go
 * from its few kept ones) the new communicator's collectives go to the
 * library: the ranks never need to choose alike, only to find out.
 */

struct kept {
	struct pm_coll *co;
	int *pid; /* rank -> its process */
};
static struct kept kept[KEPT_MAX];
static int nkept;

static int member_pid(const struct pm_comm *c, int r)
{
	int node = c->local[r];
	return node >= 0 && node < pm.nlocal ? pm.local_pid[node] : 0;
}

/* The area for @p c's agreement: a kept one of its processes in its
 * order, or a new one. */
static struct pm_coll *area_for(const struct pm_comm *c)
{
	for (int i = 0; area_key(c) && i < nkept; i++) {
		struct kept *k = &kept[i];
		bool same = k->co->size == c->size;
		for (int r = 0; same && r < c->size; r++)
			same = k->pid[r] == member_pid(c, r);
		if (!same)
			continue;
		struct pm_coll *co = k->co;
		free(k->pid);
		memmove(k, k + 1, (size_t)(--nkept - i) * sizeof(*k)); /* the rest in their order, oldest first */
		areas_taken++;
		return co;
	}
	return coll_new(c->rank, c->size);
}

/* Keep the area of @p c, whose entry goes: only a sound one, every step
 * of it finished here. */
static bool keep(const struct pm_comm *c)
{
	struct pm_coll *co = c->coll;
	if (keep_max == 0 || !co->on || !co->ch || co->agreeing || co->detached ||
	    coll_error(co) != MPI_SUCCESS || !area_key(c) ||
	    atomic_load_explicit(&co->flags[co->rank]->done, memory_order_relaxed) != co->step)
		return false;
	int *pid = malloc((size_t)c->size * sizeof(int));
	if (!pid)
		return false;
	for (int r = 0; r < c->size; r++)
		pid[r] = member_pid(c, r);
	if (nkept == (int)keep_max) { /* the oldest goes */
		coll_area_free(kept[0].co);
		free(kept[0].pid);
		memmove(kept, kept + 1, (size_t)(nkept - 1) * sizeof(kept[0]));
		nkept--;
	}
	/* What the next agreement decides anew. */
	live_free(co->live);
	co->live = NULL;
	free(co->pid);
	co->pid = NULL;
	co->cma_min = 0;
	co->on = false;
	if (co->lib_comm != MPI_COMM_NULL)
		PMPI_Comm_free(&co->lib_comm);
	kept[nkept++] = (struct kept){co, pid};
	return true;
}

void pm_coll_kept_free(void)
{
	for (int i = 0; i < nkept; i++) {
		coll_area_free(kept[i].co);
		free(kept[i].pid);
	}
	nkept = 0;
}

/* The first collective on @p c (collective over c->comm, at every rank):
 * its area, or (spanning nodes) its node layout and the node's area. */
static struct pm_coll *agree(struct pm_comm *c)
{
	if (!c->mixed)
		return c->coll = area_agree(area_for(c), c->comm, c->local, c->comm, area_key(c));
	struct pm_coll *co = coll_new(c->rank, c->size);
	co->hier = hier_make(c);
	return c->coll = co;
}

struct pm_coll *pm_coll_nb_area(MPI_Comm comm, bool *agreeing)
{
	*agreeing = false;
	struct pm_comm *c = pm.active ? pm_comm_find(comm) : NULL;
	if (!c || c->mixed)
		return NULL;
	struct pm_coll *co = c->coll;
	if (!co) {
		uint64_t key = area_key(c);
		if (!key)
			return NULL; /* the first blocking call agrees */
		co = c->coll = area_for(c);
		if (co->size == 1) {
			co->on = coll_enabled;
		} else {
			struct coll_agreeing *a = co->agreeing = agree_begin(co, key, c->local, c->comm, c->comm);
			PMPI_Iallgather(a->mine, AGREE_WORDS, MPI_INT64_T, a->every, AGREE_WORDS, MPI_INT64_T, c->comm,
					&a->req[0]);
			PMPI_Comm_idup(c->comm, &a->lib, &a->req[1]);
		}
	}
	if (co->agreeing && coll_agree_test(co, false))
		coll_nb_agreed(co); /* the calls that waited for it go first */
	*agreeing = co->agreeing != NULL;
	return co->agreeing || co->on ? co : NULL;
}

void pm_coll_settle(struct pm_comm *c)
{
	if (c->coll && c->coll->agreeing && coll_agree_test(c->coll, true))
		coll_nb_agreed(c->coll);
}

struct pm_hier *pm_hier_for(MPI_Comm comm)
{
	if (!pm.active || !pm.all_active)
		return NULL;
	struct pm_comm *c = pm_comm_find(comm);
	/* Members of another job agreed on all_active in their own world:
	 * such a communicator goes to the library whole, at every member. */
	if (!c || !c->mixed || c->foreign)
		return NULL;
	struct pm_coll *co = c->coll ? c->coll : agree(c);
	return co ? co->hier : NULL;
}

void pm_coll_world_layout(void)
{
	pm_hier_for(MPI_COMM_WORLD); /* agrees where world spans nodes; else nothing */
}

struct pm_coll *pm_coll_for(MPI_Comm comm)
{
	struct pm_comm *c = pm.active ? pm_comm_find(comm) : NULL;
	if (!c || c->mixed)
		return NULL;
	struct pm_coll *co = c->coll ? c->coll : agree(c);
	pm_coll_settle(c);
	if (!co->on)
		return NULL;
	coll_nb_drain(co);
	return co;
}

void pm_coll_free(struct pm_comm *c)
{
	if (!c->coll)
		return;
	hier_free(c->coll->hier);
	c->coll->hier = NULL;
	if (!keep(c))
		coll_area_free(c->coll);
	c->coll = NULL;
}

/* ---- waiting ---------------------------------------------------------- */

#define LIVE_EVERY 256u /* fruitless passes between two looks at the members' liveness */

static bool flag_reached(const struct pm_coll *co, int r, bool done, uint64_t s)
{
	_Atomic uint64_t *w = done ? &co->flags[r]->done : &co->flags[r]->arrive;
	return atomic_load_explicit(w, memory_order_acquire) >= s;
}

/*
 * A rank whose wait failed writes into the area no more: its slot (flags,
 * small slots, marks, halves) becomes memory of its own.  Its later calls
 * run their steps at once, and a reader that has not seen the death yet
 * must not take their flags, marks or data for those of a step it is in
 * (a Barrier's released ranks would leave it with MPI_SUCCESS, a Bcast's
 * receivers copy behind marks of a later call, a slow reader of step
 * s - 2 find its half rewritten).  The others find the death themselves.
 * Out of memory ends the job, as elsewhere in the plugin.
 */
static void slot_detach(struct pm_coll *co)
{
	size_t bytes = SLOT_HEAD - 64 + 2 * co->half_bytes;
	if (co->detached)
		return;
	uint8_t *own = aligned_alloc(64, bytes);
	if (!own) {
		fprintf(stderr, "pinshm-mpi: out of memory\n");
		PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
		return;
	}
	/* What the call posted so far, read back by it (coll_vops.c, a fold
	 * of its own chunk); flags and marks at no step. */
	memcpy(own, co->flags[co->rank], bytes);
	memset(own, 0, SLOT_HEAD - 64);
	co->detached = own;
	co->flags[co->rank] = (struct coll_flags *)(void *)own;
	co->half[co->rank] = own + SLOT_HEAD - 64;
}

/* Whether a wait for member @p r must end without its flag: some member
 * died (the wait ends too where it is another: @p r may wait for that one)
 * and @p r's flag, read again after the endpoints, has not come.  The call
 * passes the error to the handler at its end (coll_call_error(), or the
 * completion of a nonblocking one). */
static bool wait_failed(struct pm_coll *co, int r, bool done, uint64_t s)
{
	struct coll_live *lv = co->live;
	for (int m = 0; m < co->size; m++) {
		if (m == co->rank || !live_gone(co, m))
			continue;
		if (flag_reached(co, r, done, s))
			return false;
		fprintf(stderr,
			"pinshm-mpi: rank %d (world rank %d): rank %d of the communicator (process %d) died: "
			"the collective call cannot complete\n",
			co->rank, pm.world_rank, m, lv->pid[m]);
		lv->error = MPI_ERR_OTHER;
		slot_detach(co);
		return true;
	}
	return false;
}

/* Until every rank r in [@p from, @p to) has *field(r) >= @p s: polling,
 * moving point-to-point traffic meanwhile (a rank may wait for this one's
 * CTS before it comes here), by the rules of pm_idle(); every LIVE_EVERY
 * fruitless passes, a look at whether the members are alive. */
static void wait_for(struct pm_coll *co, int from, int to, bool done, uint64_t s)
{
	unsigned idle = 0, passes = 0;
	if (coll_error(co) != MPI_SUCCESS)
		return;
	for (int r = from; r < to;) {
		if (flag_reached(co, r, done, s)) {
			r++;
			continue;
		}
		/* The flag is seen as soon as it comes, not a progress pass later. */
		unsigned k = 0, looks = coll_looks();
		while (k < looks && !flag_reached(co, r, done, s)) {
			coll_relax();
			k++;
		}
		if (k < looks)
			continue;
		if (pm_progress()) {
			idle = 0;
			continue;
		}
		pm_idle(&idle, false);
		if (++passes % LIVE_EVERY == 0 && co->live && wait_failed(co, r, done, s))
			return;
	}
}

bool coll_poll_failed(struct pm_coll *co, unsigned *passes, int from, int to, bool done, uint64_t s)
{
	if (coll_error(co) != MPI_SUCCESS)
		return true;
	if (++*passes % LIVE_EVERY != 0 || !co->live)
		return false;
	for (int r = from; r < to; r++)
		if (!flag_reached(co, r, done, s))
			return wait_failed(co, r, done, s);
	return false;
}

void coll_wait_free(struct pm_coll *co, uint64_t s)
{
	if (s <= 2 || co->known_done >= s - 2)
		return;
	wait_for(co, 0, co->size, true, s - 2);
	if (coll_error(co) == MPI_SUCCESS)
		coll_seen_done(co, s - 2);
}

void coll_post(struct pm_coll *co, uint64_t s)
{
	atomic_store_explicit(&co->flags[co->rank]->arrive, s, memory_order_release);
}

void coll_wait_arrive(struct pm_coll *co, int r, uint64_t s)
{
	wait_for(co, r, r + 1, false, s);
}

void coll_wait_all(struct pm_coll *co, uint64_t s)
{
	wait_for(co, 0, co->size, false, s);
	if (coll_error(co) == MPI_SUCCESS)
		coll_seen_done(co, s - 1);
}

void coll_finish(struct pm_coll *co, uint64_t s)
{
	atomic_store_explicit(&co->flags[co->rank]->done, s, memory_order_release);
}

void coll_wait_done(struct pm_coll *co, uint64_t s)
{
	wait_for(co, 0, co->size, true, s);
	if (coll_error(co) == MPI_SUCCESS)
		coll_seen_done(co, s);
}

void coll_wait_release(struct pm_coll *co, uint64_t s)
{
	wait_for(co, 0, 1, true, s);
	if (coll_error(co) == MPI_SUCCESS)
		coll_seen_done(co, s - 1);
}
