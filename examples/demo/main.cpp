// Until the Kalman example lands: a small end-to-end demo. A named-axis least-squares loss with a
// softplus-constrained noise scale, its value and gradient, checked against finite differences.
#include <cmath>
#include <cstdio>

#include <tenax/tenax.h>

int main() {
  using namespace tenax;
  // Data y[obs] = X[obs, feat] w_true[feat] + noise.
  const Tensor x = randn(Axes{{"obs", 200}, {"feat", 3}}, 1);
  const Tensor w_true = tensor({0.5, -1.0, 2.0}, "feat");
  const Tensor y = dot(x, w_true, {"feat"}) + 0.3 * randn(Axes{{"obs", 200}}, 2);

  // Negative Gaussian log-likelihood of (w, raw_sigma), sigma = softplus(raw_sigma).
  auto nll = [&](const std::vector<Tensor>& p) {
    const Tensor& w = p[0];
    Tensor sigma = softplus(p[1]);
    Tensor r = (y - dot(x, w, {"feat"})) / sigma;
    return sum(0.5 * square(r) + log(sigma));
  };

  Tensor w0 = zeros(Axes{{"feat", 3}});
  Tensor s0 = scalar(0.0);
  auto [value, grads] = value_and_grad(nll, {w0, s0});
  std::printf("negative log-likelihood at w = 0, raw_sigma = 0: %.6f\n", value.item());
  std::printf("gradient w.r.t. w[feat]:");
  for (double g : grads[0].to_vector()) std::printf(" %+.6f", g);
  std::printf("\ngradient w.r.t. raw_sigma: %+.6f\n", grads[1].item());

  // Central finite difference on raw_sigma, as a check anyone can read.
  const double h = 1e-6;
  double fd = (nll({w0, scalar(h)}).item() - nll({w0, scalar(-h)}).item()) / (2 * h);
  std::printf("finite difference w.r.t. raw_sigma: %+.6f (|diff| = %.2e)\n", fd, std::fabs(fd - grads[1].item()));
  return std::fabs(fd - grads[1].item()) < 1e-4 * (1 + std::fabs(fd)) ? 0 : 1;
}
