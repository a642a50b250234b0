#pragma once
// The op definition (DESIGN contract 2): one record per op carrying its forward, its reverse (VJP)
// and forward (JVP) rules, what it saves for the reverse pass, and a sampler for the generic tests.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "tenax/core/tensor.h"

namespace tenax {

struct LaneRule;  // core/ops/lane.h

/// The inputs of one op call: pointers, so dispatch copies no tensor handle (no refcount traffic).
struct Inputs {
  const Tensor* const* p = nullptr;
  int n = 0;
  [[nodiscard]] const Tensor& operator[](int i) const { return *p[i]; }
  [[nodiscard]] int size() const { return n; }
};

/// Attributes of one op call. Each op documents which fields it reads.
struct Attrs {
  AxisList axes;   ///< reduction / contraction / order / primary axes
  AxisList axes2;  ///< secondary names (rename targets)
  Axes shape;      ///< axes with sizes (broadcast)
  int64_t i[4] = {0, 0, 0, 0};
  double f = 0.0;
};

/// What a VJP rule sees: the output cotangent, the saved residuals, and the inputs' adjoints.
/// Implemented by the tape (autodiff), so core never includes autodiff.
class VjpContext {
 public:
  virtual ~VjpContext() = default;
  /// Cotangent of the output (the output's axes, in some order).
  [[nodiscard]] virtual const Tensor& cotangent() const = 0;
  /// Saved input i; throws when the op did not declare it saved.
  [[nodiscard]] virtual const Tensor& input(int i) const = 0;
  /// Saved output; throws when the op did not declare it saved.
  [[nodiscard]] virtual const Tensor& output() const = 0;
  /// Axes of input i (always available).
  [[nodiscard]] virtual const Axes& input_axes(int i) const = 0;
  [[nodiscard]] virtual int num_inputs() const = 0;
  /// Whether input i needs a gradient.
  [[nodiscard]] virtual bool needs_grad(int i) const = 0;
  /// Adjoint of input i with the input's axes: allocated zeroed on first use, or a view of its
  /// parent's adjoint when the input is a view. Accumulate into it in place.
  [[nodiscard]] virtual const Tensor& adjoint(int i) = 0;
  /// Adjoint of input i for a rule about to write it: `fresh` comes back true when nothing has
  /// been accumulated into it yet and its buffer is NOT initialised, so the rule must write every
  /// element (not accumulate). Views of a parent's adjoint, and an input the op takes twice, are
  /// never fresh. Rules use it through adjoint_for_pass / add_to_adjoint (core/ops/dispatch.h).
  [[nodiscard]] virtual const Tensor& adjoint_to_write(int i, bool& fresh) {
    fresh = false;
    return adjoint(i);
  }
  /// Offers `value` as input i's whole adjoint when nothing has been accumulated into it yet:
  /// the adjoint then refers to `value` (typically a broadcast view of the cotangent, nothing
  /// written) and is copied into a buffer of its own only if another contribution is added
  /// later. Returns false, taking nothing, where that does not apply (an adjoint exists, the
  /// input is a view or taken twice, the axes differ) or the context does not lend.
  [[nodiscard]] virtual bool lend_adjoint(int i, const Tensor& value) {
    (void)i;
    (void)value;
    return false;
  }
  /// Whether lend_adjoint can take anything here (so a rule builds no view for nothing).
  [[nodiscard]] virtual bool lends() const { return false; }
  [[nodiscard]] virtual const Attrs& attrs() const = 0;
};

/// What a JVP rule sees: the inputs, the output, and the inputs' tangents (undefined = zero).
class JvpContext {
 public:
  virtual ~JvpContext() = default;
  [[nodiscard]] virtual const Tensor& input(int i) const = 0;
  [[nodiscard]] virtual const Tensor& output() const = 0;
  [[nodiscard]] virtual int num_inputs() const = 0;
  /// Tangent of input i, with the input's axes; undefined when it is zero.
  [[nodiscard]] virtual const Tensor& tangent(int i) const = 0;
  [[nodiscard]] virtual const Attrs& attrs() const = 0;
};

/// A generated test case for the generic op tests.
struct OpSample {
  std::vector<Tensor> inputs;
  Attrs attrs;
};

/// Random source for samplers.
using SampleRng = std::mt19937_64;

/// Which residuals an op keeps for its VJP: bit i for input i, kSaveOutput for the output.
inline constexpr uint32_t kSaveOutput = 1u << 31;

/// How an attribute is spelled in a model file and where it lands in Attrs.
enum class AttrKind {
  names,    ///< list of axis names -> Attrs::axes
  names2,   ///< list of axis names -> Attrs::axes2
  name,     ///< one axis name, appended to Attrs::axes (attributes in declaration order)
  shape,    ///< list of declared axis names -> Attrs::shape with the model's sizes
  integer,  ///< -> Attrs::i[slot]
  boolean,  ///< -> Attrs::i[slot] (0 or 1)
  dtype,    ///< "float64" | "float32" | "int64" | "bool" -> Attrs::i[slot]
};

/// One attribute of an op as a model file spells it. The model loader parses by these, and the op
/// reference (docs/ops.md) and the ops' schema (model/ops.schema.json) are generated from them.
struct AttrSpec {
  const char* key;
  AttrKind kind;
  const char* doc;  ///< one line for the reference
  int slot = 0;
  bool required = true;
  int64_t fallback = 0;  ///< integer/boolean default when not required
  /// The named axes get their size from the op, not from an input (rename's targets, stack's new
  /// axis): the result must have them at their declared sizes.
  bool sizes_axes = false;
  /// A list of axes that, when absent, means every axis the first input shows (mapped axes
  /// excluded): the reductions' `axes`.
  bool all_when_absent = false;
};

/// What an op does with an axis split across ranks (core/distributed.h) that its attributes name
/// or its result lacks. Any other use of a sharded axis is an Error naming the op and the axis.
enum class ShardRule : uint8_t {
  local,      ///< must neither name the sharded axis nor drop it (elementwise, most ops)
  layout,     ///< may name it and keeps it (transpose)
  sum,        ///< a sum over it: the per-rank results are summed over ranks (sum, dot)
  mean,       ///< a mean over it: per-rank means weighted by block size, summed over ranks
  max,        ///< a maximum over it: the elementwise maximum over ranks
  logsumexp,  ///< log Σ exp over it: combined through the maximum over ranks
  gather,     ///< the op is a collective of its own and returns a whole tensor
};

/// One op. Instances are static and immutable; the registry lists them. Written with designated
/// initialisers; docs/architecture.md says what each field is for when adding an op.
struct OpDef {
  const char* name = "";
  int arity = 0;  ///< number of inputs, or -1 for variadic
  /// Checks the inputs and attributes, computes the output (view or new buffer).
  Tensor (*forward)(Inputs inputs, const Attrs& attrs) = nullptr;
  /// Reverse rule; null when the output is not differentiable (comparisons).
  void (*vjp)(VjpContext& ctx) = nullptr;
  /// Forward rule: the output tangent; null when the output is not differentiable.
  Tensor (*jvp)(JvpContext& ctx) = nullptr;
  uint32_t saves = 0;    ///< residuals for vjp (see kSaveOutput)
  uint32_t nondiff = 0;  ///< bit i: input i never receives a gradient (conditions, indices)
  bool view = false;     ///< the output aliases input 0; its adjoint is forward() of the parent's adjoint
  /// Generates a valid random call for the generic VJP/JVP/forward tests.
  OpSample (*sample)(SampleRng& rng, DType dtype) = nullptr;
  /// The op reads no attributes, so the tape stores none for it (the hot elementwise ops).
  bool attr_free = false;
  /// The reverse rule by value, for small contiguous host calls (core/ops/lane.h); null: none.
  const LaneRule* lane = nullptr;
  /// The VJP rule accepts a cotangent with batch axes beyond the output's (several VJPs in one
  /// sweep: jacobian). Rules that loop over the output's own layout set this to false.
  bool batched_vjp = true;
  /// The JVP rule accepts tangents with batch axes beyond their primals' (several JVPs in one
  /// sweep: forward-mode jacobian). Checked for every op by the generic tests.
  bool batched_jvp = true;
  /// The op takes complex operands (complex128, complex64; docs/complex.md lists them); any other op
  /// given one raises a DTypeError naming the op and the dtype. The generic complex tests check the
  /// VJP and JVP of every op that sets it in the real and imaginary directions.
  bool complex = false;
  /// What the op does where an operand is sharded across ranks.
  ShardRule shard = ShardRule::local;
  /// The reverse rule communicates with the other ranks: the reverse sweep runs it on every rank,
  /// with a zero cotangent where none arrived, so that no rank waits for another forever.
  bool collective_vjp = false;
  /// The attributes a model file gives the op (empty: none).
  std::span<const AttrSpec> attrs = {};
  /// One line for the op reference (docs/ops.md): what the op computes.
  const char* doc = "";
};

/// All registered ops, in registration order. Immutable after first use.
const std::vector<const OpDef*>& registered_ops();
/// The op named `name`, or null.
const OpDef* find_op(const char* name);

}  // namespace tenax
