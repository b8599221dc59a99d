/*
 * wrap_send.c - a tool's library, as a profiler's would be: it defines
 * MPI_Send, passing each call to PMPI_Send, and nothing else of MPI.
 * check_mpi preloads it before the plugin, whose own calls must then leave
 * everything to the MPI library too (src/mpi/lookup.c): a message sent
 * through the library would never reach a receive of the plugin.
 */
#include <mpi.h>

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
	return PMPI_Send(buf, count, datatype, dest, tag, comm);
}
