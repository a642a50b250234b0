#pragma once
// Reference-counted buffers and the pluggable per-device allocator interface.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "tenax/core/device.h"

namespace tenax {

/// Counters every allocator keeps; read them with allocator_stats().
struct AllocatorStats {
  int64_t bytes_in_use = 0;     ///< bytes handed out and not yet returned
  int64_t peak_bytes = 0;       ///< high-water mark of bytes_in_use since the last reset
  int64_t allocations = 0;      ///< buffers handed out since the last reset
  int64_t system_allocations = 0;  ///< of those, how many went to the system (pool misses)
  /// Bytes handed out since the last reset, all buffers together (freed ones included): what a
  /// piece of code allocates, read as the difference of two calls. Counted as bytes_in_use is: the
  /// pool's rounded blocks (a host buffer's 64-byte header included).
  int64_t allocated_bytes = 0;
};

/// Memory for one device. Implementations must be thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// At least `bytes` bytes aligned to 64; throws MemoryError on failure.
  virtual void* allocate(std::size_t bytes) = 0;
  /// Returns memory from allocate(ptr's size was `bytes`).
  virtual void deallocate(void* ptr, std::size_t bytes) noexcept = 0;
  /// The device this allocator serves.
  [[nodiscard]] virtual Device device() const = 0;
  /// Current counters.
  [[nodiscard]] virtual AllocatorStats stats() const = 0;
  /// Resets peak and counts (not bytes in use).
  virtual void reset_stats() = 0;
};

/// The allocator used for new buffers on `d`; throws DeviceError when none is installed.
Allocator& allocator_for(Device d);
/// Installs `a` for its device (nullptr restores the default). `a` must outlive its buffers.
void set_allocator(Device d, Allocator* a);
/// Counters of the allocator for `d`.
AllocatorStats allocator_stats(Device d = Device::cpu());

/// Caps the bytes in use on `d` (tensor buffers, and on the host also tape record arrays): an
/// allocation that would take the total past `bytes` raises MemoryError before allocating, naming
/// the request, what is in use and the budget. 0 (the default) removes the cap. The total compared
/// is allocator_stats(d).bytes_in_use: exact for the calling thread, while other threads'
/// latest allocations may lag in it by up to 1 MiB each.
void set_memory_budget(Device d, int64_t bytes);
/// The cap set by set_memory_budget (0: none).
int64_t memory_budget(Device d);

namespace detail {
/// Throws MemoryError when `request` more bytes on `d` would exceed its budget; `what` names the
/// allocation ("a tensor buffer", "the tape's record arrays").
void check_memory_budget(Device d, int64_t request, const char* what);
}  // namespace detail

/// A block of device memory with an intrusive reference count. Create with Storage::allocate or
/// Storage::wrap; hold through StoragePtr.
class Storage {
 public:
  /// A new buffer of `bytes` bytes from allocator_for(d). Contents are uninitialised.
  static Storage* allocate(std::size_t bytes, Device d);
  /// Wraps memory owned elsewhere; `release(ctx)` runs when the last reference goes.
  static Storage* wrap(void* data, std::size_t bytes, Device d, void (*release)(void*), void* ctx);

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  [[nodiscard]] Device device() const { return device_; }
  [[nodiscard]] int32_t use_count() const { return refs_.load(std::memory_order_relaxed); }

  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  /// A count of 1 is this holder's own reference: no other holder can take one, so the last
  /// release skips the atomic read-modify-write.
  void release() {
    if (refs_.load(std::memory_order_acquire) == 1 || refs_.fetch_sub(1, std::memory_order_acq_rel) == 1)
      destroy();
  }

 private:
  Storage() = default;
  static Storage* allocate_general(std::size_t bytes, Device d);
  void destroy();

  std::atomic<int32_t> refs_{1};
  Device device_{};
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Allocator* allocator_ = nullptr;  // null for wrapped memory
  void (*external_release_)(void*) = nullptr;
  void* external_ctx_ = nullptr;
};

