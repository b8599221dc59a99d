/*
 * coll_nb.c - the nonblocking collectives carried through a communicator's
 * area (coll.h): MPI_Ibarrier, MPI_Ibcast, MPI_Ireduce, MPI_Iallreduce,
 * MPI_Iallgather.
 *
 * Each call takes the path its blocking twin takes (coll_ops.c), decided
 * from what must match at every rank only; where the area is off it goes
 * to the library's MPI_I... unchanged.  A call made while the
 * communicator's agreement is under way waits for its end (the end of this
 * file).  A carried call is an op of kind
 * OP_COLL with a handle like any op's (ops.c), so every wait and test call
 * completes it (complete.c), MPI_Request_free lets it run on to its end,
 * and MPI_Cancel is refused.  Its state (struct nb) runs the steps the
 * blocking call would run, with the same data in the same halves, but
 * never waits: each step's try looks at the flags and returns where they
 * are not there yet.  The engine tries every pending call at each pass
 * (pm_progress()), in the order they were made; the call itself tries
 * once, and MPI_Wait on one looks at the flags it waits for between the
 * engine's passes (pm_coll_nb_look()).  Data that fits a small slot goes
 * there, as the blocking calls' does.  The order of the steps, and what a
 * blocking call does first: the contract in coll.h.
 *
 * A call's data is what MPI lets it use until it completes: the user's
 * buffers, read and written at each step; non-contiguous data is packed
 * at the call (Bcast at the root, Allgather) and unpacked at the end, and
 * the op holds its own reference to the datatype it uses later.  A user's
 * MPI_Op that a pending Ireduce or Iallreduce applies later is held here
 * too: MPI lets the user free it right after the call, so MPI_Op_free of a
 * held op only marks it, and the library frees it when the last pending
 * call that uses it completes.
 *
 * A communicator that spans nodes: below.  Limit: its layout is agreed at
 * its first blocking collective call (coll_hier.c; MPI_COMM_WORLD's at
 * MPI_Init), so the nonblocking calls made before that one, or on such a
 * communicator that never makes one, go to the library; so do those on a
 * communicator with members of another job (coll.c, area_key()).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "coll_hier.h"

struct nb {
	struct pm_link link; /* in `pending`, in the order the calls were made */
	struct pm_op *op;
	struct pm_coll *co;
	enum coll_call kind;
	int root;            /* Bcast, Reduce; else -1 */
	uint64_t first, last; /* its steps */
	uint64_t step;        /* the one running */
	bool posted;          /* this rank's part of it is written (or it has none) */
	unsigned passes;      /* fruitless tries (coll_poll_failed()) */
	int rc;               /* the first error, reported at completion */
	/* Bcast: the message; Allgather: this rank's block and the n blocks. */
	char *data, *all;
	uint64_t bytes;       /* Bcast: the message; Allgather: this rank's block */
	uint64_t sent;        /* Bcast at a receiver: the root's length (its first step) */
	uint64_t room;        /* Allgather: bytes of each block in `all` */
	uint64_t *lens;       /* Allgather: each rank's block's length, read at its first step where
				 they are not all its room (the usual call), or NULL */
	void *tmp, *tmp_all;  /* packed copies, or NULL */
	void *ubuf;           /* the user's buffer, unpacked into at the end (op->dtype) */
	int ucount;
	/* Reduce, Allreduce. */
	struct red r;         /* r.op: held (hold_op()) where user_op */
	bool user_op;
	const char *in;
	char *out;
	int count;
	/* A node phase of a call on a communicator that spans nodes: no op of
	 * its own; it runs once @p parent reaches its stage. */
	struct hnb *parent;
	int stage;
};

static bool hnb_at(const struct nb *b);
static void hnb_stage_done(struct nb *b);

/* Bytes of an Ibcast or Iallgather sender's message that go in its small
 * slot, after its length (len_piece()). */
#define NB_SMALL (COLL_SMALL - sizeof(uint64_t))

static struct pm_list pending;
static struct pm_list waiting; /* calls that wait for their communicator's agreement (below) */
static int hnb_progress(void);
static int waiting_progress(void);
unsigned pm_coll_nb_pending;

static void no_memory(void)
{
	fprintf(stderr, "pinshm-mpi: out of memory\n");
	PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
}

static inline void *at(const void *p, MPI_Aint d)
{
	return (void *)((uintptr_t)p + (uintptr_t)d);
}

static void note(struct nb *b, int rc)
{
	if (rc != MPI_SUCCESS && b->rc == MPI_SUCCESS)
		b->rc = rc;
}

/* ---- the user's operations that pending calls apply ------------------------- */

/* A user's op that @p calls pending calls apply; @p freed: the user
 * freed it meanwhile (MPI_Op_free), the last of them frees it. */
struct held_op {
	MPI_Op op;
	unsigned calls;
	bool freed;
};

static struct held_op *held;
static size_t nheld, held_room;

/* The predefined ops, which are never freed (a missing one is merely held). */
static bool predefined(MPI_Op op)
{
	static const MPI_Op named[] = {MPI_MAX,	 MPI_MIN,  MPI_SUM,    MPI_PROD,   MPI_LAND,	 MPI_BAND,   MPI_LOR,
				       MPI_BOR,	 MPI_LXOR, MPI_BXOR,   MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE, MPI_NO_OP};
	for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
		if (op == named[i])
			return true;
	return false;
}

static struct held_op *find_held(MPI_Op op)
{
	for (size_t i = 0; i < nheld; i++)
		if (held[i].op == op)
			return &held[i];
	return NULL;
}

/* A pending call applies @p op later: @return whether it is held for it. */
static bool hold_op(MPI_Op op)
{
	if (predefined(op))
		return false;
	struct held_op *h = find_held(op);
	if (!h) {
		if (nheld == held_room) {
			size_t room = held_room ? 2 * held_room : 4;
			struct held_op *more = realloc(held, room * sizeof(*more));
			if (!more)
				no_memory();
			held = more;
			held_room = room;
		}
		h = &held[nheld++];
		*h = (struct held_op){.op = op};
	}
	h->calls++;
	return true;
}

/* A call that held @p op completed: the last one frees it if the user did. */
static void release_op(MPI_Op op)
{
	struct held_op *h = find_held(op);
	if (!h || --h->calls > 0)
		return;
	bool freed = h->freed;
	*h = held[--nheld];
	if (freed)
		PMPI_Op_free(&op);
}

/* At MPI_Finalize, after the last progress: a call still pending (erroneous:
 * every one must be completed before) never lets go of its op, so each op
 * the user freed is freed here, and the list goes. */
void pm_coll_nb_teardown(void)
{
	for (size_t i = 0; i < nheld; i++)
		if (held[i].freed)
			PMPI_Op_free(&held[i].op);
	free(held);
	held = NULL;
	nheld = held_room = 0;
}

/* Where a pending call holds *@p op, the free waits for its completion
 * (MPI_OP_NULL in *@p op at once, as MPI says); else the library frees it. */
int MPI_Op_free(MPI_Op *op)
{
	struct held_op *h = op ? find_held(*op) : NULL;
	if (!h)
		return PMPI_Op_free(op);
	if (h->freed) /* a copy of a handle freed already: erroneous */
		return pm_comm_error(MPI_COMM_WORLD, MPI_ERR_OP);
	h->freed = true;
	*op = MPI_OP_NULL;
	return MPI_SUCCESS;
}

/* ---- the flags, without waiting ---------------------------------------- */

/* Whether every rank in [@p from, @p to) has its flag (done or arrive) >= @p s. */
static bool flags_at(const struct pm_coll *co, int from, int to, bool done, uint64_t s)
{
	for (int r = from; r < to; r++) {
		_Atomic uint64_t *w = done ? &co->flags[r]->done : &co->flags[r]->arrive;
		if (atomic_load_explicit(w, memory_order_acquire) < s)
			return false;
	}
	return true;
}

