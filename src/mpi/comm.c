/*
 * comm.c - the communicators the plugin carries.
 *
 * A communicator is carried when the plugin saw it created (MPI_COMM_WORLD,
 * MPI_COMM_SELF, and what the creation calls below made from them) and it
 * is an intracommunicator.  When it is registered, each member computes,
 * for every other member, whether the pair shares the (pretend) node: those
 * pairs use pinshm for the communicator's whole life, the others the MPI
 * library, so that one pair never splits over two paths.
 *
 * Contexts: 1 is MPI_COMM_WORLD, 2 is MPI_COMM_SELF.  A communicator made
 * collectively over a carried parent gets splitmix64(parent, n) with the top
 * bit set, n counting the parent's creations: the same at every member with
 * no message (MPI orders the collective calls on a communicator), which also
 * serves MPI_Comm_idup.  Others (MPI_Comm_create_group, MPI_Intercomm_merge)
 * agree on a fresh one below 2^63 with one allreduce: the maximum of the
 * members' next free numbers, so no member already uses it.  Two
 * communicators may share a context only if no process belongs to both.
 *
 * MPI_Comm_free is seen through an attribute whose delete callback drops the
 * entry (the entry itself lives until no operation points to it).  An entry
 * whose last operation lets go inside the progress engine - possibly run by
 * the MPI library's progress loop during an unrelated call - is only queued
 * there: freeing its collective state calls PMPI_Comm_free and closes a
 * channel, which must not happen inside the library.  The next lookup of a
 * communicator by handle (each call on one, outside the engine) or
 * MPI_Finalize frees the queue.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

#define CTX_WORLD 1u
#define CTX_SELF 2u
#define CTX_DERIVED (1ull << 63)

static int keyval = MPI_KEYVAL_INVALID;
static uint64_t next_agreed = 16; /* the next context this process may propose */

/* Handle -> entry and context -> entry: small open-addressing tables. */
struct slot {
	uintptr_t key;
	struct pm_comm *c;
};
struct table {
	struct slot *s;
	size_t n, used;
};
static struct table by_handle, by_ctx;
static struct pm_comm *last;     /* the entry found last by handle */
static struct pm_comm *last_ctx; /* ... and by context (every record asks) */

/* Entries dropped inside the progress engine, in no table, freed later. */
static struct pm_comm **doomed;
static size_t ndoomed, doomed_room;

static void free_entry(struct pm_comm *c);

static void table_put(struct table *t, uintptr_t key, struct pm_comm *c);

/* Out of memory where the ranks must go on together: no way on. */
static void no_memory(void)
{
	fprintf(stderr, "pinshm-mpi: out of memory\n");
	PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
}

static void table_grow(struct table *t)
{
	struct table old = *t;
	t->n = t->n ? t->n * 2 : 64;
	t->used = 0;
	t->s = calloc(t->n, sizeof(*t->s));
	if (!t->s) {
		no_memory();
		return;
	}
	for (size_t i = 0; i < old.n; i++)
		if (old.s[i].c)
			table_put(t, old.s[i].key, old.s[i].c);
	free(old.s);
}

static void table_put(struct table *t, uintptr_t key, struct pm_comm *c)
{
	if ((t->used + 1) * 2 > t->n)
		table_grow(t);
	size_t i = pm_hash(key, t->n);
	while (t->s[i].c && t->s[i].key != key)
		i = (i + 1) & (t->n - 1);
	if (!t->s[i].c)
		t->used++;
	t->s[i].key = key;
	t->s[i].c = c;
}

static struct pm_comm *table_get(const struct table *t, uintptr_t key)
{
	if (!t->used)
		return NULL;
	for (size_t i = pm_hash(key, t->n); t->s[i].c; i = (i + 1) & (t->n - 1))
		if (t->s[i].key == key)
			return t->s[i].c;
	return NULL;
}

static void table_del(struct table *t, uintptr_t key)
{
	if (!t->used)
		return;
	size_t i = pm_hash(key, t->n);
	while (t->s[i].c && t->s[i].key != key)
		i = (i + 1) & (t->n - 1);
	if (!t->s[i].c)
		return;
	t->s[i].c = NULL;
	t->used--;
	for (size_t j = (i + 1) & (t->n - 1); t->s[j].c; j = (j + 1) & (t->n - 1)) {
		struct slot e = t->s[j];
		t->s[j].c = NULL;
		t->used--;
		table_put(t, e.key, e.c);
	}
}

