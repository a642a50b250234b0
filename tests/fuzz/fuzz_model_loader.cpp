// libFuzzer target for the JSON model loader: any byte string either loads (and then runs) or
// raises a tenax::Error. Anything else — a crash, a sanitizer report, another exception type, a
// hang — is a finding. Built only with -DTENAX_FUZZ=ON under clang (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <tenax/model/model.h>
#include <tenax/tenax.h>

#ifndef TENAX_FUZZ_BASE_DIR
#define TENAX_FUZZ_BASE_DIR "."
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Relative data paths resolve against examples/ (scripts/fuzz.sh prefixes the seeds' CSV paths).
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    tenax::Model m = tenax::load_model_string(text, TENAX_FUZZ_BASE_DIR);
    (void)m.run();
    for (const auto& name : m.outputs()) {
      try {
        (void)m.value_and_grad(name);
      } catch (const tenax::Error&) {
        // a non-scalar output or a numeric failure: reported cleanly, which is all we ask
      }
    }
  } catch (const tenax::Error&) {
    // the documented outcome for bad input
  }
  return 0;
}
