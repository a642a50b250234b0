#pragma once
// Library-internal: recording the kernel calls a sequence of op calls makes into a program that
// replays them with no dispatch (no axis alignment, no allocation, no tensor handles). A program
// is valid while its buffers keep their addresses: it holds every buffer allocated while it was
// captured, and its callers write new values into the buffers it reads (never rebinding them).
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <tbb/task_arena.h>

#include "tenax/backends/kernels.h"
#include "tenax/core/device.h"
#include "tenax/core/ops/inline_call.h"
#include "tenax/core/storage.h"

namespace tenax::detail {

void keep_for_capture(Storage* s);
struct PassState;
class Extents;

/// The kernel calls of one capture, replayable in order.
class KernelProgram {
 public:
  // Move-only: the replay records (Hot) point into the program's own argument arrays.
  KernelProgram() = default;
  KernelProgram(const KernelProgram&) = delete;
  KernelProgram& operator=(const KernelProgram&) = delete;
  KernelProgram(KernelProgram&&) noexcept = default;
  KernelProgram& operator=(KernelProgram&&) noexcept = default;
  ~KernelProgram() = default;
  /// Replays every call. `what` and `position` name the loop position for errors ("scan step 12";
  /// a position below 0: `what` alone): a linear-algebra kernel that fails (matrix not positive definite,
  /// singular) raises NumericError naming the kernel, the batch index and `what`. Moving calls (slice copies,
  /// KernelCapture::moving) run at slice `index`.
  void run(const char* what, int64_t position, int64_t index = 0) const;
  /// Raises what a replay on a device found and deferred (a failed matrix of a linear-algebra
  /// kernel: device replays do not wait for each call). Waits for the device; the error names
  /// `what` but not the step. A no-op for host programs.
  void finish(const char* what) const;
  [[nodiscard]] size_t size() const { return calls_.size(); }
  [[nodiscard]] bool empty() const { return calls_.empty(); }
  /// Appends every call to `loop` as a scalar instruction; false (and `loop` is then unusable)
  /// when a call is not a host elementwise kernel on single elements with a scalar twin.
  bool append_to(ScalarLoop& loop) const;
  /// Appends the calls of `other` (a program of the same device, captured, not being captured
  /// into): this program then replays them too, in order, reading `other`'s fill and scale
  /// values, so `other` must outlive it. Its buffers are shared.
  void append(const KernelProgram& other);
  /// Declares that only this program reads the buffers that only it holds (its temporaries), so
  /// that a replay may read a copy's source where it would read the copy and skip the copy
  /// (core/ops/copy_forwarding.cpp), and fuse a contraction with the copy, add or subtraction next
  /// to it (core/ops/contraction_fusion.cpp). `neighbour`'s buffers (a program run before this
  /// one, which must outlive it) and `shared` (buffers others read or write too) then count as
  /// known extents, and a known buffer holding an `owned` pointer and none of `shared` counts as
  /// this program's alone. Host programs only.
  void allow_copy_forwarding(const KernelProgram* neighbour = nullptr, std::vector<const void*> owned = {},
                             std::vector<StoragePtr> shared = {}) {
    forwarding_ = true;
    neighbour_ = neighbour;
    owned_ = std::move(owned);
    shared_ = std::move(shared);
    planned_ = false;
  }
  /// How many copies the replays skip (after the first run; for tests).
  [[nodiscard]] size_t forwarded_copies() const { return forwarded_; }
  /// How many records the replays save by running a contraction together with the copy, add or
  /// subtraction next to it (core/ops/contraction_fusion.cpp; after the first run; for tests).
  [[nodiscard]] size_t fused_contractions() const { return fused_; }
  /// How many replayed records take an operand from the previous record's result in registers
  /// (core/ops/threaded_replay.cpp; after the first run; for tests).
  [[nodiscard]] size_t previous_result_reads() const { return from_last_; }
  /// Appends a moving call (see KernelCapture::moving) without running it.
  void append_moving(ElementwiseFn fn, const LoopDims& dims, const LoopArg* args, int moving, int64_t stride);