static uint64_t own_done(const struct pm_coll *co)
{
	return atomic_load_explicit(&co->flags[co->rank]->done, memory_order_relaxed);
}

/* ---- one step ---------------------------------------------------------------- */

/* Whether this rank writes data at each step of @p b (Barrier: posts only). */
static bool writes(const struct nb *b)
{
	return b->kind != CALL_IBCAST || b->co->rank == b->root;
}

/* The ranks whose data this rank reads at each step: [*from, *to). */
static void reads(const struct nb *b, int *from, int *to)
{
	int n = b->co->size, me = b->co->rank;
	*from = 0;
	*to = n;
	if (b->kind == CALL_IBCAST) {
		*from = me == b->root ? 0 : b->root;
		*to = me == b->root ? 0 : b->root + 1;
	} else if (b->kind == CALL_IREDUCE && me != b->root) {
		*to = 0;
	}
}

/* Bytes of piece @p i of @p total in pieces of @p piece: 0 past its end
 * (a block shorter than its call's steps). */
static size_t piece_len(uint64_t total, uint64_t i, size_t piece)
{
	uint64_t off = i * piece;
	return off >= total ? 0 : total - off < piece ? (size_t)(total - off) : piece;
}

static uint64_t pieces(uint64_t bytes, size_t half)
{
	return (bytes + half - 1) / half;
}

/* Steps of an Ibcast or Iallgather of @p bytes (the root's, the longest
 * block): one at least, whose head carries the senders' lengths. */
static uint64_t len_steps(uint64_t bytes, size_t half)
{
	return bytes ? pieces(bytes, half) : 1;
}

/*
 * A rank reserves an Ibcast's or an Iallgather's steps from its own count
 * at the call (coll.h); at the first step it reads the root's length or
 * every rank's, which is what every rank's steps follow.  Where that takes
 * @p steps other than those reserved, the call's end moves, and so do the
 * calls reserved after it on the area: none of them has begun a step (this
 * rank runs the steps in order, and this call's first one runs now), and
 * they lie after it in `pending`, as reserved (launch(), hnb_launch()).
 */
static void resteps(struct nb *b, uint64_t steps)
{
	uint64_t last = b->first + steps - 1;
	if (last == b->last)
		return;
	for (struct pm_link *l = b->link.next; l; l = l->next) {
		struct nb *o = pm_container(l, struct nb, link);
		if (o->co == b->co) {
			o->first = o->first - b->last + last;
			o->last = o->last - b->last + last;
			o->step = o->first;
		}
	}
	b->co->step = b->co->step - b->last + last;
	b->last = last;
}

/* Where rank @p r's piece of step @p s lies: its half, or its small slot
 * after its length where the sender's length @p len fits there (the
 * first step of an Ibcast or Iallgather, as MPI_Bcast's). */
static uint8_t *len_piece(const struct pm_coll *co, int r, uint64_t s, uint64_t i, uint64_t len)
{
	return i == 0 && len <= NB_SMALL ? coll_small(co, r, s) + sizeof(len) : coll_half(co, r, s);
}

static void write_part(struct nb *b, uint64_t s)
{
	struct pm_coll *co = b->co;
	uint64_t i = s - b->first;
	uint8_t *half = coll_half(co, co->rank, s);
	if (b->kind == CALL_IBCAST || b->kind == CALL_IALLGATHER) {
		size_t len = piece_len(b->bytes, i, co->half_bytes);
		if (i == 0) /* the sender's length, beside its flags */
			memcpy(coll_small(co, co->rank, s), &b->bytes, sizeof(b->bytes));
		if (len)
			coll_copy_in(len_piece(co, co->rank, s, i, b->bytes), b->data + i * co->half_bytes, len,
				     coll_streams(co, len));
	} else if (b->kind == CALL_IREDUCE || b->kind == CALL_IALLREDUCE) {
		const struct red *r = &b->r;
		int64_t e0 = (int64_t)i * r->per_chunk;
		int k = b->count - e0 < r->per_chunk ? (int)(b->count - e0) : r->per_chunk;
		MPI_Aint off = (MPI_Aint)e0 * r->extent;
		uint8_t *to = r->small ? coll_small(co, co->rank, s) : half;
		if (r->dense)
			coll_copy_in(to, at(b->in, off + r->tlb), (size_t)k * r->size,
				     coll_streams(co, (uint64_t)k * r->size));
		else
			note(b, pm_pack(at(b->in, off), k, r->type, to, (uint64_t)k * r->size));
	}
}

/* An Iallgather's first step: every rank's length (its own known), kept
 * where they are not all this rank's room (the usual call: uniform),
 * MPI_ERR_TRUNCATE where one is longer than its room (it takes what fits,
 * as MPI_Allgather), and the steps of the longest. */
static void allgather_lens(struct nb *b, uint64_t s)
{
	struct pm_coll *co = b->co;
	uint64_t most = b->bytes, len;
	bool uniform = b->bytes == b->room;
	for (int r = 0; r < co->size && uniform; r++) {
		if (r == co->rank)
			continue;
		memcpy(&len, coll_small(co, r, s), sizeof(len));
		uniform = len == b->bytes;
	}
	if (!uniform) {
		b->lens = malloc((size_t)co->size * sizeof(*b->lens));
		if (!b->lens)
			no_memory();
		for (int r = 0; r < co->size; r++) {
			if (r == co->rank)
				b->lens[r] = b->bytes;
			else
				memcpy(&b->lens[r], coll_small(co, r, s), sizeof(b->lens[r]));
			if (b->lens[r] > b->room)
				note(b, MPI_ERR_TRUNCATE);
			most = b->lens[r] > most ? b->lens[r] : most;
		}
	}
	resteps(b, len_steps(most, co->half_bytes));
}

static void read_part(struct nb *b, uint64_t s)
{
	struct pm_coll *co = b->co;
	uint64_t i = s - b->first, off = i * co->half_bytes;
	if (b->kind == CALL_IBCAST && co->rank != b->root) {
		/* A root that sent more than this rank's room: what fits, and
		 * MPI_ERR_TRUNCATE; less: what it sent.  Its length sets the
		 * steps (resteps()). */
		if (i == 0) {
			memcpy(&b->sent, coll_small(co, b->root, s), sizeof(b->sent));
			if (b->sent > b->bytes)
				note(b, MPI_ERR_TRUNCATE);
			resteps(b, len_steps(b->sent, co->half_bytes));
		}
		size_t n = piece_len(b->sent < b->bytes ? b->sent : b->bytes, i, co->half_bytes);
		if (n)
			memcpy(b->data + off, len_piece(co, b->root, s, i, b->sent), n);
	} else if (b->kind == CALL_IALLGATHER) {
		if (i == 0)
			allgather_lens(b, s);
		for (int r = 0; r < co->size; r++) {
			/* What fits of what rank r sent: its own, unless in place. */
			uint64_t len = b->lens ? b->lens[r] : b->bytes;
			size_t n = piece_len(len < b->room ? len : b->room, i, co->half_bytes);
			if (n && (r != co->rank || b->data != b->all + (uint64_t)r * b->room))
				memcpy(b->all + (uint64_t)r * b->room + off, len_piece(co, r, s, i, len), n);
		}
	} else if (b->kind == CALL_IALLREDUCE || (b->kind == CALL_IREDUCE && co->rank == b->root)) {
		const struct red *r = &b->r;
		int64_t e0 = (int64_t)i * r->per_chunk;
		int k = b->count - e0 < r->per_chunk ? (int)(b->count - e0) : r->per_chunk;
		note(b, red_fold(co, r, s, k, at(b->out, (MPI_Aint)e0 * r->extent), 0, co->size, 0));
	}
}

/* @p b cannot complete (a member died, or a wait on its area failed):
 * its steps end here, and it completes with an error; the calls after it
 * on the area give up too (try_step() looks at the error first). */
