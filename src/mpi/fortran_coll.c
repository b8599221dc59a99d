/*
 * fortran_coll.c - Fortran's collective calls, carried by the plugin so
 * that a Fortran rank takes the path its C peers take, and MPI_Op_free,
 * which must not free an op that a pending call still applies (the names
 * and conversions: fortran.h, fortran.c).
 */
#include "fortran.h"

/* ---- collectives (coll_ops.c) ------------------------------------------- */

/* Fortran's MPI_IN_PLACE: the address of Open MPI's common block. */
extern char mpi_fortran_in_place_ __attribute__((weak));

static const void *send_f2c(void *buf)
{
	return &mpi_fortran_in_place_ && buf == (void *)&mpi_fortran_in_place_ ? MPI_IN_PLACE : buf_f2c(buf);
}

F_API void ompi_barrier_f(MPI_Fint *comm, MPI_Fint *ierr);
void ompi_barrier_f(MPI_Fint *comm, MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Barrier(PMPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(MPI_BARRIER, barrier)

F_API void ompi_bcast_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr);
void ompi_bcast_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Bcast(buf_f2c(buf), *count, PMPI_Type_f2c(*type), *root, PMPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(MPI_BCAST, bcast)

F_API void ompi_reduce_f(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,
			 MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr);
void ompi_reduce_f(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *root,
		   MPI_Fint *comm, MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Reduce(send_f2c(sendbuf), buf_f2c(recvbuf), *count, PMPI_Type_f2c(*type),
				  PMPI_Op_f2c(*op), *root, PMPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(MPI_REDUCE, reduce)

F_API void ompi_allreduce_f(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,
			    MPI_Fint *comm, MPI_Fint *ierr);
void ompi_allreduce_f(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,
		      MPI_Fint *comm, MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Allreduce(send_f2c(sendbuf), buf_f2c(recvbuf), *count, PMPI_Type_f2c(*type),
				     PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(MPI_ALLREDUCE, allreduce)

/* Gather, Scatter, Allgather: Fortran's MPI_IN_PLACE is the send buffer
 * (Gather, Allgather) or the receive buffer (Scatter). */
#define F_BLOCKS(UPPER, lower, cfunc, ROOT_ARG, ROOT)                                                          \
	F_API void ompi_##lower##_f(void *sendbuf, MPI_Fint *scount, MPI_Fint *stype, void *recvbuf,            \
				    MPI_Fint *rcount, MPI_Fint *rtype, ROOT_ARG MPI_Fint *comm, MPI_Fint *ierr); \
	void ompi_##lower##_f(void *sendbuf, MPI_Fint *scount, MPI_Fint *stype, void *recvbuf, MPI_Fint *rcount, \
			      MPI_Fint *rtype, ROOT_ARG MPI_Fint *comm, MPI_Fint *ierr)                         \
	{                                                                                                        \
		set_ierr(ierr, cfunc(send_f2c(sendbuf), *scount, PMPI_Type_f2c(*stype),                          \
				     (void *)(uintptr_t)send_f2c(recvbuf), *rcount, PMPI_Type_f2c(*rtype),       \
				     ROOT PMPI_Comm_f2c(*comm)));                                                \
	}                                                                                                        \
	FORTRAN_NAMES(UPPER, lower)

#define F_ROOT_ARG MPI_Fint *root,
#define F_ROOT *root,
F_BLOCKS(MPI_GATHER, gather, MPI_Gather, F_ROOT_ARG, F_ROOT)
F_BLOCKS(MPI_SCATTER, scatter, MPI_Scatter, F_ROOT_ARG, F_ROOT)
F_BLOCKS(MPI_ALLGATHER, allgather, MPI_Allgather, , )
F_BLOCKS(MPI_ALLTOALL, alltoall, MPI_Alltoall, , )

/* The v variants, reduce-scatter and the scans (coll_vops.c, coll_scan.c):
 * Fortran's MPI_IN_PLACE is a send buffer, or Scatterv's receive buffer. */
F_API void ompi_gatherv_f(void *sendbuf, MPI_Fint *scount, MPI_Fint *stype, void *recvbuf, MPI_Fint *rcounts,
			  MPI_Fint *displs, MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr);
void ompi_gatherv_f(void *sendbuf, MPI_Fint *scount, MPI_Fint *stype, void *recvbuf, MPI_Fint *rcounts,
		    MPI_Fint *displs, MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Gatherv(send_f2c(sendbuf), *scount, PMPI_Type_f2c(*stype), buf_f2c(recvbuf), rcounts,
				   displs, PMPI_Type_f2c(*rtype), *root, PMPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(MPI_GATHERV, gatherv)

F_API void ompi_scatterv_f(void *sendbuf, MPI_Fint *scounts, MPI_Fint *displs, MPI_Fint *stype, void *recvbuf,
			   MPI_Fint *rcount, MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr);
void ompi_scatterv_f(void *sendbuf, MPI_Fint *scounts, MPI_Fint *displs, MPI_Fint *stype, void *recvbuf,
		     MPI_Fint *rcount, MPI_Fint *rtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Scatterv(buf_f2c(sendbuf), scounts, displs, PMPI_Type_f2c(*stype),
				    (void *)(uintptr_t)send_f2c(recvbuf), *rcount, PMPI_Type_f2c(*rtype), *root,
				    PMPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(MPI_SCATTERV, scatterv)

F_API void ompi_allgatherv_f(void *sendbuf, MPI_Fint *scount, MPI_Fint *stype, void *recvbuf, MPI_Fint *rcounts,
			     MPI_Fint *displs, MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr);
void ompi_allgatherv_f(void *sendbuf, MPI_Fint *scount, MPI_Fint *stype, void *recvbuf, MPI_Fint *rcounts,
		       MPI_Fint *displs, MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Allgatherv(send_f2c(sendbuf), *scount, PMPI_Type_f2c(*stype), buf_f2c(recvbuf), rcounts,
				      displs, PMPI_Type_f2c(*rtype), PMPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(MPI_ALLGATHERV, allgatherv)

F_API void ompi_alltoallv_f(void *sendbuf, MPI_Fint *scounts, MPI_Fint *sdispls, MPI_Fint *stype, void *recvbuf,
			    MPI_Fint *rcounts, MPI_Fint *rdispls, MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr);
void ompi_alltoallv_f(void *sendbuf, MPI_Fint *scounts, MPI_Fint *sdispls, MPI_Fint *stype, void *recvbuf,
		      MPI_Fint *rcounts, MPI_Fint *rdispls, MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Alltoallv(send_f2c(sendbuf), scounts, sdispls, PMPI_Type_f2c(*stype), buf_f2c(recvbuf),
				     rcounts, rdispls, PMPI_Type_f2c(*rtype), PMPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(MPI_ALLTOALLV, alltoallv)

F_API void ompi_reduce_scatter_f(void *sendbuf, void *recvbuf, MPI_Fint *counts, MPI_Fint *type, MPI_Fint *op,
				 MPI_Fint *comm, MPI_Fint *ierr);
void ompi_reduce_scatter_f(void *sendbuf, void *recvbuf, MPI_Fint *counts, MPI_Fint *type, MPI_Fint *op,
			   MPI_Fint *comm, MPI_Fint *ierr)
{
	set_ierr(ierr, MPI_Reduce_scatter(send_f2c(sendbuf), buf_f2c(recvbuf), counts, PMPI_Type_f2c(*type),
					  PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(MPI_REDUCE_SCATTER, reduce_scatter)

/* Reduce_scatter_block, Scan, Exscan: as Allreduce. */
#define F_REDUCTION(UPPER, lower, cfunc)                                                                         \
	F_API void ompi_##lower##_f(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, \
				    MPI_Fint *comm, MPI_Fint *ierr);                                           \
	void ompi_##lower##_f(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,       \
			      MPI_Fint *comm, MPI_Fint *ierr)                                                  \
	{                                                                                                        \
		set_ierr(ierr, cfunc(send_f2c(sendbuf), buf_f2c(recvbuf), *count, PMPI_Type_f2c(*type),           \
				     PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm)));                                   \
	}                                                                                                        \
	FORTRAN_NAMES(UPPER, lower)

F_REDUCTION(MPI_REDUCE_SCATTER_BLOCK, reduce_scatter_block, MPI_Reduce_scatter_block)
F_REDUCTION(MPI_SCAN, scan, MPI_Scan)
F_REDUCTION(MPI_EXSCAN, exscan, MPI_Exscan)
/* ---- nonblocking collectives (coll_nb.c) ------------------------------------ */

F_API void ompi_ibarrier_f(MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr);
void ompi_ibarrier_f(MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr)
{
	MPI_Request c = MPI_REQUEST_NULL;
	int rc = MPI_Ibarrier(PMPI_Comm_f2c(*comm), &c);
	if (rc == MPI_SUCCESS)
		*request = request_c2f(c);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_IBARRIER, ibarrier)

F_API void ompi_ibcast_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *root, MPI_Fint *comm,
			 MPI_Fint *request, MPI_Fint *ierr);
void ompi_ibcast_f(void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *request,
		   MPI_Fint *ierr)
{
	MPI_Request c = MPI_REQUEST_NULL;
	int rc = MPI_Ibcast(buf_f2c(buf), *count, PMPI_Type_f2c(*type), *root, PMPI_Comm_f2c(*comm), &c);
	if (rc == MPI_SUCCESS)
		*request = request_c2f(c);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_IBCAST, ibcast)

F_API void ompi_ireduce_f(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,
			  MPI_Fint *root, MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr);
void ompi_ireduce_f(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *root,
		    MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr)
{
	MPI_Request c = MPI_REQUEST_NULL;
	int rc = MPI_Ireduce(send_f2c(sendbuf), buf_f2c(recvbuf), *count, PMPI_Type_f2c(*type), PMPI_Op_f2c(*op),
			     *root, PMPI_Comm_f2c(*comm), &c);
	if (rc == MPI_SUCCESS)
		*request = request_c2f(c);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_IREDUCE, ireduce)

F_API void ompi_iallreduce_f(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,
			     MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr);
void ompi_iallreduce_f(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op,
		       MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr)
{
	MPI_Request c = MPI_REQUEST_NULL;
	int rc = MPI_Iallreduce(send_f2c(sendbuf), buf_f2c(recvbuf), *count, PMPI_Type_f2c(*type), PMPI_Op_f2c(*op),
				PMPI_Comm_f2c(*comm), &c);
	if (rc == MPI_SUCCESS)
		*request = request_c2f(c);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_IALLREDUCE, iallreduce)

F_API void ompi_iallgather_f(void *sendbuf, MPI_Fint *scount, MPI_Fint *stype, void *recvbuf, MPI_Fint *rcount,
			     MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr);
void ompi_iallgather_f(void *sendbuf, MPI_Fint *scount, MPI_Fint *stype, void *recvbuf, MPI_Fint *rcount,
		       MPI_Fint *rtype, MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierr)
{
	MPI_Request c = MPI_REQUEST_NULL;
	int rc = MPI_Iallgather(send_f2c(sendbuf), *scount, PMPI_Type_f2c(*stype), buf_f2c(recvbuf), *rcount,
				PMPI_Type_f2c(*rtype), PMPI_Comm_f2c(*comm), &c);
	if (rc == MPI_SUCCESS)
		*request = request_c2f(c);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_IALLGATHER, iallgather)

/* MPI_Op_free: put off while a pending call applies the op (coll_nb.c). */
F_API void ompi_op_free_f(MPI_Fint *op, MPI_Fint *ierr);
void ompi_op_free_f(MPI_Fint *op, MPI_Fint *ierr)
{
	MPI_Op c = PMPI_Op_f2c(*op);
	int rc = MPI_Op_free(&c);
	if (rc == MPI_SUCCESS)
		*op = PMPI_Op_c2f(c);
	set_ierr(ierr, rc);
}
FORTRAN_NAMES(MPI_OP_FREE, op_free)
