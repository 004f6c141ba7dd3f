// CUDA vs CPU for kernels/elementwise.h, f32 and bf16.
// Tolerances: both backends compute in fp32 from identical stored inputs and round once on
// store, so they differ only by the ulps of expf/erff between libm and CUDA math: f32 atol 1e-6
// rtol 1e-5; bf16 one rounding flip (2^-8 relative) → rtol 1e-2, atol 1e-5.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "core/kernel_profile.h"
#include "core/random.h"
#include "kernels/elementwise.h"
#include "test_util.h"

namespace foldcore {
namespace {

const Device kGpu = Device::cuda(0);

double atol_for(DType t) { return t == DType::f32 ? 1e-6 : 1e-5; }
double rtol_for(DType t) { return t == DType::f32 ? 1e-5 : 1e-2; }

// Random tensor in dtype t on the CPU (so both backends see the same stored values).
Tensor rnd(const Shape& s, Generator& gen, DType t, float std = 1.f) { return randn(s, gen, 0, std).to(t); }
Tensor like(const Tensor& t, Device d) { return Tensor::empty(t.shape(), t.dtype(), d); }

const std::vector<Shape> kShapes = {{1}, {7}, {1027}, {3, 5, 333}};

TEST(ElementwiseCuda, BinaryAndScaleMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(101);
  for (DType t : {DType::f32, DType::bf16}) {
    for (const Shape& s : kShapes) {
      Tensor a = rnd(s, gen, t), b = rnd(s, gen, t);
      Tensor ga = a.to(kGpu), gb = b.to(kGpu);
      Tensor c = like(a, Device::cpu()), g = like(a, kGpu);
      ops::add(a, b, c), ops::add(ga, gb, g);
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
      ops::mul(a, b, c), ops::mul(ga, gb, g);
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
      ops::axpby(0.3f, a, -1.7f, b, c), ops::axpby(0.3f, ga, -1.7f, gb, g);
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
      ops::scale(a, 2.5f, c), ops::scale(ga, 2.5f, g);
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
      // The normalisers' 1 / (x + eps) on counts (the outer product mean's, ≥ 0): bit for bit in fp32.
      std::vector<float> cv(static_cast<size_t>(s.product()));
      for (size_t i = 0; i < cv.size(); ++i) cv[i] = static_cast<float>(i % 7);  // 0 (a masked pair) .. 6
      const Tensor counts = Tensor::from_vector(cv, s).to(t);
      ops::reciprocal_shift(counts, 1e-3f, c), ops::reciprocal_shift(counts.to(kGpu), 1e-3f, g);
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, t == DType::f32 ? 0.0 : atol_for(t), t == DType::f32 ? 0.0 : rtol_for(t));
    }
    // Broadcast and strided b, and a misaligned (offset 1) contiguous a for the scalar path.
    const Shape s{4, 9, 33};
    Tensor a = rnd({4 * 9 * 33 + 1}, gen, t).narrow(0, 1, 4 * 9 * 33).view(s);
    Tensor b = rnd({9, 1}, gen, t), bt = rnd({33, 9, 4}, gen, t);
    Tensor ga = rnd({4 * 9 * 33 + 1}, gen, t).to(kGpu).narrow(0, 1, 4 * 9 * 33).view(s);
    ga.copy_(a);
    Tensor c = like(a, Device::cpu()), g = like(a, kGpu);
    ops::add(a, b, c), ops::add(ga, b.to(kGpu), g);
    FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
    ops::mul(a, bt.permute({2, 1, 0}), c), ops::mul(ga, bt.to(kGpu).permute({2, 1, 0}), g);
    FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
    ops::scale(ga, 3.f, ga);  // in place
    ops::scale(a, 3.f, c);
    FC_EXPECT_CLOSE(ga.to(Device::cpu()), c, atol_for(t), rtol_for(t));
    // The broadcasts whose dims strided_desc merges: a mask [R, C', 1] over the channels (two
    // dims), a bias-like [C] over rows (two), a middle broadcast [S, 1, C] (three), a broadcast
    // over leading and trailing dims [1, 9, 1] (three), and one element (one).
    ga.copy_(a);  // undo the in-place scale
    const std::vector<Shape> bs = {{4, 9, 1}, {1, 1, 33}, {4, 1, 33}, {1, 9, 1}, {1, 1, 1}};
    for (const Shape& bshape : bs) {
      SCOPED_TRACE(bshape.str());
      const Tensor bb = rnd(bshape, gen, t);
      ops::mul(a, bb.expand(s), c), ops::mul(ga, bb.to(kGpu).expand(s), g);
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
      ops::add(a, bb.expand(s), c), ops::add(ga, bb.to(kGpu).expand(s), g);
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
    }
  }
}

// Whether one of the kernels f launches has `name` in its name (the kernel profile's records).
bool launches_kernel(const std::function<void()>& f, const std::string& name) {
  kernel_profile::reset();
  kernel_profile::set_enabled(true);
  f();
  kernel_profile::set_enabled(false);
  bool found = false;
  for (const auto& row : kernel_profile::collect().kernels) found = found || row.name.find(name) != std::string::npos;
  return found;
}

// The 16-byte broadcast path (strided_binary_vec_kernel): b's innermost merged dim a multiple of
// the pack (8 bf16 or 4 f32 elements). A mask [4, 9, 1] over 64 channels (b read once per pack), a
// bias [1, 1, 64] and a [4, 1, 64] (one 16-byte pack of b), a misaligned b (offset 1) and a
// permuted one (element by element), in place (out = a). A mask over 36 channels takes the packs
// in f32 (36 % 4 = 0) and the per-element kernel in bf16 (36 % 8 ≠ 0). Both backends compute the
// fp32 affine form and round once: the file's tolerances.
TEST(ElementwiseCuda, BroadcastPacksMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(106);
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    for (int64_t channels : {64, 36}) {
      const Shape s{4, 9, channels};
      const Tensor a = rnd(s, gen, t);
      // each case: a base tensor and the view of it that is b (applied to the CPU and GPU copies)
      struct Case {
        std::string name;
        Tensor base;
        std::function<Tensor(const Tensor&)> view;
      };
      const std::vector<Case> cases = {
          {"mask", rnd({4, 9, 1}, gen, t), [&](const Tensor& x) { return x.expand(s); }},
          {"bias", rnd({1, 1, channels}, gen, t), [&](const Tensor& x) { return x.expand(s); }},
          {"rows", rnd({4, 1, channels}, gen, t), [&](const Tensor& x) { return x.expand(s); }},
          {"misaligned", rnd({9 * channels + 1}, gen, t),
           [&](const Tensor& x) { return x.narrow(0, 1, 9 * channels).view({1, 9, channels}).expand(s); }},
          {"permuted", rnd({channels, 9, 4}, gen, t), [&](const Tensor& x) { return x.permute({2, 1, 0}); }},
      };
      for (const Case& k : cases) {
        SCOPED_TRACE(k.name + " over " + s.str());
        const Tensor b = k.view(k.base), gb = k.view(k.base.to(kGpu));
        const bool packs = t == DType::f32 || channels % 8 == 0;
        Tensor c = like(a, Device::cpu()), g = like(a, kGpu);
        ops::mul(a, b, c);
        EXPECT_TRUE(launches_kernel([&] { ops::mul(a.to(kGpu), gb, g); },
                                    packs ? "strided_binary_vec_kernel" : "strided_binary_kernel<"));
        FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
        ops::axpby(0.5f, a, -2.f, b, c);
        Tensor ga = a.to(kGpu);
        ops::axpby(0.5f, ga, -2.f, gb, ga);  // in place
        FC_EXPECT_CLOSE(ga.to(Device::cpu()), c, atol_for(t), rtol_for(t));
      }
    }
  }
}

