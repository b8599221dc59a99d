/*
 * fortran.c - Fortran's point-to-point calls, carried by the plugin.
 *
 * Open MPI's Fortran bindings (libmpi_mpifh) call PMPI directly, so a
 * Fortran program's messages would bypass the plugin, and a pair of ranks
 * whose C code sends through pinshm while its Fortran code receives through
 * the library would never meet.  This file defines, for every call that
 * sends, receives, probes, starts or completes a point-to-point operation
 * or takes a request (and MPI_Init, MPI_Init_thread, MPI_Finalize, without
 * which the plugin never starts, MPI_Type_free, which must empty its type
 * cache, and the calls that make communicators, so that those made in
 * Fortran are carried too; the collectives are in fortran_coll.c), the
 * names those bindings define:
 *   ompi_X_f                     what mpi_f08 (libmpi_usempif08) calls
 *   MPI_X, mpi_x, mpi_x_, mpi_x__ what mpif.h and `use mpi` programs call
 *                                (gfortran: mpi_x_)
 * and, for the calls whose mpi_f08 wrapper goes to the profiling name
 * (pmpi_test_, pmpi_cart_create_...) instead, the mpi_f08 name
 * mpi_x_f08_.  The profiling names pmpi_x_ stay the library's.
 *
 * Each converts its Fortran arguments and calls the plugin's own C function
 * of the same call (MPI_Send...), which passes everything to the library
 * where the plugin is inactive.  Conversions: communicators and datatypes
 * with PMPI_Comm_f2c/PMPI_Type_f2c; requests with the plugin's
 * MPI_Request_f2c and request_c2f() below; messages, real ones of the
 * library (mprobe.c), with PMPI_Message_f2c/c2f; statuses with
 * PMPI_Status_f2c/c2f.  Fortran's MPI_BOTTOM, MPI_STATUS(ES)_IGNORE,
 * MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY and MPI_IN_PLACE are the addresses of Open MPI's
 * common blocks.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "fortran.h"


/* ---- conversions ----------------------------------------------------------- */

static bool status_ignored(const MPI_Fint *f)
{
	return &mpi_fortran_status_ignore_ && (const void *)f == (const void *)&mpi_fortran_status_ignore_;
}

static bool statuses_ignored(const MPI_Fint *f)
{
	return &mpi_fortran_statuses_ignore_ && (const void *)f == (const void *)&mpi_fortran_statuses_ignore_;
}

/* The C status for Fortran's @p f (its present fields copied in: a
 * single-completion call leaves MPI_ERROR as it was), or MPI_STATUS_IGNORE. */
static MPI_Status *status_in(const MPI_Fint *f, MPI_Status *c)
{
	if (status_ignored(f))
		return MPI_STATUS_IGNORE;
	PMPI_Status_f2c(f, c);
	return c;
}

static void status_out(const MPI_Status *c, MPI_Fint *f)
{
	if (c != MPI_STATUS_IGNORE)
		PMPI_Status_c2f(c, f);
}

/* Dist_graph weights: Fortran's MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY. */
static const int *weights_f2c(const MPI_Fint *w)
{
	if (&mpi_fortran_unweighted_ && (const void *)w == (const void *)&mpi_fortran_unweighted_)
		return MPI_UNWEIGHTED;
	if (&mpi_fortran_weights_empty_ && (const void *)w == (const void *)&mpi_fortran_weights_empty_)
		return MPI_WEIGHTS_EMPTY;
	return w;
}

/* Fortran's LOGICAL as gfortran (and Open MPI's configure) sees it: an
 * int, .TRUE. 1, so that an array of them reads in C as ints that are
 * nonzero where true. */
static int logical(int c_flag)
{
	return c_flag ? 1 : 0;
}

/* A call on an array of requests: the C handles (and the ones given, to
 * write back only those that changed: a finished nonblocking request
 * becomes MPI_REQUEST_NULL, a persistent one stays) and C statuses. */
#define ARRAY_ON_STACK 16
struct req_array {
	int n;
	MPI_Request *c, *given;
	MPI_Status *st; /* MPI_STATUSES_IGNORE where Fortran ignores them */
	MPI_Request c_s[ARRAY_ON_STACK], given_s[ARRAY_ON_STACK];
	MPI_Status st_s[ARRAY_ON_STACK];
	void *heap;     /* from malloc, for this call */
	bool spilled;   /* in spill */
};

