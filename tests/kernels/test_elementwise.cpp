// CPU reference of kernels/elementwise.h against naive math and finite differences.
#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/philox.h"
#include "core/random.h"
#include "kernels/dropout_mask.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "test_util.h"

namespace foldcore {
namespace {

using testing::all_close;
using testing::check_gradient;
using testing::weighted_sum;

// Coordinates of flat row-major index i in `shape`.
std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> c(shape.size());
  for (int a = shape.size() - 1; a >= 0; --a) {
    c[a] = i % shape[a];
    i /= shape[a];
  }
  return c;
}

// Random values pushed at least 0.05 away from 0, so that relu's kink is never within the
// finite-difference step.
Tensor away_from_zero(const Shape& shape, Generator& gen) {
  std::vector<float> v = randn(shape, gen).to_vector();
  for (float& x : v) x = x >= 0 ? x + 0.05f : x - 0.05f;
  return Tensor::from_vector(v, shape);
}

const std::vector<Shape> kShapes = {{1}, {7}, {3, 5}, {2, 3, 17}, {4, 1, 9, 5}};

TEST(Elementwise, AddMulAxpbyScaleMatchNaive) {
  Generator gen(11);
  for (const Shape& s : kShapes) {
    Tensor a = randn(s, gen), b = randn(s, gen), out = Tensor::empty(s, DType::f32);
    const auto av = a.to_vector(), bv = b.to_vector();
    std::vector<float> e(av.size());
    ops::add(a, b, out);
    for (size_t i = 0; i < e.size(); ++i) e[i] = av[i] + bv[i];
    FC_EXPECT_CLOSE(out, Tensor::from_vector(e, s), 0, 0);
    ops::mul(a, b, out);
    for (size_t i = 0; i < e.size(); ++i) e[i] = av[i] * bv[i];
    FC_EXPECT_CLOSE(out, Tensor::from_vector(e, s), 0, 0);
    ops::axpby(0.5f, a, -2.f, b, out);
    for (size_t i = 0; i < e.size(); ++i) e[i] = 0.5f * av[i] + -2.f * bv[i];
    FC_EXPECT_CLOSE(out, Tensor::from_vector(e, s), 1e-6, 1e-6);
    ops::scale(a, 3.f, out);
    for (size_t i = 0; i < e.size(); ++i) e[i] = 3.f * av[i];
    FC_EXPECT_CLOSE(out, Tensor::from_vector(e, s), 0, 0);
    ops::reciprocal_shift(a, 1e-3f, out);
    for (size_t i = 0; i < e.size(); ++i) e[i] = 1.f / (av[i] + 1e-3f);
    FC_EXPECT_CLOSE(out, Tensor::from_vector(e, s), 0, 0);
  }
}

// add_into: dst += src in dst's dtype, or a 16-bit src into an fp32 dst (the exact conversion, then
// the add); other mixes, shapes or layouts are errors.
TEST(Elementwise, AddIntoAddsSixteenBitIntoFp32) {
  Generator gen(44);
  const Tensor dst = randn({4, 9}, gen), src = randn({4, 9}, gen);
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    Tensor got = dst.clone();
    ops::add_into(got, src.to(t));
    const auto g = got.to_vector(), d = dst.to_vector(), x = src.to(t).to(DType::f32).to_vector();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], d[i] + x[i]) << i;
  }
  Tensor bf = dst.to(DType::bf16);
  EXPECT_THROW(ops::add_into(bf, src), Error);                            // f32 into bf16
  Tensor other = Tensor::zeros({9, 4}, DType::f32);
  EXPECT_THROW(ops::add_into(other, src), Error);                         // shapes differ
  Tensor plain = dst.clone();
  const Tensor transposed = randn({9, 4}, gen).to(DType::bf16).transpose(0, 1);  // [4, 9], not contiguous
  EXPECT_THROW(ops::add_into(plain, transposed), Error);
}

