// CPU attention reference vs naive math (materialised s and p), packed sequences vs per-segment
// runs, strided views, and backward vs finite differences. Global attention likewise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/cpu/gemm_amx.h"
#include "test_util.h"

namespace foldcore {
namespace {

using ops::AttentionGrads;
using ops::AttentionInputs;

struct Naive {
  std::vector<double> o, a, lse;
};

// Materialises s[b,h,i,j] and p in double; segments from cu (empty: all keys).
Naive naive_attention(const AttentionInputs& in, const std::vector<int>& cu = {}) {
  const int64_t B = in.q.size(0), H = in.q.size(1), Lq = in.q.size(2), D = in.q.size(3), Lk = in.k.size(2);
  const auto q = in.q.to_vector(), k = in.k.to_vector(), v = in.v.to_vector();
  const auto g = in.gate.defined() ? in.gate.to_vector() : std::vector<float>{};
  std::vector<std::vector<float>> biases;
  for (const Tensor& t : in.biases) biases.push_back(t.expand({B, H, Lq, Lk}).to_vector());
  auto segment = [&](int64_t i) {
    for (size_t s = 0; s + 1 < cu.size(); ++s)
      if (i >= cu[s] && i < cu[s + 1]) return static_cast<int>(s);
    return -1;
  };
  Naive r;
  r.o.assign(static_cast<size_t>(B * H * Lq * D), 0.0);
  r.a = r.o;
  r.lse.assign(static_cast<size_t>(B * H * Lq), 0.0);
  std::vector<double> s(static_cast<size_t>(Lk)), p(static_cast<size_t>(Lk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t bhi = (b * H + h) * Lq + i;
        double mx = -1e300;
        for (int64_t j = 0; j < Lk; ++j) {
          if (!cu.empty() && segment(i) != segment(j)) {
            s[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(q[bhi * D + d]) * k[((b * H + h) * Lk + j) * D + d];
          s[j] = in.scale * dot;
          for (const auto& bt : biases) s[j] += bt[bhi * Lk + j];
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < Lk; ++j) sum += (p[j] = std::exp(s[j] - mx));
        r.lse[bhi] = mx + std::log(sum);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < Lk; ++j) acc += p[j] / sum * v[((b * H + h) * Lk + j) * D + d];
          r.a[bhi * D + d] = acc;
          const double sg = g.empty() ? 1.0 : 1.0 / (1.0 + std::exp(-double(g[bhi * D + d])));
          r.o[bhi * D + d] = acc * sg;
        }
      }
  return r;
}

void expect_near_vec(const Tensor& t, const std::vector<double>& ref, double atol, double rtol, const char* what) {
  const auto got = t.to_vector();
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(got[i] - ref[i]) <= atol + rtol * std::fabs(ref[i])) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", naive " << ref[i];
  EXPECT_EQ(bad, 0) << what;
}

struct Case {
  int64_t B, H, Lq, Lk, D;
  bool gated;
  int bias_mask;  // bit 0: pair [1,H,Lq,Lk]; bit 1: mask [B,1,1,Lk]; bit 2: full [B,H,Lq,Lk]
};

AttentionInputs make_inputs(const Case& c, Generator& gen, DType dt = DType::f32) {
  AttentionInputs in;
  in.q = randn({c.B, c.H, c.Lq, c.D}, gen, 0, 1, dt);
  in.k = randn({c.B, c.H, c.Lk, c.D}, gen, 0, 1, dt);
  in.v = randn({c.B, c.H, c.Lk, c.D}, gen, 0, 1, dt);
  if (c.gated) in.gate = randn({c.B, c.H, c.Lq, c.D}, gen, 0, 1, dt);
  if (c.bias_mask & 1) in.biases.push_back(randn({1, c.H, c.Lq, c.Lk}, gen, 0, 1, dt));
  if (c.bias_mask & 2) {
    // 1e9·(mask − 1) with about a quarter of the keys masked, never all of them.
    auto m = rand_uniform({c.B, 1, 1, c.Lk}, gen).to_vector();
    for (size_t j = 0; j < m.size(); ++j) m[j] = (m[j] < 0.25f && j % c.Lk != 0) ? -1e9f : 0.f;
    in.biases.push_back(Tensor::from_vector(m, {c.B, 1, 1, c.Lk}, dt));
  }
  if (c.bias_mask & 4) in.biases.push_back(randn({c.B, c.H, c.Lq, c.Lk}, gen, 0, 0.5f, dt));
  in.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  return in;
}

TEST(AttentionCpu, ForwardMatchesNaive) {
  Generator gen(11);
  const Case cases[] = {{2, 3, 17, 33, 8, true, 7},  {1, 2, 1, 5, 4, false, 0}, {3, 2, 33, 17, 16, false, 3},
                        {2, 1, 1, 1, 3, true, 2},    {2, 4, 33, 33, 32, true, 1}, {1, 1, 17, 17, 5, false, 4}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B" << c.B << " H" << c.H << " Lq" << c.Lq << " Lk" << c.Lk << " D" << c.D);
    const AttentionInputs in = make_inputs(c, gen);
    Tensor o = Tensor::empty(in.q.shape(), DType::f32), a = Tensor::empty(in.q.shape(), DType::f32);
    Tensor lse = Tensor::empty({c.B, c.H, c.Lq}, DType::f32);
    ops::attention_forward(in, o, lse, a);
    const Naive ref = naive_attention(in);
    // fp32 accumulation over ≤ 33 keys of O(1) terms vs double: ~1e-6 relative.
    expect_near_vec(o, ref.o, 1e-5, 1e-4, "o");
    expect_near_vec(a, ref.a, 1e-5, 1e-4, "a");
    expect_near_vec(lse, ref.lse, 1e-5, 1e-5, "lse");
  }
}

TEST(AttentionCpu, StridedPermutedViews) {
  // Projections laid out [B, L, H, D] and permuted to [B, H, L, D]; outputs written the same way.
  Generator gen(12);
  const int64_t B = 2, L = 17, H = 3, D = 8;
  AttentionInputs in;
  in.q = randn({B, L, H, D}, gen).permute({0, 2, 1, 3});
  in.k = randn({B, L, H, D}, gen).permute({0, 2, 1, 3});
  in.v = randn({B, L, H, D}, gen).permute({0, 2, 1, 3});
  in.gate = randn({B, L, H, D}, gen).permute({0, 2, 1, 3});
  in.biases.push_back(randn({1, H, L, L}, gen).transpose(2, 3));  // non-contiguous bias
  in.scale = 0.3f;
  Tensor o = Tensor::zeros({B, L, H, D}, DType::f32).permute({0, 2, 1, 3});
  Tensor lse = Tensor::zeros({B, L, H}, DType::f32).permute({0, 2, 1});
  ops::attention_forward(in, o, lse, {});
  const Naive ref = naive_attention(in);
  expect_near_vec(o, ref.o, 1e-5, 1e-4, "o");
  expect_near_vec(lse, ref.lse, 1e-5, 1e-5, "lse");
}

TEST(AttentionCpu, PackedSequencesEqualSeparateRuns) {
  Generator gen(13);
  const int64_t H = 2, D = 8, L = 33;
  const std::vector<int> cu = {0, 5, 5, 22, 33};  // includes an empty segment
  AttentionInputs in;
  in.q = randn({1, H, L, D}, gen);
  in.k = randn({1, H, L, D}, gen);
  in.v = randn({1, H, L, D}, gen);
  in.gate = randn({1, H, L, D}, gen);
  in.biases.push_back(randn({1, H, L, L}, gen));
  in.cu_seqlens = Tensor::from_vector_i64(std::vector<int64_t>(cu.begin(), cu.end()), {5}, DType::i32);
  in.scale = 0.35f;
  Tensor o = Tensor::empty({1, H, L, D}, DType::f32), lse = Tensor::empty({1, H, L}, DType::f32);
  ops::attention_forward(in, o, lse, {});
  expect_near_vec(o, naive_attention(in, cu).o, 1e-5, 1e-4, "o vs naive");
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int64_t lo = cu[s], n = cu[s + 1] - cu[s];
    if (n == 0) continue;
    AttentionInputs seg;
    seg.q = in.q.narrow(2, lo, n);
    seg.k = in.k.narrow(2, lo, n);
    seg.v = in.v.narrow(2, lo, n);
    seg.gate = in.gate.narrow(2, lo, n);
    seg.biases.push_back(in.biases[0].narrow(2, lo, n).narrow(3, lo, n));
    seg.scale = in.scale;
    Tensor os = Tensor::empty({1, H, n, D}, DType::f32), ls = Tensor::empty({1, H, n}, DType::f32);
    ops::attention_forward(seg, os, ls, {});
    FC_EXPECT_CLOSE(o.narrow(2, lo, n), os, 1e-6, 1e-5);
    FC_EXPECT_CLOSE(lse.narrow(2, lo, n), ls, 1e-6, 1e-5);
  }
}

TEST(AttentionCpu, Bf16ForwardCloseToF32) {
  Generator gen(14);
  const Case c{2, 2, 17, 17, 16, true, 3};
  const AttentionInputs in = make_inputs(c, gen);
  AttentionInputs hb = in;
  hb.q = in.q.to(DType::bf16);
  hb.k = in.k.to(DType::bf16);
  hb.v = in.v.to(DType::bf16);
  hb.gate = in.gate.to(DType::bf16);
  for (auto& b : hb.biases) b = b.to(DType::bf16);
  Tensor o = Tensor::empty(in.q.shape(), DType::bf16), lse = Tensor::empty({2, 2, 17}, DType::f32);
  ops::attention_forward(hb, o, lse, {});
  // Inputs rounded to bf16 (rel. 2^-9) then the output rounded: a few e-3 relative of O(1) values.
  expect_near_vec(o, naive_attention(in).o, 2e-2, 2e-2, "bf16 o");
}

// bf16 inputs against the naive double attention of the same (bf16) values: on a CPU with AMX
// tiles the contractions run there (P·V with P split into two bf16 terms), elsewhere on fp32
// copies; either way the only loose step is the output's rounding to bf16 (2⁻⁸ relative), plus
// fp32 sums and P carried to 16 bits (far below 1e-4 at these sizes). Key counts off the 32-key
// tile edge, several query tiles, head widths 8, 20 and 32, the pair bias, mask and full bias.
TEST(AttentionCpu, Bf16ForwardEqualsTheSameValuesInDouble) {
  std::printf("AMX-BF16 tiles: %s\n", ops::cpu::amx_bf16_available() ? "yes" : "no");
  Generator gen(15);
  for (const Case c : {Case{1, 2, 70, 300, 32, true, 3}, Case{2, 1, 33, 17, 8, false, 7}, Case{1, 3, 40, 100, 20, true, 1},
                       Case{1, 1, 129, 1030, 32, false, 2}}) {
    const AttentionInputs hb = make_inputs(c, gen, DType::bf16);
    AttentionInputs in = hb;  // the same values in fp32 for the reference
    in.q = hb.q.to(DType::f32);
    in.k = hb.k.to(DType::f32);
    in.v = hb.v.to(DType::f32);
    if (hb.gate.defined()) in.gate = hb.gate.to(DType::f32);
    for (auto& b : in.biases) b = b.to(DType::f32);
    Tensor o = Tensor::empty(hb.q.shape(), DType::bf16), a = Tensor::empty(hb.q.shape(), DType::bf16);
    Tensor lse = Tensor::empty({c.B, c.H, c.Lq}, DType::f32);
    ops::attention_forward(hb, o, lse, a);
    const Naive ref = naive_attention(in);
    const double rel = std::ldexp(1.0, -8);
    expect_near_vec(o, ref.o, 1e-4, rel, "bf16 o");
    expect_near_vec(a, ref.a, 1e-4, rel, "bf16 a");
    expect_near_vec(lse, ref.lse, 1e-4, 1e-6, "bf16 lse");
  }
}

TEST(AttentionCpu, RejectsBadShapes) {
  Generator gen(15);
  AttentionInputs in = make_inputs({1, 2, 5, 7, 4, false, 0}, gen);
  Tensor o = Tensor::empty(in.q.shape(), DType::f32), lse = Tensor::empty({1, 2, 5}, DType::f32);
  in.biases.push_back(Tensor::zeros({1, 2, 5, 6}, DType::f32));
  EXPECT_THROW(ops::attention_forward(in, o, lse), Error);
  in.biases.clear();
  in.cu_seqlens = Tensor::from_vector_i64({0, 5}, {2}, DType::i32);  // Lq != Lk
  EXPECT_THROW(ops::attention_forward(in, o, lse), Error);
  in.cu_seqlens = {};
  EXPECT_THROW(ops::attention_forward(in, o, Tensor::empty({1, 2, 4}, DType::f32)), Error);
}

// Backward vs central differences of loss = Σ o ⊙ w. f32 forward, eps = 1e-2: the truncation error
// (eps² · f''' ~ 1e-4 · O(1)) and the rounding error (~1e-7 · |loss| / eps ≈ 1e-4 for |loss| ~ 10)
// are both ≲ 1e-3, so atol 3e-3 + rtol 3e-2 leaves margin while a wrong formula (O(0.1–1) errors)
// fails.
void check_backward(AttentionInputs in) {
  const Shape qs = in.q.shape();
  const int64_t B = qs[0], H = qs[1], Lq = qs[2];
  Generator gen(99);
  Tensor w = randn(qs, gen);
  Tensor o = Tensor::empty(qs, DType::f32), a = Tensor::empty(qs, DType::f32), lse = Tensor::empty({B, H, Lq}, DType::f32);
  auto loss = [&] {
    ops::attention_forward(in, o, lse, a);
    return testing::weighted_sum(o, w);
  };
  loss();
  AttentionGrads gr;
  gr.dq = Tensor::empty(qs, DType::f32);
  gr.dk = Tensor::empty(in.k.shape(), DType::f32);
  gr.dv = Tensor::empty(in.v.shape(), DType::f32);
  if (in.gate.defined()) gr.dgate = Tensor::empty(qs, DType::f32);
  for (const Tensor& b : in.biases) gr.dbias.push_back(Tensor::full(b.shape(), 0.5, DType::f32));  // += check
  ops::attention_backward(in, in.gate.defined() ? a : o, lse, w, gr);
  for (auto& db : gr.dbias) {  // remove the 0.5 it started from
    auto v = db.to_vector();
    for (float& x : v) x -= 0.5f;
    db = Tensor::from_vector(v, db.shape());
  }
  testing::check_gradient(loss, in.q, gr.dq, 1e-2, 3e-3, 3e-2);
  testing::check_gradient(loss, in.k, gr.dk, 1e-2, 3e-3, 3e-2);
  testing::check_gradient(loss, in.v, gr.dv, 1e-2, 3e-3, 3e-2);
  if (in.gate.defined()) testing::check_gradient(loss, in.gate, gr.dgate, 1e-2, 3e-3, 3e-2);
  for (size_t t = 0; t < in.biases.size(); ++t) testing::check_gradient(loss, in.biases[t], gr.dbias[t], 1e-2, 3e-3, 3e-2);
}

TEST(AttentionCpu, BackwardMatchesFiniteDifferences) {
  Generator gen(21);
  {
    SCOPED_TRACE("gated, pair + mask + full biases");
    AttentionInputs in = make_inputs({2, 2, 5, 7, 4, true, 7}, gen);
    in.biases[1] = randn({2, 1, 1, 7}, gen);  // a differentiable (non-±1e9) [B,1,1,Lk] bias
    check_backward(in);
  }
  {
    SCOPED_TRACE("ungated, [1,1,Lq,1] and [B,H,1,Lk] biases, odd sizes");
    AttentionInputs in = make_inputs({3, 2, 1, 3, 5, false, 0}, gen);
    in.biases.push_back(randn({1, 1, 1, 1}, gen));
    in.biases.push_back(randn({3, 2, 1, 3}, gen));
    check_backward(in);
  }
  {
    SCOPED_TRACE("packed sequences");
    AttentionInputs in = make_inputs({1, 2, 9, 9, 4, true, 1}, gen);
    in.cu_seqlens = Tensor::from_vector_i64({0, 4, 9}, {3}, DType::i32);
    check_backward(in);
  }
}

TEST(AttentionCpu, DbiasSharedOverBatchIsSummed) {
  // A pair bias [1,H,L,L] gets Σ_b of the full per-(b) gradient: compare with a full
  // [B,H,L,L] bias of the same values.
  Generator gen(22);
  AttentionInputs in = make_inputs({4, 2, 6, 6, 4, true, 1}, gen);
  AttentionInputs full = in;
  full.biases[0] = in.biases[0].expand({4, 2, 6, 6}).contiguous();
  Tensor w = randn(in.q.shape(), gen);
  auto grads_of = [&](const AttentionInputs& x) {
    Tensor o = Tensor::empty(x.q.shape(), DType::f32), a = Tensor::empty(x.q.shape(), DType::f32);
    Tensor lse = Tensor::empty({4, 2, 6}, DType::f32);
    ops::attention_forward(x, o, lse, a);
    AttentionGrads g;
    g.dbias.push_back(Tensor::zeros(x.biases[0].shape(), DType::f32));
    ops::attention_backward(x, a, lse, w, g);
    return g.dbias[0];
  };
  const auto shared = grads_of(in).to_vector(), per_b = grads_of(full).to_vector();
  for (int64_t e = 0; e < 2 * 6 * 6; ++e) {
    double s = 0;
    for (int b = 0; b < 4; ++b) s += per_b[b * 72 + e];
    EXPECT_NEAR(shared[e], s, 1e-5);
  }
}

// ---------------------------------------------------------------- global attention
void naive_global(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, const Tensor& g, float scale,
                  std::vector<double>& o, std::vector<double>& a) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), S = k.size(1);
  const auto qv = q.to_vector(), kv = k.to_vector(), vv = v.to_vector(), bv = bias.to_vector(), gv = g.to_vector();
  o.assign(static_cast<size_t>(B * S * H * D), 0);
  a.assign(static_cast<size_t>(B * H * D), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> s(static_cast<size_t>(S));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double(qv[(b * H + h) * D + d]) * kv[(b * S + j) * D + d];
        s[j] = scale * dot + bv[b * S + j];
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += s[j] / sum * vv[(b * S + j) * D + d];
        a[(b * H + h) * D + d] = acc;
        for (int64_t j = 0; j < S; ++j) {
          const size_t oi = static_cast<size_t>(((b * S + j) * H + h) * D + d);
          o[oi] = acc / (1.0 + std::exp(-double(gv[oi])));
        }
      }
    }
}

