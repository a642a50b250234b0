#pragma once
// The Kalman model the benchmarks share: the shipped model file with state dimension n, F = 0.9 I +
// 0.05 on the superdiagonal, Q = 0.1 I + 0.02 off-diagonal neighbours, H picking state 0 and
// 0.5 state 0 + state 1 (state 1 when n > 1), two observations.
#include <cmath>
#include <cstdint>
#include <functional>

#include <nlohmann/json.hpp>
#include <tenax/tenax.h>

#include "kalman.h"

namespace tenax::bench {

inline constexpr int64_t kObs = 2;

inline nlohmann::json matrix(int64_t rows, int64_t cols, const std::function<double(int64_t, int64_t)>& f) {
  nlohmann::json m = nlohmann::json::array();
  for (int64_t r = 0; r < rows; ++r) {
    nlohmann::json row = nlohmann::json::array();
    for (int64_t c = 0; c < cols; ++c) row.push_back(f(r, c));
    m.push_back(row);
  }
  return m;
}

inline Model kalman_model(int64_t n, int64_t series, int64_t steps) {
  nlohmann::json doc = kalman::default_model();
  for (const char* a : {"state", "state2", "state3", "diffuse", "diffuse2"}) doc["axes"][a] = n;
  doc["axes"]["series"] = series;
  doc["axes"]["time"] = steps;
  auto& p = doc["parameters"];
  p["F"]["value"] = matrix(n, n, [](int64_t r, int64_t c) { return r == c ? 0.9 : c == r + 1 ? 0.05 : 0.0; });
  p["Q"]["value"] = matrix(n, n, [](int64_t r, int64_t c) { return r == c ? 0.1 : std::abs(r - c) == 1 ? 0.02 : 0.0; });
  p["H"]["value"] = matrix(kObs, n, [n](int64_t r, int64_t c) {
    if (r == 0) return c == 0 ? 1.0 : 0.0;
    return c == 0 ? 0.5 : (c == 1 && n > 1) ? 1.0 : 0.0;
  });
  return load_model_json(doc);
}

}  // namespace tenax::bench