TEST(Elementwise, BroadcastAndStridedB) {
  Generator gen(12);
  const Shape s{3, 5, 7};
  Tensor a = randn(s, gen);
  const auto av = a.to_vector();
  Tensor out = Tensor::empty(s, DType::f32);
  // b [5,1] broadcast over axes 0 and 2 (given un-expanded: the op expands it).
  Tensor b = randn({5, 1}, gen);
  const auto bv = b.to_vector();
  ops::add(a, b, out);
  auto ov = out.to_vector();
  for (int64_t i = 0; i < s.product(); ++i) EXPECT_EQ(ov[i], av[i] + bv[unravel(i, s)[1]]) << i;
  // Same, pre-expanded.
  ops::mul(a, b.expand(s), out);
  ov = out.to_vector();
  for (int64_t i = 0; i < s.product(); ++i) EXPECT_EQ(ov[i], av[i] * bv[unravel(i, s)[1]]) << i;
  // b a transposed (non-contiguous) view.
  Tensor bt_src = randn({7, 5, 3}, gen);
  Tensor bt = bt_src.permute({2, 1, 0});
  ops::axpby(2.f, a, 1.f, bt, out);
  FC_EXPECT_CLOSE(out, Tensor::from_vector([&] {
                    std::vector<float> e(av.size());
                    const auto tv = bt.contiguous().to_vector();
                    for (size_t i = 0; i < e.size(); ++i) e[i] = 2.f * av[i] + tv[i];
                    return e;
                  }(), s),
                  1e-6, 1e-6);
  EXPECT_THROW(ops::add(a, randn({4}, gen), out), Error);
  EXPECT_THROW(ops::add(a, b, Tensor::empty({3, 5}, DType::f32)), Error);
  EXPECT_THROW(ops::add(a, b.to(DType::bf16), out), Error);
}

// mul's mixed dtypes: a 16-bit a times an fp32 b into fp32 equals converting a first, and fp32 a
// and b into a 16-bit out equal the fp32 product then a conversion, bit for bit, with b contiguous,
// broadcast ([N, N, 1] over the channels: the outer product mean's normaliser) or transposed. Other
// mixes are errors (add has no mixed form).
TEST(Elementwise, MixedMulEqualsConvertThenMul) {
  Generator gen(14);
  const Shape s{5, 6, 12};
  const std::vector<std::pair<std::string, Tensor>> bs = {
      {"contiguous", randn(s, gen)},
      {"broadcast", randn({5, 6, 1}, gen).expand(s)},
      {"transposed", randn({12, 6, 5}, gen).permute({2, 1, 0})}};
  for (const DType t : {DType::bf16, DType::f16}) {
    for (const auto& [name, b] : bs) {
      SCOPED_TRACE(std::string(dtype_name(t)) + ", b " + name);
      const Tensor a16 = randn(s, gen).to(t), a32 = randn(s, gen);
      Tensor got = Tensor::empty(s, DType::f32), want = Tensor::empty(s, DType::f32);
      ops::mul(a16, b, got);
      ops::mul(a16.to(DType::f32), b, want);
      FC_EXPECT_CLOSE(got, want, 0, 0);
      Tensor got16 = Tensor::empty(s, t);
      ops::mul(a32, b, got16);
      ops::mul(a32, b, want);
      FC_EXPECT_CLOSE(got16.to(DType::f32), want.to(t).to(DType::f32), 0, 0);
      EXPECT_NE(got16.to(DType::f32).to_vector(), want.to_vector());  // rounded: the check above is not vacuous
    }
  }
  const Tensor a = randn(s, gen), b = randn(s, gen);
  EXPECT_THROW(ops::mul(a.to(DType::bf16), b.to(DType::bf16), Tensor::empty(s, DType::f32)), Error);  // b 16-bit
  EXPECT_THROW(ops::mul(a, b.to(DType::bf16), Tensor::empty(s, DType::f32)), Error);                  // b 16-bit
  EXPECT_THROW(ops::mul(a.to(DType::bf16), b, Tensor::empty(s, DType::bf16)), Error);                 // 16-bit a and out
  EXPECT_THROW(ops::mul(a.to(DType::bf16), b, Tensor::empty(s, DType::f16)), Error);
  EXPECT_THROW(ops::mul(a.to(DType::bf16), b, Tensor::empty({5, 6}, DType::f32)), Error);             // shape
  EXPECT_THROW(ops::add(a.to(DType::bf16), b, Tensor::empty(s, DType::f32)), Error);                  // add: none
}

