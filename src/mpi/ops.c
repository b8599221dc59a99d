/*
 * ops.c - the plugin's operations: allocation, wire ids, user handles,
 * buffers and statuses.
 *
 * Every send or receive the plugin carries is a struct pm_op.  Its wire id
 * (index in the table, generation) names it in CTS, DATA and ACK records;
 * a record naming a freed or reused op fails the generation check.
 *
 * What the user holds is always a real Open MPI request, which every MPI
 * call accepts:
 * - a nonblocking operation: an inactive persistent receive from
 *   MPI_PROC_NULL, taken from a pool of them and given back when the user
 *   is done with it (no allocation on the message path).  The plugin's
 *   Wait/Test calls complete it.  A Fortran caller gets, from
 *   MPI_Request_c2f, a generalized request made for the op then, which the
 *   plugin completes with the op: a wait that reaches the MPI library ends
 *   when the op is done.  MPI_Request_f2c maps it back.
 * - a nonblocking send written whole at once has no op: send.c gives it
 *   the library's completed request of a send to MPI_PROC_NULL;
 * - a persistent operation: an inactive persistent request of the library
 *   to MPI_PROC_NULL (persist.c).
 * A table maps those handles to ops.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"
#include "wire.h"

/* ---- lists ------------------------------------------------------------- */

void pm_list_push(struct pm_list *l, struct pm_link *e)
{
	e->next = NULL;
	e->prev = l->tail;
	if (l->tail)
		l->tail->next = e;
	else
		l->head = e;
	l->tail = e;
	l->length++;
}

void pm_list_remove(struct pm_list *l, struct pm_link *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		l->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		l->tail = e->prev;
	e->prev = e->next = NULL;
	l->length--;
}

/* ---- the op table -------------------------------------------------------- */

static void release_type(struct pm_op *op);

static struct pm_op **table; /* index -> op, NULL when free */
static uint32_t table_len, table_cap;
static struct pm_op *free_ops; /* recycled, linked through link.next */

static void die_nomem(void)
{
	fprintf(stderr, "pinshm-mpi: out of memory\n");
	PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
	abort();
}

struct pm_op *pm_op_new(enum pm_kind kind)
{
	struct pm_op *op = free_ops;
	uint32_t gen = 1, index;
	if (op) {
		free_ops = (struct pm_op *)(void *)op->link.next;
		gen = op->gen + 1;
		index = op->index;
	} else {
		op = malloc(sizeof(*op));
		if (!op)
			die_nomem();
		if (table_len == table_cap) {
			uint32_t cap = table_cap ? table_cap * 2 : 64;
			struct pm_op **t = realloc(table, cap * sizeof(*t));
			if (!t)
				die_nomem();
			table = t;
			table_cap = cap;
		}
		index = table_len++;
	}
	pm_clear(op, sizeof(*op));
	op->index = index;
	op->gen = gen ? gen : 1;
	op->kind = (uint8_t)kind;
	op->handle = MPI_REQUEST_NULL;
	op->fortran = MPI_REQUEST_NULL;
	op->preq = MPI_REQUEST_NULL;
	op->dtype = MPI_DATATYPE_NULL;
	op->st_source = MPI_ANY_SOURCE;
	op->st_tag = MPI_ANY_TAG;
	op->st_error = MPI_SUCCESS;
	op->reply_to = -1;
	op->peer_local = -1;
	table[index] = op;
	return op;
}

void pm_op_free(struct pm_op *op)
{
	if (op->memo_at)
		pm_complete_cool(op);
	pm_op_closed(op);
	free(op->tmp);
	op->tmp = NULL;
	release_type(op);
	pm_comm_release(op->comm);
	op->comm = NULL;
	table[op->index] = NULL;
	op->link.next = (struct pm_link *)(void *)free_ops;
	free_ops = op;
}

uint64_t pm_op_id(const struct pm_op *op)
{
	return ((uint64_t)op->gen << 32) | op->index;
}

struct pm_op *pm_op_by_id(uint64_t id)
{
	uint32_t index = (uint32_t)id, gen = (uint32_t)(id >> 32);
	if (index >= table_len || !table[index] || table[index]->gen != gen)
		return NULL;
	return table[index];
}

