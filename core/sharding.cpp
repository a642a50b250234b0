// Tensors split across ranks: the table of shardings they refer to, the all-reduces over ranks,
// and shard / sharding / gather / local_part.
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>

#include "tenax/core/distributed_impl.h"
#include "tenax/core/ops/collective.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax {
namespace detail {

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