TEST(Elementwise, Bf16StorageRoundsOnceFromFp32Math) {
  Generator gen(13);
  Tensor a = randn({5, 33}, gen, 0, 1, DType::bf16), b = randn({5, 33}, gen, 0, 1, DType::bf16);
  Tensor out = Tensor::empty({5, 33}, DType::bf16);
  ops::axpby(0.3f, a, 0.7f, b, out);
  const auto av = a.to_vector(), bv = b.to_vector(), ov = out.to_vector();
  for (size_t i = 0; i < av.size(); ++i)
    EXPECT_EQ(ov[i], static_cast<float>(bf16(0.3f * av[i] + 0.7f * bv[i]))) << i;
}

TEST(Elementwise, ActivationsForwardMatchNaive) {
  Generator gen(14);
  for (const Shape& s : kShapes) {
    Tensor x = randn(s, gen, 0, 2), y = Tensor::empty(s, DType::f32);
    const auto xv = x.to_vector();
    std::vector<float> relu(xv.size()), gelu(xv.size()), sig(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const double v = xv[i];
      relu[i] = static_cast<float>(v > 0 ? v : 0);
      gelu[i] = static_cast<float>(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
      sig[i] = static_cast<float>(1 / (1 + std::exp(-v)));
    }
    ops::relu_forward(x, y);
    FC_EXPECT_CLOSE(y, Tensor::from_vector(relu, s), 0, 0);
    ops::gelu_forward(x, y);
    FC_EXPECT_CLOSE(y, Tensor::from_vector(gelu, s), 1e-6, 1e-5);
    ops::sigmoid_forward(x, y);
    FC_EXPECT_CLOSE(y, Tensor::from_vector(sig, s), 1e-6, 1e-5);
  }
}

// Finite-difference tolerances: loss = Σ w·f(x) in f32 with |loss| ~ 10, eps = 1e-3: the
// central difference has truncation error eps²·|f'''|/6 ~ 1e-7 and rounding error
// ~ 1e-6·10/2e-3 ~ 5e-3 worst case, hence atol 1e-2 and rtol 1e-2.
constexpr double kEps = 1e-3, kAtol = 1e-2, kRtol = 1e-2;

TEST(Elementwise, ActivationBackwardMatchesFiniteDifferences) {
  Generator gen(15);
  const Shape s{3, 7, 5};
  Tensor x = away_from_zero(s, gen), w = randn(s, gen), y = Tensor::empty(s, DType::f32);
  Tensor dx = Tensor::empty(s, DType::f32);
  auto loss_of = [&](void (*fwd)(const Tensor&, const Tensor&)) {
    return [&, fwd] {
      fwd(x, y);
      return weighted_sum(y, w);
    };
  };
  ops::relu_backward(x, w, dx);
  check_gradient(loss_of(ops::relu_forward), x, dx, kEps, kAtol, kRtol);
  ops::gelu_backward(x, w, dx);
  check_gradient(loss_of(ops::gelu_forward), x, dx, kEps, kAtol, kRtol);
  ops::sigmoid_forward(x, y);
  ops::sigmoid_backward(y.clone(), w, dx);
  check_gradient(loss_of(ops::sigmoid_forward), x, dx, kEps, kAtol, kRtol);
}

// The masked gated edge in one pass equals sigmoid_gate, the mask multiply and the permute (and
// their backwards) bit for bit, f32 and bf16, with masked entries, partial tiles and one channel;
// bad shapes and dtypes are errors naming the operand.
TEST(Elementwise, MaskedGateChannelMajorEqualsComposition) {
  Generator gen(41);
  for (DType t : {DType::f32, DType::bf16}) {
    for (const Shape& s : {Shape{5, 7, 37}, Shape{3, 70, 33}, Shape{4, 4, 1}, Shape{9, 11, 128}}) {
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(t)));
      const Tensor g = randn(s, gen, 0, 2.f, t), p = randn(s, gen, 0, 1.f, t);
      std::vector<float> mv(static_cast<size_t>(s[0] * s[1]));
      for (size_t i = 0; i < mv.size(); ++i) mv[i] = (i % 5 == 3) ? 0.f : 1.f;
      const Tensor m = Tensor::from_vector(mv, {s[0], s[1]}, t);
      const Tensor dout = randn({s[2], s[0], s[1]}, gen, 0, 1.f, t);
      const auto fused = testing::masked_gate_channel_major(g, p, m, dout, true);
      const auto ref = testing::masked_gate_channel_major(g, p, m, dout, false);
      EXPECT_EQ(fused.out.to(DType::f32).to_vector(), ref.out.to(DType::f32).to_vector());
      EXPECT_EQ(fused.dg.to(DType::f32).to_vector(), ref.dg.to(DType::f32).to_vector());
      EXPECT_EQ(fused.dp.to(DType::f32).to_vector(), ref.dp.to(DType::f32).to_vector());
    }
  }
  const Tensor g = Tensor::zeros({2, 3, 4}, DType::f32), m = Tensor::full({2, 3}, 1.0, DType::f32);
  Tensor out = Tensor::empty({4, 2, 3}, DType::f32);
  EXPECT_THROW(ops::masked_gate_channel_major_forward(g, g, Tensor::full({3, 2}, 1.0, DType::f32), out), Error);
  EXPECT_THROW(ops::masked_gate_channel_major_forward(g, g, m, Tensor::empty({2, 3, 4}, DType::f32)), Error);
  EXPECT_THROW(ops::masked_gate_channel_major_forward(g, g.to(DType::bf16), m, out), Error);
}

