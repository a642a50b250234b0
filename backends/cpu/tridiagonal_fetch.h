#pragma once
// The rows-inner Thomas panels' fetch of the next panel's operands (tridiagonal_thomas.h). Like
// that header, included only by it and in an anonymous namespace: one copy per instruction set.
//
// A rows-inner panel reads each operand as one stream per system, a row of the batch apart, which
// no hardware prefetcher follows; the lanes' own prefetches then miss to memory a line at a time,
// and merely reading the operands in that order takes far longer than the same bytes in address
// order (bench/bench_tridiagonal.cpp BM_RowsReadOrder; docs/archive/tuning.md, "Fetching the next
// panel: why"). So while a panel is eliminated, the next panel's operands are prefetched in address
// order, system after system, a few lines per step (spread so the last comes by the end of the
// forward sweep); the lanes' prefetches then find them in the caches. Where every operand's next
// systems are one run of the same length (back to back, the usual (sys, i) tensors), one offset
// walks all runs (step_runs): the general cursors' bookkeeping took as many instructions per step
// as the prefetches themselves (docs/archive/tuning.md, "Fetching the next panel: one offset").
#include <algorithm>
#include <cstdint>

#include "tenax/backends/kernels.h"

namespace tenax::cpu {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per instruction set

template <class T>
class NextPanelFetch {
 public:
  using Args = detail::TridiagonalArgs;
  static constexpr int kOperands = Args::x;  // lower, diag, upper, rhs

  // Plans the fetch of systems [first, first + count) of the operands flagged in `rows` (the
  // others are not read system by system), spread over `steps` calls of step().
  void plan(const Args& a, int64_t first, int count, const bool (&rows)[kOperands], int64_t steps) {
    a_ = &a;
    first_ = first;
    count_ = count;
    active_ = false;
    if (count <= 0) return;
    int64_t lines = 0;
    for (int o = 0; o < kOperands; ++o) {
      cursor_[o] = Cursor{};
      if (!rows[o]) continue;
      start(o, 0, 0);
      const Cursor& c = cursor_[o];
      // Exact for one run of back-to-back systems, else at most a system's lines and one more each.
      lines = std::max<int64_t>(
          lines, c.at && c.w + 1 >= count_
                     ? static_cast<int64_t>((c.last - c.at) / kLine) + 1
                     : int64_t{count_} * ((a.n * static_cast<int64_t>(sizeof(T)) + kLine - 1) / kLine + 1));
      active_ = true;
    }
    // Spread evenly (fetched faster, measured no better).
    lines_ = static_cast<int>((lines + steps - 1) / steps);
    // Every fetched operand one run of the same number of lines (systems back to back, the same
    // alignment): one offset walks them all (step_runs).
    runs_ = 0;
    bool same = true;
    for (int o = 0; o < kOperands && same; ++o) {
      const Cursor& c = cursor_[o];
      if (!rows[o]) continue;
      same = c.at && c.w + 1 >= count_ && (runs_ == 0 || c.last - c.at == span_);
      span_ = c.last - c.at;
      run_[runs_++] = c.at;
    }
    if (!same) runs_ = 0;
    done_ = 0;
  }

  [[nodiscard]] bool active() const { return active_; }

  // The next few lines of every operand planned.
  void step() {
    if (runs_ > 0) {
      step_runs();
      return;
    }
    for (int o = 0; o < kOperands; ++o) {
      Cursor& c = cursor_[o];
      for (int64_t t = lines_; t > 0 && c.at;) {
        const int64_t run = std::min<int64_t>(t, static_cast<int64_t>((c.last - c.at) / kLine) + 1);
        for (int64_t k = 0; k < run; ++k)
          __builtin_prefetch(reinterpret_cast<const T*>(c.at + k * kLine), 0, 3);
        t -= run;
        c.at += run * kLine;
        if (c.at > c.last) start(o, c.w + 1, c.at - kLine);
      }
    }
  }

 private:
  static constexpr uintptr_t kLine = 64;
  struct Cursor {
    uintptr_t at = 0, last = 0;  // the next line to fetch, the run's last line (at 0: done)
    int w = 0;                   // the run's last system
  };

  // Points operand o's cursor at the first line of system w not yet fetched (`done`: the line
  // last fetched, which adjacent systems share). Systems that lie back to back (located by a
  // stride of n) are one run, from system w to the last.
  void start(int o, int w, uintptr_t done) {
    Cursor& c = cursor_[o];
    const int64_t n = a_->n;
    const detail::SystemOffsets off = a_->off[o] + first_;
    const int64_t rows = !off.table && off.stride == n ? count_ - w : 1;
    for (c.at = 0; w < count_; ++w) {
      const T* p = static_cast<const T*>(a_->in[o]) + off[w];
      c.at = reinterpret_cast<uintptr_t>(p) / kLine * kLine;
      c.last = reinterpret_cast<uintptr_t>(p + (rows * n - 1)) / kLine * kLine;
      if (c.at == done) c.at += kLine;
      if (c.at <= c.last) break;
      c.at = 0;
    }
    c.w = w + static_cast<int>(rows) - 1;
  }

  // step() where every operand is one run of span_ bytes (plus a line): lines [done_, done_ +
  // lines_) of each, then none once past the span.
  void step_runs() {
    const uintptr_t end = std::min<uintptr_t>(done_ + lines_ * kLine, span_ + kLine);
    for (int r = 0; r < runs_; ++r)
      for (uintptr_t at = done_; at < end; at += kLine)
        __builtin_prefetch(reinterpret_cast<const T*>(run_[r] + at), 0, 3);
    done_ = end;
  }

  const Args* a_ = nullptr;
  int64_t first_ = 0;
  int count_ = 0;
  Cursor cursor_[kOperands];
  int lines_ = 0;  // per operand and step
  bool active_ = false;
  int runs_ = 0;                   // step_runs: the operands' runs (0: not that case)
  uintptr_t run_[kOperands] = {};  // each run's first line
  uintptr_t span_ = 0, done_ = 0;  // bytes from a run's first line to its last; fetched so far
};

}  // namespace
}  // namespace tenax::cpu
