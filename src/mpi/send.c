/*
 * send.c - the send calls: Send, Ssend, Rsend, Isend, Issend, Irsend,
 * Sendrecv, Sendrecv_replace.  (Buffered sends: bsend.c; persistent ones:
 * persist.c.)
 *
 * A send goes through pinshm when its communicator is carried and the
 * destination shares this rank's node; every other case - another node, a
 * communicator the plugin does not carry, MPI_PROC_NULL, an argument the
 * MPI library must reject - is passed to the MPI library unchanged.
 * Ready sends are standard sends: a ready send's receive is posted, so
 * both behave the same.
 */
#include <limits.h>
#include <stdlib.h>

#include "plugin.h"

struct pm_comm *pm_send_route(MPI_Comm comm, int dest, int tag, int count)
{
	if (!pm.active || count < 0 || tag < 0 || tag > pm.tag_ub)
		return NULL;
	struct pm_comm *c = pm_comm_find(comm);
	if (!c || dest < 0 || dest >= c->size || c->local[dest] < 0)
		return NULL;
	return c;
}

uint64_t pm_type_bytes(MPI_Datatype dtype, int count)
{
	MPI_Count size = 0;
	if (count <= 0 || PMPI_Type_size_x(dtype, &size) != MPI_SUCCESS || size < 0)
		return 0;
	return (uint64_t)size * (uint64_t)count;
}

int pm_send_op(struct pm_comm *c, const void *buf, int count, MPI_Datatype dtype, int dest, int tag,
	       enum pm_mode mode, enum pm_family family, struct pm_op **out)
{
	struct pm_op *op = pm_op_new(OP_SEND);
	pm_op_attach(op, c);
	op->peer = dest;
	op->tag = tag;
	op->mode = (uint8_t)mode;
	op->family = (uint8_t)family;
	op->peer_local = c->local[dest];
	int rc = pm_op_buffer(op, buf, count, dtype);
	if (rc != MPI_SUCCESS) {
		pm_op_free(op);
		return pm_send_failed(c, dest, tag, rc);
	}
	*out = op;
	return MPI_SUCCESS;
}

/* Inlined into each blocking send call: one call fewer on the path of a
 * reply, with the eager write (pm_send_now_inline()) inlined into it. */
static inline __attribute__((always_inline)) int blocking_send(const void *buf, int count, MPI_Datatype dtype,
							     int dest, int tag, MPI_Comm comm, enum pm_mode mode,
							     enum pm_family family)
{
	struct pm_comm *c = pm_send_route(comm, dest, tag, count);
	if (!c) {
		if (dest != MPI_PROC_NULL)
			pm_count_mpi(family, pm_type_bytes(dtype, count));
		switch (mode) {
		case MODE_SYNC:
			return PMPI_Ssend(buf, count, dtype, dest, tag, comm);
		case MODE_READY:
			return PMPI_Rsend(buf, count, dtype, dest, tag, comm);
		default:
			return PMPI_Send(buf, count, dtype, dest, tag, comm);
		}
	}
	if (mode != MODE_SYNC && pm_send_now_inline(c, buf, count, dtype, dest, tag, family))
		return MPI_SUCCESS;
	struct pm_op *op;
	int rc = pm_send_op(c, buf, count, dtype, dest, tag, mode, family, &op);
	if (rc != MPI_SUCCESS)
		return pm_comm_error(comm, rc);
	pm_send_start(op);
	pm_wait_op(op);
	rc = op->st_error;
	pm_op_free(op);
	return pm_comm_error(comm, rc);
}

static int nonblocking_send(const void *buf, int count, MPI_Datatype dtype, int dest, int tag, MPI_Comm comm,
			    enum pm_mode mode, enum pm_family family, MPI_Request *request)
{
	struct pm_comm *c = pm_send_route(comm, dest, tag, count);
	if (!c) {
		if (dest != MPI_PROC_NULL)
			pm_count_mpi(family, pm_type_bytes(dtype, count));
		switch (mode) {
		case MODE_SYNC:
			return PMPI_Issend(buf, count, dtype, dest, tag, comm, request);
		case MODE_READY:
			return PMPI_Irsend(buf, count, dtype, dest, tag, comm, request);
		default:
			return PMPI_Isend(buf, count, dtype, dest, tag, comm, request);
		}
	}
	if (mode != MODE_SYNC && pm_send_now(c, buf, count, dtype, dest, tag, family)) {
		/* Written whole: the send is complete, and its request is the
		 * library's for a send that is (one to MPI_PROC_NULL). */
		if (pm.sent != MPI_REQUEST_NULL) {
			*request = pm.sent;
			return MPI_SUCCESS;
		}
		return PMPI_Isend(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, request);
	}
	struct pm_op *op;
	int rc = pm_send_op(c, buf, count, dtype, dest, tag, mode, family, &op);
	if (rc != MPI_SUCCESS)
		return pm_comm_error(comm, rc); /* pm_send_op freed the op */
	rc = pm_op_handle(op);
	if (rc != MPI_SUCCESS) {
		pm_op_free(op);
		return pm_comm_error(comm, pm_send_failed(c, dest, tag, rc));
	}
	pm_send_start(op);
	*request = op->handle;
	return MPI_SUCCESS;
}

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
	return blocking_send(buf, count, datatype, dest, tag, comm, MODE_STANDARD, FAM_BLOCKING);
}

