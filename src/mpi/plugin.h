/*
 * plugin.h - the internals of libpinshm_mpi (not installed).
 *
 * The plugin interposes the MPI point-to-point calls (PMPI profiling
 * interface).  A message on a communicator that the plugin carries, between
 * two ranks of the same node, travels through pinshm; everything else is
 * passed to the MPI library unchanged.
 *
 * Files, one concern each:
 *   setup.c     MPI_Init/Finalize: configuration, channels, statistics
 *   comm.c      communicators: contexts, which pair takes which path
 *   ops.c       operations, their wire ids and their MPI_Request handles
 *   engine.c    progress: the inbound queue, matching, the outbound queues
 *   unexp.c     unexpected messages, a context's orphans
 *   remote.c    the MPI library's side of mixed receives and requests
 *   send.c      the send calls          recv.c      receives and probes
 *   complete.c  Wait/Test families, Request_free, Cancel
 *   persist.c   persistent requests      bsend.c     buffered sends
 *   pack.c      packing non-contiguous data, in pieces of at most INT_MAX bytes
 *   coll.c      collectives: each communicator's decision and shared area
 *   coll_ops.c  the collective calls carried through that area
 *   coll_vops.c the v variants;  coll_scan.c reduce-scatters and scans
 *   coll_nb.c   the nonblocking collectives, progressed by the engine
 *   fortran.c   Fortran's entry points (fortran_coll.c: its collectives)
 *   lookup.c    whether the plugin's MPI calls are the ones the process calls
 *
 * Threads: the plugin carries traffic only below MPI_THREAD_MULTIPLE, so
 * one thread at a time is inside it; its state is plain process memory.
 */
#ifndef PINSHM_MPI_PLUGIN_H
#define PINSHM_MPI_PLUGIN_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <mpi.h>

#include "channel.h" /* the ring's next lines (pm_claim_lines()) */
#include "pinshm.h"
#include "wire.h"

/* ---- intrusive lists ------------------------------------------------- */

struct pm_link {
	struct pm_link *prev, *next;
};

struct pm_list {
	struct pm_link *head, *tail;
	size_t length;
};

void pm_list_push(struct pm_list *l, struct pm_link *e);
void pm_list_remove(struct pm_list *l, struct pm_link *e);

#define pm_container(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* The slot of @p key (a pointer or a context) in a table of @p n, a power
 * of two: bits 32 and up of a Fibonacci product, which depend on all the
 * key's low bits (the product's own low bits depend only on the key's low
 * bits, which are alike for handles allocated at a regular stride). */
static inline size_t pm_hash(uint64_t key, size_t n)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (n - 1);
}

/* Clear @p n bytes at @p p, 64 at a time.  A compiler turns a memset of a
 * known size over 64 bytes into `rep stos`, whose start-up alone costs
 * more than plain stores of a few lines (an op is 216 bytes); memsets of
 * 64 bytes become plain stores. */
static inline void pm_clear(void *p, size_t n)
{
	char *c = p;
	for (; n >= 64; n -= 64, c += 64)
		memset(c, 0, 64);
	memset(c, 0, n);
}

/* ---- statistics ------------------------------------------------------ */

enum pm_family {
	FAM_BLOCKING,
	FAM_NONBLOCKING,
	FAM_PERSISTENT,
	FAM_PROBE,
	FAM_SYNC,
	FAM_BUFFERED,
	FAM_COUNT
};

struct pm_counts {
	uint64_t pinshm_msgs, pinshm_bytes, mpi_msgs, mpi_bytes;
};

static inline void pm_count_pinshm(enum pm_family f, uint64_t bytes);
static inline void pm_count_mpi(enum pm_family f, uint64_t bytes);

/* ---- communicators --------------------------------------------------- */

struct pm_comm {
	MPI_Comm comm;
	uint64_t ctx;        /* the matching context, the same at every member */
	int rank, size;
	int *local;          /* comm rank -> index of that rank in the node, or -1 */
	bool mixed;          /* some members are reached through the MPI library */
	bool foreign;        /* some members are not in this job's MPI_COMM_WORLD (spawned, connected) */
	uint32_t derived;    /* communicators derived from this one so far */
	struct pm_list posted; /* receives not yet matched, in the order posted */
	struct pm_list unexp;  /* messages not yet matched, in the order they came */
	unsigned wild_remote;  /* posted receives that may match a message of the MPI library */
	unsigned refs;         /* ops that point here; freed at 0 once forgotten */
	bool forgotten;        /* MPI_Comm_free seen */
	struct pm_coll *coll;  /* collectives: decided at the first one (coll.c), or NULL */
};

