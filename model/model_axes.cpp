// The axes a model declares.
#include "tenax/model/model_axes.h"

#include "tenax/core/error.h"

namespace tenax {

void ModelAxes::add(Name name, int64_t size) {
  if (contains(name)) throw ModelError("/axes: axis '" + name.str() + "' is declared twice");
  if (size < 1) throw ModelError("/axes/" + name.str() + ": a size must be at least 1");
  list_.push_back({name, size});
}

bool ModelAxes::contains(Name name) const {
  for (const Axis& a : list_)
    if (a.name == name) return true;
  return false;
}

int64_t ModelAxes::size_of(Name name) const {
  for (const Axis& a : list_)
    if (a.name == name) return a.size;
  throw ModelError("/axes: the model declares no axis '" + name.str() + "' (it declares " + describe() + ")");
}

std::string ModelAxes::describe() const {
  std::string s = "(";
  for (size_t k = 0; k < list_.size(); ++k)
    s += (k ? ", " : "") + list_[k].name.str() + "=" + std::to_string(list_[k].size);
  return s + ")";
}

}  // namespace tenax
