// Memory accounting: the per-device budget (tensor buffers and tape arrays refused before they are
// allocated, with a message naming the request, the use and the budget), allocator peak figures
// and tape.bytes(), the host pool's reuse of freed blocks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <tenax/tenax.h>

#include "expect_message.h"

namespace tenax {
namespace {

// Restores "no budget" however a test ends.
struct BudgetGuard {
  ~BudgetGuard() { set_memory_budget(Device::cpu(), 0); }
};

TEST(MemoryBudget, ATensorOverTheBudgetIsRefusedBeforeAllocating) {
  BudgetGuard guard;
  const int64_t before = allocator_stats().bytes_in_use;
  set_memory_budget(Device::cpu(), before + (int64_t{1} << 20));
  EXPECT_EQ(memory_budget(Device::cpu()), before + (int64_t{1} << 20));
  Tensor small = zeros(Axes{{"i", 1000}});  // 8 kB: fits
  const int64_t in_use = allocator_stats().bytes_in_use;
  try {
    (void)zeros(Axes{{"i", 1 << 18}});  // 2 MiB: does not
    FAIL() << "no error";
  } catch (const MemoryError& e) {
    EXPECT_MESSAGE(e.what(),
                   "[alloc] a tensor buffer of 2097152 bytes (2.0 MiB) on cpu would exceed the memory "
                   "budget of");
    EXPECT_MESSAGE(e.what(), "in use (peak");
    EXPECT_MESSAGE(e.what(), "raise it with set_memory_budget");
  }
  EXPECT_EQ(allocator_stats().bytes_in_use, in_use) << "the refused buffer left nothing allocated";
  set_memory_budget(Device::cpu(), 0);
  EXPECT_EQ(zeros(Axes{{"i", 1 << 18}}).numel(), 1 << 18);  // no cap again
  EXPECT_MESSAGE(testing::error_message<Error>([&] { set_memory_budget(Device::cpu(), -1); }),
                 "[memory_budget] the budget must be >= 0 bytes (0: none), got -1");
}

TEST(MemoryBudget, TapeArraysOverTheBudgetAreRefused) {
  BudgetGuard guard;
  Tape tape;
  Tensor x = tape.watch(tensor({1.0, 2.0}, "i"));
  set_memory_budget(Device::cpu(), allocator_stats().bytes_in_use + 4096);
  // rename makes views: no tensor buffer is allocated, only tape records.
  try {
    for (int k = 0; k < 1 << 20; ++k) x = rename(x, k % 2 ? "j" : "i", k % 2 ? "i" : "j");
    FAIL() << "no error";
  } catch (const MemoryError& e) {
    EXPECT_MESSAGE(e.what(), "[alloc] the tape's record arrays of");
  }
}

TEST(MemoryFigures, PeakBytesAndTapeBytesAreQueryable) {
  const AllocatorStats start = allocator_stats();
  {
    Tensor big = zeros(Axes{{"i", 1 << 16}});  // 512 KiB
    EXPECT_GE(allocator_stats().bytes_in_use - start.bytes_in_use, int64_t{1} << 19);
  }
  EXPECT_GE(allocator_stats().peak_bytes, start.bytes_in_use + (int64_t{1} << 19));
  Tape tape;
  Tensor x = tape.watch(ones(Axes{{"i", 100}}));
  const int64_t empty_bytes = tape.bytes();
  Tensor y = sum(exp(x));  // exp saves its 800-byte output
  EXPECT_GE(tape.bytes() - empty_bytes, 800);
  EXPECT_EQ(tape.stats().residual_bytes, 800);
  (void)y;
}

TEST(MemoryFigures, AllocatedBytesCountEveryBufferFreedOrNot) {
  // "How much does this allocate": the running total's difference around the code. Ten freed
  // 64 KiB buffers count ten times (bytes_in_use and the peak would show one).
  const int64_t before = allocator_stats().allocated_bytes;
  for (int k = 0; k < 10; ++k) {
    Tensor t = zeros(Axes{{"i", (1 << 13) - 8}});  // with its 64-byte header, one 64 KiB pool block
    (void)t;
  }
  EXPECT_EQ(allocator_stats().allocated_bytes - before, 10 * (int64_t{1} << 16));
  allocator_for(Device::cpu()).reset_stats();
  EXPECT_EQ(allocator_stats().allocated_bytes, 0);
}

// The pool's cached path (a block popped from and pushed back onto this thread's list) counts as
// the system path does: every buffer its rounded block, in use until freed, on whichever thread
// frees it; a thread's cached blocks go back when it ends. Values written through one buffer
// never show in another that is alive.
TEST(MemoryFigures, CachedBlocksCountAndComeBackLikeFreshOnes) {
  const Tensor x = tensor({1, 2, 3, 4}, "i");
  for (int k = 0; k < 4; ++k) (void)(x * x);  // warm this thread's 128-byte class
  const AllocatorStats before = allocator_stats();
  std::vector<Tensor> alive;
  for (int k = 0; k < 200; ++k) alive.push_back(x * double(k));
  const AllocatorStats held = allocator_stats();
  // 4 doubles and the 64-byte header: one 128-byte block each (the scalar operand's too, freed).
  EXPECT_EQ(held.allocations - before.allocations, 400);
  EXPECT_EQ(held.allocated_bytes - before.allocated_bytes, 400 * 128);
  EXPECT_EQ(held.bytes_in_use - before.bytes_in_use, 200 * 128);
  for (int k = 0; k < 200; ++k) ASSERT_EQ(alive[size_t(k)].to_vector()[3], 4.0 * k) << k;
  // Freed on another thread: counted there, flushed when it ends, cached blocks returned.
  std::thread([&alive] { alive.clear(); }).join();
  EXPECT_EQ(allocator_stats().bytes_in_use, before.bytes_in_use);
  // A thread that allocates and frees on its own leaves nothing in use behind.
  std::thread([&x] {
    for (int k = 0; k < 100; ++k) (void)exp(x * x);
  }).join();
  EXPECT_EQ(allocator_stats().bytes_in_use, before.bytes_in_use);
}

// More live buffers of one class than a thread's list keeps (32 MiB of 512 KiB blocks: 64), all
// freed, then taken again: the ones past the list come back from the shared cache, not the system
// (a scan in blocks holds hundreds of such buffers until its reverse pass).
TEST(HostPool, BuffersPastAThreadsListAreReusedNotReallocated) {
  if (std::getenv("TENAX_HOST_CACHE_MB")) GTEST_SKIP() << "TENAX_HOST_CACHE_MB is set: the test assumes the default 1024";
  auto round = [] {
    std::vector<Tensor> held;
    for (int k = 0; k < 100; ++k) held.push_back(zeros(Axes{{"i", 60000}}));  // 480 KB: the 512 KiB class
    return held.size();
  };
  (void)round();  // the first takes them from the system
  const AllocatorStats before = allocator_stats();
  EXPECT_EQ(round(), 100u);
  const AllocatorStats after = allocator_stats();
  EXPECT_EQ(after.allocations - before.allocations, 100);
  EXPECT_EQ(after.system_allocations, before.system_allocations);
}

// The shared cache (TENAX_HOST_CACHE_MB, 1 GiB by default) filled with blocks of one size, then a
// block of another size freed: it pushes out the oldest and is kept, so taking it again does not
// reach the system (the first blocks kept used to stay for good and every later size missed).
TEST(HostPool, TheHostCacheKeepsTheSizesInUseNow) {
  if (std::getenv("TENAX_HOST_CACHE_MB")) GTEST_SKIP() << "TENAX_HOST_CACHE_MB is set: the test assumes the default 1024";
  constexpr int64_t kOld = int64_t{20} << 17, kNew = int64_t{30} << 17;  // doubles: 20 and 30 MiB
  {
    std::vector<Tensor> old;
    for (int k = 0; k < 60; ++k) old.push_back(empty(Axes{{"i", kOld}}));  // 1200 MiB, never touched
  }
  (void)empty(Axes{{"i", kNew}});  // from the system, then kept in place of the oldest
  const AllocatorStats before = allocator_stats();
  (void)empty(Axes{{"i", kNew}});
  const AllocatorStats after = allocator_stats();
  EXPECT_EQ(after.allocations - before.allocations, 1);
  EXPECT_EQ(after.system_allocations, before.system_allocations);
}

TEST(HostArena, CarvesInOrderSavesRestoresAndOverflowsToThePool) {
  // The arena scan captures a step into (core/storage.h): buffers carved in order from one block,
  // 64-byte aligned, that outlive the arena; one save / restore copies all of them; a buffer that
  // does not fit comes from the host allocator and marks the arena overflowed.
  const int64_t before = allocator_stats().bytes_in_use;
  Tensor a, b, c;
  std::vector<char> saved;
  {
    detail::HostArena arena(4096);
    EXPECT_GE(allocator_stats().bytes_in_use - before, 4096);  // the block, metered as one buffer
    {
      detail::HostArenaScope scope(&arena);
      a = tensor({1.0, 2.0, 3.0}, "i");
      b = full(Axes{{"j", 100}}, 5.0);
    }
    c = zeros(Axes{{"i", 3}});  // after the scope: from the pool
    auto* base = static_cast<char*>(arena.block()->data());
    EXPECT_GE(static_cast<char*>(a.data_ptr()), base);  // at the start (after a redzone under ASan)
    EXPECT_LE(static_cast<char*>(a.data_ptr()), base + 64);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data_ptr()) % 64, 0u);
    EXPECT_GT(static_cast<char*>(b.data_ptr()), static_cast<char*>(a.data_ptr()));
    EXPECT_LT(static_cast<char*>(b.data_ptr()), base + arena.used());
    EXPECT_FALSE(arena.overflowed());
    saved.resize(arena.used());
    arena.save(saved.data());
    a.data<double>()[1] = -7.0;
    b.data<double>()[99] = -8.0;
    arena.restore(saved.data());
    EXPECT_EQ(a.to_vector(), std::vector<double>({1.0, 2.0, 3.0}));
    EXPECT_EQ(b.at({{"j", 99}}), 5.0);
    {
      detail::HostArenaScope scope(&arena);
      Tensor big = full(Axes{{"k", 1000}}, 2.0);  // 8000 bytes: does not fit
      EXPECT_TRUE(arena.overflowed());
      EXPECT_EQ(big.at({{"k", 999}}), 2.0);
    }
  }
  // The carved buffers hold the block after the arena is gone.
  EXPECT_EQ(a.to_vector(), std::vector<double>({1.0, 2.0, 3.0}));
  EXPECT_EQ(sum(b).item(), 500.0);
  a = b = c = Tensor();
  EXPECT_EQ(allocator_stats().bytes_in_use, before);
}