/* The communicator that the plugin carries for @p comm, or NULL. */
struct pm_comm *pm_comm_find(MPI_Comm comm);
struct pm_comm *pm_comm_by_ctx(uint64_t ctx);
int pm_comm_setup(void);    /* COMM_WORLD, COMM_SELF, the attribute key */
void pm_comm_teardown(void);
/*
 * Contexts.  A communicator made collectively over @p parent (dup, split,
 * create, cart/graph...) takes a context derived from the parent's and from
 * how many the parent has made: every member computes the same one without
 * talking.  pm_comm_derive() counts the creation (call it at every member,
 * also where the result is MPI_COMM_NULL) and returns that context, or 0
 * when the parent is not carried.  pm_comm_register() with context 0 makes
 * the members agree on a fresh one (one allreduce over @p comm).
 */
uint64_t pm_comm_derive(MPI_Comm parent);
uint64_t pm_splitmix64(uint64_t x); /* a 64-bit mix of @p x (splitmix64's finaliser) */
void pm_comm_register(MPI_Comm comm, uint64_t ctx);
void pm_comm_release(struct pm_comm *c); /* an op no longer points to it */
/* MPI_Comm_idup; @p fnewcomm: Fortran's handle, or NULL for C (comm.c). */
int pm_comm_idup(MPI_Comm comm, MPI_Comm *newcomm, MPI_Fint *fnewcomm, MPI_Request *request);

/* ---- operations ------------------------------------------------------ */

enum pm_kind {
	OP_SEND = 1,
	OP_RECV = 2,
	OP_IDUP = 3, /* MPI_Comm_idup: registers the communicator when preq completes */
	OP_COLL = 4, /* a nonblocking collective (coll_nb.c): never cancelled */
};

enum pm_mode { MODE_STANDARD, MODE_SYNC, MODE_BUFFERED, MODE_READY };

enum pm_op_state {
	ST_IDLE,      /* persistent and not started */
	ST_QUEUED,    /* send: its first record waits for room in the peer's ring */
	ST_WAIT_CTS,  /* send: RTS written */
	ST_STREAM,    /* send: writing DATA; receive: taking DATA */
	ST_WAIT_ACK,  /* synchronous eager send written */
	ST_POSTED,    /* receive: in its communicator's posted list */
	ST_REMOTE,    /* receive: matched by the MPI library (preq) */
	ST_DONE,
};

struct pm_unexp;

struct pm_op {
	struct pm_link link;    /* posted list, a peer's send queue or stream list */
	struct pm_link rlink;   /* pm.hybrid (may match the MPI library's messages) or pm.remote */
	uint32_t index, gen;    /* wire id: (gen << 32) | index */
	uint8_t kind, mode, family, state;
	bool persistent;        /* stays after completion until freed */
	bool user_freed;        /* MPI_Request_free before completion */
	bool cancelled;
	bool counted;
	MPI_Request handle;     /* what the user holds, or MPI_REQUEST_NULL */
	MPI_Request fortran;    /* the same request for Fortran (Request_c2f), or MPI_REQUEST_NULL */
	bool completing;        /* inside pm_op_complete() */
	int memo_at;            /* 1 + its position in complete.c's memo of active ops, or 0 */
	struct pm_comm *comm;
	int peer, tag;          /* dest or source (may be MPI_ANY_SOURCE), tag */
	int peer_local;         /* send: the peer's index in the node */
	int open_with;          /* 1 + the node index it counts as open with (pm_op_closed()), or 0 */

	/* The user's buffer. */
	const void *ubuf;
	int count;
	MPI_Datatype dtype;
	char *data;             /* contiguous bytes: in the user's buffer or in tmp */
	size_t bytes;           /* send: message length; receive: room */
	char *tmp;              /* packed copy (non-contiguous types, buffered sends) */
	bool contiguous;
	bool dtype_held;        /* dtype is the op's own duplicate */
	int failed;             /* a failure notice (REC_FAILED): the sender's error code, at data */