// mul's mixed dtypes on the device: bit for bit the CPU's (which equals converting a first, or
// rounding the fp32 product once: Elementwise.MixedMulEqualsConvertThenMul), in both directions,
// with b broadcast over the channels (four-element groups), contiguous, transposed, and over
// channels not a multiple of 4 or a misaligned a (one element per thread).
TEST(ElementwiseCuda, MixedMulMatchesCpuBitForBit) {
  FC_REQUIRE_CUDA();
  Generator gen(107);
  for (const DType t : {DType::bf16, DType::f16}) {
    for (const int64_t channels : {64, 6}) {
      const Shape s{4, 9, channels};
      // each case: b's base tensor and the view of it that is b (applied on both devices)
      struct Case {
        std::string name;
        Tensor base;
        std::function<Tensor(const Tensor&)> view;
      };
      const std::vector<Case> cases = {
          {"broadcast", rnd({4, 9, 1}, gen, DType::f32), [&](const Tensor& x) { return x.expand(s); }},
          {"contiguous", rnd(s, gen, DType::f32), [](const Tensor& x) { return x; }},
          {"transposed", rnd({channels, 9, 4}, gen, DType::f32), [](const Tensor& x) { return x.permute({2, 1, 0}); }}};
      for (const Case& k : cases) {
        SCOPED_TRACE(std::string(dtype_name(t)) + ", " + std::to_string(channels) + " channels, b " + k.name);
        const Tensor b = k.view(k.base), gb = k.view(k.base.to(kGpu));
        const Tensor a16 = rnd(s, gen, t), a32 = rnd(s, gen, DType::f32);
        Tensor c = Tensor::empty(s, DType::f32), g = Tensor::empty(s, DType::f32, kGpu);
        ops::mul(a16, b, c);
        EXPECT_TRUE(launches_kernel([&] { ops::mul(a16.to(kGpu), gb, g); }, "mixed_binary_kernel"));
        FC_EXPECT_CLOSE(g.to(Device::cpu()), c, 0, 0);
        Tensor c16 = Tensor::empty(s, t), g16 = Tensor::empty(s, t, kGpu);
        ops::mul(a32, b, c16);
        ops::mul(a32.to(kGpu), gb, g16);
        FC_EXPECT_CLOSE(g16.to(Device::cpu()).to(DType::f32), c16.to(DType::f32), 0, 0);
      }
    }
  }
  // A misaligned a (offset by one element): one element per thread.
  const Shape s{3, 8, 16};
  const Tensor base = rnd({3 * 8 * 16 + 1}, gen, DType::bf16), b = rnd({3, 8, 1}, gen, DType::f32);
  const Tensor a = base.narrow(0, 1, 3 * 8 * 16).view(s);
  Tensor c = Tensor::empty(s, DType::f32), g = Tensor::empty(s, DType::f32, kGpu);
  ops::mul(a, b.expand(s), c);
  ops::mul(base.to(kGpu).narrow(0, 1, 3 * 8 * 16).view(s), b.to(kGpu).expand(s), g);
  FC_EXPECT_CLOSE(g.to(Device::cpu()), c, 0, 0);
}