TEST(HostArena, KeepsOnlyTheBuffersItIsToldOf) {
  // keep_only: save packs the named buffers (ranges within kMergeGap bytes of each other merge,
  // except under ASan), restore puts exactly those back and leaves the others as they are.
  detail::HostArena arena(1 << 16);
  Tensor a, skipped, c;
  {
    detail::HostArenaScope scope(&arena);
    a = full(Axes{{"i", 4}}, 1.0);
    skipped = full(Axes{{"j", 1024}}, 2.0);  // 8 KiB: far more than kMergeGap between a and c
    c = full(Axes{{"k", 3}}, 3.0);
  }
  const auto* base = static_cast<const char*>(arena.block()->data());
  auto range = [&](const Tensor& t) {
    return std::pair<std::size_t, std::size_t>(
        static_cast<std::size_t>(static_cast<const char*>(t.data_ptr()) - base), t.storage()->bytes());
  };
  EXPECT_EQ(arena.saved(), arena.used());
  arena.keep_only({range(c), range(a)});  // any order
  EXPECT_EQ(arena.saved(), range(a).second + range(c).second);
  std::vector<double> packed(arena.saved() / sizeof(double));
  arena.save(packed.data());
  EXPECT_EQ(packed, std::vector<double>({1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0}));
  a.data<double>()[0] = -1.0;
  skipped.data<double>()[0] = -2.0;
  c.data<double>()[2] = -3.0;
  arena.restore(packed.data());
  EXPECT_EQ(a.to_vector(), std::vector<double>({1.0, 1.0, 1.0, 1.0}));
  EXPECT_EQ(c.to_vector(), std::vector<double>({3.0, 3.0, 3.0}));
  EXPECT_EQ(skipped.at({{"j", 0}}), -2.0);  // not kept: left as it was
  // The whole block again when the ranges cover it.
  arena.keep_only({{0, arena.used()}});
  EXPECT_EQ(arena.saved(), arena.used());
}