/*
 * The room of calls on longer arrays, below MPI_THREAD_MULTIPLE (one
 * thread at a time in MPI): grown to the longest array seen and kept, so
 * that a call allocates nothing.  Busy while a call holds it; a call made
 * meanwhile (from an error handler, a generalized request's callback)
 * allocates its own, as every call does under MPI_THREAD_MULTIPLE.
 */
static struct {
	void *mem;
	size_t size;
	bool busy;
} spill;

void pm_fortran_teardown(void)
{
	free(spill.mem);
	spill.mem = NULL;
	spill.size = 0;
}

/* @p size bytes for @p a's arrays, or NULL. */
static void *array_room(struct req_array *a, size_t size)
{
	if (pm.multiple || spill.busy)
		return a->heap = malloc(size);
	if (size > spill.size) {
		free(spill.mem); /* nothing in it to keep */
		spill.mem = malloc(size);
		spill.size = spill.mem ? size : 0;
		if (!spill.mem)
			return NULL;
	}
	spill.busy = a->spilled = true;
	return spill.mem;
}

/* @return MPI_SUCCESS, or MPI_ERR_ARG (a negative count) or MPI_ERR_NO_MEM
 * through MPI_COMM_WORLD's handler.  (Open MPI 4.1's own bindings give
 * MPI_ERR_NO_MEM for a negative count, their malloc of it failing;
 * MPI_ERR_ARG is the class that says what is wrong.) */
static int array_in(struct req_array *a, int n, const MPI_Fint *freqs, MPI_Fint *fstatuses)
{
	if (n < 0)
		return pm_comm_error(MPI_COMM_WORLD, MPI_ERR_ARG);
	a->n = n;
	a->heap = NULL;
	a->spilled = false;
	a->c = a->c_s;
	a->given = a->given_s;
	a->st = a->st_s;
	if (a->n > ARRAY_ON_STACK) {
		size_t each = 2 * sizeof(MPI_Request) + sizeof(MPI_Status);
		a->st = array_room(a, (size_t)a->n * each);
		if (!a->st)
			return pm_comm_error(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
		a->c = (MPI_Request *)(void *)(a->st + a->n);
		a->given = a->c + a->n;
	}
	for (int i = 0; i < a->n; i++)
		a->c[i] = a->given[i] = MPI_Request_f2c(freqs[i]);
	if (!fstatuses || statuses_ignored(fstatuses))
		a->st = MPI_STATUSES_IGNORE;
	else
		for (int i = 0; i < a->n; i++)
			PMPI_Status_f2c(fstatuses + (size_t)i * F_STATUS_SIZE, &a->st[i]);
	return MPI_SUCCESS;
}

/* Write back the requests that changed, and the statuses; give the room
 * back. */
static void array_out(struct req_array *a, MPI_Fint *freqs, MPI_Fint *fstatuses)
{
	for (int i = 0; i < a->n; i++)
		if (a->c[i] != a->given[i])
			freqs[i] = request_c2f(a->c[i]);
	if (a->st != MPI_STATUSES_IGNORE)
		for (int i = 0; i < a->n; i++)
			PMPI_Status_c2f(&a->st[i], fstatuses + (size_t)i * F_STATUS_SIZE);
	if (a->spilled)
		spill.busy = false;
	free(a->heap);
}

/* ---- start and end ------------------------------------------------------------ */

F_API void ompi_init_f(MPI_Fint *ierr);
void ompi_init_f(MPI_Fint *ierr)
{
	int argc = 0;
	char **argv = NULL;
	set_ierr(ierr, MPI_Init(&argc, &argv));
}
FORTRAN_NAMES(MPI_INIT, init)

F_API void ompi_init_thread_f(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr);
void ompi_init_thread_f(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)
{
	int argc = 0, c_provided = MPI_THREAD_SINGLE;
	char **argv = NULL;
	int rc = MPI_Init_thread(&argc, &argv, *required, &c_provided);
	if (rc == MPI_SUCCESS)
		*provided = c_provided;
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_INIT_THREAD, init_thread)

F_API void ompi_finalize_f(MPI_Fint *ierr);
void ompi_finalize_f(MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Finalize());
}
FORTRAN_NAMES(MPI_FINALIZE, finalize)

