/*
 * coll_nb.c - the nonblocking collectives carried through a communicator's
 * area (coll.h): MPI_Ibarrier, MPI_Ibcast, MPI_Ireduce, MPI_Iallreduce,
 * MPI_Iallgather.
 *
 * Each call takes the path its blocking twin takes (coll_ops.c), decided
 * from what must match at every rank only; where the area is off, or not
 * agreed yet (nb_area()), it goes to the library's MPI_I... unchanged.  A carried call is an op of kind
 * OP_COLL with a handle like any op's (ops.c), so every wait and test call
 * completes it (complete.c), MPI_Request_free lets it run on to its end,
 * and MPI_Cancel is refused.  Its state (struct nb) runs the steps the
 * blocking call would run, with the same data in the same halves, but
 * never waits: each step's try looks at the flags and returns where they
 * are not there yet.  The engine tries every pending call at each pass
 * (pm_progress()), in the order they were made; the call itself tries
 * once.  The order of the steps, and what a blocking call does first: the
 * contract in coll.h.
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
 * Limit: a communicator's area is agreed at its first blocking
 * collective call (coll.c agrees with blocking collectives of the
 * library), so the nonblocking calls made before that one, or on a
 * communicator that never makes one, go to the library.
 */
#include <stdio.h>
#include <stdlib.h>

#include "coll_red.h"

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
	uint64_t bytes;       /* Bcast: the message; Allgather: one block */
	void *tmp, *tmp_all;  /* packed copies, or NULL */
	void *ubuf;           /* the user's buffer, unpacked into at the end (op->dtype) */
	int ucount;
	/* Reduce, Allreduce. */
	struct red r;         /* r.op: held (hold_op()) where user_op */
	bool user_op;
	const char *in;
	char *out;
	int count;
};

static struct pm_list pending;
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

/* Bytes of piece @p i of @p total in pieces of @p piece. */
static size_t piece_len(uint64_t total, uint64_t i, size_t piece)
{
	uint64_t off = i * piece;
	return total - off < piece ? (size_t)(total - off) : piece;
}

static void write_part(struct nb *b, uint64_t s)
{
	struct pm_coll *co = b->co;
	uint64_t i = s - b->first;
	uint8_t *half = coll_half(co, co->rank, s);
	if (b->kind == CALL_IBCAST || b->kind == CALL_IALLGATHER) {
		memcpy(half, b->data + i * co->half_bytes, piece_len(b->bytes, i, co->half_bytes));
	} else if (b->kind == CALL_IREDUCE || b->kind == CALL_IALLREDUCE) {
		const struct red *r = &b->r;
		int64_t e0 = (int64_t)i * r->per_chunk;
		int k = b->count - e0 < r->per_chunk ? (int)(b->count - e0) : r->per_chunk;
		MPI_Aint off = (MPI_Aint)e0 * r->extent;
		if (r->dense)
			memcpy(half, at(b->in, off + r->tlb), (size_t)k * r->size);
		else
			note(b, pm_pack(at(b->in, off), k, r->type, half, (uint64_t)k * r->size));
	}
}

static void read_part(struct nb *b, uint64_t s)
{
	struct pm_coll *co = b->co;
	uint64_t i = s - b->first, off = i * co->half_bytes;
	size_t len = piece_len(b->bytes, i, co->half_bytes);
	if (b->kind == CALL_IBCAST && co->rank != b->root) {
		memcpy(b->data + off, coll_half(co, b->root, s), len);
	} else if (b->kind == CALL_IALLGATHER) {
		for (int r = 0; r < co->size; r++)
			if (r != co->rank || b->data != b->all + (uint64_t)r * b->bytes) /* in place */
				memcpy(b->all + (uint64_t)r * b->bytes + off, coll_half(co, r, s), len);
	} else if (b->kind == CALL_IALLREDUCE || (b->kind == CALL_IREDUCE && co->rank == b->root)) {
		const struct red *r = &b->r;
		int64_t e0 = (int64_t)i * r->per_chunk;
		int k = b->count - e0 < r->per_chunk ? (int)(b->count - e0) : r->per_chunk;
		note(b, red_fold(co, r, s, k, at(b->out, (MPI_Aint)e0 * r->extent), 0, co->size, 0));
	}
}

/* @p b cannot complete (a member died, or a wait on its area failed):
 * its steps end here as done, so that the calls after it on the area end
 * too, and it completes with an error. */
