// GPU checks (ctest label "gpu"). Without a CUDA device they skip with the reason.
#include <gtest/gtest.h>

#include <tenax/tenax.h>

#include "expect_message.h"
#include "tenax/backends/kernels.h"

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

TEST_F(Cuda, OpsWithoutCudaKernelsAndMixedDevicesFailLoudly) {
  const Tensor h = randn(Axes{{"i", 4}}, 1);
  const Tensor g = to(h, Device::cuda(0));
  // The op kernels land with the CUDA issue: until then no op falls back to the host silently.
  EXPECT_MESSAGE(testing::error_message<DeviceError>([&] { (void)(g + g); }), "no kernel for device cuda:0");
  EXPECT_MESSAGE(testing::error_message<DeviceError>([&] { (void)(h + g); }),
                 "[add] input 0 is on cpu but input 1 is on cuda:0");
}

TEST_F(Cuda, TheDeviceMemoryBudgetIsEnforced) {
  const Device gpu = Device::cuda(0);
  set_memory_budget(gpu, allocator_stats(gpu).bytes_in_use + 1024);
  EXPECT_MESSAGE(testing::error_message<MemoryError>([&] { (void)empty(Axes{{"i", 1 << 20}}, DType::f64, gpu); }),
                 "on cuda:0 would exceed the memory budget");
  set_memory_budget(gpu, 0);
  EXPECT_EQ(empty(Axes{{"i", 1 << 20}}, DType::f64, gpu).device(), gpu);
}

}  // namespace
}  // namespace tenax
