// The fused loop of single-element scan steps: building, copy renaming and dead-code removal and
// register forwarding, moving loads and stores folded into arithmetic (the lowered form and the
// run loop: scalar_loop_run.cpp).
#include "tenax/core/ops/scalar_loop.h"

#include <algorithm>
#include <atomic>

#include "tenax/core/env.h"

namespace tenax::detail {
namespace {

std::atomic<bool>& scalar_loops_flag() {
  static std::atomic<bool> on = env_switch("TENAX_SCALAR_LOOPS");
  return on;
}

using Ins = ScalarLoop::Ins;
using Kind = ScalarLoop::Kind;

// Whether an instruction of this kind reads the element it writes (a call: assume so).
bool reads_output(Kind k) {
  switch (k) {
    case Kind::copy:
    case Kind::neg:
    case Kind::add:
    case Kind::sub:
    case Kind::mul:
    case Kind::copy_in:
      return false;
    default:
      return true;
  }
}

// The fixed element an instruction writes (p[0]), or null when it writes a moving one.
const void* written(const Ins& c) { return c.moving == 0 ? nullptr : c.p[0]; }

// Whether c reads the fixed element at `at` (moving operands point into stacked tensors, never at
// the fixed elements of a step).
bool reads(const Ins& c, const void* at) {
  for (int a = 1; a < c.arity; ++a)
    if (a != c.moving && c.p[a] == at) return true;
  return c.moving != 0 && c.p[0] == at && reads_output(c.kind);
}

bool accesses(const Ins& c, const void* at) { return written(c) == at || reads(c, at); }

bool is_fixed_copy(const Ins& c) { return c.kind == Kind::copy && c.p[0] != c.p[1]; }

// Whether c reads or writes an element that moves (into a stacked tensor), or calls a kernel
// (which may): what a moving store folded across c could change for it.
bool touches_moving(const Ins& c) { return c.moving >= 0 || c.kind == Kind::call; }
// Whether c writes an element that moves, or calls a kernel: what a moving load folded across c
// could see change.
bool writes_moving(const Ins& c) {
  return c.moving == 0 || c.kind == Kind::call || c.kind == Kind::call_moving;
}

bool is_arithmetic(Kind k) {
  return k == Kind::add || k == Kind::sub || k == Kind::mul || k == Kind::mul_acc;
}

}  // namespace

void ScalarLoop::push(Ins ins) {
  drop_jit();
  if (code_.empty()) {  // a step's loop is tens of instructions: grow once, not by doubling
    code_.reserve(64);
    ops_.reserve(65);
  }
  if (ins.moving >= 0) {
    const bool in = ins.moving == 1;
    switch (ins.kind) {
      case Kind::copy:
        ins.kind = in ? Kind::copy_in : Kind::copy_out;
        break;
      case Kind::acc:
        ins.kind = in ? Kind::acc_in : Kind::acc_out;
        break;
      default:
        if (!moves_inline(ins.kind, ins.moving)) ins.kind = Kind::call_moving;
    }
  }
  code_.push_back(ins);
  if (!ops_.empty()) ops_.pop_back();  // the end-of-step op, appended again after this one
  ops_.push_back(lowered(ins, static_cast<uint32_t>(code_.size() - 1)));
  ops_.push_back(end_of_step());
}

bool scalar_loops_enabled() { return scalar_loops_flag().load(std::memory_order_relaxed); }
void set_scalar_loops(bool on) { scalar_loops_flag().store(on, std::memory_order_relaxed); }

bool ScalarLoop::is_live(const void* p) const {
  for (const void* q : live_)
    if (q == p) return true;
  return false;
}

// An instruction is kept when it writes a moving or live-out element, or an element another kept
// instruction reads (anywhere in the step: conservative).
bool ScalarLoop::drop_dead() {
  const size_t n = code_.size();
  // Who writes each fixed element, sorted by element, so that a reader finds its writers.
  std::vector<std::pair<const void*, size_t>> writers;
  writers.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (const void* w = written(code_[i])) writers.emplace_back(w, i);
  std::sort(writers.begin(), writers.end());
  std::vector<char> keep(n, 0);
  std::vector<size_t> work;
  for (size_t i = 0; i < n; ++i)
    if (!written(code_[i]) || is_live(written(code_[i]))) {
      keep[i] = 1;
      work.push_back(i);
    }
  auto keep_writers_of = [&](size_t r, const void* at) {
    auto it = std::lower_bound(writers.begin(), writers.end(), std::make_pair(at, size_t{0}));
    for (; it != writers.end() && it->first == at; ++it)
      if (!keep[it->second] && it->second != r) {
        keep[it->second] = 1;
        work.push_back(it->second);
      }
  };
  while (!work.empty()) {
    const size_t r = work.back();
    work.pop_back();
    const Ins& c = code_[r];
    for (int a = 1; a < c.arity; ++a)
      if (a != c.moving) keep_writers_of(r, c.p[a]);
    if (c.moving != 0 && reads_output(c.kind)) keep_writers_of(r, c.p[0]);
  }
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (keep[i]) code_[k++] = code_[i];
  code_.resize(k);
  return k != n;
}

// Copy j: dst = src. The instructions after it use src instead of dst, and the copy goes. Valid
// when dst is the loop's own and untouched before the copy in the step, and src is not written
// between the copy and dst's last use (which may write src whole), nor read there when those uses
// also write dst. If they write dst (now src), src must be rewritten whole by the last use or
// after it, so that it ends the step as before.
bool ScalarLoop::merge_forward(size_t j) {
  const void* dst = code_[j].p[0];
  const void* src = code_[j].p[1];
  const size_t n = code_.size();
  if (is_live(dst)) return false;
  for (size_t m = 0; m < j; ++m)
    if (accesses(code_[m], dst)) return false;
  size_t last = j;
  bool writes_dst = false;
  for (size_t m = j + 1; m < n; ++m)
    if (accesses(code_[m], dst)) {
      last = m;
      writes_dst |= written(code_[m]) == dst;
    }
  if (last == j) return false;  // unused: drop_dead's business
  // In between, src may be read while dst (now src) is only read: both still hold the copy.
  for (size_t m = j + 1; m < last; ++m)
    if (written(code_[m]) == src || (writes_dst && reads(code_[m], src))) return false;
  // The last use may write src whole (it reads dst, now src, before it writes).
  if (reads(code_[last], src)) return false;
  if (writes_dst && written(code_[last]) != src) {
    size_t f = last + 1;
    while (f < n && !accesses(code_[f], src)) ++f;
    if (f == n || written(code_[f]) != src || reads(code_[f], src)) return false;
  }
  for (size_t m = j + 1; m <= last; ++m)
    for (int a = 0; a < code_[m].arity; ++a)
      if (a != code_[m].moving && code_[m].p[a] == dst) code_[m].p[a] = const_cast<void*>(src);
  code_.erase(code_.begin() + static_cast<std::ptrdiff_t>(j));
  return true;
}

// Copy j: dst = src, where instruction i < j last wrote src (whole). Instruction i writes dst
// instead, the reads of src in between read dst, and the copy goes. Valid when src is the loop's
// own and nothing else in the step (before i or after j, which the next step sees) touches it,
// and dst is untouched between i and j.
bool ScalarLoop::merge_backward(size_t j) {
  const void* dst = code_[j].p[0];
  const void* src = code_[j].p[1];
  if (is_live(src)) return false;
  size_t i = j;
  while (i > 0 && written(code_[i - 1]) != src) --i;
  if (i == 0) return false;
  --i;
  if (reads_output(code_[i].kind) || reads(code_[i], src)) return false;
  for (size_t m = i + 1; m < j; ++m)
    if (accesses(code_[m], dst)) return false;
  for (size_t m = 0; m < code_.size(); ++m)
    if ((m < i || m > j) && accesses(code_[m], src)) return false;
  code_[i].p[0] = const_cast<void*>(dst);
  for (size_t m = i + 1; m < j; ++m)
    for (int a = 1; a < code_[m].arity; ++a)
      if (a != code_[m].moving && code_[m].p[a] == src) code_[m].p[a] = const_cast<void*>(dst);
  code_.erase(code_.begin() + static_cast<std::ptrdiff_t>(j));
  return true;
}

// Copy-in i: t = V (a moving element), t the loop's own, read by at most two arithmetic
// instructions after i and accessed nowhere else in the step. Those read V in place of t and the
// copy goes. Nothing between i and the last reader may write a moving element or call a kernel.
// (A copy of an element onto itself goes too.)
bool ScalarLoop::fold_load(size_t i) {
  const Ins& in = code_[i];
  const void* t = in.p[0];
  if (in.kind != Kind::copy_in || is_live(t)) return false;
  std::vector<std::pair<size_t, int>> uses;  // (instruction, operand)
  for (size_t m = 0; m < code_.size(); ++m) {
    if (m == i || !accesses(code_[m], t)) continue;
    const Ins& c = code_[m];
    if (m < i || written(c) == t || c.moving >= 0 || !is_arithmetic(c.kind)) return false;
    int operand = -1;
    for (int a = 1; a < c.arity; ++a)
      if (c.p[a] == t) {
        if (operand >= 0) return false;  // read twice: one moving operand per instruction
        operand = a;
      }
    if (operand < 0 || !moves_inline(c.kind, operand)) return false;  // (t as mul_acc's sum)
    uses.emplace_back(m, operand);
  }
  if (uses.empty() || uses.size() > 2) return false;
  for (size_t m = i + 1; m < uses.back().first; ++m)
    if (writes_moving(code_[m])) return false;
  for (const auto& [m, a] : uses) {
    Ins& c = code_[m];
    c.moving = static_cast<int8_t>(a);
    c.p[a] = in.p[1];
    c.stride = in.stride;
    c.relative = in.relative;
  }
  code_.erase(code_.begin() + static_cast<std::ptrdiff_t>(i));
  return true;
}

// Copy-out j: V = y (a moving element), y the loop's own, written whole by one arithmetic
// instruction w before j and read by j alone. w writes V and the copy goes. Nothing between w and
// j may touch a moving element or call a kernel.
bool ScalarLoop::fold_store(size_t j) {
  const Ins& out = code_[j];
  const void* y = out.p[1];
  if (out.kind != Kind::copy_out || is_live(y)) return false;
  size_t w = code_.size();
  for (size_t m = 0; m < code_.size(); ++m) {
    if (m == j || !accesses(code_[m], y)) continue;
    if (w != code_.size() || m > j || written(code_[m]) != y || reads(code_[m], y)) return false;
    w = m;
  }
  if (w == code_.size() || code_[w].moving >= 0 || !is_arithmetic(code_[w].kind) ||
      !moves_inline(code_[w].kind, 0))
    return false;
  for (size_t m = w + 1; m < j; ++m)
    if (touches_moving(code_[m])) return false;
  Ins& c = code_[w];
  c.moving = 0;
  c.p[0] = out.p[0];
  c.stride = out.stride;
  c.relative = out.relative;
  code_.erase(code_.begin() + static_cast<std::ptrdiff_t>(j));
  return true;
}

// Add j: o = o + t, where t = x * y (mul i, the loop's own t, read by j alone): one mul_acc
// o += x * y at j, the mul gone — the same two roundings. x and y may not be written between i
// and j, nor (if the mul's operand moves) a moving element.
bool ScalarLoop::fuse_mul_acc(size_t j) {
  const Ins& add = code_[j];
  if (add.kind != Kind::add || add.moving >= 0 || add.p[0] != add.p[1] || add.p[2] == add.p[0]) return false;
  const void* t = add.p[2];
  if (is_live(t)) return false;
  size_t i = code_.size();
  for (size_t m = 0; m < code_.size(); ++m) {
    if (m == j || !accesses(code_[m], t)) continue;
    if (i != code_.size() || m > j || code_[m].kind != Kind::mul || reads(code_[m], t)) return false;
    i = m;
  }
  if (i == code_.size() || !moves_inline(Kind::mul_acc, code_[i].moving)) return false;
  const Ins& mul = code_[i];
  for (size_t m = i + 1; m < j; ++m) {
    const void* w = written(code_[m]);
    if ((w && (w == mul.p[1] || w == mul.p[2])) || (mul.moving >= 0 && writes_moving(code_[m]))) return false;
  }
  Ins fused = mul;
  fused.kind = Kind::mul_acc;
  fused.p[0] = add.p[0];
  code_[j] = fused;
  code_.erase(code_.begin() + static_cast<std::ptrdiff_t>(i));
  return true;
}

namespace {

// Whether a and b are the same instruction but for the address of their moving operand.
bool same_but_moving(const Ins& a, const Ins& b) {
  if (a.fn != b.fn || a.kind != b.kind || a.arity != b.arity || a.moving != b.moving ||
      a.from_last != b.from_last || a.relative != b.relative || a.stride != b.stride)
    return false;
  for (int k = 0; k < a.arity; ++k)
    if (k != a.moving && a.p[k] != b.p[k]) return false;
  return true;
}

}  // namespace

bool ScalarLoop::simplify_as(const ScalarLoop& done) {
  if (done.pushed_.size() != code_.size() || done.live_ != live_) return false;
  std::vector<std::pair<void*, void*>> moved;  // done's moving addresses -> this loop's
  for (size_t i = 0; i < code_.size(); ++i) {
    const Ins &a = code_[i], &b = done.pushed_[i];
    if (!same_but_moving(a, b)) return false;
    if (a.moving < 0) continue;
    void* from = b.p[b.moving];
    void* to = a.p[a.moving];
    auto it = std::find_if(moved.begin(), moved.end(), [&](const auto& m) { return m.first == from; });
    if (it == moved.end())
      moved.emplace_back(from, to);
    else if (it->second != to)
      return false;  // one address of done's is two of this loop's
  }
  std::vector<Ins> code = done.code_;
  for (Ins& c : code) {
    if (c.moving < 0) continue;
    auto it =
        std::find_if(moved.begin(), moved.end(), [&](const auto& m) { return m.first == c.p[c.moving]; });
    if (it == moved.end()) return false;
    c.p[c.moving] = it->second;
  }
  pushed_ = std::move(code_);
  code_ = std::move(code);
  lower();
  return true;
}

bool ScalarLoop::rebase(const std::vector<Moved>& moved) {
  auto moved_to = [&](const void* p) -> char* {
    const auto* at = static_cast<const char*>(p);
    for (const Moved& m : moved)
      if (at >= m.from && at < m.from + m.bytes) return m.to + (at - m.from);
    return nullptr;
  };
  for (const Ins& c : code_)
    if (c.moving >= 0 && !moved_to(c.p[c.moving])) return false;
  for (Ins& c : code_)
    if (c.moving >= 0) c.p[c.moving] = moved_to(c.p[c.moving]);
  pushed_.clear();  // (not rebased: this loop can no longer be simplify_as's `done`)
  for (Op& op : ops_) {
    if (op.code == 0xff) continue;  // the end of a step
    const Ins& c = code_[op.ins];
    if (c.moving >= 0 && c.moving < 3) op.p[c.moving] = c.p[c.moving];
  }
  return true;
}

void ScalarLoop::simplify() {
  pushed_ = code_;
  // Rounds of O(n^2): each merge scans the step once; a merge erases copy j, so j stays.
  bool changed = true;
  while (changed) {
    changed = drop_dead();
    for (size_t j = 0; j < code_.size();) {
      if (is_fixed_copy(code_[j]) && (merge_forward(j) || merge_backward(j))) {
        changed = true;
        continue;
      }
      ++j;
    }
  }
  for (size_t j = 0; j < code_.size();)
    if (code_[j].kind == Kind::copy && code_[j].p[0] == code_[j].p[1])
      code_.erase(code_.begin() + static_cast<std::ptrdiff_t>(j));
    else if (!fold_load(j) && !fold_store(j) && !fuse_mul_acc(j))
      ++j;
  link();
}

namespace {

// Which elements hold the value instruction c leaves in the run loop's register: the element it
// writes (and a copy's source); none for a call or a store into a moving element.
int same_as_last(const Ins& c, const void* out[2]) {
  switch (c.kind) {
    case Kind::call:
    case Kind::call_moving:
    case Kind::acc_out:
      return 0;
    case Kind::copy:
      out[0] = c.p[0];
      out[1] = c.p[1];
      return 2;
    case Kind::copy_out:
      out[0] = c.p[1];
      return 1;
    default:
      if (c.moving == 0) return 0;  // an arithmetic kind storing into a moving element
      out[0] = c.p[0];
      return 1;
  }
}

}  // namespace

void ScalarLoop::link() {
  for (size_t i = 0; i < code_.size(); ++i) {
    Ins& c = code_[i];
    c.from_last = 0;
    if (i == 0 || c.kind == Kind::call || c.kind == Kind::call_moving) continue;
    const void* same[2] = {};
    const int n_same = same_as_last(code_[i - 1], same);
    const int first = reads_output(c.kind) ? 0 : 1;
    for (int a = first; a < c.arity; ++a)
      for (int k = 0; k < n_same; ++k)
        if (a != c.moving && c.p[a] == same[k]) c.from_last = static_cast<uint8_t>(c.from_last | (1u << a));
  }
  lower();
}

}  // namespace tenax::detail
