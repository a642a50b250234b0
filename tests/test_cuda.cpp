// GPU checks (ctest label "gpu"). Without a CUDA device they skip with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <tenax/tenax.h>

#include "expect_message.h"
#include "op_check.h"
#include "tenax/backends/kernels.h"
#include "tenax/core/ops/capture.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax {
namespace {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (detail::cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device visible (no GPU, no driver, or a build without the CUDA backend)";
  }
};

TEST_F(Cuda, TensorsMoveToTheDeviceAndBackUnchanged) {
  const Device gpu = Device::cuda(0);
  const Tensor x = randn(Axes{{"a", 37}, {"b", 5}}, 3);
  const int64_t before = allocator_stats(gpu).bytes_in_use;
  const Tensor y = to(x, gpu);
  EXPECT_EQ(y.device(), gpu);
  EXPECT_EQ(y.axes(), x.axes());
  EXPECT_GE(allocator_stats(gpu).bytes_in_use - before, 37 * 5 * 8);
  EXPECT_EQ(to(y, Device::cpu()).to_vector(), x.to_vector());
  // A strided host view moves as its logical values.
  const Tensor xt = transpose(x, {"b", "a"});
  EXPECT_EQ(to(to(xt, gpu), Device::cpu()).to_vector(), xt.to_vector());
  // float32 too.
  const Tensor x32 = astype(x, DType::f32);
  EXPECT_EQ(to(to(x32, gpu), Device::cpu()).to_vector(), x32.to_vector());
}

// Creation on the device gives the host's values (random draws too: the same seed, the same values).
TEST_F(Cuda, CreationFunctionsMakeTheHostsValuesOnTheDevice) {
  const Device gpu = Device::cuda(0);
  const Axes ax{{"i", 6}, {"j", 3}};
  auto host = [](const Tensor& t) { return to(t, Device::cpu()).to_vector(); };
  EXPECT_EQ(host(randn(ax, 5, DType::f64, gpu)), randn(ax, 5).to_vector());
  EXPECT_EQ(host(uniform(ax, 5, -1, 1, DType::f32, gpu)), uniform(ax, 5, -1, 1, DType::f32).to_vector());
  EXPECT_EQ(host(arange("i", 6, DType::f64, gpu)), arange("i", 6).to_vector());
  EXPECT_EQ(host(tensor({1.0, 2.0}, "i", gpu)), (std::vector<double>{1, 2}));
  EXPECT_EQ(scalar(3.0, DType::f64, gpu).device(), gpu);
}

TEST_F(Cuda, MixedDevicesFailLoudlyAndResultsStayOnTheDevice) {
  const Tensor h = randn(Axes{{"i", 4}}, 1);
  const Tensor g = to(h, Device::cuda(0));
  EXPECT_MESSAGE(testing::error_message<DeviceError>([&] { (void)(h + g); }),
                 "[add] input 0 is on cpu but input 1 is on cuda:0");
  // A chain with op-made constants (x * 0.5, sum's seed) stays on the device; reading a value
  // needs an explicit move.
  const Tensor y = sum(exp(g) * 0.5, {"i"});
  EXPECT_EQ(y.device(), Device::cuda(0));
  EXPECT_MESSAGE(testing::error_message<DeviceError>([&] { (void)y.item(); }),
                 "move it with to(Device::cpu()) first");
  EXPECT_NEAR(to(y, Device::cpu()).item(), sum(exp(h) * 0.5, {"i"}).item(), 1e-12);
  // A strided device view moves back as its logical values (made contiguous on the device).
  const Tensor m = to(randn(Axes{{"a", 3}, {"b", 5}}, 2), Device::cuda(0));
  EXPECT_EQ(to(transpose(m, {"b", "a"}), Device::cpu()).to_vector(),
            transpose(to(m, Device::cpu()), {"b", "a"}).to_vector());
}

// to() is differentiable: a loss computed on the device from host parameters (and a strided view)
// has the host gradient; the cotangent moves back, the adjoint stays on the input's device.
TEST_F(Cuda, GradientsFlowBackThroughTransfers) {
  const Device gpu = Device::cuda(0);
  const Tensor x = randn(Axes{{"a", 6}, {"b", 3}}, 4), w = randn(Axes{{"b", 3}}, 5);
  auto loss = [&](const std::vector<Tensor>& a, Device d) {
    const Tensor xd = to(transpose(a[0], {"b", "a"}), d), wd = to(a[1], d);
    return to(sum(square(xd * wd) + exp(wd)), Device::cpu());
  };
  auto [v_host, g_host] =
      value_and_grad([&](const std::vector<Tensor>& a) { return loss(a, Device::cpu()); }, {x, w});
  auto [v_dev, g_dev] = value_and_grad([&](const std::vector<Tensor>& a) { return loss(a, gpu); }, {x, w});
  EXPECT_NEAR(v_dev.item(), v_host.item(), 1e-12 * std::abs(v_host.item()));
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(g_dev[k].device(), Device::cpu());
    EXPECT_LT(testing::mismatch(g_dev[k], g_host[k], 1e-12, 1e-12), 1.0) << "argument " << k;
  }
  // Inside a scan body a transfer is an error that says where it belongs.
  ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& xs) {
    const Tensor next = c[0] + to(xs[0], Device::cpu());
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{});
  };
  Tape tape;
  const Tensor xs = tape.watch(to(randn(Axes{{"t", 4}}, 6), gpu));
  EXPECT_MESSAGE(testing::error_message<Error>([&] { (void)scan(body, {scalar(0.0)}, {xs}, "t"); }),
                 "[to] inside a scan body (traced once, then replayed) is not supported yet");
}