/* ---- handles: MPI_Request -> op -------------------------------------------- */

/* Open addressing, linear probing; deletion shifts the cluster back. */
static struct {
	MPI_Request key;
	struct pm_op *op;
} *slots;
static size_t nslots, nused;

static size_t slot_of(MPI_Request key)
{
	return pm_hash((uintptr_t)key, nslots);
}

static void map_put(MPI_Request key, struct pm_op *op);

static void map_grow(void)
{
	size_t old_n = nslots;
	__typeof__(slots) old = slots;
	nslots = nslots ? nslots * 2 : 256;
	slots = calloc(nslots, sizeof(*slots));
	if (!slots)
		die_nomem();
	nused = 0;
	for (size_t i = 0; i < old_n; i++)
		if (old[i].op)
			map_put(old[i].key, old[i].op);
	free(old);
}

static void map_put(MPI_Request key, struct pm_op *op)
{
	if ((nused + 1) * 2 > nslots)
		map_grow();
	size_t i = slot_of(key);
	while (slots[i].op && slots[i].key != key)
		i = (i + 1) & (nslots - 1);
	if (!slots[i].op)
		nused++;
	slots[i].key = key;
	slots[i].op = op;
}

static void map_del(MPI_Request key)
{
	if (!nslots)
		return;
	size_t i = slot_of(key);
	while (slots[i].op && slots[i].key != key)
		i = (i + 1) & (nslots - 1);
	if (!slots[i].op)
		return;
	slots[i].op = NULL;
	nused--;
	/* Re-place the rest of the cluster so that lookups still find it. */
	for (size_t j = (i + 1) & (nslots - 1); slots[j].op; j = (j + 1) & (nslots - 1)) {
		MPI_Request k = slots[j].key;
		struct pm_op *o = slots[j].op;
		slots[j].op = NULL;
		nused--;
		map_put(k, o);
	}
}

struct pm_op *pm_op_by_handle(MPI_Request req)
{
	if (!nused || req == MPI_REQUEST_NULL)
		return NULL;
	size_t i = slot_of(req);
	while (slots[i].op) {
		if (slots[i].key == req)
			return slots[i].op;
		i = (i + 1) & (nslots - 1);
	}
	return NULL;
}

/* Inactive persistent requests for nonblocking ops' handles. */
static MPI_Request *spare;
static size_t nspare, spare_cap;

int pm_op_handle(struct pm_op *op)
{
	if (nspare) {
		op->handle = spare[--nspare];
	} else {
		int rc = PMPI_Recv_init(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, &op->handle);
		if (rc != MPI_SUCCESS)
			return rc;
	}
	map_put(op->handle, op);
	return MPI_SUCCESS;
}

static void give_back_handle(MPI_Request h)
{
	if (nspare == spare_cap) {
		size_t cap = spare_cap ? spare_cap * 2 : 64;
		MPI_Request *s = realloc(spare, cap * sizeof(*s));
		if (!s) {
			PMPI_Request_free(&h);
			return;
		}
		spare = s;
		spare_cap = cap;
	}
	spare[nspare++] = h;
}

/* Generalized request callbacks, for an op's Fortran handle: a wait that
 * reaches the MPI library reads the status here, and freeing the request
 * there (MPI_Wait, MPI_Request_free in Fortran) ends the user's hold. */
static int greq_query(void *extra, MPI_Status *status)
{
	pm_op_status(extra, status);
	return MPI_SUCCESS;
}

static int greq_free(void *extra)
{
	struct pm_op *op = extra;
	if (op->fortran == MPI_REQUEST_NULL)
		return MPI_SUCCESS; /* the plugin frees it (pm_op_release) */
	map_del(op->fortran);
	op->fortran = MPI_REQUEST_NULL;
	if (op->state == ST_DONE && !op->completing)
		pm_op_release(op);
	else
		op->user_freed = true; /* released when it completes */
	return MPI_SUCCESS;
}

