// Hostile and careless input: sizes past int64, documents nested deep, duplicate keys, tapes freed
// out of order, empty reductions and non-finite linear algebra. Each is a tenax::Error a user can
// act on (or the documented value), never a crash, a hang or a silent wrong answer.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include <tenax/model/model.h>
#include <tenax/tenax.h>

#include "expect_message.h"

namespace tenax {
namespace {

using json = nlohmann::json;
constexpr int64_t kTwo62 = int64_t{1} << 62;

template <class E, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(another exception: ") + e.what() + ")";
  }
  return "(no error)";
}

// ---- sizes ----

TEST(Sizes, ProductsPastTheLimitAreShapeErrorsNamingTheAxes) {
  const std::string m = error_of<ShapeError>([] { (void)ones(Axes{{"i", kTwo62 + 1}, {"j", 4}}); });
  EXPECT_MESSAGE(m, "(i=4611686018427387905");
  EXPECT_MESSAGE(m, "more than 2^56 elements");
  EXPECT_MESSAGE(error_of<ShapeError>([] { (void)zeros(Axes{{"i", int64_t{1} << 40}, {"j", int64_t{1} << 40}}); }),
                 "(i=1099511627776, j=1099511627776) has more than 2^56 elements");
  // A zero-size axis does not hide the others: their strides must fit too.
  EXPECT_MESSAGE(error_of<ShapeError>([] { (void)Axes({{"z", 0}, {"i", kTwo62}, {"j", kTwo62}}); }),
                 "more than 2^56 elements");
  // At the limit an Axes is fine (a view of it allocates nothing).
  const Axes at_limit{{"i", int64_t{1} << 28}, {"j", int64_t{1} << 28}};
  EXPECT_EQ(at_limit.numel(), kMaxElements);
}

