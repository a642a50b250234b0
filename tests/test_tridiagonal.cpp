// tridiagonal_solve: values against LAPACK dgtsv in both layouts and dtypes, broadcasting by name,
// the pivoting variant on a matrix Thomas cannot factor, error messages, the gradient against
// finite differences and against a Thomas algorithm written with tenax::scan, and the op inside a
// scan body (implicit time stepping). The generic registry tests add VJP/JVP/nmap checks.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <tenax/tenax.h>

#include "expect_message.h"
#include "tenax/core/ops/dispatch.h"
#include "thomas_scan.h"

extern "C" {
void dgtsv_(const int* n, const int* nrhs, double* dl, double* d, double* du, double* b, const int* ldb,
            int* info);
}

namespace tenax {
namespace {

struct Systems {
  int64_t count, n;
  std::vector<double> lower, diag, upper, rhs;  // system-major: [s * n + i]
};

// Random diagonally dominant systems (or arbitrary ones with dominance = false).
Systems random_systems(int64_t count, int64_t n, uint64_t seed, bool dominant = true) {
  Systems s{count, n, {}, {}, {}, {}};
  std::vector<double> u = uniform(Axes{{"k", 4 * count * n}}, seed, -1, 1).to_vector();
  for (int64_t k = 0; k < count * n; ++k) {
    s.lower.push_back(u[4 * k]);
    s.upper.push_back(u[4 * k + 1]);
    s.diag.push_back(dominant ? 2.5 + u[4 * k + 2] : u[4 * k + 2]);
    s.rhs.push_back(u[4 * k + 3]);
  }
  return s;
}

// LAPACK's answer, system-major.
std::vector<double> lapack_solve(const Systems& s) {
  std::vector<double> x;
  const int n = static_cast<int>(s.n), one = 1;
  for (int64_t b = 0; b < s.count; ++b) {
    std::vector<double> dl, d, du, r;
    for (int i = 0; i < n; ++i) {
      d.push_back(s.diag[b * n + i]);
      r.push_back(s.rhs[b * n + i]);
      if (i + 1 < n) {
        dl.push_back(s.lower[b * n + i + 1]);
        du.push_back(s.upper[b * n + i]);
      }
    }
    int info = 0;
    dgtsv_(&n, &one, dl.data(), d.data(), du.data(), r.data(), &n, &info);
    EXPECT_EQ(info, 0);
    x.insert(x.end(), r.begin(), r.end());
  }
  return x;
}

// `count` systems that all have the matrix (lower, diag, upper) along "i" only, and the
// right-hand sides of rhs (systems-major).
Systems one_matrix_systems(const Tensor& lower, const Tensor& diag, const Tensor& upper, const Tensor& rhs,
                           int64_t count) {
  auto repeated = [count](const Tensor& t) {
    std::vector<double> v = t.to_vector(), out;
    for (int64_t c = 0; c < count; ++c) out.insert(out.end(), v.begin(), v.end());
    return out;
  };
  return Systems{count, lower.size("i"), repeated(lower), repeated(diag), repeated(upper), rhs.to_vector()};
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    const double d = std::abs(a[k] - b[k]) / (1 + std::abs(b[k]));
    if (std::isnan(d)) return INFINITY;  // std::max would pass a NaN over
    m = std::max(m, d);
  }
  return m;
}

// Gradients from the op and from the scan Thomas agree input by input (the scan's axes put in
// the op's order first).
void expect_same_gradients(const std::vector<Tensor>& g_op, const std::vector<Tensor>& g_scan) {
  ASSERT_EQ(g_op.size(), g_scan.size());
  for (size_t k = 0; k < g_op.size(); ++k) {
    const std::vector<double> a = g_op[k].to_vector();
    const std::vector<double> b = contiguous(transpose(g_scan[k], g_op[k].axes().names())).to_vector();
    EXPECT_LT(max_rel_diff(a, b), 1e-12) << "input " << k;
  }
}

TEST(Tridiagonal, MatchesLapackInBothLayoutsBothAlgorithmsAndAcrossTasks) {
  // 9001 systems of 23 rows: several oneTBB tasks (wide panels of up to 4096 adjacent systems),
  // and an odd count, so the last panel has a ragged tail (a partial SIMD block, solved narrow).
  const Systems s = random_systems(9001, 23, 7);
  const std::vector<double> want = lapack_solve(s);
  const Axes rows_inner{{"sys", s.count}, {"i", s.n}};
  auto t = [&](const std::vector<double>& v) { return tensor(v, rows_inner); };
  for (bool batch_inner : {false, true}) {
    for (Tridiagonal alg : {Tridiagonal::thomas, Tridiagonal::pivoting}) {
      auto layout = [&](const std::vector<double>& v) {
        return batch_inner ? contiguous(transpose(t(v), {"i", "sys"})) : t(v);
      };
      Tensor x = tridiagonal_solve(layout(s.lower), layout(s.diag), layout(s.upper), layout(s.rhs), "i", alg);
      ASSERT_EQ(x.axes().name(0), batch_inner ? Name("i") : Name("sys"));  // x follows rhs's layout
      const std::vector<double> got = contiguous(transpose(x, {"sys", "i"})).to_vector();
      EXPECT_LT(max_rel_diff(got, want), 1e-13) << "batch_inner " << batch_inner << " alg " << int(alg);
    }
  }
  // float32 (4 lanes per vector) in both layouts: same systems, single-precision accuracy.
  for (bool batch_inner : {false, true}) {
    auto f32 = [&](const std::vector<double>& v) {
      Tensor h = astype(t(v), DType::f32);
      return batch_inner ? contiguous(transpose(h, {"i", "sys"})) : h;
    };
    Tensor x32 = tridiagonal_solve(f32(s.lower), f32(s.diag), f32(s.upper), f32(s.rhs), "i");
    EXPECT_EQ(x32.dtype(), DType::f32);
    const std::vector<double> got = contiguous(transpose(astype(x32, DType::f64), {"sys", "i"})).to_vector();
    EXPECT_LT(max_rel_diff(got, want), 2e-5) << "batch_inner " << batch_inner;
  }
}

// Two batch axes: operands whose systems are evenly spaced (located by a stride) and ones that are
// not (a table of offsets), mixed in one call, in each algorithm: the same answers as LAPACK.
TEST(Tridiagonal, SystemsLocatedByAStrideOrByATableSolveAlike) {
  const int64_t A = 5, B = 7, n = 9;
  const Systems s = random_systems(A * B, n, 17);
  const std::vector<double> want = lapack_solve(s);
  const Axes abi{{"a", A}, {"b", B}, {"i", n}};
  const Axes lanes{{"a", A}, {"b", B}};
  auto t = [&](const std::vector<double>& v) { return tensor(v, abi); };
  // (a, b, i): one stride (n); (b, a, i) and (a, i, b): a table; a slice of a wider b: a table.
  std::vector<double> wide(size_t(A * 2 * B * n), 1e300);  // the upper diagonal in the first B of 2B
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < n; ++i)
        wide[size_t((a * 2 * B + b) * n + i)] = s.upper[size_t((a * B + b) * n + i)];
  const Tensor sliced = slice(tensor(wide, Axes{{"a", A}, {"b", 2 * B}, {"i", n}}), "b", 0, B);
  int64_t stride = -1;
  EXPECT_TRUE(detail::batch_stride(t(s.diag), lanes, stride));
  EXPECT_EQ(stride, n);
  EXPECT_FALSE(detail::batch_stride(contiguous(transpose(t(s.diag), {"b", "a", "i"})), lanes, stride));
  EXPECT_FALSE(detail::batch_stride(contiguous(transpose(t(s.diag), {"a", "i", "b"})), lanes, stride));
  EXPECT_FALSE(detail::batch_stride(sliced, lanes, stride));
  EXPECT_FALSE(detail::batch_stride(ones(Axes{{"a", A}, {"i", n}}), lanes, stride));  // broadcast over b only
  EXPECT_TRUE(detail::batch_stride(ones(Axes{{"i", n}}), lanes, stride));             // one system for all
  EXPECT_EQ(stride, 0);
  // Size-1 axes do not break a stride: (a, 1, b) laid out as (a, b).
  EXPECT_TRUE(detail::batch_stride(ones(Axes{{"a", A}, {"b", B}, {"i", n}}),
                                   Axes{{"a", A}, {"c", 1}, {"b", B}}, stride));
  EXPECT_EQ(stride, n);
  for (Tridiagonal alg : {Tridiagonal::thomas, Tridiagonal::pivoting}) {
    Tensor x = tridiagonal_solve(contiguous(transpose(t(s.lower), {"b", "a", "i"})), t(s.diag), sliced,
                                 contiguous(transpose(t(s.rhs), {"a", "i", "b"})), "i", alg);
    const std::vector<double> got = contiguous(transpose(x, {"a", "b", "i"})).to_vector();
    EXPECT_LT(max_rel_diff(got, want), 1e-13) << "alg " << int(alg);
  }
}

