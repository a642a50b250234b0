// A fused scalar loop as x86-64 machine code: each instruction's arithmetic as SSE2 scalar
// instructions on values kept in xmm registers within a step (stored through to memory as the
// lowered code stores them), so a step costs its arithmetic and its loads and stores, without the
// handlers' jumps. Linux on x86-64 only; elsewhere (or when the system refuses executable memory)
// loops keep running on the lowered code's handlers (scalar_loop_run.cpp).
#include <atomic>
#include <cstddef>
#include <cstring>
#include <vector>

#include "tenax/core/env.h"
#include "tenax/core/ops/scalar_loop.h"

#if defined(__x86_64__) && defined(__linux__)
#include <sys/mman.h>
#define TENAX_SCALAR_JIT_X86_64 1
#endif

namespace tenax::detail {
namespace {

std::atomic<bool>& scalar_jit_flag() {
  static std::atomic<bool> on = env_switch("TENAX_SCALAR_JIT");
  return on;
}


std::atomic<int64_t> g_compiled_loops{0};

}  // namespace

bool scalar_jit_enabled() { return scalar_jit_flag().load(std::memory_order_relaxed); }
int64_t scalar_jit_loops() { return g_compiled_loops.load(std::memory_order_relaxed); }
void set_scalar_jit(bool on) { scalar_jit_flag().store(on, std::memory_order_relaxed); }

#if TENAX_SCALAR_JIT_X86_64

namespace {

using Ins = ScalarLoop::Ins;
using Kind = ScalarLoop::Kind;
/// (code, s, s - offset, count, dir): the machine code's entry (System V calling convention).
using Entry = void (*)(const Ins*, int64_t, int64_t, int64_t, int64_t);

// Sign bit of neg's xorpd (an aligned 16-byte memory operand).
alignas(16) const uint64_t kSignMask[2] = {0x8000000000000000ull, 0};

// A memory operand: [rax], or [rax + index * 2^scale] with index rcx, r12 or r13.
struct Mem {
  int index = -1;
  unsigned scale = 0;
};

// Bytes of x86-64 code. Registers while a loop runs: rbx the loop's instructions (code_), r12 the
// step, r13 the step less the offset, r14 the steps left, r15 dir; rax and rcx address operands;
// xmm0 is scratch, xmm1..15 hold values; 48 bytes of stack hold a moving call's pointers.
class Assembler {
 public:
  std::vector<uint8_t> bytes;

  void u8(unsigned v) { bytes.push_back(static_cast<uint8_t>(v)); }
  void u8s(std::initializer_list<unsigned> vs) {
    for (unsigned v : vs) u8(v);
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) u8((v >> (8 * i)) & 0xffu);
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) u8(static_cast<unsigned>((v >> (8 * i)) & 0xffu));
  }
  void mov_rax(const void* p) {  // movabs rax, p
    u8s({0x48, 0xB8});
    u64(reinterpret_cast<uintptr_t>(p));
  }
  void mov_rcx(int64_t v) {  // movabs rcx, v
    u8s({0x48, 0xB9});
    u64(static_cast<uint64_t>(v));
  }
  void rax_from_code(int32_t disp) {  // mov rax, [rbx + disp32]
    u8s({0x48, 0x8B, 0x83});
    u32(static_cast<uint32_t>(disp));
  }
  void rdi_to_code(int32_t disp) {  // lea rdi, [rbx + disp32]
    u8s({0x48, 0x8D, 0xBB});
    u32(static_cast<uint32_t>(disp));
  }
  void rcx_times_step(bool relative) { u8s({0x49, 0x0F, 0xAF, relative ? 0xCDu : 0xCCu}); }  // imul rcx, r12|r13
  void add_rax_rcx() { u8s({0x48, 0x01, 0xC8}); }
  void rax_to_stack(int k) { u8s({0x48, 0x89, 0x44, 0x24, static_cast<unsigned>(8 * k)}); }  // mov [rsp+8k], rax
  void rdi_to_stack() { u8s({0x48, 0x8D, 0x3C, 0x24}); }                                    // lea rdi, [rsp]
  void call_rax() { u8s({0xFF, 0xD0}); }
  // An SSE2 instruction on two xmm registers: prefix (0 for none), 0F op, ModRM d <- s.
  void sse(unsigned prefix, unsigned op, int d, int s) {
    if (prefix) u8(prefix);
    const unsigned rex = 0x40u | (d >= 8 ? 4u : 0u) | (s >= 8 ? 1u : 0u);
    if (rex != 0x40u) u8(rex);
    u8s({0x0F, op, 0xC0u | ((static_cast<unsigned>(d) & 7u) << 3) | (static_cast<unsigned>(s) & 7u)});
  }
  // An SSE2 instruction with a memory operand.
  void sse_mem(unsigned prefix, unsigned op, int reg, Mem m) {
    if (prefix) u8(prefix);
    const unsigned rex = 0x40u | (reg >= 8 ? 4u : 0u) | (m.index >= 8 ? 2u : 0u);
    if (rex != 0x40u) u8(rex);
    const unsigned r = (static_cast<unsigned>(reg) & 7u) << 3;
    u8s({0x0F, op});
    if (m.index < 0)
      u8(r);
    else
      u8s({r | 4u, (m.scale << 6) | ((static_cast<unsigned>(m.index) & 7u) << 3)});
  }
  void movsd_load(int reg, Mem m = {}) { sse_mem(0xF2, 0x10, reg, m); }
  void movsd_store(int reg, Mem m = {}) { sse_mem(0xF2, 0x11, reg, m); }
  void movapd(int d, int s) { sse(0x66, 0x28, d, s); }
  void addsd(int d, int s) { sse(0xF2, 0x58, d, s); }
  void mulsd(int d, int s) { sse(0xF2, 0x59, d, s); }
  void subsd(int d, int s) { sse(0xF2, 0x5C, d, s); }
  void xorpd_mem(int reg) { sse_mem(0x66, 0x57, reg, {}); }