TEST(Sizes, BroadcastConcatAndStackCheckTheirResult) {
  const std::string b =
      error_of<ShapeError>([] { (void)broadcast(ones(Axes{{"j", 4}}), Axes{{"i", int64_t{1} << 55}}); });
  EXPECT_MESSAGE(b, "(j=4, i=36028797018963968) has more than 2^56 elements");
  EXPECT_MESSAGE(b, "[broadcast]");
  EXPECT_MESSAGE(b, "more than 2^56 elements");
  // Views at the limit concatenated past it.
  const Tensor big = broadcast(ones(Axes{{"j", 1}}), Axes{{"i", int64_t{1} << 55}});
  const std::string c = error_of<ShapeError>([&] { (void)concat({big, big, big}, "i"); });
  EXPECT_MESSAGE(c, "[concat] axis 'i' of 108086391056891904");
  const Tensor wide = broadcast(ones(Axes{{"j", 1}}), Axes{{"i", int64_t{1} << 55}});
  const std::string s = error_of<ShapeError>([&] { (void)stack({wide, wide, wide}, "k"); });
  EXPECT_MESSAGE(s, "[stack]");
  // A step past any size selects one element and overflows nothing.
  Tensor x = tensor({1.0, 2.0, 3.0}, "i");
  Tensor one = slice(x, "i", 1, 3, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(one.size("i"), 1);
  EXPECT_EQ(one.item(), 2.0);
}

TEST(Sizes, AllocationsPastMemoryAreMemoryErrors) {
  // 2^55 float64 elements are 256 PiB: within the element limit, past any machine. Under a memory
  // budget the budget refuses them; without one the system does (not tried under ASan, whose
  // allocator aborts on such requests instead of failing them).
  for (const int64_t budget : {int64_t{1} << 30, int64_t{0}}) {
#if defined(__SANITIZE_ADDRESS__)
    if (budget == 0) continue;
#endif
    set_memory_budget(Device::cpu(), budget);
    EXPECT_MESSAGE(error_of<MemoryError>([] { (void)zeros(Axes{{"i", int64_t{1} << 55}}); }), "[alloc]");
    EXPECT_MESSAGE(error_of<MemoryError>([] { (void)randn(Axes{{"i", int64_t{1} << 55}}, 1); }), "[alloc]");
    // Reading a huge broadcast view into a host vector.
    const Tensor view = broadcast(scalar(1.0), Axes{{"i", int64_t{1} << 55}});
    EXPECT_MESSAGE(error_of<MemoryError>([&] { (void)view.to_vector(); }), "to_vector");
  }
  set_memory_budget(Device::cpu(), 0);
  EXPECT_MESSAGE(error_of<ShapeError>([] { (void)arange("i", -3); }), "[arange] needs a size >= 0 for axis 'i', got -3");
}

TEST(Sizes, AViewMadeByHandStaysInItsBuffer) {
  const StoragePtr buffer(Storage::allocate(4 * sizeof(double), Device::cpu()));
  const int64_t two[1] = {2}, back[1] = {-1}, huge[1] = {std::numeric_limits<int64_t>::max()};
  EXPECT_EQ(Tensor(buffer, 0, Axes{{"i", 2}}, two, DType::f64).numel(), 2);   // elements 0 and 2
  EXPECT_EQ(Tensor(buffer, 3, Axes{{"i", 4}}, back, DType::f64).numel(), 4);  // 3, 2, 1, 0
  EXPECT_MESSAGE(error_of<IndexError>([&] { (void)Tensor(buffer, 0, Axes{{"i", 3}}, two, DType::f64); }),
                 "[tensor] a view (i=3) at offset 0 reaches outside its buffer of 4 elements");
  EXPECT_MESSAGE(error_of<IndexError>([&] { (void)Tensor(buffer, 2, Axes{{"i", 4}}, back, DType::f64); }),
                 "reaches outside its buffer");
  EXPECT_MESSAGE(error_of<IndexError>([&] { (void)Tensor(buffer, 1, Axes{{"i", 3}}, huge, DType::f64); }),
                 "reaches outside its buffer");
}

TEST(Sizes, SumOfABroadcastCountsEveryElement) {
  // Past the limit these returned 4 and 0 (the element count wrapped).
  EXPECT_EQ(sum(broadcast(ones(Axes{{"j", 4}}), Axes{{"i", 1000}})).item(), 4000.0);
}

TEST(Sizes, ScanOptionsPastAnyLength) {
  // Found by the loader fuzzer: checkpoint_every = INT64_MAX overflowed the number of checkpoints.
  // An interval past the length is one checkpoint; a huge memory budget or carry count overflows
  // nothing either.
  const Tensor x = tensor({1.0, 2.0, 3.0}, "t");
  auto gradient = [&](ScanOptions o) {
    auto f = [&](const std::vector<Tensor>& p) {
      ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& xt) {
        return std::make_pair(std::vector<Tensor>{c[0] * xt[0] + p[0]}, std::vector<Tensor>{});
      };
      return sum(scan(body, {p[0]}, {x}, "t", o).carry[0]);
    };
    return value_and_grad(f, {scalar(0.5)}).second[0].item();
  };
  const double expected = gradient(ScanOptions{});
  ScanOptions huge_interval;
  huge_interval.checkpoint_every = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(gradient(huge_interval), expected);
  ScanOptions huge_budget;
  huge_budget.memory_budget = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(gradient(huge_budget), expected);
}

TEST(Sizes, MapBatchPastAnyLength) {
  // Found by the loader fuzzer: batch_size = INT64_MAX overflowed the chunk arithmetic of the
  // reverse pass. A batch past the axis is the whole axis.
  const Tensor x = tensor({1.0, 2.0, 3.0}, "t");
  auto gradient = [&](int64_t batch_size) {
    MapOptions o;
    o.batch_size = batch_size;
    auto f = [&](const std::vector<Tensor>& p) {
      MultiFunction body = [](const std::vector<Tensor>& a) { return std::vector<Tensor>{a[0] * a[1]}; };
      return sum(map(body, "t", {x, p[0]}, o)[0]);
    };
    return value_and_grad(f, {scalar(0.5)}).second[0].item();
  };
  EXPECT_EQ(gradient(std::numeric_limits<int64_t>::max()), 6.0);
  EXPECT_EQ(gradient(1), 6.0);
}

// ---- tape lifetimes ----

TEST(TapeLifetimes, DestroyedInCreationOrder) {
  const Tensor x = tensor({1.0, 2.0}, "i");
  auto* a = new Tape;
  const Tensor w = a->watch(x);
  auto* b = new Tape;
  delete a;  // b records on
  const Tensor v = b->watch(x);
  const Tensor y = sum(v * 3.0 + w * 5.0);  // w's tape is gone: a constant here
  const std::vector<Tensor> g = b->gradient(y, {v});
  EXPECT_EQ(g[0].to_vector(), (std::vector<double>{3.0, 3.0}));
  EXPECT_MESSAGE(error_of<AutodiffError>([&] { (void)b->gradient(y, {w}); }), "is not tracked by this tape");
  delete b;
  // Nothing records now; w is a plain value.
  EXPECT_EQ((w * 2.0).to_vector(), (std::vector<double>{2.0, 4.0}));
}

