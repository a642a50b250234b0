// GPU checks (ctest label "gpu"). Without a CUDA device they skip with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <tenax/tenax.h>

#include "expect_message.h"
#include "op_check.h"
#include "tenax/backends/kernels.h"
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
      // VJP: the gradient of sum(w * op(x)) w.r.t. every float input, on both devices.
      const Tensor w = randn(want.axes(), rng());
      auto grads = [&](const std::vector<Tensor>& in, const Tensor& weight) {
        Tape tape;
        std::vector<Tensor> watched, wrt;
        for (size_t i = 0; i < in.size(); ++i) {
          const bool diff = is_floating(in[i].dtype()) && !(i < 31 && (op->nondiff & (1u << i)));
          watched.push_back(diff ? tape.watch(in[i]) : in[i]);
          if (diff) wrt.push_back(watched.back());
        }
        return tape.gradient(sum(detail::apply(*op, watched, s.attrs) * weight), wrt);
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

TEST_F(Cuda, TheDeviceMemoryBudgetIsEnforced) {
  const Device gpu = Device::cuda(0);
  set_memory_budget(gpu, allocator_stats(gpu).bytes_in_use + 1024);
  EXPECT_MESSAGE(testing::error_message<MemoryError>([&] { (void)empty(Axes{{"i", 1 << 20}}, DType::f64, gpu); }),
                 "on cuda:0 would exceed the memory budget");
  set_memory_budget(gpu, 0);
  EXPECT_EQ(empty(Axes{{"i", 1 << 20}}, DType::f64, gpu).device(), gpu);
}

// A batch of diagonally dominant systems along "i" in the given layout, as host tensors.
std::vector<Tensor> systems(const Axes& axes, uint64_t seed) {
  return {uniform(axes, seed, -1, 1), uniform(axes, seed + 1, 2.5, 3.5), uniform(axes, seed + 2, -1, 1),
          uniform(axes, seed + 3, -1, 1)};
}

double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t k = 0; k < x.size(); ++k) m = std::max(m, std::abs(x[k] - y[k]));
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
      args.off[o] = off[o].data();
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

}  // namespace
}  // namespace tenax