TEST(Elementwise, SigmoidGateForwardBackward) {
  Generator gen(16);
  const Shape s{4, 3, 11};
  Tensor g = randn(s, gen), x = randn(s, gen), w = randn(s, gen), out = Tensor::empty(s, DType::f32);
  ops::sigmoid_gate_forward(g, x, out);
  const auto gv = g.to_vector(), xv = x.to_vector();
  std::vector<float> e(gv.size());
  for (size_t i = 0; i < e.size(); ++i) e[i] = static_cast<float>(xv[i] / (1 + std::exp(-double(gv[i]))));
  FC_EXPECT_CLOSE(out, Tensor::from_vector(e, s), 1e-6, 1e-5);
  Tensor dg = Tensor::empty(s, DType::f32), dx = Tensor::empty(s, DType::f32);
  ops::sigmoid_gate_backward(g, x, w, dg, dx);
  auto loss = [&] {
    ops::sigmoid_gate_forward(g, x, out);
    return weighted_sum(out, w);
  };
  check_gradient(loss, g, dg, kEps, kAtol, kRtol);
  check_gradient(loss, x, dx, kEps, kAtol, kRtol);
}

// The mask computed independently of the op: the element's coordinates with the shared axes
// dropped, flattened over the mask's shape (the shared axes of size 1).
std::vector<bool> naive_mask(const Shape& s, const ops::DropoutArgs& d) {
  std::vector<bool> shared(s.size(), false);
  for (int a : d.shared_dims) shared[a < 0 ? a + s.size() : a] = true;
  std::vector<bool> m(s.product());
  for (int64_t i = 0; i < s.product(); ++i) {
    auto c = unravel(i, s);
    int64_t idx = 0;
    for (int a = 0; a < s.size(); ++a)
      if (!shared[a]) idx = idx * s[a] + c[a];
    m[i] = philox_keep(d.seed, d.offset, idx, d.p);
  }
  return m;
}

TEST(Dropout, ForwardMatchesNaiveWithBiasResidualAndSharedDims) {
  Generator gen(17);
  for (const auto& shared : std::vector<std::vector<int>>{{}, {-3}, {-2}, {0, 2}}) {
    const Shape s{3, 6, 13};
    ops::DropoutArgs d{0.25f, 99, 5, shared};
    Tensor x = randn(s, gen), bias = randn({13}, gen), res = randn(s, gen), out = Tensor::empty(s, DType::f32);
    ops::bias_dropout_residual_forward(x, bias, res, d, out);
    const auto xv = x.to_vector(), bv = bias.to_vector(), rv = res.to_vector();
    const auto m = naive_mask(s, d);
    std::vector<float> e(xv.size());
    for (size_t i = 0; i < e.size(); ++i) e[i] = rv[i] + (m[i] ? (xv[i] + bv[i % 13]) / 0.75f : 0.f);
    FC_EXPECT_CLOSE(out, Tensor::from_vector(e, s), 1e-6, 1e-6);
  }
}