	/* Progress. */
	uint64_t offset;        /* stream: bytes sent or received so far */
	uint64_t accept;        /* stream: bytes the receiver takes */
	uint64_t remote_id;     /* send: rid of the receive; receive: sid of the send */
	int reply_to;           /* receive: the sender's index in the node */
	MPI_Request preq;       /* ST_REMOTE, OP_IDUP: the MPI library's request */
	MPI_Comm *newcomm;      /* OP_IDUP: where the new communicator appears */
	MPI_Fint *fnewcomm;     /* OP_IDUP from Fortran: its handle, written at completion
				 * (newcomm is then the op's cell from malloc, freed then) */
	uint64_t new_ctx;       /* OP_IDUP: its context */

	/* Outcome. */
	int st_source, st_tag, st_error;
	uint64_t st_bytes;
};

struct pm_op *pm_op_new(enum pm_kind kind);
void pm_op_free(struct pm_op *op);
uint64_t pm_op_id(const struct pm_op *op);
struct pm_op *pm_op_by_id(uint64_t id);
/* Describe the user's buffer; packs a send's non-contiguous data into tmp.
 * @return MPI_SUCCESS or an MPI error code. */
int pm_op_buffer(struct pm_op *op, const void *buf, int count, MPI_Datatype dtype);
/* Take the op's own reference to op->dtype (a duplicate, if derived). */
int pm_op_hold_type(struct pm_op *op);
/* pm_type_keep(): make *@p type a reference of the caller's own (a
 * duplicate where it is derived and *@p held is not set; *@p held then
 * says so); pm_type_drop(): let that reference go. */
int pm_type_keep(MPI_Datatype *type, bool *held);
void pm_type_drop(MPI_Datatype *type, bool *held);
void pm_op_complete(struct pm_op *op); /* mark done, signal its handle */
/* Fill @p status (may be MPI_STATUS_IGNORE) from a finished op. */
void pm_op_status(const struct pm_op *op, MPI_Status *status);
void pm_status_empty(MPI_Status *status);
/* As pm_op_status() for a single-completion call (MPI_Wait, MPI_Recv...),
 * which leaves MPI_ERROR as it was. */
void pm_op_status_single(const struct pm_op *op, MPI_Status *status);
/* Give a nonblocking @p op its user-visible request (ops.c tells what it is). */
int pm_op_handle(struct pm_op *op);
struct pm_op *pm_op_by_handle(MPI_Request req);
/* Release an op that is over (finished, or persistent and inactive): its
 * handles, then the op. */
void pm_op_release(struct pm_op *op);
void pm_ops_teardown(void);
void pm_complete_teardown(void); /* complete.c: forget the ops it remembers */
/* complete.c: @p op is no longer active and not done (it is done, or
 * over); call where op->memo_at is set. */
void pm_complete_cool(struct pm_op *op);
void pm_fortran_teardown(void); /* fortran.c: the room of its calls on arrays */
/* Unpack or copy @p len bytes of message into a receive op at @p offset. */
void pm_op_deliver(struct pm_op *op, const void *src, size_t len, uint64_t offset);
void pm_op_deliver_done(struct pm_op *op);
/* Pack @p count items of @p dtype at @p buf into the @p bytes (their size)
 * at @p out; unpack @p len bytes at @p src into items of @p dtype at @p buf
 * (room for @p count; the bytes may end inside an item).  Any size, in
 * pieces of at most pm.cfg.piece bytes.  @return an MPI error code. */
int pm_pack(const void *buf, int count, MPI_Datatype dtype, void *out, uint64_t bytes);
int pm_unpack(const void *src, uint64_t len, void *buf, int count, MPI_Datatype dtype);

/* ---- the engine ------------------------------------------------------ */

struct pm_peer {
	pinshm_channel_t *out;  /* producer into that rank's inbound queue */
	struct pm_list sendq;   /* sends whose first record is not written yet */
	struct pm_list stream;  /* sends writing DATA */
	struct pm_list ctl;     /* CTS and ACK records waiting for room */
	bool busy;              /* in pm.busy_peers */
	/* This rank's sends to that rank and receives from it, longer than
	 * the eager size, from their start until the user has them back
	 * (pm_op_closed()). */
	uint32_t open_sends, open_recvs;
};

struct pm_unexp {
	struct pm_link link;
	uint8_t type;           /* REC_EAGER or REC_RTS */
	uint8_t flags;
	uint16_t from;
	int src, tag;
	uint64_t ctx, len, sid;
	uint32_t pid;           /* RTS with REC_CMA: where the message lies */
	uint64_t addr;
	char *data;             /* EAGER: a copy of the payload */
	size_t room;            /* bytes at data (kept with a recycled entry) */
};

