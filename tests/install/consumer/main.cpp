// Uses the installed package: one header, one target. Exits 0 when d/dx Σ x² = 2x.
#include <tenax/tenax.h>

int main() {
  using namespace tenax;
  auto g = grad([](const std::vector<Tensor>& p) { return sum(square(p[0])); }, {tensor({1.0, -2.0}, "i")});
  return g[0].to_vector() == std::vector<double>{2.0, -4.0} ? 0 : 1;
}