// Large contractions go to cuBLAS strided-batched gemm when each group is one axis in a layout it
// reads in place (either output order, transposed operands, a batch axis on both or on one
// operand only, accumulating VJPs), and to the plain kernels otherwise: every case equals the host.
TEST_F(Cuda, LargeContractionsMatchTheHostInEveryLayout) {
  const Device gpu = Device::cuda(0);
  const Tensor x = randn(Axes{{"b", 3}, {"m", 48}, {"k", 64}}, 51),
               y = randn(Axes{{"b", 3}, {"k", 64}, {"n", 40}}, 52);
  const Tensor x1 = randn(Axes{{"m", 48}, {"k", 64}}, 53);  // no batch axis: broadcast over b
  const std::vector<std::pair<Tensor, Tensor>> cases = {
      {x, y},
      {transpose(x, {"k", "m", "b"}), y},
      {x, transpose(y, {"n", "b", "k"})},
      {transpose(x, {"m", "b", "k"}), transpose(y, {"b", "n", "k"})},
      {x1, y},
      {rename(x1, "m", "p"), rename(x1, "m", "q")},  // a Gram matrix: the same operand twice
  };
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-11 : 2e-4;
    for (size_t c = 0; c < cases.size(); ++c) {
      const Tensor a = astype(cases[c].first, dt), b = astype(cases[c].second, dt);
      auto f = [](const std::vector<Tensor>& v) {
        const Tensor d = dot(v[0], v[1], {"k"});
        return sum(d * d * 0.01);
      };
      auto [vh, gh] = value_and_grad(f, {a, b});
      auto [vg, gg] = value_and_grad(f, {to(a, gpu), to(b, gpu)});
      EXPECT_NEAR(to(vg, Device::cpu()).item(), vh.item(), tol * std::abs(vh.item())) << "case " << c;
      EXPECT_LT(testing::mismatch(to(dot(to(a, gpu), to(b, gpu), {"k"}), Device::cpu()), dot(a, b, {"k"}),
                                  tol, tol),
                1.0)
          << "case " << c << " " << dtype_name(dt);
      for (size_t k = 0; k < 2; ++k)
        EXPECT_LT(testing::mismatch(to(gg[k], Device::cpu()), gh[k], tol, tol), 1.0)
            << "case " << c << " argument " << k;
    }
  }
}

// Every registered op on random inputs (the generic tests' samplers, scrambled layouts): on the
// device it equals the host, forward and VJP. An op without a CUDA kernel must raise "no kernel for
// device cuda:0" (never a wrong answer, never a silent trip to the host); every op has one today,
// so the list printed at the end should read "none".
TEST_F(Cuda, EveryOpMatchesTheHostOrSaysItHasNoKernel) {
  const Device gpu = Device::cuda(0);
  std::string missing;
  for (const OpDef* op : registered_ops()) {
    bool supported = true;
    for (int c = 0; c < 3 && supported; ++c) {
      std::mt19937_64 rng(7000 * c + 13);
      OpSample s = op->sample(rng, DType::f64);
      std::vector<Tensor> host, dev;
      for (const Tensor& t : s.inputs) {
        host.push_back(testing::scramble(t, rng));
        dev.push_back(to(host.back(), gpu));
      }
      const Tensor want = detail::apply(*op, host, s.attrs);
      Tensor got;
      try {
        got = detail::apply(*op, dev, s.attrs);
      } catch (const DeviceError& e) {
        EXPECT_MESSAGE(e.what(), "no kernel for device cuda:0");
        supported = false;
        missing += std::string(missing.empty() ? "" : ", ") + op->name;
        break;
      }
      ASSERT_EQ(got.device(), gpu) << op->name;
      const Tensor back = to(got, Device::cpu());
      if (want.dtype() == DType::b8) {
        EXPECT_EQ(back.to_vector(want.axes().names()), want.to_vector()) << op->name;
        continue;
      }
      EXPECT_LE(testing::mismatch(back, want, 1e-12, 1e-12), 1.0) << op->name << " forward, case " << c;
      if (!op->vjp) continue;
      // VJP: the gradient of Σ w · op(x) (Σ Re(conj(w) op(x)) for a complex result, as
      // docs/complex.md) w.r.t. every float input, on both devices.
      const Tensor w = randn(want.axes(), rng(), is_complex(want.dtype()) ? DType::c128 : DType::f64);
      auto grads = [&](const std::vector<Tensor>& in, const Tensor& weight) {
        Tape tape;
        std::vector<Tensor> watched, wrt;
        for (size_t i = 0; i < in.size(); ++i) {
          const bool diff = is_floating(in[i].dtype()) && !(i < 31 && (op->nondiff & (1u << i)));
          watched.push_back(diff ? tape.watch(in[i]) : in[i]);
          if (diff) wrt.push_back(watched.back());
        }
        const Tensor y = detail::apply(*op, watched, s.attrs);
        return tape.gradient(is_complex(y.dtype()) ? sum(real(mul(conj(weight), y))) : sum(mul(weight, y)), wrt);
      };
      std::vector<Tensor> gh = grads(host, w), gd;
      try {
        gd = grads(dev, to(w, gpu));
      } catch (const DeviceError& e) {
        ADD_FAILURE() << op->name << ": the forward runs on the device but its VJP does not: " << e.what();
        continue;
      }
      for (size_t k = 0; k < gh.size(); ++k)
        EXPECT_LE(testing::mismatch(to(gd[k], Device::cpu()), gh[k], 1e-11, 1e-12), 1.0)
            << op->name << " VJP input " << k << ", case " << c;
    }
  }
  std::cout << "ops without CUDA kernels: " << (missing.empty() ? "none" : missing) << "\n";
  EXPECT_EQ(missing, "");
}

