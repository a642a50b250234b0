// Uses the installed package: one header, one target (two with the CUDA backend). Exits 0 when
// d/dx Σ x² = 2x and a CUDA device is reported as the link says: a CPU program is told the backend
// is not linked; a program linking tenax::cuda finds the backend (and uses a device if there is one).
#include <tenax/tenax.h>

#include <cstdio>
#include <string>

int main() {
  using namespace tenax;
  const Tensor x = tensor({1.0, -2.0}, "i");
  auto g = grad([](const std::vector<Tensor>& p) { return sum(square(p[0])); }, {x});
  if (g[0].to_vector() != std::vector<double>{2.0, -4.0}) return 1;
  try {
    const Tensor y = to(square(to(x, Device::cuda(0))), Device::cpu());
    return TENAX_CONSUMER_CUDA && y.to_vector() == std::vector<double>{1.0, 4.0} ? 0 : 2;
  } catch (const DeviceError& e) {
    const bool unlinked = std::string(e.what()).find("CUDA backend is not linked") != std::string::npos;
    std::printf("%s\n", e.what());
    return unlinked == !TENAX_CONSUMER_CUDA ? 0 : 3;
  }
}