static int greq_cancel(void *extra, int complete)
{
	struct pm_op *op = extra;
	if (!complete && op->kind != OP_IDUP)
		pm_op_cancel(op);
	return MPI_SUCCESS;
}

MPI_Fint MPI_Request_c2f(MPI_Request request)
{
	struct pm_op *op = pm_op_by_handle(request);
	/* A persistent op's handle is the library's own (persist.c): Fortran's
	 * MPI_START and waits reach the plugin through fortran.c. */
	if (!op || op->persistent || op->handle != request)
		return PMPI_Request_c2f(request);
	if (op->fortran == MPI_REQUEST_NULL) {
		MPI_Request g;
		if (PMPI_Grequest_start(greq_query, greq_free, greq_cancel, op, &g) != MPI_SUCCESS)
			return PMPI_Request_c2f(request);
		op->fortran = g;
		map_put(g, op);
		if (op->state == ST_DONE)
			PMPI_Grequest_complete(g);
	}
	return PMPI_Request_c2f(op->fortran);
}

MPI_Request MPI_Request_f2c(MPI_Fint request)
{
	MPI_Request h = PMPI_Request_f2c(request);
	struct pm_op *op = pm_op_by_handle(h);
	return op && op->fortran == h ? op->handle : h;
}

/* Persistent ops get their handle from persist.c; it registers it here. */
void pm_op_register_handle(struct pm_op *op)
{
	map_put(op->handle, op);
}

void pm_op_release(struct pm_op *op)
{
	if (op->fortran != MPI_REQUEST_NULL) {
		MPI_Request g = op->fortran;
		map_del(g);
		op->fortran = MPI_REQUEST_NULL; /* greq_free: ours to free */
		PMPI_Request_free(&g);
	}
	if (op->handle != MPI_REQUEST_NULL) {
		map_del(op->handle);
		if (op->persistent)
			PMPI_Request_free(&op->handle);
		else
			give_back_handle(op->handle);
		op->handle = MPI_REQUEST_NULL;
	}
	pm_op_free(op);
}

void pm_op_complete(struct pm_op *op)
{
	if (op->state == ST_STREAM && op->kind == OP_RECV && pm.streaming)
		pm.streaming--;
	op->state = ST_DONE;
	if (op->memo_at)
		pm_complete_cool(op);
	if (op->kind == OP_SEND && pm.sends_inflight)
		pm.sends_inflight--;
	if (!op->cancelled && !op->counted) {
		op->counted = true;
		pm_count_pinshm(op->family, op->kind == OP_SEND ? op->bytes : op->st_bytes);
	}
	if (op->kind == OP_SEND && op->mode == MODE_BUFFERED && op->tmp) {
		size_t charge = op->bytes + MPI_BSEND_OVERHEAD;
		pm.buffered_used = pm.buffered_used > charge ? pm.buffered_used - charge : 0;
	}
	if (op->fortran != MPI_REQUEST_NULL) {
		op->completing = true; /* greq_free may run inside: it must not release */
		PMPI_Grequest_complete(op->fortran);
		op->completing = false;
	}
	if (op->user_freed)
		pm_op_release(op);
}

void pm_ops_teardown(void)
{
	pm_complete_teardown(); /* it remembers ops */
	while (nspare)
		PMPI_Request_free(&spare[--nspare]);
	free(spare);
	spare = NULL;
	spare_cap = 0;
	while (free_ops) {
		struct pm_op *op = free_ops;
		free_ops = (struct pm_op *)(void *)op->link.next;
		free(op);
	}
	for (uint32_t i = 0; i < table_len; i++)
		if (table[i]) {
			free(table[i]->tmp);
			free(table[i]);
		}
	free(table);
	table = NULL;
	table_len = table_cap = 0;
	free(slots);
	slots = NULL;
	nslots = nused = 0;
}

/* ---- buffers ----------------------------------------------------------- */

/* Whether the items of @p dtype lie in memory in the order MPI packs them,
 * with no hole: predefined types without holes qualify, and contiguous or
 * duplicated derived types of them; the others are packed (always correct,
 * one more copy). */
