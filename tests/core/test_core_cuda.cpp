// Core runtime on a CUDA device: caching allocator accounting, strided copies with dtype
// conversion against the CPU implementation, fills, streams and events.
#include <gtest/gtest.h>

#include <string>

#include "core/allocator.h"
#include "core/kernel_profile.h"
#include "core/random.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "test_util.h"

namespace foldcore {
namespace {

TEST(CudaCachingAllocator, ReusesBlocksAndTracksPeak) {
  FC_REQUIRE_CUDA();
  CudaCachingAllocator alloc(0);
  void* a = alloc.allocate(1000);  // rounded to 1024
  EXPECT_EQ(alloc.stats().current, 1024u);
  alloc.deallocate(a, 1000);
  EXPECT_EQ(alloc.stats().current, 0u);
  EXPECT_EQ(alloc.stats().reserved, 1024u);  // cached, not returned
  void* b = alloc.allocate(900);              // same rounded size: the cached block comes back
  EXPECT_EQ(a, b);
  EXPECT_EQ(alloc.stats().reserved, 1024u);
  void* c = alloc.allocate(1 << 20);
  EXPECT_EQ(alloc.stats().peak, 1024u + (1u << 20));
  alloc.deallocate(b, 900);
  alloc.deallocate(c, 1 << 20);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved, 0u);
}

// A request no device can hold is an OutOfMemoryError (the trainer recognises it by its type),
// and the allocator stays usable after it.
TEST(CudaCachingAllocator, ExhaustionIsAnOutOfMemoryError) {
  FC_REQUIRE_CUDA();
  CudaCachingAllocator alloc(0);
  void* a = alloc.allocate(4096);
  try {
    alloc.allocate(size_t{1} << 50);  // 1 PiB
    ADD_FAILURE() << "no error";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA out of memory on cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(alloc.stats().current, 4096u);
  alloc.deallocate(a, 4096);
  void* b = alloc.allocate(4096);
  alloc.deallocate(b, 4096);
}

TEST(CudaTensor, StridedCopyAndConversionMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(11);
  Tensor host = randn({3, 5, 7}, gen);
  const Tensor host_perm = host.permute({2, 0, 1}).contiguous();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor dev = host.to(Device::cuda(0));
    Tensor perm = Tensor::empty({7, 3, 5}, dt, Device::cuda(0));
    perm.copy_(dev.permute({2, 0, 1}));  // device strided gather + conversion
    Tensor expect = host_perm.to(dt);    // host conversion
    EXPECT_EQ(perm.to(Device::cpu()).to_vector(), expect.to_vector()) << dtype_name(dt);
  }
  // Device -> host into a strided destination.
  Tensor dst = Tensor::zeros({7, 3}, DType::f32);
  Tensor src = host.select(1, 2).to(Device::cuda(0));  // [3,7]
  dst.transpose(0, 1).copy_(src);
  const auto d = dst.to_vector(), s = host.select(1, 2).contiguous().to_vector();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 7; ++j) EXPECT_EQ(d[j * 3 + i], s[i * 7 + j]);
}

// The copy planner's three kernels against the host: dims merged and dropped, the tiled transpose
// (partial tiles, a batch dim, the channel-major permute of a pair; gathering into a contiguous
// destination and scattering into a permuted view), the plain conversion of contiguous tensors
// and a broadcast source, each in both directions of f32 <-> bf16.
TEST(CudaTensor, PlannedCopiesMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(12);
  struct Case {
    Shape shape;
    std::vector<int> perm;
  };
  const std::vector<Case> cases = {
      {Shape{6, 40, 37}, {0, 2, 1}},      // transpose with a batch dim, partial tiles
      {Shape{20, 20, 24}, {2, 0, 1}},     // [N, N, C] -> [C, N, N]: one merged transpose
      {Shape{20, 20, 24}, {1, 0, 2}},     // channel kept innermost: runs of C (16-byte vectors)
      {Shape{7, 9, 6}, {1, 0, 2}},        // runs of 6: pairs of elements
      {Shape{5, 4, 7}, {1, 0, 2}},        // runs of 7: element by element
      {Shape{4, 6, 5, 16}, {2, 0, 1, 3}}, // runs of 16 under three permuted outer dims
      {Shape{3, 1, 70, 9}, {3, 1, 0, 2}}, // an extent-1 dim, a short unit-stride dim (no tiles)
      {Shape{5, 33, 1}, {0, 1, 2}},       // contiguous: the plain conversion
  };
  for (const Case& c : cases) {
    const Tensor host = randn(c.shape, gen);
    const Tensor expect_f32 = host.permute(c.perm).contiguous();
    for (DType from : {DType::f32, DType::bf16}) {
      for (DType to : {DType::f32, DType::bf16}) {
        const Tensor dev = host.to(from).to(Device::cuda(0));
        Tensor out = Tensor::empty(expect_f32.shape(), to, Device::cuda(0));
        out.copy_(dev.permute(c.perm));
        const Tensor expect = host.to(from).permute(c.perm).contiguous().to(to);
        EXPECT_EQ(out.to(Device::cpu()).to_vector(), expect.to_vector())
            << c.shape.str() << " " << dtype_name(from) << " -> " << dtype_name(to);
      }
    }
  }
  // Scatter: a contiguous source into a permuted view of a contiguous tensor (a permute's
  // backward), tiled the same way.
  for (const Case& c : {cases[0], cases[1]}) {
    for (DType to : {DType::f32, DType::bf16}) {
      const Tensor src = randn(c.shape, gen).permute(c.perm).contiguous();  // the permuted shape
      Tensor base = Tensor::zeros(c.shape, to, Device::cuda(0));
      base.permute(c.perm).copy_(src.to(Device::cuda(0)));
      std::vector<int> inverse(c.perm.size());
      for (size_t a = 0; a < c.perm.size(); ++a) inverse[static_cast<size_t>(c.perm[a])] = static_cast<int>(a);
      const Tensor expect = src.permute(inverse).contiguous().to(to);
      EXPECT_EQ(base.to(Device::cpu()).to_vector(), expect.to_vector()) << "scatter " << c.shape.str();
    }
  }
  // Runs that start off a vector boundary: a narrowed channel range (offset 2, outer strides of 34
  // elements: pairs only) and offset 1 (element by element), both directions of the copy.
  {
    const Tensor host = randn({6, 10, 34}, gen);
    for (const int64_t off : {2, 1}) {
      for (DType dt : {DType::f32, DType::bf16}) {
        const Tensor dev = host.to(dt).to(Device::cuda(0));
        const Tensor view = dev.narrow(2, off, 32).permute({1, 0, 2});
        Tensor out = Tensor::empty(view.shape(), dt, Device::cuda(0));
        out.copy_(view);
        const Tensor expect = host.to(dt).narrow(2, off, 32).permute({1, 0, 2}).contiguous();
        EXPECT_EQ(out.to(Device::cpu()).to_vector(), expect.to_vector()) << "gather, offset " << off;
        Tensor back = Tensor::zeros({6, 10, 34}, dt, Device::cuda(0));
        back.narrow(2, off, 32).permute({1, 0, 2}).copy_(out);
        Tensor want = Tensor::zeros({6, 10, 34}, dt);
        want.narrow(2, off, 32).copy_(host.to(dt).narrow(2, off, 32));
        EXPECT_EQ(back.to(Device::cpu()).to_vector(), want.to_vector()) << "scatter, offset " << off;
      }
    }
  }
  // A broadcast source (stride 0) into a contiguous destination.
  const Tensor row = randn({1, 37}, gen);
  Tensor wide = Tensor::empty({6, 37}, DType::bf16, Device::cuda(0));
  wide.copy_(row.to(Device::cuda(0)).expand({6, 37}));
  const auto w = wide.to(Device::cpu()).to_vector(), r = row.to(DType::bf16).to_vector();
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 37; ++j) EXPECT_EQ(w[i * 37 + j], r[j]);
}