static bool give_up(struct nb *b)
{
	note(b, MPI_ERR_OTHER);
	coll_finish(b->co, b->last);
	b->step = b->last + 1;
	return false;
}

/* Try the step of @p b that runs: @return whether it is finished. */
static bool try_step(struct nb *b)
{
	struct pm_coll *co = b->co;
	uint64_t s = b->step;
	if (!b->posted) {
		if (coll_error(co) != MPI_SUCCESS)
			return give_up(b);
		if (own_done(co) != s - 1)
			return false; /* an earlier call's step runs first (coll.h) */
		bool w = writes(b);
		if (w && b->kind != CALL_IBARRIER && s > 2 && !flags_at(co, 0, co->size, true, s - 2)) {
			if (coll_poll_failed(co, &b->passes, 0, co->size, true, s - 2))
				return give_up(b);
			return false; /* someone still reads half s & 1 */
		}
		if (w) {
			write_part(b, s);
			coll_post(co, s);
		}
		b->posted = true;
	}
	int from, to;
	reads(b, &from, &to);
	if (!flags_at(co, from, to, false, s))
		return coll_poll_failed(co, &b->passes, from, to, false, s) ? give_up(b) : false;
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
	if (b->kind == CALL_IBCAST && b->tmp && b->co->rank != b->root && b->rc == MPI_SUCCESS)
		note(b, pm_unpack(b->tmp, b->bytes, b->ubuf, b->ucount, op->dtype));
	if (b->kind == CALL_IALLGATHER && b->tmp_all && b->rc == MPI_SUCCESS)
		note(b, blocks_move(b->ubuf, b->ucount, op->dtype, b->co->size, b->tmp_all, b->bytes, false));
	op->st_error = b->rc;
	if (b->user_op)
		release_op(b->r.op);
	free(b->tmp);
	free(b->tmp_all);
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

/* The area of @p comm for a nonblocking call, or NULL: only where a
 * blocking call agreed on it already, since agreeing waits for every rank
 * and a nonblocking call must not.  The same at every rank: every blocking
 * collective call asks for the area first (pm_coll_for()), so it is agreed
 * at the same call of the communicator's sequence everywhere. */
static struct pm_coll *nb_area(MPI_Comm comm)
{
	const struct pm_comm *c = pm.active ? pm_comm_find(comm) : NULL;
	return c && c->coll ? pm_coll_nb_for(comm) : NULL;
}

/* A call on @p comm carried through @p co: its op, its handle in
 * *@p request.  @return NULL (*@p rc: why) where it has none. */
static struct nb *nb_new(struct pm_coll *co, enum coll_call kind, MPI_Comm comm, MPI_Request *request, int *rc)
{
	struct nb *b = calloc(1, sizeof(*b));
	if (!b)
		return no_memory(), NULL;
	struct pm_op *op = pm_op_new(OP_COLL);
	op->family = FAM_COUNT; /* counted here, not as point to point */
	op->counted = true;
	op->st_source = op->st_tag = 0; /* what Open MPI's collective requests report */
	pm_op_attach(op, pm_comm_find(comm));
	*rc = pm_op_handle(op);
	if (*rc != MPI_SUCCESS) {
		pm_op_free(op);
		free(b);
		return NULL;
	}
	*request = op->handle;
	op->state = ST_STREAM;
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

static uint64_t pieces(uint64_t bytes, size_t half)
{
	return (bytes + half - 1) / half;
}

/* ---- the calls ------------------------------------------------------------ */

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request)
{
	struct pm_coll *co = nb_area(comm);
	coll_count(CALL_IBARRIER, co != NULL, 0);
	if (!co)
		return PMPI_Ibarrier(comm, request);
	int rc;
	struct nb *b = nb_new(co, CALL_IBARRIER, comm, request, &rc);
	return b ? launch(b, co->size > 1) : rc;
}

int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request)
{
	struct pm_coll *co = nb_area(comm);
	const struct pm_type *t = co ? pm_type_info(datatype) : NULL;
	if (!t || count < 0 || root < 0 || root >= co->size) {
		coll_count(CALL_IBCAST, false, 0);
		return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
	}
	uint64_t bytes = (uint64_t)t->size * (uint64_t)count;
	coll_count(CALL_IBCAST, true, bytes);
	int rc;
	struct nb *b = nb_new(co, CALL_IBCAST, comm, request, &rc);
	if (!b)
		return rc;
	b->root = root;
	b->bytes = bytes;
	if (co->size == 1 || bytes == 0)
		return launch(b, 0);
	size_t flat;
	b->data = (char *)(uintptr_t)pm_flat_data(buffer, count, datatype, &flat);
	if (!b->data) { /* not contiguous here (other ranks may differ): packed */
		b->data = b->tmp = malloc(bytes);
		if (!b->tmp)
			no_memory();
		b->ubuf = buffer;
		b->ucount = count;
		hold(b, datatype);
		if (co->rank == root)
			note(b, pm_pack(buffer, count, datatype, b->tmp, bytes));
	}
	return launch(b, pieces(bytes, co->half_bytes));
}

