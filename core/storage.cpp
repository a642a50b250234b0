// Storage lifetime and the per-device allocator table.
#include "tenax/core/storage.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "tenax/backends/kernels.h"
#include "tenax/core/error.h"
#include "tenax/core/ops/capture.h"
#include "tenax/core/pool_allocator.h"

// Under AddressSanitizer (GCC's and clang's spellings), host arenas poison what they have not
// handed out (HostArena).
#if defined(__SANITIZE_ADDRESS__)
#define TENAX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TENAX_ASAN 1
#endif
#endif
#if TENAX_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace tenax {
namespace {

// Header and data share one block so a small tensor costs one pooled allocation.
constexpr std::size_t kHeader = 64;
static_assert(sizeof(Storage) <= kHeader);

detail::PoolAllocator& default_host() { return detail::PoolAllocator::instance(); }

std::atomic<Allocator*> g_host{nullptr};
std::array<std::atomic<Allocator*>, 16> g_cuda{};

}  // namespace

namespace detail {

std::string cuda_visibility() {
  if (!cuda_backend_linked())
#if TENAX_BUILT_WITH_CUDA
    return "Tenax's CUDA backend is not linked into this program: link the target tenax::cuda "
           "(find_package(tenax COMPONENTS cuda))";
#else
    return "this Tenax was built without its CUDA backend (TENAX_CUDA=OFF, or no nvcc at build time)";
#endif
  const int n = cuda_device_count();
  return std::to_string(n) + " CUDA devices visible" + (n == 0 ? ": no GPU or no driver" : "");
}

}  // namespace detail

Allocator& allocator_for(Device d) {
  if (d.kind == Device::Kind::cpu) {
    Allocator* a = g_host.load(std::memory_order_acquire);
    return a ? *a : default_host();
  }
  if (d.index >= 0 && d.index < static_cast<int>(g_cuda.size())) {
    if (Allocator* a = g_cuda[d.index].load(std::memory_order_acquire)) return *a;
    // First use of the device: the CUDA backend's stream-ordered pool (null without one).
    if (Allocator* a = detail::default_cuda_allocator(d.index)) {
      Allocator* expected = nullptr;
      g_cuda[d.index].compare_exchange_strong(expected, a, std::memory_order_acq_rel);
      return *g_cuda[d.index].load(std::memory_order_acquire);
    }
  }
  throw DeviceError("[alloc] no allocator for device " + d.str() + " (" + detail::cuda_visibility() + ")");
}

void set_allocator(Device d, Allocator* a) {
  if (d.kind == Device::Kind::cpu) {
    g_host.store(a, std::memory_order_release);
  } else if (d.index >= 0 && d.index < static_cast<int>(g_cuda.size())) {
    g_cuda[d.index].store(a, std::memory_order_release);
  } else {
    throw DeviceError("[alloc] device index out of range: " + d.str());
  }
}

AllocatorStats allocator_stats(Device d) { return allocator_for(d).stats(); }

namespace {
// Budgets: slot 0 the host, 1 + i CUDA device i.
std::array<std::atomic<int64_t>, 17> g_budget{};
std::atomic<int64_t>& budget_slot(Device d) {
  if (d.kind == Device::Kind::cpu) return g_budget[0];
  if (d.index < 0 || d.index >= 16)
    throw DeviceError("[memory_budget] device index out of range: " + d.str());
  return g_budget[static_cast<size_t>(d.index) + 1];
}
std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}
}  // namespace

void set_memory_budget(Device d, int64_t bytes) {
  if (bytes < 0)
    throw Error("[memory_budget] the budget must be >= 0 bytes (0: none), got " + std::to_string(bytes));
  budget_slot(d).store(bytes, std::memory_order_relaxed);
}

int64_t memory_budget(Device d) { return budget_slot(d).load(std::memory_order_relaxed); }