/* Frees the queued entries; one freed here may queue another (its
 * PMPI_Comm_free may run the engine), taken by the same loop. */
static void free_doomed(void)
{
	while (ndoomed)
		free_entry(doomed[--ndoomed]);
}

struct pm_comm *pm_comm_find(MPI_Comm comm)
{
	if (ndoomed && !pm.in_progress)
		free_doomed();
	if (last && last->comm == comm)
		return last;
	struct pm_comm *c = table_get(&by_handle, (uintptr_t)comm);
	if (c)
		last = c;
	return c;
}

struct pm_comm *pm_comm_by_ctx(uint64_t ctx)
{
	if (last_ctx && last_ctx->ctx == ctx)
		return last_ctx;
	struct pm_comm *c = table_get(&by_ctx, (uintptr_t)ctx);
	if (c)
		last_ctx = c;
	return c;
}

uint64_t pm_splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint64_t pm_comm_derive(MPI_Comm parent)
{
	struct pm_comm *p = pm.active ? pm_comm_find(parent) : NULL;
	if (!p)
		return 0;
	p->derived++;
	return pm_splitmix64(p->ctx ^ pm_splitmix64(p->derived)) | CTX_DERIVED;
}

static void free_entry(struct pm_comm *c)
{
	while (c->unexp.head) {
		struct pm_unexp *u = pm_container(c->unexp.head, struct pm_unexp, link);
		pm_list_remove(&c->unexp, &u->link);
		pm_unexp_free(u);
	}
	pm_coll_free(c);
	free(c->local);
	free(c);
}

/* Queues @p c for free_doomed(): @return false where there is no room
 * (then it is freed at once, as before the queue existed). */
static bool defer_entry(struct pm_comm *c)
{
	if (ndoomed == doomed_room) {
		size_t room = doomed_room ? 2 * doomed_room : 4;
		struct pm_comm **more = realloc(doomed, room * sizeof(*more));
		if (!more)
			return false;
		doomed = more;
		doomed_room = room;
	}
	doomed[ndoomed++] = c;
	return true;
}

static void drop_entry(struct pm_comm *c)
{
	if (pm_comm_by_ctx(c->ctx) == c)
		table_del(&by_ctx, (uintptr_t)c->ctx);
	last_ctx = NULL;
	if (c->coll && pm.in_progress && defer_entry(c))
		return; /* not inside the engine: see the head of this file */
	free_entry(c);
}

/* MPI_Comm_free: the handle may name another communicator from now on,
 * but operations still pending on this one complete normally, so its
 * context keeps matching records until its last op lets go. */
static void forget(struct pm_comm *c)
{
	if (c->forgotten)
		return;
	c->forgotten = true;
	if (last == c)
		last = NULL;
	table_del(&by_handle, (uintptr_t)c->comm);
	if (c->refs == 0)
		drop_entry(c);
}

void pm_comm_release(struct pm_comm *c)
{
	if (c && c->refs && --c->refs == 0 && c->forgotten)
		drop_entry(c);
}

static int delete_attr(MPI_Comm comm, int key, void *value, void *extra)
{
	(void)comm;
	(void)key;
	(void)extra;
	pm_coll_settle(value); /* the library frees comm next: its agreement ends first */
	forget(value);
	return MPI_SUCCESS;
}