static bool give_up(struct nb *b)
{
	note(b, MPI_ERR_OTHER);
	b->step = b->last + 1;
	return false;
}

/* Whether every rank whose data @p b's step reads, [*@p from, *@p to),
 * has posted it. */
static bool reads_came(const struct nb *b, int *from, int *to)
{
	reads(b, from, to);
	return flags_at(b->co, *from, *to, false, b->step);
}

/* Try the step of @p b that runs: @return whether it is finished. */
static bool try_step(struct nb *b)
{
	struct pm_coll *co = b->co;
	uint64_t s = b->step;
	if (!b->posted) {
		/* Its stage first: a phase that gave up before its call
		 * reached it would move the call's stage past one still
		 * running (a leaders' request left pending, or never made). */
		if (b->parent && !hnb_at(b))
			return false; /* an earlier phase of its call runs first */
		if (coll_error(co) != MPI_SUCCESS)
			return give_up(b);
		if (own_done(co) != s - 1)
			return false; /* an earlier call's step runs first (coll.h) */
		bool w = writes(b);
		if (w && b->kind != CALL_IBARRIER && s > 2 && co->known_done < s - 2) {
			if (!flags_at(co, 0, co->size, true, s - 2)) {
				if (coll_poll_failed(co, &b->passes, 0, co->size, true, s - 2))
					return give_up(b);
				return false; /* someone still reads half s & 1 */
			}
			coll_seen_done(co, s - 2);
		}
		if (w) {
			write_part(b, s);
			coll_post(co, s);
		}
		b->posted = true;
	}
	int from, to;
	if (!reads_came(b, &from, &to))
		return coll_poll_failed(co, &b->passes, from, to, false, s) ? give_up(b) : false;
	if (to - from == co->size)
		coll_seen_done(co, s - 1);
	read_part(b, s);
	coll_finish(co, s);
	b->posted = false;
	b->step++;
	return true;
}

/* ---- a call's life ------------------------------------------------------ */

/* @p b's steps are all done (or it had none): unpack, complete its op. */
static void finish(struct nb *b)
{
	struct pm_op *op = b->op;
	if (b->last >= b->first) { /* it was pending */
		pm_list_remove(&pending, &b->link);
		pm_coll_nb_pending--;
	}
	if (b->parent) { /* its data is the parent's */
		free(b->lens);
		free(b->r.acc);
		free(b->r.x);
		hnb_stage_done(b);
		free(b);
		return;
	}
	if (b->kind == CALL_IBCAST && b->tmp && b->co->rank != b->root &&
	    (b->rc == MPI_SUCCESS || b->rc == MPI_ERR_TRUNCATE))
		note(b, pm_unpack(b->tmp, b->sent < b->bytes ? b->sent : b->bytes, b->ubuf, b->ucount, op->dtype));
	if (b->kind == CALL_IALLGATHER && b->tmp_all && (b->rc == MPI_SUCCESS || b->rc == MPI_ERR_TRUNCATE))
		note(b, b->lens ? blocks_unpack(b->ubuf, b->ucount, op->dtype, b->co->size, b->tmp_all, b->room, b->lens, -1)
				: blocks_move(b->ubuf, b->ucount, op->dtype, b->co->size, b->tmp_all, b->room, false));
	op->st_error = b->rc;
	if (b->user_op)
		release_op(b->r.op);
	free(b->tmp);
	free(b->tmp_all);
	free(b->lens);
	free(b->r.acc);
	free(b->r.x);
	free(b);
	pm_op_complete(op); /* may release it (MPI_Request_free), and the communicator */
}

int pm_coll_nb_progress(void)
{
	int did = 0;
	struct pm_link *l = pending.head;
	while (l) {
		struct pm_link *next = l->next;
		struct nb *b = pm_container(l, struct nb, link);
		while (b->step <= b->last && try_step(b))
			did++;
		if (b->step > b->last)
			finish(b);
		l = next;
	}
	if (waiting.head)
		did += waiting_progress();
	return did + hnb_progress();
}

/* Whether the first pending call's step may go on: the flags its posted
 * step reads have come, or it has yet to post (try_step() decides). */
static bool first_ready(void)
{
	struct nb *b = pm_container(pending.head, struct nb, link);
	int from, to;
	return !b->posted || reads_came(b, &from, &to);
}

int pm_coll_nb_look(void)
{
	unsigned looks = coll_looks();
	if (pm.in_progress || !pending.head)
		return 0;
	for (unsigned k = 0; !first_ready(); k++) {
		if (k == looks)
			return 0;
		coll_relax();
	}
	pm.in_progress = 1; /* as in pm_progress(): what the calls do may call back */
	int did = pm_coll_nb_progress();
	pm.in_progress = 0;
	return did;
}

void coll_nb_drain(struct pm_coll *co)
{
	if (co->size < 2 || !co->flags)
		return;
	unsigned idle = 0;
	while (own_done(co) < co->step && coll_error(co) == MPI_SUCCESS) {
		if (pm_progress())
			idle = 0;
		else
			pm_idle(&idle, false);
	}
}

/* A nonblocking collective's op on @p comm, its handle in *@p request.
 * @return NULL (*@p rc: why) where it has none. */
static struct pm_op *coll_op_new(MPI_Comm comm, MPI_Request *request, int *rc)
{
	struct pm_op *op = pm_op_new(OP_COLL);
	op->family = FAM_COUNT; /* counted here, not as point to point */
	op->counted = true;
	op->st_source = op->st_tag = 0; /* what Open MPI's collective requests report */
	pm_op_attach(op, pm_comm_find(comm));
	*rc = pm_op_handle(op);
	if (*rc != MPI_SUCCESS) {
		pm_op_free(op);
		return NULL;
	}
	*request = op->handle;
	op->state = ST_STREAM;
	return op;
}

/* A call on @p comm carried through @p co: its op (@p given, or a new one
 * with its handle in *@p request).  @return NULL (*@p rc: why) where it
 * has none. */
static struct nb *nb_new(struct pm_coll *co, enum coll_call kind, MPI_Comm comm, struct pm_op *given,
			 MPI_Request *request, int *rc)
{
	struct nb *b = malloc(sizeof(*b)); /* and cleared: cheaper than glibc's calloc */
	if (!b)
		return no_memory(), NULL;
	pm_clear(b, sizeof(*b));
	struct pm_op *op = given ? given : coll_op_new(comm, request, rc);
	if (!op) {
		free(b);
		return NULL;
	}
	b->op = op;
	b->co = co;
	b->kind = kind;
	b->root = -1;
	return b;
}

/* Reserve @p steps steps for @p b (the same number at every rank) and
 * start it, or finish it at once where it has none. */
static int launch(struct nb *b, uint64_t steps)
{
	struct pm_coll *co = b->co;
	b->first = co->step + 1;
	b->step = b->first;
	co->step += steps;
	b->last = co->step;
	if (steps == 0) {
		finish(b);
		return MPI_SUCCESS;
	}
	pm_list_push(&pending, &b->link);
	pm_coll_nb_pending++;
	while (b->step <= b->last && try_step(b))
		;
	if (b->step > b->last)
		finish(b);
	return MPI_SUCCESS;
}

/* The op keeps its own reference to @p type, which it uses at the end. */
static void hold(struct nb *b, MPI_Datatype type)
{
	b->op->dtype = type;
	note(b, pm_op_hold_type(b->op));
}

/* ---- communicators that span nodes -------------------------------------------- */

