// Model files that are wrong, class by class: each error names its JSON pointer (or file, line and
// column) and says what was expected; data files with missing values read as declared.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tenax/backends/kernels.h"
#include "tenax/tenax.h"

#include "expect_message.h"

namespace {

using namespace tenax;
using json = nlohmann::json;
namespace fs = std::filesystem;

// ---- bad input: one test per class, each asserting the pointer and the expectation ----
json small_doc() {
  return json::parse(R"({
    "format": 1,
    "axes": {"i": 3, "j": 2},
    "parameters": {"a": {"axes": ["i"], "value": [1, 2, 3]}},
    "inputs": {"x": {"axes": ["i", "j"]}},
    "graph": [
      {"name": "b", "op": "mul", "inputs": ["a", "x"]},
      {"name": "c", "op": "sum", "inputs": ["b"], "attrs": {"axes": ["i"]}},
      {"name": "d", "op": "sum", "inputs": ["c"]}
    ],
    "outputs": {"d": "d"}
  })");
}

std::string load_error(const json& doc, const fs::path& base = ".") {
  try {
    (void)load_model_json(doc, base);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelErrors, EachClassNamesThePointer) {
  EXPECT_EQ(load_error(small_doc()), "(no error)");
  {
    json d = small_doc();
    d["graph"][1]["op"] = "summ";
    EXPECT_MESSAGE(load_error(d), "/graph/1/op: unknown op 'summ'");
  }
  {
    json d = small_doc();
    d["graph"][1]["attrs"]["axis"] = "i";
    EXPECT_MESSAGE(load_error(d), "/graph/1/attrs/axis: unknown attribute 'axis' of op 'sum' (expected: axes)");
  }
  {
    // solve has no triangle to choose: "lower" was accepted and ignored.
    json d = small_doc();
    d["graph"][1] = json::parse(R"({"name": "c", "op": "solve", "inputs": ["b", "a"],
                                    "attrs": {"row": "i", "col": "j", "lower": false}})");
    EXPECT_MESSAGE(load_error(d), "/graph/1/attrs/lower: unknown attribute 'lower' of op 'solve' (expected: row, col, transpose)");
  }
  {
    json d = small_doc();
    d["graph"][1]["attrs"]["axes"] = json::array({"k"});
    EXPECT_MESSAGE(load_error(d), "/graph/1/attrs/axes/0: unknown axis 'k'");
  }
  {
    json d = small_doc();
    d["graph"][1] = {
        {"name", "c"}, {"op", "diagonal"}, {"inputs", {"x"}}, {"attrs", {{"row", "i"}, {"col", "i"}}}};
    EXPECT_MESSAGE(load_error(d),
                   "/graph/1/attrs/col: axis 'i' is already given to op 'diagonal' by another attribute");
  }
  {
    json d = small_doc();
    d["graph"][1]["attrs"]["axes"] = json::array({"i", "i"});
    EXPECT_MESSAGE(load_error(d), "/graph/1/attrs/axes/1: axis 'i' is listed twice");
  }
  {
    json d = small_doc();
    d["graph"][1] = {
        {"name", "c"}, {"op", "diagonal"}, {"inputs", {"x"}}, {"attrs", {{"row", "i"}, {"col", "j"}}}};
    EXPECT_MESSAGE(load_error(d),
                   "/graph/1 (diagonal): [diagonal] axes 'i' and 'j' of (i=3, j=2) differ in size");
  }
  {
    json d = small_doc();
    d["graph"][0]["inputs"][1] = "nothing";
    EXPECT_MESSAGE(load_error(d), "/graph/0/inputs/1: unknown name 'nothing'");
  }
  {
    json d = small_doc();
    d["parameters"]["a"]["value"] = json::array({1, 2});
    EXPECT_MESSAGE(load_error(d), "/parameters/a/value: expected a list of 3 entries along axis 'i'");
  }
  {
    json d = small_doc();
    d["parameters"]["a"]["value"][1] = "two";
    EXPECT_MESSAGE(load_error(d), "/parameters/a/value/1: expected a number");
  }
  {
    json d = small_doc();  // a size mismatch found by the validating run: a has i=3, y has i=2
    d["axes"]["k"] = 2;
    d["parameters"]["e"] = {{"axes", {"j"}}, {"value", 1.0}};
    d["graph"][0]["inputs"] = {"a", "e"};
    d["graph"].push_back({{"name", "f"}, {"op", "dot"}, {"inputs", {"a", "x"}}, {"attrs", {{"over", {"j"}}}}});
    d["graph"].push_back({{"name", "g"}, {"op", "add"}, {"inputs", {"f", "b"}}});
    EXPECT_MESSAGE(load_error(d), "/graph/3 (dot)");
  }
  {
    json d = small_doc();
    d["graph"][0]["inputs"] = {"a", "d"};
    EXPECT_MESSAGE(load_error(d), "/graph/0: the graph has a cycle (each name is computed from the next): b -> d -> c -> b");
  }
  {
    json d = small_doc();
    d["graph"][0]["inputs"] = {"a"};
    EXPECT_MESSAGE(load_error(d), "/graph/0/inputs: op 'mul' takes 2 inputs, got 1");
  }
  {
    json d = small_doc();
    d["format"] = 2;
    EXPECT_MESSAGE(load_error(d), "/format: this loader reads format 1");
  }
  {
    json d = small_doc();
    d["graph"][1]["name"] = "b";
    EXPECT_MESSAGE(load_error(d), "/graph/1/name: the name 'b' is already defined at /graph/0");
  }
  {
    json d = small_doc();  // found by the fuzzer: the duplicate within one node read past the list
    d["graph"].push_back({{"op", "nmap"},
                          {"over", {"i"}},
                          {"inputs", {"x"}},
                          {"outputs", {"n", "n"}},
                          {"body", {{"args", {"xi"}}, {"graph", json::array()}, {"results", {"xi", "xi"}}}}});
    EXPECT_MESSAGE(load_error(d), "/graph/3/outputs/1: the name 'n' is listed twice in this node's outputs");
  }
  {
    json d = small_doc();
    d["parameters"]["a"]["constraint"] = "positive";
    d["parameters"]["a"]["value"] = {1, -2, 3};
    EXPECT_MESSAGE(load_error(d), "/parameters/a/value: the value violates its constraint positive (softplus)");
  }
  {
    json d = small_doc();
    d["extra"] = 1;
    EXPECT_MESSAGE(load_error(d), "/extra: unknown key \"extra\"");
  }
  {
    json d = small_doc();
    d["graph"][0]["inputs"][0] = json::object();
    EXPECT_MESSAGE(load_error(d), "/graph/0/inputs/0: expected a name (string), a number or a complex number {\"re\": x, \"im\": y}, got");
  }
}

