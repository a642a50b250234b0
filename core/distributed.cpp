// Communicators, the failure-aware exchange under every collective, and the sharding table.
#include "tenax/core/distributed.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>

#include "tenax/core/distributed_impl.h"
#include "tenax/core/ops/collective.h"
#include "tenax/core/ops/dispatch.h"

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

ErrorClass class_of(std::exception_ptr e, std::string& message) {
  try {
    std::rethrow_exception(e);
  } catch (const AxisError& x) {
    message = x.what();
    return kAxis;
  } catch (const ShapeError& x) {
    message = x.what();
    return kShape;
  } catch (const DTypeError& x) {
    message = x.what();
    return kDType;
  } catch (const IndexError& x) {
    message = x.what();
    return kIndex;
  } catch (const DeviceError& x) {
    message = x.what();
    return kDevice;
  } catch (const NumericError& x) {
    message = x.what();
    return kNumeric;
  } catch (const AutodiffError& x) {
    message = x.what();
    return kAutodiff;
  } catch (const ModelError& x) {
    message = x.what();
    return kModel;
  } catch (const MemoryError& x) {
    message = x.what();
    return kMemory;
  } catch (const Error& x) {
    message = x.what();
    return kError;
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

// ---- the sharding table ----
namespace {
constexpr size_t kShardings = 65536;
std::array<std::atomic<const Sharding*>, kShardings> g_table{};
std::mutex g_table_mutex;
std::deque<Sharding> g_store;  // stable addresses
}  // namespace

uint16_t intern_sharding(const Sharding& s) {
  const std::lock_guard<std::mutex> lock(g_table_mutex);
  for (size_t i = 0; i < g_store.size(); ++i) {
    const Sharding& x = g_store[i];
    if (x.axis == s.axis && x.global == s.global && x.block.offset == s.block.offset &&
        x.block.size == s.block.size && x.comm == s.comm)
      return static_cast<uint16_t>(i + 1);
  }
  if (g_store.size() + 1 >= kShardings)
    throw Error("[shard] more than 65535 different shardings in one process");
  g_store.push_back(s);
  g_table[g_store.size()].store(&g_store.back(), std::memory_order_release);
  return static_cast<uint16_t>(g_store.size());
}

const Sharding& sharding_of(uint16_t id) { return *g_table[id].load(std::memory_order_acquire); }

Tensor with_shard(const Tensor& t, uint16_t id) {
  Tensor out = t;
  TensorAccess::set_shard(out, id);
  return out;
}

// ---- reductions over ranks ----
std::vector<char> host_bytes(const Tensor& t) {
  const Tensor c = t.is_contiguous() ? t : copy_of(t);
  const size_t n = static_cast<size_t>(t.numel()) * itemsize(t.dtype());
  std::vector<char> out(n);
  if (n == 0) return out;
  if (t.device().kind == Device::Kind::cpu) {
    std::memcpy(out.data(), c.data_ptr(), n);
  } else {
    need(kernels(t.device()).transfer, "collective", t.device())(out.data(), Device::cpu(), c.data_ptr(), t.device(), n);
  }
  return out;
}

Tensor from_host(const void* bytes, const Axes& axes, DType dtype, Device device) {
  Tensor out = empty(axes, dtype, device);
  const size_t n = static_cast<size_t>(out.numel()) * itemsize(dtype);
  if (n == 0) return out;
  if (device.kind == Device::Kind::cpu)
    std::memcpy(out.data_ptr(), bytes, n);
  else
    need(kernels(device).transfer, "collective", device)(out.data_ptr(), device, bytes, Device::cpu(), n);
  return out;
}

namespace {

template <class T, bool Max>
void combine(const char* all, int ranks, int64_t n, T* out) {
  const T* p = reinterpret_cast<const T*>(all);
  std::memcpy(out, p, static_cast<size_t>(n) * sizeof(T));
  for (int r = 1; r < ranks; ++r) {
    const T* q = p + static_cast<int64_t>(r) * n;
    for (int64_t i = 0; i < n; ++i) out[i] = Max ? (q[i] > out[i] || q[i] != q[i] ? q[i] : out[i]) : out[i] + q[i];
  }
}

template <bool Max>
Tensor all_reduce(const Tensor& partial, Transport& t) {
  (void)float_index(partial.dtype(), Max ? "all_reduce_max" : "all_reduce_sum");
  const std::vector<char> mine = host_bytes(partial);
  std::vector<int64_t> counts;
  const std::vector<char> all = exchange(t, mine.data(), static_cast<int64_t>(mine.size()), counts);
  const int64_t n = partial.numel();
  std::vector<char> out(mine.size());
  if (partial.dtype() == DType::f64)
    combine<double, Max>(all.data(), t.size(), n, reinterpret_cast<double*>(out.data()));
  else
    combine<float, Max>(all.data(), t.size(), n, reinterpret_cast<float*>(out.data()));
  return from_host(out.data(), partial.axes(), partial.dtype(), partial.device());
}

}  // namespace

Tensor all_reduce_sum(const Tensor& partial, Transport& t) { return all_reduce<false>(partial, t); }
Tensor all_reduce_max(const Tensor& partial, Transport& t) { return all_reduce<true>(partial, t); }

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

// ---- sharded tensors ----
Tensor shard(const Tensor& local, Name axis, const Communicator& comm) {
  if (!local.defined()) throw Error("[shard] the tensor is undefined");
  if (!local.has_axis(axis))
    throw AxisError("[shard] the tensor " + local.axes().describe() + " has no axis '" + axis.str() + "'");
  if (local.shard_id() != 0)
    throw AxisError("[shard] the tensor is sharded already (along '" +
                    detail::sharding_of(local.shard_id()).axis.str() + "')");
  const int64_t mine = local.size(axis);
  std::vector<int64_t> counts;
  const std::vector<char> all = detail::exchange(comm.transport(), &mine, sizeof mine, counts);
  const auto* sizes = reinterpret_cast<const int64_t*>(all.data());
  int64_t offset = 0, global = 0;
  for (int r = 0; r < comm.size(); ++r) {
    if (sizes[r] < 1)
      throw ShapeError("[shard] rank " + std::to_string(r) + " holds no element of '" + axis.str() +
                       "'; every rank needs at least one (Communicator::block splits an axis so)");
    if (r < comm.rank()) offset += sizes[r];
    global += sizes[r];
  }
  return detail::with_shard(local, detail::intern_sharding({axis, global, {offset, mine}, comm}));
}

std::optional<ShardInfo> sharding(const Tensor& t) {
  if (t.shard_id() == 0) return std::nullopt;
  const detail::Sharding& s = detail::sharding_of(t.shard_id());
  return ShardInfo{s.axis, s.global, s.block, s.comm};
}

namespace {
std::atomic<int64_t> g_gather_warning{int64_t{64} << 20};
std::atomic<bool> g_gather_warned{false};
}  // namespace

int64_t gather_warning_bytes() { return g_gather_warning.load(); }
void set_gather_warning_bytes(int64_t bytes) { g_gather_warning.store(bytes); }

Tensor gather(const Tensor& t) {
  if (!t.defined()) throw Error("[gather] the tensor is undefined");
  if (t.shard_id() == 0) return t;
  const detail::Sharding& s = detail::sharding_of(t.shard_id());
  const int64_t bytes = t.numel() / s.block.size * s.global * static_cast<int64_t>(itemsize(t.dtype()));
  if (bytes > gather_warning_bytes() && !g_gather_warned.exchange(true))
    std::fprintf(stderr, "tenax: gather moves %lld bytes (%s) into every rank (said once; set_gather_warning_bytes)\n",
                 static_cast<long long>(bytes), t.axes().describe().c_str());
  Attrs a;
  a.i[0] = t.shard_id();
  a.axes = AxisList{s.axis};
  return detail::apply(detail::op_all_gather, t, a);
}

Tensor local_part(const Tensor& t) {
  Tensor out = detail::with_shard(t, 0);
  detail::TensorAccess::set_var(out, -1, 0);
  return out;
}

}  // namespace tenax