// Every op that takes complex operands, in complex128 on the device against the host: the forward
// values and the gradient of the real loss Σ Re(conj(w) y) (docs/complex.md). The recurrence, the
// linear algebra and the tridiagonal solve of complex operands are host-only and say so.
TEST_F(Cuda, EveryComplexOpMatchesTheHostOrSaysItHasNoKernel) {
  const Device gpu = Device::cuda(0);
  std::string missing;
  for (const OpDef* op : registered_ops()) {
    if (!op->complex) continue;
    std::mt19937_64 rng(7100);
    OpSample s = op->sample(rng, DType::c128);
    std::vector<Tensor> dev;
    for (const Tensor& t : s.inputs) dev.push_back(to(t, gpu));
    const Tensor want = detail::apply(*op, s.inputs, s.attrs);
    Tensor got;
    try {
      got = detail::apply(*op, dev, s.attrs);
    } catch (const DeviceError& e) {
      EXPECT_MESSAGE(e.what(), "no kernel for device cuda:0");
      missing += std::string(missing.empty() ? "" : ", ") + op->name;
      continue;
    }
    EXPECT_LE(testing::mismatch(to(got, Device::cpu()), want, 1e-12, 1e-12), 1.0) << op->name;
    const Tensor w = randn(want.axes(), rng(), is_complex(want.dtype()) ? DType::c128 : DType::f64);
    auto grads = [&](const std::vector<Tensor>& in, const Tensor& weight) {
      Tape tape;
      std::vector<Tensor> watched, wrt;
      for (size_t i = 0; i < in.size(); ++i) {
        const bool diff = is_inexact(in[i].dtype()) && !(i < 31 && (op->nondiff & (1u << i)));
        watched.push_back(diff ? tape.watch(in[i]) : in[i]);
        if (diff) wrt.push_back(watched.back());
      }
      const Tensor y = detail::apply(*op, watched, s.attrs);
      return tape.gradient(is_complex(y.dtype()) ? sum(real(mul(conj(weight), y))) : sum(mul(weight, y)), wrt);
    };
    const std::vector<Tensor> gh = grads(s.inputs, w), gd = grads(dev, to(w, gpu));
    for (size_t k = 0; k < gh.size(); ++k)
      EXPECT_LE(testing::mismatch(to(gd[k], Device::cpu()), gh[k], 1e-11, 1e-12), 1.0) << op->name << " VJP input " << k;
  }
  EXPECT_EQ(missing, "cholesky, triangular_solve, solve, linear_recurrence, tridiagonal_solve");
  // Contractions large enough for cuBLAS (zgemm, cgemm), in both output layouts, and a long one into
  // few outputs (the per-output kernel: the real block reduction takes no complex type).
  for (DType dt : {DType::c128, DType::c64}) {
    const double tol = dt == DType::c128 ? 1e-12 : 2e-5;
    const Tensor x = randn(Axes{{"m", 70}, {"k", 60}}, 1, dt), y = randn(Axes{{"k", 60}, {"n", 50}}, 2, dt);
    for (const Tensor& want : {dot(x, y, {"k"}), dot(y, x, {"k"})}) {
      const bool xy = want.axes().names()[0] == Name("m");
      const Tensor got = xy ? dot(to(x, gpu), to(y, gpu), {"k"}) : dot(to(y, gpu), to(x, gpu), {"k"});
      EXPECT_LE(testing::mismatch(to(got, Device::cpu()), want, tol, tol), 1.0) << dtype_name(dt);
    }
    const Tensor u = randn(Axes{{"k", 4096}, {"o", 3}}, 3, dt), v = randn(Axes{{"k", 4096}}, 4, dt);
    EXPECT_LE(testing::mismatch(to(dot(to(u, gpu), to(v, gpu), {"k"}), Device::cpu()), dot(u, v, {"k"}), tol, tol), 1.0)
        << dtype_name(dt) << " long k";
  }
}

TEST_F(Cuda, TheDeviceMemoryBudgetIsEnforced) {
  const Device gpu = Device::cuda(0);
  set_memory_budget(gpu, allocator_stats(gpu).bytes_in_use + 1024);
  EXPECT_MESSAGE(testing::error_message<MemoryError>([&] { (void)empty(Axes{{"i", 1 << 20}}, DType::f64, gpu); }),
                 "on cuda:0 would exceed the memory budget");
  set_memory_budget(gpu, 0);
  EXPECT_EQ(empty(Axes{{"i", 1 << 20}}, DType::f64, gpu).device(), gpu);
}

// A freed buffer stays in the device's pool across stream synchronisations (CUDA's default would
// hand it back to the driver at the next one, and the next call of the same size map it again).
TEST_F(Cuda, FreedDeviceMemoryStaysInThePoolForTheNextCall) {
  const Device gpu = Device::cuda(0);
  const int64_t big = int64_t(256) << 20;
  {
    const Tensor t = full(Axes{{"i", big / 8}}, 1.0, DType::f64, gpu);
    EXPECT_EQ(to(sum(t), Device::cpu()).item(), double(big / 8));  // the copy back synchronises
  }
  (void)to(full(Axes{{"i", 4}}, 2.0, DType::f64, gpu), Device::cpu());  // a synchronisation after the free
  EXPECT_GE(detail::cuda_pool_reserved_bytes(0) - allocator_stats(gpu).bytes_in_use, big);
}

// A batch of diagonally dominant systems along "i" in the given layout, as host tensors.
std::vector<Tensor> systems(const Axes& axes, uint64_t seed) {
  return {uniform(axes, seed, -1, 1), uniform(axes, seed + 1, 2.5, 3.5), uniform(axes, seed + 2, -1, 1),
          uniform(axes, seed + 3, -1, 1)};
}

double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    const double d = std::abs(x[k] - y[k]);
    if (std::isnan(d)) return INFINITY;  // std::max would pass a NaN over
    m = std::max(m, d);
  }
  return m;
}