TEST(ModelErrors, HugeArraysMeetTheMemoryBudget) {
  auto load_error = [](const json& doc) -> std::string {
    try {
      (void)load_model_json(doc, ".");
    } catch (const Error& e) {  // MemoryError or ModelError
      return e.what();
    }
    return "(no error)";
  };
  set_memory_budget(Device::cpu(), int64_t{16} << 20);
  std::string huge, past, big, list;
  {
    json d = small_doc();
    d["axes"]["i"] = int64_t{1} << 55;  // 2^58 bytes of float64 (x in (i, j): the most elements a tensor may have)
    d["parameters"]["a"]["value"] = 1.5;
    huge = load_error(d);
    d["axes"]["i"] = (int64_t{1} << 56) + 1;
    past = load_error(d);
    d["axes"]["i"] = int64_t{1} << 25;  // 256 MiB
    big = load_error(d);
    d["parameters"]["a"]["value"] = json::array({1.0, 2.0});  // a list: checked against the axes
    list = load_error(d);
  }
  set_memory_budget(Device::cpu(), 0);
  EXPECT_MESSAGE(huge, "would exceed the memory budget of 16.0 MiB");
  EXPECT_MESSAGE(past, "/axes/i: expected a positive integer size (at most 2^56), got 72057594037927937");
  EXPECT_MESSAGE(big, "would exceed the memory budget of 16.0 MiB");
  EXPECT_MESSAGE(list, "/parameters/a/value: expected a list of 33554432 entries along axis 'i'");
}

