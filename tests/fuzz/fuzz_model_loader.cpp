// libFuzzer target for the JSON model loader: any byte string either loads (and then runs) or
// raises a tenax::Error. Anything else — a crash, a sanitizer report, another exception type, a
// hang — is a finding. Built only with -DTENAX_FUZZ=ON under clang (scripts/fuzz.sh).
//
// The host memory budget is capped (kBudget): a model whose arrays are valid but huge (an axis of
// 10^8) is legitimate input that would otherwise read as a timeout or an out-of-memory finding;
// under the cap it raises MemoryError, a tenax::Error, as it would for a user who set a budget.
// TENAX_FUZZ_VERBOSE=1 prints each input's error (to check what the seed corpus reaches).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <tenax/model/model.h>
#include <tenax/tenax.h>

#ifndef TENAX_FUZZ_BASE_DIR
#define TENAX_FUZZ_BASE_DIR "."
#endif

namespace {
constexpr int64_t kBudget = int64_t{16} << 20;
const bool g_verbose = [] {
  tenax::set_memory_budget(tenax::Device::cpu(), kBudget);
  const char* v = std::getenv("TENAX_FUZZ_VERBOSE");
  return v && *v == '1';
}();
void report(const char* stage, const tenax::Error& e) {
  if (g_verbose) std::fprintf(stderr, "%s: %s\n", stage, e.what());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Relative data paths resolve against examples/ (scripts/fuzz.sh prefixes the seeds' CSV paths).
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    tenax::Model m = tenax::load_model_string(text, TENAX_FUZZ_BASE_DIR);
    (void)m.run();
    for (const auto& name : m.outputs()) {
      try {
        (void)m.value_and_grad(name);
      } catch (const tenax::Error& e) {
        // a non-scalar output or a numeric failure: reported cleanly, which is all we ask
        report("value_and_grad", e);
      }
    }
  } catch (const tenax::Error& e) {
    // the documented outcome for bad input
    report("load or run", e);
  }
  return 0;
}
