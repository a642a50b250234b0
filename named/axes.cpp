// Axes and AxisList: construction checks and descriptions used in every error message.
#include "tenax/named/axes.h"

#include "tenax/core/error.h"

namespace tenax {

AxisList::AxisList(std::initializer_list<Name> names) {
  for (Name n : names) push_back(n);
}

AxisList::AxisList(Name name) { push_back(name); }

bool AxisList::contains(Name n) const {
  for (int i = 0; i < n_; ++i)
    if (names_[i] == n) return true;
  return false;
}

void AxisList::push_back(Name n) {
  if (n.empty()) throw AxisError("[axes] an axis name must not be empty");
  if (contains(n)) throw AxisError("[axes] axis '" + n.str() + "' is named twice in " + describe());
  if (n_ >= kMaxRank)
    throw AxisError("[axes] more than " + std::to_string(kMaxRank) + " axes in " + describe());
  names_[n_++] = n;
}

std::string AxisList::describe() const {
  std::string s = "(";
  for (int i = 0; i < n_; ++i) {
    if (i) s += ", ";
    s += names_[i].str();
  }
  return s + ")";
}

Axes::Axes(std::initializer_list<Axis> axes) {
  for (const Axis& a : axes) push_back(a);
}

int64_t Axes::size_of(Name n, const char* op) const {
  int i = index_of(n);
  if (i < 0)
    throw AxisError(std::string("[") + op + "] unknown axis '" + n.str() + "'; the tensor has axes " +
                    describe());
  return sizes_[i];
}

int64_t Axes::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= sizes_[i];
  return n;
}

void Axes::check_size(int i) const {
  if (sizes_[i] < 0)
    throw ShapeError("[axes] axis '" + names_[i].str() + "' has negative size " + std::to_string(sizes_[i]));
  // Zero-size axes count as 1: strides are products of the other sizes and must fit too.
  int64_t n = 1;
  for (int k = 0; k < rank_; ++k) {
    const int64_t s = sizes_[k] == 0 ? 1 : sizes_[k];
    if (s > kMaxElements / n)
      throw ShapeError("[axes] " + describe() + " has more than 2^56 elements (the product of the sizes), the most a tensor may have");
    n *= s;
  }
}

void Axes::set_size(int i, int64_t s) {
  const int64_t old = sizes_[i];
  sizes_[i] = s;
  try {
    check_size(i);
  } catch (...) {
    sizes_[i] = old;
    throw;
  }
}

void Axes::push_back(Axis a) {
  if (a.name.empty()) throw AxisError("[axes] an axis name must not be empty");
  if (a.size < 0)
    throw ShapeError("[axes] axis '" + a.name.str() + "' has negative size " + std::to_string(a.size));
  if (contains(a.name))
    throw AxisError("[axes] axis '" + a.name.str() + "' appears twice: " + describe() + " + " +
                    a.name.str());
  if (rank_ >= kMaxRank)
    throw ShapeError("[axes] rank above " + std::to_string(kMaxRank) + " is not supported: " +
                     describe() + " + " + a.name.str());
  names_[rank_] = a.name;
  sizes_[rank_] = a.size;
  ++rank_;
  try {
    check_size(rank_ - 1);
  } catch (...) {
    --rank_;
    throw;
  }
}

void Axes::erase(int i) {
  for (int k = i; k + 1 < rank_; ++k) {
    names_[k] = names_[k + 1];
    sizes_[k] = sizes_[k + 1];
  }
  --rank_;
}

AxisList Axes::names() const {
  AxisList l;
  for (int i = 0; i < rank_; ++i) l.push_back(names_[i]);
  return l;
}

std::string Axes::describe() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += names_[i].str() + "=" + std::to_string(sizes_[i]);
  }
  return s + ")";
}

bool Axes::same_set(const Axes& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    int j = other.index_of(names_[i]);
    if (j < 0 || other.sizes_[j] != sizes_[i]) return false;
  }
  return true;
}

}  // namespace tenax