TEST(ModelErrors, InvalidJsonAndMissingInputs) {
  try {
    (void)load_model_string("{\"format\": 1, \"axes\": {");
    FAIL() << "no error";
  } catch (const ModelError& e) {
    EXPECT_MESSAGE(std::string(e.what()), "/: not valid JSON: ");
    EXPECT_MESSAGE(std::string(e.what()), "line 1, column 24");
  }
  try {  // found by the fuzzer: a number too large for a double is a ModelError, not a json exception
    (void)load_model_string("{\"format\": 1, \"axes\": {\"i\": 1e3083}}");
    FAIL() << "no error";
  } catch (const ModelError& e) {
    EXPECT_MESSAGE(std::string(e.what()), "number overflow parsing '1e3083'");
  }
  Model m = load_model_json(small_doc());
  try {
    (void)m.run();
    FAIL() << "no error";
  } catch (const ModelError& e) {
    EXPECT_MESSAGE(std::string(e.what()), "/inputs/x: input 'x' has no data in the model file; pass it to run()");
  }
  try {
    (void)m.run({{"x", zeros(Axes{{"i", 3}})}});
    FAIL() << "no error";
  } catch (const ModelError& e) {
    EXPECT_MESSAGE(std::string(e.what()), "/inputs/x: input 'x' is declared with axes (i=3, j=2), got (i=3)");
  }
  try {
    (void)m.run({{"x", zeros(Axes{{"i", 3}, {"j", 2}}, DType::f32)}});
    FAIL() << "no error";
  } catch (const ModelError& e) {
    EXPECT_MESSAGE(std::string(e.what()), "must be float64 as declared, got float32");
  }
  // Inputs in any axis order.
  const Tensor x = randn(Axes{{"j", 2}, {"i", 3}}, 1);
  EXPECT_NEAR(m.run("d", {{"x", x}}).item(), sum(x * tensor({1.0, 2.0, 3.0}, "i")).item(), 1e-14);
  // A device that is not there is refused up front, and the model keeps running where it did
  // (test_cuda runs models on a GPU).
  if (detail::cuda_device_count() == 0) {
    EXPECT_MESSAGE(tenax::testing::error_message<DeviceError>([&] { m.set_device(Device::cuda(0)); }),
                   "[Model::set_device] cuda:0 is not available (" + detail::cuda_visibility() + ")");
    EXPECT_EQ(m.device(), Device::cpu());
    EXPECT_NEAR(m.run("d", {{"x", x}}).item(), sum(x * tensor({1.0, 2.0, 3.0}, "i")).item(), 1e-14);
  }
}

TEST(ModelErrors, DataFilesMissingShortOrNaN) {
  const fs::path dir = fs::temp_directory_path() / "tenax_test_model_data";
  fs::create_directories(dir);
  json d = small_doc();
  d["inputs"]["x"]["csv"] = "x.csv";
  EXPECT_MESSAGE(load_error(d, dir), "/inputs/x/csv: cannot open the data file");
  std::ofstream(dir / "x.csv") << "a,b\n1,2\n3,4\n";
  EXPECT_MESSAGE(load_error(d, dir), "x.csv holds 4 numbers; the axes (i=3, j=2) need 6");
  std::ofstream(dir / "x.csv") << "a,b\n1,2\n3,inf\n5,6\n";
  EXPECT_MESSAGE(load_error(d, dir), "x.csv line 3 column 2: holds a non-finite number");
  std::ofstream(dir / "x.csv") << "a,b\n1,2\n3,nan\n5,6\n";
  EXPECT_MESSAGE(load_error(d, dir), "x.csv line 3 column 2: 'nan' is a missing value (an input declared with");
  std::ofstream(dir / "x.csv") << "a,b\n1,2\n\n3,4\n5,6\n";
  EXPECT_MESSAGE(load_error(d, dir), "x.csv line 3: a blank line between lines of numbers");
  std::ofstream(dir / "x.csv") << "1,2\n3,4,5\n6\n";
  EXPECT_MESSAGE(load_error(d, dir), "x.csv line 2: 3 values, the lines before have 2");
  std::ofstream(dir / "x.csv") << "NA,2\n3,4\n5,6\n";  // a missing value, not a header
  EXPECT_MESSAGE(load_error(d, dir), "x.csv line 1 column 1: 'NA' is a missing value");
  std::ofstream(dir / "x.csv") << "a,b\n1,2\n3,x\n5,6\n";
  EXPECT_MESSAGE(load_error(d, dir), "x.csv line 3 column 2: 'x' is not a number");
  std::ofstream(dir / "x.csv") << "a,b\n1,2\n3,4\n5,6\n";
  Model m = load_model_json(d, dir);
  EXPECT_NEAR(m.run("d").item(), 1 * 3 + 2 * 7 + 3 * 11, 1e-12);
  // Saved elsewhere, the data path is rewritten relative to the new file.
  fs::create_directories(dir / "sub");
  m.save(dir / "sub" / "m.json");
  EXPECT_EQ(json::parse(std::ifstream(dir / "sub" / "m.json"))["inputs"]["x"]["csv"], "../x.csv");
  EXPECT_NEAR(load_model(dir / "sub" / "m.json").run("d").item(), 50.0, 1e-12);
  d["inputs"]["x"].erase("csv");
  d["inputs"]["x"]["json"] = "x.json";
  std::ofstream(dir / "x.json") << "[[1, 2], [3, 4]]";
  EXPECT_MESSAGE(load_error(d, dir), "/inputs/x/json (" );
  fs::remove_all(dir);
}

