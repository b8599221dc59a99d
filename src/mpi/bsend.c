/*
 * bsend.c - buffered sends: Buffer_attach, Buffer_detach, Bsend, Ibsend
 * (Bsend_init starts here too).
 *
 * The buffer the user attaches is handed to the MPI library, which uses it
 * for the buffered sends it carries.  The plugin copies its own buffered
 * messages into memory of its own but charges them, as MPI specifies
 * (size + MPI_BSEND_OVERHEAD each), to the attached size: a buffered send
 * that does not fit fails with MPI_ERR_BUFFER as it would in the library.
 * MPI_Buffer_detach waits until the plugin's buffered messages are out.
 */
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

int pm_bsend_start(struct pm_op *op)
{
	uint64_t charge = op->bytes + MPI_BSEND_OVERHEAD;
	if (pm.buffered_used + charge > pm.buffered_attached)
		return MPI_ERR_BUFFER;
	if (op->contiguous) { /* non-contiguous data is already packed into tmp */
		op->tmp = malloc(op->bytes ? op->bytes : 1);
		if (!op->tmp)
			return MPI_ERR_NO_MEM;
		if (op->bytes)
			memcpy(op->tmp, op->data, op->bytes);
		op->data = op->tmp;
	}
	pm.buffered_used += charge;
	return pm_send_start(op);
}

/* Start a buffered send that nobody waits for: it frees itself when out. */
static int bsend_detached(const void *buf, int count, MPI_Datatype dtype, int dest, int tag, struct pm_comm *c,
			  enum pm_family family)
{
	struct pm_op *op;
	int rc = pm_send_op(c, buf, count, dtype, dest, tag, MODE_BUFFERED, family, &op);
	if (rc != MPI_SUCCESS)
		return rc;
	op->user_freed = true;
	rc = pm_bsend_start(op);
	if (rc != MPI_SUCCESS) {
		pm_op_free(op);
		pm_send_failed(c, dest, tag, rc);
	}
	return rc;
}

int pm_bsend_start_persistent(struct pm_op *op)
{
	int rc = bsend_detached(op->ubuf, op->count, op->dtype, op->peer, op->tag, op->comm, op->family);
	if (rc != MPI_SUCCESS)
		return rc;
	/* Complete as a send that went out at once; the copy counts it. */
	op->counted = true;
	op->state = ST_QUEUED;
	pm.sends_inflight++;
	pm_op_complete(op);
	return MPI_SUCCESS;
}

int MPI_Buffer_attach(void *buffer, int size)
{
	int rc = PMPI_Buffer_attach(buffer, size);
	if (rc == MPI_SUCCESS)
		pm.buffered_attached = size > 0 ? (uint64_t)size : 0;
	return rc;
}

int MPI_Buffer_detach(void *buffer_addr, int *size)
{
	unsigned idle = 0;
	while (pm.active && pm.buffered_used > 0) {
		if (pm_progress())
			idle = 0;
		else
			pm_idle(&idle, false);
	}
	int rc = PMPI_Buffer_detach(buffer_addr, size);
	if (rc == MPI_SUCCESS)
		pm.buffered_attached = 0;
	return rc;
}

static int bsend(const void *buf, int count, MPI_Datatype dtype, int dest, int tag, MPI_Comm comm,
		 struct pm_comm *c)
{
	return pm_comm_error(comm, bsend_detached(buf, count, dtype, dest, tag, c, FAM_BUFFERED));
}

int MPI_Bsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
	struct pm_comm *c = pm_send_route(comm, dest, tag, count);
	if (!c) {
		if (dest != MPI_PROC_NULL)
			pm_count_mpi(FAM_BUFFERED, pm_type_bytes(datatype, count));
		return PMPI_Bsend(buf, count, datatype, dest, tag, comm);
	}
	return bsend(buf, count, datatype, dest, tag, comm, c);
}

static int done_query(void *extra, MPI_Status *status)
{
	(void)extra;
	pm_status_empty(status);
	return MPI_SUCCESS;
}

static int done_free(void *extra)
{
	(void)extra;
	return MPI_SUCCESS;
}

static int done_cancel(void *extra, int complete)
{
	(void)extra;
	(void)complete;
	return MPI_SUCCESS;
}

/* The request of a buffered send is complete once the message is copied:
 * a generalized request, completed at once, that the library waits on. */
int MPI_Ibsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
	       MPI_Request *request)
{
	struct pm_comm *c = pm_send_route(comm, dest, tag, count);
	if (!c) {
		if (dest != MPI_PROC_NULL)
			pm_count_mpi(FAM_BUFFERED, pm_type_bytes(datatype, count));
		return PMPI_Ibsend(buf, count, datatype, dest, tag, comm, request);
	}
	int rc = bsend(buf, count, datatype, dest, tag, comm, c);
	if (rc != MPI_SUCCESS)
		return rc;
	rc = PMPI_Grequest_start(done_query, done_free, done_cancel, NULL, request);
	if (rc == MPI_SUCCESS)
		rc = PMPI_Grequest_complete(*request);
	return rc;
}
