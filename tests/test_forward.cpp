// Forward values against hand-written references and LAPACK: elementwise broadcasting order,
// reductions, dot on every kernel path (direct loops, BLAS in place, BLAS packed), linear algebra.
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "op_check.h"
#include "tenax/core/ops/sampling.h"

extern "C" {
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, std::size_t);
void dgesv_(const int* n, const int* nrhs, double* a, const int* lda, int* ipiv, double* b, const int* ldb, int* info);
}

namespace tenax {
namespace {

using testing::mismatch;

TEST(Elementwise, BroadcastByNameKeepsTheFirstOperandsOrder) {
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}}, "i", "j");  // (i=2, j=3)
  Tensor b = tensor({10, 20}, "i");
  Tensor c = tensor({1, 2, 3, 4}, "k");
  Tensor r = a + b;
  EXPECT_EQ(r.axes().names().describe(), "(i, j)");
  EXPECT_EQ(r.to_vector(), std::vector<double>({11, 12, 13, 24, 25, 26}));
  Tensor r2 = b * c;  // new axes appended in order of appearance
  EXPECT_EQ(r2.axes().describe(), "(i=2, k=4)");
  EXPECT_EQ(r2.at({{"i", 1}, {"k", 3}}), 80.0);
  Tensor r3 = b - a;
  EXPECT_EQ(r3.axes().names().describe(), "(i, j)");
  EXPECT_EQ(r3.at({{"i", 1}, {"j", 0}}), 16.0);
}

TEST(Elementwise, ScalarFunctionsMatchTheStandardLibrary) {
  Tensor x = tensor({-2.5, -0.3, 0.0, 0.7, 30.0}, "i");
  std::vector<double> xs = x.to_vector(), sp = softplus(x).to_vector(), sg = sigmoid(x).to_vector();
  for (size_t k = 0; k < xs.size(); ++k) {
    EXPECT_NEAR(sp[k], std::log1p(std::exp(xs[k])), 1e-12);
    EXPECT_NEAR(sg[k], 1 / (1 + std::exp(-xs[k])), 1e-15);
  }
  EXPECT_EQ(softplus(scalar(-800.0)).item(), 0.0);   // no overflow at either end
  EXPECT_EQ(softplus(scalar(800.0)).item(), 800.0);
  EXPECT_EQ(where(greater(x, scalar(0.0)), x, scalar(-1.0)).to_vector(), std::vector<double>({-1, -1, -1, 0.7, 30}));
}

TEST(Reduce, MatchesLoops) {
  Tensor x = randn(Axes{{"i", 4}, {"j", 5}, {"k", 3}}, 9);
  std::vector<double> v = x.to_vector();
  Tensor s = sum(x, {"i", "k"}), m = max(x, {"j"}), l = logsumexp(x, {"k"}), mu = mean(x);
  double total = 0;
  for (double e : v) total += e;
  EXPECT_NEAR(mu.item(), total / 60, 1e-14);
  for (int j = 0; j < 5; ++j) {
    double e = 0;
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 3; ++k) e += v[size_t(i * 15 + j * 3 + k)];
    EXPECT_NEAR(s.at({{"j", j}}), e, 1e-13);
  }
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 3; ++k) {
      double e = -1e300;
      for (int j = 0; j < 5; ++j) e = std::max(e, v[size_t(i * 15 + j * 3 + k)]);
      EXPECT_EQ(m.at({{"i", i}, {"k", k}}), e);
    }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) {
      double e = 0;
      for (int k = 0; k < 3; ++k) e += std::exp(v[size_t(i * 15 + j * 3 + k)]);
      EXPECT_NEAR(l.at({{"i", i}, {"j", j}}), std::log(e), 1e-13);
    }
  EXPECT_NEAR(logsumexp(tensor({1000.0, 1000.0}, "i")).item(), 1000.0 + std::log(2.0), 1e-12);  // stable
}