/* What a send or receive needs to know of a datatype, cached by handle
 * (ops.c): a handle names the same type until MPI_Type_free, which empties
 * the cache.  The look is inline, as every send and receive makes it: a
 * call cost more than the look. */
struct pm_type {
	MPI_Datatype type;
	MPI_Count size;
	MPI_Aint tlb, extent;
	bool flat;
	bool named; /* predefined: never freed */
};

#define PM_TYPE_CACHE 64
extern struct pm_type pm_type_cache[PM_TYPE_CACHE];

static inline struct pm_type *pm_type_slot(MPI_Datatype dtype)
{
	return &pm_type_cache[((uintptr_t)dtype >> 4) % PM_TYPE_CACHE];
}

/* Fill @p dtype's slot from the library. @return NULL if it is not a
 * committed datatype. */
const struct pm_type *pm_type_fill(MPI_Datatype dtype);

static inline const struct pm_type *pm_type_info(MPI_Datatype dtype)
{
	const struct pm_type *t = pm_type_slot(dtype);
	if (t->type == dtype && dtype != MPI_DATATYPE_NULL)
		return t;
	return pm_type_fill(dtype);
}

/* Contiguous bytes of @p count items of @p dtype at @p buf: the address of
 * the first byte, or NULL if they must be packed. */
static inline const void *pm_flat_data(const void *buf, int count, MPI_Datatype dtype, size_t *bytes)
{
	const struct pm_type *t = pm_type_info(dtype);
	if (!t || !t->flat || (count > 1 && t->extent != t->size))
		return NULL;
	*bytes = (size_t)t->size * (size_t)count;
	return (const char *)((uintptr_t)buf + (uintptr_t)t->tlb);
}

/* A standard send written whole at once, with no op, when its data is
 * contiguous, eager and nothing is queued before it; counted in @p family.
 * @return whether it was (if not, start a send op). */
bool pm_send_now(struct pm_comm *c, const void *buf, int count, MPI_Datatype dtype, int dest, int tag,
		 enum pm_family family);
/* Start a send (queued or written at once); the op is set up. */
int pm_send_start(struct pm_op *op);
/* A send to @p dest on @p c failed with @p code before it went out: send
 * the receive that would match it a failure notice (REC_FAILED) in its
 * place, so that it completes with that error rather than waiting for
 * ever.  @return @p code. */
int pm_send_failed(struct pm_comm *c, int dest, int tag, int code);
/* Start a receive: match an unexpected message or post it. */
int pm_recv_start(struct pm_op *op);
/* A send or receive longer than the eager size, with one rank of the
 * node, is open from its start until the user has it back; where a send
 * and a receive are open with the same rank, messages between the two
 * cross, and each is copied once by its receiver rather than streamed.
 * pm_op_closed(): the user has it back (finished, freed). */
void pm_op_closed(struct pm_op *op);
/* Take a matched unexpected message into a receive op (frees @p u). */
void pm_recv_take(struct pm_op *op, struct pm_unexp *u);
/* The first unexpected message of @p c that (source, tag) matches, or NULL. */
struct pm_unexp *pm_unexp_find(struct pm_comm *c, int source, int tag);
void pm_unexp_free(struct pm_unexp *u);
/* No receive will take @p u (an error): release its sender, which waits
 * for a CTS (RTS) or an ACK (synchronous EAGER), as for an empty receive. */
void pm_unexp_refuse(const struct pm_unexp *u);
void pm_unexp_teardown(void); /* at MPI_Finalize: orphans, recycled entries */
void pm_unexp_status(const struct pm_unexp *u, MPI_Status *status);
/* Whether a probe or receive on @p c from @p source must also ask the MPI
 * library (a wildcard, or a member on another node, of a mixed communicator). */
bool pm_probe_lib(const struct pm_comm *c, int source);
/* Cancel an op that has not reached its peer. @return true if cancelled. */
bool pm_op_cancel(struct pm_op *op);
/* Messages that came for a context not known yet: move them to @p c. */
void pm_unexp_move_orphans(struct pm_comm *c);
/* Keep a copy of envelope @p e (and of an EAGER's payload) until a receive
 * matches it; @p c NULL: its communicator is not known yet (unexp.c). */
