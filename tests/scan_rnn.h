#pragma once
// The small RNN-like scan body the scan tests share: a matrix parameter, a bias, a comparison
// and a reduction, and its inputs (w, b, h0, xs over t = 11).
#include <utility>
#include <vector>

#include <tenax/tenax.h>

namespace tenax::testing {

// A small RNN-like body with a matrix parameter, a bias, a comparison and a reduction.
struct Rnn {
  Tensor w, b;
  std::pair<std::vector<Tensor>, std::vector<Tensor>> operator()(const std::vector<Tensor>& c,
                                                                const std::vector<Tensor>& x) const {
    Tensor h = tanh(dot(w, rename(c[0], "h", "k"), {"k"}) + x[0] + b);
    Tensor gated = where(greater(h, scalar(0.0)), h, h * 0.5);
    return {{gated}, {sum(gated * gated)}};
  }
};

inline std::vector<Tensor> rnn_inputs() {
  return {randn(Axes{{"h", 3}, {"k", 3}}, 5) * 0.5, randn(Axes{{"h", 3}}, 6), randn(Axes{{"h", 3}}, 7),
          randn(Axes{{"t", 11}, {"h", 3}}, 8)};
}

}  // namespace tenax::testing