// The plain conversion of contiguous tensors, f32 <-> bf16 and f16: 4 elements per access when the
// count is a multiple of 4 and both sides are aligned to 4 elements (contiguous_convert4_kernel),
// element by element otherwise (a count of 4k + 1, a source at an odd offset); the host's
// conversion bit for bit. The kernel profile names the kernel each copy ran.
TEST(CudaTensor, ContiguousConversionsMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(13);
  struct Case {
    int64_t n, offset;
    const char* kernel;
  };
  const Case cases[] = {{4096, 0, "contiguous_convert4_kernel"}, {4097, 0, "contiguous_convert_kernel"},
                        {4096, 1, "contiguous_convert_kernel"}};
  for (const Case& c : cases) {
    for (DType from : {DType::f32, DType::bf16, DType::f16}) {
      for (DType to : {DType::f32, DType::bf16, DType::f16}) {
        if (from == to) continue;
        std::string trace(dtype_name(from));
        trace.append(" -> ").append(dtype_name(to)).append(", n ").append(std::to_string(c.n));
        SCOPED_TRACE(trace.append(", offset ").append(std::to_string(c.offset)));
        const Tensor host = randn({c.n}, gen).to(from);
        // the source at element offset c.offset of a device buffer (same dtype: a plain memcpy)
        Tensor dev = Tensor::empty({c.n + c.offset}, from, Device::cuda(0)).narrow(0, c.offset, c.n);
        dev.copy_(host.to(Device::cuda(0)));
        Tensor out = Tensor::empty({c.n}, to, Device::cuda(0));
        kernel_profile::reset();
        kernel_profile::set_enabled(true);
        out.copy_(dev);
        kernel_profile::set_enabled(false);
        const kernel_profile::Report r = kernel_profile::collect();
        ASSERT_EQ(r.kernels.size(), 1u);
        EXPECT_NE(r.kernels[0].name.find(c.kernel), std::string::npos) << r.kernels[0].name;
        EXPECT_EQ(out.to(Device::cpu()).to_vector(), host.to(to).to_vector());
      }
    }
  }
}

TEST(CudaTensor, FillAndZero) {
  FC_REQUIRE_CUDA();
  Tensor t = Tensor::full({4, 9}, 2.5, DType::bf16, Device::cuda(0));
  for (float v : t.to_vector()) EXPECT_EQ(v, 2.5f);
  t.narrow(1, 2, 3).zero_();
  const auto v = t.to_vector();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 9; ++c) EXPECT_EQ(v[r * 9 + c], (c >= 2 && c < 5) ? 0.f : 2.5f);
}

TEST(CudaStream, EventsOrderWorkAndTime) {
  FC_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  Stream side = Stream::create(dev);
  Tensor a = Tensor::full({1 << 20}, 1.0, DType::f32, dev);
  Event ready(dev), start(dev), done(dev);
  ready.record();     // the initial fill on the default stream ...
  ready.block(side);  // ... must finish before the side stream overwrites `a`
  {
    StreamGuard g(side);
    start.record();
    a.fill_(3.0);
    done.record();
  }
  done.block(current_stream(dev));  // default stream waits for the side stream
  EXPECT_GE(start.elapsed_ms(done), 0.f);
  EXPECT_EQ(a.to_vector()[12345], 3.f);
}

}  // namespace
}  // namespace foldcore