TEST(TapeLifetimes, TheOuterTapeEndingLeavesTheInnerRecording) {
  const Tensor x = tensor({1.0, 2.0}, "i");
  auto* a = new Tape;
  auto* b = new Tape;
  const Tensor w = b->watch(x);
  delete a;  // used to stop b's recording: its gradient came back zero
  const Tensor y = sum(square(w));
  EXPECT_EQ(b->gradient(y, {w})[0].to_vector(), (std::vector<double>{2.0, 4.0}));
  delete b;
}

TEST(TapeLifetimes, AMiddleTapeEndingHandsItsStateOn) {
  const Tensor x = tensor({3.0}, "i");
  auto* a = new Tape;
  const Tensor wa = a->watch(x);
  auto* b = new Tape;
  auto* c = new Tape;
  delete b;
  const Tensor wc = c->watch(x);
  EXPECT_EQ(c->gradient(sum(wc * wc), {wc})[0].item(), 6.0);
  delete c;  // a records again
  EXPECT_EQ(a->gradient(sum(wa * 4.0), {wa})[0].item(), 4.0);
  delete a;
}

TEST(TapeLifetimes, ATapeEndedInsideAFunctionTheLibraryCalls) {
  // grad records on its own tape around f; the user's tape ends inside f.
  const Tensor x = scalar(2.0);
  auto* outer = new Tape;
  const Tensor w = outer->watch(x);
  auto f = [&](const std::vector<Tensor>& p) {
    delete outer;
    outer = nullptr;
    return p[0] * p[0] + w;
  };
  auto [value, g] = value_and_grad(f, {scalar(3.0)});
  EXPECT_EQ(value.item(), 11.0);
  EXPECT_EQ(g[0].item(), 6.0);
  // No tape is left recording on this thread.
  auto* t = new Tape;
  const Tensor v = t->watch(x);
  EXPECT_EQ(t->gradient(v * 7.0, {v})[0].item(), 7.0);
  delete t;
  EXPECT_LT((x * 2.0).var(), 0);
}

// ---- one numeric policy ----

TEST(NumericPolicy, OnlySumReducesAnEmptyAxis) {
  const Tensor e = zeros(Axes{{"i", 0}, {"j", 2}});
  EXPECT_EQ(sum(e, {"i"}).to_vector(), (std::vector<double>{0.0, 0.0}));
  for (auto f : {+[](const Tensor& t) { return mean(t, {"i"}); }, +[](const Tensor& t) { return max(t, {"i"}); },
                 +[](const Tensor& t) { return logsumexp(t, {"i"}); }})
    EXPECT_MESSAGE(error_of<ShapeError>([&] { (void)f(e); }), "cannot reduce over an empty axis in (i=0, j=2)");
}

TEST(NumericPolicy, ANonFinitePivotIsAFailureANonFiniteRightHandSideIsNot) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor b = tensor({1.0, 1.0}, "r");
  for (double bad : {nan, inf}) {
    // A NaN or infinity in the matrix reaches a pivot: every factorisation and solve raises, as
    // the tridiagonal solve and the GPU's LU did (the host's LU solve returned NaNs).
    const Tensor a = tensor({{4.0, 1.0}, {1.0, bad}}, "r", "c");
    const Tensor tri = tensor({{4.0, 0.0}, {1.0, bad}}, "r", "c");
    EXPECT_MESSAGE(error_of<NumericError>([&] { (void)cholesky(a, "r", "c"); }), "[cholesky]");
    EXPECT_MESSAGE(error_of<NumericError>([&] { (void)solve(a, b, "r", "c"); }),
                   "[solve] the matrix over ('r', 'c') at batch index {} is singular (a zero or non-finite pivot)");
    EXPECT_MESSAGE(error_of<NumericError>([&] { (void)logdet(a, "r", "c"); }), "[logdet]");
    EXPECT_MESSAGE(error_of<NumericError>([&] { (void)triangular_solve(tri, b, "r", "c"); }), "[triangular_solve]");
    const Tensor d = tensor({2.0, bad, 2.0}, "i"), off = tensor({1.0, 1.0, 1.0}, "i");
    EXPECT_MESSAGE(error_of<NumericError>([&] { (void)tridiagonal_solve(off, d, off, tensor({1.0, 1.0, 1.0}, "i"), "i"); }),
                   "[tridiagonal_solve]");
    // In the right-hand side it only propagates.
    const Tensor good = tensor({{4.0, 1.0}, {1.0, 3.0}}, "r", "c");
    const std::vector<double> z = solve(good, tensor({1.0, bad}, "r"), "r", "c").to_vector();
    EXPECT_FALSE(std::isfinite(z[0]) || std::isfinite(z[1]));
  }
  // Finite but not positive definite / singular: the same errors.
  const Tensor indefinite = tensor({{1.0, 2.0}, {2.0, 1.0}}, "r", "c");
  EXPECT_MESSAGE(error_of<NumericError>([&] { (void)cholesky(indefinite, "r", "c"); }),
                 "[cholesky] the matrix over ('r', 'c') at batch index");
  const Tensor singular = tensor({{1.0, 2.0}, {2.0, 4.0}}, "r", "c");
  EXPECT_MESSAGE(error_of<NumericError>([&] { (void)solve(singular, b, "r", "c"); }), "is singular");
}

