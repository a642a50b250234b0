#pragma once
// Library-internal: the environment variables Tenax reads, listed once (core/env.cpp: name,
// values, default, purpose; docs/environment.md is generated from the list, and test_environment
// checks that nothing else in the library reads the environment), and the one parser they all go
// through. A variable set to a value it does not take is an Error naming it and what it takes,
// raised by the first op (validate_environment) and by every op after it while the value stays.
#include <cstdint>
#include <optional>
#include <span>

namespace tenax::detail {

struct EnvVariable {
  enum class Kind { flag, integer };
  const char* name;
  Kind kind;
  const char* fallback;  ///< what applies when the variable is unset or empty, in words
  const char* purpose;   ///< one line for docs/environment.md
  int64_t min = 0, max = 1;  ///< the integers it takes (flags: 0 and 1)
};

/// Every variable the library reads.
std::span<const EnvVariable> environment_variables();

/// The value of flag `name`: unset or empty -> nullopt, "0" -> false, "1" -> true; any other
/// value throws Error. `name` must be listed.
std::optional<bool> env_flag(const char* name);
/// A flag that is on unless set to "0" (switches that turn an optimisation off for comparison).
inline bool env_switch(const char* name) { return env_flag(name).value_or(true); }
/// The value of integer variable `name` within its listed range, or nullopt when unset or empty;
/// anything else throws Error.
std::optional<int64_t> env_integer(const char* name);

/// Parses every listed variable that is set, throwing the first one's Error. Called before the
/// first op runs (core/ops/dispatch.cpp) and again by every op while it throws.
void validate_environment();

}  // namespace tenax::detail