// add_into: a bf16 or f16 tensor added into an fp32 one in one kernel, bit for bit the CPU's
// conversion followed by add (fp32 sums of exactly converted values); the same-dtype form too.
TEST(ElementwiseCuda, AddIntoMatchesCpuBitForBit) {
  FC_REQUIRE_CUDA();
  Generator gen(105);
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    for (const Shape& s : kShapes) {
      const Tensor dst = rnd(s, gen, DType::f32), src = rnd(s, gen, t);
      Tensor c = dst.clone(), g = dst.to(kGpu);
      ops::add_into(c, src);
      ops::add_into(g, src.to(kGpu));
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, 0, 0);
      Tensor want = dst.clone();
      ops::add(want, src.to(DType::f32), want);
      FC_EXPECT_CLOSE(c, want, 0, 0);
    }
  }
}

TEST(ElementwiseCuda, ActivationsAndGateMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(102);
  for (DType t : {DType::f32, DType::bf16}) {
    for (const Shape& s : kShapes) {
      Tensor x = rnd(s, gen, t, 2.f), dy = rnd(s, gen, t);
      Tensor gx = x.to(kGpu), gdy = dy.to(kGpu);
      Tensor c = like(x, Device::cpu()), g = like(x, kGpu);
      using Fwd = void (*)(const Tensor&, const Tensor&);
      using Bwd = void (*)(const Tensor&, const Tensor&, const Tensor&);
      for (Fwd f : {Fwd(ops::relu_forward), Fwd(ops::gelu_forward), Fwd(ops::sigmoid_forward)}) {
        f(x, c), f(gx, g);
        FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
      }
      for (Bwd f : {Bwd(ops::relu_backward), Bwd(ops::gelu_backward), Bwd(ops::sigmoid_backward),
                    Bwd(ops::sigmoid_gate_forward)}) {
        f(x, dy, c), f(gx, gdy, g);
        FC_EXPECT_CLOSE(g.to(Device::cpu()), c, atol_for(t), rtol_for(t));
      }
      Tensor dout = rnd(s, gen, t);
      Tensor cdg = like(x, Device::cpu()), cdx = like(x, Device::cpu()), gdg = like(x, kGpu), gdx = like(x, kGpu);
      ops::sigmoid_gate_backward(x, dy, dout, cdg, cdx);
      ops::sigmoid_gate_backward(gx, gdy, dout.to(kGpu), gdg, gdx);
      FC_EXPECT_CLOSE(gdg.to(Device::cpu()), cdg, atol_for(t), rtol_for(t));
      FC_EXPECT_CLOSE(gdx.to(Device::cpu()), cdx, atol_for(t), rtol_for(t));
    }
  }
}