F_API void ompi_type_free_f(MPI_Fint *type, MPI_Fint *ierr);
void ompi_type_free_f(MPI_Fint *type, MPI_Fint *ierr)
{
	MPI_Datatype c = PMPI_Type_f2c(*type);
	int rc = MPI_Type_free(&c);
	if (rc == MPI_SUCCESS)
		*type = PMPI_Type_c2f(c);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_TYPE_FREE, type_free)

/* ---- sends ----------------------------------------------------------------- */

/* Send, Ssend, Bsend, Rsend. */
#define F_SEND(UPPER, lower, cfunc)                                                                          \
	F_API void ompi_##lower##_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *tag, \
				    MPI_Fint *comm, MPI_Fint *ierr);                                           \
	void ompi_##lower##_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *tag,       \
			      MPI_Fint *comm, MPI_Fint *ierr)                                                  \
	{                                                                                                      \
		set_ierr(ierr, cfunc(buf_f2c(buf), *count, PMPI_Type_f2c(*type), *dest, *tag,                 \
				     PMPI_Comm_f2c(*comm)));                                                   \
	}                                                                                                      \
	FORTRAN_NAMES(UPPER, lower)

F_SEND(MPI_SEND, send, MPI_Send)
F_SEND(MPI_SSEND, ssend, MPI_Ssend)
F_SEND(MPI_BSEND, bsend, MPI_Bsend)
F_SEND(MPI_RSEND, rsend, MPI_Rsend)

/* Isend..., the persistent inits and Irecv, Recv_init: a request out. */
#define F_REQUEST(UPPER, lower, cfunc)                                                                        \
	F_API void ompi_##lower##_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *peer, MPI_Fint *tag,  \
				    MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr);                         \
	void ompi_##lower##_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *peer, MPI_Fint *tag,        \
			      MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr)                                \
	{                                                                                                       \
		MPI_Request c = MPI_REQUEST_NULL;                                                               \
		int rc = cfunc(buf_f2c(buf), *count, PMPI_Type_f2c(*type), *peer, *tag, PMPI_Comm_f2c(*comm), \
			       &c);                                                                             \
		if (rc == MPI_SUCCESS)                                                                          \
			*request = request_c2f(c);                                                          \
		set_ierr(ierr, rc);                                                                             \
	}                                                                                                       \
	FORTRAN_NAMES(UPPER, lower)

F_REQUEST(MPI_ISEND, isend, MPI_Isend)
F_REQUEST(MPI_ISSEND, issend, MPI_Issend)
F_REQUEST(MPI_IBSEND, ibsend, MPI_Ibsend)
F_REQUEST(MPI_IRSEND, irsend, MPI_Irsend)
F_REQUEST(MPI_SEND_INIT, send_init, MPI_Send_init)
F_REQUEST(MPI_SSEND_INIT, ssend_init, MPI_Ssend_init)
F_REQUEST(MPI_BSEND_INIT, bsend_init, MPI_Bsend_init)
F_REQUEST(MPI_RSEND_INIT, rsend_init, MPI_Rsend_init)
F_REQUEST(MPI_RECV_INIT, recv_init, MPI_Recv_init)
F_REQUEST(MPI_IRECV, irecv, MPI_Irecv)

F_API void ompi_sendrecv_f(void *sendbuf, MPI_Fint *sendcount, MPI_Fint *sendtype, MPI_Fint *dest,
			   MPI_Fint *sendtag, void *recvbuf, MPI_Fint *recvcount, MPI_Fint *recvtype,
			   MPI_Fint *source, MPI_Fint *recvtag, MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr);
void ompi_sendrecv_f(void *sendbuf, MPI_Fint *sendcount, MPI_Fint *sendtype, MPI_Fint *dest, MPI_Fint *sendtag,
		     void *recvbuf, MPI_Fint *recvcount, MPI_Fint *recvtype, MPI_Fint *source, MPI_Fint *recvtag,
		     MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	int rc = MPI_Sendrecv(buf_f2c(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), *dest, *sendtag,
			      buf_f2c(recvbuf), *recvcount, PMPI_Type_f2c(*recvtype), *source, *recvtag,
			      PMPI_Comm_f2c(*comm), c_status);
	status_out(c_status, status);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_SENDRECV, sendrecv)

F_API void ompi_sendrecv_replace_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *sendtag,
				   MPI_Fint *source, MPI_Fint *recvtag, MPI_Fint *comm, MPI_Fint *status,
				   MPI_Fint *ierr);