int MPI_Rsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
	return blocking_send(buf, count, datatype, dest, tag, comm, MODE_READY, FAM_BLOCKING);
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
	return blocking_send(buf, count, datatype, dest, tag, comm, MODE_SYNC, FAM_SYNC);
}

int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
	      MPI_Request *request)
{
	return nonblocking_send(buf, count, datatype, dest, tag, comm, MODE_STANDARD, FAM_NONBLOCKING, request);
}

int MPI_Irsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
	       MPI_Request *request)
{
	return nonblocking_send(buf, count, datatype, dest, tag, comm, MODE_READY, FAM_NONBLOCKING, request);
}

int MPI_Issend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
	       MPI_Request *request)
{
	return nonblocking_send(buf, count, datatype, dest, tag, comm, MODE_SYNC, FAM_SYNC, request);
}

/* Sendrecv: start the send (either path), receive (either path), then
 * finish the send; the engine moves both. */
int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf,
		 int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status)
{
	struct pm_comm *c = pm_send_route(comm, dest, sendtag, sendcount);
	struct pm_op *op = NULL;
	MPI_Request lib = MPI_REQUEST_NULL;
	int rc = MPI_SUCCESS;
	if (c && !pm_send_now(c, sendbuf, sendcount, sendtype, dest, sendtag, FAM_BLOCKING)) {
		rc = pm_send_op(c, sendbuf, sendcount, sendtype, dest, sendtag, MODE_STANDARD, FAM_BLOCKING, &op);
		if (rc != MPI_SUCCESS)
			return pm_comm_error(comm, rc);
		pm_send_start(op);
	} else if (!c) {
		if (dest != MPI_PROC_NULL)
			pm_count_mpi(FAM_BLOCKING, pm_type_bytes(sendtype, sendcount));
		rc = PMPI_Isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &lib);
		if (rc != MPI_SUCCESS)
			return rc;
	}
	int rrc = pm_recv_blocking(recvbuf, recvcount, recvtype, source, recvtag, comm, status, FAM_BLOCKING);
	if (op) {
		pm_wait_op(op);
		rc = op->st_error;
		pm_op_free(op);
		rc = pm_comm_error(comm, rc);
	} else if (!c) {
		rc = PMPI_Wait(&lib, MPI_STATUS_IGNORE);
	}
	return rrc != MPI_SUCCESS ? rrc : rc;
}

/* @p bytes of MPI_PACKED data as one item: MPI counts in an int, so a
 * message over INT_MAX bytes is blocks of 1 GiB and a rest. */
static int packed_type(uint64_t bytes, MPI_Datatype *type)
{
	const uint64_t block = 1u << 30;
	MPI_Datatype b, whole, rest;
	MPI_Datatype types[2];
	int lens[2] = {1, 1};
	MPI_Aint disps[2] = {0, (MPI_Aint)(bytes / block * block)};
	int rc = PMPI_Type_contiguous((int)block, MPI_PACKED, &b);
	if (rc != MPI_SUCCESS)
		return rc;
	rc = PMPI_Type_contiguous((int)(bytes / block), b, &whole);
	PMPI_Type_free(&b);
	if (rc != MPI_SUCCESS)
		return rc;
	rc = PMPI_Type_contiguous((int)(bytes % block), MPI_PACKED, &rest);
	if (rc == MPI_SUCCESS) {
		types[0] = whole;
		types[1] = rest;
		rc = PMPI_Type_create_struct(2, lens, disps, types, type);
		PMPI_Type_free(&rest);
	}
	PMPI_Type_free(&whole);
	if (rc == MPI_SUCCESS)
		rc = PMPI_Type_commit(type);
	return rc;
}

/* The message to send is packed first, so that the receive may overwrite
 * the buffer; MPI_PACKED data matches a receive of the packed types. */
int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source,
			 int recvtag, MPI_Comm comm, MPI_Status *status)
{
	if (!pm.active || !pm_comm_find(comm) || count < 0 || !pm_type_info(datatype))
		return PMPI_Sendrecv_replace(buf, count, datatype, dest, sendtag, source, recvtag, comm, status);
	uint64_t bytes = pm_type_bytes(datatype, count);
	MPI_Datatype type = MPI_PACKED;
	char *tmp = malloc(bytes ? bytes : 1);
	int rc = tmp ? pm_pack(buf, count, datatype, tmp, bytes) : MPI_ERR_NO_MEM;
	if (rc == MPI_SUCCESS && bytes > INT_MAX)
		rc = packed_type(bytes, &type);
	if (rc == MPI_SUCCESS)
		rc = MPI_Sendrecv(tmp, bytes > INT_MAX ? 1 : (int)bytes, type, dest, sendtag, buf, count, datatype,
				  source, recvtag, comm, status);
	else {
		struct pm_comm *c = pm_send_route(comm, dest, sendtag, count);
		if (c) /* its receiver learns it failed */
			pm_send_failed(c, dest, sendtag, rc);
		rc = pm_comm_error(comm, rc);
	}
	if (type != MPI_PACKED)
		PMPI_Type_free(&type);
	free(tmp);
	return rc;
}