// Systems whose rows are contiguous go through VS x VS register transposes in blocks of VS rows
// (VS = 2 doubles, 4 floats), up to 32 systems per panel: every row count around the block
// sizes (only edge blocks, one interior block, a ragged last block), system counts that leave
// padding lanes or a partial panel, operands that start at odd offsets (unaligned lanes), and
// float32.
TEST(Tridiagonal, RowsInnerBlocksOfEveryShapeMatchLapack) {
  for (int64_t n : {1, 2, 3, 4, 5, 6, 8, 9, 17}) {
    for (int64_t count : {1, 3, 31, 33, 70}) {
      const Systems s = random_systems(count, n, static_cast<uint64_t>(100 * n + count));
      const std::vector<double> want = lapack_solve(s);
      const Axes ax{{"sys", count}, {"i", n}};
      auto t = [&](const std::vector<double>& v) { return tensor(v, ax); };
      const std::vector<double> got =
          tridiagonal_solve(t(s.lower), t(s.diag), t(s.upper), t(s.rhs), "i").to_vector();
      EXPECT_LT(max_rel_diff(got, want), 1e-13) << "n " << n << " count " << count;
      // The same systems one element into rows of n + 2: every lane starts off its usual alignment.
      auto shifted = [&](const std::vector<double>& v) {
        Tensor wide =
            concat({zeros(Axes{{"sys", count}, {"i", 1}}), t(v), zeros(Axes{{"sys", count}, {"i", 1}})}, "i");
        return slice(wide, "i", 1, n + 1);
      };
      const std::vector<double> got_shifted =
          tridiagonal_solve(shifted(s.lower), shifted(s.diag), shifted(s.upper), shifted(s.rhs), "i")
              .to_vector();
      EXPECT_LT(max_rel_diff(got_shifted, want), 1e-13) << "shifted, n " << n << " count " << count;
      auto f32 = [&](const std::vector<double>& v) { return astype(t(v), DType::f32); };
      Tensor x32 = tridiagonal_solve(f32(s.lower), f32(s.diag), f32(s.upper), f32(s.rhs), "i");
      EXPECT_LT(max_rel_diff(astype(x32, DType::f64).to_vector(), want), 2e-5)
          << "f32, n " << n << " count " << count;
    }
  }
}

// A zero pivot deep inside a rows-inner system of a full panel (an interior row block) is found
// and named; a zero pivot in a padding lane's duplicate does not hide the real system's.
TEST(Tridiagonal, RowsInnerFailureInAnInteriorBlockNamesTheSystem) {
  Systems s = random_systems(40, 12, 41);
  s.diag[37 * 12 + 6] = 0.0;
  s.lower[37 * 12 + 6] = 0.0;  // d_6 = diag_6 - lower_6 c_5 = 0
  const Axes ax{{"b", 40}, {"i", 12}};
  auto t = [&](const std::vector<double>& v) { return tensor(v, ax); };
  EXPECT_MESSAGE(testing::error_message<NumericError>(
                     [&] { (void)tridiagonal_solve(t(s.lower), t(s.diag), t(s.upper), t(s.rhs), "i"); }),
                 "[tridiagonal_solve] the system along 'i' (12 rows) at batch index {b=37} has a zero, non-finite or tiny pivot");
  Systems last = random_systems(33, 7, 42);  // system 32 is alone in its group (padding lanes)
  last.diag[32 * 7 + 4] = 0.0;
  last.lower[32 * 7 + 4] = 0.0;
  const Axes ax33{{"b", 33}, {"i", 7}};
  auto t33 = [&](const std::vector<double>& v) { return tensor(v, ax33); };
  EXPECT_MESSAGE(testing::error_message<NumericError>([&] {
                   (void)tridiagonal_solve(t33(last.lower), t33(last.diag), t33(last.upper), t33(last.rhs),
                                           "i");
                 }),
                 "at batch index {b=32} has a zero, non-finite or tiny pivot");
}

