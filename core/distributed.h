#pragma once
// Several processes sharing one computation: a communicator (an MPI communicator the host program
// owns, or this process alone), the block of an axis each process holds, and tensors whose named
// axis is split across the processes (docs/scaling.md).
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "tenax/core/tensor.h"

namespace tenax {

namespace detail {
class Transport;
/// Announces the failure `e` of this rank to the others, which are in (or will reach) a Tenax
/// collective, and throws on this rank the Error every rank then raises. Rethrows `e` itself when
/// it is already such an agreed failure.
[[noreturn]] void announce_failure(Transport& t, std::exception_ptr e);
/// The closing round of Communicator::run: every rank reports success; throws the agreed Error
/// when a rank reports a failure instead.
void agree(Transport& t);
/// A transport over a host MPI communicator given by the bytes of its handle (tenax/mpi.h); throws
/// Error when the build has no MPI or MPI is not initialised.
std::shared_ptr<Transport> mpi_transport(const void* handle, size_t handle_bytes);
}  // namespace detail

/// What this rank's Tenax collectives on one communicator have cost since it was made (or reset):
/// their count, the bytes this rank received, and the wall time inside them (which includes
/// waiting for slower ranks).
struct CommStats {
  int64_t collectives = 0;
  int64_t bytes_received = 0;
  double seconds = 0.0;
};

/// A contiguous block of an axis: elements [offset, offset + size).
struct Block {
  int64_t offset = 0;
  int64_t size = 0;
};

/// The processes that share sharded axes. Wraps an MPI communicator given by the host program
/// (tenax/mpi.h: `tenax::communicator(MPI_COMM_WORLD)`), or this process alone. Copies share it;
/// make one per MPI communicator and pass it around (each tenax::communicator() call duplicates
/// the MPI communicator, and shardings over two such are different shardings).
class Communicator {
 public:
  /// This process alone: rank 0 of 1 (no MPI needed; every collective is a copy). All such
  /// communicators are one (equal, with shared stats).
  Communicator();
  /// MPI_COMM_WORLD. Throws Error when the library was built without MPI or MPI is not initialised.
  static Communicator world();
  [[nodiscard]] int rank() const;
  [[nodiscard]] int size() const;
  /// The block of an axis of `global` elements that `rank` holds: contiguous, in rank order, sizes
  /// differing by at most one (the first global % size ranks hold one more). Throws ShapeError when
  /// global < size (every rank holds at least one element).
  [[nodiscard]] Block block(int64_t global, int rank) const;
  [[nodiscard]] Block block(int64_t global) const { return block(global, rank()); }
  /// Runs `fn()` on every rank so that an exception on one rank cannot leave the others waiting in
  /// a collective: the failing rank announces its failure at the others' next Tenax collective (or
  /// at the closing round this call adds), and every rank raises an Error of the failing rank's
  /// class whose message starts "[mpi] rank R of N failed: " and carries the original message.
  /// Without run(), an Error on one rank leaves the others in their next collective, as in any
  /// MPI program.
  template <class F>
  decltype(auto) run(F&& fn) const {
    try {
      if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
        fn();
        detail::agree(*t_);
      } else {
        decltype(auto) r = fn();
        detail::agree(*t_);
        return r;
      }
    } catch (...) {
      detail::announce_failure(*t_, std::current_exception());
    }
  }
  /// Waits until every rank calls it; raises the agreed Error when a rank announced a failure.
  void barrier() const { detail::agree(*t_); }
  /// The cost of this rank's collectives so far (all copies of this communicator together).
  [[nodiscard]] CommStats stats() const;
  void reset_stats() const;
  /// Whether both wrap the same communicator.
  [[nodiscard]] bool operator==(const Communicator& other) const;
  [[nodiscard]] detail::Transport& transport() const { return *t_; }

  /// Library-internal: wraps a transport.
  explicit Communicator(std::shared_ptr<detail::Transport> t);

 private:
  std::shared_ptr<detail::Transport> t_;
};

/// How a tensor's axis is split: the axis, its global size, this rank's block and the communicator.
struct ShardInfo {
  Name axis;
  int64_t global = 0;
  Block block;
  Communicator comm;
};

/// Marks `local` (this rank's block of axis `axis`, in rank order) as one tensor sharded over
/// `comm`: elementwise ops keep it sharded, reductions and contractions over `axis` all-reduce,
/// ops that need the whole axis on one rank are Errors (docs/scaling.md). A collective: every rank
/// calls it, each with at least one element of `axis`; the global size is the sum of the blocks.
/// No data moves; the result shares `local`'s buffer (and its place on a tape).
Tensor shard(const Tensor& local, Name axis, const Communicator& comm);
/// The sharding of `t`, or nothing when `t` is whole on every rank.
std::optional<ShardInfo> sharding(const Tensor& t);
/// The whole of a sharded tensor on every rank (a collective; differentiable). Writes one line to
/// standard error the first time it moves more than gather_warning_bytes() into a rank.
Tensor gather(const Tensor& t);
/// The bytes a gather may move into one rank before it says so (default 64 MiB).
int64_t gather_warning_bytes();
void set_gather_warning_bytes(int64_t bytes);
/// This rank's block of a sharded tensor as an ordinary tensor (a view, not differentiated through):
/// for writing a rank's own results. A tensor that is not sharded is returned as it is.
Tensor local_part(const Tensor& t);

}  // namespace tenax