/*
 * A nonblocking call on a communicator that spans nodes (coll_hier.c's
 * layout, agreed by an earlier blocking call) runs the shape of its
 * blocking twin as stages, one after the other: node phases (a struct nb
 * on the node's area, its steps reserved at the call, in the call order at
 * every rank of the node, and run once the call reaches that stage) and
 * the leaders' phases (the library's nonblocking call on the leaders'
 * communicator, started when the call reaches it and tested by the
 * engine).  A leader starts a call's leaders' phases only once every
 * earlier call of the communicator that has some started all of its own
 * (which calls have some depends only on what matches at every rank), so
 * the leaders make the library's calls in one order; a blocking call of
 * the communicator first lets the pending ones complete (hier_nb_drain()).  The data
 * travels packed (MPI_BYTE) through the node phases, in room of the
 * call's own; the reductions' leaders' phase is the blocking one's
 * (MPI_Ireduce to a leader, then MPI_Ibcast for Iallreduce), so every rank
 * gets the same bits as from MPI_Allreduce.
 *   Ibarrier: node barrier; leaders' MPI_Iallreduce of the status (below);
 *     the leader's status byte to its node (a node Ibcast: one step, as
 *     a node barrier).
 *   Ibcast: the root to its node; leaders' MPI_Ibcast; the leader of every
 *     other node to it.
 *   Ireduce, Iallreduce: node reduce to the leader; leaders' MPI_Ireduce
 *     (and MPI_Ibcast); the leader to its node (Iallreduce) or to the
 *     root's node (Ireduce, where the root does not lead its node).
 *   Iallgather: the node's Iallgather of its ranks' blocks; the leaders'
 *     MPI_Iallgatherv of the nodes' blocks; the leader's to its node; every
 *     rank puts them in rank order at the end.
 * A member's death is seen on its own node only (its area).  So that the
 * other nodes' ranks do not complete with MPI_SUCCESS (and wrong data),
 * each call passes a status on: Ibcast's is the root's node's leader's
 * (its node phase failed), a byte after the message; the other calls'
 * leaders MPI_Iallreduce (MPI_MAX) whether their node phase failed (in
 * place of Ibarrier's MPI_Ibarrier, beside the MPI_Ireduce and the
 * MPI_Iallgatherv), and each leader's byte goes to its node after the
 * data of the last node phase (Ibarrier: the byte alone; Ireduce: only to
 * the root's node, where the root does not lead it); a call of no bytes
 * but Ibarrier has none (no node phase to fail).  A rank that reads a set
 * byte, or a leader that learnt that a node failed, completes with
 * MPI_ERR_OTHER through the communicator's error handler, as a rank that
 * sees the death itself does: from the call that completes it, once all
 * its stages ran (a node phase that fails only keeps its error), so that
 * a handler that ends the process runs after this rank passed the news
 * on.  (Ireduce: a rank that neither leads its node nor reads a byte,
 * with no result, may complete with MPI_SUCCESS.)
 */
enum st_kind { ST_NODE, ST_LEAD, ST_LOCAL };
#define HNB_STAGES 6

struct hnb;
typedef int (*lead_fn)(struct hnb *x, MPI_Request *req);
typedef void (*local_fn)(struct hnb *x);

struct hnb {
	struct pm_link link;   /* in `hpending` */
	struct pm_op *op;
	struct pm_hier *h;
	uint64_t lead_seq;     /* its place among the calls with a leaders' phase here */
	int nstages, stage;
	struct {
		enum st_kind kind;
		lead_fn lead;
		local_fn local;
		bool started;
	} st[HNB_STAGES];
	MPI_Request req;
	MPI_Request req2;      /* the reductions' and Iallgather's leaders: the status beside the data */
	int rc;
	bool user_op, unpack;
	bool status;           /* x->bytes counts a status byte after the data (Ibcast, the reductions,
				  Ibarrier) */
	char *stbyte;          /* the status byte in x->tmp this rank reads at the end, or NULL */
	int failed, any_failed; /* the leaders: this node's phase failed; some node's did (status_start()) */
	/* the call's data */
	int root, count;
	MPI_Op mop;
	char *tmp;             /* packed bytes (Ibcast; a reduction's result to a node) */
	uint64_t bytes;
	void *ubuf, *acc, *acc_base;
	int *ncount, *ndispl; /* Iallgather: the nodes' bytes and where they lie in tmp */
	bool allgather;
};

static struct pm_list hpending;

static bool hnb_at(const struct nb *b)
{
	return b->parent->stage == b->stage;
}

static void hnb_note(struct hnb *x, int rc)
{
	if (rc != MPI_SUCCESS && x->rc == MPI_SUCCESS)
		x->rc = rc;
}

static void hnb_stage_done(struct nb *b)
{
	struct hnb *x = b->parent;
	hnb_note(x, b->rc);
	x->stage++;
}

static void allgather_out(struct hnb *x);

static void hnb_finish(struct hnb *x)
{
	pm_list_remove(&hpending, &x->link);
	pm_coll_nb_pending--;
	x->h->nb_done++;
	struct pm_op *op = x->op;
	if (x->rc == MPI_SUCCESS && (x->any_failed || (x->stbyte && *x->stbyte))) {
		fprintf(stderr,
			"pinshm-mpi: rank %d (world rank %d): a rank of the communicator on another node died: "
			"the collective call cannot complete\n",
			x->h->rank, pm.world_rank);
		hnb_note(x, MPI_ERR_OTHER); /* reported by the call that completes it */
	}
	if (x->unpack && x->rc == MPI_SUCCESS)
		hnb_note(x, pm_unpack(x->tmp, x->bytes - x->status, x->ubuf, x->count, op->dtype));
	if (x->allgather && x->rc == MPI_SUCCESS)
		allgather_out(x);
	free(x->ncount);
	free(x->ndispl);
	op->st_error = x->rc;
	if (x->user_op)
		release_op(x->mop);
	free(x->tmp);
	free(x->acc_base);
	free(x);
	pm_op_complete(op);
}

/* Iallgather's end: the blocks, in node order in x->tmp (x->bytes each),
 * to the user's buffer in rank order. */
static void allgather_out(struct hnb *x)
{
	const struct pm_hier *h = x->h;
	const struct pm_type *t = pm_type_info(x->op->dtype);
	if (!t)
		return hnb_note(x, MPI_ERR_TYPE);
	MPI_Aint stride = t->extent * (MPI_Aint)x->count;
	for (int r = 0; r < h->size && x->rc == MPI_SUCCESS; r++)
		hnb_note(x, pm_unpack(x->tmp + x->ndispl[h->node_of[r]] + (uint64_t)h->node_rank[r] * x->bytes, x->bytes,
				      (char *)x->ubuf + (MPI_Aint)r * stride, x->count, x->op->dtype));
}

/* Move @p x on as far as it goes now: @return whether it moved. */
static bool hnb_try(struct hnb *x)
{
	bool moved = false;
	while (x->stage < x->nstages) {
		int k = x->stage;
		if (x->st[k].kind == ST_NODE)
			return moved; /* its nb runs it */
		if (x->st[k].kind == ST_LOCAL) {
			x->st[k].local(x);
		} else {
			if (!x->st[k].started) {
				if (x->h->lead_turn != x->lead_seq)
					return moved; /* an earlier call's leaders' phases start first */
				int rc = x->st[k].lead(x, &x->req);
				x->st[k].started = true;
				bool more = false;
				for (int j = k + 1; j < x->nstages; j++)
					more = more || x->st[j].kind == ST_LEAD;
				if (!more) /* its last: the next call's may start */
					x->h->lead_turn++;
				if (rc != MPI_SUCCESS) {
					hnb_note(x, rc);
					x->req = MPI_REQUEST_NULL;
				}
			}
			int flag = 1;
			if (x->req != MPI_REQUEST_NULL) {
				int rc = PMPI_Test(&x->req, &flag, MPI_STATUS_IGNORE);
				hnb_note(x, rc);
				if (rc != MPI_SUCCESS)
					flag = 1;
			}
			if (!flag)
				return moved;
			if (x->req2 != MPI_REQUEST_NULL) {
				int rc = PMPI_Test(&x->req2, &flag, MPI_STATUS_IGNORE);
				hnb_note(x, rc);
				if (rc != MPI_SUCCESS) {
					x->req2 = MPI_REQUEST_NULL;
					flag = 1;
				}
				if (!flag)
					return moved;
			}
		}
		x->stage++;
		moved = true;
	}
	hnb_finish(x);
	return true;
}