// The dropout masks of a tensor of ones through the forward and the backward: the GPU's decisions
// (0 or 1/(1-p)) equal the CPU's bit for bit.
void expect_masks_match(const Shape& s, const ops::DropoutArgs& d) {
  const Tensor ones = Tensor::full(s, 1.0, DType::f32);
  Tensor c = like(ones, Device::cpu()), g = like(ones, kGpu);
  ops::bias_dropout_residual_forward(ones, Tensor(), Tensor(), d, c);
  ops::bias_dropout_residual_forward(ones.to(kGpu), Tensor(), Tensor(), d, g);
  FC_EXPECT_CLOSE(g.to(Device::cpu()), c, 0, 0);
  Tensor cdx = like(ones, Device::cpu()), gdx = like(ones, kGpu);
  ops::bias_dropout_residual_backward(ones, d, cdx, Tensor());
  ops::bias_dropout_residual_backward(ones.to(kGpu), d, gdx, Tensor());
  FC_EXPECT_CLOSE(gdx.to(Device::cpu()), cdx, 0, 0);
}

// The masked gated edge on the device: equal to the device's composition (gate, mask multiply,
// permute and their backwards) bit for bit, and to the CPU's fused op within the libm/CUDA expf
// ulps of the tolerances above; shapes with partial 32 × 32 tiles and more than one channel tile.
TEST(ElementwiseCuda, MaskedGateChannelMajorMatchesCompositionAndCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(141);
  for (DType t : {DType::f32, DType::bf16}) {
    for (const Shape& s : {Shape{5, 7, 37}, Shape{3, 70, 33}, Shape{33, 33, 128}}) {
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(t)));
      const Tensor g = rnd(s, gen, t, 2.f), p = rnd(s, gen, t);
      std::vector<float> mv(static_cast<size_t>(s[0] * s[1]));
      for (size_t i = 0; i < mv.size(); ++i) mv[i] = (i % 7 == 2) ? 0.f : 1.f;
      const Tensor m = Tensor::from_vector(mv, {s[0], s[1]}, t);
      const Tensor dout = rnd({s[2], s[0], s[1]}, gen, t);
      const auto dev = testing::masked_gate_channel_major(g.to(kGpu), p.to(kGpu), m.to(kGpu), dout.to(kGpu), true);
      const auto ref = testing::masked_gate_channel_major(g.to(kGpu), p.to(kGpu), m.to(kGpu), dout.to(kGpu), false);
      const auto cpu = testing::masked_gate_channel_major(g, p, m, dout, true);
      for (const auto& [x, y, c] : {std::tuple{dev.out, ref.out, cpu.out}, std::tuple{dev.dg, ref.dg, cpu.dg},
                                    std::tuple{dev.dp, ref.dp, cpu.dp}}) {
        const Tensor xh = x.to(Device::cpu());
        EXPECT_EQ(xh.to(DType::f32).to_vector(), y.to(Device::cpu()).to(DType::f32).to_vector());
        FC_EXPECT_CLOSE(xh, c, atol_for(t), rtol_for(t));
      }
    }
  }
}