// z[b, m, n] = Σ_k x[.., m, k] y[.., k, n] by naive loops over named coordinates.
Tensor naive_matmul(const Tensor& x, const Tensor& y, int64_t B, int64_t M, int64_t K, int64_t N) {
  std::vector<double> out(size_t(B * M * N));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += x.at({{"b", b}, {"m", m}, {"k", k}}) * y.at({{"b", b}, {"k", k}, {"n", n}});
        out[size_t((b * M + m) * N + n)] = s;
      }
  return tensor(out, Axes{{"b", B}, {"m", M}, {"n", N}});
}

TEST(Dot, EveryKernelPathMatchesNaiveLoops) {
  struct Case {
    int64_t B, M, K, N;
  };
  std::mt19937_64 rng(4);
  // Sizes up to 8 take the unrolled fixed-size kernels, per batch entry when batched; a product
  // with one wide free axis (a shared matrix times 256 series, or their sum over the series)
  // runs the wide loops.
  for (Case c :
       {Case{3, 2, 3, 4}, Case{2, 40, 30, 20}, Case{1, 64, 64, 64}, Case{1, 4, 4, 4}, Case{1, 1, 3, 4},
        Case{1, 4, 2, 1}, Case{1, 3, 1, 2}, Case{1, 5, 4, 4}, Case{7, 4, 4, 4}, Case{5, 8, 3, 6},
        Case{1, 4, 4, 256}, Case{1, 256, 4, 4}, Case{1, 4, 256, 4}, Case{2, 2, 4, 256}, Case{3, 3, 37, 2}}) {
    Tensor x = randn(Axes{{"b", c.B}, {"m", c.M}, {"k", c.K}}, 1), y = randn(Axes{{"b", c.B}, {"k", c.K}, {"n", c.N}}, 2);
    Tensor ref = naive_matmul(x, y, c.B, c.M, c.K, c.N);
    EXPECT_LE(mismatch(dot(x, y, {"k"}), ref, 1e-12, 1e-12), 1.0) << "contiguous " << c.M;
    // Transposed operands (BLAS Trans flags) and scrambled strided views (packing path).
    Tensor xt = contiguous(transpose(x, {"b", "k", "m"})), yt = contiguous(transpose(y, {"n", "b", "k"}));
    EXPECT_LE(mismatch(dot(xt, yt, {"k"}), ref, 1e-12, 1e-12), 1.0) << "transposed " << c.M;
    EXPECT_LE(mismatch(dot(testing::scramble(x, rng), testing::scramble(y, rng), {"k"}), ref, 1e-12, 1e-12), 1.0)
        << "strided " << c.M;
  }
}

TEST(Dot, WideProductsAndTheirGradientsMatchNaiveLoops) {
  // A small matrix F against many columns of x (s wide, contiguous): the forward product, x's
  // adjoint (written with s contiguous: the wide-m rows) and F's adjoint (a sum over s: the dot
  // products), in float64 and float32.
  const int64_t K = 4, S = 67, N = 3;
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 1e-4;
    const Tensor x = astype(randn(Axes{{"k", K}, {"s", S}}, 1), dt),
                 f = astype(randn(Axes{{"k", K}, {"n", N}}, 2), dt);
    const Tensor w = astype(randn(Axes{{"s", S}, {"n", N}}, 3), dt);
    const Tensor z = astype(dot(f, x, {"k"}), DType::f64);  // (n, s): s contiguous, the wide-n rows
    const std::vector<Tensor> g =
        grad([&](const std::vector<Tensor>& a) { return sum(dot(a[0], a[1], {"k"}) * w); }, {x, f});
    for (int64_t k = 0; k < K; ++k)
      for (int64_t s = 0; s < S; ++s) {
        double e = 0;
        for (int64_t n = 0; n < N; ++n) e += w.at({{"s", s}, {"n", n}}) * f.at({{"k", k}, {"n", n}});
        EXPECT_NEAR(g[0].at({{"k", k}, {"s", s}}), e, tol) << "x adjoint k=" << k << " s=" << s;
      }
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        double e = 0;
        for (int64_t s = 0; s < S; ++s) e += x.at({{"k", k}, {"s", s}}) * w.at({{"s", s}, {"n", n}});
        EXPECT_NEAR(g[1].at({{"k", k}, {"n", n}}), e, tol * S) << "F adjoint k=" << k << " n=" << n;
        for (int64_t s = 0; s < S; ++s) {
          double zz = 0;
          for (int64_t q = 0; q < K; ++q) zz += f.at({{"k", q}, {"n", n}}) * x.at({{"k", q}, {"s", s}});
          EXPECT_NEAR(z.at({{"n", n}, {"s", s}}), zz, tol) << "product n=" << n << " s=" << s;
        }
      }
  }
}