void pm_unexp_keep(struct pm_comm *c, const struct pm_unexp *e, const void *payload);
/* Take posted receive @p op out of the posted lists (engine.c). */
void pm_op_unpost(struct pm_op *op);
/* Probe the library for the receives that may match its messages, and
 * test the library's requests that ops wait for (remote.c).  @return how
 * many it finished or matched. */
int pm_poll_remote(void);
/* Whether a message from @p source with @p tag matches a receive that wants
 * @p want_source and @p want_tag (wildcards included). */
static inline bool pm_matches(int want_source, int want_tag, int source, int tag)
{
	return (want_source == MPI_ANY_SOURCE || want_source == source) && (want_tag == MPI_ANY_TAG || want_tag == tag);
}

/* One pass over everything: @return how much it did (0: nothing). */
int pm_progress(void);
/* What the MPI library's progress loop calls at each of its passes: a
 * pass of pm_progress() where a record may be awaited (an operation of the
 * plugin under way), else only every so many passes (a message that no
 * receive waits for yet, a sender waiting for room in the ring), the
 * passes between touching no shared memory.  @return as pm_progress(). */
int pm_progress_hook(void);
/* Wait for one op. */
void pm_wait_op(struct pm_op *op);
/*
 * A blocking receive's short cut into @p bytes of contiguous @p data: an op
 * of the engine's own (no wire id, not posted) takes the first EAGER record
 * that it matches and that no posted receive matches, straight from the
 * ring.  A matching message it cannot take that way (RTS) is kept
 * unexpected instead.  Call only when no unexpected message matches and
 * the MPI library cannot (see pm_probe_lib()).  @return the finished op
 * (valid until the next call), or NULL: receive through a posted op.
 */
const struct pm_op *pm_recv_direct(struct pm_comm *c, int source, int tag, void *data, size_t bytes,
				   enum pm_family family);
/* Let the MPI library progress (its opal_progress, or an MPI_Iprobe). */
void pm_mpi_progress(void);
/* Whether an MPI call the plugin exports resolves to another object (a
 * tool preloaded before it, the program): then @p why says which. */
bool pm_calls_taken(char *why, size_t len);
/* The waiting strategy: call between fruitless passes. */
void pm_idle(unsigned *idle, bool may_sleep);

/* ---- routing (send.c, recv.c) ------------------------------------------ */

/* The carried communicator if a send to @p dest goes through pinshm, else
 * NULL (the MPI library takes it). */
struct pm_comm *pm_send_route(MPI_Comm comm, int dest, int tag, int count);
/* Whether a receive goes through the plugin: the carried communicator, or NULL. */
struct pm_comm *pm_recv_route(MPI_Comm comm, int source, int tag, int count);
/* The carried communicator of a receive from any member (persistent ones). */
struct pm_comm *pm_recv_route_any(MPI_Comm comm, int source, int tag, int count);
/* Start a receive op from any member: as pm_recv_start(), or through the
 * library when it comes from another node and no wildcard precedes it. */
int pm_recv_start_any(struct pm_op *op);
/* Watch op->preq, a request of the library, until it completes. */
void pm_remote_start(struct pm_op *op);
/* A message of the library on @p c that a posted receive of the plugin
 * would take: @return whether one would (MPI_Iprobe must not report it). */
bool pm_hybrid_wants(const struct pm_comm *c, int source, int tag);
/* Give a message matched by MPI_Improbe to the first posted receive of the
 * plugin that matches it. @return whether one took it. */
bool pm_hybrid_take(const struct pm_comm *c, int source, int tag, MPI_Message *msg);
uint64_t pm_type_bytes(MPI_Datatype dtype, int count);
/* A send op, set up but not started. */
int pm_send_op(struct pm_comm *c, const void *buf, int count, MPI_Datatype dtype, int dest, int tag,
	       enum pm_mode mode, enum pm_family family, struct pm_op **out);
int pm_recv_op(struct pm_comm *c, void *buf, int count, MPI_Datatype dtype, int source, int tag,
	       enum pm_family family, struct pm_op **out);
/* MPI_Recv, either path, counted in @p family. */
int pm_recv_blocking(void *buf, int count, MPI_Datatype dtype, int source, int tag, MPI_Comm comm,
		     MPI_Status *status, enum pm_family family);

static inline void pm_op_attach(struct pm_op *op, struct pm_comm *c)
{
	op->comm = c;
	c->refs++;
}

