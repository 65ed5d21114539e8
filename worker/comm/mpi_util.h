// Internal to worker/comm (mpi_communicator.cc, nccl_communicator.cc): MPI initialisation shared
// by the MPI and NCCL backends, and the MPI return-code → Status macro. Only compiled when the
// build has MPI. Not part of the trainer's interface.
#pragma once

// The C API only: without these, <mpi.h> compiled as C++ drags in the deprecated MPI C++
// bindings (and their library) with OpenMPI and MPICH.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <string>

#include "common/status.h"

namespace rdattn::comm::internal {

// Initialises MPI (MPI_THREAD_FUNNELED) unless it already is; if this call initialised it,
// MPI_Finalize is registered to run at process exit (once). FAILED_PRECONDITION if MPI has been
// finalised already.
Status EnsureMpiInitialized();

// Duplicates MPI_COMM_WORLD and sets MPI_ERRORS_RETURN on the copy, so that failures come back
// as return codes instead of aborting the job.
Status DupWorld(MPI_Comm* out);

// Frees a communicator made by DupWorld unless MPI is already finalised (exit order).
void FreeComm(MPI_Comm* comm);

// "MPI_Bcast(...) failed at file:line: <MPI_Error_string>", as INTERNAL.
Status MpiError(int rc, const char* call, const char* file, int line);

}  // namespace rdattn::comm::internal

// Evaluates an MPI call; returns an INTERNAL Status from the enclosing function on failure
// (llm.c's mpiCheck, minus the exit).
#define RDATTN_MPI_CHECK(call)                                                              \
  do {                                                                                      \
    const int rdattn_mpi_rc_ = (call);                                                      \
    if (rdattn_mpi_rc_ != MPI_SUCCESS) {                                                    \
      return ::rdattn::comm::internal::MpiError(rdattn_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                                       \
  } while (0)