// Sizes where the CPU path runs in parallel (rows over threads, and a shared mask's compact part
// computed over threads), row lengths off the 4-element Philox blocks, shared leading, middle and
// last axes: every decision equals the per-element philox_keep of the naive mask, forward and
// backward.
TEST(Dropout, LargeTensorsDrawTheNaiveMaskRowByRow) {
  Generator gen(23);
  for (const auto& shared : std::vector<std::vector<int>>{{}, {0}, {1}, {-1}, {0, 2}}) {
    const Shape s{2, 161, 131};
    const ops::DropoutArgs d{0.15f, 4242, 9, shared};
    const Tensor ones = Tensor::full(s, 1.0, DType::f32);
    Tensor out = Tensor::empty(s, DType::f32), dx = Tensor::empty(s, DType::f32);
    ops::bias_dropout_residual_forward(ones, Tensor(), Tensor(), d, out);
    ops::bias_dropout_residual_backward(ones, d, dx, Tensor());
    const auto m = naive_mask(s, d);
    const auto ov = out.to_vector(), dv = dx.to_vector();
    int64_t wrong = 0;
    for (size_t i = 0; i < m.size(); ++i) {
      const float expected = m[i] ? 1.f / 0.85f : 0.f;
      wrong += ov[i] != expected || dv[i] != expected;
    }
    EXPECT_EQ(wrong, 0) << "shared axes " << shared.size();
  }
}

// A slab of the tensor cut along a shared axis draws the whole tensor's mask (what dynamic axial
// parallelism relies on: each rank holds a slab and must draw one process's mask).
TEST(Dropout, SlabAlongASharedAxisDrawsTheWholeMask) {
  const Shape s{6, 8, 5};
  for (int axis : {0, 1}) {
    const ops::DropoutArgs d{0.4f, 7, 3, {axis}};
    const Tensor ones = Tensor::full(s, 1.0, DType::f32);
    Tensor whole = Tensor::empty(s, DType::f32);
    ops::bias_dropout_residual_forward(ones, Tensor(), Tensor(), d, whole);
    for (int64_t start : {0, 2, 4}) {
      const Tensor slab_in = ones.narrow(axis, start, 2).contiguous();
      Tensor slab = Tensor::empty(slab_in.shape(), DType::f32);
      ops::bias_dropout_residual_forward(slab_in, Tensor(), Tensor(), d, slab);
      FC_EXPECT_CLOSE(slab, whole.narrow(axis, start, 2).contiguous(), 0, 0);
    }
  }
}

// A slab of rows (the leading axis, not shared) with the index base of its first mask element
// draws its rows of the whole tensor's mask: a DAP rank's rows of a mask one process draws for all
// rows (evoformer_parallel.cpp). Shared middle axis (AlphaFold's column-wise dropout), shared last
// axis, none; bases off the 4-element Philox blocks; forward and backward.
TEST(Dropout, RowsWithTheirIndexBaseDrawTheirRowsOfTheWholeMask) {
  const Shape s{6, 8, 5};
  for (const auto& shared : std::vector<std::vector<int>>{{1}, {-1}, {}}) {
    const ops::DropoutArgs d{0.4f, 7, 3, shared};
    const Tensor ones = Tensor::full(s, 1.0, DType::f32);
    Tensor whole = Tensor::empty(s, DType::f32);
    ops::bias_dropout_residual_forward(ones, Tensor(), Tensor(), d, whole);
    int64_t row_mask = 1;  // mask elements per row: the unshared later axes
    for (int a = 1; a < 3; ++a)
      if (std::find(shared.begin(), shared.end(), a) == shared.end() &&
          std::find(shared.begin(), shared.end(), a - 3) == shared.end())
        row_mask *= s[a];
    for (int64_t start : {0, 1, 3, 4}) {
      ops::DropoutArgs slab_args = d;
      slab_args.index_base = start * row_mask;
      const Tensor slab_in = ones.narrow(0, start, 2).contiguous();
      Tensor slab = Tensor::empty(slab_in.shape(), DType::f32), dx = Tensor::empty(slab_in.shape(), DType::f32);
      ops::bias_dropout_residual_forward(slab_in, Tensor(), Tensor(), slab_args, slab);
      ops::bias_dropout_residual_backward(slab_in, slab_args, dx, Tensor());
      FC_EXPECT_CLOSE(slab, whole.narrow(0, start, 2).contiguous(), 0, 0);
      FC_EXPECT_CLOSE(dx, whole.narrow(0, start, 2).contiguous(), 0, 0);
    }
  }
}