TEST_F(Cuda, TridiagonalSolveMatchesTheHostInBothLayoutsAlgorithmsAndDtypes) {
  const Device gpu = Device::cuda(0);
  for (const Axes& axes : {Axes{{"sys", 1000}, {"i", 37}}, Axes{{"i", 37}, {"sys", 1000}}}) {
    for (Tridiagonal alg : {Tridiagonal::thomas, Tridiagonal::pivoting}) {
      for (DType dt : {DType::f64, DType::f32}) {
        std::vector<Tensor> h = systems(axes, 5);
        for (Tensor& t : h) t = astype(t, dt);
        const Tensor want = tridiagonal_solve(h[0], h[1], h[2], h[3], "i", alg);
        const Tensor got = tridiagonal_solve(to(h[0], gpu), to(h[1], gpu), to(h[2], gpu), to(h[3], gpu), "i", alg);
        EXPECT_EQ(got.device(), gpu);
        EXPECT_EQ(got.axes(), want.axes());
        EXPECT_LT(max_diff(to(got, Device::cpu()), want), dt == DType::f64 ? 1e-12 : 1e-4)
            << axes.describe() << " algorithm " << int(alg);
      }
    }
  }
  // Two batch axes, so the systems are not evenly spaced in memory (their offsets go to the device
  // as a table), and the diagonal in another axis order (another spacing, rows strided).
  for (Tridiagonal alg : {Tridiagonal::thomas, Tridiagonal::pivoting}) {
    std::vector<Tensor> h = systems(Axes{{"a", 7}, {"i", 13}, {"b", 11}}, 31);
    h[1] = contiguous(transpose(h[1], {"b", "i", "a"}));
    const Tensor want = tridiagonal_solve(h[0], h[1], h[2], h[3], "i", alg);
    const Tensor got =
        tridiagonal_solve(to(h[0], gpu), to(h[1], gpu), to(h[2], gpu), to(h[3], gpu), "i", alg);
    EXPECT_EQ(got.axes(), want.axes());
    EXPECT_LT(max_diff(to(got, Device::cpu()), want), 1e-12) << "algorithm " << int(alg);
  }
  // Broadcast operands (one matrix, many right-hand sides) and a zero pivot naming its system.
  const Tensor rhs = uniform(Axes{{"col", 64}, {"i", 10}}, 9, -1, 1);
  const Tensor diag = uniform(Axes{{"i", 10}}, 10, 2.5, 3.5);
  const Tensor want = tridiagonal_solve(scalar(-1), diag, scalar(-1), rhs, "i");
  const Tensor got = tridiagonal_solve(to(scalar(-1), gpu), to(diag, gpu), to(scalar(-1), gpu), to(rhs, gpu), "i");
  EXPECT_LT(max_diff(to(got, Device::cpu()), want), 1e-12);
  std::vector<double> d(20, 3.0);
  d[10] = 0.0;  // system 1, row 0
  const Tensor dz = tensor(d, Axes{{"b", 2}, {"i", 10}});
  EXPECT_MESSAGE(testing::error_message<NumericError>([&] {
                   (void)tridiagonal_solve(to(zeros(Axes{{"i", 10}}), gpu), to(dz, gpu), to(zeros(Axes{{"i", 10}}), gpu),
                                           to(ones(Axes{{"b", 2}, {"i", 10}}), gpu), "i");
                 }),
                 "at batch index {b=1}");
}

// The adjoint's transposed solve, through the kernel tables of both backends on the same offsets.
TEST_F(Cuda, TheTransposedSolveMatchesTheHostKernel) {
  const Device gpu = Device::cuda(0);
  for (const Axes& axes : {Axes{{"sys", 300}, {"i", 17}}, Axes{{"i", 17}, {"sys", 300}}}) {
    const std::vector<Tensor> h = systems(axes, 21);
    std::vector<Tensor> g;
    for (const Tensor& t : h) g.push_back(to(t, gpu));
    Tensor xh = empty(axes), xg = empty(axes, DType::f64, gpu);
    Axes lanes = axes;
    lanes.erase(lanes.index_of("i"));
    std::vector<int64_t> off[5];
    detail::TridiagonalArgs args;
    args.n = 17;
    args.systems = 300;
    args.transpose = true;
    for (int o = 0; o < 5; ++o) {
      detail::batch_offsets(o < 4 ? h[size_t(o)] : xh, lanes, off[o]);
      args.off[o].table = off[o].data();
      args.step[o] = (o < 4 ? h[size_t(o)] : xh).stride("i");
    }
    detail::TridiagonalArgs host = args, dev = args;
    for (int o = 0; o < 4; ++o) {
      host.in[o] = h[size_t(o)].data_ptr();
      dev.in[o] = g[size_t(o)].data_ptr();
    }
    host.out = xh.data_ptr();
    dev.out = xg.data_ptr();
    EXPECT_EQ(detail::kernels(Device::cpu()).tridiagonal[0](host), -1);
    EXPECT_EQ(detail::kernels(gpu).tridiagonal[0](dev), -1);
    EXPECT_LT(max_diff(to(xg, Device::cpu()), xh), 1e-12) << axes.describe();
  }
}

// A body with a contraction, a broadcast parameter, a comparison and a reduction, scanned on the
// device: value and gradient w.r.t. every input equal the host's.
struct GatedRnn {
  Tensor w, b;
  std::pair<std::vector<Tensor>, std::vector<Tensor>> operator()(const std::vector<Tensor>& c,
                                                                 const std::vector<Tensor>& x) const {
    Tensor h = tanh(dot(w, rename(c[0], "h", "k"), {"k"}) + x[0] + b);
    Tensor gated = where(greater(h, to(scalar(0.0), h.device())), h, h * 0.5);
    return {{gated}, {sum(gated * gated)}};
  }
};

Tensor rnn_loss(const std::vector<Tensor>& a, const ScanOptions& o) {
  ScanResult r = scan(GatedRnn{a[0], a[1]}, {a[2]}, {a[3]}, "t", o);
  return sum(r.ys[0]) + sum(r.carry[0] * r.carry[0]);
}

std::vector<Tensor> on(const std::vector<Tensor>& ts, Device d) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(to(t, d));
  return out;
}

TEST_F(Cuda, ScanValueAndGradientMatchTheHostUnderCheckpointing) {
  const Device gpu = Device::cuda(0);
  // xs scanned along its inner axis (a strided walk) as well as its outer one.
  const std::vector<Tensor> host{randn(Axes{{"h", 8}, {"k", 8}}, 5) * 0.4, randn(Axes{{"h", 8}}, 6),
                                 randn(Axes{{"h", 8}}, 7), randn(Axes{{"h", 8}, {"t", 40}}, 8)};
  std::vector<ScanOptions> schedules(2);
  schedules[1].checkpoint_every = 7;
  for (const ScanOptions& o : schedules) {
    auto f = [&](const std::vector<Tensor>& a) { return rnn_loss(a, o); };
    auto [vh, gh] = value_and_grad(f, host);
    auto [vg, gg] = value_and_grad(f, on(host, gpu));
    EXPECT_EQ(vg.device(), gpu);
    EXPECT_NEAR(to(vg, Device::cpu()).item(), vh.item(), 1e-10 * std::abs(vh.item()));
    for (size_t k = 0; k < gh.size(); ++k) {
      EXPECT_EQ(gg[k].device(), gpu);
      EXPECT_LT(max_diff(to(gg[k], Device::cpu()), gh[k]), 1e-10) << "argument " << k;
    }
  }
}