static int hnb_progress(void)
{
	int did = 0;
	struct pm_link *l = hpending.head;
	while (l) {
		struct pm_link *next = l->next;
		did += hnb_try(pm_container(l, struct hnb, link));
		l = next;
	}
	return did;
}

void hier_nb_drain(struct pm_hier *h)
{
	unsigned idle = 0;
	while (h->nb_done < h->nb_seq) {
		if (pm_progress())
			idle = 0;
		else
			pm_idle(&idle, false);
	}
}

/* The layout of @p comm for a nonblocking call, or NULL: only where a
 * blocking call agreed on it already (as nb_area()). */
static struct pm_hier *nb_hier(MPI_Comm comm)
{
	const struct pm_comm *c = pm.active ? pm_comm_find(comm) : NULL;
	return c && c->mixed && c->coll ? pm_hier_for(comm) : NULL;
}

static struct hnb *hnb_new(struct pm_hier *h, MPI_Comm comm, MPI_Request *request, int *rc)
{
	struct hnb *x = calloc(1, sizeof(*x));
	if (!x)
		return no_memory(), NULL;
	x->op = coll_op_new(comm, request, rc);
	if (!x->op) {
		free(x);
		return NULL;
	}
	x->h = h;
	x->req = MPI_REQUEST_NULL;
	x->req2 = MPI_REQUEST_NULL;
	x->rc = MPI_SUCCESS;
	return x;
}

/* A node phase: an nb of @p kind on the node's area, its @p steps
 * reserved now. */
static struct nb *hnb_node(struct hnb *x, enum coll_call kind, uint64_t steps)
{
	struct pm_coll *co = x->h->node;
	struct nb *b = calloc(1, sizeof(*b));
	if (!b)
		return no_memory(), NULL;
	b->co = co;
	b->kind = kind;
	b->root = -1;
	b->parent = x;
	b->stage = x->nstages;
	x->st[x->nstages++].kind = ST_NODE;
	b->first = b->step = co->step + 1;
	co->step += steps;
	b->last = co->step;
	return b;
}

static void hnb_lead(struct hnb *x, lead_fn f)
{
	x->st[x->nstages].kind = ST_LEAD;
	x->st[x->nstages++].lead = f;
}

static void no_local(struct hnb *x)
{
	(void)x;
}

static void hnb_local(struct hnb *x, local_fn f)
{
	x->st[x->nstages].kind = ST_LOCAL;
	x->st[x->nstages++].local = f;
}

/* Start @p x: its node phases pending (an empty one done at once), and as
 * far as it goes now. */
static int hnb_launch(struct hnb *x, struct nb **nodes, int n)
{
	x->h->nb_seq++;
	bool leads = false;
	for (int k = 0; k < x->nstages; k++)
		leads = leads || x->st[k].kind == ST_LEAD;
	if (leads) /* the same calls at every leader: decided from what matches */
		x->lead_seq = x->h->lead_seq++;
	pm_list_push(&hpending, &x->link);
	pm_coll_nb_pending++;
	for (int i = 0; i < n; i++) {
		struct nb *b = nodes[i];
		if (b->last < b->first) { /* no steps (one rank, no data): nothing to run */
			x->st[b->stage].kind = ST_LOCAL;
			x->st[b->stage].local = no_local;
			free(b->r.acc);
			free(b->r.x);
			free(b);
			continue;
		}
		pm_list_push(&pending, &b->link);
		pm_coll_nb_pending++;
	}
	pm_progress();
	return MPI_SUCCESS;
}

/* A node Ibcast of x->bytes at x->tmp from local rank @p from. */
static struct nb *node_bcast(struct hnb *x, int from)
{
	struct pm_coll *co = x->h->node;
	struct nb *b = hnb_node(x, CALL_IBCAST, co->size > 1 && x->bytes ? pieces(x->bytes, co->half_bytes) : 0);
	b->root = from;
	b->bytes = x->bytes;
	b->data = x->tmp;
	return b;
}

/* The leaders: MPI_Iallreduce (MPI_MAX) whether their node's phase failed,
 * into x->any_failed (@p req: the request). */
static int status_start(struct hnb *x, MPI_Request *req)
{
	x->failed = x->rc != MPI_SUCCESS;
	return PMPI_Iallreduce(&x->failed, &x->any_failed, 1, MPI_INT, MPI_MAX, x->h->leaders, req);
}

/* status_start() beside the leaders' phase's own request. */
static void status_beside(struct hnb *x)
{
	int rc = status_start(x, &x->req2);
	if (rc != MPI_SUCCESS) {
		hnb_note(x, rc);
		x->req2 = MPI_REQUEST_NULL;
	}
}

/* At the leader, after the leaders' phase: the status byte for its node. */
static void status_mark(struct hnb *x)
{
	*x->stbyte = x->rc != MPI_SUCCESS || x->any_failed;
}

/* Ibarrier's leaders' phase: an MPI_Iallreduce of the status, which
 * waits for every leader as MPI_Ibarrier does. */
static int lead_barrier(struct hnb *x, MPI_Request *req)
{
	return status_start(x, req);
}

static int lead_bcast(struct hnb *x, MPI_Request *req)
{
	if (x->h->my_node == x->h->node_of[x->root]) /* the root's node: whether its phase failed */
		x->tmp[x->bytes - 1] = x->rc != MPI_SUCCESS;
	return PMPI_Ibcast(x->tmp, (int)x->bytes, MPI_BYTE, x->h->node_of[x->root], x->h->leaders, req);
}

static int hier_ibarrier(struct pm_hier *h, MPI_Comm comm, MPI_Request *request)
{
	int rc;
	struct hnb *x = hnb_new(h, comm, request, &rc);
	if (!x)
		return rc;
	x->status = true;
	x->bytes = 1;
	x->tmp = calloc(1, 1);
	if (!x->tmp)
		no_memory();
	x->stbyte = x->tmp;
	struct nb *nodes[2];
	int n = 0, size = h->node->size;
	nodes[n++] = hnb_node(x, CALL_IBARRIER, size > 1);
	if (is_leader(h)) {
		hnb_lead(x, lead_barrier);
		hnb_local(x, status_mark);
	}
	nodes[n++] = node_bcast(x, 0); /* the status byte: one step, as a node barrier's */
	return hnb_launch(x, nodes, n);
}

static int hier_ibcast(struct pm_hier *h, void *buffer, int count, MPI_Datatype type, int root, uint64_t bytes,
		       MPI_Comm comm, MPI_Request *request)
{
	int rc;
	struct hnb *x = hnb_new(h, comm, request, &rc);
	if (!x)
		return rc;
	x->op->dtype = type;
	hnb_note(x, pm_op_hold_type(x->op));
	x->root = root;
	x->status = bytes > 0;
	x->bytes = bytes + x->status;
	x->count = count;
	x->ubuf = buffer;
	x->tmp = calloc(1, bytes + 1);
	if (!x->tmp)
		no_memory();
	x->stbyte = x->status ? x->tmp + bytes : NULL;
	if (h->rank == root && bytes)
		hnb_note(x, pm_pack(buffer, count, type, x->tmp, bytes));
	x->unpack = h->rank != root && bytes > 0;
	struct nb *nodes[1];
	int n = 0, rn = h->node_of[root];
	if (h->my_node == rn)
		nodes[n++] = node_bcast(x, h->node_rank[root]);
	if (is_leader(h) && bytes)
		hnb_lead(x, lead_bcast);
	if (h->my_node != rn)
		nodes[n++] = node_bcast(x, 0);
	return hnb_launch(x, nodes, n);
}

static int lead_allgather(struct hnb *x, MPI_Request *req)
{
	status_beside(x);
	return PMPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x->tmp, x->ncount, x->ndispl, MPI_BYTE,
				x->h->leaders, req);
}