void ompi_sendrecv_replace_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *sendtag,
			     MPI_Fint *source, MPI_Fint *recvtag, MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	int rc = MPI_Sendrecv_replace(buf_f2c(buf), *count, PMPI_Type_f2c(*type), *dest, *sendtag, *source,
				      *recvtag, PMPI_Comm_f2c(*comm), c_status);
	status_out(c_status, status);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_SENDRECV_REPLACE, sendrecv_replace)

/* Fortran's MPI_BUFFER_DETACH (mpif.h, `use mpi`) does not return the
 * address; mpi_f08's does (a TYPE(C_PTR)). */
F_API void ompi_buffer_attach_f(void *buffer, MPI_Fint *size, MPI_Fint *ierr);
void ompi_buffer_attach_f(void *buffer, MPI_Fint *size, MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Buffer_attach(buffer, *size));
}
FORTRAN_NAMES(MPI_BUFFER_ATTACH, buffer_attach)

F_API void ompi_buffer_detach_f(void *buffer, MPI_Fint *size, MPI_Fint *ierr);
void ompi_buffer_detach_f(void *buffer, MPI_Fint *size, MPI_Fint *ierr)
{
	void *addr;
	int c_size = 0;
	(void)buffer;
	int rc = MPI_Buffer_detach(&addr, &c_size);
	if (rc == MPI_SUCCESS)
		*size = c_size;
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_BUFFER_DETACH, buffer_detach)

F_API void mpi_buffer_detach_f08_(void **buffer_addr, MPI_Fint *size, MPI_Fint *ierr);
void mpi_buffer_detach_f08_(void **buffer_addr, MPI_Fint *size, MPI_Fint *ierr)
{
	int c_size = 0;
	int rc = MPI_Buffer_detach(buffer_addr, &c_size);
	if (rc == MPI_SUCCESS)
		*size = c_size;
	set_ierr(ierr, rc);
}

/* ---- receives and probes ------------------------------------------------------ */

F_API void ompi_recv_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *source, MPI_Fint *tag,
		       MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr);
void ompi_recv_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm,
		 MPI_Fint *status, MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	int rc = MPI_Recv(buf_f2c(buf), *count, PMPI_Type_f2c(*type), *source, *tag, PMPI_Comm_f2c(*comm),
			  c_status);
	status_out(c_status, status);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_RECV, recv)

F_API void ompi_probe_f(MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr);
void ompi_probe_f(MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	int rc = MPI_Probe(*source, *tag, PMPI_Comm_f2c(*comm), c_status);
	status_out(c_status, status);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_PROBE, probe)

F_API void ompi_iprobe_f(MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm, int *flag, MPI_Fint *status,
			 MPI_Fint *ierr);
void ompi_iprobe_f(MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm, int *flag, MPI_Fint *status, MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	int c_flag = 0;
	int rc = MPI_Iprobe(*source, *tag, PMPI_Comm_f2c(*comm), &c_flag, c_status);
	if (rc == MPI_SUCCESS) {
		*flag = logical(c_flag);
		if (c_flag)
			status_out(c_status, status);
	}
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_IPROBE, iprobe)
F08_NAME(iprobe)

F_API void ompi_mprobe_f(MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *message, MPI_Fint *status,
			 MPI_Fint *ierr);
void ompi_mprobe_f(MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *message, MPI_Fint *status,
		   MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	MPI_Message c_message = MPI_MESSAGE_NULL;
	int rc = MPI_Mprobe(*source, *tag, PMPI_Comm_f2c(*comm), &c_message, c_status);
	if (rc == MPI_SUCCESS) {
		*message = PMPI_Message_c2f(c_message);
		status_out(c_status, status);
	}
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_MPROBE, mprobe)

F_API void ompi_improbe_f(MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm, int *flag, MPI_Fint *message,
			  MPI_Fint *status, MPI_Fint *ierr);
void ompi_improbe_f(MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm, int *flag, MPI_Fint *message,
		    MPI_Fint *status, MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	MPI_Message c_message = MPI_MESSAGE_NULL;
	int c_flag = 0;
	int rc = MPI_Improbe(*source, *tag, PMPI_Comm_f2c(*comm), &c_flag, &c_message, c_status);
	if (rc == MPI_SUCCESS) {
		*flag = logical(c_flag);
		if (c_flag) {
			*message = PMPI_Message_c2f(c_message);
			status_out(c_status, status);
		}
	}
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_IMPROBE, improbe)
F08_NAME(improbe)

