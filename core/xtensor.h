#pragma once
// Interop with xtensor (the one header that includes it; Debian 12 ships xtensor 0.24, whose
// headers live at <xtensor/*.hpp>; 0.26 moved them, so a version change touches this file only).
//
// to_xtensor: always zero-copy, a strided adaptor over the tensor's memory; the tensor (or another
//   tensor sharing its buffer) must outlive the adaptor.
// from_xtensor(xt::xarray&&): zero-copy, the tensor takes ownership of the moved array's storage
//   (its strides are carried over as they are).
// from_xtensor(const expression&): evaluates the expression into a new array: one copy.
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include <vector>

#include "tenax/core/tensor.h"

namespace tenax {

/// A zero-copy xtensor view of a host tensor of element type T, axes in the tensor's order.
template <class T>
auto to_xtensor(const Tensor& t) {
  if (t.device().kind != Device::Kind::cpu)
    throw DeviceError("[to_xtensor] the tensor is on " + t.device().str() + "; move it to the host first");
  std::vector<std::size_t> shape(static_cast<std::size_t>(t.rank()));
  std::vector<std::ptrdiff_t> strides(static_cast<std::size_t>(t.rank()));
  for (int i = 0; i < t.rank(); ++i) {
    if (t.strides()[i] < 0) throw Error("[to_xtensor] negative strides are not supported");
    shape[static_cast<std::size_t>(i)] = static_cast<std::size_t>(t.axes().size(i));
    strides[static_cast<std::size_t>(i)] = static_cast<std::ptrdiff_t>(t.strides()[i]);
  }
  // xtensor sizes an adaptor's buffer by its element count; strided access stays inside the
  // tensor's buffer because the strides come from it.
  return xt::adapt(t.data<T>(), static_cast<std::size_t>(t.numel()), xt::no_ownership(), shape, strides);
}

/// Takes ownership of `a`'s storage (no copy) and names its axes `names` (one per dimension).
template <class T>
Tensor from_xtensor(xt::xarray<T>&& a, const AxisList& names) {
  if (static_cast<int>(a.dimension()) != names.size())
    throw AxisError("[from_xtensor] the array has " + std::to_string(a.dimension()) + " dimensions but " +
                    names.describe() + " names " + std::to_string(names.size()));
  Axes axes;
  int64_t strides[kMaxRank] = {};
  for (int i = 0; i < names.size(); ++i) {
    const auto d = static_cast<std::size_t>(i);
    axes.push_back({names[i], static_cast<int64_t>(a.shape()[d])});
    strides[i] = a.shape()[d] == 1 ? 0 : static_cast<int64_t>(a.strides()[d]);
  }
  auto* owner = new xt::xarray<T>(std::move(a));
  Storage* s = Storage::wrap(owner->data(), owner->size() * sizeof(T), Device::cpu(),
                             [](void* ctx) { delete static_cast<xt::xarray<T>*>(ctx); }, owner);
  return Tensor(StoragePtr(s), 0, axes, strides, dtype_of<T>::value);
}

/// Evaluates any xtensor expression into a new tensor (one copy).
/// (An rvalue xt::xarray picks the zero-copy overload above.)
template <class E>
Tensor from_xtensor(const E& expression, const AxisList& names) {
  xt::xarray<typename E::value_type> copy = expression;
  return from_xtensor(std::move(copy), names);
}

}  // namespace tenax