// Systems back to back, from memory (float64 larger than a 32 MiB last-level cache; at any size
// where test_tridiagonal_fetch forces the fetch on): float64 and float32 lanes walk four far-apart
// chunks of each task's systems (tridiagonal_chunks.h), the few left over go through the panels;
// 4099 x 103 (rows past the last 4-row block, x not on a vector boundary) and 4096 x 100 (x
// streamed). A zero pivot names the lowest failing system, whichever lane meets one first.
TEST(Tridiagonal, RowsInnerChunksFromMemoryMatchLapackAndNameTheFirstFailure) {
  for (auto [count, n] : {std::pair<int64_t, int64_t>{4099, 103}, {4096, 100}}) {
    Systems s = random_systems(count, n, static_cast<uint64_t>(count + n));
    const std::vector<double> want = lapack_solve(s);
    for (int64_t k = 0; k < count; k += 7) {  // lower[0] and upper[n-1] lie outside: never read
      s.lower[k * n] = std::nan("");
      s.upper[k * n + n - 1] = INFINITY;
    }
    const Axes ax{{"sys", count}, {"i", n}};
    auto t = [&](const std::vector<double>& v) { return tensor(v, ax); };
    const std::vector<double> got =
        tridiagonal_solve(t(s.lower), t(s.diag), t(s.upper), t(s.rhs), "i").to_vector();
    EXPECT_LT(max_rel_diff(got, want), 1e-13) << count << " x " << n;
    // float32: four 4-float lanes (SSE), so again 16 streams; from memory here at twice the size.
    auto f32 = [&](const std::vector<double>& v) { return astype(t(v), DType::f32); };
    Tensor x32 = tridiagonal_solve(f32(s.lower), f32(s.diag), f32(s.upper), f32(s.rhs), "i");
    EXPECT_LT(max_rel_diff(astype(x32, DType::f64).to_vector(), want), 2e-5)
        << "f32, " << count << " x " << n;
    for (int64_t bad :
         {count - 1, int64_t{2900}, int64_t{1500}, int64_t{0}}) {  // the last (a leftover), then lower
      s.diag[bad * n + 5] = 0.0;
      s.lower[bad * n + 5] = 0.0;
      EXPECT_MESSAGE(testing::error_message<NumericError>(
                         [&] { (void)tridiagonal_solve(t(s.lower), t(s.diag), t(s.upper), t(s.rhs), "i"); }),
                     "at batch index {sys=" + std::to_string(bad) + "} has a zero, non-finite or tiny pivot");
    }
  }
}

// Rows-inner gradients (the transposed solve reads lower and upper one row shifted, so the first
// and last row blocks are edge blocks) against the scan-written Thomas at small row counts.
TEST(Tridiagonal, RowsInnerGradientsAtSmallRowCountsMatchTheScanThomas) {
  for (int64_t n : {1, 2, 3, 4, 5}) {
    const Axes ax{{"b", 5}, {"i", n}};
    const std::vector<Tensor> args{uniform(ax, 51, -1, 1), uniform(ax, 52, 2.5, 3.5), uniform(ax, 53, -1, 1),
                                   uniform(ax, 54, -1, 1)};
    Tensor w = uniform(ax, 55, -1, 1);
    auto [v_op, g_op] = value_and_grad(
        [&](const std::vector<Tensor>& a) { return sum(w * tridiagonal_solve(a[0], a[1], a[2], a[3], "i")); },
        args);
    auto [v_scan, g_scan] = value_and_grad(
        [&](const std::vector<Tensor>& a) {
          return sum(w * testing::thomas_by_scan(a[0], a[1], a[2], a[3], "i"));
        },
        args);
    EXPECT_NEAR(v_op.item(), v_scan.item(), 1e-12) << "n " << n;
    for (int k = 0; k < 4; ++k)
      EXPECT_LT(max_rel_diff(g_op[k].to_vector(),
                             contiguous(transpose(g_scan[k], g_op[k].axes().names())).to_vector()),
                1e-12)
          << "n " << n << " input " << k;
  }
}

