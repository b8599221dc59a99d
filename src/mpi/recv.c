/*
 * recv.c - the receive calls: Recv, Irecv, Probe, Iprobe.  (Matched probes:
 * mprobe.c; persistent receives: persist.c.)
 *
 * A receive goes through the plugin when its communicator is carried and
 * its source shares the node, or is MPI_ANY_SOURCE.  On a communicator with
 * members on other nodes, a wildcard receive also probes the MPI library
 * (engine.c); while one is posted, later receives from other nodes on that
 * communicator queue behind it in the plugin, so that MPI's rule - a
 * message goes to the first posted receive that matches it - holds across
 * both paths.  Everything else goes to the MPI library.
 */
#include "plugin.h"
#include "wire.h"

struct pm_comm *pm_recv_route_any(MPI_Comm comm, int source, int tag, int count)
{
	if (!pm.active || count < 0 || source == MPI_PROC_NULL)
		return NULL;
	if (tag != MPI_ANY_TAG && (tag < 0 || tag > pm.tag_ub))
		return NULL;
	struct pm_comm *c = pm_comm_find(comm);
	if (!c || source == MPI_ANY_SOURCE)
		return c;
	return source >= 0 && source < c->size ? c : NULL;
}

struct pm_comm *pm_recv_route(MPI_Comm comm, int source, int tag, int count)
{
	struct pm_comm *c = pm_recv_route_any(comm, source, tag, count);
	if (!c || source == MPI_ANY_SOURCE)
		return c;
	return c->local[source] >= 0 || c->wild_remote ? c : NULL;
}

int pm_recv_start_any(struct pm_op *op)
{
	struct pm_comm *c = op->comm;
	if (op->peer == MPI_ANY_SOURCE || c->local[op->peer] >= 0 || c->wild_remote)
		return pm_recv_start(op);
	/* From another node with no wildcard posted before it: the library
	 * receives it, and the engine watches its request. */
	int rc = PMPI_Irecv((void *)op->ubuf, op->count, op->dtype, op->peer, op->tag, c->comm, &op->preq);
	if (rc != MPI_SUCCESS)
		return rc;
	pm_remote_start(op);
	return MPI_SUCCESS;
}

int pm_recv_op(struct pm_comm *c, void *buf, int count, MPI_Datatype dtype, int source, int tag,
	       enum pm_family family, struct pm_op **out)
{
	struct pm_op *op = pm_op_new(OP_RECV);
	pm_op_attach(op, c);
	op->peer = source;
	op->tag = tag;
	op->family = (uint8_t)family;
	int rc = pm_op_buffer(op, buf, count, dtype);
	if (rc != MPI_SUCCESS) {
		pm_op_free(op);
		return rc;
	}
	*out = op;
	return MPI_SUCCESS;
}

int pm_recv_blocking(void *buf, int count, MPI_Datatype dtype, int source, int tag, MPI_Comm comm,
		     MPI_Status *status, enum pm_family family)
{
	struct pm_comm *c = pm_recv_route(comm, source, tag, count);
	if (!c) {
		if (source != MPI_PROC_NULL)
			pm_count_mpi(family, pm_type_bytes(dtype, count));
		return PMPI_Recv(buf, count, dtype, source, tag, comm, status);
	}
	size_t bytes;
	void *data = (void *)pm_flat_data(buf, count, dtype, &bytes);
	if (data && (source == MPI_ANY_SOURCE || c->local[source] >= 0) && !pm_probe_lib(c, source) &&
	    !pm_unexp_find(c, source, tag)) {
		/* The short cut: nothing in hand matches; the next EAGER record
		 * that does goes straight into the buffer. */
		const struct pm_op *done = pm_recv_direct(c, source, tag, data, bytes, family);
		if (done) {
			pm_op_status_single(done, status);
			return pm_comm_error(comm, done->st_error);
		}
	}
	struct pm_op *op;
	int rc = pm_recv_op(c, buf, count, dtype, source, tag, family, &op);
	if (rc != MPI_SUCCESS)
		return pm_comm_error(comm, rc);
	pm_recv_start(op);
	pm_wait_op(op);
	pm_op_status_single(op, status);
	rc = op->st_error;
	pm_op_free(op);
	return pm_comm_error(comm, rc);
}