TEST(Dot, EveryTinySizeAndLayoutMatchesNaiveLoops) {
  // M, N, K in 1..4 (no batch) run fixed-size kernels: a row of z a vector at a time where z's rows
  // are contiguous (y's rows loaded as vectors, or gathered when y is stored n-major), unrolled
  // scalars otherwise; on AVX2 CPUs the AVX2 build (test_forward_baseline runs the baseline). Sizes
  // up to 8 with one above 4 run the kernels with N compiled in and M, K read at run time (the odd
  // N without a vector form: scalar). Both operand orders, both dtypes, and the accumulating form
  // (an adjoint fed by two products).
  for (int64_t M = 1; M <= 8; ++M)
    for (int64_t N = 1; N <= 8; ++N)
      for (int64_t K = 1; K <= 8; ++K) {
        const std::string at =
            "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
        const Tensor x = randn(Axes{{"b", 1}, {"m", M}, {"k", K}}, uint64_t(M * 100 + N * 10 + K));
        const Tensor y = randn(Axes{{"b", 1}, {"k", K}, {"n", N}}, uint64_t(M * 100 + N * 10 + K + 7));
        const Tensor ref = naive_matmul(x, y, 1, M, K, N);
        const Tensor xt = contiguous(transpose(x, {"b", "k", "m"})),
                     yt = contiguous(transpose(y, {"b", "n", "k"}));
        for (const auto& [xa, ya] :
             {std::pair{x, y}, std::pair{xt, y}, std::pair{x, yt}, std::pair{xt, yt}}) {
          EXPECT_LE(mismatch(dot(xa, ya, {"k"}), ref, 1e-14, 1e-14), 1.0) << at;
          const Tensor z32 = dot(astype(xa, DType::f32), astype(ya, DType::f32), {"k"});
          EXPECT_EQ(z32.dtype(), DType::f32);
          EXPECT_LE(mismatch(astype(z32, DType::f64), ref, 1e-5, 1e-5), 1.0) << at << " float32";
        }
        // d/dx [Σ (x y) ⊙ w + Σ (x yt) ⊙ w] = 2 w yᵀ: the second product's VJP accumulates. With x
        // stored k-major (xt) the adjoint's columns are contiguous, not its rows.
        const Tensor w = randn(Axes{{"b", 1}, {"m", M}, {"n", N}}, 9);
        for (const Tensor& xa : {x, xt}) {
          const Tensor g = grad(
              [&](const std::vector<Tensor>& a) {
                return sum(dot(a[0], y, {"k"}) * w) + sum(dot(a[0], yt, {"k"}) * w);
              },
              {xa})[0];
          for (int64_t m = 0; m < M; ++m)
            for (int64_t k = 0; k < K; ++k) {
              double e = 0;
              for (int64_t n = 0; n < N; ++n)
                e += 2 * w.at({{"b", 0}, {"m", m}, {"n", n}}) * y.at({{"b", 0}, {"k", k}, {"n", n}});
              EXPECT_NEAR(g.at({{"b", 0}, {"m", m}, {"k", k}}), e, 1e-13) << at << " m=" << m << " k=" << k;
            }
        }
      }
}