TEST(DropoutCuda, MasksAreBitIdenticalToCpu) {
  FC_REQUIRE_CUDA();
  // Odd total size (n % 4 != 0) so the last Philox group is partial; a seed and an offset with
  // high 32-bit words set.
  const Shape s{5, 7, 37};
  for (const auto& shared : std::vector<std::vector<int>>{{}, {-3}, {-2}, {0, -1}}) {
    for (float p : {0.1f, 0.5f}) {
      const ops::DropoutArgs d{p, 0x123456789abcULL, (1ULL << 33) + 17, shared};
      expect_masks_match(s, d);
    }
  }
}

// A mask index base (a DAP rank's rows of a whole tensor's mask): the GPU draws the CPU's mask,
// shared or not, from bases off the 4-element Philox blocks.
TEST(DropoutCuda, IndexBaseMasksAreBitIdenticalToCpu) {
  FC_REQUIRE_CUDA();
  const Shape s{3, 7, 37};
  for (const auto& shared : std::vector<std::vector<int>>{{}, {-2}}) {
    for (int64_t base : {int64_t{1}, int64_t{37 * 5}, int64_t{4099}}) {
      ops::DropoutArgs d{0.3f, 0x9e3779b9ULL, 5, shared};
      d.index_base = base;
      expect_masks_match(s, d);
    }
  }
}

// Rows whose length is a multiple of 4 (the 4-element accesses of the forward and backward) with
// masks whose 4-element groups draw one Philox block (`quads`, kernels/dropout_mask.h: the last
// axis unshared, index bases multiples of 4) and masks that draw per element (the last axis
// shared, a base off the blocks): the CPU's masks bit for bit; bias, residual, in place, and the
// mixed bf16 update of an fp32 stream with its fp32 → bf16 backward.
TEST(DropoutCuda, FourElementGroupsMatchCpuBitForBit) {
  FC_REQUIRE_CUDA();
  Generator gen(107);
  const Shape s{3, 6, 64};
  struct Case {
    std::vector<int> shared;
    int64_t base;
  };
  const std::vector<Case> cases = {{{}, 0}, {{-3}, 0}, {{-2}, 0}, {{0, 1}, 0}, {{-1}, 0},
                                   {{0, 1}, 128}, {{-2}, 64 * 2}, {{-2}, 6}, {{}, 4100}};
  for (const Case& k : cases) {
    SCOPED_TRACE("shared axes " + std::to_string(k.shared.size()) + ", base " + std::to_string(k.base));
    ops::DropoutArgs d{0.3f, 0xfeedULL, (1ULL << 32) + 3, k.shared};
    d.index_base = k.base;
    expect_masks_match(s, d);
    for (DType t : {DType::f32, DType::bf16}) {
      const Tensor x = rnd(s, gen, t), bias = rnd({64}, gen, t), res = rnd(s, gen, t);
      Tensor cr = like(x, Device::cpu());
      ops::bias_dropout_residual_forward(x, bias, res, d, cr);
      Tensor gr = res.to(kGpu);
      ops::bias_dropout_residual_forward(x.to(kGpu), bias.to(kGpu), gr, d, gr);  // in place
      FC_EXPECT_CLOSE(gr.to(Device::cpu()), cr, atol_for(t), rtol_for(t));
    }
    const Tensor xb = rnd(s, gen, DType::bf16), res32 = rnd(s, gen, DType::f32), dout32 = rnd(s, gen, DType::f32);
    Tensor cm = Tensor::empty(s, DType::f32), gm = res32.to(kGpu);
    ops::bias_dropout_residual_forward(xb, Tensor(), res32, d, cm);
    ops::bias_dropout_residual_forward(xb.to(kGpu), Tensor(), gm, d, gm);
    FC_EXPECT_CLOSE(gm.to(Device::cpu()), cm, 0, 0);
    Tensor cb = Tensor::empty(s, DType::bf16), gbx = Tensor::empty(s, DType::bf16, kGpu);
    ops::bias_dropout_residual_backward(dout32, d, cb, Tensor());
    ops::bias_dropout_residual_backward(dout32.to(kGpu), d, gbx, Tensor());
    FC_EXPECT_CLOSE(gbx.to(Device::cpu()).to(DType::f32), cb.to(DType::f32), 0, 0);
  }
}