F_API void ompi_mrecv_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *message, MPI_Fint *status,
			MPI_Fint *ierr);
void ompi_mrecv_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *message, MPI_Fint *status,
		  MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	MPI_Message c_message = PMPI_Message_f2c(*message);
	int rc = MPI_Mrecv(buf_f2c(buf), *count, PMPI_Type_f2c(*type), &c_message, c_status);
	if (rc == MPI_SUCCESS)
		*message = PMPI_Message_c2f(c_message);
	status_out(c_status, status);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_MRECV, mrecv)

F_API void ompi_imrecv_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *message, MPI_Fint *request,
			 MPI_Fint *ierr);
void ompi_imrecv_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *message, MPI_Fint *request,
		   MPI_Fint *ierr)
{
	MPI_Message c_message = PMPI_Message_f2c(*message);
	MPI_Request c = MPI_REQUEST_NULL;
	int rc = MPI_Imrecv(buf_f2c(buf), *count, PMPI_Type_f2c(*type), &c_message, &c);
	if (rc == MPI_SUCCESS) {
		*message = PMPI_Message_c2f(c_message);
		*request = request_c2f(c);
	}
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_IMRECV, imrecv)

/* ---- one request ------------------------------------------------------------ */

F_API void ompi_start_f(MPI_Fint *request, MPI_Fint *ierr);
void ompi_start_f(MPI_Fint *request, MPI_Fint *ierr)
{
	MPI_Request c = MPI_Request_f2c(*request), given = c;
	int rc = MPI_Start(&c);
	if (c != given)
		*request = request_c2f(c);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_START, start)

F_API void ompi_wait_f(MPI_Fint *request, MPI_Fint *status, MPI_Fint *ierr);
void ompi_wait_f(MPI_Fint *request, MPI_Fint *status, MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	MPI_Request c = MPI_Request_f2c(*request), given = c;
	int rc = MPI_Wait(&c, c_status);
	if (c != given)
		*request = request_c2f(c);
	status_out(c_status, status);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_WAIT, wait)

F_API void ompi_test_f(MPI_Fint *request, int *flag, MPI_Fint *status, MPI_Fint *ierr);
void ompi_test_f(MPI_Fint *request, int *flag, MPI_Fint *status, MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	MPI_Request c = MPI_Request_f2c(*request), given = c;
	int c_flag = 0;
	int rc = MPI_Test(&c, &c_flag, c_status);
	if (c != given)
		*request = request_c2f(c);
	*flag = logical(c_flag);
	if (c_flag)
		status_out(c_status, status);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_TEST, test)
F08_NAME(test)

F_API void ompi_request_get_status_f(MPI_Fint *request, int *flag, MPI_Fint *status, MPI_Fint *ierr);
void ompi_request_get_status_f(MPI_Fint *request, int *flag, MPI_Fint *status, MPI_Fint *ierr)
{
	MPI_Status s, *c_status = status_in(status, &s);
	int c_flag = 0;
	int rc = MPI_Request_get_status(MPI_Request_f2c(*request), &c_flag, c_status);
	if (rc == MPI_SUCCESS) {
		*flag = logical(c_flag);
		if (c_flag)
			status_out(c_status, status);
	}
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_REQUEST_GET_STATUS, request_get_status)
F08_NAME(request_get_status)

F_API void ompi_request_free_f(MPI_Fint *request, MPI_Fint *ierr);
void ompi_request_free_f(MPI_Fint *request, MPI_Fint *ierr)
{
	MPI_Request c = MPI_Request_f2c(*request);
	int rc = MPI_Request_free(&c);
	if (rc == MPI_SUCCESS)
		*request = request_c2f(MPI_REQUEST_NULL);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_REQUEST_FREE, request_free)

F_API void ompi_cancel_f(MPI_Fint *request, MPI_Fint *ierr);
void ompi_cancel_f(MPI_Fint *request, MPI_Fint *ierr)
{
	MPI_Request c = MPI_Request_f2c(*request);
	set_ierr(ierr, MPI_Cancel(&c));
}
FORTRAN_NAMES(MPI_CANCEL, cancel)

/* ---- arrays of requests ------------------------------------------------------- */

F_API void ompi_startall_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *ierr);
void ompi_startall_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *ierr)
{
	struct req_array a;
	int rc = array_in(&a, *count, requests, NULL);
	if (rc == MPI_SUCCESS) {
		rc = MPI_Startall(a.n, a.c);
		array_out(&a, requests, NULL);
	}
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_STARTALL, startall)