// dropout_keep4 (the 4-element decisions the CUDA kernels and the fused layer norm draw) equals
// philox_keep of each element's mask index, for the masks whose groups draw one Philox block
// (`quads`: last axis unshared and a multiple of 4 long, base a multiple of 4) and those that
// draw per element; and `quads` is set exactly for the former.
TEST(Dropout, FourElementDecisionsEqualPerElementOnes) {
  struct Case {
    Shape shape;
    std::vector<int> shared;
    int64_t base;
    bool quads;
  };
  const std::vector<Case> cases = {
      {{3, 6, 64}, {-3}, 0, true},  {{3, 6, 64}, {-2}, 0, true},   {{3, 6, 64}, {0, 1}, 128, true},
      {{3, 6, 64}, {}, 8, true},    {{3, 6, 64}, {-1}, 0, false},  {{3, 6, 64}, {-2}, 6, false},
      {{3, 6, 62}, {-3}, 0, false}, {{3, 6, 64}, {}, 0, false},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.shape.str() + " base " + std::to_string(k.base));
    const ops::DropoutMaskDesc m = ops::make_dropout_mask_desc(k.shape, k.shared, k.base);
    EXPECT_EQ(m.quads, k.quads);
    int64_t wrong = 0;
    for (int64_t base = 0; base + 4 <= k.shape.product(); base += 4) {
      bool keep[4];
      ops::dropout_keep4(m, 0xabcdefULL, (1ULL << 35) + 1, 0.4f, base, keep);
      for (int e = 0; e < 4; ++e) wrong += keep[e] != philox_keep(0xabcdefULL, (1ULL << 35) + 1, m.mask_index(base + e), 0.4f);
    }
    EXPECT_EQ(wrong, 0);
  }
}

TEST(Dropout, ZeroRateIsIdentityAndOptionalOperands) {
  Generator gen(18);
  const Shape s{5, 9};
  Tensor x = randn(s, gen), bias = randn({9}, gen), out = Tensor::empty(s, DType::f32);
  ops::bias_dropout_residual_forward(x, Tensor(), Tensor(), ops::DropoutArgs{}, out);
  FC_EXPECT_CLOSE(out, x, 0, 0);
  ops::bias_dropout_residual_forward(x, bias, x, ops::DropoutArgs{}, out);
  const auto xv = x.to_vector(), bv = bias.to_vector(), ov = out.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(ov[i], xv[i] + (xv[i] + bv[i % 9]));
  EXPECT_THROW(ops::bias_dropout_residual_forward(x, bias, Tensor(), ops::DropoutArgs{1.f, 0, 0, {}}, out), Error);
  EXPECT_THROW(ops::bias_dropout_residual_forward(x, bias, Tensor(), ops::DropoutArgs{0.1f, 0, 0, {2}}, out),
               Error);
  EXPECT_THROW(ops::bias_dropout_residual_forward(x, randn({8}, gen), Tensor(), ops::DropoutArgs{}, out), Error);
}

