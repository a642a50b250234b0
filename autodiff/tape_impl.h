#pragma once
// Library-internal: the flat tape (one record per op call, integer variable ids, residuals kept
// per the op's declaration) and its reverse and forward sweeps.
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tenax/autodiff/tape.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax::detail {

/// One recorded op call.
struct Record {
  const OpDef* op;
  int32_t attrs;        ///< into TapeImpl::attrs_, or -1 for an op without attributes
  int32_t out;          ///< output variable
  int32_t first_input;  ///< into TapeImpl::inputs_ (variable ids; -1 for constants)
  int32_t n_inputs;
  int32_t first_saved;  ///< into TapeArrays::saved (TapeArrays::values for a record by value)
  /// A record by value (tape_lane.cpp): its element count; 0 for any other record.
  uint16_t lane_n = 0;
  /// Of a record by value, bit i: input i is a single element broadcast (its residual one value).
  uint8_t lane_scalars = 0;
};

/// Per-variable facts the sweeps need without keeping the tensor alive.
struct VarInfo {
  int32_t axes;    ///< into TapeImpl::axes_ (consecutive variables with equal axes share one entry)
  DType dtype;
  bool view;  ///< made by a view op: its adjoint is a view of its parent's
  Device device;
  int32_t record;  ///< creating record, -1 for watched inputs
};

/// A recorded multi-output node: its outputs are the consecutive variables first_out...
struct CustomEntry {
  std::shared_ptr<CustomNode> node;
  int32_t first_out;
  int32_t n_out;
  /// The sharding of its inputs when it took replicated inputs through varying aliases (0: none).
  uint16_t shard = 0;
};

/// Bump storage for the adjoints a reverse sweep keeps by value (records by value): slots of whole
/// 32-byte units in chunks that stay put, so a slot's address holds for the sweep. Its chunks are
/// kept for the next sweep (and the next tape of the thread).
class LaneArena {
 public:
  /// Room for `words` 8-byte words (at most a chunk's), unwritten.
  double* alloc(std::size_t words) {
    words = (words + 3) & ~std::size_t{3};
    if (chunk_ >= chunks_.size() || used_ + words > kChunkWords) [[unlikely]]
      next_chunk();
    double* p = chunks_[chunk_].get() + used_;
    used_ += words;
    return p;
  }
  void reset() { chunk_ = 0, used_ = 0; }

 private:
  static constexpr std::size_t kChunkWords = 4096;
  void next_chunk();
  std::vector<std::unique_ptr<double[]>> chunks_;
  std::size_t chunk_ = 0, used_ = 0;
};

/// The adjoint tensors of one sweep, by variable: a slot for each variable that gets one, in
/// chunks that stay put (a reference holds while others are made), so that a sweep's set-up and
/// clean-up touch only the variables it reached (a vector of all variables' tensors cost 200
/// bytes written and destroyed per variable and sweep).
class AdjointStore {
 public:
  /// Every variable's adjoint undefined, for `vars` variables.
  void reset(std::size_t vars) {
    clear();
    index_.assign(vars, -1);
  }
  void clear();
  /// v's adjoint, made undefined where it has none yet (its axes then unset: check defined()).
  Tensor& operator[](std::size_t v) {
    int32_t& k = index_[v];
    if (k < 0) k = new_slot();
    return slot(k);
  }
  [[nodiscard]] bool defined(std::size_t v) const { return index_[v] >= 0 && slot(index_[v]).defined(); }
  /// v's adjoint, or an undefined tensor.
  [[nodiscard]] const Tensor& get(std::size_t v) const;
  AdjointStore() = default;
  AdjointStore(const AdjointStore&) = delete;
  AdjointStore& operator=(const AdjointStore&) = delete;
  AdjointStore(AdjointStore&& other) noexcept
      : index_(std::move(other.index_)),
        chunks_(std::move(other.chunks_)),
        used_(std::exchange(other.used_, 0)),
        made_(std::exchange(other.made_, 0)) {}
  AdjointStore& operator=(AdjointStore&& other) noexcept {
    destroy();
    index_ = std::move(other.index_);
    chunks_ = std::move(other.chunks_);
    used_ = std::exchange(other.used_, 0);
    made_ = std::exchange(other.made_, 0);
    return *this;
  }
  ~AdjointStore() { destroy(); }

 private:
  static constexpr int32_t kChunk = 64;
  // Raw room for tensors: a slot's tensor is made when the slot is first taken, made undefined by
  // clear() and destroyed with the store.
  struct alignas(Tensor) Room {
    std::byte bytes[sizeof(Tensor)];
  };
  [[nodiscard]] Tensor& slot(int32_t k) const {
    return *std::launder(reinterpret_cast<Tensor*>(chunks_[size_t(k / kChunk)][size_t(k % kChunk)].bytes));
  }
  int32_t new_slot();
  void destroy();
  std::vector<int32_t> index_;
  std::vector<std::unique_ptr<Room[]>> chunks_;
  int32_t used_ = 0;  ///< slots taken by this sweep
  int32_t made_ = 0;  ///< slots holding a tensor (taken by some sweep)
};

/// Bytes of a tensor's elements (what the tape's stats count).
inline int64_t logical_bytes(const Tensor& t) { return t.numel() * static_cast<int64_t>(itemsize(t.dtype())); }

/// The op every custom record points to (its `attrs` field indexes TapeArrays::customs).
extern const OpDef kCustomOp;

/// The tape's flat arrays. A finished tape of up to 65 536 records hands them (emptied, capacity
/// kept) to the next tape of its thread, so repeated recordings (an optimiser loop) do not regrow
/// or page-fault them.
struct TapeArrays {
  std::vector<Record> records;
  std::vector<int32_t> inputs;
  std::vector<Tensor> saved;
  /// The residuals of records by value, copied (values_used of them written; grown, not shrunk).
  std::vector<double> values;
  std::size_t values_used = 0;
  std::vector<VarInfo> vars;
  std::vector<Axes> axes;
  std::vector<Attrs> attrs;
  AdjointStore adjoints;
  /// Per variable, during a sweep: its adjoint by value in `arena` (null: none, or a Tensor in
  /// `adjoints`; never both).
  std::vector<void*> lane_adjoints;
  LaneArena arena;
  /// Per variable: its adjoint is lent (VjpContext::lend_adjoint), not a buffer of its own.
  std::vector<uint8_t> lent;
  /// Adjoints of which only some slices along one axis are written (TapeImpl::select_partial):
  /// (variable, range), few.
  std::vector<std::pair<int32_t, CotangentRange>> partial;
  std::vector<CustomEntry> customs;
  /// (record, source) for records made under a detail::SourceScope, in record order.
  std::vector<std::pair<int32_t, const std::string*>> sources;
  void clear();
};

class TapeImpl final : public Recorder {
 public:
  explicit TapeImpl(uint32_t serial);
  ~TapeImpl() override;
  TapeImpl(const TapeImpl&) = delete;
  TapeImpl& operator=(const TapeImpl&) = delete;

  void record(const OpDef& op, Inputs inputs, const Attrs& attrs, Tensor& out) override;
  void record_custom(std::shared_ptr<CustomNode> node, const std::vector<Tensor>& inputs,
                     std::vector<Tensor>& outputs) override;
  [[nodiscard]] int64_t residual_room() const override {
    return residual_taken_ >= residual_budget_ ? 0 : residual_budget_ - residual_taken_;
  }
  void take_residual_room(int64_t bytes) override { residual_taken_ += bytes; }
  void set_residual_budget(int64_t bytes) { residual_budget_ = bytes; }
  Tensor watch(const Tensor& t);
  std::vector<Tensor> gradient(const Tensor& output, const std::vector<Tensor>& wrt, const Tensor& cotangent);
  Tensor forward_tangent(const Tensor& output, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& tangents);

  [[nodiscard]] uint32_t serial() const { return serial_; }
  void keep_all() { keep_all_ = true; }
  /// Whether it keeps every residual (a forward-mode tape: jvp, jacobian in forward mode).
  [[nodiscard]] bool keeps_all() const { return keep_all_; }
  [[nodiscard]] TapeStats stats() const;
  [[nodiscard]] int64_t bytes() const;

  /// The adjoint of variable v: allocated zeroed on first use, or a view of the parent's adjoint.
  Tensor& adjoint(int32_t v);
  /// The adjoint of v for a rule that writes it whole: allocated uninitialised (fresh = true) when
  /// v has none yet and is not a view; otherwise adjoint(v).
  Tensor& adjoint_to_write(int32_t v, bool& fresh);
  /// Takes `value` as v's whole adjoint (see VjpContext::lend_adjoint); false when v has an
  /// adjoint already, is a view, or `value` lacks exactly v's adjoint axes, dtype and device.
  bool lend_adjoint(int32_t v, const Tensor& value);
  /// The cotangent a record's rule reads: v's adjoint as it stands (lent or not).
  const Tensor& cotangent_of(int32_t v);
  [[nodiscard]] const std::vector<int32_t>& inputs() const { return a_.inputs; }
  [[nodiscard]] const std::vector<Tensor>& saved() const { return a_.saved; }
  [[nodiscard]] const VarInfo& var(int32_t v) const { return a_.vars[static_cast<size_t>(v)]; }
  [[nodiscard]] const Axes& var_axes(int32_t v) const { return a_.axes[static_cast<size_t>(var(v).axes)]; }
  [[nodiscard]] const Axes& axes_at(int32_t k) const { return a_.axes[static_cast<size_t>(k)]; }
  [[nodiscard]] const Attrs& attrs_of(const Record& r) const;
  /// A residual of record by value r as a tensor (slot: input i, or -1 the output), for a sweep
  /// whose rules run with tensors (batch axes, finite checks); valid until the next call.
  const Tensor& lane_saved(const Record& r, int slot);

 private:
  /// record() of a call with sharded inputs: replicated tracked inputs through their aliases.
  [[gnu::noinline, gnu::cold]] void record_sharded(const OpDef& op, Inputs in, const Attrs& attrs, Tensor& out,
                                                   uint16_t id);
  /// Appends one op record (record() after the sharding aliases; inlined into record()).
  [[gnu::always_inline]] inline void append(const OpDef& op, Inputs inputs, const Attrs& attrs, Tensor& out);
  /// The varying alias of tracked replicated tensor `t` for sharding `id`: one op_vary record per
  /// variable, made at its first use with sharded operands.
  Tensor varying(const Tensor& t, uint16_t id);
  void check_growth() const;
  void check_adjoints(const Record& r) const;
  [[noreturn]] void rethrow_with_source(int32_t record) const;
  inline int32_t new_var(const Tensor& t, int32_t record, bool view = false);
  // (Inline, with the push out of line: consecutive variables mostly share their axes, and the
  // push's registers were saved and restored on every call.)
  int32_t intern_axes(const Axes& axes) {
    if (!a_.axes.empty() && a_.axes.back() == axes) [[likely]]
      return static_cast<int32_t>(a_.axes.size() - 1);
    return push_axes(axes);
  }
  [[gnu::noinline]] int32_t push_axes(const Axes& axes);
  int32_t var_of(const Tensor& t, const char* what) const;
  void run_custom(const Record& r);
  void share_whole_cotangents(const CustomEntry& c, std::vector<Tensor>& cot) const;
  void custom_tangent(const Record& r, std::vector<Tensor>& tan, const Axes& batch,
                      const std::vector<CotangentRange>& demand);
  // Forward mode's demand (autodiff/tape_demand.cpp).
  /// Per variable, the slices of its tangent that the sweep towards `out` reads (empty: none).
  [[nodiscard]] std::vector<CotangentRange> tangent_demand(int32_t out) const;
  [[nodiscard]] CotangentRange input_demand(const Record& r, const CotangentRange& mine) const;
  /// Whether any output of r has a demanded tangent (a collective op always runs).
  [[nodiscard]] bool needed(const Record& r, const std::vector<CotangentRange>& demand) const;
  /// A custom node offered the demanded slices of its outputs' tangents.
  void offer_tangent_ranges(const CustomEntry& c, const std::vector<CotangentRange>& demand);
  // gradient(): the batch axes of a cotangent, the seed, the sweep over the records.
  static Axes cotangent_batch_axes(const Tensor& output, const Tensor& cotangent);
  void seed(const Tensor& output, const Tensor& cotangent);
  void sweep();

  // Records by value (autodiff/tape_lane.cpp).
  /// Records a call by value where it qualifies (core/ops/lane.h); false, nothing recorded, where not.
  bool append_lane(const OpDef& op, Inputs in, Tensor& out);
  /// Copies a call's declared residuals into the values; where they start.
  int32_t save_lane(const OpDef& op, Inputs in, const Tensor& out, int64_t n, uint8_t scalars);
  /// The reverse rule of a record by value, on pointers (lane_vjp_of: for its number of inputs).
  void lane_vjp(const Record& r);
  template <int Inputs>
  void lane_vjp_of(const Record& r);
  /// The cotangent of v as a pointer to its elements (null: none arrived) and the kernel's step
  /// through them: 1 laid out as v, 0 one value broadcast.
  void* lane_cotangent(int32_t v, int64_t& stride);
  /// v's adjoint to add to (assign false) or to write whole (assign true).
  void* lane_target(int32_t v, std::size_t bytes, bool& assign);
  /// v's adjoint by value moved into a Tensor in `adjoints` (a no-op where it has none).
  void unlane(int32_t v) {
    if (!a_.lane_adjoints.empty() && a_.lane_adjoints[static_cast<size_t>(v)]) unlane_now(v);
  }
  void unlane_now(int32_t v);
  /// Whether v's adjoint is best kept by value: v is watched or made by a record by value (a
  /// tensor record's rule reads its output's adjoint as a tensor).
  [[nodiscard]] bool lane_home(int32_t v) const {
    const int32_t rec = var(v).record;
    return rec < 0 || a_.records[static_cast<size_t>(rec)].lane_n != 0;
  }
  [[nodiscard]] bool has_adjoint(int32_t v) const {
    return a_.adjoints.defined(static_cast<size_t>(v)) || a_.lane_adjoints[static_cast<size_t>(v)];
  }

  /// A new adjoint buffer for v, stored as its adjoint and counted in the stats.
  Tensor& own_adjoint(int32_t v, bool zeroed);
  /// v's adjoint as a buffer of its own (a lent one is copied into one first, a partial one
  /// zeroed outside its range).
  Tensor& owned(int32_t v);
  // Partial adjoints (autodiff/tape_partial.cpp): a large adjoint first reached through a select
  // is allocated unwritten and zeroed only in the selected slices.
  /// The adjoint of select record r's parent p made or extended so; false where that does not apply.
  bool select_partial(const Record& r, int32_t p);
  bool reach_partial(int32_t v, Name axis, int64_t i);
  /// For a rename or transpose record, `axis` of its output under the parent's name; empty for
  /// any other record (shared with forward mode's demand).
  [[nodiscard]] Name axis_in_parent(const Record& r, Name axis) const;
  bool partial_root(int32_t v, Name axis, int64_t i);
  /// v's range where its adjoint is partial, else null.
  [[nodiscard]] const CotangentRange* partial_range(int32_t v) const;
  /// Zeroes v's adjoint outside its range (a no-op for a whole one); it is whole afterwards.
  void make_whole(int32_t v);
  /// The ranges of a custom node's outputs' cotangents, offered to it; those it refuses made whole.
  void offer_ranges(const CustomEntry& c);
  /// The adjoint buffer of v: the variable's axes, then the batch axes of the sweep.
  [[nodiscard]] Tensor new_adjoint(int32_t v, bool zeroed = true) const;

  uint32_t serial_;
  bool keep_all_ = false;
  Axes batch_;  ///< axes the cotangent has beyond the output's (several VJPs in one sweep)
  bool lane_sweep_ = false;  ///< this sweep runs the records by value on pointers
  Tensor lane_held_[4];      ///< lane_saved's tensors
  TapeArrays a_;
  std::unordered_map<int32_t, int32_t> varying_;  ///< variable -> its varying alias
  int64_t adjoint_buffers_ = 0, adjoint_bytes_ = 0, residual_bytes_ = 0, partial_adjoints_ = 0, lane_records_ = 0;
  int64_t residual_budget_ = kDefaultResidualBudget;  ///< Tape::set_residual_budget
  int64_t residual_taken_ = 0;                        ///< what its scans kept
};

}  // namespace tenax::detail