// A mixed residual update (no bias) of shape s, an update x of dtype `xt` into a stream of dtype
// `st`, and its backward (a dout of st into a dx of xt), on the device against the CPU bit for
// bit, the forward in place.
void expect_mixed_residual_update_matches_cpu(const Shape& s, DType xt, DType st, const ops::DropoutArgs& d,
                                              Generator& gen) {
  SCOPED_TRACE(s.str() + " " + std::string(dtype_name(xt)) + " into " + std::string(dtype_name(st)));
  const Tensor x = rnd(s, gen, xt), res = rnd(s, gen, st), dout = rnd(s, gen, st);
  Tensor c = Tensor::empty(s, st);
  ops::bias_dropout_residual_forward(x, Tensor(), res, d, c);
  Tensor g = res.to(kGpu);
  ops::bias_dropout_residual_forward(x.to(kGpu), Tensor(), g, d, g);
  FC_EXPECT_CLOSE(g.to(Device::cpu()).to(DType::f32), c.to(DType::f32), 0, 0);
  Tensor cdx = Tensor::empty(s, xt), gdx = Tensor::empty(s, xt, kGpu);
  ops::bias_dropout_residual_backward(dout, d, cdx, Tensor());
  ops::bias_dropout_residual_backward(dout.to(kGpu), d, gdx, Tensor());
  FC_EXPECT_CLOSE(gdx.to(Device::cpu()).to(DType::f32), cdx.to(DType::f32), 0, 0);
}

// The mixed residual update of a bf16 update into an fp32 stream (its backward: an fp32 dout into
// a bf16 dx).
TEST(DropoutCuda, Bf16UpdateOfAnFp32StreamMatchesCpuBitForBit) {
  FC_REQUIRE_CUDA();
  Generator gen(104);
  expect_mixed_residual_update_matches_cpu({3, 6, 129}, DType::bf16, DType::f32, {0.2f, 7, 11, {-3}}, gen);
}

// The other mix, an fp32 update of a bf16 stream (its backward: a bf16 dout into an fp32 dx); the
// vectorised path (c = 128) and element by element (c = 33).
TEST(DropoutCuda, Fp32UpdateOfABf16StreamMatchesCpuBitForBit) {
  FC_REQUIRE_CUDA();
  Generator gen(105);
  for (const Shape& s : {Shape{3, 6, 128}, Shape{5, 33}})
    expect_mixed_residual_update_matches_cpu(s, DType::f32, DType::bf16, {0.2f, 9, 13, {-2}}, gen);
}

TEST(DropoutCuda, ForwardBackwardMatchCpuAndInPlace) {
  FC_REQUIRE_CUDA();
  Generator gen(103);
  const Shape s{3, 6, 129};
  const ops::DropoutArgs d{0.2f, 7, 11, {-3}};
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor x = rnd(s, gen, t), bias = rnd({129}, gen, t), res = rnd(s, gen, t), dout = rnd(s, gen, t);
    Tensor c = like(x, Device::cpu());
    ops::bias_dropout_residual_forward(x, bias, res, d, c);
    Tensor gres = res.to(kGpu);
    ops::bias_dropout_residual_forward(x.to(kGpu), bias.to(kGpu), gres, d, gres);  // in place
    FC_EXPECT_CLOSE(gres.to(Device::cpu()), c, atol_for(t), rtol_for(t));
    Tensor cdx = like(x, Device::cpu()), gdx = like(x, kGpu);
    Tensor cdb = Tensor::full({129}, 0.5, DType::f32), gdb = Tensor::full({129}, 0.5, DType::f32, kGpu);
    ops::bias_dropout_residual_backward(dout, d, cdx, cdb);
    ops::bias_dropout_residual_backward(dout.to(kGpu), d, gdx, gdb);
    FC_EXPECT_CLOSE(gdx.to(Device::cpu()), cdx, atol_for(t), rtol_for(t));
    // dbias: fp32 sums of 18 identical inputs in a different order: 1e-5.
    FC_EXPECT_CLOSE(gdb.to(Device::cpu()), cdb, 1e-5, 1e-5);
  }
}

}  // namespace
}  // namespace foldcore
