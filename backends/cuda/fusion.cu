// Fused chains for recorded programs (core/ops/capture.h): a run of small elementwise calls and
// contractions of one dtype becomes one kernel of one block that runs the calls in order, a block
// barrier between them (so a call reads what the previous ones wrote, whatever their index
// patterns). What it saves is the fixed cost of a kernel per call (launch, or a graph node's
// scheduling), which is most of the time of a small scan step. Each call keeps its own arithmetic:
// the same functors as the plain kernels (elementwise_functors.h) and the contraction's loop over
// k in order, so fused and plain calls compute the same sums in the same order (atomic additions
// into short reductions aside, whose order neither fixes).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/contract_index.h"
#include "tenax/backends/cuda/elementwise_functors.h"
#include "tenax/backends/cuda/fusion.h"
#include "tenax/backends/cuda/register.h"

namespace tenax::detail::cuda {
namespace {

using namespace cuda;  // the functors, the contraction's index arithmetic

// What a chain step computes: the functor of an elementwise kernel, or a contraction.
enum class Code : int16_t {
#define TENAX_UNARY(name, f, df, saves) fwd_##name, d_##name,
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(name, f, dfa, dfb, saves) fwd_##name, d_##name##_a, d_##name##_b,
#include "tenax/core/ops/elementwise.def"
  d_argmax_mask,
  d_softmax,
  copy,   ///< also the reverse rule D = 1
  scale,  ///< x * value
  fill,   ///< value
  dot,
};

// How a step stores its value: a reduction destination (zero strides over dims of size > 1) is
// added to with atomics (chains take short reductions only).
enum class Put : int8_t { assign, add, atomic_add };

constexpr int kOperands = 5;  // destination + up to four inputs
// Measured on an H100 (bench_cuda): one block beats a kernel per call for elementwise calls of
// up to ~1000 elements, but not for contractions with more than a few thousand multiply-adds.
constexpr int64_t kChainMax = 1024;         // elements (outputs) of one call: one pass of the block
constexpr int64_t kChainK = 64;             // a contraction's k extent
constexpr int64_t kChainWork = 8192;        // a contraction's multiply-adds
constexpr int64_t kShortReduce = 256;       // longer reductions use the block-reduction kernels
constexpr std::size_t kShared = 48 * 1024;  // a chain's headers and offsets, in shared memory

// One call of a chain. Its element offsets (int32, operand-major: operand a of element i at
// offsets[ofs + a * total + i]) are computed on the host when the chain is built, so the kernel
// does no index arithmetic: each step is one round of loads, the arithmetic and a store.
// A contraction's offsets: x, y, z of each output, then x, y of each k. A moving operand (a
// scan's slice copy) is `step` elements further per unit of the launch's index.
struct Head {
  Code code = Code::copy;
  Put put = Put::assign;
  int8_t arity = 0;    // inputs read after the destination
  int8_t moving = -1;  // the moving operand, or -1
  int32_t total = 0;
  int64_t step = 0;
  int32_t ofs = 0;
  int32_t k = 0;               // contractions
  double value = 0;            // fill / scale
  void* data[kOperands] = {};  // contractions: x, y, z
};

// The elementwise kernels the chains know: entry, code, inputs, accumulation, scalar operand.
struct Known {
  ElementwiseFn fn = nullptr;
  Code code = Code::copy;
  int8_t arity = 0;
  bool acc = false;
  int8_t scalar = -1;  // the operand holding a host double (fill / scale), -1: none
  int8_t dtype = 0;
};
std::vector<Known>& known() {
  static std::vector<Known> k;
  return k;
}
const Known* find(ElementwiseFn fn) {
  for (const Known& k : known())
    if (k.fn == fn) return &k;
  return nullptr;
}

template <class T>
__device__ inline T value_of(Code code, const T* in, double value) {
  switch (code) {
#define TENAX_UNARY(name, f, df, saves) \
  case Code::fwd_##name:                \
    return Fwd_##name<T>{}(in[0]);      \
  case Code::d_##name:                  \
    return D_##name<T>{}(in[0], in[1], in[2]);
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(name, f, dfa, dfb, saves)            \
  case Code::fwd_##name:                                  \
    return Fwd_##name<T>{}(in[0], in[1]);                 \
  case Code::d_##name##_a:                                \
    return D_##name##_a<T>{}(in[0], in[1], in[2], in[3]); \
  case Code::d_##name##_b:                                \
    return D_##name##_b<T>{}(in[0], in[1], in[2], in[3]);
#include "tenax/core/ops/elementwise.def"
    case Code::d_argmax_mask:
      return DArgmaxMask<T>{}(in[0], in[1], in[2]);
    case Code::d_softmax:
      return DSoftmax<T>{}(in[0], in[1], in[2]);
    case Code::copy:
      return in[0];
    case Code::scale:
      return Scaled<T>{static_cast<T>(value)}(in[0]);
    case Code::fill:
      return static_cast<T>(value);
    default:
      return T(0);
  }
}

template <class T>
__device__ inline void put(Put p, T* dst, T v) {
  if (p == Put::assign)
    *dst = v;
  else if (p == Put::add)
    *dst += v;
  else
    atomicAdd(dst, v);
}

// The chain's headers and offsets are copied to shared memory first; then each call in order,
// a thread per element, a barrier after each.
template <class T>
__global__ void chain_kernel(const int4* table, int words, int n, int64_t index) {
  extern __shared__ int4 shared[];
  for (int i = threadIdx.x; i < words; i += blockDim.x) shared[i] = table[i];
  __syncthreads();
  const auto* heads = reinterpret_cast<const Head*>(shared);
  const auto* ofs = reinterpret_cast<const int32_t*>(heads + n);
  for (int s = 0; s < n; ++s) {
    const Head& h = heads[s];
    const int32_t* o = ofs + h.ofs;
    for (int i = threadIdx.x; i < h.total; i += blockDim.x) {
      if (h.code == Code::dot) {
        const auto* x = static_cast<const T*>(h.data[0]);
        const auto* y = static_cast<const T*>(h.data[1]);
        const int32_t ox = o[i], oy = o[h.total + i];
        const int32_t* ko = o + 3 * h.total;
        T acc = T(0);
        for (int k = 0; k < h.k; ++k) acc += x[ox + ko[k]] * y[oy + ko[h.k + k]];
        put(h.put, static_cast<T*>(h.data[2]) + o[2 * h.total + i], acc);
        continue;
      }
      const int64_t shift = index * h.step;  // for the moving operand
      T in[kOperands - 1] = {};
#pragma unroll
      for (int a = 0; a < kOperands - 1; ++a)
        if (a < h.arity && h.data[a + 1])
          in[a] = static_cast<const T*>(
              h.data[a + 1])[o[(a + 1) * h.total + i] + (h.moving == a + 1 ? shift : 0)];
      put(h.put, static_cast<T*>(h.data[0]) + o[i] + (h.moving == 0 ? shift : 0),
          value_of<T>(h.code, in, h.value));
    }
    __syncthreads();  // the next call may read any element this one wrote
  }
}

// A moving call too large for a chain (a scan's slice copy of a wide x_t), alone: a grid of
// blocks, offsets computed per element.
struct Wide {
  int rank = 0;
  int8_t moving = 0;
  Put put = Put::assign;
  int64_t total = 0, step = 0;
  int64_t sizes[kMaxLoopRank] = {};
  void* data[2] = {};
  int64_t strides[2][kMaxLoopRank] = {};
};

template <class T>
__global__ void wide_kernel(Wide w, int64_t index) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t shift = index * w.step;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < w.total; i += stride) {
    int64_t off[2] = {w.moving == 0 ? shift : 0, w.moving == 1 ? shift : 0};
    int64_t rest = i;
    for (int d = w.rank - 1; d >= 0; --d) {
      const int64_t j = rest % w.sizes[d];
      rest /= w.sizes[d];
      off[0] += j * w.strides[0][d];
      off[1] += j * w.strides[1][d];
    }
    put(w.put, static_cast<T*>(w.data[0]) + off[0], static_cast<const T*>(w.data[1])[off[1]]);
  }
}