// One report of every allocator and a tape: its figures are allocator_stats() and the tape's
// stats(), a scan's checkpoints counted in the tape's residuals.
TEST(MemoryFigures, OneReportGivesTheAllocatorsAndTheTape) {
  Tape tape;
  const Tensor lambda = tape.watch(scalar(0.9));
  const int64_t steps = 500;
  ScanOptions o;
  o.length = steps;
  const ScanResult r = scan(
      [&](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
        return std::make_pair(std::vector<Tensor>{c[0] * lambda + 1.0}, std::vector<Tensor>{});
      },
      {scalar(0.0)}, {}, "t", o);
  (void)tape.gradient(r.carry[0], {lambda});
  const AllocatorStats a = allocator_stats();
  const TapeStats t = tape.stats();
  const std::string report = memory_report(&tape);
  EXPECT_MESSAGE(report, "cpu: " + std::to_string(a.bytes_in_use) + " bytes in use, peak " +
                             std::to_string(a.peak_bytes) + ", " + std::to_string(a.allocations) + " buffers / " +
                             std::to_string(a.allocated_bytes) + " bytes allocated since the last reset, budget none");
  EXPECT_MESSAGE(report, "tape: " + std::to_string(t.records) + " records (" + std::to_string(t.records_by_value) +
                             " by value), " + std::to_string(t.variables) +
                             " variables, " + std::to_string(tape.bytes()) + " bytes held (" +
                             std::to_string(t.residual_bytes) + " of residuals for the reverse pass)");
  EXPECT_GE(t.residual_bytes, steps * int64_t{8});  // the scan's stored carries
  EXPECT_EQ(memory_report().find("tape:"), std::string::npos);
}

}  // namespace
}  // namespace tenax
