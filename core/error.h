#pragma once
// tenax::Error and its subclasses. A leaf header: every layer may include it.
#include <stdexcept>
#include <string>

namespace tenax {

/// Base of every exception Tenax throws. Messages start with "[op]" and name axes and sizes.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// An unknown, repeated or forbidden axis name.
class AxisError : public Error {
 public:
  using Error::Error;
};
/// Sizes that do not agree (same axis name, different sizes; wrong extent).
class ShapeError : public Error {
 public:
  using Error::Error;
};
/// A dtype an op does not accept, or operands of different dtypes.
class DTypeError : public Error {
 public:
  using Error::Error;
};
/// An index or slice out of range.
class IndexError : public Error {
 public:
  using Error::Error;
};
/// Operands on different devices, or a device that is not available.
class DeviceError : public Error {
 public:
  using Error::Error;
};
/// A numerical failure the caller must handle (a matrix that is not positive definite, singular).
class NumericError : public Error {
 public:
  using Error::Error;
};
/// Misuse of the differentiation API (no gradient path, a non-scalar loss, a finished tape).
class AutodiffError : public Error {
 public:
  using Error::Error;
};
/// A model description (JSON) that is malformed or inconsistent; the message starts with the JSON
/// pointer of the offending value (e.g. "/graph/3/inputs/1").
class ModelError : public Error {
 public:
  using Error::Error;
};
/// A request the allocator cannot satisfy.
class MemoryError : public Error {
 public:
  using Error::Error;
};

}  // namespace tenax