struct Chain {
  void* table = nullptr;  // headers, then offsets (device memory)
  int words = 0, n = 0, device = 0, threads = 32, dtype = 0;
  bool moves = false;  // a step has a moving operand
  bool wide = false;   // a Wide call instead of a table
  Wide w;
  int blocks = 1;
};

int64_t total_of(const LoopDims& d) {
  int64_t n = 1;
  for (int k = 0; k < d.rank; ++k) n *= d.sizes[k];
  return n;
}

// The reduced extent of a destination (product of the sizes of dims it has stride 0 over).
int64_t reduced_extent(const LoopDims& d, const LoopArg& dst) {
  int64_t n = 1;
  for (int k = 0; k < d.rank; ++k)
    if (d.sizes[k] > 1 && dst.strides[k] == 0) n *= d.sizes[k];
  return n;
}

// Whether every offset of an operand over `rank` dims fits int32.
bool fits(const int64_t* sizes, const int64_t* strides, int rank) {
  int64_t reach = 0;
  for (int d = 0; d < rank; ++d) reach += (sizes[d] - 1) * (strides[d] < 0 ? -strides[d] : strides[d]);
  return reach <= INT32_MAX;
}
bool fits(const ContractGroup& g) {
  return fits(g.sizes, g.x, g.rank) && fits(g.sizes, g.y, g.rank) && fits(g.sizes, g.z, g.rank);
}