TEST(Dot, TinyProductsAccumulateIntoAdjoints) {
  // x feeds two products: its adjoint gets the second VJP's contraction accumulated into the first.
  // d/dx [Σ (x y) ⊙ W + Σ (x y2) ⊙ W2] = W yᵀ + W2 y2ᵀ, by loops.
  const Tensor x = randn(Axes{{"m", 3}, {"k", 4}}, 1), y = randn(Axes{{"k", 4}, {"n", 2}}, 2);
  const Tensor y2 = randn(Axes{{"k", 4}, {"q", 3}}, 3);
  const Tensor w = randn(Axes{{"m", 3}, {"n", 2}}, 4), w2 = randn(Axes{{"m", 3}, {"q", 3}}, 5);
  auto f = [&](const std::vector<Tensor>& a) {
    return sum(dot(a[0], y, {"k"}) * w) + sum(dot(transpose(a[0], {"k", "m"}), y2, {"k"}) * w2);
  };
  const Tensor g = grad(f, {x})[0];
  for (int m = 0; m < 3; ++m)
    for (int k = 0; k < 4; ++k) {
      double e = 0;
      for (int n = 0; n < 2; ++n) e += w.at({{"m", m}, {"n", n}}) * y.at({{"k", k}, {"n", n}});
      for (int q = 0; q < 3; ++q) e += w2.at({{"m", m}, {"q", q}}) * y2.at({{"k", k}, {"q", q}});
      EXPECT_NEAR(g.at({{"m", m}, {"k", k}}), e, 1e-13) << "m=" << m << " k=" << k;
    }
}

TEST(Dot, InnerOuterAndBatchProducts) {
  Tensor u = tensor({1, 2, 3}, "i"), v = tensor({4, 5}, "j");
  EXPECT_EQ(dot(u, u, {"i"}).item(), 14.0);
  Tensor o = dot(u, v, AxisList{});
  EXPECT_EQ(o.axes().describe(), "(i=3, j=2)");
  EXPECT_EQ(o.at({{"i", 2}, {"j", 1}}), 15.0);
  Tensor batch = dot(u, u * 2.0, AxisList{});  // shared axis not contracted: elementwise batch
  EXPECT_EQ(batch.to_vector(), std::vector<double>({2, 8, 18}));
}

TEST(Linalg, CholeskyMatchesLapack) {
  // Sizes 1..4 run unrolled fixed-size loops on the host, 5 and 6 the general ones.
  std::mt19937_64 rng(3);
  for (int n = 1; n <= 6; ++n) {
    Tensor a = detail::random_spd(rng, "r", "c", n, Axes{}, DType::f64);
    Tensor l = cholesky(a, "r", "c");
    std::vector<double> ref = a.to_vector({"c", "r"});  // column-major for LAPACK
    int info = 0;
    dpotrf_("L", &n, ref.data(), &n, &info, 1);
    ASSERT_EQ(info, 0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        EXPECT_NEAR(l.at({{"r", i}, {"c", j}}), j <= i ? ref[size_t(j * n + i)] : 0.0, 1e-12) << "n=" << n;
  }
}

TEST(Linalg, SolvesMatchLapack) {
  std::mt19937_64 rng(8);
  const int n = 5, nrhs = 3;
  Tensor a = randn(Axes{{"r", n}, {"c", n}}, 5) + 4.0 * contiguous(detail::random_spd(rng, "r", "c", n, Axes{}, DType::f64));
  Tensor b = randn(Axes{{"r", n}, {"rhs", nrhs}}, 6);
  Tensor z = solve(a, b, "r", "c");
  EXPECT_EQ(z.axes().names().describe(), "(c, rhs)");
  std::vector<double> am = a.to_vector({"c", "r"}), bm = b.to_vector({"rhs", "r"});
  std::vector<int> piv(n);
  int info = 0;
  dgesv_(&n, &nrhs, am.data(), &n, piv.data(), bm.data(), &n, &info);
  ASSERT_EQ(info, 0);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < nrhs; ++k) EXPECT_NEAR(z.at({{"c", i}, {"rhs", k}}), bm[size_t(k * n + i)], 1e-12);
  // Transposed solve: Aᵀ z = b with b over "c".
  Tensor zt = solve(a, rename(b, "r", "c"), "r", "c", Transpose::yes);
  Tensor back = dot(a, zt, {"r"});  // (Aᵀ z)[c] = Σ_r A[r, c] z[r]
  EXPECT_LE(mismatch(back, rename(b, "r", "c"), 1e-12, 1e-12), 1.0);
  // Triangular solves in all four variants reproduce their right-hand side, at every size in and
  // past the host's fixed-size range.
  for (int m = 1; m <= 5; ++m) {
    Tensor l = cholesky(contiguous(detail::random_spd(rng, "r", "c", m, Axes{}, DType::f64)), "r", "c");
    Tensor u = contiguous(transpose(rename(l, AxisList{"r", "c"}, AxisList{"c", "r"}), {"r", "c"}));
    Tensor rhs_m = randn(Axes{{"r", m}, {"rhs", nrhs}}, 7 + m);
    for (bool lower : {true, false})
      for (bool tr : {false, true}) {
        const Tensor& t = lower ? l : u;
        Tensor rhs = tr ? rename(rhs_m, "r", "c") : rhs_m;
        Tensor sol = triangular_solve(t, rhs, "r", "c", lower ? Triangle::lower : Triangle::upper,
                                      tr ? Transpose::yes : Transpose::no);
        Tensor re = tr ? dot(t, sol, {"r"}) : dot(t, sol, {"c"});
        EXPECT_LE(mismatch(re, rhs, 1e-12, 1e-12), 1.0)
            << "n=" << m << " lower=" << lower << " transposed=" << tr;
      }
  }
}

