/*
 * mprobe.c - matched probes: Mprobe, Improbe, Mrecv, Imrecv.
 *
 * A matched probe takes the message out of its communicator's unexpected
 * list, so that no other receive can match it, and names it with an
 * MPI_Message.  That handle must be one the MPI library understands
 * (Message_c2f, Message_f2c), so it is a real one: a zero-byte message this
 * rank sent to itself on a private duplicate of MPI_COMM_SELF, probed with
 * PMPI_Mprobe.  MPI_Mrecv on it receives that placeholder and then the
 * plugin's message.
 */
#include <stdlib.h>

#include "plugin.h"

struct matched {
	MPI_Message handle;
	struct pm_comm *comm;
	struct pm_unexp *msg;
	struct matched *next;
};

static struct matched *matched_list;
static MPI_Comm self_dup = MPI_COMM_NULL;

static void drop_matched(struct matched *m);

void pm_mprobe_teardown(void)
{
	while (matched_list) {
		struct matched *m = matched_list;
		matched_list = m->next;
		drop_matched(m);
	}
	if (self_dup != MPI_COMM_NULL)
		PMPI_Comm_free(&self_dup);
}

/* Take @p u out of @p c and return a real MPI_Message naming it. */
static int bind_message(struct pm_comm *c, struct pm_unexp *u, MPI_Message *message)
{
	int rc;
	if (self_dup == MPI_COMM_NULL && (rc = PMPI_Comm_dup(MPI_COMM_SELF, &self_dup)) != MPI_SUCCESS)
		return rc;
	struct matched *m = malloc(sizeof(*m));
	if (!m)
		return MPI_ERR_NO_MEM;
	MPI_Request sent;
	rc = PMPI_Isend(NULL, 0, MPI_BYTE, 0, 0, self_dup, &sent);
	if (rc == MPI_SUCCESS)
		rc = PMPI_Request_free(&sent);
	if (rc == MPI_SUCCESS)
		rc = PMPI_Mprobe(0, 0, self_dup, &m->handle, MPI_STATUS_IGNORE);
	if (rc != MPI_SUCCESS) {
		free(m);
		return rc;
	}
	pm_list_remove(&c->unexp, &u->link);
	m->comm = c;
	c->refs++;
	m->msg = u;
	m->next = matched_list;
	matched_list = m;
	*message = m->handle;
	return MPI_SUCCESS;
}

/* A matched message that no receive will take, after an error: its
 * sender must not wait for ever for the answer it asked for. */
static void refuse_matched(struct matched *m)
{
	pm_unexp_refuse(m->msg);
	drop_matched(m);
}

static void drop_matched(struct matched *m)
{
	pm_unexp_free(m->msg);
	pm_comm_release(m->comm);
	free(m);
}

static struct matched *unbind(MPI_Message handle)
{
	for (struct matched **p = &matched_list; *p; p = &(*p)->next)
		if ((*p)->handle == handle) {
			struct matched *m = *p;
			*p = m->next;
			return m;
		}
	return NULL;
}

/* @return 1 found (ours or the library's), 0 not yet; rc set on error. */
static int mprobe_once(struct pm_comm *c, int source, int tag, MPI_Comm comm, MPI_Message *message,
		       MPI_Status *status, int *rc)
{
	struct pm_unexp *u = pm_unexp_find(c, source, tag);
	if (u) {
		pm_unexp_status(u, status);
		*rc = bind_message(c, u, message);
		return 1;
	}
	if (pm_probe_lib(c, source)) {
		int flag = 0;
		MPI_Status st;
		*rc = PMPI_Improbe(source, tag, comm, &flag, message, &st);
		if (*rc != MPI_SUCCESS)
			return 1;
		/* A receive posted earlier in the plugin that matches it has it. */
		if (!flag || pm_hybrid_take(c, st.MPI_SOURCE, st.MPI_TAG, message))
			return 0;
		if (status != MPI_STATUS_IGNORE) {
			int error = status->MPI_ERROR;
			*status = st;
			status->MPI_ERROR = error;
		}
		return 1;
	}
	return 0;
}