int chain_key(const ChainCall& c) {
  if (c.dot) {
    const ContractArgs& a = *c.dot;
    const int64_t outputs = group_size(a.batch) * group_size(a.m) * group_size(a.n);
    const int64_t k = group_size(a.k);
    const bool small = outputs <= kChainMax && k <= kChainK && outputs * k <= kChainWork;
    // Real contractions only: the chains' kernels are float64 / float32 (a complex one runs alone).
    const bool real = c.dtype == 0 || c.dtype == 1;
    return real && small && fits(a.batch) && fits(a.m) && fits(a.n) && fits(a.k) ? c.dtype : -1;
  }
  const Known* k = find(c.fn);
  if (!k || total_of(*c.dims) > kChainMax) return -1;
  if (c.moving >= 0 && (k->scalar >= 0 || c.moving > k->arity || c.stride % (k->dtype == 0 ? 8 : 4) != 0))
    return -1;
  if (k->acc && reduced_extent(*c.dims, c.args[0]) >= kShortReduce) return -1;
  for (int a = 0; a <= k->arity + (k->scalar >= 0 ? 1 : 0); ++a)
    if (a != k->scalar && !fits(c.dims->sizes, c.args[a].strides, c.dims->rank)) return -1;
  return k->dtype;
}

// Appends the element offsets of a loop's operands (row-major over its dims), operand-major.
void append_offsets(const LoopDims& dims, const LoopArg* const* ops, int n, std::vector<int32_t>& out) {
  const int64_t total = total_of(dims);
  const std::size_t at = out.size();
  out.resize(at + static_cast<std::size_t>(n * total));
  for (int64_t i = 0; i < total; ++i) {
    int64_t rest = i;
    int64_t off[kOperands] = {};
    for (int d = dims.rank - 1; d >= 0; --d) {
      const int64_t j = rest % dims.sizes[d];
      rest /= dims.sizes[d];
      for (int a = 0; a < n; ++a) off[a] += ops[a] ? j * ops[a]->strides[d] : 0;
    }
    for (int a = 0; a < n; ++a)
      out[at + static_cast<std::size_t>(a * total + i)] = static_cast<int32_t>(off[a]);
  }
}

// Offsets of one index of a contraction group (row-major over its dims) into x, y and z.
void group_at(const ContractGroup& g, int64_t i, int64_t* o) {
  o[0] = o[1] = o[2] = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t j = i % g.sizes[d];
    i /= g.sizes[d];
    o[0] += j * g.x[d];
    o[1] += j * g.y[d];
    o[2] += j * g.z[d];
  }
}

