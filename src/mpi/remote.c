/*
 * remote.c - the MPI library's side: receives that may match a message of
 * the MPI library (MPI_ANY_SOURCE on a communicator with members on other
 * nodes) also probe it (MPI_Improbe) in the order posted; one that finds a
 * message there receives it with MPI_Imrecv and leaves the posted list.
 * Requests of the library that ops wait for are tested here too.
 */
#include <stdlib.h>

#include "plugin.h"

void pm_remote_start(struct pm_op *op)
{
	op->state = ST_REMOTE;
	pm_list_push(&pm.remote, &op->rlink);
}

static struct pm_op *first_hybrid(const struct pm_comm *c, int source, int tag, const struct pm_link *stop)
{
	for (struct pm_link *e = pm.hybrid.head; e != stop; e = e->next) {
		struct pm_op *o = pm_container(e, struct pm_op, rlink);
		if (o->comm == c && pm_matches(o->peer, o->tag, source, tag))
			return o;
	}
	return NULL;
}

/* The library matched @p msg for @p op (in the hybrid list): receive it. */
static void hybrid_receive(struct pm_op *op, MPI_Message *msg)
{
	pm_op_unpost(op);
	op->state = ST_REMOTE;
	PMPI_Imrecv((void *)op->ubuf, op->count, op->dtype, msg, &op->preq);
	pm_list_push(&pm.remote, &op->rlink);
}

bool pm_hybrid_wants(const struct pm_comm *c, int source, int tag)
{
	return first_hybrid(c, source, tag, NULL) != NULL;
}

bool pm_hybrid_take(const struct pm_comm *c, int source, int tag, MPI_Message *msg)
{
	struct pm_op *op = first_hybrid(c, source, tag, NULL);
	if (!op)
		return false;
	hybrid_receive(op, msg);
	return true;
}

int pm_poll_remote(void)
{
	int did = 0;
	struct pm_link *l = pm.hybrid.head;
	while (l) {
		struct pm_link *next = l->next;
		struct pm_op *op = pm_container(l, struct pm_op, rlink);
		int flag = 0;
		MPI_Message msg;
		MPI_Status st;
		int src = op->peer;
		PMPI_Improbe(src, op->tag, op->comm->comm, &flag, &msg, &st);
		if (flag) {
			/* The message goes to the first posted receive that matches
			 * it: an earlier one may have probed just before it came. */
			struct pm_op *first = first_hybrid(op->comm, st.MPI_SOURCE, st.MPI_TAG, l);
			if (first)
				op = first;
			hybrid_receive(op, &msg);
			did++;
			if (&op->rlink != l)
				continue; /* l is still posted: let it probe again */
		}
		l = next;
	}
	l = pm.remote.head;
	while (l) {
		struct pm_link *next = l->next;
		struct pm_op *op = pm_container(l, struct pm_op, rlink);
		int flag = 0;
		MPI_Status st;
		int rc = PMPI_Test(&op->preq, &flag, &st);
		if (flag || rc != MPI_SUCCESS) {
			pm_list_remove(&pm.remote, &op->rlink);
			if (op->kind == OP_IDUP) {
				op->st_error = rc;
				if (rc == MPI_SUCCESS)
					pm_comm_register(*op->newcomm, op->new_ctx);
				if (op->fnewcomm) { /* Fortran's MPI_COMM_IDUP (comm.c) */
					if (rc == MPI_SUCCESS)
						*op->fnewcomm = PMPI_Comm_c2f(*op->newcomm);
					free(op->newcomm);
					op->newcomm = NULL;
					op->fnewcomm = NULL;
				}
			} else {
				MPI_Count n = 0;
				int cancelled = 0;
				PMPI_Test_cancelled(&st, &cancelled);
				op->cancelled = cancelled;
				PMPI_Get_elements_x(&st, MPI_BYTE, &n);
				op->st_source = st.MPI_SOURCE;
				op->st_tag = st.MPI_TAG;
				op->st_error = rc != MPI_SUCCESS ? rc : MPI_SUCCESS;
				op->st_bytes = n > 0 ? (uint64_t)n : 0;
				op->counted = true;
				if (!cancelled)
					pm_count_mpi(op->family, op->st_bytes);
			}
			pm_op_complete(op);
			did++;
		}
		l = next;
	}
	return did;
}
