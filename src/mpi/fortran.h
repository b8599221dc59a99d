/*
 * fortran.h - what fortran.c (point to point, requests, communicators) and
 * fortran_coll.c (the collectives) share: the Fortran names of a call,
 * Open MPI's common blocks, and the conversions both use.  The naming
 * scheme is told at the top of fortran.c.
 */
#ifndef PINSHM_MPI_FORTRAN_H
#define PINSHM_MPI_FORTRAN_H

#include <stdbool.h>

#include "plugin.h"

/* Open MPI's Fortran integers, logicals and indices are C ints here. */
_Static_assert(sizeof(MPI_Fint) == sizeof(int), "MPI_Fint is not an int");

/* Open MPI's common blocks (libmpi): Fortran passes their addresses. */
extern char mpi_fortran_bottom_ __attribute__((weak));
extern char mpi_fortran_status_ignore_ __attribute__((weak));
extern char mpi_fortran_statuses_ignore_ __attribute__((weak));
extern char mpi_fortran_unweighted_ __attribute__((weak));
extern char mpi_fortran_weights_empty_ __attribute__((weak));

/* A Fortran status is this many integers. */
#define F_STATUS_SIZE (sizeof(MPI_Status) / sizeof(MPI_Fint))

/* Every Fortran name of a call, bound to its ompi_X_f. */
#define F_NAME(name, impl) extern __typeof__(impl) name __attribute__((alias(#impl), visibility("default")));
#define FORTRAN_NAMES(UPPER, lower)                         \
	F_NAME(UPPER, ompi_##lower##_f)                     \
	F_NAME(mpi_##lower, ompi_##lower##_f)               \
	F_NAME(mpi_##lower##_, ompi_##lower##_f)            \
	F_NAME(mpi_##lower##__, ompi_##lower##_f)
/* ... and its mpi_f08 name, where mpi_f08 does not call ompi_X_f. */
#define F08_NAME(lower) F_NAME(mpi_##lower##_f08_, ompi_##lower##_f)

/* Exported (the library is built with -fvisibility=hidden); each
 * implementation is declared with it first. */
#define F_API __attribute__((visibility("default")))

static inline void *buf_f2c(void *buf)
{
	return &mpi_fortran_bottom_ && buf == (void *)&mpi_fortran_bottom_ ? MPI_BOTTOM : buf;
}

static inline void set_ierr(MPI_Fint *ierr, int rc)
{
	if (ierr)
		*ierr = (MPI_Fint)rc;
}

/* A request's Fortran handle: the library's index of the C handle itself,
 * also for a plugin op (its stand-in request, ops.c).  The Fortran files
 * intercept every Fortran call that takes a request, so none of them
 * reaches the library with the stand-in; C code that asks for a Fortran
 * handle (MPI_Request_c2f) gets a generalized request instead, which the
 * library can wait on too. */
static inline MPI_Fint request_c2f(MPI_Request c)
{
	return PMPI_Request_c2f(c);
}

#endif /* PINSHM_MPI_FORTRAN_H */
