/*
 * persist.c - persistent requests: Send_init, Ssend_init, Rsend_init,
 * Bsend_init, Recv_init, Start, Startall.
 *
 * The handle the user holds is an inactive persistent request of the MPI
 * library to MPI_PROC_NULL on MPI_COMM_SELF: a real request that MPI calls
 * understand (Request_free, c2f...), never started in the library.  The
 * plugin's op behind it is started by MPI_Start; the buffer is read again
 * at every start, since its contents (and, for derived types, the packing)
 * change between starts.
 */
#include <stdlib.h>

#include "plugin.h"

/*
 * Persistent requests passed to the library, remembered (with
 * PINSHM_MPI_STATS only) so that each start counts in the statistics.
 */
struct passed {
	MPI_Request handle;
	uint8_t family;
	uint64_t bytes;
};
static struct passed *passed;
static size_t npassed, cap_passed;

static void remember_passed(MPI_Request handle, enum pm_family family, uint64_t bytes)
{
	if (!pm.cfg.stats || pm.multiple || handle == MPI_REQUEST_NULL)
		return;
	if (npassed == cap_passed) {
		size_t cap = cap_passed ? 2 * cap_passed : 16;
		struct passed *p = realloc(passed, cap * sizeof(*p));
		if (!p)
			return; /* only the statistics lose it */
		passed = p;
		cap_passed = cap;
	}
	passed[npassed++] = (struct passed){handle, (uint8_t)family, bytes};
}

static struct passed *find_passed(MPI_Request handle)
{
	for (size_t i = 0; i < npassed; i++)
		if (passed[i].handle == handle)
			return &passed[i];
	return NULL;
}

void pm_forget_passed(MPI_Request handle)
{
	struct passed *p = npassed ? find_passed(handle) : NULL;
	if (p)
		*p = passed[--npassed];
	if (!npassed) {
		free(passed);
		passed = NULL;
		cap_passed = 0;
	}
}

void pm_persist_teardown(void)
{
	free(passed);
	passed = NULL;
	npassed = cap_passed = 0;
}

/* The library's persistent request, remembered for the statistics. */
static int passed_init(int rc, MPI_Request *request, int peer, enum pm_family family, MPI_Datatype dtype,
		       int count)
{
	if (rc == MPI_SUCCESS && peer != MPI_PROC_NULL)
		remember_passed(*request, family, pm_type_bytes(dtype, count));
	return rc;
}

static int init_op(const void *buf, int count, MPI_Datatype dtype, int peer, int tag, MPI_Comm comm,
		   enum pm_kind kind, enum pm_mode mode, enum pm_family family, MPI_Request *request)
{
	/* Every receive of a carried communicator is the plugin's, also one
	 * from another node: MPI_Start decides how it is posted then (behind
	 * a wildcard receive posted meanwhile, or in the library). */
	struct pm_comm *c = kind == OP_SEND ? pm_send_route(comm, peer, tag, count)
					    : pm_recv_route_any(comm, peer, tag, count);
	if (!c) {
		int rc;
		switch (kind == OP_RECV ? -1 : (int)mode) {
		case -1:
			rc = PMPI_Recv_init((void *)buf, count, dtype, peer, tag, comm, request);
			break;
		case MODE_SYNC:
			rc = PMPI_Ssend_init(buf, count, dtype, peer, tag, comm, request);
			break;
		case MODE_READY:
			rc = PMPI_Rsend_init(buf, count, dtype, peer, tag, comm, request);
			break;
		case MODE_BUFFERED:
			rc = PMPI_Bsend_init(buf, count, dtype, peer, tag, comm, request);
			break;
		default:
			rc = PMPI_Send_init(buf, count, dtype, peer, tag, comm, request);
			break;
		}
		return passed_init(rc, request, peer, family, dtype, count);
	}
	struct pm_op *op = pm_op_new(kind);
	pm_op_attach(op, c);
	op->peer = peer;
	op->tag = tag;
	op->mode = (uint8_t)mode;
	op->family = (uint8_t)family;
	op->persistent = true;
	op->state = ST_IDLE;
	op->peer_local = kind == OP_SEND ? c->local[peer] : -1;
	op->ubuf = buf;
	op->count = count;
	op->dtype = dtype;
	int rc = pm_op_hold_type(op); /* the user may free the type before a start */
	if (rc != MPI_SUCCESS) {
		pm_op_free(op);
		return pm_comm_error(comm, rc);
	}
	rc = kind == OP_SEND ? PMPI_Send_init(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, &op->handle)
				 : PMPI_Recv_init(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, &op->handle);
	if (rc != MPI_SUCCESS) {
		pm_op_free(op);
		return pm_comm_error(comm, rc);
	}
	pm_op_register_handle(op);
	*request = op->handle;
	return MPI_SUCCESS;
}