TEST(Tridiagonal, OneMatrixManyRightHandSidesAndConstantRowsBroadcastByName) {
  // The second-difference matrix tridiag(-1, 2.5, -1) as scalars without the row axis, applied to
  // 37 right-hand sides laid out (i, col): equals solving each column with explicit diagonals.
  const int64_t n = 11, cols = 37;
  Tensor rhs = uniform(Axes{{"i", n}, {"col", cols}}, 3, -1, 1);
  Tensor x = tridiagonal_solve(scalar(-1), scalar(2.5), scalar(-1), rhs, "i");
  Systems s{cols,
            n,
            std::vector<double>(cols * n, -1.0),
            std::vector<double>(cols * n, 2.5),
            std::vector<double>(cols * n, -1.0),
            contiguous(transpose(rhs, {"col", "i"})).to_vector()};
  EXPECT_LT(max_rel_diff(contiguous(transpose(x, {"col", "i"})).to_vector(), lapack_solve(s)), 1e-14);
  // A per-row diagonal shared by every column (axes (i) only).
  Tensor diag = uniform(Axes{{"i", n}}, 4, 2.5, 3.5);
  Tensor x2 = tridiagonal_solve(scalar(-1), diag, scalar(-1), rhs, "i");
  std::vector<double> dv = diag.to_vector(), dd;
  for (int64_t c = 0; c < cols; ++c) dd.insert(dd.end(), dv.begin(), dv.end());
  s.diag = dd;
  EXPECT_LT(max_rel_diff(contiguous(transpose(x2, {"col", "i"})).to_vector(), lapack_solve(s)), 1e-14);
  // The entries outside the matrix (lower[0], upper[n-1]) are never read.
  Tensor lower = uniform(Axes{{"i", n}}, 5, -1, 1), upper = uniform(Axes{{"i", n}}, 6, -1, 1);
  Tensor lower_nan = concat({full(Axes{{"i", 1}}, NAN), slice(lower, "i", 1, n)}, "i");
  Tensor upper_nan = concat({slice(upper, "i", 0, n - 1), full(Axes{{"i", 1}}, NAN)}, "i");
  EXPECT_EQ(tridiagonal_solve(lower_nan, diag, upper_nan, rhs, "i").to_vector(),
            tridiagonal_solve(lower, diag, upper, rhs, "i").to_vector());
  // The same with the right-hand sides rows-inner (col, i): shared rows next to per-system rows.
  Tensor rhs_rows = contiguous(transpose(rhs, {"col", "i"}));
  const std::vector<double> want = contiguous(transpose(x2, {"col", "i"})).to_vector();
  EXPECT_LT(max_rel_diff(tridiagonal_solve(scalar(-1), diag, scalar(-1), rhs_rows, "i").to_vector(), want),
            1e-14);
  EXPECT_EQ(tridiagonal_solve(lower_nan, diag, upper_nan, rhs_rows, "i").to_vector(),
            tridiagonal_solve(lower, diag, upper, rhs_rows, "i").to_vector());
}

// A matrix shared in part: the lower diagonal along the rows only (one row for every system), the
// others per system. The panels read that operand as one broadcast row and the others as runs of
// adjacent systems (batch inner) or lanes of contiguous rows (rows inner): full panels, a ragged
// one, a single system; against LAPACK on the explicit systems.
TEST(Tridiagonal, PartlySharedMatrixReadsTheSharedRowForEverySystem) {
  for (int64_t count : {int64_t{1}, int64_t{33}, int64_t{70}}) {
    const int64_t n = 13;
    Systems s = random_systems(count, n, 41);
    const Tensor lower = uniform(Axes{{"i", n}}, 42, -1, 1);
    const std::vector<double> lv = lower.to_vector();
    for (int64_t b = 0; b < count; ++b) std::copy(lv.begin(), lv.end(), s.lower.begin() + b * n);
    const std::vector<double> want = lapack_solve(s);
    const Axes rows_inner{{"sys", count}, {"i", n}};
    for (bool batch_inner : {false, true}) {
      auto t = [&](const std::vector<double>& v) {
        Tensor r = tensor(v, rows_inner);
        return batch_inner ? contiguous(transpose(r, {"i", "sys"})) : r;
      };
      const Tensor x = tridiagonal_solve(lower, t(s.diag), t(s.upper), t(s.rhs), "i");
      const std::vector<double> got = contiguous(transpose(x, {"sys", "i"})).to_vector();
      EXPECT_LT(max_rel_diff(got, want), 1e-13) << "systems " << count << " batch_inner " << batch_inner;
    }
  }
}

// One matrix shared by every system (lower, diag and upper along the rows only) is factored once
// (backends/cpu/tridiagonal_shared.h). Against LAPACK on the explicit systems: row counts around
// the register transposes' blocks, system counts around the 16-system groups and across tasks,
// the right-hand sides rows inner and batch inner, each also sliced out of a wider tensor (lanes
// off their alignment, rows a batch's width apart), float32 too.
TEST(Tridiagonal, OneSharedMatrixMatchesLapackInEveryLayoutAndShape) {
  for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 17, 100}) {
    for (int64_t cols : {1, 2, 15, 16, 17, 33, 1001}) {
      const Axes row{{"i", n}}, rows_inner{{"col", cols}, {"i", n}};
      const auto seed = static_cast<uint64_t>(1000 * n + cols);
      Tensor lower = uniform(row, seed, -1, 1), diag = uniform(row, seed + 1, 2.5, 3.5);
      Tensor upper = uniform(row, seed + 2, -1, 1), rhs = uniform(rows_inner, seed + 3, -1, 1);
      const std::vector<double> want = lapack_solve(one_matrix_systems(lower, diag, upper, rhs, cols));
      const std::string where = "n " + std::to_string(n) + " cols " + std::to_string(cols);
      auto check = [&](const Tensor& b, double tol, const std::string& what) {
        const Tensor x = tridiagonal_solve(lower, diag, upper, b, "i");
        const std::vector<double> got =
            contiguous(transpose(astype(x, DType::f64), {"col", "i"})).to_vector();
        EXPECT_LT(max_rel_diff(got, want), tol) << what << ", " << where;
      };
      const Tensor batch_inner = contiguous(transpose(rhs, {"i", "col"}));
      check(rhs, 1e-13, "rows inner");
      check(batch_inner, 1e-13, "batch inner");
      // One element into rows of n + 1 / one system into a batch of cols + 1.
      check(slice(concat({zeros(Axes{{"col", cols}, {"i", 1}}), rhs}, "i"), "i", 1, n + 1), 1e-13,
            "rows inner, sliced");
      check(slice(concat({zeros(Axes{{"i", n}, {"col", 1}}), batch_inner}, "col"), "col", 1, cols + 1), 1e-13,
            "batch inner, sliced");
      check(transpose(rhs, {"i", "col"}), 1e-13, "a transposed view");
      auto f32 = [](const Tensor& t) { return astype(t, DType::f32); };
      const Tensor x32 = tridiagonal_solve(f32(lower), f32(diag), f32(upper), f32(rhs), "i");
      EXPECT_LT(max_rel_diff(astype(x32, DType::f64).to_vector(), want), 2e-5) << "f32 rows inner, " << where;
      const Tensor x32b = tridiagonal_solve(f32(lower), f32(diag), f32(upper), f32(batch_inner), "i");
      EXPECT_LT(max_rel_diff(contiguous(transpose(astype(x32b, DType::f64), {"col", "i"})).to_vector(), want),
                2e-5)
          << "f32 batch inner, " << where;
    }
  }
}

