#pragma once
// The default host allocator: power-of-two size classes cached per thread, so small buffers
// (the common case inside scans and per-step ops) never reach malloc after warm-up. The cached
// take and give-back are inline: an eager op's buffer costs a list pop and a push.
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>

#include "tenax/core/storage.h"

namespace tenax::detail {

namespace pool {
inline constexpr int kMinShift = 6;   // 64 bytes
inline constexpr int kMaxShift = 24;  // 16 MiB: larger blocks are not cached per thread
inline constexpr int kClasses = kMaxShift - kMinShift + 1;
inline constexpr std::size_t kCacheBytesPerClass = std::size_t(32) << 20;

/// The class of a block of `bytes` (<= 2^kMaxShift): its size is 2^(class + kMinShift).
constexpr int size_class(std::size_t bytes) {
  return bytes <= (std::size_t(1) << kMinShift) ? 0 : std::bit_width(bytes - 1) - kMinShift;
}
/// Blocks a class keeps per thread: kCacheBytesPerClass worth, and at least 2 (a table: the
/// variable shift sat on the free path's critical chain).
inline constexpr auto kKeptBlocks = [] {
  std::array<uint32_t, kClasses> k{};
  for (int c = 0; c < kClasses; ++c) {
    const std::size_t n = kCacheBytesPerClass >> (c + kMinShift);
    k[size_t(c)] = n < 2 ? 2u : static_cast<uint32_t>(n);
  }
  return k;
}();
constexpr uint32_t kept_blocks(int cls) { return kKeptBlocks[size_t(cls)]; }

struct FreeBlock {
  FreeBlock* next;
};
/// This thread's free blocks: one singly linked list per class, the link stored in the block.
/// Trivially destructible, so it stays readable for the whole thread's life (frees during the
/// static destruction of tensors after main's thread-locals are gone included); `gone` is set
/// once the thread's cleanup has returned the blocks to the system, and later frees go there.
struct ThreadLists {
  FreeBlock* head[kClasses];
  uint32_t count[kClasses];
  bool cleanup_armed;
  bool gone;
};
inline thread_local ThreadLists t_lists{};

/// Counts kept per thread and flushed to the shared atomics every kFlushBytes / kFlushCount (and
/// at once for blocks of kFlushBytes or more), so a small allocation costs no atomic operation.
/// The thread that reads the stats flushes first: its own figures are exact; other threads' lag
/// by at most kFlushBytes and kFlushCount each.
inline constexpr int64_t kFlushBytes = 1 << 20;
inline constexpr int64_t kFlushCount = 1024;
struct LocalStats {
  int64_t bytes, allocations, system, allocated;
};
inline thread_local LocalStats t_stats{};
}  // namespace pool

/// Thread-safe caching allocator for host memory. One instance per process (its per-thread caches
/// and counters are per thread, not per instance).
class PoolAllocator final : public Allocator {
 public:
  constexpr PoolAllocator() = default;
  /// The process-wide instance (never destroyed: tensors may be freed during exit).
  static PoolAllocator& instance();

  void* allocate(std::size_t bytes) override {
    if (void* p = take_cached(bytes)) return p;
    return allocate_uncached(bytes);
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    if (!give_cached(ptr, bytes)) deallocate_uncached(ptr, bytes);
  }
  /// A block of this thread's cache for `bytes`, counted; null when its class's list is empty
  /// or the block is past the largest class (allocate takes it from the system then).
  [[gnu::always_inline]] void* take_cached(std::size_t bytes) {
    if (bytes > (std::size_t(1) << pool::kMaxShift)) return nullptr;
    const int cls = pool::size_class(bytes);
    pool::ThreadLists& t = pool::t_lists;
    pool::FreeBlock* b = t.head[cls];
    if (!b) return nullptr;
    t.head[cls] = b->next;
    --t.count[cls];
    counted(int64_t(1) << (cls + pool::kMinShift), 0);
    return b;
  }
  /// Keeps a block of `bytes` in this thread's cache; false (nothing done) when the class's list
  /// is full, the thread's cleanup is not armed yet or has run, or the block is past the largest
  /// class.
  [[gnu::always_inline]] bool give_cached(void* ptr, std::size_t bytes) noexcept {
    if (bytes > (std::size_t(1) << pool::kMaxShift)) return false;
    const int cls = pool::size_class(bytes);
    pool::ThreadLists& t = pool::t_lists;
    if (t.count[cls] >= pool::kept_blocks(cls) || !t.cleanup_armed || t.gone) return false;
    auto* b = static_cast<pool::FreeBlock*>(ptr);
    b->next = t.head[cls];
    t.head[cls] = b;
    ++t.count[cls];
    released(int64_t(1) << (cls + pool::kMinShift));
    return true;
  }
  [[nodiscard]] Device device() const override { return Device::cpu(); }
  [[nodiscard]] AllocatorStats stats() const override;
  void reset_stats() override;
  /// Adds this thread's pending counts to the shared totals.
  void flush() noexcept;

 private:
  void* allocate_uncached(std::size_t bytes);
  void deallocate_uncached(void* ptr, std::size_t bytes) noexcept;
  void counted(int64_t rounded, int64_t from_system) {
    pool::LocalStats& l = pool::t_stats;
    ++l.allocations;
    l.system += from_system;
    l.bytes += rounded;
    l.allocated += rounded;
    if (l.bytes >= pool::kFlushBytes || l.allocations >= pool::kFlushCount) flush();
  }
  void released(int64_t rounded) noexcept {
    pool::LocalStats& l = pool::t_stats;
    l.bytes -= rounded;
    if (l.bytes <= -pool::kFlushBytes) flush();
  }

  std::atomic<int64_t> in_use_{0}, peak_{0}, allocations_{0}, system_{0}, allocated_{0};
};

namespace pool {
/// The instance's storage: constant-initialised (usable by any static initialiser) and never
/// destroyed.
union Instance {
  PoolAllocator allocator;
  constexpr Instance() : allocator() {}
  ~Instance() {}
};
inline constinit Instance g_instance;
}  // namespace pool

inline PoolAllocator& PoolAllocator::instance() { return pool::g_instance.allocator; }

}  // namespace tenax::detail