int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status *status)
{
	return pm_recv_blocking(buf, count, datatype, source, tag, comm, status, FAM_BLOCKING);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
	      MPI_Request *request)
{
	struct pm_comm *c = pm_recv_route(comm, source, tag, count);
	if (!c) {
		if (source != MPI_PROC_NULL)
			pm_count_mpi(FAM_NONBLOCKING, pm_type_bytes(datatype, count));
		return PMPI_Irecv(buf, count, datatype, source, tag, comm, request);
	}
	struct pm_op *op;
	int rc = pm_recv_op(c, buf, count, datatype, source, tag, FAM_NONBLOCKING, &op);
	if (rc != MPI_SUCCESS)
		return pm_comm_error(comm, rc);
	rc = pm_op_handle(op);
	if (rc != MPI_SUCCESS) {
		pm_op_free(op);
		return pm_comm_error(comm, rc);
	}
	pm_recv_start(op);
	*request = op->handle;
	return MPI_SUCCESS;
}

/* ---- probes ------------------------------------------------------------ */

void pm_unexp_status(const struct pm_unexp *u, MPI_Status *status)
{
	if (status == MPI_STATUS_IGNORE)
		return;
	status->MPI_SOURCE = u->src;
	status->MPI_TAG = u->tag;
	PMPI_Status_set_elements_x(status, MPI_BYTE, u->flags & REC_FAILED ? 0 : (MPI_Count)u->len);
	PMPI_Status_set_cancelled(status, 0);
}

bool pm_probe_lib(const struct pm_comm *c, int source)
{
	return c->mixed && (source == MPI_ANY_SOURCE || c->local[source] < 0);
}

/* One look: the plugin's unexpected messages, then the library's. */
static int probe_once(struct pm_comm *c, int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status)
{
	struct pm_unexp *u = pm_unexp_find(c, source, tag);
	if (u) {
		pm_unexp_status(u, status);
		*flag = 1;
		return MPI_SUCCESS;
	}
	*flag = 0;
	if (!pm_probe_lib(c, source))
		return MPI_SUCCESS;
	MPI_Status st;
	int rc = PMPI_Iprobe(source, tag, comm, flag, &st);
	if (rc != MPI_SUCCESS || !*flag)
		return rc;
	/* A receive posted earlier in the plugin will take it: not ours to see. */
	if (pm_hybrid_wants(c, st.MPI_SOURCE, st.MPI_TAG)) {
		*flag = 0;
		pm_progress();
		return MPI_SUCCESS;
	}
	if (status != MPI_STATUS_IGNORE) {
		int error = status->MPI_ERROR;
		*status = st;
		status->MPI_ERROR = error;
	}
	return MPI_SUCCESS;
}

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status)
{
	struct pm_comm *c = pm_recv_route(comm, source, tag, 0);
	if (!c)
		return PMPI_Iprobe(source, tag, comm, flag, status);
	pm_progress();
	int rc = probe_once(c, source, tag, comm, flag, status);
	if (rc == MPI_SUCCESS && !*flag)
		pm_mpi_progress();
	return rc;
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status)
{
	struct pm_comm *c = pm_recv_route(comm, source, tag, 0);
	if (!c)
		return PMPI_Probe(source, tag, comm, status);
	unsigned idle = 0;
	for (;;) {
		int flag = 0;
		int did = pm_progress();
		int rc = probe_once(c, source, tag, comm, &flag, status);
		if (rc != MPI_SUCCESS || flag)
			return rc;
		if (did)
			idle = 0;
		else
			pm_idle(&idle, !pm_probe_lib(c, source));
	}
}
