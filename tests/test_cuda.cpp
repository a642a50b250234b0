// GPU checks (ctest label "gpu"). Without a CUDA device they skip with the reason.
#include <gtest/gtest.h>

#include <tenax/tenax.h>

#include "tenax/backends/kernels.h"

namespace tenax {
namespace {

TEST(Cuda, OpsOnADeviceWithoutKernelsFailLoudly) {
  const int n = detail::cuda_device_count();
  if (n == 0) GTEST_SKIP() << "no CUDA device visible (no GPU, no driver, or a build without the CUDA backend)";
  // The CUDA kernels land with the CUDA issue; until then no op may fall back to the host silently.
  try {
    (void)zeros(Axes{{"i", 4}}, DType::f64, Device::cuda(0));
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tenax
