// The environment variables: one table (core/env.cpp), one strict parser, every read going through
// it, and docs/environment.md generated from the table.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "expect_message.h"
#include "tenax/core/env.h"
#include "tenax/core/error.h"

namespace tenax {
namespace {

namespace fs = std::filesystem;
using detail::EnvVariable;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string parse(const EnvVariable& v) {
  if (v.kind == EnvVariable::Kind::flag) {
    const std::optional<bool> f = detail::env_flag(v.name);
    return f ? (*f ? "on" : "off") : "unset";
  }
  const std::optional<int64_t> n = detail::env_integer(v.name);
  return n ? std::to_string(*n) : "unset";
}

// Sets `name` to `value` for the scope (never run while another test reads the environment).
struct Setenv {
  const char* name;
  Setenv(const char* n, const std::string& value) : name(n) { ::setenv(n, value.c_str(), 1); }
  ~Setenv() { ::unsetenv(name); }
  Setenv(const Setenv&) = delete;
  Setenv& operator=(const Setenv&) = delete;
};

TEST(Environment, EveryVariableTakesItsValuesAndRefusesOthersNamingItself) {
  for (const EnvVariable& v : detail::environment_variables()) {
    if (std::getenv(v.name)) continue;  // set by the caller: leave it
    SCOPED_TRACE(v.name);
    EXPECT_EQ(parse(v), "unset");
    {
      const Setenv empty(v.name, "");
      EXPECT_EQ(parse(v), "unset");
    }
    const bool flag = v.kind == EnvVariable::Kind::flag;
    const std::string takes = flag ? "0 or 1"
                                   : "an integer from " + std::to_string(v.min) + " to " + std::to_string(v.max);
    for (const std::string& bad : {std::string("yes"), std::string("1x"), std::to_string(v.max + 1)}) {
      const Setenv set(v.name, bad);
      EXPECT_MESSAGE(testing::error_message<Error>([&] { (void)parse(v); }),
                     std::string("[environment] ") + v.name + "='" + bad + "': expected " + takes + " (");
      EXPECT_MESSAGE(testing::error_message<Error>([] { detail::validate_environment(); }), v.name);
    }
    const Setenv low(v.name, std::to_string(v.min));
    EXPECT_EQ(parse(v), flag ? "off" : std::to_string(v.min));
    ::setenv(v.name, std::to_string(v.max).c_str(), 1);
    EXPECT_EQ(parse(v), flag ? "on" : std::to_string(v.max));
  }
}

// No library source reads the environment except core/env.cpp, and every variable it names
// through env_flag / env_switch / env_integer is listed.
TEST(Environment, EveryReadGoesThroughTheListedParser) {
  std::set<std::string> listed;
  for (const EnvVariable& v : detail::environment_variables()) listed.insert(v.name);
  const fs::path root = TENAX_SOURCE_DIR;
  int uses = 0;
  for (const char* dir : {"core", "named", "backends", "autodiff", "model", "examples"})
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".h" && ext != ".cu") continue;
      const std::string text = read(e.path());
      const std::string rel = fs::relative(e.path(), root).string();
      if (rel != "core/env.cpp") {
        EXPECT_EQ(text.find("getenv("), std::string::npos) << rel << " reads the environment";
      }
      for (const std::string call : {"env_flag(\"", "env_switch(\"", "env_integer(\""})
        for (size_t at = text.find(call); at != std::string::npos; at = text.find(call, at + 1)) {
          const size_t from = at + call.size(), to = text.find('"', from);
          const std::string name = text.substr(from, to - from);
          ++uses;
          EXPECT_TRUE(listed.count(name)) << rel << ": " << name << " is not in core/env.cpp";
        }
    }
  EXPECT_GE(uses, 8);
}

std::string environment_markdown() {
  std::string s =
      "# Environment variables\n\n"
      "Generated from the list in `core/env.cpp`; `test_environment` fails when this file differs\n"
      "(regenerate: `TENAX_REGENERATE_REFERENCE=1 build/test/tests/test_environment`). A variable set to\n"
      "a value it does not take makes every op raise an Error naming it and what it takes. The\n"
      "switches that turn an optimisation off give the same results and exist for comparison and\n"
      "debugging.\n\n"
      "| variable | values | unset | what it does |\n|---|---|---|---|\n";
  for (const EnvVariable& v : detail::environment_variables())
    s += std::string("| `") + v.name + "` | " +
         (v.kind == EnvVariable::Kind::flag ? std::string("0, 1")
                                            : std::to_string(v.min) + " to " + std::to_string(v.max)) +
         " | " + v.fallback + " | " + v.purpose + " |\n";
  return s;
}

TEST(Environment, DocsListEveryVariable) {
  const fs::path doc = fs::path(TENAX_SOURCE_DIR) / "docs/environment.md";
  if (std::getenv("TENAX_REGENERATE_REFERENCE")) std::ofstream(doc) << environment_markdown();
  EXPECT_EQ(read(doc), environment_markdown())
      << "docs/environment.md is stale; regenerate with TENAX_REGENERATE_REFERENCE=1";
}

}  // namespace
}  // namespace tenax