namespace detail {
/// Bytes this thread allocates while a meter is installed: what is in use (allocations minus the
/// releases of those and earlier buffers) and the high-water mark. map uses it to measure a chunk.
struct AllocationMeter {
  int64_t in_use = 0;
  int64_t peak = 0;
};
inline thread_local AllocationMeter* g_meter = nullptr;
inline void meter_add(int64_t bytes) {
  if (AllocationMeter* m = g_meter) {
    m->in_use += bytes;
    if (m->in_use > m->peak) m->peak = m->in_use;
  }
}

/// One contiguous block of host memory that new host buffers are carved from, in order, while a
/// HostArenaScope names it on this thread: scan captures its step into one, so that a step's
/// intermediates lie in one range that a single copy saves or restores. Buffers are not returned
/// to it: each holds a reference to the arena's block, which lives until the arena and the last of
/// them are gone. When a buffer does not fit, it comes from the host allocator as usual and the
/// arena is marked overflowed.
class HostArena {
 public:
  /// A block of `capacity` bytes from the host allocator (metered and budgeted as a buffer).
  explicit HostArena(std::size_t capacity);
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  /// `bytes` bytes at the next 64-byte boundary (16-byte for fewer than 64 bytes), or nullptr
  /// when they do not fit (see above).
  void* try_allocate(std::size_t bytes);

  [[nodiscard]] Storage* block() const { return block_; }
  /// Bytes carved so far: what save and restore copy.
  [[nodiscard]] std::size_t used() const { return used_; }
  /// Whether some buffer did not fit and came from the host allocator instead.
  [[nodiscard]] bool overflowed() const { return overflowed_; }
  /// Copies the carved buffers' contents to `to` (saved() bytes), or back from `from`. Under
  /// AddressSanitizer the block is poisoned but for the buffers, with a 64-byte redzone before
  /// each, and these copy buffer by buffer.
  void save(void* to) const;
  void restore(const void* from);
  /// From now on save and restore copy only the buffers at these (offset, bytes) ranges of the
  /// block, packed one after the other; restore leaves the rest of the block as it is. Ranges
  /// closer than `kMergeGap` bytes are copied as one (fewer, larger copies), except under
  /// AddressSanitizer (a redzone lies between them).
  void keep_only(std::vector<std::pair<std::size_t, std::size_t>> ranges);
  /// Bytes save writes: used(), or those of keep_only's ranges.
  [[nodiscard]] std::size_t saved() const { return kept_.empty() ? used_ : kept_bytes_; }
  static constexpr std::size_t kMergeGap = 256;

 private:
  Storage* block_;
  std::size_t used_ = 0;
  bool overflowed_ = false;
  std::vector<std::pair<std::size_t, std::size_t>> pieces_;  // (offset, bytes); AddressSanitizer only
  std::vector<std::pair<std::size_t, std::size_t>> kept_;    // keep_only's, merged; empty: all
  std::size_t kept_bytes_ = 0;
};

/// While alive, new host buffers on this thread come from `arena` (scopes nest; nullptr: none).
class HostArenaScope {
 public:
  explicit HostArenaScope(HostArena* arena);
  ~HostArenaScope();
  HostArenaScope(const HostArenaScope&) = delete;
  HostArenaScope& operator=(const HostArenaScope&) = delete;

 private:
  HostArena* previous_;
};
}  // namespace detail

/// Owning handle to a Storage.
class StoragePtr {
 public:
  StoragePtr() = default;
  /// Adopts one reference (as returned by Storage::allocate / wrap).
  explicit StoragePtr(Storage* s) : s_(s) {}
  StoragePtr(const StoragePtr& o) : s_(o.s_) {
    if (s_) s_->retain();
  }
  StoragePtr(StoragePtr&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  StoragePtr& operator=(const StoragePtr& o) {
    if (o.s_) o.s_->retain();
    if (s_) s_->release();
    s_ = o.s_;
    return *this;
  }
  StoragePtr& operator=(StoragePtr&& o) noexcept {
    if (this != &o) {
      if (s_) s_->release();
      s_ = o.s_;
      o.s_ = nullptr;
    }
    return *this;
  }
  ~StoragePtr() {
    if (s_) s_->release();
  }
  [[nodiscard]] Storage* get() const { return s_; }
  Storage* operator->() const { return s_; }
  explicit operator bool() const { return s_ != nullptr; }

 private:
  Storage* s_ = nullptr;
};

}  // namespace tenax