// A step of many small calls: every unary and binary op of the table, scalars (fills, scales),
// broadcasts, contractions, an outer product reduced over a short axis (atomics in a chain).
struct EveryOpCell {
  Tensor w, v;
  std::pair<std::vector<Tensor>, std::vector<Tensor>> operator()(const std::vector<Tensor>& c,
                                                                 const std::vector<Tensor>& x) const {
    const Tensor z = dot(w, rename(c[0], "h", "k"), {"k"}) + x[0];
    const Tensor a = sigmoid(z) * tanh(z) + softplus(z) * 0.1 - abs(z) * 0.05;
    const Tensor p = exp(-square(a)) + log1p(square(a)) + sqrt(square(a) + 1.0) + log(square(z) + 2.0);
    const Tensor q = div(p, square(v) + 1.5) + pow(square(v) + 1.2, a) + maximum(a, v) + minimum(a, -v);
    const Tensor outer = q * rename(q, "h", "k");
    const Tensor h = q * 0.5 + sum(outer, {"k"}) * (0.1 / 6.0) - dot(w, rename(q, "h", "k"), {"k"}) * 0.05;
    return {{h}, {sum(h * h)}};
  }
};

Tensor every_op_loss(const std::vector<Tensor>& a, const ScanOptions& o) {
  ScanResult r = scan(EveryOpCell{a[0], a[1]}, {a[2]}, {a[3]}, "t", o);
  return sum(r.ys[0] * r.ys[0]) + sum(r.carry[0] * r.carry[0]);
}

// Fused chains (the default on a device) give the host's value and gradients, those of the plain
// kernels (TENAX_CUDA_FUSION=0), in fewer kernels; in float64 and float32, forwards and in
// reverse with checkpoints (the slice copies of x_t, y_t's cotangent and x_t's adjoint move with
// the step inside the chains).
TEST_F(Cuda, FusedChainsMatchThePlainKernelsAndTheHostInFewerKernels) {
  const Device gpu = Device::cuda(0);
  const std::vector<Tensor> host{randn(Axes{{"h", 6}, {"k", 6}}, 11) * 0.3, randn(Axes{{"h", 6}}, 12),
                                 randn(Axes{{"h", 6}}, 13), randn(Axes{{"t", 25}, {"h", 6}}, 14)};
  // Forwards, every carry kept; in reverse with checkpoints every 4 steps; in reverse, every carry
  // kept; under a memory budget of 8 carries (recursive bisection).
  std::vector<ScanOptions> schedules(4);
  schedules[1].reverse = schedules[2].reverse = true;
  schedules[1].checkpoint_every = 4;
  schedules[3].memory_budget = 8 * 6 * 8;
  for (const auto& [dtype, o] : {std::pair{DType::f64, schedules[0]}, std::pair{DType::f32, schedules[0]},
                                 std::pair{DType::f64, schedules[1]}, std::pair{DType::f64, schedules[2]},
                                 std::pair{DType::f64, schedules[3]}}) {
    auto every_op = [o = o](const std::vector<Tensor>& a) { return every_op_loss(a, o); };
    std::vector<Tensor> in;
    for (const Tensor& t : host) in.push_back(astype(t, dtype));
    const double tol = dtype == DType::f64 ? 1e-10 : 2e-4;
    auto [vh, gh] = value_and_grad(every_op, in);
    auto run = [&](bool fused) {
      detail::set_cuda_fusion(fused);
      const int64_t k0 = detail::cuda_kernels_run();
      auto vg = value_and_grad(every_op, on(in, gpu));
      const int64_t kernels = detail::cuda_kernels_run() - k0;
      detail::set_cuda_fusion(true);
      return std::make_pair(vg, kernels);
    };
    const auto [plain, plain_kernels] = run(false);
    const auto [fused, fused_kernels] = run(true);
    const double want = astype(vh, DType::f64).item();
    for (const auto* r : {&plain, &fused}) {
      EXPECT_NEAR(astype(to(r->first, Device::cpu()), DType::f64).item(), want, tol * std::abs(want));
      for (size_t k = 0; k < gh.size(); ++k) {
        const Tensor g = astype(to(r->second[k], Device::cpu()), DType::f64);
        const Tensor want_g = astype(gh[k], DType::f64);
        EXPECT_LT(max_diff(g, want_g), tol * (1 + max_diff(want_g, want_g * 0.0))) << "argument " << k;
      }
    }
    // Every step's run of small calls is one kernel: several times fewer than one per call.
    EXPECT_LT(fused_kernels * 3, plain_kernels) << "fused " << fused_kernels << ", plain " << plain_kernels;
    std::cout << dtype_name(dtype) << (o.reverse ? ", reverse" : "") << ", checkpoints every "
              << o.checkpoint_every << (o.memory_budget ? ", bisection" : "")
              << ": kernels per value + gradient, plain " << plain_kernels << ", fused " << fused_kernels
              << "\n";
  }
}