/* Iallgather: each node's blocks gathered by its ranks (the node's
 * Iallgather), the leaders' MPI_Iallgatherv of the nodes' blocks, the
 * leader's to its node; at the end every rank puts them in rank order. */
static int hier_iallgather(struct pm_hier *h, const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf,
			   int rcount, MPI_Datatype rtype, uint64_t bytes, MPI_Comm comm, MPI_Request *request)
{
	int rc;
	struct hnb *x = hnb_new(h, comm, request, &rc);
	if (!x)
		return rc;
	x->op->dtype = rtype;
	hnb_note(x, pm_op_hold_type(x->op));
	x->allgather = bytes > 0;
	x->bytes = bytes;
	x->count = rcount;
	x->ubuf = recvbuf;
	x->ncount = calloc((size_t)h->nnodes, sizeof(int));
	x->ndispl = calloc((size_t)h->nnodes, sizeof(int));
	uint64_t total = bytes * (uint64_t)h->size;
	x->tmp = malloc(total + 1);
	if (!x->ncount || !x->ndispl || !x->tmp)
		no_memory();
	x->tmp[total] = 0;
	x->stbyte = bytes ? x->tmp + total : NULL; /* after the blocks, in the node Ibcast */
	for (int j = 0, off = 0; j < h->nnodes; off += x->ncount[j++]) {
		x->ncount[j] = h->node_size[j] * (int)bytes;
		x->ndispl[j] = off;
	}
	/* This rank's block, packed (in place: its own block of recvbuf). */
	void *mine_tmp = NULL;
	char *mine;
	if (sendbuf == MPI_IN_PLACE) {
		const struct pm_type *t = pm_type_info(rtype);
		MPI_Aint ext = t ? t->extent : 0;
		mine = contiguous((char *)recvbuf + (MPI_Aint)h->rank * rcount * ext, rcount, rtype, 1, bytes, true,
				  &mine_tmp, &x->rc);
	} else {
		mine = contiguous((void *)(uintptr_t)sendbuf, scount, stype, 1, bytes, true, &mine_tmp, &x->rc);
	}
	char *node_all = x->tmp + x->ndispl[h->my_node];
	if (mine && bytes)
		memcpy(node_all + (uint64_t)h->node_rank[h->rank] * bytes, mine, bytes);
	free(mine_tmp);
	struct nb *nodes[2];
	int n = 0;
	struct pm_coll *co = h->node;
	struct nb *b = hnb_node(x, CALL_IALLGATHER, co->size > 1 && bytes ? pieces(bytes, co->half_bytes) : 0);
	b->bytes = b->room = bytes;
	b->all = node_all;
	b->data = node_all + (uint64_t)h->node_rank[h->rank] * bytes;
	nodes[n++] = b;
	if (is_leader(h) && bytes) {
		hnb_lead(x, lead_allgather);
		hnb_local(x, status_mark);
	}
	b = hnb_node(x, CALL_IBCAST, co->size > 1 && total ? pieces(total + 1, co->half_bytes) : 0);
	b->root = 0;
	b->bytes = total ? total + 1 : 0;
	b->data = x->tmp;
	nodes[n++] = b;
	return hnb_launch(x, nodes, n);
}

/* ---- reductions ---- */

static int lead_reduce(struct hnb *x, MPI_Request *req)
{
	struct pm_hier *h = x->h;
	int to = x->root < 0 ? 0 : h->node_of[x->root];
	if (x->status) /* whether any node's phase failed, beside the data */
		status_beside(x);
	if (h->my_node == to)
		return PMPI_Ireduce(MPI_IN_PLACE, x->acc, x->count, x->op->dtype, x->mop, to, h->leaders, req);
	return PMPI_Ireduce(x->acc, NULL, x->count, x->op->dtype, x->mop, to, h->leaders, req);
}

static int lead_rbcast(struct hnb *x, MPI_Request *req)
{
	return PMPI_Ibcast(x->acc, x->count, x->op->dtype, 0, x->h->leaders, req);
}

/* At the leader: its result packed for its node, and the status byte. */
static void pack_acc(struct hnb *x)
{
	hnb_note(x, pm_pack(x->acc, x->count, x->op->dtype, x->tmp, x->bytes - x->status));
	if (x->status)
		x->tmp[x->bytes - 1] = x->rc != MPI_SUCCESS || x->any_failed;
}

static int hier_ireduce(struct pm_hier *h, const struct red *rp, const void *sendbuf, void *recvbuf, int count,
			int root, MPI_Comm comm, MPI_Request *request)
{
	int rc;
	struct hnb *x = hnb_new(h, comm, request, &rc);
	if (!x)
		return rc;
	x->op->dtype = rp->type;
	hnb_note(x, pm_op_hold_type(x->op));
	struct red r = *rp;
	red_layout(&r, x->op->dtype, h->node->half_bytes ? h->node->half_bytes : SIZE_MAX);
	r.op = rp->op;
	x->mop = rp->op;
	x->user_op = hold_op(rp->op);
	x->root = root;
	x->count = count;
	x->status = count > 0;
	x->bytes = (uint64_t)count * r.size + x->status;
	x->ubuf = recvbuf;
	int rn = root < 0 ? -1 : h->node_of[root];
	bool root_leads = root < 0 || h->leader[rn] == root;
	/* The node's result at its leader: the user's buffer where the leader
	 * takes the result, else room of the call's own. */
	x->acc = recvbuf;
	if (is_leader(h) && root >= 0 && !(root_leads && h->my_node == rn))
		x->acc = red_room(&r, count, &x->acc_base);
	bool to_node = root < 0 || (h->my_node == rn && !root_leads); /* a node phase after the leaders' */
	if (to_node) {
		x->tmp = malloc(x->bytes ? x->bytes : 1);
		if (!x->tmp)
			no_memory();
		x->unpack = !is_leader(h) && (root < 0 || h->rank == root);
		x->stbyte = x->status ? x->tmp + x->bytes - 1 : NULL;
	}
	struct nb *nodes[2];
	int n = 0;
	struct pm_coll *co = h->node;
	nodes[n] = hnb_node(x, CALL_IREDUCE, co->size > 1 ? ((uint64_t)count + r.per_chunk - 1) / r.per_chunk : 0);
	struct nb *b = nodes[n++];
	b->root = 0;
	b->in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	b->out = x->acc;
	b->count = count;
	if (!r.dense) {
		size_t room = red_span(&r, count < r.per_chunk ? count : r.per_chunk);
		r.acc = malloc(room);
		r.x = malloc(room);
		if (!r.acc || !r.x)
			no_memory();
	}
	b->r = r;
	if (co->size < 2 && is_leader(h) && b->in != x->acc) /* one rank: its data is the node's */
		hnb_note(x, typed_copy(b->in, x->acc, count, r.type, x->bytes - x->status));
	if (is_leader(h)) {
		hnb_lead(x, lead_reduce);
		if (root < 0)
			hnb_lead(x, lead_rbcast);
		if (to_node)
			hnb_local(x, pack_acc);
	}
	if (to_node)
		nodes[n++] = node_bcast(x, 0);
	return hnb_launch(x, nodes, n);
}

/* Whether a reduction is carried hierarchically: as coll_hier.c decides
 * for the blocking calls (hier_carries()). */
static bool nb_hier_carries(const struct pm_hier *h, struct red *r, MPI_Datatype type, MPI_Op op, int count)
{
	int commute = 0;
	if (count < 0 || op == MPI_OP_NULL || PMPI_Op_commutative(op, &commute) != MPI_SUCCESS)
		return false;
	if (!commute && !h->blocks)
		return false;
	return red_layout(r, type, h->half_min) &&
	       red_layout(r, type, h->node->half_bytes ? h->node->half_bytes : SIZE_MAX);
}

/* ---- the calls ------------------------------------------------------------ */

