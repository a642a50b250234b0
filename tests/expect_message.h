#pragma once
// Asserting error messages: every error path's test checks what the user reads, not only the type.
#include <gtest/gtest.h>

#include <string>

/// Expects `what` (a std::string or const char*) to contain `fragment`.
#define EXPECT_MESSAGE(what, fragment) \
  EXPECT_NE(std::string(what).find(fragment), std::string::npos) << "message: " << (what)

namespace tenax::testing {

/// The message of the E that fn throws, or a text saying it threw none (which no fragment matches
/// by accident: it starts with "expected").
template <class E, class Fn>
std::string error_message(const Fn& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "expected an exception of the asserted type; none was thrown";
}

}  // namespace tenax::testing