  void prologue() {
    u8s({0x53, 0x41, 0x54, 0x41, 0x55, 0x41, 0x56, 0x41, 0x57});  // push rbx, r12..r15
    u8s({0x48, 0x83, 0xEC, 0x30});                                // sub rsp, 48 (rsp 16-aligned)
    u8s({0x48, 0x89, 0xFB, 0x49, 0x89, 0xF4, 0x49, 0x89, 0xD5});  // rbx, r12, r13 <- rdi, rsi, rdx
    u8s({0x49, 0x89, 0xCE, 0x4D, 0x89, 0xC7});                    // r14, r15 <- rcx, r8
  }
  // The next step, and back to `head` while steps are left; then return.
  void end_of_step_and_epilogue(size_t head) {
    u8s({0x4D, 0x01, 0xFC, 0x4D, 0x01, 0xFD, 0x49, 0xFF, 0xCE});  // r12 += r15; r13 += r15; --r14
    u8s({0x0F, 0x85});                                            // jnz head
    u32(static_cast<uint32_t>(static_cast<int64_t>(head) - static_cast<int64_t>(bytes.size() + 4)));
    u8s({0x48, 0x83, 0xC4, 0x30});
    u8s({0x41, 0x5F, 0x41, 0x5E, 0x41, 0x5D, 0x41, 0x5C, 0x5B, 0xC3});  // pop r15..r12, rbx; ret
  }
};

// Which fixed element each of xmm1..15 holds within the current step (written through: memory
// always holds the same value), least recently used out.
class Registers {
 public:
  int find(const void* p) {
    for (int r = 1; r < 16; ++r)
      if (holds_[r] == p) return touch(r);
    return -1;
  }
  // A register for a new value, none of `pinned` (bits); it holds no element until set().
  int take(unsigned pinned) {
    int best = -1;
    for (int r = 1; r < 16; ++r)
      if (!(pinned & (1u << r)) && (best < 0 || used_[r] < used_[best])) best = r;
    holds_[best] = nullptr;
    return touch(best);
  }
  void set(int r, const void* p) {
    for (auto& h : holds_)
      if (h == p) h = nullptr;
    holds_[r] = p;
  }
  void forget() {
    for (auto& h : holds_) h = nullptr;
  }
  [[nodiscard]] const void* holds(int r) const { return holds_[r]; }

 private:
  int touch(int r) {
    used_[r] = ++clock_;
    return r;
  }
  const void* holds_[16] = {};
  uint64_t used_[16] = {};
  uint64_t clock_ = 0;
};

// One loop's machine code, made instruction by instruction.
class Builder {
 public:
  explicit Builder(const std::vector<Ins>& code) : code_(code) {}