// "missing": true reads empty, NA and nan cells (and JSON null) as NaN, in place: nothing shifts.
TEST(ModelData, MissingValuesReadAsNaNWhereDeclared) {
  const fs::path dir = fs::temp_directory_path() / "tenax_test_model_missing";
  fs::create_directories(dir);
  json d = small_doc();
  d["inputs"]["x"]["csv"] = "x.csv";
  d["inputs"]["x"]["missing"] = true;
  std::ofstream(dir / "x.csv") << "NA,2\n, nan\n5,\n\n";
  const Tensor x = load_model_json(d, dir).input("x");
  const std::vector<double> v = x.to_vector();
  ASSERT_EQ(v.size(), 6u);
  EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[2]) && std::isnan(v[3]) && std::isnan(v[5]));
  EXPECT_EQ(v[1], 2.0);
  EXPECT_EQ(v[4], 5.0);
  std::ofstream(dir / "x.csv") << "1,2\n3,x\n5,6\n";
  EXPECT_MESSAGE(load_error(d, dir), "x.csv line 2 column 2: 'x' is not a number");
  std::ofstream(dir / "x.csv") << "1,2\n3,4\n\n5,6\n";
  EXPECT_MESSAGE(load_error(d, dir), "line 3: a blank line between lines of numbers (write NA for a missing value)");
  d["inputs"]["x"].erase("csv");
  d["inputs"]["x"]["value"] = json::parse("[[1, null], [3, 4], [null, 6]]");
  const std::vector<double> w = load_model_json(d, dir).input("x").to_vector();
  EXPECT_TRUE(std::isnan(w[1]) && std::isnan(w[4]));
  EXPECT_EQ(w[5], 6.0);
  d["inputs"]["x"]["missing"] = false;
  EXPECT_MESSAGE(load_error(d, dir), "/inputs/x/value/0/1: expected a number, got null (an input declared with");
  d["inputs"]["x"]["missing"] = "yes";
  EXPECT_MESSAGE(load_error(d, dir), "/inputs/x/missing: expected true or false");
  fs::remove_all(dir);
}

// run(name) and value_and_grad(name) evaluate only what the output needs: here every other output
// (a Cholesky of a matrix that is not positive definite: outside, as a scan's ys and as a carry
// of the same scan) fails whenever it runs.

TEST(ModelErrors, RuntimeFailuresNameTheNode) {
  json d = json::parse(R"({
    "format": 1,
    "axes": {"i": 2, "j": 2},
    "inputs": {"a": {"axes": ["i", "j"]}},
    "graph": [{"name": "l", "op": "cholesky", "inputs": ["a"], "attrs": {"row": "i", "col": "j"}}],
    "outputs": {"l": "l"}
  })");
  Model m = load_model_json(d);  // zeros as placeholders fail numerically: not a file error
  try {
    (void)m.run({{"a", tensor(std::vector<double>{1.0, 2.0, 2.0, 1.0}, Axes{{"i", 2}, {"j", 2}})}});
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_MESSAGE(std::string(e.what()), "/graph/0 (cholesky): ");
  }
}

// ---- complex parameters and inputs ("complex": true; docs/complex.md) ----
json s5_doc() {
  return json::parse(R"({
    "format": 1,
    "axes": {"t": 5, "n": 2, "m": 2},
    "parameters": {
      "lambda": {"axes": ["n"], "complex": true, "value": [{"re": 0.8, "im": 0.3}, {"re": -0.5, "im": 0.1}]},
      "B": {"axes": ["n", "m"], "complex": true, "init": {"rule": "normal", "seed": 3, "scale": 0.5}}
    },
    "inputs": {"u": {"axes": ["t", "m"]}},
    "graph": [
      {"name": "uc", "op": "astype", "inputs": ["u"], "attrs": {"dtype": "complex128"}},
      {"name": "bu", "op": "dot", "inputs": ["B", "uc"], "attrs": {"over": ["m"]}},
      {"name": "x", "op": "linear_recurrence", "inputs": ["lambda", "bu"], "attrs": {"over": "t"}},
      {"name": "shifted", "op": "mul", "inputs": ["x", {"re": 0.0, "im": 1.0}]},
      {"name": "power", "op": "mul", "inputs": ["shifted", "shifted_conj"]},
      {"name": "shifted_conj", "op": "conj", "inputs": ["shifted"]},
      {"name": "re", "op": "real", "inputs": ["power"]},
      {"name": "loss", "op": "sum", "inputs": ["re"]}
    ],
    "outputs": {"loss": "loss", "x": "x"}
  })");
}