F_API void ompi_waitall_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *statuses, MPI_Fint *ierr);
void ompi_waitall_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *statuses, MPI_Fint *ierr)
{
	struct req_array a;
	int rc = array_in(&a, *count, requests, statuses);
	if (rc == MPI_SUCCESS) {
		rc = MPI_Waitall(a.n, a.c, a.st);
		array_out(&a, requests, statuses);
	}
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_WAITALL, waitall)

F_API void ompi_testall_f(MPI_Fint *count, MPI_Fint *requests, int *flag, MPI_Fint *statuses, MPI_Fint *ierr);
void ompi_testall_f(MPI_Fint *count, MPI_Fint *requests, int *flag, MPI_Fint *statuses, MPI_Fint *ierr)
{
	struct req_array a;
	int c_flag = 0;
	int rc = array_in(&a, *count, requests, statuses);
	if (rc == MPI_SUCCESS) {
		rc = MPI_Testall(a.n, a.c, &c_flag, a.st);
		if (!c_flag && rc == MPI_SUCCESS)
			a.st = MPI_STATUSES_IGNORE; /* nothing to say yet */
		array_out(&a, requests, statuses);
		*flag = logical(c_flag);
	}
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_TESTALL, testall)
F08_NAME(testall)

/* MPI_Waitany and MPI_Testany: Fortran's index counts from 1. */
static void index_out(int c_index, MPI_Fint *index)
{
	*index = c_index == MPI_UNDEFINED ? MPI_UNDEFINED : c_index + 1;
}

F_API void ompi_waitany_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *index, MPI_Fint *status,
			  MPI_Fint *ierr);
void ompi_waitany_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *index, MPI_Fint *status, MPI_Fint *ierr)
{
	struct req_array a;
	MPI_Status s, *c_status = status_in(status, &s);
	int c_index = MPI_UNDEFINED;
	int rc = array_in(&a, *count, requests, NULL);
	if (rc == MPI_SUCCESS) {
		rc = MPI_Waitany(a.n, a.c, &c_index, c_status);
		array_out(&a, requests, NULL);
		index_out(c_index, index);
		status_out(c_status, status);
	}
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_WAITANY, waitany)

F_API void ompi_testany_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *index, int *flag, MPI_Fint *status,
			  MPI_Fint *ierr);
void ompi_testany_f(MPI_Fint *count, MPI_Fint *requests, MPI_Fint *index, int *flag, MPI_Fint *status,
		    MPI_Fint *ierr)
{
	struct req_array a;
	MPI_Status s, *c_status = status_in(status, &s);
	int c_index = MPI_UNDEFINED, c_flag = 0;
	int rc = array_in(&a, *count, requests, NULL);
	if (rc == MPI_SUCCESS) {
		rc = MPI_Testany(a.n, a.c, &c_index, &c_flag, c_status);
		array_out(&a, requests, NULL);
		index_out(c_index, index);
		*flag = logical(c_flag);
		if (c_flag)
			status_out(c_status, status);
	}
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_TESTANY, testany)
F08_NAME(testany)

/* MPI_Waitsome and MPI_Testsome: Fortran's indices count from 1. */
#define F_SOME(UPPER, lower, cfunc)                                                                         \
	F_API void ompi_##lower##_f(MPI_Fint *incount, MPI_Fint *requests, MPI_Fint *outcount,               \
				    MPI_Fint *indices, MPI_Fint *statuses, MPI_Fint *ierr);                  \
	void ompi_##lower##_f(MPI_Fint *incount, MPI_Fint *requests, MPI_Fint *outcount, MPI_Fint *indices,  \
			      MPI_Fint *statuses, MPI_Fint *ierr)                                            \
	{                                                                                                     \
		struct req_array a;                                                                           \
		int c_out = MPI_UNDEFINED;                                                                    \
		int rc = array_in(&a, *incount, requests, statuses);                                          \
		if (rc == MPI_SUCCESS) {                                                                      \
			rc = cfunc(a.n, a.c, &c_out, indices, a.st);                                          \
			array_out(&a, requests, statuses);                                                    \
			*outcount = c_out;                                                                    \
			for (int i = 0; c_out != MPI_UNDEFINED && i < c_out; i++)                             \
				indices[i]++;                                                                 \
		}                                                                                             \
		set_ierr(ierr, rc);                                                                           \
	}                                                                                                     \
	FORTRAN_NAMES(UPPER, lower)

