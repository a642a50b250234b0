// libFuzzer target for model files: any input either loads (and then runs, differentiates and
// saves) or raises a tenax::Error. Anything else — a crash, a sanitizer report, another exception
// type, a hang, a saved model that does not reproduce its outputs bit for bit — is a finding.
// Built only with -DTENAX_FUZZ=ON under clang (scripts/fuzz.sh).
//
// Two kinds of input: text that starts like JSON ('{', '[' or whitespace) is loaded as it is (the
// seed corpus of example models and past findings); anything else drives the structure-aware
// generator (model_generator.h), so that most inputs are documents that get past the parser.
//
// The host memory budget is capped (kBudget): a model whose arrays are valid but huge (an axis of
// 10^8) is legitimate input that would otherwise read as a timeout or an out-of-memory finding;
// under the cap it raises MemoryError, a tenax::Error, as it would for a user who set a budget.
// The budget caps allocations, not work: a valid model may sum a broadcast view of 10^10 elements
// or scan 10^12 steps, slowly and correctly. Inputs whose declared axes allow more than 2^24
// elements, or whose scans ask for more than 2^20 steps, are skipped (and counted) rather than
// reported as timeouts; sizes past the limits (2^56) still reach the loader, which refuses them.
// TENAX_FUZZ_VERBOSE=1 prints each input's error; at exit the target prints how many inputs were
// loaded and reached run(), value_and_grad and save.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <tenax/model/model.h>
#include <tenax/tenax.h>

#include "model_generator.h"
#include "tenax/model/definition.h"
#include "tenax/model/json_input.h"

#ifndef TENAX_FUZZ_BASE_DIR
#define TENAX_FUZZ_BASE_DIR "."
#endif

namespace {
constexpr int64_t kBudget = int64_t{16} << 20;

// What the inputs reached: parsed (so the loader's run of the graph started), loaded (that run
// passed), and the stages after it.
struct Counts {
  long inputs = 0, generated = 0, skipped = 0, parsed = 0, loaded = 0, ran = 0, differentiated = 0, saved = 0;
  ~Counts() {
    if (inputs == 0) return;
    const auto share = [this](long n) { return 100.0 * double(n) / double(inputs); };
    std::fprintf(stderr,
                 "tenax-fuzz: %ld inputs (%ld generated, %ld skipped as valid but slow); %ld parsed and reached "
                 "run() (%.1f%%), %ld loaded (%.1f%%), %ld ran again, %ld value_and_grad, %ld saved and reloaded\n",
                 inputs, generated, skipped, parsed, share(parsed), loaded, share(loaded), ran, differentiated, saved);
  }
};
Counts g_counts;

const bool g_verbose = [] {
  tenax::set_memory_budget(tenax::Device::cpu(), kBudget);
  const char* v = std::getenv("TENAX_FUZZ_VERBOSE");
  return v && *v == '1';
}();

void report(const char* stage, const tenax::Error& e) {
  if (g_verbose) std::fprintf(stderr, "%s: %s\n", stage, e.what());
}

// Valid but slow (see above): declared axes allowing more than 2^24 elements, or a scan length
// past 2^20. `doc` has passed the loader's depth check, so the walk's recursion is bounded.
bool slow(const nlohmann::json& doc) {
  constexpr int64_t kLimit = int64_t{1} << 56;
  if (!doc.is_structured()) return false;
  if (doc.is_object()) {
    if (doc.contains("length") && doc["length"].is_number_integer() && doc["length"].get<int64_t>() > (1 << 20))
      return true;
    if (doc.contains("axes") && doc["axes"].is_object()) {
      int64_t product = 1;
      for (const auto& [name, size] : doc["axes"].items())
        if (size.is_number_integer() && size.get<int64_t>() >= 1 && size.get<int64_t>() <= kLimit &&
            __builtin_mul_overflow(product, size.get<int64_t>(), &product))
          product = kLimit;
      if (product > (int64_t{1} << 24) && product <= kLimit) return true;
    }
  }
  for (const auto& item : doc)
    if (slow(item)) return true;
  return false;
}

// Same values, NaNs equal to NaNs: a saved model must reproduce every output bit for bit.
bool same(const tenax::Tensor& a, const tenax::Tensor& b) {
  if (!(a.axes() == b.axes()) || a.dtype() != b.dtype()) return false;
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (size_t k = 0; k < x.size(); ++k)
    if (!(x[k] == y[k] || (std::isnan(x[k]) && std::isnan(y[k])))) return false;
  return true;
}

// run(), value_and_grad of every output, and a save / reload that must reproduce the outputs.
void exercise(const tenax::Model& m) {
  const tenax::TensorMap out = m.run();
  ++g_counts.ran;
  for (const auto& name : m.outputs()) {
    try {
      (void)m.value_and_grad(name);
      ++g_counts.differentiated;
    } catch (const tenax::Error& e) {
      report("value_and_grad", e);  // a non-scalar output or a numeric failure: reported cleanly
    }
  }
  const tenax::Model again = tenax::load_model_json(m.to_json(TENAX_FUZZ_BASE_DIR), TENAX_FUZZ_BASE_DIR);
  const tenax::TensorMap out2 = again.run();
  for (const auto& [name, t] : out)
    if (!same(t, out2.at(name))) {
      std::fprintf(stderr, "output '%s' differs after save and reload\n", name.c_str());
      std::abort();
    }
  ++g_counts.saved;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ++g_counts.inputs;
  std::string text(reinterpret_cast<const char*>(data), size);
  if (size == 0 || !std::strchr("{[ \t\r\n", data[0])) {
    FuzzedDataProvider bytes(data, size);
    text = tenax::fuzz::generate_model(bytes).dump();
    ++g_counts.generated;
    if (g_verbose) std::fprintf(stderr, "generated: %s\n", text.c_str());
  }
  try {
    // Parsing alone first, to count the inputs that reach the graph's run (load_model_string then
    // parses again and runs). Relative data paths resolve against examples/ (scripts/fuzz.sh
    // prefixes the seeds' CSV paths).
    const nlohmann::json doc = tenax::model_detail::parse_checked(text, "/");
    if (slow(doc)) {
      ++g_counts.skipped;
      return 0;
    }
    (void)tenax::model_detail::parse(doc, TENAX_FUZZ_BASE_DIR);
    ++g_counts.parsed;
    const tenax::Model m = tenax::load_model_string(text, TENAX_FUZZ_BASE_DIR);
    ++g_counts.loaded;
    exercise(m);
  } catch (const tenax::Error& e) {
    report("load or run", e);  // the documented outcome for bad input
  }
  return 0;
}