  /// Where a buffer that read_in_place() redirected lies at replay index i: `at` + i * `stride`
  /// bytes. Its owner may change it between replays (never during one).
  struct MovingBase {
    const char* at = nullptr;
    int64_t stride = 0;
  };
  /// Host programs, once captured: every call that reads the `bytes` bytes at `lo` (a buffer a
  /// scan fills before each replay: x_t, a carry) reads the same bytes at `base` instead, which must
  /// outlive the program (its layout the buffer's). Returns how many calls it redirected; -1, and
  /// nothing changed, where some call touches those bytes and cannot be redirected: it writes
  /// them, reads them through more than one operand, or is neither an elementwise call on a loop
  /// nor an `other` call that reads them through a movable operand (KernelCapture::movable_reads;
  /// a flat, planned or matrix call), or an `other` call does not name what it touches.
  int read_in_place(const void* lo, int64_t bytes, const MovingBase* base);

 private:
  friend class KernelCapture;
  friend void keep_for_capture(Storage* s);
  struct Call {
    ElementwiseFn fn = nullptr;  ///< elementwise kernels; null for the others
    LoopDims dims;
    int32_t first_arg = 0;  ///< into args_, or into flat_args_ for a flat call
    /// A small elementwise call whose loop collapsed to two dimensions or fewer: its kernel's
    /// flat twin over `outer` rows of `count` elements (fn is then null).
    FlatFn flat = nullptr;
    int64_t outer = 1, count = 0;
    /// A contraction replayed from its plan: index into plans_ (-1: none).
    int32_t plan = -1;
    /// A call on one matrix replayed from its plan: index into mat_plans_ (-1: none); it also
    /// names its tensors (touch).
    int32_t mat = -1;
    /// A flat call: its kernel's inline form (ScalarLoop; Kind::call when none); on one element
    /// also its scalar twin. An elementwise call: its number of operands.
    ScalarFn one = nullptr;
    ScalarLoop::Form form;
    int8_t arity = 0;
    /// The other kernels, with deep copies of their arguments; returns a failed batch index or -1.
    std::function<int64_t()> other;
    const char* kernel = "";  ///< for errors
    /// For `other` host calls that say so: the base pointers of the tensors they read or write
    /// (each taken as touching its whole buffer); -1: not known.
    const void* touch[10] = {};
    int8_t touches = -1;
    /// Per touch, where an `other` call that only reads it keeps its pointer (movable_reads; null:
    /// not movable), and once read_in_place moved it: where it lies per replay index (base, offset).
    const void** field[10] = {};
    const MovingBase* field_base[10] = {};
    int64_t field_offset[10] = {};
    [[nodiscard]] bool moved() const {
      return touches > 0 &&
             std::any_of(field_base, field_base + touches, [](const MovingBase* b) { return b != nullptr; });
    }
    /// Set for finite checks (core/check_finite.h): `other` finds, this words the failure.
    std::function<std::string(int64_t)> describe;
    /// A CUDA call that records into a graph (no host work between launches, no waiting), and
    /// a device pointer it writes (whose device records it).
    bool graph_safe = false;
    const void* near = nullptr;
    /// A device contraction: its arguments, index into device_dots_ (-1: none), and dtype index.
    int32_t device_dot = -1;
    int8_t dtype = 0;
    /// A moving elementwise call: operand `moving` is `stride` bytes further per unit of the
    /// replay's index (its argument holds the address at index 0); -1: none. With `base` (host,
    /// read_in_place): operand `moving` is at base->at + offset + index * base->stride instead.
    int8_t moving = -1;
    int64_t stride = 0;
    const MovingBase* base = nullptr;
    int64_t offset = 0;
  };
  /// A run of calls replayed by one graph launch (graph set), or one by one.
  struct Segment {
    size_t begin = 0, end = 0;
    std::shared_ptr<void> graph;
  };
  /// A failure word that device calls lower (MatBatch::deferred_failure).
  struct Deferred {
    const unsigned long long* word = nullptr;
    const char* kernel = "";
  };
  /// What a replay reads of a flat call, one compact record per call (flat null: see calls_),
  /// built with the segments: the full Call records are several hundred bytes each.
  struct Hot {
    /// What the replay runs: the inline call or planned contraction below through its own `run`
    /// (one test and one call), null for the other records. Set once the passes are done.
    const Replayed* go = nullptr;
    FlatFn flat = nullptr;
    const FlatArg* args = nullptr;
    int32_t outer = 1, count = 0;  ///< a flat call's; at most kFlatLimit elements
    const ContractPlan* plan = nullptr;
    const MatPlan* mat = nullptr;
    /// A float64 kernel with an inline form (ScalarLoop::Form) runs as an InlineCall, its
    /// operands and loop resolved at planning (into inline_).
    const InlineCall* inl = nullptr;
    /// The first call of a fused device chain: index into chains_ (-1: none).
    int16_t chain = -1;
    uint32_t call = 0;  ///< its index into calls_ (copy forwarding drops records)
  };
  static_assert(sizeof(Hot) <= 64, "a replay record is read per call: keep it within a cache line");
  void run_calls(size_t begin, size_t end, const char* what, int64_t position, int64_t index) const;
  /// A record that is not a chain, inline, planned or flat call, as run_calls runs it.
  void run_record(const Hot& h, const char* what, int64_t position, int64_t index) const;
  /// A planned matrix call's failure (its matrix not positive definite, or singular) as an Error.
  [[noreturn]] void matrix_failed(const Hot& h, const char* what, int64_t position) const;
  /// A record as the threaded replay runs it (core/ops/threaded_replay.cpp): the address of its
  /// handler, then what the handler reads — an inline call's operands (o, a, b); a planned call
  /// (go, and in `a` its first operand, which only the look-ahead reads); a planned matrix call
  /// (mat); a flat call (its kernel, rows and length in `rows`, arguments); any other record (hot).
  /// The handlers prefetch `o` and `a` of the record kAhead on.
  struct Threaded {
    const void* handler = nullptr;
    union {
      double* o;
      const Replayed* go;
      FlatFn flat;
      const Hot* hot;
      const MatPlan* mat;
    };
    union {
      const double* a;
      const FlatArg* args;
      const Hot* mat_hot;  ///< a planned matrix call's record (for its error)
    };
    union {
      const double* b;
      int64_t rows;  ///< a flat call's outer << 32 | count
    };
  };
  /// Host programs without chains or graphs: hot_ as threaded code, each handler jumping to the
  /// next one's (where the compiler has labels as values; else threaded_ stays empty).
  void lower_threaded() const;
  /// The handler table's last entry (the end), and how many records ahead a handler asks for what
  /// that record reads first (Threaded's o and a: an inline call's output and first operand, a plan
  /// and its first operand, a flat call's arguments; for a flat call o is its kernel's address): a
  /// long program (a compiled function's unrolled loop) streams its records and plans from beyond
  /// L2, and the loads through their pointers are ones the hardware prefetcher cannot guess.
  static constexpr int kThreadedEnd = 8 * 9 * 8 + 4, kThreadedAhead = 8;
  /// Runs the threaded records from `op`, or with `table` set hands out the handlers' addresses.
  /// The baseline build's handlers, and the AVX2 build's (threaded_replay_avx2.cpp), which
  /// lower_threaded picks where the CPU has AVX2 (threaded_avx2_).
  void run_threaded(const Threaded* op, const char* what, int64_t position, int64_t index,
                    const void* const** table) const;
  void run_threaded_avx2(const Threaded* op, const char* what, int64_t position, int64_t index,
                         const void* const** table) const;
  void run_all(const char* what, int64_t position, int64_t index) const {
    if (threaded_.empty())
      run_calls(0, hot_.size(), what, position, index);
    else if (threaded_avx2_)
      run_threaded_avx2(threaded_.data(), what, position, index, nullptr);
    else
      run_threaded(threaded_.data(), what, position, index, nullptr);
  }
  void plan_segments() const;
  void plan_chains() const;
  void plan_graphs() const;
  // The passes over a host program's records that allow_copy_forwarding enables, run when it is
  // planned (core/ops/program_analysis.cpp); each marks the records it drops (PassState).
  void plan_host_passes() const;
  template <class F>
  void each_operand(Hot& h, F&& f) const;         // core/ops/program_analysis.h
  void note_uses(PassState& st, size_t k) const;  // likewise
  void forward_copies(PassState& st) const;
  static constexpr size_t kNotForwardable = ~size_t{0};
  size_t last_redirectable_read(const PassState& st, size_t k, int bd) const;  // copy_forwarding.cpp
  bool known_extents(Extents& ext) const;                                      // program_analysis.cpp
  void copy_rewritable_arguments() const;
  void fuse_contractions(PassState& st) const;
  static constexpr int kRefuse = -2, kUntouched = -1, kFields = -3;  // read_in_place's verdicts
  int in_place_verdict(const Call& c, const char* first, int64_t bytes, std::vector<int>& fields) const;
  static int other_verdict(const Call& c, const std::function<bool(const void*)>& inside,
                           std::vector<int>& fields);
  bool fuse_copy_then_contraction(PassState& st, size_t k) const;  // contraction_fusion.cpp
  const InlineCall* sole_reader(PassState& st, size_t k, size_t& j) const;
  bool fuse_contraction_then_copy(PassState& st, size_t k) const;
  bool fuse_contraction_then_add(PassState& st, size_t k) const;
  std::vector<Call> calls_;
  std::vector<LoopArg> args_;
  std::vector<FlatArg> flat_args_;
  std::vector<double> scalars_;      ///< fill / scale values (kernels read them through a pointer)
  std::vector<ContractPlan> plans_;  ///< contractions resolved at capture
  std::vector<MatPlan> mat_plans_;   ///< calls on one matrix resolved at capture
  std::vector<StoragePtr> buffers_;  ///< every buffer allocated while capturing
  std::vector<Deferred> deferred_;
  std::vector<ContractArgs> device_dots_;              ///< the device contractions' arguments (for chains)
  mutable std::vector<Segment> segments_;              ///< planned at the first run
  mutable std::vector<std::shared_ptr<void>> chains_;  ///< fused device chains, likewise
  mutable std::vector<size_t> chain_end_;              ///< per chain, the call after its last
  mutable std::vector<Hot> hot_;                       ///< likewise
  mutable std::vector<InlineCall> inline_;             ///< likewise: the inline calls hot_ points at
  mutable std::vector<Threaded> threaded_;             ///< likewise: hot_ lowered (lower_threaded), or empty
  mutable bool threaded_avx2_ = false;                 ///< threaded_ holds the AVX2 build's handlers
  mutable bool planned_ = false;
  /// Whether a replay may wait on a device (a record other than an inline, flat, planned
  /// contraction or planned matrix call, or a graph): only then does it run inside a
  /// DeviceLoopScope. Set by plan_segments.
  mutable bool may_wait_ = true;
  // Copy forwarding (allow_copy_forwarding): the replay's own copies of the plans and flat
  // arguments it redirects, and how many copies it skips.
  bool forwarding_ = false;
  const KernelProgram* neighbour_ = nullptr;
  std::vector<const void*> owned_;
  std::vector<StoragePtr> shared_;
  mutable std::vector<ContractPlan> hot_plans_;
  mutable std::vector<FlatArg> hot_args_;
  mutable size_t forwarded_ = 0, fused_ = 0, from_last_ = 0;
};

/// While alive, device waits on this thread are inside a loop (a replayed scan step, a map chunk):
/// note_device_wait warns.
struct DeviceLoopScope {
  DeviceLoopScope();
  ~DeviceLoopScope();
  DeviceLoopScope(const DeviceLoopScope&) = delete;
  DeviceLoopScope& operator=(const DeviceLoopScope&) = delete;
};

/// Whether device programs replay through CUDA graphs (default on; TENAX_CUDA_GRAPHS=0 turns
/// them off, for comparison and debugging).
bool cuda_graphs_enabled();
/// Whether device programs fuse runs of small elementwise calls and contractions into one kernel
/// each (default on; TENAX_CUDA_FUSION=0 or set_cuda_fusion(false) turns it off, for comparison
/// and debugging). Read when a program is planned (its first replay).
bool cuda_fusion_enabled();
void set_cuda_fusion(bool on);

/// While alive, kernels() on this thread hands out a table that runs each kernel and appends the
/// call to `program`, and every buffer allocated is kept alive by `program`. Nested captures are
/// not allowed. Zero fills go through the fill kernel (not memset) so that they are replayed.
class KernelCapture {
 public:
  explicit KernelCapture(KernelProgram& program);
  ~KernelCapture();
  KernelCapture(const KernelCapture&) = delete;
  KernelCapture& operator=(const KernelCapture&) = delete;