TEST(GlobalAttentionCpu, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  Generator gen(31);
  const int64_t B = 3, S = 7, H = 2, D = 5;
  Tensor q = randn({B, H, D}, gen), k = randn({B, S, D}, gen), v = randn({B, S, D}, gen);
  Tensor g = randn({B, S, H, D}, gen), bias = randn({B, S}, gen);
  const float scale = 0.45f;
  Tensor o = Tensor::empty({B, S, H, D}, DType::f32), a = Tensor::empty({B, H, D}, DType::f32);
  ops::global_attention_forward(q, k, v, bias, g, scale, o, a);
  std::vector<double> ro, ra;
  naive_global(q, k, v, bias, g, scale, ro, ra);
  expect_near_vec(o, ro, 1e-5, 1e-4, "o");
  expect_near_vec(a, ra, 1e-5, 1e-4, "a");

  Tensor w = randn({B, S, H, D}, gen);
  auto loss = [&] {
    ops::global_attention_forward(q, k, v, bias, g, scale, o, a);
    return testing::weighted_sum(o, w);
  };
  loss();
  Tensor dq = Tensor::empty(q.shape(), DType::f32), dk = Tensor::empty(k.shape(), DType::f32);
  Tensor dv = Tensor::empty(v.shape(), DType::f32), dg = Tensor::empty(g.shape(), DType::f32);
  ops::global_attention_backward(q, k, v, bias, g, scale, a, w, dq, dk, dv, dg);
  // Same tolerance reasoning as the fused attention backward above.
  testing::check_gradient(loss, q, dq, 1e-2, 3e-3, 3e-2);
  testing::check_gradient(loss, k, dk, 1e-2, 3e-3, 3e-2);
  testing::check_gradient(loss, v, dv, 1e-2, 3e-3, 3e-2);
  testing::check_gradient(loss, g, dg, 1e-2, 3e-3, 3e-2);
}