/* A call's arguments, as the user made it. */
struct nb_args {
	enum coll_call kind;
	const void *sendbuf;  /* Ireduce, Iallreduce, Iallgather */
	void *buf;            /* Ibcast's buffer; the others' receive buffer */
	int count;            /* Ibcast, Ireduce, Iallreduce: items; Iallgather: items sent */
	MPI_Datatype type;    /* their type; Iallgather: the send type */
	int rcount;           /* Iallgather: items received from each rank */
	MPI_Datatype rtype;   /* ... and their type */
	MPI_Op mop;           /* Ireduce, Iallreduce */
	int root;             /* Ibcast, Ireduce; else -1 */
	MPI_Comm comm;
};

/* The call through the library's nonblocking call, on @p comm. */
static int lib_start(const struct nb_args *a, MPI_Comm comm, MPI_Request *request)
{
	switch (a->kind) {
	case CALL_IBARRIER:
		return PMPI_Ibarrier(comm, request);
	case CALL_IBCAST:
		return PMPI_Ibcast(a->buf, a->count, a->type, a->root, comm, request);
	case CALL_IREDUCE:
		return PMPI_Ireduce(a->sendbuf, a->buf, a->count, a->type, a->mop, a->root, comm, request);
	case CALL_IALLREDUCE:
		return PMPI_Iallreduce(a->sendbuf, a->buf, a->count, a->type, a->mop, comm, request);
	default:
		return PMPI_Iallgather(a->sendbuf, a->count, a->type, a->buf, a->rcount, a->rtype, comm, request);
	}
}

/* On a communicator that spans nodes: the call carried hierarchically, or
 * -1 where the library takes it. */
static int hier_start(struct pm_hier *h, const struct nb_args *a, MPI_Request *request)
{
	if (a->kind == CALL_IBARRIER) {
		coll_count(CALL_IBARRIER, true, 0);
		return hier_ibarrier(h, a->comm, request);
	}
	if (a->kind == CALL_IBCAST) {
		const struct pm_type *t = pm_type_info(a->type);
		if (!t || a->count < 0 || a->root < 0 || a->root >= h->size ||
		    (uint64_t)t->size * (uint64_t)a->count >= INT_MAX)
			return -1;
		uint64_t bytes = (uint64_t)t->size * (uint64_t)a->count;
		coll_count(CALL_IBCAST, true, bytes);
		return hier_ibcast(h, a->buf, a->count, a->type, a->root, bytes, a->comm, request);
	}
	if (a->kind == CALL_IALLGATHER) {
		bool ip = a->sendbuf == MPI_IN_PLACE;
		const struct pm_type *t = pm_type_info(ip ? a->rtype : a->type);
		int n = ip ? a->rcount : a->count;
		uint64_t bytes = t && n >= 0 ? (uint64_t)t->size * (uint64_t)n : UINT64_MAX;
		if (bytes > INT_MAX / (uint64_t)h->size) /* the leaders' counts are ints */
			return -1;
		coll_count(CALL_IALLGATHER, true, bytes);
		return hier_iallgather(h, a->sendbuf, a->count, a->type, a->buf, a->rcount, a->rtype, bytes, a->comm,
				       request);
	}
	struct red r = {.op = a->mop};
	if (!nb_hier_carries(h, &r, a->type, a->mop, a->count) || a->root >= h->size ||
	    (uint64_t)a->count * r.size > INT_MAX)
		return -1;
	coll_count(a->kind, true, (uint64_t)a->count * r.size);
	return hier_ireduce(h, &r, a->sendbuf, a->buf, a->count, a->root, a->comm, request);
}

static int carry_ibarrier(struct pm_coll *co, const struct nb_args *a, struct pm_op *given, MPI_Request *request)
{
	coll_count(CALL_IBARRIER, true, 0);
	int rc;
	struct nb *b = nb_new(co, CALL_IBARRIER, a->comm, given, request, &rc);
	return b ? launch(b, co->size > 1) : rc;
}

static int carry_ibcast(struct pm_coll *co, const struct nb_args *a, struct pm_op *given, MPI_Request *request)
{
	const struct pm_type *t = pm_type_info(a->type);
	if (!t || a->count < 0 || a->root < 0 || a->root >= co->size)
		return -1;
	uint64_t bytes = (uint64_t)t->size * (uint64_t)a->count;
	coll_count(CALL_IBCAST, true, bytes);
	int rc;
	struct nb *b = nb_new(co, CALL_IBCAST, a->comm, given, request, &rc);
	if (!b)
		return rc;
	b->root = a->root;
	b->bytes = bytes;
	if (co->size == 1)
		return launch(b, 0);
	size_t flat;
	b->data = bytes ? (char *)(uintptr_t)pm_flat_data(a->buf, a->count, a->type, &flat) : NULL;
	if (!b->data && bytes) { /* not contiguous here (other ranks may differ): packed */
		b->data = b->tmp = malloc(bytes);
		if (!b->tmp)
			no_memory();
		b->ubuf = a->buf;
		b->ucount = a->count;
		hold(b, a->type);
		if (co->rank == a->root)
			note(b, pm_pack(a->buf, a->count, a->type, b->tmp, bytes));
	}
	return launch(b, len_steps(bytes, co->half_bytes));
}

/* Ireduce (root >= 0) or Iallreduce (root < 0). */
static int carry_ireduce(struct pm_coll *co, const struct nb_args *a, struct pm_op *given, MPI_Request *request)
{
	struct red r = {.op = a->mop};
	if (!red_carried(co, &r, a->type, a->count, a->root))
		return -1;
	coll_count(a->kind, true, (uint64_t)a->count * r.size);
	int rc;
	struct nb *b = nb_new(co, a->kind, a->comm, given, request, &rc);
	if (!b)
		return rc;
	b->root = a->root;
	b->in = a->sendbuf == MPI_IN_PLACE ? a->buf : a->sendbuf;
	b->out = a->buf;
	b->count = a->count;
	if (a->count == 0 || (co->size == 1 && a->sendbuf == MPI_IN_PLACE))
		return launch(b, 0);
	if (co->size == 1) { /* the result is the one rank's data */
		note(b, typed_copy(b->in, a->buf, a->count, a->type, (uint64_t)a->count * r.size));
		return launch(b, 0);
	}
	hold(b, a->type);
	red_layout(&r, b->op->dtype, co->half_bytes); /* the same signature: the same steps */
	if (!r.dense) { /* this rank's own room for a chunk */
		size_t room = red_span(&r, a->count < r.per_chunk ? a->count : r.per_chunk);
		r.acc = malloc(room);
		r.x = malloc(room);
		if (!r.acc || !r.x)
			no_memory();
	}
	r.small = (uint64_t)a->count * r.size <= COLL_SMALL; /* one step, in the small slots */
	b->r = r;
	b->user_op = hold_op(a->mop);
	return launch(b, ((uint64_t)a->count + (uint64_t)r.per_chunk - 1) / (uint64_t)r.per_chunk);
}