Head head_of(const ChainCall& c, std::vector<int32_t>& ofs) {
  Head h;
  h.ofs = static_cast<int32_t>(ofs.size());
  if (c.dot) {
    const ContractArgs& a = *c.dot;
    const int64_t M = group_size(a.m), N = group_size(a.n), K = group_size(a.k);
    h.code = Code::dot;
    h.put = a.accumulate ? Put::add : Put::assign;
    h.total = static_cast<int32_t>(group_size(a.batch) * M * N);
    h.k = static_cast<int32_t>(K);
    h.data[0] = const_cast<void*>(a.x);
    h.data[1] = const_cast<void*>(a.y);
    h.data[2] = a.z;
    const std::size_t at = ofs.size();
    ofs.resize(at + static_cast<std::size_t>(3 * h.total + 2 * K));
    for (int64_t i = 0; i < h.total; ++i) {
      int64_t b[3], m[3], n[3];
      group_at(a.batch, i / (M * N), b);
      group_at(a.m, (i / N) % M, m);
      group_at(a.n, i % N, n);
      for (int p = 0; p < 3; ++p)
        ofs[at + static_cast<std::size_t>(p * h.total + i)] = static_cast<int32_t>(b[p] + m[p] + n[p]);
    }
    for (int64_t k = 0; k < K; ++k) {
      int64_t o[3];
      group_at(a.k, k, o);
      ofs[at + static_cast<std::size_t>(3 * h.total + k)] = static_cast<int32_t>(o[0]);
      ofs[at + static_cast<std::size_t>(3 * h.total + K + k)] = static_cast<int32_t>(o[1]);
    }
    return h;
  }
  const Known& k = *find(c.fn);
  h.code = k.code;
  h.arity = k.arity;
  h.total = static_cast<int32_t>(total_of(*c.dims));
  if (k.acc) h.put = reduced_extent(*c.dims, c.args[0]) > 1 ? Put::atomic_add : Put::add;
  if (c.moving >= 0) {
    h.moving = static_cast<int8_t>(c.moving);
    h.step = c.stride / (k.dtype == 0 ? 8 : 4);
  }
  const LoopArg* ops[kOperands] = {};
  int operand = 0;
  for (int a = 0; a <= k.arity + (k.scalar >= 0 ? 1 : 0); ++a) {
    if (a == k.scalar) {
      h.value = *static_cast<const double*>(c.args[a].data);  // fixed at capture, as in a graph
      continue;
    }
    h.data[operand] = c.args[a].data;
    ops[operand++] = c.args[a].data ? &c.args[a] : nullptr;
  }
  append_offsets(*c.dims, ops, operand, ofs);
  return h;
}

std::size_t bytes_of(std::size_t heads, std::size_t offsets) {
  return heads * sizeof(Head) + offsets * sizeof(int32_t);
}

// A Wide chain of one moving copy or accumulation, or null.
Chain* wide_of(const ChainCall& c, const void* near) {
  const Known* k = c.fn ? find(c.fn) : nullptr;
  if (!k || c.moving < 0 || k->code != Code::copy || k->arity != 1 || c.stride % (k->dtype == 0 ? 8 : 4) != 0)
    return nullptr;
  auto chain = std::make_unique<Chain>();
  Wide& w = chain->w;
  w.rank = c.dims->rank;
  w.total = total_of(*c.dims);
  w.moving = static_cast<int8_t>(c.moving);
  w.step = c.stride / (k->dtype == 0 ? 8 : 4);
  if (k->acc) w.put = reduced_extent(*c.dims, c.args[0]) > 1 ? Put::atomic_add : Put::add;
  for (int d = 0; d < w.rank; ++d) w.sizes[d] = c.dims->sizes[d];
  for (int a = 0; a < 2; ++a) {
    w.data[a] = c.args[a].data;
    for (int d = 0; d < w.rank; ++d) w.strides[a][d] = c.args[a].strides[d];
  }
  chain->wide = chain->moves = true;
  chain->dtype = k->dtype;
  chain->n = 1;
  chain->threads = 256;
  chain->blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((w.total + 255) / 256, 65535)));
  chain->device = use_device_of(near, "fused chain");
  return chain.release();
}

