// The planned inline calls' loops (inline_call.h): which loop a call of a kind, length and strides
// runs, and a call's InlineCall from its flat arguments. Out of line, so that including the header
// instantiates none of the loops (the AVX2 objects include it and must define none of them).
#include "tenax/core/ops/inline_call.h"

namespace tenax::detail {

ReplayFn inline_run(const InlineCall& c) {
  using inline_detail::pick;
  using K = ScalarLoop::Kind;
  switch (c.kind) {
    case K::copy:
      return pick<K::copy>(c);
    case K::acc:
      return pick<K::acc>(c);
    case K::neg:
      return pick<K::neg>(c);
    case K::acc_neg:
      return pick<K::acc_neg>(c);
    case K::add:
      return pick<K::add>(c);
    case K::sub:
      return pick<K::sub>(c);
    case K::mul:
      return pick<K::mul>(c);
    case K::mul_acc:
      return pick<K::mul_acc>(c);
    default:
      return nullptr;
  }
}

InlineCall resolve_form(const ScalarLoop::Form& f, const FlatArg* args, int64_t outer, int64_t n) {
  const FlatArg& o = args[f.operand[0]];
  const FlatArg& a = args[f.operand[1]];
  const FlatArg& b = args[f.arity > 2 ? f.operand[2] : f.operand[1]];
  InlineCall c;
  c.o = static_cast<double*>(o.data);
  c.a = static_cast<const double*>(a.data);
  c.b = static_cast<const double*>(b.data);
  c.so = o.stride;
  c.sa = a.stride;
  c.sb = b.stride;
  c.n = n;
  c.outer = outer;
  c.oo = o.outer_stride;
  c.oa = a.outer_stride;
  c.ob = b.outer_stride;
  c.kind = f.kind;
  c.run = inline_run(c);
  return c;
}

}  // namespace tenax::detail