static int carry_iallgather(struct pm_coll *co, const struct nb_args *a, struct pm_op *given, MPI_Request *request)
{
	bool in_place = a->sendbuf == MPI_IN_PLACE;
	/* This rank's block: the bytes of its send items, or of its receive
	 * items in place (taken at once: a look-up lives until the next);
	 * what decides the path. */
	const struct pm_type *t = pm_type_info(in_place ? a->rtype : a->type);
	int count = in_place ? a->rcount : a->count;
	if (!t || count < 0)
		return -1;
	uint64_t bytes = (uint64_t)t->size * (uint64_t)count;
	coll_count(CALL_IALLGATHER, true, bytes);
	int rc;
	struct nb *b = nb_new(co, CALL_IALLGATHER, a->comm, given, request, &rc);
	if (!b)
		return rc;
	b->bytes = b->room = bytes;
	if (!in_place) { /* the room for each block: the receive items' bytes */
		const struct pm_type *rt = pm_type_info(a->rtype);
		b->room = rt && a->rcount >= 0 ? (uint64_t)rt->size * (uint64_t)a->rcount : 0;
		if (!rt || a->rcount < 0)
			note(b, rt ? MPI_ERR_COUNT : MPI_ERR_TYPE); /* the steps still run */
	}
	if (b->room) {
		b->all = contiguous(a->buf, a->rcount, a->rtype, co->size, b->room, in_place, &b->tmp_all, &b->rc);
		if (!b->all) /* out of memory: no way on together */
			PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
	}
	if (in_place && bytes) {
		b->data = b->all + (uint64_t)co->rank * bytes;
	} else if (bytes) {
		b->data = contiguous((void *)(uintptr_t)a->sendbuf, a->count, a->type, 1, bytes, true, &b->tmp,
				     &b->rc);
		if (!b->data)
			PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
	}
	if (b->tmp_all) {
		b->ubuf = a->buf;
		b->ucount = a->rcount;
		hold(b, a->rtype);
	}
	if (co->size == 1) { /* its own block: what fits */
		if (bytes != b->room) {
			if (!(b->lens = malloc(sizeof(*b->lens))))
				no_memory();
			b->lens[0] = bytes;
		}
		if (bytes > b->room)
			note(b, MPI_ERR_TRUNCATE);
		uint64_t got = bytes < b->room ? bytes : b->room;
		if (got && b->data != b->all)
			memmove(b->all, b->data, (size_t)got);
		return launch(b, 0);
	}
	return launch(b, len_steps(bytes, co->half_bytes));
}

/* Through @p co: the call, with @p given as its op (or a new one, its
 * handle in *@p request), or -1 where the library takes it. */
static int carry(struct pm_coll *co, const struct nb_args *a, struct pm_op *given, MPI_Request *request)
{
	switch (a->kind) {
	case CALL_IBARRIER:
		return carry_ibarrier(co, a, given, request);
	case CALL_IBCAST:
		return carry_ibcast(co, a, given, request);
	case CALL_IALLGATHER:
		return carry_iallgather(co, a, given, request);
	default:
		return carry_ireduce(co, a, given, request);
	}
}

/*
 * Calls that wait for their communicator's agreement (coll.c): the first
 * nonblocking call on a communicator starts it, and that call and every
 * later nonblocking one on the communicator wait, in the order made, until
 * it ends: then each is carried, or goes to the library on the
 * communicator's duplicate (co->lib_comm), and its op (whose handle the
 * user holds) follows the one or the other.  A waiting call keeps its own
 * references to its datatypes and its user's MPI_Op.
 */
struct waiting {
	struct pm_link link; /* in `waiting`, in the order the calls were made */
	struct pm_coll *co;
	struct pm_op *op;
	struct nb_args a;
	bool type_held, rtype_held, mop_held;
};

static int wait_agreement(struct pm_coll *co, const struct nb_args *a, MPI_Request *request)
{
	int rc;
	struct waiting *w = calloc(1, sizeof(*w));
	if (!w)
		return no_memory(), MPI_ERR_NO_MEM;
	w->op = coll_op_new(a->comm, request, &rc);
	if (!w->op) {
		free(w);
		return rc;
	}
	w->co = co;
	w->a = *a;
	/* Where a type is unknown (MPI_DATATYPE_NULL, a bad handle), the
	 * call that takes it later says so. */
	if (a->kind != CALL_IBARRIER && pm_type_info(a->type))
		pm_type_keep(&w->a.type, &w->type_held);
	if (a->kind == CALL_IALLGATHER && pm_type_info(a->rtype))
		pm_type_keep(&w->a.rtype, &w->rtype_held);
	if (a->kind == CALL_IREDUCE || a->kind == CALL_IALLREDUCE)
		w->mop_held = hold_op(a->mop);
	pm_list_push(&waiting, &w->link);
	pm_coll_nb_pending++;
	return MPI_SUCCESS;
}

/* Start @p w, its agreement ended. */
static void start_waiting(struct waiting *w)
{
	struct pm_op *op = w->op;
	MPI_Request unused;
	int rc = w->co->on ? carry(w->co, &w->a, op, &unused) : -1;
	if (rc < 0) {
		coll_count(w->a.kind, false, 0);
		rc = lib_start(&w->a, w->co->lib_comm, &op->preq);
		if (rc == MPI_SUCCESS) {
			pm_remote_start(op);
		} else {
			op->st_error = rc;
			pm_op_complete(op);
		}
	}
	pm_type_drop(&w->a.type, &w->type_held);
	pm_type_drop(&w->a.rtype, &w->rtype_held);
	if (w->mop_held)
		release_op(w->a.mop);
}

void coll_nb_agreed(struct pm_coll *co)
{
	struct pm_link *l = waiting.head;
	while (l) {
		struct pm_link *next = l->next;
		struct waiting *w = pm_container(l, struct waiting, link);
		if (w->co == co) {
			pm_list_remove(&waiting, &w->link);
			pm_coll_nb_pending--;
			start_waiting(w);
			free(w);
		}
		l = next;
	}
}

/* The engine's look at the agreements that calls wait for. */
static int waiting_progress(void)
{
	const struct pm_coll *tested = NULL;
	for (struct pm_link *l = waiting.head; l; l = l->next) {
		struct waiting *w = pm_container(l, struct waiting, link);
		if (w->co == tested)
			continue; /* its calls come in a row: one test of its agreement a pass */
		tested = w->co;
		if (coll_agree_test(w->co, false)) {
			coll_nb_agreed(w->co);
			return 1; /* the list changed: the next pass looks again */
		}
	}
	return 0;
}

/* Every nonblocking call: carried where the communicator's area or
 * layout is agreed, waiting where its agreement is under way, else passed
 * to the library. */
static int nb_call(const struct nb_args *a, MPI_Request *request)
{
	struct pm_hier *h = nb_hier(a->comm);
	int rc = h ? hier_start(h, a, request) : -1;
	if (rc >= 0)
		return rc;
	bool agreeing = false;
	struct pm_coll *co = h ? NULL : pm_coll_nb_area(a->comm, &agreeing);
	if (agreeing)
		return wait_agreement(co, a, request);
	rc = co ? carry(co, a, NULL, request) : -1;
	if (rc >= 0)
		return rc;
	coll_count(a->kind, false, 0);
	return lib_start(a, a->comm, request);
}

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request)
{
	struct nb_args a = {.kind = CALL_IBARRIER, .root = -1, .comm = comm};
	return nb_call(&a, request);
}

int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request)
{
	struct nb_args a = {
		.kind = CALL_IBCAST, .buf = buffer, .count = count, .type = datatype, .root = root, .comm = comm};
	return nb_call(&a, request);
}

/* Ireduce (@p root >= 0) or Iallreduce (@p root -1). */
static int reduce_call(enum coll_call kind, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
		       MPI_Op op, int root, MPI_Comm comm, MPI_Request *request)
{
	struct nb_args a = {.kind = kind,
			    .sendbuf = sendbuf,
			    .buf = recvbuf,
			    .count = count,
			    .type = datatype,
			    .mop = op,
			    .root = root,
			    .comm = comm};
	return nb_call(&a, request);
}

int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
		MPI_Comm comm, MPI_Request *request)
{
	if (root < 0) /* erroneous: the library says so */
		return PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request);
	return reduce_call(CALL_IREDUCE, sendbuf, recvbuf, count, datatype, op, root, comm, request);
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
		   MPI_Comm comm, MPI_Request *request)
{
	return reduce_call(CALL_IALLREDUCE, sendbuf, recvbuf, count, datatype, op, -1, comm, request);
}

int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
		   MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
	struct nb_args a = {.kind = CALL_IALLGATHER,
			    .sendbuf = sendbuf,
			    .buf = recvbuf,
			    .count = sendcount,
			    .type = sendtype,
			    .rcount = recvcount,
			    .rtype = recvtype,
			    .root = -1,
			    .comm = comm};
	return nb_call(&a, request);
}
