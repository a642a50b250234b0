// The intern table behind tenax::Name: append-only, lock-free reads, one mutex for inserts.
#include "tenax/named/name.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "tenax/core/error.h"

namespace tenax {
namespace {

constexpr uint32_t kMaxNames = 1u << 16;

struct InternTable {
  std::mutex mutex;
  std::unordered_map<std::string, uint32_t> ids;
  std::array<std::atomic<const std::string*>, kMaxNames> texts{};
  uint32_t next = 1;
  std::string empty;
};

InternTable& table() {
  static InternTable* t = new InternTable();  // never destroyed: names may be used at exit
  return *t;
}

}  // namespace

Name::Name(std::string_view text) {
  if (text.empty()) throw AxisError("[name] an axis name must not be empty");
  InternTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.ids.find(std::string(text));
  if (it != t.ids.end()) {
    id_ = it->second;
    return;
  }
  if (t.next >= kMaxNames) throw AxisError("[name] too many distinct axis names (limit 65535)");
  auto [pos, inserted] = t.ids.emplace(std::string(text), t.next);
  t.texts[t.next].store(&pos->first, std::memory_order_release);
  id_ = t.next++;
}

const std::string& Name::str() const {
  if (id_ == 0) return table().empty;
  return *table().texts[id_].load(std::memory_order_acquire);
}

}  // namespace tenax