TEST(Dropout, KeepRateAndSharedAxesAreConstant) {
  const Shape s{16, 32, 40};
  Tensor ones = Tensor::full(s, 1.0, DType::f32), out = Tensor::empty(s, DType::f32);
  for (float p : {0.1f, 0.5f}) {
    ops::bias_dropout_residual_forward(ones, Tensor(), Tensor(), ops::DropoutArgs{p, 3, 0, {}}, out);
    int64_t kept = 0;
    for (float v : out.to_vector()) kept += v != 0.f;
    // n = 20480: the kept fraction has std ≤ 0.0035; 0.02 is > 5 sigma.
    EXPECT_NEAR(static_cast<double>(kept) / s.product(), 1 - p, 0.02) << "p=" << p;
  }
  // Row-wise (shared over axis -3) and column-wise (shared over -2) masks.
  for (int axis : {-3, -2}) {
    ops::bias_dropout_residual_forward(ones, Tensor(), Tensor(), ops::DropoutArgs{0.4f, 3, 1, {axis}}, out);
    const auto ov = out.to_vector();
    const int a = axis + 3;
    int64_t varying = 0;
    for (int64_t i = 0; i < s.product(); ++i) {
      auto c = unravel(i, s);
      c[a] = 0;
      const int64_t j = (c[0] * s[1] + c[1]) * s[2] + c[2];
      EXPECT_EQ(ov[i], ov[j]) << "axis " << axis << " index " << i;
      varying += ov[i] != ov[0];
    }
    EXPECT_GT(varying, 0);  // the mask is not trivially constant
  }
}

TEST(Dropout, BackwardUsesTheForwardMaskAndAccumulatesDbias) {
  Generator gen(19);
  const Shape s{4, 7, 9};
  const ops::DropoutArgs d{0.3f, 1234, 77, {-2}};
  Tensor ones = Tensor::full(s, 1.0, DType::f32), mask = Tensor::empty(s, DType::f32);
  ops::bias_dropout_residual_forward(ones, Tensor(), Tensor(), d, mask);  // mask/(1-p)
  Tensor dout = randn(s, gen), dx = Tensor::empty(s, DType::f32);
  Tensor dbias = Tensor::full({9}, 1.0, DType::f32);
  ops::bias_dropout_residual_backward(dout, d, dx, dbias);
  const auto mv = mask.to_vector(), dv = dout.to_vector(), dxv = dx.to_vector();
  std::vector<double> db(9, 1.0);
  for (size_t i = 0; i < dv.size(); ++i) {
    EXPECT_EQ(dxv[i], mv[i] != 0.f ? dv[i] * (1 / 0.7f) : 0.f) << i;
    db[i % 9] += dxv[i];
  }
  const auto dbv = dbias.to_vector();
  for (int c = 0; c < 9; ++c) EXPECT_NEAR(dbv[c], db[c], 1e-5) << c;
}

// A bf16 update of an fp32 stream (no bias): the mixed kernels give exactly the values of
// converting the update to fp32 first (forward) and of rounding the fp32 dx to bf16 (backward), with
// dropout on; in place too. Mixes outside that (a bias, an f16 x into a bf16 out) are errors.
TEST(Dropout, Bf16UpdateOfAnFp32StreamEqualsTheConvertedOne) {
  Generator gen(23);
  const Shape s{5, 6, 24};
  const ops::DropoutArgs d{0.25f, 99, 5, {-3}};
  const Tensor x = randn(s, gen).to(DType::bf16), res = randn(s, gen), dout = randn(s, gen);
  Tensor ref = Tensor::empty(s, DType::f32), got = Tensor::empty(s, DType::f32);
  ops::bias_dropout_residual_forward(x.to(DType::f32), Tensor(), res, d, ref);
  ops::bias_dropout_residual_forward(x, Tensor(), res, d, got);
  FC_EXPECT_CLOSE(got, ref, 0, 0);
  Tensor in_place = res.clone();
  ops::bias_dropout_residual_forward(x, Tensor(), in_place, d, in_place);
  FC_EXPECT_CLOSE(in_place, ref, 0, 0);
  Tensor dx32 = Tensor::empty(s, DType::f32), dx16 = Tensor::empty(s, DType::bf16);
  ops::bias_dropout_residual_backward(dout, d, dx32, Tensor());
  ops::bias_dropout_residual_backward(dout, d, dx16, Tensor());
  FC_EXPECT_CLOSE(dx16.to(DType::f32), dx32.to(DType::bf16).to(DType::f32), 0, 0);
  EXPECT_THROW(ops::bias_dropout_residual_forward(x, Tensor::zeros({24}, DType::bf16), res, d, got), Error);
  EXPECT_THROW(ops::bias_dropout_residual_forward(x.to(DType::f16), Tensor(), Tensor(), d, Tensor::empty(s, DType::bf16)),
               Error);
  EXPECT_THROW(ops::bias_dropout_residual_backward(dout, d, dx16, Tensor::zeros({24}, DType::f32)), Error);
}