static struct pm_comm *make_entry(MPI_Comm comm, uint64_t ctx)
{
	int inter = 0;
	PMPI_Comm_test_inter(comm, &inter);
	if (inter)
		return NULL;
	/* Every rank of comm makes its entry (or none: an intercommunicator);
	 * one that could not would pass calls to the library while the others
	 * carry them, so a failure here ends the job. */
	struct pm_comm *c = calloc(1, sizeof(*c));
	if (!c)
		return no_memory(), NULL;
	c->comm = comm;
	c->ctx = ctx;
	PMPI_Comm_rank(comm, &c->rank);
	PMPI_Comm_size(comm, &c->size);
	c->local = malloc((size_t)c->size * sizeof(int));
	int *ranks = malloc((size_t)c->size * sizeof(int));
	int *world = malloc((size_t)c->size * sizeof(int));
	MPI_Group group = MPI_GROUP_NULL;
	if (!c->local || !ranks || !world || PMPI_Comm_group(comm, &group) != MPI_SUCCESS) {
		free(ranks);
		free(world);
		free(c->local);
		free(c);
		return no_memory(), NULL;
	}
	for (int i = 0; i < c->size; i++)
		ranks[i] = i;
	PMPI_Group_translate_ranks(group, c->size, ranks, pm.world_group, world);
	PMPI_Group_free(&group);
	for (int i = 0; i < c->size; i++) {
		int w = world[i];
		c->local[i] = (w >= 0 && w < pm.world_size) ? pm.world_local[w] : -1;
		if (c->local[i] < 0)
			c->mixed = true;
		if (w < 0 || w >= pm.world_size)
			c->foreign = true; /* then at every member: each sees another job's */
	}
	free(ranks);
	free(world);
	return c;
}

void pm_comm_register(MPI_Comm comm, uint64_t ctx)
{
	if (!pm.loaded || comm == MPI_COMM_NULL)
		return;
	if (ctx == 0) {
		/* Every member agrees, carrying traffic or not (its node may
		 * have fallen back while others did not). */
		int inter = 0;
		PMPI_Comm_test_inter(comm, &inter);
		if (inter)
			return;
		uint64_t mine = next_agreed;
		PMPI_Allreduce(&mine, &ctx, 1, MPI_UINT64_T, MPI_MAX, comm);
		next_agreed = ctx + 1;
	}
	if (!pm.active)
		return;
	struct pm_comm *c = make_entry(comm, ctx);
	if (!c)
		return;
	struct pm_comm *old = pm_comm_find(comm);
	if (old) /* a handle reused without our delete callback: drop the stale one */
		forget(old);
	table_put(&by_handle, (uintptr_t)comm, c);
	table_put(&by_ctx, (uintptr_t)ctx, c);
	last_ctx = NULL;
	if (comm != MPI_COMM_WORLD && comm != MPI_COMM_SELF)
		PMPI_Comm_set_attr(comm, keyval, c);
	pm_unexp_move_orphans(c);
}

int pm_comm_setup(void)
{
	int rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_attr, &keyval, NULL);
	if (rc != MPI_SUCCESS)
		return rc;
	pm_comm_register(MPI_COMM_WORLD, CTX_WORLD);
	pm_comm_register(MPI_COMM_SELF, CTX_SELF);
	if (!pm_comm_find(MPI_COMM_WORLD) || !pm_comm_find(MPI_COMM_SELF))
		return MPI_ERR_NO_MEM;
	return MPI_SUCCESS;
}

void pm_comm_teardown(void)
{
	free_doomed();
	free(doomed);
	doomed = NULL;
	ndoomed = doomed_room = 0;
	/* Forgotten entries are only in by_ctx, the others in by_handle. */
	for (size_t i = 0; i < by_ctx.n; i++) {
		struct pm_comm *c = by_ctx.s[i].c;
		if (c && c->forgotten)
			free_entry(c);
	}
	for (size_t i = 0; i < by_handle.n; i++)
		if (by_handle.s[i].c)
			free_entry(by_handle.s[i].c);
	free(by_handle.s);
	free(by_ctx.s);
	memset(&by_handle, 0, sizeof(by_handle));
	memset(&by_ctx, 0, sizeof(by_ctx));
	last = last_ctx = NULL;
	if (keyval != MPI_KEYVAL_INVALID)
		PMPI_Comm_free_keyval(&keyval);
}

int pm_comm_error(MPI_Comm comm, int code)
{
	if (code != MPI_SUCCESS)
		PMPI_Comm_call_errhandler(comm, code);
	return code;
}

/* ---- the calls that make communicators ------------------------------------ */

/* Made collectively over a parent: derive the context at every member. */
#define DERIVED(call, parent, newcomm)                     \
	do {                                               \
		int rc_ = (call);                          \
		uint64_t ctx_ = pm_comm_derive(parent);    \
		if (rc_ == MPI_SUCCESS && ctx_)            \
			pm_comm_register(*(newcomm), ctx_); \
		return rc_;                                \
	} while (0)

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
	DERIVED(PMPI_Comm_dup(comm, newcomm), comm, newcomm);
}