void* fuse(const ChainCall* calls, std::size_t n, std::size_t* taken, const void* near) {
  if (n > 0 && calls[0].moving >= 0 && chain_key(calls[0]) < 0) {  // too large for a chain
    Chain* w = wide_of(calls[0], near);
    *taken = w ? 1 : 0;
    return w;
  }
  std::vector<Head> heads;
  std::vector<int32_t> ofs;
  int64_t widest = 1;
  int dtype = -1;
  bool moves = false;
  *taken = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int key = chain_key(calls[i]);
    if (key < 0 || (dtype >= 0 && key != dtype)) break;
    const std::size_t before = ofs.size();
    Head h = head_of(calls[i], ofs);
    if (bytes_of(heads.size() + 1, ofs.size()) > kShared - sizeof(int4)) {
      ofs.resize(before);
      break;
    }
    dtype = key;
    moves = moves || h.moving >= 0;
    widest = std::max<int64_t>(widest, h.total);
    heads.push_back(h);
  }
  if (heads.size() < 2 && !(heads.size() == 1 && heads[0].moving >= 0)) {  // a moving call may stand alone
    *taken = heads.size();
    return nullptr;
  }
  std::vector<int4> table((bytes_of(heads.size(), ofs.size()) + sizeof(int4) - 1) / sizeof(int4));
  std::memcpy(table.data(), heads.data(), heads.size() * sizeof(Head));
  std::memcpy(reinterpret_cast<char*>(table.data()) + heads.size() * sizeof(Head), ofs.data(),
              ofs.size() * sizeof(int32_t));
  auto chain = std::make_unique<Chain>();
  chain->device = use_device_of(near, "fused chain");
  const std::size_t bytes = table.size() * sizeof(int4);
  check(cudaMalloc(&chain->table, bytes), "fused chain");
  const cudaError_t e = cudaMemcpy(chain->table, table.data(), bytes, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    (void)cudaFree(chain->table);
    check(e, "fused chain");
  }
  chain->words = static_cast<int>(table.size());
  chain->n = static_cast<int>(heads.size());
  chain->dtype = dtype;
  chain->moves = moves;
  chain->threads = static_cast<int>(std::min<int64_t>(kChainMax, (widest + 31) / 32 * 32));
  *taken = heads.size();
  return chain.release();
}

// The chain's kernel and launch configuration, with `args` pointing at its arguments.
struct Launch {
  const int4* table;
  int words, n;
  int64_t index;
  Wide w;
  void* args[4];
  cudaKernelNodeParams params{};
  Launch(const Chain& c, int64_t i)
      : table(static_cast<const int4*>(c.table)), words(c.words), n(c.n), index(i), w(c.w) {
    const bool f64 = c.dtype == 0;
    params.blockDim = dim3(static_cast<unsigned>(c.threads));
    params.kernelParams = args;
    if (c.wide) {
      args[0] = &w;
      args[1] = &index;
      params.func =
          f64 ? reinterpret_cast<void*>(&wide_kernel<double>) : reinterpret_cast<void*>(&wide_kernel<float>);
      params.gridDim = dim3(static_cast<unsigned>(c.blocks));
      return;
    }
    args[0] = &table;
    args[1] = &words;
    args[2] = &n;
    args[3] = &index;
    params.func =
        f64 ? reinterpret_cast<void*>(&chain_kernel<double>) : reinterpret_cast<void*>(&chain_kernel<float>);
    params.gridDim = dim3(1);
    params.sharedMemBytes = static_cast<unsigned>(static_cast<std::size_t>(c.words) * sizeof(int4));
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;
};

void launch_fused(void* p, int64_t index) {
  const auto* c = static_cast<const Chain*>(p);
  check(cudaSetDevice(c->device), "fused chain");
  Launch l(*c, index);
  check(cudaLaunchKernel(l.params.func, l.params.gridDim, l.params.blockDim, l.params.kernelParams,
                         l.params.sharedMemBytes, cudaStreamPerThread),
        "fused chain");
  check_launch("fused chain");
  if (g_recording && c->moves) {  // its node is the capture's newest: the graph retargets it per launch
    cudaStreamCaptureStatus status{};
    const cudaGraphNode_t* deps = nullptr;
    std::size_t n = 0;
    check(cudaStreamGetCaptureInfo(cudaStreamPerThread, &status, nullptr, nullptr, &deps, nullptr, &n),
          "fused chain");
    if (status != cudaStreamCaptureStatusActive || n != 1)
      throw DeviceError("[fused chain] could not find a moving chain's node in the graph being recorded");
    g_moving_nodes.push_back({deps[0], c});
  }
}

void destroy_fused(void* p) {
  auto* c = static_cast<Chain*>(p);
  if (!c) return;
  if (cudaSetDevice(c->device) == cudaSuccess) (void)cudaFree(c->table);
  (void)cudaGetLastError();
  delete c;
}

void know(ElementwiseFn fn, Code code, int arity, bool acc, int dtype, int scalar = -1) {
  if (fn)
    known().push_back(
        {fn, code, static_cast<int8_t>(arity), acc, static_cast<int8_t>(scalar), static_cast<int8_t>(dtype)});
}

}  // namespace

