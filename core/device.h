#pragma once
// Devices. Every tensor lives on one; operands of an op must share it; to(device) is the only transfer.
#include <cstdint>
#include <string>

namespace tenax {

/// A compute device: the host CPU or CUDA device `index`.
struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int16_t index = 0;

  /// The host CPU.
  static constexpr Device cpu() { return {Kind::cpu, 0}; }
  /// CUDA device `i`.
  static constexpr Device cuda(int i = 0) { return {Kind::cuda, static_cast<int16_t>(i)}; }
  /// "cpu" or "cuda:0".
  [[nodiscard]] std::string str() const {
    return kind == Kind::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
  }
  friend constexpr bool operator==(Device a, Device b) { return a.kind == b.kind && a.index == b.index; }
};

}  // namespace tenax