static bool type_is_flat(MPI_Datatype dtype)
{
	int ni, na, nd, combiner;
	if (PMPI_Type_get_envelope(dtype, &ni, &na, &nd, &combiner) != MPI_SUCCESS)
		return false;
	int size = 0;
	MPI_Aint lb, extent, tlb, textent;
	PMPI_Type_size(dtype, &size);
	PMPI_Type_get_extent(dtype, &lb, &extent);
	PMPI_Type_get_true_extent(dtype, &tlb, &textent);
	if (textent != size)
		return false;
	if (combiner == MPI_COMBINER_NAMED)
		return true;
	if ((combiner != MPI_COMBINER_CONTIGUOUS && combiner != MPI_COMBINER_DUP) || ni > 1 || nd != 1)
		return false;
	int ints[1];
	MPI_Aint addrs[1];
	MPI_Datatype inner;
	if (PMPI_Type_get_contents(dtype, ni, na, nd, ints, addrs, &inner) != MPI_SUCCESS)
		return false;
	int inner_size = 0;
	MPI_Aint inner_lb, inner_extent;
	PMPI_Type_size(inner, &inner_size);
	PMPI_Type_get_extent(inner, &inner_lb, &inner_extent);
	bool flat = type_is_flat(inner) && (combiner == MPI_COMBINER_DUP || ints[0] <= 1 || inner_extent == inner_size);
	int ic, x;
	PMPI_Type_get_envelope(inner, &x, &x, &x, &ic);
	if (ic != MPI_COMBINER_NAMED)
		PMPI_Type_free(&inner);
	return flat;
}

struct pm_type pm_type_cache[PM_TYPE_CACHE];

const struct pm_type *pm_type_fill(MPI_Datatype dtype)
{
	struct pm_type *t = pm_type_slot(dtype);
	MPI_Count size = 0;
	MPI_Aint lb, extent, tlb, textent;
	int ni, na, nd, combiner;
	if (PMPI_Type_size_x(dtype, &size) != MPI_SUCCESS || size < 0 ||
	    PMPI_Type_get_envelope(dtype, &ni, &na, &nd, &combiner) != MPI_SUCCESS)
		return NULL;
	if (combiner != MPI_COMBINER_NAMED) {
		/* A derived type must be committed: packing none of it says so
		 * (the library checks that there, and may crash elsewhere). */
		char none;
		int pos = 0;
		if (PMPI_Pack(&none, 0, dtype, &none, 0, &pos, pm.quiet_comm) != MPI_SUCCESS)
			return NULL;
	}
	PMPI_Type_get_extent(dtype, &lb, &extent);
	PMPI_Type_get_true_extent(dtype, &tlb, &textent);
	t->type = dtype;
	t->size = size;
	t->tlb = tlb;
	t->extent = extent;
	t->flat = type_is_flat(dtype);
	t->named = combiner == MPI_COMBINER_NAMED;
	return t;
}

int MPI_Type_free(MPI_Datatype *datatype)
{
	if (pm.active) /* filled only while carrying (never under MPI_THREAD_MULTIPLE) */
		memset(pm_type_cache, 0, sizeof(pm_type_cache));
	return PMPI_Type_free(datatype);
}

int pm_type_keep(MPI_Datatype *type, bool *held)
{
	const struct pm_type *t = pm_type_info(*type);
	if (!t)
		return MPI_ERR_TYPE;
	if (t->named || *held)
		return MPI_SUCCESS;
	MPI_Datatype dup;
	int rc = PMPI_Type_dup(*type, &dup);
	if (rc != MPI_SUCCESS)
		return rc;
	*type = dup;
	*held = true;
	return MPI_SUCCESS;
}

void pm_type_drop(MPI_Datatype *type, bool *held)
{
	if (*held) {
		memset(pm_type_cache, 0, sizeof(pm_type_cache)); /* its handle may come back */
		PMPI_Type_free(type);
		*held = false;
	}
}

/* An op keeps its own reference to a derived datatype that it uses after
 * the call that started it returns, as MPI lets the user free the type
 * meanwhile. */