/* ---- the process ----------------------------------------------------- */

struct pm_config {
	bool stats;
	unsigned nodes;     /* PINSHM_MPI_NODES */
	size_t eager;       /* largest message sent eagerly */
	size_t chunk;       /* DATA payload bytes */
	uint64_t eager_asked, chunk_asked; /* before bound_sizes() fits them to the ring */
	bool eager_set, chunk_set;         /* PINSHM_MPI_EAGER, PINSHM_MPI_CHUNK given */
	size_t cma;         /* messages from this size up are copied once (0: only crossing ones) */
	bool cma_set;       /* PINSHM_MPI_CMA given: its size alone decides (0: never) */
	uint64_t ring;      /* ring bytes per sender (size_rings()) */
	bool ring_fixed;    /* PINSHM_MPI_RING set: the ring is that, whatever the node's size */
	uint64_t node_rings; /* the most the node's rings take together, unless PINSHM_MPI_RING is set */
	uint64_t spin_ns;   /* polling before yielding */
	uint64_t yield_ns;  /* yielding before sleeping */
	uint64_t piece;     /* most bytes packed or unpacked in one call (INT_MAX; PINSHM_MPI_PIECE) */
	bool claim_lines;   /* the CPU asks for a line to write (pm_claim_lines()) */
};

struct pm_state {
	bool loaded;        /* MPI_Init ran the plugin's setup (all ranks do) */
	bool active;        /* carrying traffic (all ranks of a node or none) */
	bool all_active;    /* every node of the job carries (agreed at MPI_Init) */
	bool multiple;      /* MPI_THREAD_MULTIPLE: every call goes to the library, and the
			     * plugin keeps no statistics (its threads would race on them) */
	int world_rank, world_size;
	int tag_ub;         /* MPI_TAG_UB */
	int nlocal, local_rank; /* the (pretend) node */
	int *local_world;   /* node index -> world rank */
	int *local_pid;     /* node index -> process id */
	int *world_local;   /* world rank -> node index or -1 */
	uint64_t node_token; /* the random token of the node's queues, the same at its ranks */
	MPI_Comm node_comm; /* private: the ranks of the (pretend) node */
	MPI_Comm quiet_comm; /* private: MPI_COMM_SELF with MPI_ERRORS_RETURN, for checks */
	MPI_Group world_group;
	pinshm_client_t *client;
	pinshm_channel_t *in; /* this rank's inbound queue */
	enum { QUEUE_UNKNOWN, QUEUE_PINNED, QUEUE_UNPINNED } in_locked; /* asked with PINSHM_MPI_STATS */
	struct pm_peer *peers;
	uint32_t busy_mask_words;
	uint64_t *busy;     /* bit per peer with records waiting */
	unsigned busy_peers; /* bits set in busy */
	unsigned sends_inflight; /* sends started and not done */
	unsigned streaming; /* receives taking DATA */
	unsigned posted;    /* receives in a posted list */
	int in_progress;    /* re-entry guard */
	struct pm_op *watch; /* the op a blocking call waits for, or NULL */
	/* The library's request of a completed send (what MPI_Isend to
	 * MPI_PROC_NULL gives), where that is one shared object, else
	 * MPI_REQUEST_NULL; and the status its completion reports. */
	MPI_Request sent;
	MPI_Status sent_status;
	struct pm_op *direct; /* a blocking receive waiting unposted (pm_recv_direct), or NULL */
	bool direct_missed;  /* a message it matches was kept unexpected */
	struct pm_list orphans; /* messages for contexts not known yet */
	struct pm_list hybrid;  /* posted receives that also probe the MPI library, in posted order */
	struct pm_list remote;  /* ops waiting on a request of the MPI library */
	struct pm_config cfg;
	struct pm_counts counts[FAM_COUNT];
	uint64_t copied_once; /* messages received straight from their sender's memory (cfg.cma) */
	bool copy_refused;    /* the kernel refused that copy (no ptrace rights): streamed instead */
	uint64_t buffered_attached, buffered_used; /* MPI_Buffer_attach accounting */
};

extern struct pm_state pm;

/* What went through pinshm, and what was passed to the MPI library. */
static inline void pm_count_pinshm(enum pm_family f, uint64_t bytes)
{
	if (f < FAM_COUNT) {
		pm.counts[f].pinshm_msgs++;
		pm.counts[f].pinshm_bytes += bytes;
	}
}