void set_chain_index(cudaGraphExec_t exec, const MovingNode& m, int64_t index) {
  Launch l(*static_cast<const Chain*>(m.chain), index);
  check(cudaGraphExecKernelNodeSetParams(exec, m.node, &l.params), "fused chain");
}

void register_fusion(KernelTable& t) {
  known().clear();
  for (int dt = 0; dt < 2; ++dt) {
#define TENAX_UNARY(name, f, df, saves)                                            \
  know(t.unary[int(UnaryOp::name)][dt], Code::fwd_##name, 1, false, dt);           \
  know(t.deriv_set[int(DerivOp::unary_##name)][dt], Code::d_##name, 3, false, dt); \
  know(t.deriv_acc[int(DerivOp::unary_##name)][dt], Code::d_##name, 3, true, dt);
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(name, f, dfa, dfb, saves)                                     \
  know(t.binary[int(BinaryOp::name)][dt], Code::fwd_##name, 2, false, dt);         \
  know(t.deriv_set[int(DerivOp::name##_a)][dt], Code::d_##name##_a, 4, false, dt); \
  know(t.deriv_acc[int(DerivOp::name##_a)][dt], Code::d_##name##_a, 4, true, dt);  \
  know(t.deriv_set[int(DerivOp::name##_b)][dt], Code::d_##name##_b, 4, false, dt); \
  know(t.deriv_acc[int(DerivOp::name##_b)][dt], Code::d_##name##_b, 4, true, dt);
#include "tenax/core/ops/elementwise.def"
    know(t.deriv_set[int(DerivOp::one)][dt], Code::copy, 1, false, dt);
    know(t.deriv_acc[int(DerivOp::one)][dt], Code::copy, 1, true, dt);
    know(t.deriv_set[int(DerivOp::argmax_mask)][dt], Code::d_argmax_mask, 3, false, dt);
    know(t.deriv_acc[int(DerivOp::argmax_mask)][dt], Code::d_argmax_mask, 3, true, dt);
    know(t.deriv_set[int(DerivOp::softmax)][dt], Code::d_softmax, 3, false, dt);
    know(t.deriv_acc[int(DerivOp::softmax)][dt], Code::d_softmax, 3, true, dt);
    know(t.copy[dt], Code::copy, 1, false, dt);
    know(t.acc[dt], Code::copy, 1, true, dt);
    know(t.scale[dt], Code::scale, 1, false, dt, 2);
    know(t.fill[dt], Code::fill, 0, false, dt, 1);
  }
  t.program.chain_key = chain_key;
  t.program.fuse = fuse;
  t.program.launch_fused = launch_fused;
  t.program.destroy_fused = destroy_fused;
}

}  // namespace tenax::detail::cuda