TEST(GlobalAttentionCpu, RejectsBadShapes) {
  Generator gen(32);
  Tensor q = randn({2, 2, 4}, gen), k = randn({2, 5, 4}, gen), v = randn({2, 5, 4}, gen), g = randn({2, 5, 2, 4}, gen);
  Tensor o = Tensor::empty({2, 5, 2, 4}, DType::f32), a = Tensor::empty({2, 2, 4}, DType::f32);
  EXPECT_THROW(ops::global_attention_forward(q, k, v, Tensor::zeros({2, 4}, DType::f32), g, 1.f, o, a), Error);
  EXPECT_THROW(ops::global_attention_forward(q, k, randn({2, 6, 4}, gen), {}, g, 1.f, o, a), Error);
}

// attention_combine: the attention over keys K₁ ∪ K₂ from the two halves' (a, lse), vs naive math
// over all keys; the halves come from attention_forward on key slices (the bias sliced alike).
AttentionInputs key_slice(const AttentionInputs& in, int64_t j0, int64_t len) {
  AttentionInputs s = in;
  s.k = in.k.narrow(2, j0, len);
  s.v = in.v.narrow(2, j0, len);
  s.gate = Tensor();
  for (Tensor& b : s.biases)
    if (b.size(3) > 1) b = b.narrow(3, j0, len);
  return s;
}

