#pragma once
// The default host allocator: power-of-two size classes cached per thread, so small buffers
// (the common case inside scans and per-step ops) never reach malloc after warm-up.
#include <atomic>

#include "tenax/core/storage.h"

namespace tenax::detail {

/// Thread-safe caching allocator for host memory. One instance per process (its per-thread caches
/// and counters are per thread, not per instance).
class PoolAllocator final : public Allocator {
 public:
  /// The process-wide instance (never destroyed: tensors may be freed during exit).
  static PoolAllocator& instance();

  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) noexcept override;
  [[nodiscard]] Device device() const override { return Device::cpu(); }
  [[nodiscard]] AllocatorStats stats() const override;
  void reset_stats() override;
  /// Adds this thread's pending counts to the shared totals.
  void flush() noexcept;

 private:
  std::atomic<int64_t> in_use_{0}, peak_{0}, allocations_{0}, system_{0}, allocated_{0};
};

}  // namespace tenax::detail