// ---- model files ----

std::string load_error(std::string_view text) {
  try {
    Model m = load_model_string(text);
    (void)m.run();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(HostileModels, TheTwoHundredFortyEightByteFile) {
  // Axes whose product wraps int64; it loaded, and run() died with SIGSEGV.
  const std::string text =
      R"({"format":1,"axes":{"i":4611686018427387905,"k":4},"parameters":{"p":{"axes":["i","k"],"value":1}},)"
      R"("graph":[{"name":"s","op":"select","inputs":["p"],"attrs":{"axis":"i","index":1099511627776}}],)"
      R"("outputs":{"o":"s"}})";
  EXPECT_MESSAGE(load_error(text), "/axes/i: expected a positive integer size (at most 2^56), got 4611686018427387905");
  // Each size fits, their product does not: an error where a tensor has both (a model may declare
  // axes that no one tensor holds together).
  const std::string pair =
      R"({"format":1,"axes":{"i":1099511627776,"k":1099511627776},"parameters":{"p":{"axes":["i","k"],"value":1}},)"
      R"("outputs":{"o":"p"}})";
  EXPECT_MESSAGE(load_error(pair), "/parameters/p/axes/1: [axes] (i=1099511627776, k=1099511627776) has more than 2^56 elements");
}

std::string nested(int depth) {
  std::string s = R"({"format":1,"axes":{"i":1},"outputs":{"o":"x"},"description":)";
  s.append(size_t(depth), '[');
  s.append(size_t(depth), ']');
  s += "}";
  return s;
}

TEST(HostileModels, NestingIsBoundedWithAPointer) {
  // The document is one level; the description's arrays the rest.
  const int limit = 128;
  EXPECT_EQ(load_error(nested(limit - 1)).find("nesting deeper"), std::string::npos) << load_error(nested(limit - 1));
  EXPECT_MESSAGE(load_error(nested(limit)), "/description/0/0/0");
  EXPECT_MESSAGE(load_error(nested(limit)), "nesting deeper than 128 levels");
  EXPECT_MESSAGE(load_error(nested(150000)), "nesting deeper than 128 levels");
  // A document built in C++ is checked the same way, before anything copies it.
  json deep = json::array();
  for (int k = 0; k < 300; ++k) deep = json::array({std::move(deep)});
  json doc = json::parse(R"({"format":1,"axes":{"i":1},"outputs":{"o":"x"}})");
  doc["description"] = std::move(deep);
  EXPECT_MESSAGE(error_of<ModelError>([&] { (void)load_model_json(doc); }), "/description/0/0");
}

// "c3": a name of nesting level 3 (appended, not concatenated: GCC 12 warns wrongly at -O3).
std::string level_name(char prefix, int level) {
  std::string s(1, prefix);
  s.append(std::to_string(level));
  return s;
}

// A map over t (its body sees a chunk, axis t included) whose body holds `depth - 1` more maps.
json nested_maps(int depth, int level = 0) {
  const std::string arg = level_name('c', level), out = level_name('o', level);
  json body = {{"args", {arg}}, {"graph", json::array()}, {"results", {arg}}};
  if (depth > 1) {
    body["graph"].push_back(nested_maps(depth - 1, level + 1));
    body["results"] = {level_name('o', level + 1)};
  }
  const std::string input = level == 0 ? std::string("a") : level_name('c', level - 1);
  return {{"op", "map"}, {"over", "t"}, {"inputs", {input}}, {"outputs", {out}}, {"body", body}};
}

TEST(HostileModels, BodiesNestAtMostThirtyTwoDeep) {
  auto doc = [](int depth) {
    json d = json::parse(R"({"format":1,"axes":{"t":2},"parameters":{"a":{"axes":["t"],"value":2}},"outputs":{"o":"s"},
                                "graph":[{"name":"s","op":"sum","inputs":["o0"]}]})");
    d["graph"].push_back(nested_maps(depth));
    return d;
  };
  // One map runs; a map inside it cannot map t again, which the run at load time reports. At the
  // limit the document is parsed whole and reaches that run.
  Model m = load_model_json(doc(1));
  EXPECT_EQ(m.run("o").item(), 4.0);
  EXPECT_EQ(m.value_and_grad("o").grads[0].to_vector(), (std::vector<double>{1.0, 1.0}));
  EXPECT_MESSAGE(error_of<ModelError>([&] { (void)load_model_json(doc(32)); }),
                 "/graph/1/body/graph/0 (map): [slice] axis 't' is mapped by an enclosing nmap/map");
  const std::string past = error_of<ModelError>([&] { (void)load_model_json(doc(33)); });
  EXPECT_MESSAGE(past, "/graph/1/body/graph/0/body");
  EXPECT_MESSAGE(past, "bodies nested deeper than 32 levels");
}

TEST(HostileModels, DuplicateKeysAreRefused) {
  EXPECT_MESSAGE(load_error(R"({"format":1,"axes":{"i":2,"i":3},"outputs":{}})"),
                 "/axes/i: the key \"i\" appears twice in this object");
  EXPECT_MESSAGE(load_error(R"({"format":1,"axes":{"i":2},"parameters":{"p":{"axes":["i"],"value":1,"value":2}},"outputs":{"o":"p"}})"),
                 "/parameters/p/value: the key \"value\" appears twice");
}

TEST(HostileModels, ADocumentReadForEditingIsCheckedTheSameWay) {
  // read_model_document: for programs that edit a document before load_model_json (the Kalman
  // tool sets the series and time sizes), with the loader's own checks.
  EXPECT_EQ(read_model_document(R"({"format": 1, "axes": {"i": 2}})")["axes"]["i"], 2);
  EXPECT_MESSAGE(error_of<ModelError>([] { (void)read_model_document(R"({"axes": {"i": 2, "i": 3}})"); }),
                 "/axes/i: the key \"i\" appears twice");
  EXPECT_MESSAGE(error_of<ModelError>([] { (void)read_model_document("{\n  \"axes\": [1,\n}"); }),
                 "line 3, column 1");
  EXPECT_MESSAGE(error_of<ModelError>([] { (void)read_model_document(nested(200)); }), "nesting deeper than 128");
}

TEST(HostileModels, DeclaredSizesAgreeWithRenameAndStack) {
  const std::string renamed = R"({"format":1,"axes":{"i":3,"k":4},"parameters":{"p":{"axes":["i"],"value":1}},
    "graph":[{"name":"r","op":"rename","inputs":["p"],"attrs":{"from":["i"],"to":["k"]}}],"outputs":{"o":"r"}})";
  EXPECT_MESSAGE(load_error(renamed), "/graph/0 (rename): gives axis 'k' size 3, but /axes/k declares 4");
  const std::string stacked = R"({"format":1,"axes":{"i":3,"k":4},"parameters":{"p":{"axes":["i"],"value":1}},
    "graph":[{"name":"s","op":"stack","inputs":["p","p"],"attrs":{"axis":"k"}}],"outputs":{"o":"s"}})";
  EXPECT_MESSAGE(load_error(stacked), "/graph/0 (stack): gives axis 'k' size 2, but /axes/k declares 4");
  // Slices and concatenations derive their sizes: no declaration to agree with.
  const std::string sliced = R"({"format":1,"axes":{"i":3},"parameters":{"p":{"axes":["i"],"value":1}},
    "graph":[{"name":"s","op":"slice","inputs":["p"],"attrs":{"axis":"i","start":1,"stop":3}}],"outputs":{"o":"s"}})";
  EXPECT_EQ(load_error(sliced), "(no error)");
}

}  // namespace
}  // namespace tenax
