// PoolAllocator: per-thread free lists by power-of-two size class; large blocks go to the system.
#include "tenax/core/pool_allocator.h"

#include <bit>
#include <cstdlib>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include "tenax/core/env.h"
#include "tenax/core/error.h"

namespace tenax::detail {
namespace {

using namespace pool;

// Blocks above the largest class are rounded to 2 MiB and kept in one process-wide cache bounded
// by TENAX_HOST_CACHE_MB (default 1024): reusing them avoids re-faulting every page of a large
// temporary (a fresh 64 MiB output costs more in page faults than the op that fills it; a
// gradient of 10^7-element operands frees and re-takes half a GiB of adjoints per call). Blocks
// of the classes from kSharedFrom on that a thread's full list cannot keep go there too (a scan
// in blocks holds hundreds of its blocks' buffers until the reverse pass: past the lists' 32 MiB
// per class each came from the system, its pages faulted and zeroed again every call).
constexpr std::size_t kLargeRound = std::size_t(2) << 20;
constexpr std::size_t kSharedFrom = std::size_t(256) << 10;

// The blocks in the order they were kept (oldest first), found by size: a block that does not fit
// under the limit pushes out the oldest ones, so that the sizes a program uses now are the ones
// kept (the first blocks kept stayed for good before, and every later size missed).
struct LargeCache {
  using Order = std::list<std::pair<std::size_t, void*>>;
  std::mutex mutex;
  Order order;
  std::multimap<std::size_t, Order::iterator> by_size;
  std::size_t bytes = 0;
  std::size_t limit = 0;
  LargeCache() {
    limit = std::size_t(detail::env_integer("TENAX_HOST_CACHE_MB").value_or(1024)) << 20;
  }
  // Removes the block `it` points at from both indexes (not freed).
  void forget(std::multimap<std::size_t, Order::iterator>::iterator it) {
    bytes -= it->first;
    order.erase(it->second);
    by_size.erase(it);
  }
  // Frees the oldest block; false when there is none (or, which cannot happen, it is not indexed).
  bool evict_oldest() {
    if (order.empty()) return false;
    auto [from, to] = by_size.equal_range(order.front().first);
    for (auto it = from; it != to; ++it)
      if (it->second == order.begin()) {
        void* p = it->second->second;
        forget(it);
        std::free(p);
        return true;
      }
    return false;
  }
};
LargeCache& large_cache() {
  static auto* c = new LargeCache();  // never destroyed: frees may happen during exit
  return *c;
}

// The most recently kept block of `rounded` bytes, or null.
void* take_large(std::size_t rounded) {
  LargeCache& c = large_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto [from, to] = c.by_size.equal_range(rounded);
  if (from == to) return nullptr;
  const auto it = std::prev(to);
  void* p = it->second->second;
  c.forget(it);
  return p;
}

bool keep_large(void* p, std::size_t rounded) {
  LargeCache& c = large_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (rounded > c.limit) return false;
  while (c.bytes + rounded > c.limit)
    if (!c.evict_oldest()) return false;
  try {
    c.order.emplace_back(rounded, p);
  } catch (const std::bad_alloc&) {
    return false;
  }
  try {
    c.by_size.emplace(rounded, std::prev(c.order.end()));
  } catch (const std::bad_alloc&) {
    c.order.pop_back();
    return false;
  }
  c.bytes += rounded;
  return true;
}

void* system_alloc(std::size_t bytes) {
  void* p = std::aligned_alloc(64, bytes);
  if (!p)
    throw MemoryError("[alloc] the system could not provide " + std::to_string(bytes) + " bytes");
  return p;
}

// Returns this thread's cached blocks at thread exit; constructed by the first cached free.
struct ThreadCleanup {
  ~ThreadCleanup();
};
void arm_cleanup() {
  thread_local ThreadCleanup cleanup;
  (void)cleanup;
  t_lists.cleanup_armed = true;
}

}  // namespace

ThreadCleanup::~ThreadCleanup() {
  ThreadLists& l = t_lists;
  l.gone = true;
  for (int c = 0; c < kClasses; ++c) {
    while (FreeBlock* b = l.head[c]) {
      l.head[c] = b->next;
      std::free(b);
    }
    l.count[c] = 0;
  }
  // Hand this thread's pending counts to the shared totals before it goes.
  PoolAllocator::instance().flush();
}

void PoolAllocator::flush() noexcept {
  LocalStats& l = t_stats;
  const int64_t now = in_use_.fetch_add(l.bytes, std::memory_order_relaxed) + l.bytes;
  allocations_.fetch_add(l.allocations, std::memory_order_relaxed);
  system_.fetch_add(l.system, std::memory_order_relaxed);
  allocated_.fetch_add(l.allocated, std::memory_order_relaxed);
  l = {};
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

namespace {
// The bytes a block of `bytes` takes: its class's size, or past the largest class a multiple of
// kLargeRound.
std::size_t rounded_size(std::size_t bytes) {
  if (bytes <= (std::size_t(1) << kMaxShift)) return std::size_t(1) << (size_class(bytes) + kMinShift);
  return (bytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}
}  // namespace

// A class's list was empty, or the block is past the largest class: the shared cache's block of
// that size where it holds one (blocks from kSharedFrom on), else the system's.
void* PoolAllocator::allocate_uncached(std::size_t bytes) {
  const std::size_t rounded = rounded_size(bytes);
  void* p = rounded >= kSharedFrom ? take_large(rounded) : nullptr;
  const bool fresh = !p;
  if (fresh) p = system_alloc(rounded);
  counted(int64_t(rounded), fresh ? 1 : 0);
  return p;
}

// A class's list is full, its thread's cleanup is not armed yet (the first free), or the thread's
// lists are gone; or the block is past the largest class. What no list keeps goes to the shared
// cache (blocks from kSharedFrom on) or back to the system.
void PoolAllocator::deallocate_uncached(void* ptr, std::size_t bytes) noexcept {
  const std::size_t rounded = rounded_size(bytes);
  if (bytes <= (std::size_t(1) << kMaxShift)) {
    const int cls = size_class(bytes);
    ThreadLists& t = t_lists;
    if (!t.gone && !t.cleanup_armed) arm_cleanup();
    if (!t.gone && t.count[cls] < kept_blocks(cls)) {
      auto* b = static_cast<FreeBlock*>(ptr);
      b->next = t.head[cls];
      t.head[cls] = b;
      ++t.count[cls];
      ptr = nullptr;
    }
  }
  if (ptr && !(rounded >= kSharedFrom && keep_large(ptr, rounded))) std::free(ptr);
  released(int64_t(rounded));
}

AllocatorStats PoolAllocator::stats() const {
  const_cast<PoolAllocator*>(this)->flush();
  return {in_use_.load(), peak_.load(), allocations_.load(), system_.load(), allocated_.load()};
}

void PoolAllocator::reset_stats() {
  flush();
  peak_.store(in_use_.load());
  allocations_.store(0);
  system_.store(0);
  allocated_.store(0);
}

}  // namespace tenax::detail
