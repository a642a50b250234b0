#pragma once
// The default host allocator: power-of-two size classes cached per thread, so small buffers
// (the common case inside scans and per-step ops) never reach malloc after warm-up.
#include <atomic>

#include "tenax/core/storage.h"

namespace tenax::detail {

/// Thread-safe caching allocator for host memory.
class PoolAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) noexcept override;
  [[nodiscard]] Device device() const override { return Device::cpu(); }
  [[nodiscard]] AllocatorStats stats() const override;
  void reset_stats() override;

 private:
  std::atomic<int64_t> in_use_{0}, peak_{0}, allocations_{0}, system_{0};
};

}  // namespace tenax::detail