static inline void pm_count_mpi(enum pm_family f, uint64_t bytes)
{
	if (f < FAM_COUNT && !pm.multiple) {
		pm.counts[f].mpi_msgs++;
		pm.counts[f].mpi_bytes += bytes;
	}
}

void pm_peer_mark_busy(int peer);

int pm_bsend_start(struct pm_op *op);      /* bsend.c: copy, charge, start */
/* bsend.c: start a persistent buffered send: its message goes out as a
 * buffered send of its own, and @p op completes at once. */
int pm_bsend_start_persistent(struct pm_op *op);
void pm_forget_passed(MPI_Request handle);  /* persist.c: a library request freed */
void pm_persist_teardown(void);
void pm_op_register_handle(struct pm_op *op); /* ops.c: a persistent op's handle */
void pm_mprobe_teardown(void);              /* mprobe.c */

/* ---- collectives (coll.c) ------------------------------------------- */

struct pm_coll;
void pm_coll_config(void);           /* the PINSHM_MPI_COLL* variables */
void pm_coll_free(struct pm_comm *c); /* the communicator's entry goes */
void pm_coll_kept_free(void);         /* at MPI_Finalize, after the entries: the kept areas */
/* The agreement under way on @p c (coll.c) ends, waiting for it, and the
 * nonblocking calls that waited for it start. */
void pm_coll_settle(struct pm_comm *c);
/* At MPI_Init, where every node carries (collective over MPI_COMM_WORLD):
 * a world that spans nodes agrees its layout, so that its nonblocking
 * collectives are carried from the first one. */
void pm_coll_world_layout(void);
void pm_coll_print_stats(void);
/* Nonblocking collectives not finished yet (coll_nb.c), and one pass
 * over them: @return how many steps it took. */
extern unsigned pm_coll_nb_pending;
int pm_coll_nb_progress(void);
/* For a wait on a nonblocking collective: looks a while at the flags that
 * the first pending call's step waits for, and where they came, takes the
 * pending calls' steps (a pass over them alone).  @return steps taken. */
int pm_coll_nb_look(void);
void pm_coll_nb_teardown(void); /* at MPI_Finalize: the user's ops still held */
/* setup.c: a size from the environment, as the plugin's own settings are
 * read (a warning from rank 0 where it is not one); a random token. */
uint64_t pm_env_size(const char *name, uint64_t def, uint64_t min, uint64_t max);
uint64_t pm_token(void);

/* Error through the communicator's error handler. */
int pm_comm_error(MPI_Comm comm, int code);

/* ---- the eager send's short path (engine.c), inlined into the blocking
 * send: a small send is little more than these calls otherwise. ---- */

#define PM_LINE 64 /* bytes of a cache line */
/* EAGER records up to this payload carry no sid unless synchronous
 * (pm_write_eager()); longer ones do, so that their payload starts 16-byte
 * aligned. */
#define PM_LINE_ALIGNED_EAGER 256
/* EAGER records up to this payload end on a cache line (pm_write_eager()). */
#define PM_LINE_END_EAGER 4096

/* EAGER payloads over MIN, up to MAX, write their record's first line last
 * (pm_write_eager()): shorter ones and longer ones measured no faster so. */
#define PM_TAIL_FIRST_MIN 512
#define PM_TAIL_FIRST_MAX 2048

/* The ring to @p peer failed with @p rc: say why and abort the job. */
void pm_write_failed(int peer, int rc);

/* Reserve @p len bytes in @p peer's ring without waiting.
 * @return 1 with *buf set, 0 when there is no room now. */
static inline __attribute__((always_inline)) int pm_reserve_out(int peer, size_t len, void **buf)
{
	int rc = pinshm_reserve(pm.peers[peer].out, len, buf, PINSHM_NONBLOCK);
	if (rc == 0)
		return 1;
	if (rc != -EAGAIN && rc != -ETIMEDOUT)
		pm_write_failed(peer, rc);
	return 0;
}

/* EAGER payloads up to this ask for their record's lines ahead
 * (pm_claim_lines()): the record's two lines at most.  Longer ones measured
 * no faster so. */
#define PM_CLAIM_EAGER (2 * PM_LINE - PINSHM_RECORD_HEADER - sizeof(struct rec_eager))

