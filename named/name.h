#pragma once
// Interned axis names: a 32-bit id, so comparing and copying a name never touches the heap.
#include <cstdint>
#include <string>
#include <string_view>

namespace tenax {

/// An interned axis name. Construction interns the text once (thread-safe); copies are free.
class Name {
 public:
  /// The empty name (id 0); never a valid axis name.
  constexpr Name() = default;
  /// Interns `text`; throws tenax::Error when it is empty.
  Name(std::string_view text);  // NOLINT(google-explicit-constructor): names read like strings
  /// Interns `text`.
  Name(const char* text) : Name(std::string_view(text)) {}  // NOLINT
  /// Interns `text`.
  Name(const std::string& text) : Name(std::string_view(text)) {}  // NOLINT

  /// The text of this name.
  [[nodiscard]] const std::string& str() const;
  /// The interned id (0 for the empty name).
  [[nodiscard]] constexpr uint32_t id() const { return id_; }
  /// True for the empty name.
  [[nodiscard]] constexpr bool empty() const { return id_ == 0; }

  friend constexpr bool operator==(Name a, Name b) { return a.id_ == b.id_; }
  friend constexpr bool operator!=(Name a, Name b) { return a.id_ != b.id_; }

 private:
  uint32_t id_ = 0;
};

}  // namespace tenax