  /// The capturing table for `d` (kernels() calls this while a capture is active).
  const KernelTable& table(Device d) const;

  // Called by the capturing kernels.
  void elementwise(int device_kind, int slot, const LoopDims& dims, const LoopArg* args);
  /// Runs `call` and records it; a device call that can be recorded into a graph says so and
  /// names a device pointer it writes. `replay`, when given, is what later runs replay instead.
  int64_t other(std::function<int64_t()> call, const char* kernel, bool graph_safe = false,
                const void* near = nullptr, std::function<int64_t()> replay = {});
  /// Runs a resolved host contraction and records it (replayed without a std::function).
  void contract(const ContractPlan& plan);
  /// Runs a resolved host call on one matrix and records it (replayed without a std::function);
  /// `touched` as for touches(). Returns what the plan's run returns (0: the matrix failed).
  int64_t matrix(const MatPlan& plan, const char* kernel, std::initializer_list<const void*> touched);
  /// Runs a device contraction (kernel `fn`, dtype index `dtype`) and records it.
  void device_contract(ContractFn fn, const ContractArgs& a, int dtype);
  /// Runs the two-operand device kernel `fn` (a copy or accumulation) with operand `moving` at
  /// args[moving].data + index * stride bytes, and records it as a moving call (args[moving]
  /// holding the address at index 0): replays run it at their own index.
  void moving(ElementwiseFn fn, const LoopDims& dims, const LoopArg* args, int moving, int64_t stride,
              int64_t index);
  /// Registers a failure word of a deferred device call (read by KernelProgram::finish).
  void defer(const unsigned long long* word, const char* kernel);
  /// Names the base pointers of the tensors the `other` call just recorded reads or writes (at
  /// most 10: more is an internal Error), for copy forwarding and read_in_place.
  void touches(std::initializer_list<const void*> pointers);
  /// After touches(): the fields in which the `other` call just recorded keeps pointers it only
  /// reads (each holding one of the named pointers, the call reading them when it runs), so
  /// that KernelProgram::read_in_place may point them elsewhere per replay.
  void movable_reads(std::initializer_list<const void**> fields);
  /// Appends a finite check: `find` returns the first bad element or -1; `describe` words it.
  void check(std::function<int64_t()> find, std::function<std::string(int64_t)> describe);