namespace detail {
void check_memory_budget(Device d, int64_t request, const char* what) {
  const int64_t budget = budget_slot(d).load(std::memory_order_relaxed);
  if (budget <= 0) return;
  const AllocatorStats st = allocator_stats(d);
  if (st.bytes_in_use + request <= budget) return;
  throw MemoryError("[alloc] " + std::string(what) + " of " + std::to_string(request) + " bytes (" +
                    mib(request) + ") on " + d.str() + " would exceed the memory budget of " + mib(budget) +
                    ": " + mib(st.bytes_in_use) + " in use (peak " + mib(st.peak_bytes) +
                    "); free tensors, use map or scan checkpointing, or raise it with set_memory_budget");
}

namespace {
thread_local HostArena* t_arena = nullptr;
}  // namespace

#if TENAX_ASAN
constexpr bool kPoison = true;
#else
constexpr bool kPoison = false;
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

HostArena::HostArena(std::size_t capacity) : block_(Storage::allocate(capacity, Device::cpu())) {
  if constexpr (kPoison) ASAN_POISON_MEMORY_REGION(block_->data(), block_->bytes());
}

HostArena::~HostArena() {
  // Buffers carved from it may still hold the block: unpoisoned from here on, and when the pool
  // takes the block back.
  if constexpr (kPoison) ASAN_UNPOISON_MEMORY_REGION(block_->data(), block_->bytes());
  block_->release();
}

void* HostArena::try_allocate(std::size_t bytes) {
  constexpr std::size_t kRedzone = kPoison ? 64 : 0;
  // 64-byte boundaries, but 16 for buffers under 64 bytes (a step's scalars and short vectors:
  // less to save and restore; no host kernel needs more than its element alignment).
  const std::size_t align = bytes < 64 ? 16 : 64;
  const std::size_t at = (used_ + kRedzone + align - 1) / align * align;
  if (at + bytes > block_->bytes()) {
    overflowed_ = true;
    return nullptr;
  }
  used_ = at + bytes;
  char* p = static_cast<char*>(block_->data()) + at;
  if constexpr (kPoison) {
    ASAN_UNPOISON_MEMORY_REGION(p, bytes);
    pieces_.emplace_back(at, bytes);
  }
  return p;
}

void HostArena::keep_only(std::vector<std::pair<std::size_t, std::size_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  kept_.clear();
  for (const auto& [at, bytes] : ranges) {
    if (bytes == 0) continue;
    if (!kept_.empty()) {
      auto& [last_at, last_bytes] = kept_.back();
      const std::size_t end = last_at + last_bytes;
      if (at <= end || (!kPoison && at - end <= kMergeGap)) {  // overlapping (views), or close by
        last_bytes = std::max(end, at + bytes) - last_at;
        continue;
      }
    }
    kept_.emplace_back(at, bytes);
  }
  kept_bytes_ = 0;
  for (const auto& r : kept_) kept_bytes_ += r.second;
  if (kept_.size() == 1 && kept_[0].first == 0 && kept_bytes_ == used_) kept_.clear();  // all of it
}

void HostArena::save(void* to) const {
  const auto* base = static_cast<const char*>(block_->data());
  if (!kept_.empty()) {
    auto* out = static_cast<char*>(to);
    for (const auto& [at, bytes] : kept_) {
      std::memcpy(out, base + at, bytes);
      out += bytes;
    }
    return;
  }
  if constexpr (kPoison) {
    for (const auto& [at, bytes] : pieces_) std::memcpy(static_cast<char*>(to) + at, base + at, bytes);
  } else {
    std::memcpy(to, base, used_);
  }
}

void HostArena::restore(const void* from) {
  auto* base = static_cast<char*>(block_->data());
  if (!kept_.empty()) {
    const auto* in = static_cast<const char*>(from);
    for (const auto& [at, bytes] : kept_) {
      std::memcpy(base + at, in, bytes);
      in += bytes;
    }
    return;
  }
  if constexpr (kPoison) {
    for (const auto& [at, bytes] : pieces_)
      std::memcpy(base + at, static_cast<const char*>(from) + at, bytes);
  } else {
    std::memcpy(base, from, used_);
  }
}

HostArenaScope::HostArenaScope(HostArena* arena) : previous_(t_arena) { t_arena = arena; }
HostArenaScope::~HostArenaScope() { t_arena = previous_; }
}  // namespace detail