// An fp32 update of a bf16 stream (no bias; the outer product mean's update of a bf16 pair stream):
// the sum taken in fp32 and rounded once to bf16, the values of the fp32 op's result converted;
// in place too. Its backward, a bf16 dout into an fp32 dx, equals the fp32 backward of the dout
// converted (exact). With a bias, or a bf16 dbias-taking backward, the mix is an error.
TEST(Dropout, Fp32UpdateOfABf16StreamRoundsTheFp32SumOnce) {
  Generator gen(24);
  const Shape s{4, 7, 20};
  const ops::DropoutArgs d{0.3f, 41, 3, {-2}};
  const Tensor x = randn(s, gen), res = randn(s, gen, 0.f, 2.f, DType::bf16), dout = randn(s, gen, 0.f, 1.f, DType::bf16);
  Tensor sum32 = Tensor::empty(s, DType::f32), got = Tensor::empty(s, DType::bf16);
  ops::bias_dropout_residual_forward(x, Tensor(), res.to(DType::f32), d, sum32);
  ops::bias_dropout_residual_forward(x, Tensor(), res, d, got);
  FC_EXPECT_CLOSE(got.to(DType::f32), sum32.to(DType::bf16).to(DType::f32), 0, 0);
  Tensor in_place = res.clone();
  ops::bias_dropout_residual_forward(x, Tensor(), in_place, d, in_place);
  FC_EXPECT_CLOSE(in_place.to(DType::f32), got.to(DType::f32), 0, 0);
  Tensor ref = Tensor::empty(s, DType::f32), dx = Tensor::empty(s, DType::f32);
  ops::bias_dropout_residual_backward(dout.to(DType::f32), d, ref, Tensor());
  ops::bias_dropout_residual_backward(dout, d, dx, Tensor());
  FC_EXPECT_CLOSE(dx, ref, 0, 0);
  EXPECT_THROW(ops::bias_dropout_residual_forward(x, Tensor::zeros({20}, DType::f32), res, d, got), Error);
  EXPECT_THROW(ops::bias_dropout_residual_backward(dout, d, dx, Tensor::zeros({20}, DType::f32)), Error);
}

TEST(Dropout, BackwardMatchesFiniteDifferences) {
  Generator gen(20);
  const Shape s{3, 5, 8};
  const ops::DropoutArgs d{0.2f, 42, 3, {}};
  Tensor x = randn(s, gen), bias = randn({8}, gen), res = randn(s, gen), w = randn(s, gen);
  Tensor out = Tensor::empty(s, DType::f32), dx = Tensor::empty(s, DType::f32);
  Tensor dbias = Tensor::zeros({8}, DType::f32);
  ops::bias_dropout_residual_backward(w, d, dx, dbias);
  auto loss = [&] {
    ops::bias_dropout_residual_forward(x, bias, res, d, out);
    return weighted_sum(out, w);
  };
  // The op is linear in x and bias, so the central difference is exact up to f32 rounding of
  // the loss (~1e-6·|loss|/eps); same tolerances as above.
  check_gradient(loss, x, dx, kEps, kAtol, kRtol);
  check_gradient(loss, bias, dbias, kEps, kAtol, kRtol);
}

TEST(Dropout, InPlaceResidualMatchesOutOfPlace) {
  Generator gen(21);
  const Shape s{6, 11};
  const ops::DropoutArgs d{0.5f, 8, 2, {0}};
  Tensor x = randn(s, gen), bias = randn({11}, gen), res = randn(s, gen);
  Tensor expect = Tensor::empty(s, DType::f32);
  ops::bias_dropout_residual_forward(x, bias, res, d, expect);
  ops::bias_dropout_residual_forward(x, bias, res, d, res);  // out aliases residual
  FC_EXPECT_CLOSE(res, expect, 0, 0);
}

}  // namespace
}  // namespace foldcore