// The shared matrix's gradients (the fused reverse rule factors A^T once and sums the matrix's
// adjoints over the systems itself) against the scan-written Thomas: the cotangent rows inner,
// batch inner, or across x's layout (a system at a time); enough systems for several chunks of
// the sums; one off-diagonal given as lower and upper (its two adjoints one buffer: written, then
// added to). A zero pivot in the shared matrix fails every system and names the first.
TEST(Tridiagonal, OneSharedMatrixDifferentiatesAndItsFailureNamesTheFirstSystem) {
  for (int layout : {0, 1, 2})
    for (int64_t n : {1, 2, 5, 37}) {
      const int64_t m = n == 37 ? 2003 : 203;
      const Axes row{{"i", n}}, rows_inner{{"b", m}, {"i", n}}, batch_inner{{"i", n}, {"b", m}};
      const Axes& ax = layout == 1 ? batch_inner : rows_inner;
      const std::vector<Tensor> args{uniform(row, 61, -1, 1), uniform(row, 62, 2.5, 3.5),
                                     uniform(row, 63, -1, 1), uniform(ax, 64, -1, 1)};
      Tensor w =
          layout == 2 ? contiguous(transpose(uniform(ax, 65, -1, 1), {"i", "b"})) : uniform(ax, 65, -1, 1);
      auto by_op = [&](const std::vector<Tensor>& a) {
        return sum(w * tridiagonal_solve(a[0], a[1], a[2], a[3], "i"));
      };
      auto by_scan = [&](const std::vector<Tensor>& a) {
        return sum(w * testing::thomas_by_scan(a[0], a[1], a[2], a[3], "i"));
      };
      SCOPED_TRACE("layout " + std::to_string(layout) + " n " + std::to_string(n));
      const std::vector<Tensor> g = grad(by_op, args);
      expect_same_gradients(g, grad(by_scan, args));
      // float32 (the kernel's 8-float lanes) against the float64 gradient
      std::vector<Tensor> args32;
      for (const Tensor& t : args) args32.push_back(astype(t, DType::f32));
      const Tensor w32 = astype(w, DType::f32);
      const std::vector<Tensor> g32 = grad(
          [&](const std::vector<Tensor>& a) {
            return sum(w32 * tridiagonal_solve(a[0], a[1], a[2], a[3], "i"));
          },
          args32);
      for (int k = 0; k < 4; ++k)
        EXPECT_LT(max_rel_diff(astype(g32[k], DType::f64).to_vector(), g[k].to_vector()), 1e-3)
            << "f32, input " << k;
      const std::vector<Tensor> sym{args[0], args[1], args[3]};
      expect_same_gradients(grad(
                                [&](const std::vector<Tensor>& a) {
                                  return by_op({a[0], a[1], a[0], a[2]});
                                },
                                sym),
                            grad(
                                [&](const std::vector<Tensor>& a) {
                                  return by_scan({a[0], a[1], a[0], a[2]});
                                },
                                sym));
    }
  Tensor diag =
      tensor(std::vector<double>{2.0, 3.0, 0.0, 2.0}, Axes{{"i", 4}});  // lower and upper 0: pivot 2 is 0
  for (const Axes& ax : {Axes{{"b", 19}, {"i", 4}}, Axes{{"i", 4}, {"b", 19}}})
    EXPECT_MESSAGE(testing::error_message<NumericError>([&] {
                     (void)tridiagonal_solve(scalar(0.0), diag, scalar(0.0), uniform(ax, 66, -1, 1), "i");
                   }),
                   "[tridiagonal_solve] the system along 'i' (4 rows) at batch index {b=0} has a zero, non-finite or tiny pivot");
}

// Pivoting with one matrix for every system (LAPACK gttrf once; the shared kernel applies its LU,
// row swaps and all, to 8 systems at a time, or gttrs on blocks of 64 right-hand sides in other
// layouts): matrices Thomas cannot factor (a zero leading diagonal, diagonals of either sign:
// swaps at many rows), against dgtsv per system, the right-hand sides rows inner, batch inner,
// sliced and a transposed view; the gradient (the transposed solve the same way) equals the
// per-system path's on the matrix materialised per system, summed over the systems; a singular
// shared matrix names the first system.
TEST(Tridiagonal, OneSharedMatrixWithPivotingMatchesPerSystemLapack) {
  for (int64_t n : {1, 2, 6, 23}) {
    const int64_t m = 70;
    const Axes row{{"i", n}}, rows_inner{{"b", m}, {"i", n}};
    const auto seed = static_cast<uint64_t>(70 + n);
    Tensor lower = uniform(row, seed, -1, 1), upper = uniform(row, seed + 1, 0.5, 1);
    Tensor diag = n == 1 ? full(row, 0.5)
                         : concat({zeros(Axes{{"i", 1}}), uniform(Axes{{"i", n - 1}}, seed + 2, -1, 1)}, "i");
    Tensor rhs = uniform(rows_inner, seed + 3, -1, 1);
    const std::vector<double> want = lapack_solve(one_matrix_systems(lower, diag, upper, rhs, m));
    const Tensor batch_inner = contiguous(transpose(rhs, {"i", "b"}));
    const Tensor sliced = slice(concat({zeros(Axes{{"b", m}, {"i", 1}}), rhs}, "i"), "i", 1, n + 1);
    for (const Tensor& b : {rhs, batch_inner, sliced, transpose(rhs, {"i", "b"})}) {
      const Tensor x = tridiagonal_solve(lower, diag, upper, b, "i", Tridiagonal::pivoting);
      EXPECT_LT(max_rel_diff(contiguous(transpose(x, {"b", "i"})).to_vector(), want), 1e-11)
          << "n " << n << " " << b.axes().describe();
      auto f32 = [](const Tensor& t) { return astype(t, DType::f32); };  // LAPACK sgttrf's LU
      const Tensor x32 =
          tridiagonal_solve(f32(lower), f32(diag), f32(upper), f32(b), "i", Tridiagonal::pivoting);
      EXPECT_LT(max_rel_diff(contiguous(transpose(astype(x32, DType::f64), {"b", "i"})).to_vector(), want),
                1e-3)
          << "f32, n " << n << " " << b.axes().describe();
    }
    if (n > 1) {  // Thomas cannot
      EXPECT_THROW((void)tridiagonal_solve(lower, diag, upper, rhs, "i"), NumericError);
    }
    Tensor w = uniform(rows_inner, seed + 4, -1, 1);
    auto loss = [&](const std::vector<Tensor>& a) {
      return sum(w * tridiagonal_solve(a[0], a[1], a[2], a[3], "i", Tridiagonal::pivoting));
    };
    const std::vector<Tensor> shared = grad(loss, {lower, diag, upper, rhs});
    auto per_system = [&](const Tensor& t) {
      return contiguous(transpose(broadcast(t, Axes{{"b", m}}), {"b", "i"}));
    };
    const std::vector<Tensor> per = grad(loss, {per_system(lower), per_system(diag), per_system(upper), rhs});
    for (int k = 0; k < 3; ++k)
      EXPECT_LT(max_rel_diff(shared[k].to_vector(), sum(per[k], {"b"}).to_vector()), 1e-10)
          << "n " << n << " input " << k;
    EXPECT_LT(max_rel_diff(shared[3].to_vector(), per[3].to_vector()), 1e-11) << "n " << n;
  }
  const Axes row{{"i", 6}};
  EXPECT_MESSAGE(testing::error_message<NumericError>([&] {
                   (void)tridiagonal_solve(scalar(0.0), zeros(row), scalar(0.0),
                                           uniform(Axes{{"b", 9}, {"i", 6}}, 79, -1, 1), "i",
                                           Tridiagonal::pivoting);
                 }),
                 "[tridiagonal_solve] the system along 'i' (6 rows) at batch index {b=0} is singular");
}

