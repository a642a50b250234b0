// map: chunked results equal nmap over the whole axis for every chunk size; gradients equal
// nmap's with and without rematerialisation; transforms inside are per slice; closures over
// tracked tensors and bad options raise.
#include "expect_message.h"
#include "op_check.h"

namespace tenax {
namespace {

using testing::mismatch;

// A per-slice function with a contraction, a reduction and a shared (unmapped) argument.
std::vector<Tensor> model(const std::vector<Tensor>& a) {
  Tensor h = tanh(dot(a[1], a[0], {"k"}));  // a[0]: (b, k), a[1]: (j, k) shared
  return {sum(h * h), h};
}

std::vector<Tensor> inputs() { return {randn(Axes{{"b", 7}, {"k", 3}}, 1), randn(Axes{{"j", 2}, {"k", 3}}, 2)}; }

TEST(Map, EqualsNmapForEveryChunkSize) {
  std::vector<Tensor> in = inputs(), ref = nmap(model, {"b"}, in);
  for (int64_t bs : {1, 2, 3, 7, 100}) {
    MapOptions o;
    o.batch_size = bs;
    std::vector<Tensor> got = map(model, "b", in, o);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_LT(mismatch(got[k], ref[k], 1e-14, 1e-14), 1.0) << "batch " << bs;
  }
  MapOptions budget;
  budget.memory_budget = 3 * 8 * 3;  // about three slices of results
  std::vector<Tensor> got = map(model, "b", in, budget);
  EXPECT_LT(mismatch(got[1], ref[1], 1e-14, 1e-14), 1.0);
}

TEST(Map, GradientEqualsNmapsWithAndWithoutRematerialisation) {
  std::vector<Tensor> in = inputs();
  auto loss_of = [](const std::vector<Tensor>& outs) { return sum(outs[0]) + sum(outs[1] * outs[1] * 0.5); };
  std::vector<Tensor> ref = grad([&](const std::vector<Tensor>& a) { return loss_of(nmap(model, {"b"}, a)); }, in);
  for (bool remat : {true, false}) {
    MapOptions o;
    o.batch_size = 3;
    o.rematerialize = remat;
    std::vector<Tensor> g = grad([&](const std::vector<Tensor>& a) { return loss_of(map(model, "b", a, o)); }, in);
    for (size_t k = 0; k < g.size(); ++k)
      EXPECT_LT(mismatch(g[k], ref[k], 1e-12, 1e-13), 1.0) << "argument " << k << " remat=" << remat;
  }
}

TEST(Map, ParallelChunksGiveTheSameValuesAndGradients) {
  std::vector<Tensor> in = {randn(Axes{{"b", 23}, {"k", 3}}, 5), randn(Axes{{"j", 2}, {"k", 3}}, 6)};
  auto loss_of = [](const std::vector<Tensor>& outs) { return sum(outs[0]) + sum(outs[1] * outs[1] * 0.5); };
  auto [v_ref, g_ref] =
      value_and_grad([&](const std::vector<Tensor>& a) { return loss_of(nmap(model, {"b"}, a)); }, in);
  MapOptions o;
  o.batch_size = 2;
  o.parallel_chunks = 4;
  auto [v, g] = value_and_grad([&](const std::vector<Tensor>& a) { return loss_of(map(model, "b", a, o)); }, in);
  EXPECT_NEAR(v.item(), v_ref.item(), 1e-12 * std::abs(v_ref.item()));
  // The shared argument (index 1) receives every chunk's contribution, from several threads.
  for (size_t k = 0; k < g.size(); ++k) EXPECT_LT(mismatch(g[k], g_ref[k], 1e-12, 1e-13), 1.0) << "argument " << k;
}

TEST(Map, ClosingOverATrackedTensorIsAnError) {
  Tape tape;
  Tensor w = tape.watch(randn(Axes{{"j", 2}, {"k", 3}}, 3));
  Tensor x = tape.watch(randn(Axes{{"b", 4}, {"k", 3}}, 4));
  MultiFunction f = [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{dot(w, a[0], {"k"})}; };
  try {
    (void)map(f, "b", {x});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass it through map's args"), std::string::npos) << e.what();
  }
  EXPECT_MESSAGE(testing::error_message<AxisError>([&] { (void)map(f, "q", {x}); }),
                 "[map] no argument has the mapped axis 'q'");
  MapOptions bad;
  bad.batch_size = -1;
  MapOptions bad_parallel;
  bad_parallel.parallel_chunks = 0;
  EXPECT_MESSAGE(testing::error_message<Error>([&] { (void)map(f, "b", {x}, bad_parallel); }),
                 "[map] parallel_chunks must be >= 1, got 0");
  EXPECT_MESSAGE(testing::error_message<Error>([&] { (void)map(f, "b", {x}, bad); }),
                 "[map] batch_size must be >= 0, got -1");
}

// grad and jacobian inside map are per slice, as inside nmap (map runs f through nmap per chunk).
TEST(Map, TransformsInsideArePerSlice) {
  const Tensor xs = randn(Axes{{"b", 6}, {"i", 3}}, 23), w = tensor({0.3, -0.7, 0.5}, "i");
  Function f = [](const std::vector<Tensor>& a) { return sum(tanh(a[0] * a[1])); };
  MultiFunction per_slice = [&](const std::vector<Tensor>& a) {
    std::vector<Tensor> out = grad(f, {a[1], a[0]});
    out.push_back(jacobian(f, {a[1], a[0]})[0]);
    return out;
  };
  MapOptions o;
  o.batch_size = 4;  // chunks of 4 and 2
  std::vector<Tensor> by_map = map(per_slice, "b", {xs, w}, o);
  for (int64_t b = 0; b < 6; ++b) {
    std::vector<Tensor> g = grad(f, {w, select(xs, "b", b)});
    EXPECT_LT(mismatch(select(by_map[0], "b", b), g[0], 1e-14, 1e-15), 1.0) << "slice " << b;
    EXPECT_LT(mismatch(select(by_map[1], "b", b), g[1], 1e-14, 1e-15), 1.0) << "slice " << b;
    EXPECT_LT(mismatch(select(by_map[2], "b", b), g[0], 1e-14, 1e-15), 1.0) << "slice " << b;
  }
}

// Forward mode through map (chunk by chunk): the forward Jacobian equals the reverse one, and jvp
// equals J v, with a shared argument and chunks of 3, 3 and 1.
TEST(Map, ForwardModeMatchesReverseMode) {
  std::vector<Tensor> args = inputs();
  MapOptions o;
  o.batch_size = 3;
  Function f = [&](const std::vector<Tensor>& a) { return map(model, "b", a, o)[1]; };
  std::vector<Tensor> fwd = jacobian(f, args, {JacobianOptions::Mode::forward}), back = jacobian(f, args);
  for (size_t k = 0; k < 2; ++k) EXPECT_LT(mismatch(fwd[k], back[k], 1e-13, 1e-15), 1.0) << "argument " << k;
  const std::vector<Tensor> dir{randn(args[0].axes(), 5), randn(args[1].axes(), 6)};
  const Tensor tangent = jvp(f, args, dir).second;
  // output h (b, j); the arguments' colliding axes b and j are b_in and j_in in the Jacobians
  Tensor expect = dot(back[0], rename(dir[0], Name("b"), Name("b_in")), {"b_in", "k"}) +
                  dot(back[1], rename(dir[1], Name("j"), Name("j_in")), {"j_in", "k"});
  EXPECT_LT(mismatch(tangent, expect, 1e-13, 1e-15), 1.0);
}

}  // namespace
}  // namespace tenax