TEST(AttentionCombineCpu, SplitKeysEqualAllKeys) {
  Generator gen(51);
  const Case cases[] = {{2, 3, 17, 33, 8, false, 7}, {1, 2, 5, 2, 4, false, 2}, {3, 4, 9, 40, 16, false, 3}};
  for (const Case& c : cases)
    for (const int64_t split : {int64_t{1}, c.Lk / 2, c.Lk - 1}) {
      SCOPED_TRACE(::testing::Message() << "Lk " << c.Lk << " split " << split);
      const AttentionInputs in = make_inputs(c, gen);
      auto part = [&](int64_t j0, int64_t len) {
        const AttentionInputs s = key_slice(in, j0, len);
        std::pair<Tensor, Tensor> r{Tensor::empty(in.q.shape(), DType::f32), Tensor::empty({c.B, c.H, c.Lq}, DType::f32)};
        ops::attention_forward(s, r.first, r.second);
        return r;
      };
      auto [a, lse] = part(0, split);
      const auto [a2, lse2] = part(split, c.Lk - split);
      ops::attention_combine(a, lse, a2, lse2);
      const Naive ref = naive_attention(in);
      // Two fp32 partial results and one merge (exp, division, log) vs double over all keys:
      // a few ulps on top of the forward's ~1e-6, so the forward test's bounds hold.
      expect_near_vec(a, ref.a, 1e-5, 1e-4, "a");
      expect_near_vec(lse, ref.lse, 1e-5, 1e-5, "lse");
    }
}