TEST(ModelData, ComplexParametersFitLikeRealOnes) {
  Model m = load_model_json(s5_doc(), ".");
  const Tensor u = randn(Axes{{"t", 5}, {"m", 2}}, 7);
  const Tensor lambda = m.parameter("lambda"), B = m.parameter("B");
  EXPECT_EQ(lambda.dtype(), DType::c128);
  EXPECT_EQ(lambda.at_complex({{"n", 0}}), std::complex<double>(0.8, 0.3));
  // The graph against the same computation in C++ (|i x|^2 = |x|^2), value and gradients.
  auto direct = [&](const std::vector<Tensor>& p) {
    const Tensor x = linear_recurrence(p[0], dot(p[1], astype(u, DType::c128), {"m"}), "t");
    return sum(real(mul(x, conj(x))));
  };
  const ModelGradient g = m.value_and_grad("loss", {{"u", u}});
  const auto [value, want] = value_and_grad(direct, {lambda, B});
  EXPECT_NEAR(g.value.item(), value.item(), 1e-12 * value.item());
  ASSERT_EQ(m.trainable(), (std::vector<std::string>{"B", "lambda"}));
  EXPECT_LE(std::abs(g.grads[1].at_complex({{"n", 1}}) - want[0].at_complex({{"n", 1}})), 1e-12);
  // The optimiser's coordinates: (real, imaginary) per element, gradients in the same order.
  const std::vector<double> v = m.unconstrained_vector(), flat = Model::flatten(g.grads);
  ASSERT_EQ(v.size(), 2u * (4 + 2));
  ASSERT_EQ(flat.size(), v.size());
  EXPECT_EQ(v[8], 0.8);
  EXPECT_EQ(v[9], 0.3);
  EXPECT_EQ(flat[10], want[0].at_complex({{"n", 1}}).real());
  EXPECT_EQ(flat[11], want[0].at_complex({{"n", 1}}).imag());
  std::vector<double> moved = v;
  moved[9] = -0.25;
  m.set_unconstrained_vector(moved);
  EXPECT_EQ(m.parameter("lambda").at_complex({{"n", 0}}), std::complex<double>(0.8, -0.25));
  // Saved and loaded again: the same values, bit for bit ({"re": x, "im": y} leaves).
  const Model again = load_model_json(m.to_json("."), ".");
  EXPECT_EQ(again.parameter("B").to_complex_vector(), m.parameter("B").to_complex_vector());
  EXPECT_EQ(again.parameter("lambda").to_complex_vector(), m.parameter("lambda").to_complex_vector());
}

TEST(ModelErrors, ComplexValuesAndDeclarations) {
  json d = s5_doc();
  d["parameters"]["lambda"]["constraint"] = "positive";
  EXPECT_MESSAGE(load_error(d), "/parameters/lambda/constraint: a complex parameter takes no constraint");
  d = s5_doc();
  d["parameters"]["lambda"]["value"][1] = json::parse(R"({"re": 1, "imag": 2})");
  EXPECT_MESSAGE(load_error(d), "/parameters/lambda/value/1/imag: unknown key of a complex number");
  d = s5_doc();
  d["parameters"]["lambda"]["value"][1] = json::parse(R"({"re": 1})");
  EXPECT_MESSAGE(load_error(d), "/parameters/lambda/value/1: a complex number needs both \"re\" and \"im\"");
  d = s5_doc();
  d["parameters"]["lambda"].erase("complex");
  EXPECT_MESSAGE(load_error(d), "/parameters/lambda/value/0: expected a number, got");
  d = s5_doc();
  d["inputs"]["u"] = json::parse(R"({"axes": ["t", "m"], "complex": true, "csv": "u.csv"})");
  EXPECT_MESSAGE(load_error(d), "/inputs/u/csv: a CSV file holds real numbers");
  d = s5_doc();
  d["graph"][2]["inputs"][0] = "bu";  // x = recurrence(bu, bu): fine; now a real-only op on complex
  d["graph"][3] = json::parse(R"({"name": "shifted", "op": "maximum", "inputs": ["x", "x"]})");
  EXPECT_MESSAGE(load_error(d), "/graph/3 (maximum): [maximum] is not defined for complex128");
  Model m = load_model_json(s5_doc(), ".");
  EXPECT_MESSAGE(tenax::testing::error_message<ModelError>([&] { (void)m.run("loss", {{"u", astype(randn(Axes{{"t", 5}, {"m", 2}}, 1), DType::c128)}}); }),
                 "/inputs/u: input 'u' must be float64 as declared, got complex128 (convert it with astype)");
}

}  // namespace
