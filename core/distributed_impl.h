#pragma once
// Library-internal: the byte transport under a Communicator (MPI or this process), the failure-
// aware exchange every Tenax collective goes through, and the table of shardings tensors refer to.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "tenax/core/distributed.h"

namespace tenax::detail {

/// Moves bytes between the ranks of one communicator. Collective calls: every rank makes the same
/// calls in the same order.
class Transport {
 public:
  virtual ~Transport() = default;
  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int size() const = 0;
  /// Every rank sends `bytes` bytes; `recv` receives size() * bytes, in rank order.
  virtual void allgather(const void* send, int64_t bytes, void* recv) = 0;
  /// Rank r sends counts[r] bytes; `recv` receives them all, in rank order.
  virtual void allgatherv(const void* send, const std::vector<int64_t>& counts, void* recv) = 0;
  /// What identifies the communicator (two transports with equal keys are one communicator).
  [[nodiscard]] virtual const void* key() const = 0;
  /// "MPI" or "self", for messages.
  [[nodiscard]] virtual const char* kind() const = 0;
  /// Counted by exchange() (Communicator::stats); atomic because the one-process communicator is
  /// shared by every thread.
  std::atomic<int64_t> collectives{0}, bytes_received{0};
  std::atomic<double> seconds{0.0};
};

/// The MPI transport over MPI_COMM_WORLD (backends/mpi; mpi_transport in distributed.h for a host
/// communicator). Throws Error when the build has no MPI or MPI is not initialised.
std::shared_ptr<Transport> mpi_world_transport();
/// Whether this build has MPI.
bool built_with_mpi();

/// The one collective under every other: each rank contributes `bytes` bytes (ranks may differ);
/// returns everything, in rank order, with each rank's count in `counts`. First a fixed-size round
/// in which each rank says whether it failed; a rank that failed (announce_failure) makes every
/// rank throw the agreed Error here instead of exchanging data.
std::vector<char> exchange(Transport& t, const void* data, int64_t bytes, std::vector<int64_t>& counts);

/// One axis split across the ranks of a communicator. Interned: tensors carry its id.
struct Sharding {
  Name axis;
  int64_t global = 0;
  Block block;
  Communicator comm;
};
/// The id of `s` (1..65535), registering it on first use; throws Error when the table is full.
uint16_t intern_sharding(const Sharding& s);
/// The sharding with id `id` (nonzero).
const Sharding& sharding_of(uint16_t id);
/// `t` marked with sharding `id` (0: whole).
Tensor with_shard(const Tensor& t, uint16_t id);

/// `t`'s values, contiguous in its axis order, in host memory (staged from a device).
std::vector<char> host_bytes(const Tensor& t);
/// A new contiguous tensor over `axes` on `device` holding `bytes` (host memory, row-major).
Tensor from_host(const void* bytes, const Axes& axes, DType dtype, Device device);

/// Sum over ranks of `partial` (any axes, a float dtype, on any device: staged through the host),
/// added in rank order so that every rank gets the same bits on every run. Throws the agreed Error
/// when a rank has failed.
Tensor all_reduce_sum(const Tensor& partial, Transport& t);
/// Elementwise maximum over ranks of `partial`.
Tensor all_reduce_max(const Tensor& partial, Transport& t);

}  // namespace tenax::detail