int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm)
{
	DERIVED(PMPI_Comm_dup_with_info(comm, info, newcomm), comm, newcomm);
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
	DERIVED(PMPI_Comm_split(comm, color, key, newcomm), comm, newcomm);
}

int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm)
{
	DERIVED(PMPI_Comm_split_type(comm, split_type, key, info, newcomm), comm, newcomm);
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm)
{
	DERIVED(PMPI_Comm_create(comm, group, newcomm), comm, newcomm);
}

int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[], int reorder,
		    MPI_Comm *newcomm)
{
	DERIVED(PMPI_Cart_create(comm, ndims, dims, periods, reorder, newcomm), comm, newcomm);
}

int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm)
{
	DERIVED(PMPI_Cart_sub(comm, remain_dims, newcomm), comm, newcomm);
}

int MPI_Graph_create(MPI_Comm comm, int nnodes, const int index[], const int edges[], int reorder,
		     MPI_Comm *newcomm)
{
	DERIVED(PMPI_Graph_create(comm, nnodes, index, edges, reorder, newcomm), comm, newcomm);
}

int MPI_Dist_graph_create(MPI_Comm comm, int n, const int sources[], const int degrees[], const int destinations[],
			  const int weights[], MPI_Info info, int reorder, MPI_Comm *newcomm)
{
	DERIVED(PMPI_Dist_graph_create(comm, n, sources, degrees, destinations, weights, info, reorder, newcomm),
		comm, newcomm);
}

int MPI_Dist_graph_create_adjacent(MPI_Comm comm, int indegree, const int sources[], const int sourceweights[],
				   int outdegree, const int destinations[], const int destweights[], MPI_Info info,
				   int reorder, MPI_Comm *newcomm)
{
	DERIVED(PMPI_Dist_graph_create_adjacent(comm, indegree, sources, sourceweights, outdegree, destinations,
						destweights, info, reorder, newcomm),
		comm, newcomm);
}

/* Collective over the new communicator only: agree on a context. */
int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm)
{
	int rc = PMPI_Comm_create_group(comm, group, tag, newcomm);
	if (rc == MPI_SUCCESS)
		pm_comm_register(*newcomm, 0);
	return rc;
}

int MPI_Intercomm_merge(MPI_Comm intercomm, int high, MPI_Comm *newcomm)
{
	int rc = PMPI_Intercomm_merge(intercomm, high, newcomm);
	if (rc == MPI_SUCCESS)
		pm_comm_register(*newcomm, 0);
	return rc;
}

/*
 * The new communicator exists when the request completes: an OP_IDUP op
 * watches the library's request and registers it then (engine.c).
 * @p fnewcomm is NULL for C.  For Fortran's MPI_COMM_IDUP (fortran.c) it is
 * the Fortran handle, and @p newcomm a cell from malloc that this call
 * takes: where the op is made, the handle is written and the cell freed
 * when the idup completes (MPI forbids reading the handle before); where
 * the parent is not carried, the handle is written at once, as Open MPI's
 * own binding does (its communicator exists from the call, only its
 * context comes later).
 */
int pm_comm_idup(MPI_Comm comm, MPI_Comm *newcomm, MPI_Fint *fnewcomm, MPI_Request *request)
{
	int rc = PMPI_Comm_idup(comm, newcomm, request);
	uint64_t ctx = pm_comm_derive(comm);
	if (rc != MPI_SUCCESS || !ctx) {
		if (fnewcomm) {
			if (rc == MPI_SUCCESS)
				*fnewcomm = PMPI_Comm_c2f(*newcomm);
			free(newcomm);
		}
		return rc;
	}
	struct pm_op *op = pm_op_new(OP_IDUP);
	op->preq = *request;
	op->newcomm = newcomm;
	op->fnewcomm = fnewcomm;
	op->new_ctx = ctx;
	op->family = FAM_COUNT;
	op->counted = true;
	rc = pm_op_handle(op);
	if (rc != MPI_SUCCESS) {
		if (fnewcomm)
			free(newcomm);
		pm_op_free(op);
		return rc;
	}
	op->state = ST_REMOTE;
	pm_list_push(&pm.remote, &op->rlink);
	*request = op->handle;
	return MPI_SUCCESS;
}

int MPI_Comm_idup(MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request)
{
	return pm_comm_idup(comm, newcomm, NULL, request);
}