  // The elements held in registers at the end of a step are held there at the start of the next
  // one too: loaded before the first step, and at the end of each step moved back into the
  // registers the step started with (or loaded, where the step lost them to a call or to other
  // values). A value carried from step to step then stays in its register.
  bool build() {
    Builder probe(code_);
    if (!probe.body()) return false;
    a_.prologue();
    for (int r = 1; r < 16; ++r)
      if (const void* p = probe.regs_.holds(r)) {
        a_.mov_rax(p);
        a_.movsd_load(r);
        regs_.set(r, p);
      }
    const Registers start = regs_;
    const size_t head = a_.bytes.size();
    if (!body()) return false;
    restore(start);
    a_.end_of_step_and_epilogue(head);
    return true;
  }
  [[nodiscard]] const std::vector<uint8_t>& bytes() const { return a_.bytes; }

 private:
  bool body() {
    for (size_t i = 0; i < code_.size(); ++i)
      if (!instruction(i)) return false;
    return true;
  }
  // Puts each element `start` holds back into its register: moves between registers (a cycle
  // broken through xmm0), then loads of those no register holds now.
  void restore(const Registers& start) {
    constexpr int kLoad = -2, kDone = -1;
    int src[16];  // per register: the register to move its start element from, kLoad or kDone
    for (int r = 1; r < 16; ++r) {
      src[r] = kDone;
      if (!start.holds(r)) continue;
      const int q = regs_.find(start.holds(r));
      src[r] = q < 0 ? kLoad : q == r ? kDone : q;
    }
    auto needed = [&](int q) {
      for (int r = 1; r < 16; ++r)
        if (src[r] == q) return true;
      return false;
    };
    for (;;) {
      bool pending = false, moved = false;
      for (int r = 1; r < 16; ++r) {
        if (src[r] < 0) continue;
        pending = true;
        if (needed(r)) continue;  // its value goes elsewhere first
        a_.movapd(r, src[r]);
        src[r] = kDone;
        moved = true;
      }
      if (!pending) break;
      if (moved) continue;
      for (int r = 1; r < 16; ++r)  // only cycles are left: park one register's value in xmm0
        if (src[r] >= 0) {
          a_.movapd(0, r);
          for (int t = 1; t < 16; ++t)
            if (src[t] == r) src[t] = 0;
          break;
        }
    }
    for (int r = 1; r < 16; ++r)
      if (src[r] == kLoad) {
        a_.mov_rax(start.holds(r));
        a_.movsd_load(r);
      }
  }

  static int32_t pointer_at(size_t i, int a) {
    return static_cast<int32_t>(i * sizeof(Ins) + offsetof(Ins, p) + static_cast<size_t>(a) * sizeof(void*));
  }
  // Operand a's element at this step: its pointer at step 0 in rax, and the step (or the step
  // less the offset) times the stride as a scaled index (r12 or r13 by 1, 2, 4 or 8) or in rcx.
  Mem moving_address(size_t i, int a) {
    const Ins& c = code_[i];
    a_.rax_from_code(pointer_at(i, a));
    if (c.stride == 0) return {};
    for (unsigned k = 0; k < 4; ++k)
      if (c.stride == (int64_t{1} << k)) return {c.relative ? 13 : 12, k};
    a_.mov_rcx(c.stride);
    a_.rcx_times_step(c.relative);
    return {1, 0};
  }
  // The register holding operand a's value (loaded if need be), pinned for this instruction.
  int value(size_t i, int a) {
    const Ins& c = code_[i];
    int r = a == c.moving ? -1 : regs_.find(c.p[a]);
    if (r < 0) {
      r = regs_.take(pinned_);
      if (a == c.moving) {
        a_.movsd_load(r, moving_address(i, a));
      } else {
        a_.mov_rax(c.p[a]);
        a_.movsd_load(r);
        regs_.set(r, c.p[a]);
      }
    }
    pinned_ |= 1u << r;
    return r;
  }
  // Stores register r into operand 0's element (fixed: r holds that element from now on).
  void store(size_t i, int r) {
    const Ins& c = code_[i];
    if (c.moving == 0) {
      a_.movsd_store(r, moving_address(i, 0));
      return;
    }
    a_.mov_rax(c.p[0]);
    a_.movsd_store(r);
    regs_.set(r, c.p[0]);
  }
  // A fresh register holding `from`'s value, for a result.
  int result_from(int from) {
    const int r = regs_.take(pinned_);
    a_.movapd(r, from);
    return r;
  }
  void call(size_t i) {
    const Ins& c = code_[i];
    if (c.moving < 0) {
      a_.rdi_to_code(pointer_at(i, 0));
    } else {
      for (int k = 0; k < 5; ++k) {
        a_.rax_from_code(pointer_at(i, k));
        if (k == c.moving) {
          a_.mov_rcx(c.stride);
          a_.rcx_times_step(c.relative);
          a_.add_rax_rcx();
        }
        a_.rax_to_stack(k);
      }
      a_.rdi_to_stack();
    }
    a_.rax_from_code(static_cast<int32_t>(i * sizeof(Ins) + offsetof(Ins, fn)));
    a_.call_rax();
    regs_.forget();  // the kernel may write any element, and xmm registers are the caller's
  }