// On the host, one axis of the right-hand side that the matrix lacks becomes the kernel's columns
// (the largest); the others stay batch entries. Every combination of batch and column axes, in a
// transposed layout, must equal solving slice by slice.
TEST(Linalg, SolvesOverRightHandSideAxesTheMatrixLacksEqualSliceBySlice) {
  std::mt19937_64 rng(11);
  const int n = 3;
  Tensor spd = contiguous(detail::random_spd(rng, "r", "c", n, Axes{{"s", 2}}, DType::f64));
  Tensor l = cholesky(spd, "r", "c");
  Tensor a = spd + randn(Axes{{"r", n}, {"c", n}, {"s", 2}}, 3);
  // b over (q, r, s, p): p and q are columns the matrices lack (q the larger), s batches the matrices.
  Tensor b =
      contiguous(transpose(randn(Axes{{"p", 2}, {"r", n}, {"s", 2}, {"q", 4}}, 4), {"q", "r", "s", "p"}));
  for (bool general : {false, true}) {
    for (bool tr : {false, true}) {
      const Tensor& m = general ? a : l;
      Tensor rhs = tr ? rename(b, "r", "c") : b;
      const Transpose how = tr ? Transpose::yes : Transpose::no;
      Tensor z = general ? solve(m, rhs, "r", "c", how) : triangular_solve(m, rhs, "r", "c", Triangle::lower, how);
      const Name in = tr ? "c" : "r", out = tr ? "r" : "c";
      for (int s = 0; s < 2; ++s)
        for (int p = 0; p < 2; ++p)
          for (int q = 0; q < 4; ++q) {
            Tensor ms = select(m, "s", s);
            Tensor col = select(select(select(rhs, "s", s), "p", p), "q", q);
            Tensor want =
                general ? solve(ms, col, "r", "c", how) : triangular_solve(ms, col, "r", "c", Triangle::lower, how);
            Tensor got = select(select(select(z, "s", s), "p", p), "q", q);
            EXPECT_LE(mismatch(got, want, 1e-13, 1e-13), 1.0)
                << "general=" << general << " transposed=" << tr << " s=" << s << " p=" << p << " q=" << q;
            EXPECT_TRUE(got.has_axis(out) && !got.has_axis(in));
          }
    }
  }
}

