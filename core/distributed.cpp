// Communicators and the failure-aware exchange under every collective.
#include "tenax/core/distributed.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "tenax/core/distributed_impl.h"

namespace tenax {
namespace detail {
namespace {

// This process alone.
class SelfTransport final : public Transport {
 public:
  [[nodiscard]] int rank() const override { return 0; }
  [[nodiscard]] int size() const override { return 1; }
  void allgather(const void* send, int64_t bytes, void* recv) override {
    if (bytes > 0) std::memcpy(recv, send, static_cast<size_t>(bytes));
  }
  void allgatherv(const void* send, const std::vector<int64_t>& counts, void* recv) override {
    if (counts[0] > 0) std::memcpy(recv, send, static_cast<size_t>(counts[0]));
  }
  [[nodiscard]] const void* key() const override { return this; }
  [[nodiscard]] const char* kind() const override { return "self"; }
};

// What each rank says before every exchange.
struct Header {
  int64_t failed;  // 0: ok; otherwise the ErrorClass of the failure
  int64_t bytes;   // bytes this rank contributes (its message when failed)
};

// The class of a failure, so that every rank raises the same class.
enum ErrorClass : int64_t { kError = 1, kAxis, kShape, kDType, kIndex, kDevice, kNumeric, kAutodiff, kModel, kMemory, kOther };

ErrorClass class_of(const Error& e) {
  if (dynamic_cast<const AxisError*>(&e)) return kAxis;
  if (dynamic_cast<const ShapeError*>(&e)) return kShape;
  if (dynamic_cast<const DTypeError*>(&e)) return kDType;
  if (dynamic_cast<const IndexError*>(&e)) return kIndex;
  if (dynamic_cast<const DeviceError*>(&e)) return kDevice;
  if (dynamic_cast<const NumericError*>(&e)) return kNumeric;
  if (dynamic_cast<const AutodiffError*>(&e)) return kAutodiff;
  if (dynamic_cast<const ModelError*>(&e)) return kModel;
  if (dynamic_cast<const MemoryError*>(&e)) return kMemory;
  return kError;
}

ErrorClass class_of(std::exception_ptr e, std::string& message) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    message = x.what();
    return class_of(x);
  } catch (const std::exception& x) {
    message = x.what();
    return kOther;
  } catch (...) {
    message = "an exception that is not a std::exception";
    return kOther;
  }
}

// The message of the Error this thread last raised because a rank failed: an exception with it
// is already known to every rank and is not announced again.
thread_local std::string g_agreed;

[[noreturn]] void throw_class(int64_t c, const std::string& m) {
  g_agreed = m;
  switch (c) {
    case kAxis: throw AxisError(m);
    case kShape: throw ShapeError(m);
    case kDType: throw DTypeError(m);
    case kIndex: throw IndexError(m);
    case kDevice: throw DeviceError(m);
    case kNumeric: throw NumericError(m);
    case kAutodiff: throw AutodiffError(m);
    case kModel: throw ModelError(m);
    case kMemory: throw MemoryError(m);
    default: throw Error(m);
  }
}

// Every rank received the headers and saw a failure: the messages travel, and the lowest failing
// rank's class and message become every rank's Error.
[[noreturn]] void raise_agreed(Transport& t, const std::vector<Header>& h, const std::string& mine) {
  std::vector<int64_t> counts(h.size());
  for (size_t r = 0; r < h.size(); ++r) counts[r] = h[r].failed ? h[r].bytes : 0;
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  std::vector<char> all(static_cast<size_t>(total));
  t.allgatherv(mine.data(), counts, all.data());
  size_t first = 0;
  while (!h[first].failed) ++first;
  int64_t at = 0;
  for (size_t r = 0; r < first; ++r) at += counts[r];
  std::string others;
  for (size_t r = first + 1; r < h.size(); ++r)
    if (h[r].failed) others += (others.empty() ? "" : ", ") + std::to_string(r);
  const std::string m = "[mpi] rank " + std::to_string(first) + " of " + std::to_string(h.size()) + " failed: " +
                        std::string(all.data() + at, static_cast<size_t>(counts[first])) +
                        (others.empty() ? "" : " (ranks " + others + " failed too)");
  throw_class(h[first].failed, m);
}

std::vector<Header> headers(Transport& t, const Header& mine) {
  std::vector<Header> h(static_cast<size_t>(t.size()));
  t.allgather(&mine, sizeof(Header), h.data());
  return h;
}

}  // namespace

std::vector<char> exchange(Transport& t, const void* data, int64_t bytes, std::vector<int64_t>& counts) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Header> h = headers(t, Header{0, bytes});
  for (const Header& x : h)
    if (x.failed) raise_agreed(t, h, std::string());
  counts.resize(h.size());
  int64_t total = 0;
  for (size_t r = 0; r < h.size(); ++r) total += counts[r] = h[r].bytes;
  std::vector<char> all(static_cast<size_t>(total));
  t.allgatherv(data, counts, all.data());
  t.collectives.fetch_add(1, std::memory_order_relaxed);
  t.bytes_received.fetch_add(total, std::memory_order_relaxed);
  t.seconds.fetch_add(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                      std::memory_order_relaxed);
  return all;
}

void announce_failure(Transport& t, std::exception_ptr e) {
  if (t.size() == 1) std::rethrow_exception(e);  // nobody else to tell
  std::string message;
  const ErrorClass c = class_of(e, message);
  if (!g_agreed.empty() && message == g_agreed) std::rethrow_exception(e);
  const std::vector<Header> h = headers(t, Header{c, static_cast<int64_t>(message.size())});
  raise_agreed(t, h, message);
}

void agree(Transport& t) {
  g_agreed.clear();
  std::vector<int64_t> counts;
  (void)exchange(t, nullptr, 0, counts);
}

}  // namespace detail

// ---- Communicator ----
// Every one-process communicator is the same one: the shardings made over it are interned once.
Communicator::Communicator() {
  static const std::shared_ptr<detail::Transport> self = std::make_shared<detail::SelfTransport>();
  t_ = self;
}
Communicator::Communicator(std::shared_ptr<detail::Transport> t) : t_(std::move(t)) {}
Communicator Communicator::world() { return Communicator(detail::mpi_world_transport()); }
int Communicator::rank() const { return t_->rank(); }
int Communicator::size() const { return t_->size(); }
CommStats Communicator::stats() const {
  return {t_->collectives.load(), t_->bytes_received.load(), t_->seconds.load()};
}
void Communicator::reset_stats() const {
  t_->collectives = 0;
  t_->bytes_received = 0;
  t_->seconds = 0.0;
}
bool Communicator::operator==(const Communicator& other) const { return t_->key() == other.t_->key(); }

Block Communicator::block(int64_t global, int rank) const {
  const int64_t n = size();
  if (rank < 0 || rank >= n)
    throw IndexError("[block] rank " + std::to_string(rank) + " of a communicator of " + std::to_string(n));
  if (global < n)
    throw ShapeError("[block] an axis of " + std::to_string(global) + " cannot give each of " + std::to_string(n) +
                     " ranks an element");
  const int64_t base = global / n, extra = global % n;
  return Block{rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

}  // namespace tenax
