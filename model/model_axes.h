#pragma once
// The axes a model file declares: names with sizes, in any number. A tensor has at most 8 axes
// (named/axes.h), but a model names every axis of every tensor it holds.
#include <cstdint>
#include <string>
#include <vector>

#include "tenax/named/axes.h"

namespace tenax {

class ModelAxes {
 public:
  /// Declares `name` with `size` (>= 1); throws Error when it is declared already.
  void add(Name name, int64_t size);
  [[nodiscard]] bool contains(Name name) const;
  /// The declared size; throws ModelError naming the declared axes when `name` is not one.
  [[nodiscard]] int64_t size_of(Name name) const;
  /// "(a=2, b=3)", in declaration order.
  [[nodiscard]] std::string describe() const;
  [[nodiscard]] const std::vector<Axis>& list() const { return list_; }

 private:
  std::vector<Axis> list_;
};

}  // namespace tenax