TEST(Tridiagonal, PivotingSolvesWhatThomasCannotAndErrorsNameTheSystem) {
  // Three systems; the second has a zero leading diagonal entry (non-singular: det = -1 * ...).
  Systems s = random_systems(3, 5, 11);
  s.diag[5] = 0.0;
  const Axes ax{{"b", 3}, {"i", 5}};
  auto t = [&](const std::vector<double>& v) { return tensor(v, ax); };
  try {
    (void)tridiagonal_solve(t(s.lower), t(s.diag), t(s.upper), t(s.rhs), "i");
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_MESSAGE(e.what(),
                   "[tridiagonal_solve] the system along 'i' (5 rows) at batch index {b=1} has a zero, non-finite or tiny pivot in the Thomas algorithm");
  }
  Tensor x = tridiagonal_solve(t(s.lower), t(s.diag), t(s.upper), t(s.rhs), "i", Tridiagonal::pivoting);
  // Residual A x - rhs of every system, written out.
  const std::vector<double> xv = x.to_vector();
  for (int b = 0; b < 3; ++b)
    for (int i = 0; i < 5; ++i) {
      double r = s.diag[b * 5 + i] * xv[b * 5 + i] - s.rhs[b * 5 + i];
      if (i > 0) r += s.lower[b * 5 + i] * xv[b * 5 + i - 1];
      if (i < 4) r += s.upper[b * 5 + i] * xv[b * 5 + i + 1];
      EXPECT_NEAR(r, 0.0, 1e-12) << "system " << b << " row " << i;
    }
  // A singular system (a zero row) fails under pivoting too, naming it.
  std::vector<double> z = s.diag, zl = s.lower, zu = s.upper;
  z[2 * 5 + 3] = zl[2 * 5 + 3] = zu[2 * 5 + 3] = 0.0;
  try {
    (void)tridiagonal_solve(t(zl), t(z), t(zu), t(s.rhs), "i", Tridiagonal::pivoting);
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_MESSAGE(e.what(), "at batch index {b=2} is singular");
  }
  // A NaN on the diagonal is a non-finite pivot.
  std::vector<double> dn = s.diag;
  dn[2] = NAN;
  dn[5] = 3.0;
  EXPECT_MESSAGE(testing::error_message<NumericError>(
                     [&] { (void)tridiagonal_solve(t(s.lower), t(dn), t(s.upper), t(s.rhs), "i"); }),
                 "[tridiagonal_solve] the system along 'i' (5 rows) at batch index {b=0} has a zero, non-finite or tiny pivot");
}