TEST(AttentionCombineCpu, EmptySideIsIdentityStridedAndBf16) {
  Generator gen(52);
  const int64_t B = 2, H = 3, L = 5, D = 4;
  // Projection layout [B, L, H, D] permuted to [B, H, L, D] (what nn::Attention passes).
  const Tensor a = randn({B, L, H, D}, gen).permute({0, 2, 1, 3}), p = randn({B, L, H, D}, gen).permute({0, 2, 1, 3});
  const Tensor a0 = a.contiguous();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> lv(B * H * L, 0.5f), pv(B * H * L, -inf);
  lv[3] = -inf;  // row 3: both sides empty → unchanged
  Tensor lse = Tensor::from_vector(lv, {B, H, L}, DType::f32);
  ops::attention_combine(a, lse, p, Tensor::from_vector(pv, {B, H, L}, DType::f32));
  EXPECT_EQ(a.contiguous().to_vector(), a0.to_vector());
  EXPECT_EQ(lse.to_vector(), lv);
  // Only the part has keys: a becomes the part's output, lse the part's.
  std::vector<float> none(B * H * L, -inf), some(B * H * L, 1.25f);
  lse = Tensor::from_vector(none, {B, H, L}, DType::f32);
  ops::attention_combine(a, lse, p, Tensor::from_vector(some, {B, H, L}, DType::f32));
  EXPECT_EQ(a.contiguous().to_vector(), p.contiguous().to_vector());
  EXPECT_EQ(lse.to_vector(), some);
  // bf16: equal weights average the two outputs; the result is rounded once to bf16 (rel. 2^-8).
  const Tensor x = randn({B, H, L, D}, gen, 0, 1, DType::bf16), y = randn({B, H, L, D}, gen, 0, 1, DType::bf16);
  const auto xv = x.to_vector(), yv = y.to_vector();
  Tensor l1 = Tensor::full({B, H, L}, 0.75f, DType::f32);
  ops::attention_combine(x, l1, y, Tensor::full({B, H, L}, 0.75f, DType::f32));
  const auto got = x.to_vector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], 0.5f * (xv[i] + yv[i]), 4e-3 * (std::fabs(xv[i] + yv[i]) + 1e-3)) << i;
  for (float v : l1.to_vector()) EXPECT_NEAR(v, 0.75f + std::log(2.f), 1e-6);
}

TEST(AttentionCombineCpu, RejectsBadShapes) {
  const Tensor a = Tensor::zeros({1, 2, 3, 4}, DType::f32), lse = Tensor::zeros({1, 2, 3}, DType::f32);
  EXPECT_THROW(ops::attention_combine(a, lse, Tensor::zeros({1, 2, 3, 5}, DType::f32), lse), Error);
  EXPECT_THROW(ops::attention_combine(a, lse, a.to(DType::bf16), lse), Error);
  EXPECT_THROW(ops::attention_combine(a, Tensor::zeros({1, 2, 4}, DType::f32), a, lse), Error);
  EXPECT_THROW(ops::attention_combine(a, lse, a, lse.to(DType::bf16)), Error);
}

}  // namespace
}  // namespace foldcore
