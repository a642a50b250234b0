// The README's tour, compiled and run by the tests so it cannot go stale.
#include <cstdio>

#include <tenax/tenax.h>

int main() {
  using namespace tenax;
  Tensor x = randn(Axes{{"obs", 200}, {"feat", 3}}, /*seed=*/1);  // float64 unless asked
  Tensor w = tensor({0.5, -1.0, 2.0}, "feat");
  Tensor y = dot(x, w, {"feat"});            // contracts by name: axes (obs)
  Tensor z = y + tensor({1.0, 2.0}, "run");  // broadcasts by name: (obs, run)
  Tensor s = slice(x, "obs", 0, 100, 2);     // a view: no copy
  Tensor m = sum(square(z), {"obs"});        // reductions name their axes: (run)

  auto loss = [&](const std::vector<Tensor>& p) {  // any function of named tensors
    Tensor r = (y - dot(x, p[0], {"feat"})) / softplus(p[1]);
    return sum(0.5 * square(r) + log(softplus(p[1])));
  };
  auto [value, grads] = value_and_grad(loss, {zeros(Axes{{"feat", 3}}), scalar(0.0)});
  auto [v, dv] = jvp(loss, {w, scalar(0.0)}, {Tensor(), scalar(1.0)});  // forward mode, d/d p[1]
  auto fast = compile(loss);  // traced once per signature, then replayed: forwards and backwards
  auto [value2, grads2] = value_and_grad(fast, {zeros(Axes{{"feat", 3}}), scalar(0.0)});

  Tensor cov = dot(x, rename(x, "feat", "feat2"), {"obs"}) / 200.0;  // (feat, feat2), SPD
  Tensor l = cholesky(cov, "feat", "feat2");                       // batched over any other axes
  Tensor u = triangular_solve(l, w, "feat", "feat2");              // w has feat; u has feat2

  std::printf("%s %s %s\n", s.describe().c_str(), m.describe().c_str(), u.describe().c_str());
  std::printf("loss %.4f, d/dw %s, directional derivative %.4f\n", value.item(), grads[0].describe().c_str(),
              dv.item());
  std::printf("compiled: loss %.4f, gradient differs by %.1e\n", value2.item(),
              max(abs(grads2[0] - grads[0])).item());
  return 0;
}