// With fused chains a scan step is one launch (one graph) each way: the checkpoint store, x_t,
// the step, y_t and the next carry forwards; the checkpoint load, the step again and its reverse
// step backwards. Counted as the difference between 40 and 20 steps (the traced first steps and
// the capture launch their calls one by one).
// A compiled function and forward mode through a scan on the device: the replayed programs (values,
// the reverse program, the tangent program) give the host's eager values, gradients and tangents.
TEST_F(Cuda, CompiledFunctionsAndForwardModeThroughScanMatchTheHost) {
  const Device gpu = Device::cuda(0);
  auto step = [](const std::vector<Tensor>& a) {
    const Tensor h = tanh(dot(a[0], rename(a[1], "h", "k"), {"k"}) + a[2]);
    const Tensor gated = where(greater(h, scalar(0.0, DType::f64, h.device())), h, h * 0.5);
    return std::vector<Tensor>{gated, sum(gated * gated)};
  };
  const CompiledFunction f = compile(step);
  for (uint64_t call = 0; call < 3; ++call) {
    const std::vector<Tensor> host{randn(Axes{{"h", 5}, {"k", 5}}, 10 + call), randn(Axes{{"h", 5}}, 20 + call),
                                   randn(Axes{{"h", 5}}, 30 + call)};
    std::vector<Tensor> dev;
    for (const Tensor& t : host) dev.push_back(to(t, gpu));
    const auto [v, g] = value_and_grad([&](const std::vector<Tensor>& p) { return f(p)[1]; }, dev);
    const auto [ve, ge] = value_and_grad([&](const std::vector<Tensor>& p) { return step(p)[1]; }, host);
    ASSERT_EQ(v.device(), gpu);
    EXPECT_NEAR(to(v, Device::cpu()).item(), ve.item(), 1e-12) << "call " << call;
    for (size_t k = 0; k < host.size(); ++k)
      EXPECT_LE(testing::mismatch(to(g[k], Device::cpu()), ge[k], 1e-11, 1e-12), 1.0) << "call " << call << " arg " << k;
    const auto [y, dy] = jvp([&](const std::vector<Tensor>& p) { return f(p)[1]; }, dev, dev);
    const auto [ye, dye] = jvp([&](const std::vector<Tensor>& p) { return step(p)[1]; }, host, host);
    EXPECT_NEAR(to(dy, Device::cpu()).item(), dye.item(), 1e-11) << "call " << call;
  }
  EXPECT_EQ(f.stats().traces, 2);  // one reverse-mode signature, one forward-mode signature
  // Forward mode through a scan: the device's tangent equals the host's.
  auto scanned = [](const std::vector<Tensor>& a) {
    ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      const Tensor next = tanh(a[0] * c[0] + x[0]);
      return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next * next});
    };
    return scan(body, {a[2]}, {a[1]}, "t").ys[0];
  };
  const std::vector<Tensor> host{tensor({0.9, -0.5}, "h"), randn(Axes{{"t", 6}, {"h", 2}}, 7), tensor({0.3, 0.2}, "h")};
  std::vector<Tensor> dev;
  for (const Tensor& t : host) dev.push_back(to(t, gpu));
  const auto [y, dy] = jvp(scanned, dev, dev);  // jacobian itself takes host tensors (README)
  const auto [ye, dye] = jvp(scanned, host, host);
  ASSERT_EQ(dy.device(), gpu);
  EXPECT_LE(testing::mismatch(to(y, Device::cpu()), ye, 1e-12, 1e-13), 1.0);
  EXPECT_LE(testing::mismatch(to(dy, Device::cpu()), dye, 1e-11, 1e-13), 1.0);
}

// Outputs selected at a few steps on the device: the tape leaves the stacked outputs' adjoint
// partial (TapeStats::partial_adjoints) and the device's reverse steps zero the rest first; forward
// mode's demand pass writes the tangent only at the selected steps. Both against the host, under
// two checkpoint schedules, the device pool's memory poisoned first.
TEST_F(Cuda, OutputsSelectedAtAFewStepsMatchTheHostBothWays) {
  const Device gpu = Device::cuda(0);
  const int64_t T = 48, H = 256;  // each output 96 KiB, above the tape's partial-adjoint threshold
  const std::vector<Tensor> host{uniform(Axes{{"h", H}}, 8, 0.5, 0.95), randn(Axes{{"h", H}}, 9),
                                 randn(Axes{{"t", T}, {"h", H}}, 10) * 0.5};
  for (const int64_t k : {int64_t{1}, int64_t{5}}) {
    SCOPED_TRACE("checkpoint every " + std::to_string(k));
    ScanOptions o;
    o.checkpoint_every = k;
    Function loss = [&](const std::vector<Tensor>& a) {
      ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        Tensor next = tanh(a[0] * c[0] + x[0]);
        return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next, square(next)});
      };
      ScanResult r = scan(body, {a[1]}, {a[2]}, "t", o);
      return sum(select(r.ys[0], "t", T - 1) * a[0]) + sum(select(r.ys[1], "t", 17)) + sum(select(r.ys[1], "t", 30));
    };
    {
      Tensor junk = full(Axes{{"t", T}, {"h", H}}, std::nan(""), DType::f64, gpu);
      Tensor junk2 = full(Axes{{"t", T}, {"h", H}}, std::nan(""), DType::f64, gpu);
      (void)junk, (void)junk2;
    }
    const std::vector<Tensor> dev = on(host, gpu);
    Tape tape;
    std::vector<Tensor> watched;
    for (const Tensor& t : dev) watched.push_back(tape.watch(t));
    const std::vector<Tensor> g = tape.gradient(loss(watched), watched);
    EXPECT_EQ(tape.stats().partial_adjoints, 2);
    const std::vector<Tensor> g_host = grad(loss, host);
    for (size_t i = 0; i < host.size(); ++i) {
      ASSERT_EQ(g[i].device(), gpu);
      EXPECT_LT(testing::mismatch(to(g[i], Device::cpu()), g_host[i], 1e-11, 1e-13), 1.0) << "argument " << i;
    }
    const auto [y, dy] = jvp(loss, dev, dev);
    const auto [y_host, dy_host] = jvp(loss, host, host);
    ASSERT_EQ(dy.device(), gpu);
    EXPECT_NEAR(to(y, Device::cpu()).item(), y_host.item(), 1e-11 * std::abs(y_host.item()));
    EXPECT_NEAR(to(dy, Device::cpu()).item(), dy_host.item(), 1e-11 * (1.0 + std::abs(dy_host.item())));
  }
}

TEST_F(Cuda, AScanStepIsOneLaunchEachWay) {
  const Device gpu = Device::cuda(0);
  auto launches = [&](int64_t steps, bool fused) {
    const std::vector<Tensor> in{randn(Axes{{"h", 6}, {"k", 6}}, 11) * 0.3, randn(Axes{{"h", 6}}, 12),
                                 randn(Axes{{"h", 6}}, 13), randn(Axes{{"t", steps}, {"h", 6}}, 14)};
    detail::set_cuda_fusion(fused);
    const int64_t l0 = detail::cuda_kernel_launches();
    auto every_op = [](const std::vector<Tensor>& a) { return every_op_loss(a, ScanOptions{}); };
    (void)value_and_grad(every_op, on(in, gpu));
    detail::set_cuda_fusion(true);
    return detail::cuda_kernel_launches() - l0;
  };
  const double fused = double(launches(40, true) - launches(20, true)) / 20.0;
  const double plain = double(launches(40, false) - launches(20, false)) / 20.0;
  std::cout << "launches per step (value + gradient): fused " << fused << ", plain " << plain << "\n";
  EXPECT_EQ(fused, 2.0);
  EXPECT_GT(plain, 4.0);
}

