#pragma once
// Tenax over a host program's MPI communicator: include after <mpi.h> is available (a build of
// Tenax with MPI; docs/scaling.md).
#include <mpi.h>

#include "tenax/core/distributed.h"

namespace tenax {

/// A Communicator over `comm` (Tenax works on its own duplicate of it, so its collectives never
/// match the host program's messages). MPI must be initialised; a collective call on every rank
/// of `comm`.
inline Communicator communicator(MPI_Comm comm) { return Communicator(detail::mpi_transport(&comm, sizeof comm)); }

}  // namespace tenax
