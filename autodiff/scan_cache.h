#pragma once
// Library-internal: a scan's traced plan and compiled step kept from one call to the next, for call
// sites that name every tensor their body reads (the model evaluator's scans), so that a fit's
// repeated calls trace and capture the body once.
#include <atomic>
#include <memory>
#include <mutex>
#include <typeinfo>
#include <vector>

#include "tenax/autodiff/scan.h"

namespace tenax::detail {

/// What one scan call site keeps between calls: its plan and compiled step program, and what a
/// later call must match to reuse them. A call holds them while it (and its reverse pass) can
/// run; a call that finds them held, or finds something different, traces and compiles afresh.
/// Safe to share between threads.
class ScanCache {
 public:
  ScanCache();
  ~ScanCache();
  ScanCache(const ScanCache&) = delete;
  ScanCache& operator=(const ScanCache&) = delete;
  /// Calls that reused the compiled step, and calls that compiled one (for tests).
  [[nodiscard]] int64_t hits() const { return hits_.load(); }
  [[nodiscard]] int64_t misses() const { return misses_.load(); }

  struct Entry;  // scan_run.h
  /// Takes the kept entry (null: none kept, or held by another call).
  std::unique_ptr<Entry> take();
  /// Keeps `e` unless an entry is kept already.
  void give(std::unique_ptr<Entry> e);
  void count(bool hit) { ++(hit ? hits_ : misses_); }

 private:
  std::mutex mutex_;
  std::unique_ptr<Entry> entry_;
  std::atomic<int64_t> hits_{0}, misses_{0};
};

/// The cache plain scan() keeps for bodies whose callable has type `body_type` (a lambda: one place
/// in the source): a call whose traced step 0 is the same plan as the kept one (ScanPlan::same_as)
/// with the same axes, dtypes, steps and options reuses its compiled step.
std::shared_ptr<ScanCache> scan_body_cache(const std::type_info& body_type);

/// scan() for a call site whose body reads, besides its carries and x_t, only `captures` (and
/// tensors it creates itself): a later call with the same axes, dtypes, steps and options, the
/// same captures tracked by its tape, and the untracked captures holding the same values reuses
/// the plan and compiled step of an earlier one (the captures' new values copied in) instead of
/// tracing the body. The body must also run the same ops given the same inputs (as scan asks
/// anyway). Host tensors only: elsewhere, and where a traced body reads a tracked tensor that is
/// not among `captures`, it is plain scan().
ScanResult scan_cached(const ScanBody& body, const std::vector<Tensor>& init, const std::vector<Tensor>& xs,
                       Name over, const ScanOptions& options, const std::vector<Tensor>& captures,
                       const std::shared_ptr<ScanCache>& cache);

}  // namespace tenax::detail
