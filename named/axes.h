#pragma once
// Axes: an ordered list of named axes with sizes, stored inline (no heap), at most kMaxRank.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tenax/named/name.h"

namespace tenax {

/// Largest rank a tensor may have; shapes are stored inline so small ops never allocate.
inline constexpr int kMaxRank = 8;

/// Most elements a tensor (or a view, or a broadcast) may have: the product of its nonzero sizes
/// is at most 2^56. No host or device addresses more than 2^57 bytes, and under this bound every
/// element count, stride and byte offset (elements x 16 bytes) fits in int64 with room to spare.
/// Axes enforce it wherever a size is set, so a product past it is a ShapeError naming the axes
/// before anything is allocated.
inline constexpr int64_t kMaxElements = int64_t{1} << 56;

/// One named axis.
struct Axis {
  Name name;
  int64_t size = 0;
};

/// An ordered list of axis names (no sizes): reduction axes, contraction axes, orders.
class AxisList {
 public:
  AxisList() = default;
  /// Names in order; throws when more than kMaxRank or repeated.
  AxisList(std::initializer_list<Name> names);
  /// One name (explicit, so an overload taking Name is never ambiguous with one taking a list).
  explicit AxisList(Name name);

  [[nodiscard]] int size() const { return n_; }
  [[nodiscard]] bool empty() const { return n_ == 0; }
  [[nodiscard]] Name operator[](int i) const { return names_[i]; }
  [[nodiscard]] bool contains(Name n) const;
  /// Appends a name; throws when full or repeated.
  void push_back(Name n);
  [[nodiscard]] const Name* begin() const { return names_; }
  [[nodiscard]] const Name* end() const { return names_ + n_; }
  /// "(i, j)".
  [[nodiscard]] std::string describe() const;

 private:
  Name names_[kMaxRank];
  uint8_t n_ = 0;
};

/// Ordered axes with sizes. Order is memory layout, not meaning; names are unique.
class Axes {
 public:
  Axes() = default;
  /// Axes in order; throws on duplicates, negative sizes, more than kMaxRank axes, or more than
  /// kMaxElements elements.
  Axes(std::initializer_list<Axis> axes);

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] Name name(int i) const { return names_[i]; }
  [[nodiscard]] int64_t size(int i) const { return sizes_[i]; }
  [[nodiscard]] Axis operator[](int i) const { return {names_[i], sizes_[i]}; }
  /// Position of `n`, or -1.
  [[nodiscard]] int index_of(Name n) const {
    for (int i = 0; i < rank_; ++i)
      if (names_[i] == n) return i;
    return -1;
  }
  [[nodiscard]] bool contains(Name n) const { return index_of(n) >= 0; }
  /// Size of axis `n`; throws AxisError naming `op` when absent.
  [[nodiscard]] int64_t size_of(Name n, const char* op = "axes") const;
  /// Product of the sizes (1 for rank 0); at most kMaxElements.
  [[nodiscard]] int64_t numel() const;
  /// Appends an axis; throws on a duplicate name, a negative size, when full, or when the product
  /// of the sizes would pass kMaxElements.
  void push_back(Axis a);
  /// Sets the size of axis i; throws as push_back does.
  void set_size(int i, int64_t s);
  /// Renames axis i (the caller checks uniqueness).
  void set_name(int i, Name n) { names_[i] = n; }
  /// Removes axis i.
  void erase(int i);
  /// The names in order.
  [[nodiscard]] AxisList names() const;
  /// "(i=3, j=4)".
  [[nodiscard]] std::string describe() const;
  /// Same names in the same order with the same sizes (inline: the tape and the eager ops'
  /// layout checks compare small axes on every call).
  friend bool operator==(const Axes& a, const Axes& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.names_[i] != b.names_[i] || a.sizes_[i] != b.sizes_[i]) return false;
    return true;
  }
  /// Same set of named axes with the same sizes, in any order.
  [[nodiscard]] bool same_set(const Axes& other) const;

 private:
  /// Throws ShapeError when axis i's size is negative or the sizes' product passes kMaxElements.
  void check_size(int i) const;

  Name names_[kMaxRank];
  int64_t sizes_[kMaxRank] = {};
  uint8_t rank_ = 0;
};

}  // namespace tenax
