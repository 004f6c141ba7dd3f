// Chunked (long-sequence) triangle multiplication: both no-grad chunked paths (returning the
// update, and adding it into a stream, z's own storage included) equal the whole path (and the
// no-grad unchunked path equals the graph path) for both directions, ragged chunks and
// c_hidden ≠ c_z, match the parity fixture with the official block-0 parameters, and keep their
// peak memory near one pair-sized buffer.
//
// Tolerance chunked vs whole: 2e-6·max|whole|. Both paths compute every element with the same
// kernels on the same operands; only the GEMMs differ in shape (a column block of the projection
// weights, a channel block of the batched contraction, a row block of the output projection), which
// may select a different BLAS blocking and so a different summation order: ~1e-7 relative on
// K ≤ 128 dot products, amplified a few-fold by the centre LayerNorm. Fixture parity: the 5e-6
// relative of test_af2_evoformer.cpp (its header derives it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "autograd/autograd.h"
#include "core/allocator.h"
#include "kernels/elementwise.h"
#include "models/alphafold/model/config.h"
#include "models/alphafold/evoformer/triangle_multiplication.h"
#include "af2_test_util.h"

namespace foldcore::af2 {
namespace {

// max|got − want| / max|want|.
double rel_err(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  const std::vector<float> a = got.contiguous().to_vector(), b = want.contiguous().to_vector();
  double err = 0, ref_max = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double e = std::abs(static_cast<double>(a[i]) - b[i]);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
    ref_max = std::max(ref_max, static_cast<double>(std::abs(b[i])));
  }
  return err / std::max(ref_max, 1e-30);
}

// A pair mask with some zero rows/columns and scattered holes (so masking is exercised).
Tensor test_mask(int64_t n) {
  std::vector<float> m(static_cast<size_t>(n * n), 1.f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      if (i == n - 1 || j == n - 2 || (i * 7 + j * 3) % 11 == 0) m[static_cast<size_t>(i * n + j)] = 0.f;
  return Tensor::from_vector(m, {n, n});
}

struct Case {  // widths and sequence length of one module instance
  int64_t c_z, c, n;
};

// Both chunked paths: returning the update, and adding it into a stream (the Evoformer's and
// template stack's inference path: b whole, then blocks of output rows or columns), into a zero
// tensor and into z's own storage (each output block reads its block of z before writing it);
// the latter against z + whole, relative to max|z + update|.
TEST(Af2TriangleMultiplication, ChunkedEqualsWhole) {
  autograd::NoGradGuard ng;
  // (c_z, c_hidden, N): the Evoformer's equal widths (the update reuses t's storage) and unequal
  // ones (a separate output buffer); chunks that divide N, ragged ones, 1, N − 1 and ≥ N (whole).
  // At N = 70 with chunk 1, adding into a stream contracts blocks of ⌈70/32⌉ = 3 rows (the last
  // one ragged) in sub-blocks of 1 for the edge and the output.
  for (const Case k : {Case{16, 16, 24}, Case{12, 8, 17}, Case{12, 8, 70}}) {
    for (const bool outgoing : {true, false}) {
      Env env;
      TriangleMultiplication tm(env.scope("tm"), k.c_z, k.c, outgoing);
      env.ps.finalize();
      env.randomize(3);
      Generator g(11);
      const Variable z(randn({k.n, k.n, k.c_z}, g));
      const Tensor mask = test_mask(k.n);
      const Tensor whole = tm.forward(z, mask).value();
      Tensor want = Tensor::empty(whole.shape(), DType::f32);
      ops::add(z.value(), whole, want);
      for (const int64_t chunk : {int64_t{1}, int64_t{5}, int64_t{8}, k.n - 1, k.n, k.n + 3}) {
        const std::string what = std::string(outgoing ? "outgoing" : "incoming") + " c_z " + std::to_string(k.c_z) +
                                 " c " + std::to_string(k.c) + " N " + std::to_string(k.n) + " chunk " +
                                 std::to_string(chunk);
        EXPECT_LE(rel_err(tm.forward(z, mask, chunk).value(), whole), 2e-6) << what;
        const Tensor zero = Tensor::zeros(whole.shape(), DType::f32);
        EXPECT_LE(rel_err(tm.forward(z, mask, chunk, zero).value(), whole), 2e-6) << what << " (into 0)";
        const Tensor own = z.value().clone();
        const Tensor got = tm.forward(Variable(own), mask, chunk, own).value();
        EXPECT_EQ(got.data<float>(), own.data<float>()) << what;
        EXPECT_LE(rel_err(own, want), 2e-6) << what << " (into z)";
      }
    }
  }
}

// The same under bf16 autocast with a bf16 stream, against the whole path's bf16 update added in
// fp32 and rounded once: within 2^-8 of max|z + update| (the final rounding of each sum to bf16,
// half an ulp ≤ 2^-9 of its magnitude, plus the update's own last-bit differences from GEMMs of
// other shapes, at most another half ulp of the update).
TEST(Af2TriangleMultiplication, ChunkedAddIntoBf16Stream) {
  autograd::NoGradGuard ng;
  const Case k{16, 16, 24};
  for (const bool outgoing : {true, false}) {
    Env env;
    TriangleMultiplication tm(env.scope("tm"), k.c_z, k.c, outgoing);
    env.ps.finalize();
    env.randomize(3);
    Generator g(19);
    const Tensor zb = randn({k.n, k.n, k.c_z}, g).to(DType::bf16);
    const Tensor mask = test_mask(k.n);
    autograd::AutocastGuard ac(DType::bf16);
    const Tensor whole = tm.forward(Variable(zb), mask).value().to(DType::f32);
    Tensor want = Tensor::empty(zb.shape(), DType::f32);
    ops::add(zb.to(DType::f32), whole, want);
    for (const int64_t chunk : {int64_t{5}, int64_t{8}}) {
      const Tensor own = zb.clone();
      tm.forward(Variable(own), mask, chunk, own);
      ASSERT_EQ(own.dtype(), DType::bf16);
      EXPECT_LE(rel_err(own.to(DType::f32), want), std::ldexp(1.0, -8))
          << (outgoing ? "outgoing" : "incoming") << " chunk " << chunk;
    }
  }
}

// The no-grad unchunked path (channel-major projections through one GEMM with the weights on the
// left, in-place gating, the contraction written into the projection buffer) equals the graph
// path run with grad mode on. Same 2e-6 tolerance as above: the same products, summed in GEMMs
// of other shapes (a transposed [4c, N²] product instead of four [N², c] ones).
TEST(Af2TriangleMultiplication, InferencePathEqualsGraphPath) {
  for (const Case k : {Case{16, 16, 24}, Case{12, 8, 17}, Case{8, 20, 33}}) {
    for (const bool outgoing : {true, false}) {
      Env env;
      TriangleMultiplication tm(env.scope("tm"), k.c_z, k.c, outgoing);
      env.ps.finalize();
      env.randomize(5);
      Generator g(13);
      const Tensor zt = randn({k.n, k.n, k.c_z}, g);
      const Tensor mask = test_mask(k.n);
      const Tensor graph = tm.forward(Variable(zt, /*requires_grad=*/true), mask).value();
      Tensor fast;
      {
        autograd::NoGradGuard ng;
        fast = tm.forward(Variable(zt), mask).value();
      }
      const double e = rel_err(fast, graph);
      EXPECT_LE(e, 2e-6) << (outgoing ? "outgoing" : "incoming") << " c_z " << k.c_z << " c " << k.c << " N " << k.n;
    }
  }
}

TEST(Af2TriangleMultiplication, ChunkedMatchesFixture) {
  Env env;
  const Af2Config cfg;
  const int64_t c_z = cfg.evoformer.c_z, c = cfg.evoformer.tri_mul_channels;
  // params.npz stacks 2 Evoformer blocks: bind both (the fixture dumps use block 0).
  TriangleMultiplication out(env.scope().child("out0"), c_z, c, true), in(env.scope().child("in0"), c_z, c, false);
  TriangleMultiplication out1(env.scope().child("out1"), c_z, c, true), in1(env.scope().child("in1"), c_z, c, false);
  env.ps.finalize();
  Af2ParamTable table;
  const std::string key = "evoformer/evoformer_iteration/triangle_multiplication_";
  for (int64_t b = 0; b < 2; ++b) {
    (b == 0 ? out : out1).add_af2_params(table, key + "outgoing", b);
    (b == 0 ? in : in1).add_af2_params(table, key + "incoming", b);
  }
  load_af2_params(table, testing::shared_dir() + "/af2/ref/params.npz", {.allow_unused = true});
  autograd::NoGradGuard ng;
  for (const auto& [m, name] : {std::pair{&out, std::string("trimul_out")}, std::pair{&in, std::string("trimul_in")}}) {
    const Variable z(ref("modules", name + "_z"));
    const Tensor mask = ref("modules", name + "_mask"), want = ref("modules", name + "_update");
    for (const int64_t chunk : {int64_t{0}, int64_t{7}, int64_t{16}}) {
      const double e = rel_err(m->forward(z, mask, chunk).value(), want);
      std::printf("[parity] %s chunk %lld: %.3g\n", name.c_str(), static_cast<long long>(chunk), e);
      EXPECT_LE(e, 5e-6) << name << " chunk " << chunk;
      // The adding path (into a zero stream).
      const Tensor zero = Tensor::zeros(want.shape(), DType::f32);
      const double ea = rel_err(m->forward(z, mask, chunk, zero).value(), want);
      std::printf("[parity] %s chunk %lld, added into a stream: %.3g\n", name.c_str(), static_cast<long long>(chunk), ea);
      EXPECT_LE(ea, 5e-6) << name << " chunk " << chunk << " (into)";
    }
  }
}

// Peak allocator bytes above the inputs: the whole path holds ~10 pair-sized temporaries at once
// (x, a, b, their channel-major copies, t, its row-major copy, LN(t), o, the gate, …); the
// chunked one holds t (which becomes the update) plus O(chunk·N·c) blocks. N 96, c 128, chunk 8:
// pair 4.5 MiB, blocks ≈ 8·96·128 floats ·(a few) ≈ 0.1 pair.
TEST(Af2TriangleMultiplication, ChunkedPeakMemoryIsAboutOnePair) {
  constexpr int64_t kN = 96, kC = 128, kChunk = 8;
  Env env;
  TriangleMultiplication tm(env.scope("tm"), kC, kC, true);
  env.ps.finalize();
  env.randomize(5);
  Generator g(2);
  const Variable z(randn({kN, kN, kC}, g));
  const Tensor mask = test_mask(kN);
  autograd::NoGradGuard ng;
  Allocator& alloc = default_allocator(Device::cpu());
  auto peak_above_base = [&](int64_t chunk) {
    const size_t base = alloc.stats().current;
    alloc.reset_peak();
    const Tensor u = tm.forward(z, mask, chunk).value();
    return static_cast<double>(alloc.stats().peak - base);
  };
  const double pair = static_cast<double>(kN * kN * kC * sizeof(float));
  const double whole = peak_above_base(0), chunked = peak_above_base(kChunk);
  // Adding into z's own storage: b [N, N, c] is the one pair-sized temporary.
  const Tensor own = z.value().clone();
  const size_t base = alloc.stats().current;
  alloc.reset_peak();
  tm.forward(Variable(own), mask, kChunk, own);
  const double added = static_cast<double>(alloc.stats().peak - base);
  std::printf("[memory] pair %.2f MiB: whole %.2f pairs, chunked %.2f pairs, added into z %.2f pairs\n",
              pair / (1 << 20), whole / pair, chunked / pair, added / pair);
  EXPECT_LE(chunked, 1.5 * pair);
  EXPECT_LE(added, 1.5 * pair);
  EXPECT_GE(whole, 4 * pair);  // the comparison means something: the whole path really is larger
}

TEST(Af2TriangleMultiplication, GradModeTakesTheWholePath) {
  // With grad mode on the chunk is ignored (training keeps one graph); the gradient flows.
  Env env;
  TriangleMultiplication tm(env.scope("tm"), 8, 8, false);
  env.ps.finalize();
  env.randomize(9);
  Generator g(4);
  const Variable z(randn({6, 6, 8}, g), /*requires_grad=*/true);
  const Variable u = tm.forward(z, test_mask(6), /*chunk=*/2);
  ASSERT_TRUE(u.requires_grad());
  autograd::backward(autograd::sum(u, {0, 1, 2}));
  EXPECT_TRUE(z.grad().defined());
}

}  // namespace
}  // namespace foldcore::af2