TEST_F(Cuda, LinearRecurrenceAndNmapMatchTheHostWithGradients) {
  const Device gpu = Device::cuda(0);
  const std::vector<Tensor> host{uniform(Axes{{"s", 64}}, 1, 0.5, 0.99),
                                 randn(Axes{{"t", 300}, {"b", 16}, {"s", 64}}, 2)};
  auto f = [](const std::vector<Tensor>& a) {
    const Tensor x = linear_recurrence(a[0], a[1], "t");
    // nmap over the batch: each slice's squared norm, weighted by a constant made inside.
    const Tensor per =
        nmap([](const std::vector<Tensor>& xb) { return sum(square(xb[0])) * 0.25; }, {"b"}, {x});
    return sum(per);
  };
  auto [vh, gh] = value_and_grad(f, host);
  auto [vg, gg] = value_and_grad(f, on(host, gpu));
  EXPECT_NEAR(to(vg, Device::cpu()).item(), vh.item(), 1e-10 * std::abs(vh.item()));
  for (size_t k = 0; k < gh.size(); ++k)
    EXPECT_LT(max_diff(to(gg[k], Device::cpu()), gh[k]), 1e-9 * (1 + max_diff(gh[k], gh[k] * 0.0)))
        << "argument " << k;
}

TEST_F(Cuda, TridiagonalGradientMatchesTheHost) {
  const Device gpu = Device::cuda(0);
  for (const Axes& axes : {Axes{{"sys", 200}, {"i", 19}}, Axes{{"i", 19}, {"sys", 200}}}) {
    const std::vector<Tensor> h = systems(axes, 31);
    const Tensor w = randn(axes, 32);
    auto f = [&](const std::vector<Tensor>& a) {
      return sum(tridiagonal_solve(a[0], a[1], a[2], a[3], "i") * to(w, a[0].device()));
    };
    auto [vh, gh] = value_and_grad(f, h);
    auto [vg, gg] = value_and_grad(f, on(h, gpu));
    EXPECT_NEAR(to(vg, Device::cpu()).item(), vh.item(), 1e-9 * std::abs(vh.item()));
    for (size_t k = 0; k < 4; ++k)
      EXPECT_LT(max_diff(to(gg[k], Device::cpu()), gh[k]), 1e-9) << axes.describe() << " operand " << k;
    // One input as both off-diagonals (the fused rule adds its two adjoints into one buffer), and
    // a diagonal shared by every system (the unfused rule: its adjoint is summed over them).
    auto twice = [&](const std::vector<Tensor>& a) {
      return sum(tridiagonal_solve(a[0], a[1], a[0], a[2], "i") * to(w, a[0].device()));
    };
    const std::vector<Tensor> h3{h[0], h[1], h[3]};
    auto [vh2, gh2] = value_and_grad(twice, h3);
    auto [vg2, gg2] = value_and_grad(twice, on(h3, gpu));
    EXPECT_NEAR(to(vg2, Device::cpu()).item(), vh2.item(), 1e-9 * std::abs(vh2.item()));
    for (size_t k = 0; k < 3; ++k)
      EXPECT_LT(max_diff(to(gg2[k], Device::cpu()), gh2[k]), 1e-9)
          << axes.describe() << " twice, operand " << k;
    const std::vector<Tensor> hs{h[0], uniform(Axes{{"i", 19}}, 33, 2.5, 3.5), h[2], h[3]};
    auto [vh3, gh3] = value_and_grad(f, hs);
    auto [vg3, gg3] = value_and_grad(f, on(hs, gpu));
    for (size_t k = 0; k < 4; ++k)
      EXPECT_LT(max_diff(to(gg3[k], Device::cpu()), gh3[k]), 1e-9)
          << axes.describe() << " shared, operand " << k;
  }
}

// A Cholesky that fails at step 12 of a scan: the host names the step; the GPU's replays (one
// graph per run of calls, no waiting per step) report it when the sweep ends.
TEST_F(Cuda, AFailedFactorisationInsideAScanIsReportedWhenTheSweepEnds) {
  const Device gpu = Device::cuda(0);
  std::vector<double> shift(20, 0.0);
  for (size_t t = 12; t < shift.size(); ++t) shift[t] = 5.0;
  const Tensor xs = tensor(shift, Axes{{"t", 20}});
  const Tensor eye = tensor(std::vector<double>{1.0, 0.0, 0.0, 1.0}, Axes{{"r", 2}, {"c", 2}});
  auto run = [&](Device d) {
    const Tensor e = to(eye, d);
    ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      const Tensor l = cholesky(c[0] - x[0] * e, "r", "c");
      return std::make_pair(std::vector<Tensor>{c[0] * 1.0}, std::vector<Tensor>{sum(l)});
    };
    return scan(body, {to(eye * 2.0, d)}, {to(xs, d)}, "t");
  };
  EXPECT_MESSAGE(testing::error_message<NumericError>([&] { (void)run(Device::cpu()); }),
                 "[cholesky] at scan step 12: the matrix at batch index 0 is not positive definite");
  EXPECT_MESSAGE(
      testing::error_message<NumericError>([&] { (void)run(gpu); }),
      "[cholesky] in a scan step on the GPU: the matrix at batch index 0 is not positive definite");
  // Before the failing step the results agree.
  std::vector<double> fine(20, 0.5);
  const Tensor ok_xs = tensor(fine, Axes{{"t", 20}});
  const Tensor e = to(eye, gpu);
  ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    const Tensor l = cholesky(c[0] - x[0] * e, "r", "c");
    return std::make_pair(std::vector<Tensor>{c[0] * 1.0}, std::vector<Tensor>{sum(l)});
  };
  const ScanResult r = scan(body, {to(eye * 2.0, gpu)}, {to(ok_xs, gpu)}, "t");
  for (double v : to(r.ys[0], Device::cpu()).to_vector()) EXPECT_NEAR(v, 2 * std::sqrt(1.5), 1e-12);
}

