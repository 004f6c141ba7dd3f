#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/arena.h"
#include "core/stream.h"
#include "core/tensor.h"

namespace foldcore {
namespace {

TEST(CpuAllocator, CurrentAndPeakFollowTensors) {
  CpuAllocator alloc;
  {
    Tensor a = Tensor::empty({256}, DType::f32, alloc);  // 1024 B
    EXPECT_EQ(alloc.stats().current, 1024u);
    {
      Tensor b = Tensor::empty({128}, DType::bf16, alloc);  // 256 B
      EXPECT_EQ(alloc.stats().current, 1280u);
      Tensor view = b.narrow(0, 0, 10);  // views add nothing
      EXPECT_EQ(alloc.stats().current, 1280u);
    }
    EXPECT_EQ(alloc.stats().current, 1024u);
    EXPECT_EQ(alloc.stats().peak, 1280u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data_ptr()) % CpuAllocator::kAlignment, 0u);
  }
  const MemStats s = alloc.stats();
  EXPECT_EQ(s.current, 0u);
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_EQ(s.num_frees, 2u);
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak, 0u);
}

// Large blocks are cached after a free and handed out again for the same size; current/peak
// still count live bytes only, reserved includes the cache, and the cache stays under its cap.
TEST(CpuAllocator, LargeBlocksAreCachedAndReused) {
  CpuAllocator alloc;
  const size_t big = CpuAllocator::kCacheMin + 4096;
  void* p = alloc.allocate(big);
  alloc.deallocate(p, big);
  EXPECT_EQ(alloc.stats().current, 0u);
  EXPECT_EQ(alloc.stats().reserved, big);  // kept
  void* q = alloc.allocate(big);
  EXPECT_EQ(q, p);
  EXPECT_EQ(alloc.stats().current, big);
  EXPECT_EQ(alloc.stats().peak, big);
  void* r = alloc.allocate(big + 64);  // another size: fresh memory
  EXPECT_NE(r, p);
  EXPECT_EQ(alloc.stats().peak, 2 * big + 64);
  alloc.deallocate(q, big);
  alloc.deallocate(r, big + 64);
  // Small blocks are not cached.
  void* s = alloc.allocate(1000);
  alloc.deallocate(s, 1000);
  EXPECT_EQ(alloc.stats().reserved, 2 * big + 64);
  // Beyond the cap the oldest cached blocks go back to the system.
  const size_t chunk = CpuAllocator::kCacheCap / 4;
  std::vector<void*> held;
  for (int i = 0; i < 5; ++i) held.push_back(alloc.allocate(chunk + 64 * static_cast<size_t>(i)));
  for (int i = 0; i < 5; ++i) alloc.deallocate(held[static_cast<size_t>(i)], chunk + 64 * static_cast<size_t>(i));
  EXPECT_EQ(alloc.stats().current, 0u);
  EXPECT_LE(alloc.stats().reserved, CpuAllocator::kCacheCap);
  EXPECT_GT(alloc.stats().reserved, CpuAllocator::kCacheCap / 2);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved, 0u);
  EXPECT_EQ(alloc.stats().num_allocs, alloc.stats().num_frees);
}

// A host request that cannot be met is an OutOfMemoryError naming the size, not a crash.
TEST(CpuAllocator, ExhaustionIsAnOutOfMemoryError) {
  CpuAllocator alloc;
  try {
    alloc.allocate(size_t{1} << 60);
    ADD_FAILURE() << "no error";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("host allocation of 1152921504606846976 bytes failed"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(alloc.stats().current, 0u);
}

TEST(ActivationArena, BumpLifoReclaimAndHighWater) {
  CpuAllocator parent;
  ActivationArena arena(parent, 1 << 20);
  EXPECT_EQ(parent.stats().current, (size_t{1} << 20) + ActivationArena::kAlignment);
  {
    Tensor a = Tensor::empty({100}, DType::f32, arena);  // 400 -> 512 B
    Tensor b = Tensor::empty({1000}, DType::f32, arena);  // 4000 -> 4096 B
    EXPECT_EQ(arena.top(), 512u + 4096u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data_ptr()) % ActivationArena::kAlignment, 0u);
    a = Tensor();  // freed below the top: space not reclaimed until b goes
    EXPECT_EQ(arena.top(), 512u + 4096u);
    EXPECT_EQ(arena.stats().current, 4096u);
    b = Tensor();
    EXPECT_EQ(arena.top(), 0u);
  }
  EXPECT_EQ(arena.stats().peak, 512u + 4096u);
  EXPECT_THROW(Tensor::empty({1 << 20}, DType::f32, arena), Error);
}

TEST(ActivationArena, ReleaseToMark) {
  CpuAllocator parent;
  ActivationArena arena(parent, 1 << 16);
  Tensor keep = Tensor::empty({64}, DType::f32, arena);
  const size_t m = arena.mark();
  {
    Tensor x = Tensor::empty({64}, DType::f32, arena);
    Tensor y = Tensor::empty({64}, DType::f32, arena);
    x = Tensor();
    y = Tensor();
  }
  EXPECT_EQ(arena.top(), m);
  Tensor z = Tensor::empty({64}, DType::f32, arena);
  EXPECT_GT(arena.top(), m);
  z = Tensor();
  arena.release(m);
  EXPECT_EQ(arena.top(), m);
  EXPECT_EQ(arena.live_blocks(), 1u);
}

TEST(DefaultAllocator, CpuAlwaysThereCudaClearErrorWithoutBackend) {
  EXPECT_EQ(default_allocator(Device::cpu()).device(), Device::cpu());
  if (!cuda_built()) {
    EXPECT_THROW(default_allocator(Device::cuda(0)), Error);
  }
}

}  // namespace
}  // namespace foldcore

namespace foldcore {
namespace {
TEST(CpuEvent, ElapsedIsNonNegative) {
  Event a, b;
  a.record(Stream());
  b.record(Stream());
  EXPECT_GE(a.elapsed_ms(b), 0.f);
}
}  // namespace
}  // namespace foldcore