F_SOME(MPI_WAITSOME, waitsome, MPI_Waitsome)
F_SOME(MPI_TESTSOME, testsome, MPI_Testsome)
F08_NAME(testsome)

/* ---- communicators ------------------------------------------------------------ */

/*
 * The calls that make a communicator from a carried one go to comm.c, as
 * C's do, so that a communicator made in Fortran is carried as well and
 * every member counts the creation on the parent the same way (contexts
 * are derived from that count), whichever language each member calls from.
 */
#define F_COMM_OUT(rc, newcomm, c_new)                      \
	do {                                                \
		if ((rc) == MPI_SUCCESS)                    \
			*(newcomm) = PMPI_Comm_c2f(c_new);  \
		set_ierr(ierr, rc);                         \
	} while (0)

F_API void ompi_comm_dup_f(MPI_Fint *comm, MPI_Fint *newcomm, MPI_Fint *ierr);
void ompi_comm_dup_f(MPI_Fint *comm, MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Comm_dup(PMPI_Comm_f2c(*comm), &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_COMM_DUP, comm_dup)

F_API void ompi_comm_dup_with_info_f(MPI_Fint *comm, MPI_Fint *info, MPI_Fint *newcomm, MPI_Fint *ierr);
void ompi_comm_dup_with_info_f(MPI_Fint *comm, MPI_Fint *info, MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Comm_dup_with_info(PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_COMM_DUP_WITH_INFO, comm_dup_with_info)

F_API void ompi_comm_split_f(MPI_Fint *comm, MPI_Fint *color, MPI_Fint *key, MPI_Fint *newcomm, MPI_Fint *ierr);
void ompi_comm_split_f(MPI_Fint *comm, MPI_Fint *color, MPI_Fint *key, MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Comm_split(PMPI_Comm_f2c(*comm), *color, *key, &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_COMM_SPLIT, comm_split)

F_API void ompi_comm_split_type_f(MPI_Fint *comm, MPI_Fint *split_type, MPI_Fint *key, MPI_Fint *info,
				  MPI_Fint *newcomm, MPI_Fint *ierr);
void ompi_comm_split_type_f(MPI_Fint *comm, MPI_Fint *split_type, MPI_Fint *key, MPI_Fint *info,
			    MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Comm_split_type(PMPI_Comm_f2c(*comm), *split_type, *key, PMPI_Info_f2c(*info), &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_COMM_SPLIT_TYPE, comm_split_type)

F_API void ompi_comm_create_f(MPI_Fint *comm, MPI_Fint *group, MPI_Fint *newcomm, MPI_Fint *ierr);
void ompi_comm_create_f(MPI_Fint *comm, MPI_Fint *group, MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Comm_create(PMPI_Comm_f2c(*comm), PMPI_Group_f2c(*group), &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_COMM_CREATE, comm_create)

F_API void ompi_comm_create_group_f(MPI_Fint *comm, MPI_Fint *group, MPI_Fint *tag, MPI_Fint *newcomm,
				    MPI_Fint *ierr);
void ompi_comm_create_group_f(MPI_Fint *comm, MPI_Fint *group, MPI_Fint *tag, MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Comm_create_group(PMPI_Comm_f2c(*comm), PMPI_Group_f2c(*group), *tag, &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_COMM_CREATE_GROUP, comm_create_group)

F_API void ompi_cart_create_f(MPI_Fint *comm, MPI_Fint *ndims, MPI_Fint *dims, int *periods, int *reorder,
			      MPI_Fint *newcomm, MPI_Fint *ierr);
void ompi_cart_create_f(MPI_Fint *comm, MPI_Fint *ndims, MPI_Fint *dims, int *periods, int *reorder,
			MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Cart_create(PMPI_Comm_f2c(*comm), *ndims, dims, periods, *reorder != 0, &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_CART_CREATE, cart_create)
F08_NAME(cart_create)

F_API void ompi_cart_sub_f(MPI_Fint *comm, int *remain_dims, MPI_Fint *newcomm, MPI_Fint *ierr);
void ompi_cart_sub_f(MPI_Fint *comm, int *remain_dims, MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Cart_sub(PMPI_Comm_f2c(*comm), remain_dims, &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_CART_SUB, cart_sub)
F08_NAME(cart_sub)

F_API void ompi_graph_create_f(MPI_Fint *comm, MPI_Fint *nnodes, MPI_Fint *index, MPI_Fint *edges, int *reorder,
			       MPI_Fint *newcomm, MPI_Fint *ierr);
void ompi_graph_create_f(MPI_Fint *comm, MPI_Fint *nnodes, MPI_Fint *index, MPI_Fint *edges, int *reorder,
			 MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Graph_create(PMPI_Comm_f2c(*comm), *nnodes, index, edges, *reorder != 0, &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_GRAPH_CREATE, graph_create)
F08_NAME(graph_create)

F_API void ompi_dist_graph_create_f(MPI_Fint *comm, MPI_Fint *n, MPI_Fint *sources, MPI_Fint *degrees,
				    MPI_Fint *destinations, MPI_Fint *weights, MPI_Fint *info, int *reorder,
				    MPI_Fint *newcomm, MPI_Fint *ierr);
void ompi_dist_graph_create_f(MPI_Fint *comm, MPI_Fint *n, MPI_Fint *sources, MPI_Fint *degrees,
			      MPI_Fint *destinations, MPI_Fint *weights, MPI_Fint *info, int *reorder,
			      MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Dist_graph_create(PMPI_Comm_f2c(*comm), *n, sources, degrees, destinations, weights_f2c(weights),
				       PMPI_Info_f2c(*info), *reorder != 0, &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_DIST_GRAPH_CREATE, dist_graph_create)
F08_NAME(dist_graph_create)

F_API void ompi_dist_graph_create_adjacent_f(MPI_Fint *comm, MPI_Fint *indegree, MPI_Fint *sources,
					     MPI_Fint *sourceweights, MPI_Fint *outdegree, MPI_Fint *destinations,
					     MPI_Fint *destweights, MPI_Fint *info, int *reorder, MPI_Fint *newcomm,
					     MPI_Fint *ierr);
void ompi_dist_graph_create_adjacent_f(MPI_Fint *comm, MPI_Fint *indegree, MPI_Fint *sources,
				       MPI_Fint *sourceweights, MPI_Fint *outdegree, MPI_Fint *destinations,
				       MPI_Fint *destweights, MPI_Fint *info, int *reorder, MPI_Fint *newcomm,
				       MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Dist_graph_create_adjacent(PMPI_Comm_f2c(*comm), *indegree, sources, weights_f2c(sourceweights),
						*outdegree, destinations, weights_f2c(destweights),
						PMPI_Info_f2c(*info), *reorder != 0, &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_DIST_GRAPH_CREATE_ADJACENT, dist_graph_create_adjacent)
F08_NAME(dist_graph_create_adjacent)

F_API void ompi_intercomm_merge_f(MPI_Fint *intercomm, int *high, MPI_Fint *newcomm, MPI_Fint *ierr);
void ompi_intercomm_merge_f(MPI_Fint *intercomm, int *high, MPI_Fint *newcomm, MPI_Fint *ierr)
{
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Intercomm_merge(PMPI_Comm_f2c(*intercomm), *high != 0, &c);
	F_COMM_OUT(rc, newcomm, c);
}
FORTRAN_NAMES(MPI_INTERCOMM_MERGE, intercomm_merge)
F08_NAME(intercomm_merge)

/* The new handle is written when the request completes (pm_comm_idup), so
 * the C communicator lives in a cell of its own until then; the request is
 * the C one's Fortran handle, which Fortran's waits and tests (above) turn
 * back into the plugin's op.  mpi_f08 calls ompi_comm_idup_f. */
F_API void ompi_comm_idup_f(MPI_Fint *comm, MPI_Fint *newcomm, MPI_Fint *request, MPI_Fint *ierr);
void ompi_comm_idup_f(MPI_Fint *comm, MPI_Fint *newcomm, MPI_Fint *request, MPI_Fint *ierr)
{
	MPI_Comm c_comm = PMPI_Comm_f2c(*comm), *cell = malloc(sizeof(*cell));
	MPI_Request c = MPI_REQUEST_NULL;
	if (!cell) {
		set_ierr(ierr, pm_comm_error(c_comm, MPI_ERR_NO_MEM));
		return;
	}
	int rc = pm_comm_idup(c_comm, cell, newcomm, &c); /* takes the cell */
	if (rc == MPI_SUCCESS)
		*request = request_c2f(c);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_COMM_IDUP, comm_idup)