TEST(Linalg, LogdetMatchesClosedForms) {
  Tensor a = tensor({{1.0, 2.0}, {3.0, 4.0}}, "r", "c");  // det = -2
  EXPECT_NEAR(logdet(a, "r", "c").item(), std::log(2.0), 1e-15);
  std::mt19937_64 rng(2);
  Tensor spd = detail::random_spd(rng, "r", "c", 4, Axes{{"s", 3}}, DType::f64);
  Tensor l = cholesky(spd, "r", "c");
  Tensor eye = tensor({{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}, "r", "c");
  Tensor diag_log = sum(log(l * eye + (1.0 - eye)), {"r", "c"});  // Σ log L_ii
  EXPECT_LE(mismatch(logdet(spd, "r", "c"), 2.0 * diag_log, 1e-12, 1e-12), 1.0);
}

TEST(Layout, ViewsNeverCopy) {
  Tensor x = randn(Axes{{"i", 4}, {"j", 6}}, 1);
  for (const Tensor& v : {slice(x, "j", 1, 5, 2), select(x, "i", 2), transpose(x, {"j", "i"}), rename(x, "i", "q"),
                          broadcast(x, Axes{{"z", 3}})})
    EXPECT_EQ(v.storage().get(), x.storage().get()) << v.describe();
  Tensor s = slice(x, "j", 1, 5, 2);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.at({{"i", 3}, {"j", 1}}), x.at({{"i", 3}, {"j", 3}}));
  Tensor c = contiguous(s);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage().get(), x.storage().get());
}

TEST(Layout, DiagonalIsAViewAlongRow) {
  // x[b, i, j] = 100 b + 10 i + j: the diagonal of batch b holds 100 b + 11 i.
  std::vector<double> v;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) v.push_back(100.0 * b + 10.0 * i + j);
  Tensor x = tensor(v, Axes{{"b", 2}, {"i", 3}, {"j", 3}});
  for (const Tensor& xs : {x, transpose(x, {"j", "b", "i"}), contiguous(transpose(x, {"j", "i", "b"}))}) {
    Tensor d = diagonal(xs, "i", "j");
    EXPECT_EQ(d.storage().get(), xs.storage().get());
    EXPECT_FALSE(d.axes().contains("j"));
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(d.at({{"b", b}, {"i", i}}), 100.0 * b + 11.0 * i) << xs.describe();
  }
  // Along col instead: the same elements under the other name.
  EXPECT_EQ(diagonal(x, "j", "i").to_vector({"b", "j"}), diagonal(x, "i", "j").to_vector({"b", "i"}));
  // The gradient of Σ w_i x_ii is w on the diagonal and zero elsewhere.
  const Tensor w = tensor({1.0, -2.0, 3.0}, "i");
  Tensor m = tensor({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}, "i", "j");
  Tensor g =
      grad([&](const std::vector<Tensor>& p) { return sum(mul(diagonal(p[0], "i", "j"), w)); }, {m})[0];
  EXPECT_EQ(g.to_vector({"i", "j"}), std::vector<double>({1, 0, 0, 0, -2, 0, 0, 0, 3}));
}

TEST(Layout, ConcatAndStack) {
  Tensor a = tensor({{1, 2}, {3, 4}}, "i", "j"), b = tensor({{5, 6}}, "i", "j");
  Tensor c = concat({a, b}, "i");
  EXPECT_EQ(c.axes().describe(), "(i=3, j=2)");
  EXPECT_EQ(c.to_vector(), std::vector<double>({1, 2, 3, 4, 5, 6}));
  Tensor bt = transpose(tensor({{7, 8}, {9, 10}}, "j", "i"), {"i", "j"});  // aligned by name
  Tensor s = stack({a, bt}, "n");
  EXPECT_EQ(s.axes().describe(), "(n=2, i=2, j=2)");
  EXPECT_EQ(s.at({{"n", 1}, {"i", 0}, {"j", 1}}), 9.0);
}

TEST(Recurrence, MatchesTheLoopAlongAnyAxisWithABroadcastDecay) {
  // x over (t=5, j=3): time is the OUTER axis, so each lane steps with stride 3; the decay has no
  // time axis and is shared by every step.
  Tensor a = tensor({0.5, -0.8, 0.9}, "j");
  Tensor b = randn(Axes{{"t", 5}, {"j", 3}}, 4);
  Tensor x = linear_recurrence(a, b, "t");
  EXPECT_EQ(x.axes().describe(), "(j=3, t=5)");
  std::vector<double> av = a.to_vector(), bv = b.to_vector();
  for (int j = 0; j < 3; ++j) {
    double state = 0;
    for (int t = 0; t < 5; ++t) {
      state = av[size_t(j)] * state + bv[size_t(t * 3 + j)];
      EXPECT_NEAR(x.at({{"t", t}, {"j", j}}), state, 1e-15);
    }
  }
  // The same with b laid out time-inner: the kernel follows the strides, no copy.
  Tensor bt = transpose(b, {"j", "t"});
  EXPECT_LT(mismatch(linear_recurrence(a, bt, "t"), x, 0, 1e-15), 1.0);
}