 private:
  friend void keep_for_capture(Storage* s);
  struct ScalarFix {
    size_t arg;     ///< into program_.args_ (or flat_args_)
    size_t scalar;  ///< into program_.scalars_
    bool flat;
  };
  /// Records a call as a flat call when its kernel has a flat twin, it is small, and its loop
  /// collapses to one dimension for every operand.
  bool record_flat(int device_kind, int slot, const LoopDims& dims, const LoopArg* args);
  KernelProgram& program_;
  std::vector<ScalarFix> fixes_;
};

/// Runs f with a capture into `program` active. The thread is isolated meanwhile: while a parallel
/// kernel waits, it must not pick up an unrelated oneTBB task (whose kernels would be captured).
template <class F>
void capture_into(KernelProgram& program, F&& f) {
  tbb::this_task_arena::isolate([&] {
    KernelCapture capture(program);
    f();
  });
}

/// The real (not capturing) kernel table of a device kind: 0 host, 1 CUDA.
const KernelTable& real_kernels(int device_kind);
/// The capturing kernel table of a device kind: each kernel of real_kernels replaced by its
/// capture rule (a trampoline that runs it and records the call).
const KernelTable& capturing_kernels(int device_kind);
/// The flat twin of a host elementwise kernel `fn`, or null (none, or not a host kernel).
FlatFn flat_twin(ElementwiseFn fn);
/// The scalar twin of a host elementwise kernel `fn`, or null.
ScalarFn scalar_twin(ElementwiseFn fn);
/// A call of at most this many elements is worth running flat (no planning, no parallel split).
inline constexpr int64_t kFlatLimit = 4096;
/// A loop collapsed to at most two dimensions: `outer` rows of `count` elements.
struct FlatLoop {
  int64_t outer = 1, count = 1;
  int64_t stride[8] = {}, outer_stride[8] = {};
};
/// Collapses `dims` to at most two loop dimensions for all `n` (<= 8) operands, merging each dim
/// into the next inner one where every operand's strides allow (null operands get strides 0).
/// False when three dimensions remain.
bool collapse_loop(const LoopDims& dims, const LoopArg* args, int n, FlatLoop& out);

/// The active capture on this thread, or null (read by kernels(), full() and Storage::allocate).
inline thread_local KernelCapture* g_capture = nullptr;

/// Keeps `s` alive as long as the active capture's program (called by Storage::allocate).
void keep_for_capture(Storage* s);  // NOLINT(readability-redundant-declaration): documented here

}  // namespace tenax::detail
