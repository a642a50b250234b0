#pragma once
// The one tensor type: a strided, reference-counted view of a buffer whose every axis has a name.
#include <cstdint>
#include <string>
#include <vector>

#include "tenax/core/device.h"
#include "tenax/core/dtype.h"
#include "tenax/core/error.h"
#include "tenax/core/storage.h"
#include "tenax/named/axes.h"

namespace tenax {

namespace detail {
struct TensorAccess;
}

/// A named-axis tensor. Copies share the buffer (like views); ops that change layout without
/// changing values (slice, select, transpose, rename, broadcast) return views and never copy.
/// Shape and strides live inline, so small tensors cost one pooled buffer and no other allocation.
class Tensor {
 public:
  /// An undefined tensor (no buffer).
  Tensor() = default;
  /// A view of `storage` starting `offset` elements in, with the given axes and element strides.
  /// Throws IndexError when the view reaches outside the storage (checked without overflow).
  Tensor(StoragePtr storage, int64_t offset, const Axes& axes, const int64_t* strides, DType dtype);

  /// True when the tensor has a buffer.
  [[nodiscard]] bool defined() const { return static_cast<bool>(storage_); }
  /// Named axes in layout order.
  [[nodiscard]] const Axes& axes() const { return axes_; }
  [[nodiscard]] int rank() const { return axes_.rank(); }
  /// Size of axis `n`; throws AxisError when absent.
  [[nodiscard]] int64_t size(Name n) const { return axes_.size_of(n, "size"); }
  [[nodiscard]] int64_t numel() const { return axes_.numel(); }
  [[nodiscard]] bool has_axis(Name n) const { return axes_.contains(n); }
  [[nodiscard]] DType dtype() const { return dtype_; }
  [[nodiscard]] Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  /// Element strides, one per axis in layout order.
  [[nodiscard]] const int64_t* strides() const { return strides_; }
  /// Element stride of axis `n`; throws AxisError when absent.
  [[nodiscard]] int64_t stride(Name n) const;
  /// Offset of element 0 into the buffer, in elements.
  [[nodiscard]] int64_t offset() const { return offset_; }
  [[nodiscard]] const StoragePtr& storage() const { return storage_; }
  /// Address of element 0 (host or device memory).
  [[nodiscard]] void* data_ptr() const {
    return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(itemsize(dtype_));
  }
  /// Typed address of element 0; throws DTypeError when T does not match.
  template <class T>
  [[nodiscard]] T* data() const {
    check_dtype(dtype_of<T>::value, "data");
    return static_cast<T*>(data_ptr());
  }
  /// Row-major and dense in axis order.
  [[nodiscard]] bool is_contiguous() const;
  /// Every element has its own address and the elements fill a block (any axis order).
  [[nodiscard]] bool is_dense() const;

  /// The only element of a tensor with one element, as double (a complex tensor: DTypeError).
  [[nodiscard]] double item() const;
  /// Element at the named coordinates (every axis must be given), as double.
  [[nodiscard]] double at(std::initializer_list<std::pair<Name, int64_t>> index) const;
  /// All elements in row-major order of the axes (or of `order` when given), as double.
  [[nodiscard]] std::vector<double> to_vector(const AxisList& order = {}) const;
  /// The same three reads as complex numbers (any dtype; a real value has imaginary part 0).
  [[nodiscard]] std::complex<double> item_complex() const;
  [[nodiscard]] std::complex<double> at_complex(std::initializer_list<std::pair<Name, int64_t>> index) const;
  [[nodiscard]] std::vector<std::complex<double>> to_complex_vector(const AxisList& order = {}) const;
  /// "Tensor(float64, (i=3, j=4), cpu)".
  [[nodiscard]] std::string describe() const;

  /// Index of this tensor's variable on the tape that recorded it (-1: a constant).
  [[nodiscard]] int32_t var() const { return var_; }
  /// Serial of the recording session that owns var() (0: none).
  [[nodiscard]] uint32_t tape_serial() const { return tape_; }
  /// Which sharding (core/distributed.h) splits one of its axes across processes; 0: none, the
  /// tensor is whole on every process.
  [[nodiscard]] uint16_t shard_id() const { return shard_; }

 private:
  friend struct detail::TensorAccess;
  struct Unchecked {};
  /// The same view without the bounds check, for the library's own fresh buffers.
  Tensor(Unchecked, StoragePtr storage, int64_t offset, const Axes& axes, const int64_t* strides, DType dtype);
  void check_dtype(DType want, const char* op) const;
  template <class V>
  V item_as(const char* op) const;
  template <class V>
  V at_as(std::initializer_list<std::pair<Name, int64_t>> index, const char* op) const;
  template <class V>
  std::vector<V> to_vector_as(const AxisList& order, const char* op) const;
  void check_bounds() const;

  StoragePtr storage_;
  int64_t offset_ = 0;
  Axes axes_;
  int64_t strides_[kMaxRank] = {};
  DType dtype_ = DType::f64;
  uint16_t shard_ = 0;
  int32_t var_ = -1;
  uint32_t tape_ = 0;
};

namespace detail {
/// Library-internal access to a tensor's identity on the tape and to its layout.
struct TensorAccess {
  static void set_var(Tensor& t, int32_t var, uint32_t tape) {
    t.var_ = var;
    t.tape_ = tape;
  }
  static void set_shard(Tensor& t, uint16_t id) { t.shard_ = id; }
  static int64_t* strides(Tensor& t) { return t.strides_; }
  static Axes& axes(Tensor& t) { return t.axes_; }
  static int64_t& offset(Tensor& t) { return t.offset_; }
  /// Makes `t` undefined by dropping its storage and tape identity only (its axes and strides stay
  /// as they were): for a store of tensors that reads none without checking defined() first.
  static void release(Tensor& t) {
    t.storage_ = StoragePtr();
    t.var_ = -1;
    t.tape_ = 0;
    t.shard_ = 0;
  }
  /// A view the caller knows to lie within `storage` (a buffer it just allocated for it).
  static Tensor fresh(StoragePtr storage, const Axes& axes, const int64_t* strides, DType dtype) {
    return Tensor(Tensor::Unchecked{}, std::move(storage), 0, axes, strides, dtype);
  }
};
}  // namespace detail

}  // namespace tenax