int MPI_Send_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
		  MPI_Request *request)
{
	return init_op(buf, count, datatype, dest, tag, comm, OP_SEND, MODE_STANDARD, FAM_PERSISTENT, request);
}

int MPI_Rsend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
		   MPI_Request *request)
{
	return init_op(buf, count, datatype, dest, tag, comm, OP_SEND, MODE_READY, FAM_PERSISTENT, request);
}

int MPI_Ssend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
		   MPI_Request *request)
{
	return init_op(buf, count, datatype, dest, tag, comm, OP_SEND, MODE_SYNC, FAM_SYNC, request);
}

int MPI_Bsend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
		   MPI_Request *request)
{
	return init_op(buf, count, datatype, dest, tag, comm, OP_SEND, MODE_BUFFERED, FAM_BUFFERED, request);
}

int MPI_Recv_init(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
		  MPI_Request *request)
{
	return init_op(buf, count, datatype, source, tag, comm, OP_RECV, MODE_STANDARD, FAM_PERSISTENT, request);
}

/* Start a persistent op again: fresh outcome and wire id, buffer re-read. */
static int restart(struct pm_op *op)
{
	if (op->state != ST_IDLE && op->state != ST_DONE)
		return MPI_ERR_REQUEST; /* still active */
	free(op->tmp);
	op->tmp = NULL;
	op->gen++;
	op->cancelled = op->counted = false;
	op->offset = op->accept = op->remote_id = 0;
	op->reply_to = -1;
	op->st_source = MPI_ANY_SOURCE;
	op->st_tag = MPI_ANY_TAG;
	op->st_error = MPI_SUCCESS;
	op->st_bytes = 0;
	if (op->kind == OP_SEND && op->mode == MODE_BUFFERED)
		return pm_bsend_start_persistent(op); /* complete once copied, as MPI_Ibsend */
	int rc = pm_op_buffer(op, op->ubuf, op->count, op->dtype);
	if (rc != MPI_SUCCESS)
		return op->kind == OP_SEND ? pm_send_failed(op->comm, op->peer, op->tag, rc) : rc;
	if (op->kind == OP_RECV)
		return pm_recv_start_any(op);
	return pm_send_start(op);
}

int MPI_Start(MPI_Request *request)
{
	struct pm_op *op = pm_op_by_handle(*request);
	if (!op) {
		struct passed *p = npassed ? find_passed(*request) : NULL;
		if (p)
			pm_count_mpi(p->family, p->bytes);
		return PMPI_Start(request);
	}
	MPI_Comm comm = op->comm->comm;
	return pm_comm_error(comm, restart(op));
}

int MPI_Startall(int count, MPI_Request requests[])
{
	if (count < 0)
		return PMPI_Startall(count, requests); /* the library's error, through its handler */
	int rc = MPI_SUCCESS;
	for (int i = 0; i < count && rc == MPI_SUCCESS; i++)
		rc = MPI_Start(&requests[i]);
	return rc;
}