  bool instruction(size_t i) {
    const Ins& c = code_[i];
    pinned_ = 1u;  // (xmm0: scratch)
    switch (c.kind) {
      case Kind::call:
      case Kind::call_moving:
        call(i);
        return true;
      case Kind::copy:
      case Kind::copy_in:
      case Kind::copy_out: {
        const int x = value(i, 1);
        store(i, c.moving == 0 ? x : result_from(x));
        return true;
      }
      case Kind::neg: {
        const int r = result_from(value(i, 1));
        a_.mov_rax(kSignMask);
        a_.xorpd_mem(r);
        store(i, r);
        return true;
      }
      case Kind::acc:
      case Kind::acc_in:
      case Kind::acc_out:
      case Kind::acc_neg: {
        const int o = value(i, 0);
        const int x = value(i, 1);
        const int r = c.moving == 0 ? o : result_from(o);
        if (c.kind == Kind::acc_neg)
          a_.subsd(r, x);
        else
          a_.addsd(r, x);
        store(i, r);
        return true;
      }
      case Kind::add:
      case Kind::sub:
      case Kind::mul: {
        const int x = value(i, 1);
        const int y = value(i, 2);
        const int r = result_from(x);
        if (c.kind == Kind::add) a_.addsd(r, y);
        if (c.kind == Kind::sub) a_.subsd(r, y);
        if (c.kind == Kind::mul) a_.mulsd(r, y);
        store(i, r);
        return true;
      }
      case Kind::mul_acc: {
        const int o = value(i, 0);
        const int x = value(i, 1);
        const int y = value(i, 2);
        a_.movapd(0, x);
        a_.mulsd(0, y);  // the product rounded, then the sum: no FMA
        const int r = result_from(o);
        a_.addsd(r, 0);
        store(i, r);
        return true;
      }
    }
    return false;
  }

  const std::vector<Ins>& code_;
  Assembler a_;
  Registers regs_;
  unsigned pinned_ = 0;
};

// Set once mapping executable memory has failed: later loops do not try again.
std::atomic<bool> g_no_executable_memory{false};

}  // namespace

struct ScalarLoop::Jit {
  void* memory = nullptr;
  size_t bytes = 0;
  Entry entry = nullptr;
  Jit() = default;
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;
  ~Jit() {
    if (memory) munmap(memory, bytes);
  }
};

std::shared_ptr<const ScalarLoop::Jit> ScalarLoop::build_jit(const std::vector<Ins>& code) {
  // (Larger loops than any step makes would need displacements past 32 bits.)
  if (code.size() > (size_t(1) << 20) || g_no_executable_memory.load(std::memory_order_relaxed))
    return nullptr;
  Builder b(code);
  if (!b.build()) return nullptr;
  auto jit = std::make_shared<Jit>();
  jit->bytes = b.bytes().size();
  void* m = mmap(nullptr, jit->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    g_no_executable_memory.store(true, std::memory_order_relaxed);
    return nullptr;
  }
  jit->memory = m;
  std::memcpy(m, b.bytes().data(), jit->bytes);
  if (mprotect(m, jit->bytes, PROT_READ | PROT_EXEC) != 0) {
    g_no_executable_memory.store(true, std::memory_order_relaxed);
    return nullptr;  // (unmapped by ~Jit)
  }
  std::memcpy(&jit->entry, &m, sizeof m);  // (the code's address as a function pointer)
  g_compiled_loops.fetch_add(1, std::memory_order_relaxed);
  return jit;
}

void ScalarLoop::run_jit(const Jit& jit, const Ins* code, int64_t s, int64_t sr, int64_t count, int64_t dir) {
  jit.entry(code, s, sr, count, dir);
}

#else

struct ScalarLoop::Jit {};

std::shared_ptr<const ScalarLoop::Jit> ScalarLoop::build_jit(const std::vector<Ins>&) { return nullptr; }
void ScalarLoop::run_jit(const Jit&, const Ins*, int64_t, int64_t, int64_t, int64_t) {}

#endif

}  // namespace tenax::detail