/*
 * Ask for the lines of the next record to @p peer, @p len bytes with the
 * ring's header, for writing (a write-intent prefetch), before the record
 * is built.  Its receiver, waiting, holds the first line: the record's
 * first store into it waits until the line comes back, and asked for
 * early it comes while the envelope is made.  A hint only: a record
 * that goes to the ring's start instead finds its lines as before.
 */
static inline __attribute__((always_inline)) void pm_claim_lines(int peer, size_t len)
{
	const pinshm_channel_t *ch = pm.peers[peer].out;
	for (size_t o = 0; o < len; o += PM_LINE) {
		const uint8_t *line = producer_ahead(ch, o);
#if defined(__x86_64__) || defined(__i386__)
		__asm__ volatile("prefetchw %0" ::"m"(*line)); /* a compiler's prefetch asks to read, not to write */
#else
		__builtin_prefetch(line, 1);
#endif
	}
}

/* Write an EAGER record of @p bytes at @p data. @return 1, or 0 without room. */
static inline __attribute__((always_inline)) int pm_write_eager(int peer, const struct pm_comm *c, int tag,
							      uint8_t flags, uint64_t sid, const void *data,
							      size_t bytes)
{
	void *buf;
	bool with_sid = (flags & REC_SYNC) || bytes > PM_LINE_ALIGNED_EAGER;
	size_t hdr = with_sid ? sizeof(struct rec_eager_sync) : sizeof(struct rec_eager);
	size_t len = hdr + bytes;
	bool align = bytes <= PM_LINE_END_EAGER;
	if (!pm_reserve_out(peer, align ? len + PM_LINE - 16 : len, &buf))
		return 0;
	struct rec_eager *r = buf;
	if (align) {
		/* End the record on a cache line: the next one starts on a line
		 * of its own and, when small, takes one line to fetch.  The ring
		 * puts a 16-byte header before the payload, 16-byte aligned. */
		uintptr_t end = ((uintptr_t)buf + len + 15) & ~(uintptr_t)15;
		len += (PM_LINE - end % PM_LINE) % PM_LINE;
	}
	/* The payload past the record's first line before that line: its
	 * reader polls the commit word there, and each write to it while it
	 * reads takes the line back. */
	size_t head = bytes;
	uintptr_t first_end = (((uintptr_t)buf - 16) | (PM_LINE - 1)) + 1; /* the ring's header: 16 bytes */
	if (bytes > PM_TAIL_FIRST_MIN && bytes <= PM_TAIL_FIRST_MAX && (uintptr_t)buf + hdr + bytes > first_end) {
		head = first_end > (uintptr_t)buf + hdr ? first_end - ((uintptr_t)buf + hdr) : 0;
		memcpy((char *)buf + hdr + head, (const char *)data + head, bytes - head);
	}
	r->h.type = REC_EAGER;
	r->h.flags = flags | (with_sid ? REC_SID : 0);
	r->h.from = (uint16_t)pm.local_rank;
	r->src = c->rank;
	r->tag = tag;
	r->len = (uint32_t)bytes;
	r->ctx = c->ctx;
	if (with_sid)
		((struct rec_eager_sync *)buf)->sid = sid;
	if (head)
		memcpy((char *)buf + hdr, data, head);
	/* Nothing past len written: the ring need not clear the rest of the
	 * reservation again, in the line after the record's. */
	pinshm_commit(pm.peers[peer].out, len, PINSHM_LEN_ONLY);
	return 1;
}

/* pm_send_now(), for the blocking send's path. */
static inline __attribute__((always_inline)) bool pm_send_now_inline(struct pm_comm *c, const void *buf, int count,
								    MPI_Datatype dtype, int dest, int tag,
								    enum pm_family family)
{
	int peer = c->local[dest];
	size_t bytes;
	const void *data = pm_flat_data(buf, count, dtype, &bytes);
	if (!data || bytes > pm.cfg.eager || pm.peers[peer].sendq.head)
		return false; /* to be packed, too long, or it would pass sends still queued */
	if (bytes <= PM_CLAIM_EAGER && pm.cfg.claim_lines)
		pm_claim_lines(peer, PINSHM_RECORD_HEADER + sizeof(struct rec_eager) + bytes);
	if (!pm_write_eager(peer, c, tag, 0, 0, data, bytes))
		return false;
	pm_count_pinshm(family, bytes);
	return true;
}

#endif /* PINSHM_MPI_PLUGIN_H */
