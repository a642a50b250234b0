// Tensor: layout queries, element access and descriptions.
#include "tenax/core/tensor.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "tenax/core/ops/dispatch.h"

namespace tenax {

Tensor::Tensor(StoragePtr storage, int64_t offset, const Axes& axes, const int64_t* strides, DType dtype)
    : Tensor(Unchecked{}, std::move(storage), offset, axes, strides, dtype) {
  check_bounds();
}

Tensor::Tensor(Unchecked, StoragePtr storage, int64_t offset, const Axes& axes, const int64_t* strides, DType dtype)
    : storage_(std::move(storage)), offset_(offset), axes_(axes), dtype_(dtype) {
  std::copy(strides, strides + axes.rank(), strides_);
}

// The lowest and highest element the view addresses must lie in the storage. In 128 bits: sizes
// are at most 2^56 and strides any int64, so no term overflows.
namespace {
__extension__ typedef __int128 Wide;
}  // namespace

void Tensor::check_bounds() const {
  if (!storage_ || numel() == 0) return;
  Wide lo = offset_, hi = offset_;
  for (int i = 0; i < rank(); ++i) {
    const Wide reach = static_cast<Wide>(axes_.size(i) - 1) * strides_[i];
    (reach < 0 ? lo : hi) += reach;
  }
  const auto elements = static_cast<Wide>(storage_->bytes() / itemsize(dtype_));
  if (lo < 0 || hi >= elements)
    throw IndexError("[tensor] a view " + axes_.describe() + " at offset " + std::to_string(offset_) +
                     " reaches outside its buffer of " + std::to_string(static_cast<int64_t>(elements)) +
                     " elements");
}

int64_t Tensor::stride(Name n) const {
  int i = axes_.index_of(n);
  if (i < 0)
    throw AxisError("[stride] unknown axis '" + n.str() + "'; the tensor has axes " + axes_.describe());
  return strides_[i];
}

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (axes_.size(i) != 1 && strides_[i] != expect) return false;
    expect *= axes_.size(i);
  }
  return true;
}

bool Tensor::is_dense() const {
  int order[kMaxRank];
  int r = 0;
  for (int i = 0; i < rank(); ++i)
    if (axes_.size(i) != 1) order[r++] = i;
  for (int i = 1; i < r; ++i)  // insertion sort: r <= kMaxRank
    for (int j = i; j > 0 && strides_[order[j]] < strides_[order[j - 1]]; --j) std::swap(order[j], order[j - 1]);
  int64_t expect = 1;
  for (int k = 0; k < r; ++k) {
    if (strides_[order[k]] != expect) return false;
    expect *= axes_.size(order[k]);
  }
  return true;
}

void Tensor::check_dtype(DType want, const char* op) const {
  if (!defined()) throw Error(std::string("[") + op + "] the tensor is undefined");
  if (dtype_ != want)
    throw DTypeError(std::string("[") + op + "] the tensor is " + dtype_name(dtype_) + ", not " +
                     dtype_name(want));
}

namespace {
// Element `offset` as V: double (every real dtype) or std::complex<double> (every dtype).
template <class V>
V read(const Tensor& t, int64_t offset, const char* op) {
  const char* base = static_cast<const char*>(t.storage()->data());
  switch (t.dtype()) {
    case DType::f64: return reinterpret_cast<const double*>(base)[offset];
    case DType::f32: return reinterpret_cast<const float*>(base)[offset];
    case DType::i64: return static_cast<double>(reinterpret_cast<const int64_t*>(base)[offset]);
    case DType::b8: return reinterpret_cast<const bool*>(base)[offset] ? 1.0 : 0.0;
    case DType::c128:
    case DType::c64:
      if constexpr (std::is_same_v<V, double>) {
        throw DTypeError(std::string("[") + op + "] the tensor is " + dtype_name(t.dtype()) +
                         "; read complex values with item_complex, at_complex or to_complex_vector (or take real() first)");
      } else {
        if (t.dtype() == DType::c128) return reinterpret_cast<const std::complex<double>*>(base)[offset];
        return V(reinterpret_cast<const std::complex<float>*>(base)[offset]);
      }
  }
  return V(0);
}

void require_host(const Tensor& t, const char* op) {
  if (!t.defined()) throw Error(std::string("[") + op + "] the tensor is undefined");
  // A scan body or compiled function is traced once and replayed: a value read while tracing would
  // be baked in.
  if (detail::g_record_state.trace && t.var() >= 0 && t.tape_serial() == detail::g_record_state.serial)
    throw Error(std::string("[") + op + "] a " +
                (detail::g_record_state.traced ? detail::g_record_state.traced : "traced function") +
                " reads the value of a tensor computed from its inputs; it is traced once and replayed, so it must "
                "compute with tenax ops (use where() to branch)");
  if (t.device().kind != Device::Kind::cpu)
    throw DeviceError(std::string("[") + op + "] the tensor is on " + t.device().str() +
                      "; move it with to(Device::cpu()) first");
}
}  // namespace