TEST(Memory, SmallOpsAreServedFromThePool) {
  Tensor x = tensor({1, 2, 3, 4}, "i");
  for (int k = 0; k < 10; ++k) (void)exp(x * x + 1.0);  // warm the pool
  AllocatorStats before = allocator_stats();
  for (int k = 0; k < 1000; ++k) (void)exp(x * x + 1.0);
  AllocatorStats after = allocator_stats();
  EXPECT_GE(after.allocations - before.allocations, 3000);
  EXPECT_EQ(after.system_allocations, before.system_allocations);
}

}  // namespace
}  // namespace tenax

namespace tenax {
namespace {

// Loops that move an axis run in tiles (backends/cpu/loop.h): every element lands where the plain
// loop puts it — copies of 2-D and 3-D tensors in every order, sizes that leave ragged tiles, and a
// binary op with one transposed operand — against the values read back through the names.
TEST(TiledLoops, TransposingCopiesAndOpsEqualTheElementByElementLoop) {
  const Tensor m = randn(Axes{{"i", 301}, {"j", 257}}, 5);
  const Tensor mt = contiguous(transpose(m, {"j", "i"}));
  EXPECT_EQ(mt.to_vector(), m.to_vector(AxisList{"j", "i"}));
  const Tensor c = randn(Axes{{"a", 7}, {"b", 70}, {"c", 45}}, 6);
  for (const AxisList& order : {AxisList{"c", "b", "a"}, AxisList{"b", "c", "a"}, AxisList{"c", "a", "b"},
                                AxisList{"a", "c", "b"}}) {
    EXPECT_EQ(contiguous(transpose(c, order)).to_vector(), c.to_vector(order)) << order.describe();
  }
  const Tensor other = randn(Axes{{"j", 257}, {"i", 301}}, 7);
  const std::vector<double> sum = (other + m).to_vector(), a = other.to_vector(),
                            b = m.to_vector(AxisList{"j", "i"});
  ASSERT_EQ(sum.size(), a.size());
  for (size_t k = 0; k < a.size(); ++k) ASSERT_EQ(sum[k], a[k] + b[k]) << k;
  // float32 too.
  const Tensor m32 = astype(m, DType::f32);
  EXPECT_EQ(contiguous(transpose(m32, {"j", "i"})).to_vector(), m32.to_vector(AxisList{"j", "i"}));
}

// Long contiguous operands merge into one row, which runs in pieces across threads (the cheap ops
// from 2^16 elements, the transcendental ones from 2^13): every element has the bits of the same op
// run serially, chunk by chunk below the thresholds, at one thread and at two, float64 and float32.
TEST(ParallelLoops, LongRowsSplitAcrossThreadsKeepTheSerialBits) {
  constexpr int64_t n = 200003, chunk = 4001;  // odd: ragged pieces and vector tails
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor x = astype(randn(Axes{{"i", n}}, 31) * 3.0, dt), y = astype(randn(Axes{{"i", n}}, 32), dt);
    const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops{
        {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
        {"exp", [](const Tensor& a, const Tensor&) { return exp(a); }},
        {"sigmoid", [](const Tensor& a, const Tensor&) { return sigmoid(a); }},
        {"tanh", [](const Tensor& a, const Tensor&) { return tanh(a); }},
        {"copy", [](const Tensor& a, const Tensor&) { return contiguous(slice(a, "i", 1)); }}};
    for (const auto& [name, op] : ops) {
      std::vector<Tensor> pieces;
      const int64_t len = std::string(name) == "copy" ? n - 1 : n;
      for (int64_t i = 0; i < len; i += chunk) {
        const int64_t end = std::min(len, i + chunk);
        pieces.push_back(std::string(name) == "copy" ? contiguous(slice(x, "i", i + 1, end + 1))
                                                     : op(slice(x, "i", i, end), slice(y, "i", i, end)));
      }
      const std::vector<double> want = concat(pieces, "i").to_vector();
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        EXPECT_EQ(op(x, y).to_vector(), want) << name << " " << dtype_name(dt) << " at " << threads << " threads";
      }
      set_num_threads(0);
    }
  }
}

// Transposing copies of floats run as blocked tiles (backends/cpu/transpose_copy.cpp), streamed
// past the caches from 16 MiB: each element checked against the source's own row-major values
// (a plain copy), for ragged tiles, a batch of matrices, float32, and a streamed size.
TEST(TiledLoops, BlockedTransposingCopiesPutEveryElementInPlace) {
  auto check = [](const Tensor& x, int64_t batch, int64_t n0, int64_t n1) {  // x: (batch, n0, n1) row-major
    const std::vector<double> src = x.to_vector();
    const AxisList names = x.axes().names();
    const AxisList order = batch == 1 && x.rank() == 2 ? AxisList{names[1], names[0]}
                                                       : AxisList{names[0], names[2], names[1]};
    const std::vector<double> got = contiguous(transpose(x, order)).to_vector();
    ASSERT_EQ(got.size(), src.size());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < n1; ++i)
        for (int64_t j = 0; j < n0; ++j)
          ASSERT_EQ(got[size_t((b * n1 + i) * n0 + j)], src[size_t((b * n0 + j) * n1 + i)]) << b << " " << i << " " << j;
  };
  check(randn(Axes{{"i", 301}, {"j", 257}}, 8), 1, 301, 257);
  check(randn(Axes{{"b", 3}, {"i", 70}, {"j", 90}}, 9), 3, 70, 90);
  check(astype(randn(Axes{{"i", 129}, {"j", 515}}, 10), DType::f32), 1, 129, 515);
  check(randn(Axes{{"i", 1500}, {"j", 1450}}, 11), 1, 1500, 1450);  // 17 MB: streamed
  check(astype(randn(Axes{{"i", 2100}, {"j", 2050}}, 12), DType::f32), 1, 2100, 2050);
}