// A pivot tiny against its row (growth above 1 / sqrt(eps)) fails as a zero one does, in every
// host path: systems rows-inner (panels and, from memory, the chunked lanes), systems adjacent
// in memory, one shared matrix, float64 and float32; pivoting then solves it as LAPACK does. A
// moderate growth (1e5) still solves, to LAPACK's answer within the growth's share of the digits.
TEST(Tridiagonal, TinyPivotsFailInEveryPathAndModerateGrowthSolves) {
  auto with_pivot = [](Systems s, int64_t sys, double pivot) {
    s.diag[sys * s.n] = pivot;
    s.upper[sys * s.n] = 1.0;
    s.lower[sys * s.n + 1] = 1.0;
    return s;
  };
  const std::string fails = " has a zero, non-finite or tiny pivot in the Thomas algorithm";
  for (auto [count, n] : {std::pair<int64_t, int64_t>{37, 12}, {4099, 103}}) {
    const Systems tiny = with_pivot(random_systems(count, n, 77), 29, 1e-12);
    const Axes rows{{"b", count}, {"i", n}};
    auto t = [&](const std::vector<double>& v) { return tensor(v, rows); };
    // The same systems stored row-major (systems adjacent in memory).
    auto adjacent = [&](const std::vector<double>& v) {
      std::vector<double> w(v.size());
      for (int64_t b = 0; b < count; ++b)
        for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i * count + b)] = v[static_cast<size_t>(b * n + i)];
      return tensor(w, Axes{{"i", n}, {"b", count}});
    };
    const std::string where = "the system along 'i' (" + std::to_string(n) + " rows) at batch index {b=29}";
    EXPECT_MESSAGE(testing::error_message<NumericError>([&] {
                     (void)tridiagonal_solve(t(tiny.lower), t(tiny.diag), t(tiny.upper), t(tiny.rhs), "i");
                   }),
                   where + fails);
    EXPECT_MESSAGE(testing::error_message<NumericError>([&] {
                     (void)tridiagonal_solve(adjacent(tiny.lower), adjacent(tiny.diag), adjacent(tiny.upper),
                                             adjacent(tiny.rhs), "i");
                   }),
                   where + fails);
    auto f32 = [&](const std::vector<double>& v) { return astype(t(v), DType::f32); };
    EXPECT_MESSAGE(testing::error_message<NumericError>([&] {
                     (void)tridiagonal_solve(f32(tiny.lower), f32(tiny.diag), f32(tiny.upper), f32(tiny.rhs), "i");
                   }),
                   where + fails);
    const std::vector<double> pivoted =
        tridiagonal_solve(t(tiny.lower), t(tiny.diag), t(tiny.upper), t(tiny.rhs), "i", Tridiagonal::pivoting)
            .to_vector();
    EXPECT_LT(max_rel_diff(pivoted, lapack_solve(tiny)), 1e-12) << count << " x " << n;
    const Systems moderate = with_pivot(random_systems(count, n, 78), 29, 1e-5);
    const std::vector<double> got =
        tridiagonal_solve(t(moderate.lower), t(moderate.diag), t(moderate.upper), t(moderate.rhs), "i").to_vector();
    EXPECT_LT(max_rel_diff(got, lapack_solve(moderate)), 1e-9) << count << " x " << n;
  }
  // One matrix for every system: its factorisation fails, naming the first system.
  const Axes row{{"i", 6}};
  std::vector<double> d(6, 3.0), off(6, 1.0);
  d[0] = 1e-12;
  EXPECT_MESSAGE(testing::error_message<NumericError>([&] {
                   (void)tridiagonal_solve(tensor(off, row), tensor(d, row), tensor(off, row),
                                           uniform(Axes{{"b", 9}, {"i", 6}}, 80, -1, 1), "i");
                 }),
                 "the system along 'i' (6 rows) at batch index {b=0}" + fails);
}

TEST(Tridiagonal, MisuseErrors) {
  Tensor a = ones(Axes{{"i", 4}}), b = ones(Axes{{"i", 5}});
  try {
    (void)tridiagonal_solve(a, a, a, a, "j");
    FAIL() << "no error";
  } catch (const AxisError& e) {
    EXPECT_MESSAGE(e.what(), "[tridiagonal_solve] no operand has the system axis 'j'");
  }
  EXPECT_MESSAGE(
      testing::error_message<Error>([&] { (void)tridiagonal_solve(a, a, a, b, "i"); }),
      "[tridiagonal_solve] axis 'i' has size 5 in operand 3 (i=5) but size 4 in operand 0 (i=4)");  // sizes
                                                                                                    // disagree
                                                                                                    // on 'i'
  EXPECT_MESSAGE(testing::error_message<DTypeError>([&] {
                   (void)tridiagonal_solve(a, a, a, full(Axes{{"i", 4}}, 1.0, DType::i64), "i");
                 }),
                 "[tridiagonal_solve] needs float64, float32, complex128 or complex64, got int64");
  EXPECT_MESSAGE(testing::error_message<DTypeError>(
                     [&] { (void)tridiagonal_solve(a, a, a, astype(a, DType::f32), "i"); }),
                 "[tridiagonal_solve] input 0 is float64 but input 3 is float32; convert one with astype");
}

class TridiagonalGradient : public ::testing::TestWithParam<int> {};

