// A build without MPI: Communicator::world() and communicator(MPI_Comm) explain what is missing.
#include "tenax/core/distributed_impl.h"

namespace tenax::detail {
namespace {
[[noreturn]] void no_mpi() {
  throw Error("[mpi] this build of Tenax has no MPI: install libopenmpi-dev and configure with TENAX_MPI=ON (or AUTO)");
}
}  // namespace

bool built_with_mpi() { return false; }
std::shared_ptr<Transport> mpi_world_transport() { no_mpi(); }
std::shared_ptr<Transport> mpi_transport(const void*, size_t) { no_mpi(); }

}  // namespace tenax::detail