// Copies of long rows into strided places (a concat along the inner axis; rows_copy in
// backends/cpu/transpose_copy.cpp) copy each row whole, streamed from 16 MiB: every element of the
// concatenation checked against its input's, for rows whose offsets are not 16-byte aligned (the
// row copied without streaming), a batch axis outside the rows, float32 and a streamed size.
TEST(TiledLoops, ConcatAlongTheInnerAxisPutsEveryRowInPlace) {
  auto check = [](const std::vector<Tensor>& xs) {  // each (.., i, j) row-major, joined along j
    const Tensor got = concat(xs, "j");
    const std::vector<double> out = got.to_vector();
    const int64_t width = got.size("j"), rows = got.numel() / width;
    int64_t off = 0;
    for (const Tensor& x : xs) {
      const std::vector<double> in = x.to_vector();
      const int64_t n = x.size("j");
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(out[size_t(r * width + off + j)], in[size_t(r * n + j)]) << "row " << r << " column " << off + j;
      off += n;
    }
  };
  check({randn(Axes{{"i", 300}, {"j", 64}}, 1), randn(Axes{{"i", 300}, {"j", 100}}, 2)});
  check({randn(Axes{{"i", 601}, {"j", 33}}, 3), randn(Axes{{"i", 601}, {"j", 41}}, 4), randn(Axes{{"i", 601}, {"j", 35}}, 5)});
  check({randn(Axes{{"b", 3}, {"i", 80}, {"j", 90}}, 6), randn(Axes{{"b", 3}, {"i", 80}, {"j", 77}}, 7)});
  check({astype(randn(Axes{{"i", 129}, {"j", 515}}, 8), DType::f32), astype(randn(Axes{{"i", 129}, {"j", 131}}, 9), DType::f32)});
  check({randn(Axes{{"i", 1500}, {"j", 1450}}, 10), randn(Axes{{"i", 1500}, {"j", 1401}}, 11)});  // 17 MB each: streamed
}

}  // namespace
}  // namespace tenax