// Long reductions (a block per output and chunk, not an atomic per element): full, partial over
// an inner or an outer axis, and a broadcast parameter's adjoint; float32 too.
TEST_F(Cuda, LongReductionsMatchTheHost) {
  const Device gpu = Device::cuda(0);
  const Tensor x = randn(Axes{{"a", 3}, {"b", 70001}}, 41);
  const Tensor w = randn(Axes{{"s", 4}}, 42);
  const Tensor big = randn(Axes{{"n", 25000}, {"s", 4}}, 43);
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-9 : 2e-2;
    const Tensor xh = astype(x, dt), xg = to(xh, gpu);
    EXPECT_NEAR(to(sum(xg), Device::cpu()).item(), sum(xh).item(), tol);
    EXPECT_LT(max_diff(to(sum(xg, {"b"}), Device::cpu()), sum(xh, {"b"})), tol);
    EXPECT_LT(max_diff(to(sum(xg, {"a"}), Device::cpu()), sum(xh, {"a"})), tol);
  }
  // A long contraction into few outputs (a block per output), strided operands, accumulating.
  const Tensor p = randn(Axes{{"m", 3}, {"k", 9000}}, 44), q = randn(Axes{{"n", 2}, {"k", 9000}}, 45);
  EXPECT_LT(max_diff(to(dot(to(p, gpu), to(q, gpu), {"k"}), Device::cpu()), dot(p, q, {"k"})), 1e-9);
  auto fd = [](const std::vector<Tensor>& a) { return sum(square(dot(a[0], a[1], {"k"}))); };
  auto [dh, gdh] = value_and_grad(fd, {p, q});
  auto [dg, gdg] = value_and_grad(fd, {to(p, gpu), to(q, gpu)});
  EXPECT_NEAR(to(dg, Device::cpu()).item(), dh.item(), 1e-9 * dh.item());
  for (size_t k = 0; k < 2; ++k) EXPECT_LT(max_diff(to(gdg[k], Device::cpu()), gdh[k]), 1e-7);
  auto f = [&](const std::vector<Tensor>& a) { return sum(square(a[0] * to(big, a[0].device()))); };
  auto [vh, gh] = value_and_grad(f, {w});
  auto [vg, gg] = value_and_grad(f, {to(w, gpu)});
  EXPECT_NEAR(to(vg, Device::cpu()).item(), vh.item(), 1e-9 * vh.item());
  EXPECT_LT(max_diff(to(gg[0], Device::cpu()), gh[0]), 1e-8 * (1 + max_diff(gh[0], gh[0] * 0.0)));
}

// tridiagonal_solve reads its failure flag back after every call: inside a scan on the GPU that is
// a round trip per step, which it says once (and the results still match the host).
TEST_F(Cuda, ADeviceWaitInsideAScanWarnsOnceNamingTheOp) {
  const Device gpu = Device::cuda(0);
  const Tensor xs = uniform(Axes{{"t", 6}, {"i", 9}}, 3, -1, 1);
  auto run = [&](Device d) {
    const Tensor lo = to(scalar(-1.0), d), di = to(scalar(3.0), d);
    ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor next = tridiagonal_solve(lo, di, lo, c[0] + x[0], "i");
      return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{sum(next)});
    };
    return scan(body, {to(zeros(Axes{{"i", 9}}), d)}, {to(xs, d)}, "t");
  };
  const ScanResult want = run(Device::cpu());
  ::testing::internal::CaptureStderr();
  const ScanResult got = run(gpu);
  (void)run(gpu);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(max_diff(to(got.ys[0], Device::cpu()), want.ys[0]), 1e-12);
  EXPECT_MESSAGE(
      err,
      "tenax: warning: [tridiagonal_solve] copies from cuda:0 to the host (it waits for the device) "
      "inside a scan step or map chunk");
  EXPECT_EQ(err.find("warning"), err.rfind("warning")) << "warned more than once:\n" << err;
}

// The Kalman model file run on the device (Model::set_device): log-likelihood and gradient equal
// the host's; inputs on the wrong device are refused by name.
TEST_F(Cuda, TheKalmanModelRunsOnTheDeviceAndMatchesTheHost) {
  const Device gpu = Device::cuda(0);
  // The sources may have moved since the build (a GPU machine runs a copied tree): TENAX_SOURCE_DIR
  // in the environment overrides the build's.
  const char* env = std::getenv("TENAX_SOURCE_DIR");
  Model host = load_model(std::string(env ? env : TENAX_SOURCE_DIR) + "/examples/kalman/model.json");
  const Axes y_axes{{"series", host.axes().size_of("series")},
                    {"time", host.axes().size_of("time")},
                    {"obs", host.axes().size_of("obs")}};
  const Tensor y = randn(y_axes, 4);
  const ModelGradient want = host.value_and_grad("loglik", {{"y", y}});
  Model dev = host;
  dev.set_device(gpu);
  EXPECT_EQ(dev.device(), gpu);
  EXPECT_MESSAGE(testing::error_message<ModelError>([&] {
                   (void)dev.run("loglik", {{"y", y}});
                 }),
                 "input 'y' is on cpu but the model runs on cuda:0");
  const ModelGradient got = dev.value_and_grad("loglik", {{"y", to(y, gpu)}});
  EXPECT_EQ(got.value.device(), gpu);
  EXPECT_NEAR(to(got.value, Device::cpu()).item(), want.value.item(), 1e-10 * std::abs(want.value.item()));
  const std::vector<double> a = Model::flatten(want.grads), b = Model::flatten(got.grads);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_NEAR(b[k], a[k], 1e-9 * (1 + std::abs(a[k]))) << "coordinate " << k;
  // The host copy still runs on the host.
  EXPECT_EQ(host.run("loglik", {{"y", y}}).device(), Device::cpu());
}

}  // namespace
}  // namespace tenax