Storage* Storage::allocate(std::size_t bytes, Device d) {
  // The common case first, in few instructions: a host buffer from this thread's pool cache, with
  // no arena, capture, meter, budget or installed allocator to consult.
  if (d.kind == Device::Kind::cpu && !detail::t_arena && !detail::g_capture && !detail::g_meter &&
      bytes <= (std::size_t{1} << 20) && !g_host.load(std::memory_order_acquire) &&
      g_budget[0].load(std::memory_order_relaxed) <= 0) {
    detail::PoolAllocator& pool = default_host();
    if (void* block = pool.take_cached(kHeader + bytes)) {
      auto* s = new (block) Storage;  // default-initialised: the members' initialisers, no zeroing pass
      s->device_ = d;
      s->data_ = static_cast<char*>(block) + kHeader;
      s->bytes_ = bytes;
      s->allocator_ = &pool;
      return s;
    }
  }
  return allocate_general(bytes, d);
}

Storage* Storage::allocate_general(std::size_t bytes, Device d) {
  // Tensors stay far below this (kMaxElements); it keeps the size rounding below from wrapping.
  if (bytes > (std::size_t{1} << 60))
    throw MemoryError("[alloc] a buffer of " + std::to_string(bytes) + " bytes is past what any device addresses");
  if (d.kind == Device::Kind::cpu && detail::t_arena) {
    // A view of the arena's block that holds a reference to it (the block is metered and
    // budgeted as a whole, when the arena is made).
    if (void* data = detail::t_arena->try_allocate(bytes)) {
      Storage* block = detail::t_arena->block();
      block->retain();
      Storage* s = wrap(
          data, bytes, d, [](void* b) { static_cast<Storage*>(b)->release(); }, block);
      if (detail::g_capture) detail::keep_for_capture(s);
      return s;
    }
  }
  if (d.kind == Device::Kind::cpu) {
    if (g_budget[0].load(std::memory_order_relaxed) > 0)
      detail::check_memory_budget(d, static_cast<int64_t>(bytes), "a tensor buffer");
    // The default pool called directly (final: no virtual call) unless the user installed one.
    Allocator* installed = g_host.load(std::memory_order_acquire);
    Allocator& a = installed ? *installed : default_host();
    void* block = installed ? a.allocate(kHeader + bytes) : default_host().allocate(kHeader + bytes);
    auto* s = new (block) Storage;  // default-initialised: the members' initialisers, no zeroing pass
    s->device_ = d;
    s->data_ = static_cast<char*>(block) + kHeader;
    s->bytes_ = bytes;
    s->allocator_ = &a;
    if (detail::g_capture) detail::keep_for_capture(s);
    detail::meter_add(static_cast<int64_t>(bytes));
    return s;
  }
  // Device memory cannot hold the host-side header: keep it on the heap.
  detail::check_memory_budget(d, static_cast<int64_t>(bytes), "a tensor buffer");
  Allocator& a = allocator_for(d);
  auto* s = new Storage();
  s->device_ = d;
  try {
    s->data_ = a.allocate(bytes);
  } catch (...) {
    delete s;
    throw;
  }
  s->bytes_ = bytes;
  s->allocator_ = &a;
  if (detail::g_capture) detail::keep_for_capture(s);
  detail::meter_add(static_cast<int64_t>(bytes));
  return s;
}

Storage* Storage::wrap(void* data, std::size_t bytes, Device d, void (*release)(void*), void* ctx) {
  auto* s = new Storage();
  s->device_ = d;
  s->data_ = data;
  s->bytes_ = bytes;
  s->external_release_ = release;
  s->external_ctx_ = ctx;
  return s;
}

void Storage::destroy() {
  // The common case first: a pool block back into this thread's cache.
  if (detail::PoolAllocator& pool = default_host(); allocator_ == &pool && !detail::g_meter &&
                                                    device_.kind == Device::Kind::cpu) {
    const std::size_t total = kHeader + bytes_;
    this->~Storage();
    if (pool.give_cached(this, total)) return;
    pool.deallocate(this, total);
    return;
  }
  if (allocator_) detail::meter_add(-static_cast<int64_t>(bytes_));
  if (allocator_ && device_.kind == Device::Kind::cpu) {
    Allocator* a = allocator_;
    std::size_t total = kHeader + bytes_;
    this->~Storage();
    if (detail::PoolAllocator& pool = default_host(); a == &pool) pool.deallocate(this, total);
    else a->deallocate(this, total);
    return;
  }
  if (allocator_) allocator_->deallocate(data_, bytes_);
  if (external_release_) external_release_(external_ctx_);
  delete this;
}

}  // namespace tenax
