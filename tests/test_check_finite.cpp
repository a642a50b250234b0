// The NaN/Inf debug checks: off by default; when on, the first non-finite op output (forward) or
// adjoint (backward) raises NumericError naming the op, the element, the pass, the scan step or map
// chunk, and for a model graph the node's JSON pointer. ctest also runs the environment-variable
// test with TENAX_CHECK_FINITE=1.
#include <gtest/gtest.h>

#include <cmath>

#include <cstdlib>
#include <string>

#include <tenax/tenax.h>

#include "expect_message.h"

namespace tenax {
namespace {

struct ChecksOn {
  ChecksOn() { set_check_finite(true); }
  ~ChecksOn() { set_check_finite(false); }
};

template <class Fn>
std::string numeric_error(const Fn& fn) {
  return testing::error_message<NumericError>(fn);
}

TEST(CheckFinite, OffByDefaultOnBySwitch) {
  if (std::getenv("TENAX_CHECK_FINITE")) GTEST_SKIP() << "runs without TENAX_CHECK_FINITE";
  const Tensor x = tensor({1.0, 2.0, -3.0, 4.0}, "i");
  EXPECT_FALSE(check_finite());
  EXPECT_TRUE(std::isnan(log(x).to_vector()[2]));  // silently NaN
  ChecksOn on;
  EXPECT_MESSAGE(numeric_error([&] { (void)log(x); }),
                 "[log] produced NaN at {i=2} of its (i=4) in the forward pass (finite checks are on");
}

TEST(CheckFinite, TheBackwardPassNamesTheRuleAndTheInput) {
  ChecksOn on;
  const Tensor x = tensor({0.0, 1.0}, "i");
  // sqrt(0) = 0 is finite; its derivative 1 / (2 sqrt 0) is not.
  EXPECT_MESSAGE(
      numeric_error([&] { (void)grad([](const std::vector<Tensor>& a) { return sum(sqrt(a[0])); }, {x}); }),
      "[sqrt] produced +Inf at {i=0} of its (i=2) in the backward pass (the adjoint of its input 0)");
}

TEST(CheckFinite, InsideAScanTheStepIsNamedTracedOrReplayed) {
  ChecksOn on;
  // c_{t+1} = c_t - 1 from 4.5; y_t = log(c_{t+1}) turns NaN at step 4 (c = -0.5): a replayed step.
  auto body = [](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
    Tensor next = c[0] - 1.0;
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{log(next)});
  };
  ScanOptions o;
  o.length = 8;
  EXPECT_MESSAGE(numeric_error([&] { (void)scan(body, {scalar(4.5)}, {}, "t", o); }),
                 "[log] produced NaN at {} of its () in the forward pass at scan step 4");
  // From 1.5 the NaN comes at step 1, while the body is traced.
  EXPECT_MESSAGE(numeric_error([&] { (void)scan(body, {scalar(1.5)}, {}, "t", o); }),
                 "in the forward pass at scan step 1");
  // Backward, replayed: d log(c) / dc = 1 / c is Inf where c = 0 (step 3 from 3.0, y_3 = log(-1) aside).
  auto body2 = [](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
    Tensor next = c[0] - 1.0;
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{sqrt(square(next))});
  };
  o.length = 6;
  EXPECT_MESSAGE(
      numeric_error([&] {
        (void)grad([&](const std::vector<Tensor>& a) { return sum(scan(body2, {a[0]}, {}, "t", o).ys[0]); },
                   {scalar(4.0)});
      }),
      "[sqrt] produced +Inf at {} of its () in the backward pass (the adjoint of its input 0) at scan step "
      "3");
}

TEST(CheckFinite, InsideAMapTheChunkIsNamed) {
  ChecksOn on;
  const Tensor x = tensor({1.0, 2.0, 3.0, -4.0, 5.0, 6.0}, "b");
  MapOptions mo;
  mo.batch_size = 2;
  EXPECT_MESSAGE(
      numeric_error([&] {
        (void)map([](const std::vector<Tensor>& a) { return std::vector<Tensor>{log(a[0])}; }, "b", {x}, mo);
      }),
      "[log] produced NaN at {b=1} of its (b=2) in the forward pass at the map chunk starting at slice 2");
}

TEST(CheckFinite, AModelNodeIsNamedByItsJsonPointer) {
  ChecksOn on;
  const char* text = R"({
    "format": 1,
    "axes": {"i": 3},
    "parameters": {"w": {"axes": ["i"], "value": [1.0, 0.5, 0.25]}},
    "inputs": {"x": {"axes": ["i"], "value": [1.0, 1.0, 1.0]}},
    "graph": [
      {"name": "d", "op": "sub", "inputs": ["w", "x"]},
      {"name": "l", "op": "log", "inputs": ["d"]},
      {"name": "s", "op": "sum", "inputs": ["l"]}
    ],
    "outputs": {"s": "s"}
  })";
  set_check_finite(false);  // the loader's validation run would stop at the NaN too
  Model m = load_model_string(text);
  set_check_finite(true);
  const std::string what = numeric_error([&] { (void)m.run("s"); });
  EXPECT_MESSAGE(what, "/graph/1");
  EXPECT_MESSAGE(what, "[log] produced -Inf at {i=0} of its (i=3) in the forward pass");
}

TEST(CheckFinite, AModelNodeIsNamedInTheBackwardPassToo) {
  ChecksOn on;
  // |w - x| as sqrt(square(.)): finite forward; its derivative at w = x (element 1) is not.
  const char* text = R"({
    "format": 1,
    "axes": {"i": 3},
    "parameters": {"w": {"axes": ["i"], "value": [2.0, 1.0, 3.0]}},
    "inputs": {"x": {"axes": ["i"], "value": [1.0, 1.0, 1.0]}},
    "graph": [
      {"name": "d", "op": "sub", "inputs": ["w", "x"]},
      {"name": "d2", "op": "square", "inputs": ["d"]},
      {"name": "a", "op": "sqrt", "inputs": ["d2"]},
      {"name": "s", "op": "sum", "inputs": ["a"]}
    ],
    "outputs": {"s": "s"}
  })";
  Model m = load_model_string(text);
  EXPECT_EQ(m.run("s").item(), 3.0);
  const std::string what = numeric_error([&] { (void)m.value_and_grad("s"); });
  EXPECT_MESSAGE(what, "/graph/2: [sqrt] produced +Inf at {i=1} of its (i=3) in the backward pass");
}

TEST(CheckFinite, TheEnvironmentVariableTurnsThemOn) {
  const char* env = std::getenv("TENAX_CHECK_FINITE");
  EXPECT_EQ(check_finite(), env != nullptr && std::string(env) != "0");
}

}  // namespace
}  // namespace tenax