/* Ireduce (@p root >= 0) or Iallreduce (@p root < 0), or -1 where the
 * library takes it (red_carried(), as the blocking calls decide). */
static int nb_reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
		     MPI_Comm comm, MPI_Request *request)
{
	enum coll_call kind = root < 0 ? CALL_IALLREDUCE : CALL_IREDUCE;
	struct pm_coll *co = nb_area(comm);
	struct red r = {.op = op};
	if (!red_carried(co, &r, datatype, count, root)) {
		coll_count(kind, false, 0);
		return -1;
	}
	coll_count(kind, true, (uint64_t)count * r.size);
	int rc;
	struct nb *b = nb_new(co, kind, comm, request, &rc);
	if (!b)
		return rc;
	b->root = root;
	b->in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	b->out = recvbuf;
	b->count = count;
	if (count == 0 || (co->size == 1 && sendbuf == MPI_IN_PLACE))
		return launch(b, 0);
	if (co->size == 1) { /* the result is the one rank's data */
		note(b, typed_copy(b->in, recvbuf, count, datatype, (uint64_t)count * r.size));
		return launch(b, 0);
	}
	hold(b, datatype);
	red_layout(&r, b->op->dtype, co->half_bytes); /* the same signature: the same steps */
	if (!r.dense) { /* this rank's own room for a chunk */
		size_t room = red_span(&r, count < r.per_chunk ? count : r.per_chunk);
		r.acc = malloc(room);
		r.x = malloc(room);
		if (!r.acc || !r.x)
			no_memory();
	}
	b->r = r;
	b->user_op = hold_op(op);
	return launch(b, ((uint64_t)count + (uint64_t)r.per_chunk - 1) / (uint64_t)r.per_chunk);
}

int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
		MPI_Comm comm, MPI_Request *request)
{
	int rc = root < 0 ? -1 : nb_reduce(sendbuf, recvbuf, count, datatype, op, root, comm, request);
	return rc >= 0 ? rc : PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request);
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
		   MPI_Comm comm, MPI_Request *request)
{
	int rc = nb_reduce(sendbuf, recvbuf, count, datatype, op, -1, comm, request);
	return rc >= 0 ? rc : PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}

int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
		   MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
	struct pm_coll *co = nb_area(comm);
	bool in_place = sendbuf == MPI_IN_PLACE;
	/* This rank's block: the bytes of its send items, or of its receive
	 * items in place (taken at once: a look-up lives until the next). */
	const struct pm_type *t = co ? pm_type_info(in_place ? recvtype : sendtype) : NULL;
	int count = in_place ? recvcount : sendcount;
	if (!t || count < 0) {
		coll_count(CALL_IALLGATHER, false, 0);
		return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
	}
	uint64_t bytes = (uint64_t)t->size * (uint64_t)count;
	coll_count(CALL_IALLGATHER, true, bytes);
	int rc;
	struct nb *b = nb_new(co, CALL_IALLGATHER, comm, request, &rc);
	if (!b)
		return rc;
	b->bytes = bytes;
	if (bytes == 0)
		return launch(b, 0);
	b->all = contiguous(recvbuf, recvcount, recvtype, co->size, bytes, in_place, &b->tmp_all, &b->rc);
	if (in_place)
		b->data = b->all ? b->all + (uint64_t)co->rank * bytes : NULL;
	else
		b->data = contiguous((void *)(uintptr_t)sendbuf, sendcount, sendtype, 1, bytes, true, &b->tmp, &b->rc);
	if (!b->all || !b->data) /* out of memory: no way on together */
		PMPI_Abort(comm, MPI_ERR_NO_MEM);
	if (b->tmp_all) {
		b->ubuf = recvbuf;
		b->ucount = recvcount;
		hold(b, recvtype);
	}
	if (co->size == 1) {
		memmove(b->all, b->data, b->data == b->all ? 0 : bytes);
		return launch(b, 0);
	}
	return launch(b, pieces(bytes, co->half_bytes));
}