template <class V>
V Tensor::item_as(const char* op) const {
  require_host(*this, op);
  if (numel() != 1)
    throw ShapeError(std::string("[") + op + "] needs exactly one element; the tensor has axes " + axes_.describe());
  return read<V>(*this, offset_, op);
}

template <class V>
V Tensor::at_as(std::initializer_list<std::pair<Name, int64_t>> index, const char* op) const {
  require_host(*this, op);
  const std::string o = std::string("[") + op + "] ";
  if (static_cast<int>(index.size()) != rank()) throw AxisError(o + "give one index per axis " + axes_.describe());
  int64_t off = offset_;
  for (const auto& [name, i] : index) {
    int k = axes_.index_of(name);
    if (k < 0) throw AxisError(o + "unknown axis '" + name.str() + "'; the tensor has axes " + axes_.describe());
    if (i < 0 || i >= axes_.size(k))
      throw IndexError(o + "index " + std::to_string(i) + " out of range for axis '" + name.str() +
                       "' of size " + std::to_string(axes_.size(k)));
    off += i * strides_[k];
  }
  return read<V>(*this, off, op);
}

template <class V>
std::vector<V> Tensor::to_vector_as(const AxisList& order, const char* op) const {
  require_host(*this, op);
  const std::string o = std::string("[") + op + "] ";
  int perm[kMaxRank];
  if (order.empty()) {
    for (int i = 0; i < rank(); ++i) perm[i] = i;
  } else {
    if (order.size() != rank()) throw AxisError(o + "order " + order.describe() + " must name every axis of " + axes_.describe());
    for (int i = 0; i < rank(); ++i) {
      perm[i] = axes_.index_of(order[i]);
      if (perm[i] < 0)
        throw AxisError(o + "unknown axis '" + order[i].str() + "'; the tensor has axes " + axes_.describe());
    }
  }
  if (numel()) (void)read<V>(*this, offset_, op);  // a complex tensor read as doubles: the Error first
  detail::check_memory_budget(Device::cpu(), numel() * int64_t{sizeof(V)}, "to_vector's host vector");
  std::vector<V> out;
  try {
    out.resize(static_cast<size_t>(numel()));
  } catch (const std::exception&) {  // bad_alloc or length_error: a huge broadcast view
    throw MemoryError(o + std::to_string(numel()) + " values of " + axes_.describe() + " do not fit in host memory");
  }
  int64_t idx[kMaxRank] = {};
  int64_t off = offset_;
  for (size_t n = 0; n < out.size(); ++n) {
    out[n] = read<V>(*this, off, op);
    for (int d = rank() - 1; d >= 0; --d) {
      int a = perm[d];
      off += strides_[a];
      if (++idx[d] < axes_.size(a)) break;
      off -= strides_[a] * axes_.size(a);
      idx[d] = 0;
    }
  }
  return out;
}

double Tensor::item() const { return item_as<double>("item"); }
std::complex<double> Tensor::item_complex() const { return item_as<std::complex<double>>("item_complex"); }
double Tensor::at(std::initializer_list<std::pair<Name, int64_t>> index) const { return at_as<double>(index, "at"); }
std::complex<double> Tensor::at_complex(std::initializer_list<std::pair<Name, int64_t>> index) const {
  return at_as<std::complex<double>>(index, "at_complex");
}
std::vector<double> Tensor::to_vector(const AxisList& order) const { return to_vector_as<double>(order, "to_vector"); }
std::vector<std::complex<double>> Tensor::to_complex_vector(const AxisList& order) const {
  return to_vector_as<std::complex<double>>(order, "to_complex_vector");
}

std::string Tensor::describe() const {
  if (!defined()) return "Tensor(undefined)";
  return std::string("Tensor(") + dtype_name(dtype_) + ", " + axes_.describe() + ", " + device().str() + ")";
}

}  // namespace tenax