int pm_op_hold_type(struct pm_op *op)
{
	return pm_type_keep(&op->dtype, &op->dtype_held);
}

static void release_type(struct pm_op *op)
{
	pm_type_drop(&op->dtype, &op->dtype_held);
}

int pm_op_buffer(struct pm_op *op, const void *buf, int count, MPI_Datatype dtype)
{
	const struct pm_type *t = pm_type_info(dtype);
	if (!t)
		return MPI_ERR_TYPE;
	op->ubuf = buf;
	op->count = count;
	op->dtype = dtype;
	op->bytes = (size_t)t->size * (size_t)count;
	if ((op->kind == OP_RECV || op->persistent) && !t->named && pm_op_hold_type(op) != MPI_SUCCESS)
		return MPI_ERR_TYPE;
	if (op->bytes == 0) {
		op->contiguous = true;
		op->data = NULL;
		return MPI_SUCCESS;
	}
	if (t->flat && (count == 1 || t->extent == t->size)) {
		op->contiguous = true;
		op->data = (char *)((uintptr_t)buf + (uintptr_t)t->tlb); /* MPI_BOTTOM + address */
		return MPI_SUCCESS;
	}
	op->contiguous = false;
	op->data = NULL;
	if (op->kind == OP_SEND) {
		/* One node: the packed form is the type's bytes, as MPI_Pack_size
		 * says for a homogeneous job. */
		op->tmp = malloc(op->bytes);
		if (!op->tmp)
			return MPI_ERR_NO_MEM;
		int rc = pm_pack(buf, count, op->dtype, op->tmp, op->bytes);
		if (rc != MPI_SUCCESS)
			return rc;
		op->data = op->tmp;
	}
	return MPI_SUCCESS;
}

/* Unpack the @p len bytes of message at @p src into a receive's buffer of
 * a derived type; the message may be shorter than the buffer (pack.c). */
static void unpack_message(struct pm_op *op, const char *src, size_t len)
{
	int rc = pm_unpack(src, len, (void *)op->ubuf, op->count, op->dtype);
	if (rc != MPI_SUCCESS)
		op->st_error = rc;
}

void pm_op_deliver(struct pm_op *op, const void *src, size_t len, uint64_t offset)
{
	if (len == 0)
		return;
	if (op->contiguous) {
		memcpy(op->data + offset, src, len);
		return;
	}
	if (offset == 0 && len == op->accept) {
		unpack_message(op, src, len);
		return;
	}
	if (!op->tmp) {
		op->tmp = malloc(op->accept);
		if (!op->tmp) {
			op->st_error = MPI_ERR_NO_MEM;
			return;
		}
	}
	memcpy(op->tmp + offset, src, len);
}

void pm_op_deliver_done(struct pm_op *op)
{
	if (!op->contiguous && op->tmp) {
		unpack_message(op, op->tmp, op->accept);
		free(op->tmp);
		op->tmp = NULL;
	}
}

/* ---- statuses ------------------------------------------------------------ */

void pm_status_empty(MPI_Status *status)
{
	if (status == MPI_STATUS_IGNORE)
		return;
	status->MPI_SOURCE = MPI_ANY_SOURCE;
	status->MPI_TAG = MPI_ANY_TAG;
	PMPI_Status_set_elements_x(status, MPI_BYTE, 0);
	PMPI_Status_set_cancelled(status, 0);
}

void pm_op_status(const struct pm_op *op, MPI_Status *status)
{
	if (status == MPI_STATUS_IGNORE)
		return;
	status->MPI_SOURCE = op->st_source;
	status->MPI_TAG = op->st_tag;
	status->MPI_ERROR = op->st_error;
	PMPI_Status_set_elements_x(status, MPI_BYTE, (MPI_Count)op->st_bytes);
	PMPI_Status_set_cancelled(status, op->cancelled);
}

void pm_op_status_single(const struct pm_op *op, MPI_Status *status)
{
	if (status == MPI_STATUS_IGNORE)
		return;
	int error = status->MPI_ERROR;
	pm_op_status(op, status);
	status->MPI_ERROR = error;
}