// 0: mixed layouts (rows-inner rhs, a shared upper diagonal: the reduced reverse rule);
// 1: every operand batch-inner, enough systems for the kernel's wide panels (the fused rule);
// 2: every operand rows-inner (the fused rule, one system at a time).
TEST_P(TridiagonalGradient, MatchesFiniteDifferencesAndAThomasWrittenWithScan) {
  const int config = GetParam();
  const bool wide = config == 1;
  const int64_t n = 9, m = wide ? 300 : 6;
  const Axes batch_inner{{"i", n}, {"b", m}}, rows_inner{{"b", m}, {"i", n}};
  const Axes& full = config == 2 ? rows_inner : batch_inner;
  Tensor lower = uniform(full, 21, -1, 1);
  Tensor diag = uniform(full, 22, 2.5, 3.5);
  // shared by every system (summed adjoint), or one per system
  Tensor upper = config == 0 ? uniform(Axes{{"i", n}}, 23, -1, 1) : uniform(full, 23, -1, 1);
  Tensor rhs = uniform(config == 0 ? rows_inner : full, 24, -1, 1);
  Tensor w = uniform(Axes{{"b", m}, {"i", n}}, 25, -1, 1);
  // The row-0 lower and row-(n-1) upper entries are outside the matrix: their gradients are 0.
  auto loss_op = [&](const std::vector<Tensor>& a) {
    return sum(w * tridiagonal_solve(a[0], a[1], a[2], a[3], "i"));
  };
  auto loss_scan = [&](const std::vector<Tensor>& a) {
    return sum(w * testing::thomas_by_scan(a[0], a[1], a[2], a[3], "i"));
  };
  const std::vector<Tensor> args{lower, diag, upper, rhs};
  auto [v_op, g_op] = value_and_grad(loss_op, args);
  auto [v_scan, g_scan] = value_and_grad(loss_scan, args);
  EXPECT_NEAR(v_op.item(), v_scan.item(), 1e-12);
  for (int k = 0; k < 4; ++k) {
    ASSERT_TRUE(g_op[k].axes().same_set(args[k].axes()));
    const std::vector<double> a = g_op[k].to_vector();
    const std::vector<double> b = contiguous(transpose(g_scan[k], g_op[k].axes().names())).to_vector();
    EXPECT_LT(max_rel_diff(a, b), 1e-12) << "input " << k;
  }
  EXPECT_EQ(select(g_op[0], "i", 0).to_vector(), std::vector<double>(m, 0.0));
  for (double v : select(g_op[2], "i", n - 1).to_vector()) EXPECT_EQ(v, 0.0);
  // Central differences on a few entries of every input.
  for (int k = 0; k < 4; ++k) {
    const std::vector<double> g = g_op[k].to_vector();
    std::vector<double> base = args[k].to_vector();
    for (size_t e = 0; e < base.size(); e += wide ? 97 : 7) {
      std::vector<Tensor> p = args, q = args;
      std::vector<double> vp = base, vq = base;
      vp[e] += 1e-6;
      vq[e] -= 1e-6;
      p[k] = tensor(vp, args[k].axes());
      q[k] = tensor(vq, args[k].axes());
      const double fd = (loss_op(p).item() - loss_op(q).item()) / 2e-6;
      EXPECT_NEAR(g[e], fd, 1e-7 * (1 + std::abs(fd))) << "input " << k << " element " << e;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, TridiagonalGradient, ::testing::Values(0, 1, 2));

// The fused rule writes fresh adjoints instead of zero-filling and adding to them, except an
// operand given twice (here one symmetric off-diagonal as lower and upper), whose two adjoints
// are one buffer and must add up. The pool is first filled with NaN blocks of the adjoints' size.
// Both layouts: batch inner (wide panels), rows inner (each system's rows contiguous; 299
// systems, so the last group of a panel is partly padding, and 7 rows, not whole row blocks).
class TridiagonalFusedRule : public ::testing::TestWithParam<bool> {};

TEST_P(TridiagonalFusedRule, WritesFreshAdjointsAndAddsForARepeatedOperand) {
  const bool rows = GetParam();
  const int64_t n = 7, m = rows ? 299 : 300;
  const Axes ax = rows ? Axes{{"b", m}, {"i", n}} : Axes{{"i", n}, {"b", m}};
  Tensor off = uniform(ax, 31, -1, 1), diag = uniform(ax, 32, 2.5, 3.5), rhs = uniform(ax, 33, -1, 1);
  Tensor w = uniform(ax, 34, -1, 1);
  {
    std::vector<Tensor> junk;
    for (int k = 0; k < 16; ++k) junk.push_back(full(ax, std::nan(""), DType::f64));
  }
  auto loss_op = [&](const std::vector<Tensor>& a) {
    return sum(w * tridiagonal_solve(a[0], a[1], a[0], a[2], "i"));
  };
  auto loss_scan = [&](const std::vector<Tensor>& a) {
    return sum(w * testing::thomas_by_scan(a[0], a[1], a[0], a[2], "i"));
  };
  const std::vector<Tensor> args{off, diag, rhs};
  auto g_op = grad(loss_op, args);
  auto g_scan = grad(loss_scan, args);
  expect_same_gradients(g_op, g_scan);
}

// Rows inner, n long enough for blocks away from the first and last rows in every build, and
// enough systems for full panels (systems back to back, forward_block's computed addresses):
// the reverse rule's A^T solve reads lower and upper a row shifted.
TEST(Tridiagonal, RowsInnerGradientThroughFullPanelsMatchesTheScanThomas) {
  const int64_t n = 37, m = 203;
  const Axes ax{{"b", m}, {"i", n}};
  Tensor lower = uniform(ax, 41, -1, 1), diag = uniform(ax, 42, 2.5, 3.5), upper = uniform(ax, 43, -1, 1);
  Tensor rhs = uniform(ax, 44, -1, 1), w = uniform(ax, 45, -1, 1);
  auto loss_op = [&](const std::vector<Tensor>& a) {
    return sum(w * tridiagonal_solve(a[0], a[1], a[2], a[3], "i"));
  };
  auto loss_scan = [&](const std::vector<Tensor>& a) {
    return sum(w * testing::thomas_by_scan(a[0], a[1], a[2], a[3], "i"));
  };
  const std::vector<Tensor> args{lower, diag, upper, rhs};
  auto g_op = grad(loss_op, args);
  auto g_scan = grad(loss_scan, args);
  expect_same_gradients(g_op, g_scan);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TridiagonalFusedRule, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(p.param ? "RowsInner" : "BatchInner");
                         });

TEST(Tridiagonal, ImplicitTimeSteppingInsideAScanEqualsTheLoopAndDifferentiates) {
  // Backward-Euler diffusion u_{t+1} = (I - k L)^{-1} u_t in 5 columns of 12 cells, 20 steps,
  // with the per-cell diffusivity k a parameter: the op runs inside a captured scan body.
  const int64_t cells = 12, cols = 5, steps = 20;
  Tensor u0 = uniform(Axes{{"col", cols}, {"z", cells}}, 31, 0, 1);
  Tensor kappa = uniform(Axes{{"z", cells}}, 32, 0.1, 0.5);
  auto step = [](const Tensor& u, const Tensor& k) {
    return tridiagonal_solve(-k, 1.0 + 2.0 * k, -k, u, "z");
  };
  auto run_scan = [&](const std::vector<Tensor>& a) {
    ScanOptions o;
    o.length = steps;
    ScanResult r = scan(
        [&](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
          Tensor next = step(c[0], a[1]);
          return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{});
        },
        {a[0]}, {}, "t", o);
    return r.carry[0];
  };
  Tensor u = u0;
  for (int64_t t = 0; t < steps; ++t) u = step(u, kappa);
  EXPECT_LT(max_rel_diff(contiguous(transpose(run_scan({u0, kappa}), {"col", "z"})).to_vector(),
                         contiguous(transpose(u, {"col", "z"})).to_vector()),
            1e-14);
  Tensor target = uniform(Axes{{"col", cols}, {"z", cells}}, 33, 0, 1);
  auto loss = [&](const std::vector<Tensor>& a) { return sum(square(run_scan(a) - target)); };
  auto [v, g] = value_and_grad(loss, {u0, kappa});
  const std::vector<double> gk = g[1].to_vector(), kv = kappa.to_vector();
  for (int64_t z = 0; z < cells; z += 3) {
    std::vector<double> p = kv, q = kv;
    p[z] += 1e-6;
    q[z] -= 1e-6;
    const double fd =
        (loss({u0, tensor(p, kappa.axes())}).item() - loss({u0, tensor(q, kappa.axes())}).item()) / 2e-6;
    EXPECT_NEAR(gk[z], fd, 1e-7 * (1 + std::abs(fd))) << "cell " << z;
  }
}

}  // namespace
}  // namespace tenax
