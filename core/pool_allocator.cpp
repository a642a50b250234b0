// PoolAllocator: per-thread free lists by power-of-two size class; large blocks go to the system.
#include "tenax/core/pool_allocator.h"

#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "tenax/core/env.h"
#include "tenax/core/error.h"

namespace tenax::detail {
namespace {

constexpr int kMinShift = 6;    // 64 bytes
constexpr int kMaxShift = 24;   // 16 MiB: larger blocks are not cached
constexpr std::size_t kCacheBytesPerClass = std::size_t(32) << 20;

// Blocks above the largest class are rounded to 2 MiB and kept in one process-wide cache bounded
// by TENAX_HOST_CACHE_MB (default 1024): reusing them avoids re-faulting every page of a large
// temporary (a fresh 64 MiB output costs more in page faults than the op that fills it; a
// gradient of 10^7-element operands frees and re-takes half a GiB of adjoints per call).
constexpr std::size_t kLargeRound = std::size_t(2) << 20;

struct LargeCache {
  std::mutex mutex;
  std::multimap<std::size_t, void*> blocks;
  std::size_t bytes = 0;
  std::size_t limit = 0;
  LargeCache() {
    limit = std::size_t(detail::env_integer("TENAX_HOST_CACHE_MB").value_or(1024)) << 20;
  }
};
LargeCache& large_cache() {
  static auto* c = new LargeCache();  // never destroyed: frees may happen during exit
  return *c;
}

void* take_large(std::size_t rounded) {
  LargeCache& c = large_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.blocks.find(rounded);
  if (it == c.blocks.end()) return nullptr;
  void* p = it->second;
  c.blocks.erase(it);
  c.bytes -= rounded;
  return p;
}

bool keep_large(void* p, std::size_t rounded) {
  LargeCache& c = large_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.bytes + rounded > c.limit) return false;
  try {
    c.blocks.emplace(rounded, p);
  } catch (const std::bad_alloc&) {
    return false;
  }
  c.bytes += rounded;
  return true;
}

int size_class(std::size_t bytes) {
  if (bytes <= (std::size_t(1) << kMinShift)) return 0;
  return std::bit_width(bytes - 1) - kMinShift;
}

void* system_alloc(std::size_t bytes) {
  void* p = std::aligned_alloc(64, bytes);
  if (!p)
    throw MemoryError("[alloc] the system could not provide " + std::to_string(bytes) + " bytes");
  return p;
}

// Set when this thread's cache has been destroyed (thread exit, or static destruction of tensors
// after main's thread-locals are gone): later frees go straight to the system. A trivially
// destructible thread_local stays readable for the whole thread lifetime.
thread_local bool t_cache_gone = false;

struct ThreadCache {
  std::vector<void*> free[kMaxShift - kMinShift + 1];
  ~ThreadCache();
};

ThreadCache& cache() {
  thread_local ThreadCache c;
  return c;
}

// Counters are kept per thread and flushed to the shared atomics every kFlushBytes / kFlushCount
// (and at once for blocks of kFlushBytes or more), so a small allocation costs no atomic operation.
// The thread that reads the stats flushes first: its own figures are exact; other threads' lag by
// at most kFlushBytes and kFlushCount each.
constexpr int64_t kFlushBytes = 1 << 20;
constexpr int64_t kFlushCount = 1024;
struct LocalStats {
  int64_t bytes = 0, allocations = 0, system = 0, allocated = 0;
};
thread_local LocalStats t_stats;

}  // namespace

ThreadCache::~ThreadCache() {
  t_cache_gone = true;
  for (auto& list : free)
    for (void* p : list) std::free(p);
  // Hand this thread's pending counts to the shared totals before it goes.
  PoolAllocator::instance().flush();
}

PoolAllocator& PoolAllocator::instance() {
  static auto* pool = new PoolAllocator();
  return *pool;
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

void* PoolAllocator::allocate(std::size_t bytes) {
  int cls = size_class(bytes);
  void* p = nullptr;
  std::size_t rounded = bytes;
  if (cls <= kMaxShift - kMinShift) {
    rounded = std::size_t(1) << (cls + kMinShift);
    if (auto* list = t_cache_gone ? nullptr : &cache().free[cls]; list && !list->empty()) {
      p = list->back();
      list->pop_back();
    }
  } else {
    rounded = (bytes + kLargeRound - 1) / kLargeRound * kLargeRound;
    p = take_large(rounded);
  }
  LocalStats& l = t_stats;
  if (!p) {
    p = system_alloc(rounded);
    ++l.system;
  }
  ++l.allocations;
  l.bytes += static_cast<int64_t>(rounded);
  l.allocated += static_cast<int64_t>(rounded);
  if (l.bytes >= kFlushBytes || l.allocations >= kFlushCount) flush();
  return p;
}

void PoolAllocator::deallocate(void* ptr, std::size_t bytes) noexcept {
  int cls = size_class(bytes);
  std::size_t rounded;
  if (cls <= kMaxShift - kMinShift) {
    rounded = std::size_t(1) << (cls + kMinShift);
    auto* list_ptr = t_cache_gone ? nullptr : &cache().free[cls];
    if (list_ptr && ((list_ptr->size() + 1) * rounded <= kCacheBytesPerClass || list_ptr->size() < 2)) {
      auto& list = *list_ptr;
      try {
        list.push_back(ptr);
        ptr = nullptr;
      } catch (const std::bad_alloc&) {
      }
    }
  } else {
    rounded = (bytes + kLargeRound - 1) / kLargeRound * kLargeRound;
    if (keep_large(ptr, rounded)) ptr = nullptr;
  }
  if (ptr) std::free(ptr);
  LocalStats& l = t_stats;
  l.bytes -= static_cast<int64_t>(rounded);
  if (l.bytes <= -kFlushBytes) flush();
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
