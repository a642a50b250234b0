#pragma once
// The CPU tridiagonal solve's loop over a range of systems: the panel width for the call's layout
// and the panels one after another (ragged tails through a narrow panel). Like
// tridiagonal_thomas.h, in an anonymous namespace, one copy per instruction set: included by
// tridiagonal.cpp (the baseline) and tridiagonal_avx2.cpp.
#include <algorithm>
#include <cstdint>

#include "tenax/backends/cpu/tridiagonal_thomas.h"

namespace tenax::cpu {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per instruction set, see above

// ---- dispatch over blocks of systems ----

// Wide panels when consecutive systems are adjacent in memory (the batch axis is innermost) for
// every operand that varies by system, as wide as keeps c' and d' within kWideScratch bytes;
// kRows when each system's rows are contiguous instead (solve_rows); otherwise kNarrow (tiles).
template <class T>
int panel_width(const TridiagonalArgs& a) {
  using P = ThomasPanel<T>;
  if (a.systems < 2) return P::kNarrow;
  bool adjacent = true, rows = true;
  for (int o = 0; o < Op::count; ++o) {
    if (o == Op::x && !a.out) continue;
    const int64_t d = a.off[o][1] - a.off[o][0];
    adjacent = adjacent && (d == 1 || (d == 0 && o != Op::x));
    rows = rows && (a.step[o] == 1 || (d == 0 && o != Op::x));
  }
  if (!adjacent) return rows ? P::kRows : P::kNarrow;
  const int64_t fit = P::kWideScratch / (2 * a.n * static_cast<int64_t>(sizeof(T))) / P::VS * P::VS;
  return static_cast<int>(std::clamp<int64_t>(fit, P::kNarrow, P::kWide));
}

// Systems [begin, end) of `a`, panel after panel; where `fetch`, a rows-inner panel prefetches the
// next panel's operands (tridiagonal_fetch.h). The first failed system or -1.
template <class T>
int64_t thomas_range(const TridiagonalArgs& a, int64_t begin, int64_t end, bool fetch) {
  thread_local Scratch<T> scratch;
  // No wider than the range (rounded to whole vectors): a few systems need no wide panel.
  constexpr int64_t VS = ThomasPanel<T>::VS;
  const int width = static_cast<int>(std::min<int64_t>(panel_width<T>(a), (end - begin + VS - 1) / VS * VS));
  ThomasPanel<T> panel(a, width, scratch);
  for (int64_t s = begin; s < end; s += width) {
    int count = static_cast<int>(std::min<int64_t>(width, end - s));
    // The next panel even past this range's end: with one thread the next range is this
    // thread's next (one panel in ~30 started cold before); with more, at worst
    // one panel per range is fetched for another thread.
    if (fetch)
      panel.expect_next(s + width, static_cast<int>(std::clamp<int64_t>(a.systems - s - width, 0, width)));
    // A wide panel's ragged tail (not whole vectors) goes through a narrow, tiled panel of its
    // own: tiles as wide as the wide panel would not fit any cache.
    if (count % VS != 0 && width > ThomasPanel<T>::kNarrow) {
      const int whole = count / VS * VS;
      if (whole > 0) {
        const int64_t failed = panel.solve(s, whole);
        if (failed >= 0) return failed;
      }
      ThomasPanel<T> tail(a, ThomasPanel<T>::kNarrow, scratch);
      for (int64_t t = s + whole; t < s + count; t += ThomasPanel<T>::kNarrow) {
        const int64_t failed =
            tail.solve(t, static_cast<int>(std::min<int64_t>(ThomasPanel<T>::kNarrow, s + count - t)));
        if (failed >= 0) return failed;
      }
      continue;
    }
    const int64_t failed = panel.solve(s, count);
    if (failed >= 0) return failed;
  }
  return -1;
}

}  // namespace
}  // namespace tenax::cpu
