#pragma once
// compile: a function of tensors traced once per signature into kernel programs that later calls
// replay — forwards, and backwards when a tape records the call.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tenax/core/tensor.h"

namespace tenax {

struct CompileOptions {
  /// Names the function in errors.
  std::string name = "compiled function";
  /// Signatures kept, each with its traced plan and programs; a call with a new signature past
  /// this many drops the one used least recently. At least 1.
  int cache_size = 8;
  /// Traces allowed over the function's life (-1: no limit). A call that would trace once more
  /// raises an Error naming what differs from the signatures traced so far: set it to 1 to be told
  /// when a hot loop retraces.
  int max_traces = -1;
};

/// What a compiled function did so far (for tests and tuning).
struct CompileStats {
  int64_t traces = 0;    ///< calls that traced the function (a new signature)
  int64_t replays = 0;   ///< calls that replayed a kept plan
  int64_t programs = 0;  ///< sets of buffers and programs captured (one per concurrent use)
  int64_t inlined = 0;   ///< calls that ran the function's ops directly (see compile())
  int64_t eager = 0;     ///< calls of a signature whose function runs op by op (see compile())
};

namespace detail {
class CompiledState;
}

/// A compiled function of tensors to tensors. Copies share one cache; calls from several threads
/// at once each get a set of buffers of their own.
class CompiledFunction {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  CompiledFunction(Fn f, CompileOptions options = {});
  std::vector<Tensor> operator()(const std::vector<Tensor>& args) const;
  [[nodiscard]] CompileStats stats() const;

 private:
  std::shared_ptr<detail::CompiledState> state_;
};

/// A compiled function whose C++ signature is fixed: R(A...) with R Tensor or std::vector<Tensor>,
/// each A a Tensor (or std::vector<Tensor>, alone).
template <class R, class... A>
class Compiled {
 public:
  explicit Compiled(CompiledFunction fn) : fn_(std::move(fn)) {}
  R operator()(const std::decay_t<A>&... args) const {
    std::vector<Tensor> out;
    if constexpr ((std::is_same_v<std::decay_t<A>, std::vector<Tensor>> && ...))
      out = fn_(args...);
    else
      out = fn_(std::vector<Tensor>{args...});
    if constexpr (std::is_same_v<R, Tensor>)
      return out[0];
    else
      return out;
  }
  [[nodiscard]] CompileStats stats() const { return fn_.stats(); }
  /// The untyped function (vector in, vector out).
  [[nodiscard]] const CompiledFunction& function() const { return fn_; }

 private:
  CompiledFunction fn_;
};

namespace detail {

template <class R, class... A>
struct SignatureTraits {
  using result = std::decay_t<R>;
  using compiled = Compiled<result, A...>;
  static constexpr bool vector_args = (std::is_same_v<std::decay_t<A>, std::vector<Tensor>> && ...);
  static constexpr std::size_t arity = sizeof...(A);
};
template <class T>
struct CallTraits : CallTraits<decltype(&T::operator())> {};
template <class C, class R, class... A>
struct CallTraits<R (C::*)(A...) const> : SignatureTraits<R, A...> {};
template <class C, class R, class... A>
struct CallTraits<R (C::*)(A...)> : SignatureTraits<R, A...> {};
template <class R, class... A>
struct CallTraits<R (*)(A...)> : SignatureTraits<R, A...> {};

template <class F, std::size_t... I>
std::vector<Tensor> call_unpacked(const F& f, const std::vector<Tensor>& args, std::index_sequence<I...>) {
  if constexpr (std::is_same_v<std::decay_t<decltype(f(args[I]...))>, Tensor>)
    return {f(args[I]...)};
  else
    return f(args[I]...);
}

}  // namespace detail

/// Compiles `f`, a function of Tensors returning a Tensor or a std::vector<Tensor>: either of
/// fixed arity, f(const Tensor&, const Tensor&, ...), or f(const std::vector<Tensor>&).
///
/// The first call with a signature — each argument's axes (names, sizes, order), dtype and
/// device, whether a tape tracks it, and the axes an enclosing nmap/map maps — runs f once while
/// tracing its ops into a plan, and captures the plan's kernel calls on buffers of its own; later
/// calls with that signature replay those kernel calls on the new arguments, with no dispatch and
/// no allocation but the outputs. When a tape records the call (grad, value_and_grad, vjp,
/// jacobian, jvp, a Tape), the reverse pass replays a reverse program captured the same way, and
/// forward mode (jvp, jacobian with Mode::forward) a tangent program. So, as for a scan body,
/// what f does is fixed at trace time:
/// - C++ control flow in f runs once per signature (being recorded for forward mode is part of it): branch on values with where(), not `if`;
/// - reading a value inside f (item(), at(), to_vector of an argument or of anything computed from
///   one) is an Error naming the op;
/// - tensors f closes over, and anything computed from them alone (including random draws), are
///   constants read at trace time: pass what changes between calls as an argument. A closed-over
///   tensor that a tape tracks is an Error at trace time (its gradient would be lost).
/// Calls inside a scan body or inside another compiled function's trace run f's ops directly: the
/// enclosing trace compiles them. A function that calls scan, map, custom_vjp or a
/// transfer (to()) runs op by op for that signature (stats().eager counts such calls): its scans
/// still replay their compiled steps from one call to the next (a plain scan keeps its body's
/// compiled step), the ops around them are dispatched one by one. A call recorded on a tape holds its set of buffers until the tape is gone (the reverse
/// pass reads its values); a call that finds every set held captures another (about the cost of
/// running f's ops once), so calling one compiled function many times under one tape is no faster
/// than eager: compile the loop, or use scan.
CompiledFunction compile(CompiledFunction::Fn f, CompileOptions options = {});

template <class F>
  requires(!std::is_convertible_v<F, CompiledFunction::Fn>)
auto compile(F f, CompileOptions options = {}) {
  using Traits = detail::CallTraits<F>;
  if constexpr (Traits::vector_args && Traits::arity == 1) {
    CompiledFunction fn(
        [f = std::move(f)](const std::vector<Tensor>& a) -> std::vector<Tensor> {
          if constexpr (std::is_same_v<typename Traits::result, Tensor>)
            return {f(a)};
          else
            return f(a);
        },
        std::move(options));
    return typename Traits::compiled(std::move(fn));
  } else {
    CompiledFunction fn(
        [f = std::move(f)](const std::vector<Tensor>& a) {
          return detail::call_unpacked(f, a, std::make_index_sequence<Traits::arity>{});
        },
        std::move(options));
    return typename Traits::compiled(std::move(fn));
  }
}

}  // namespace tenax