int MPI_Improbe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, MPI_Status *status)
{
	struct pm_comm *c = pm_recv_route(comm, source, tag, 0);
	if (!c)
		return PMPI_Improbe(source, tag, comm, flag, message, status);
	int rc = MPI_SUCCESS;
	pm_progress();
	*flag = mprobe_once(c, source, tag, comm, message, status, &rc);
	if (!*flag)
		pm_mpi_progress();
	return pm_comm_error(comm, rc);
}

int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status)
{
	struct pm_comm *c = pm_recv_route(comm, source, tag, 0);
	if (!c)
		return PMPI_Mprobe(source, tag, comm, message, status);
	unsigned idle = 0;
	int rc = MPI_SUCCESS;
	for (;;) {
		int did = pm_progress();
		if (mprobe_once(c, source, tag, comm, message, status, &rc))
			return pm_comm_error(comm, rc);
		if (did)
			idle = 0;
		else
			pm_idle(&idle, !pm_probe_lib(c, source));
	}
}

/* Receive the placeholder of @p m and make the op that takes its message;
 * take_matched() then hands the message over (after the caller gave
 * the op a handle, which the message may complete at once). */
static int matched_op(struct matched *m, void *buf, int count, MPI_Datatype dtype, struct pm_op **out)
{
	MPI_Message placeholder = m->handle;
	PMPI_Mrecv(NULL, 0, MPI_BYTE, &placeholder, MPI_STATUS_IGNORE);
	int rc = pm_recv_op(m->comm, buf, count, dtype, m->msg->src, m->msg->tag, FAM_PROBE, out);
	if (rc != MPI_SUCCESS)
		refuse_matched(m);
	return rc;
}

static void take_matched(struct matched *m, struct pm_op *op)
{
	pm_recv_take(op, m->msg);
	pm_comm_release(m->comm);
	free(m);
}

int MPI_Mrecv(void *buf, int count, MPI_Datatype datatype, MPI_Message *message, MPI_Status *status)
{
	struct matched *m = *message != MPI_MESSAGE_NULL ? unbind(*message) : NULL;
	if (!m) {
		if (*message != MPI_MESSAGE_NO_PROC && *message != MPI_MESSAGE_NULL)
			pm_count_mpi(FAM_PROBE, pm_type_bytes(datatype, count));
		return PMPI_Mrecv(buf, count, datatype, message, status);
	}
	MPI_Comm comm = m->comm->comm;
	*message = MPI_MESSAGE_NULL;
	struct pm_op *op;
	int rc = matched_op(m, buf, count, datatype, &op);
	if (rc != MPI_SUCCESS)
		return pm_comm_error(comm, rc);
	take_matched(m, op);
	pm_wait_op(op);
	pm_op_status_single(op, status);
	rc = op->st_error;
	pm_op_free(op);
	return pm_comm_error(comm, rc);
}

int MPI_Imrecv(void *buf, int count, MPI_Datatype datatype, MPI_Message *message, MPI_Request *request)
{
	struct matched *m = *message != MPI_MESSAGE_NULL ? unbind(*message) : NULL;
	if (!m) {
		if (*message != MPI_MESSAGE_NO_PROC && *message != MPI_MESSAGE_NULL)
			pm_count_mpi(FAM_PROBE, pm_type_bytes(datatype, count));
		return PMPI_Imrecv(buf, count, datatype, message, request);
	}
	MPI_Comm comm = m->comm->comm;
	*message = MPI_MESSAGE_NULL;
	struct pm_op *op;
	int rc = matched_op(m, buf, count, datatype, &op);
	if (rc != MPI_SUCCESS)
		return pm_comm_error(comm, rc);
	rc = pm_op_handle(op);
	if (rc != MPI_SUCCESS) {
		refuse_matched(m);
		pm_op_free(op);
		return pm_comm_error(comm, rc);
	}
	take_matched(m, op);
	*request = op->handle;
	return MPI_SUCCESS;
}
