// Input, recycling and extra-MSA embedders: feature functions against naive math, modules on
// small odd shapes against naive math, official keys, and parity with the reference where the
// fixtures capture an embedder's output (modules.npz: extra_m = the extra-MSA embedding, evo_m =
// the Evoformer's MSA input, whose first rows are input embedding + recycled first row).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/structure/residue_constants.h"
#include "models/alphafold/evoformer/embedders.h"
#include "models/af2_test_util.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

namespace rc = data::rc;

TEST(Af2Embedders, RelposOneHot) {
  // Gapped residue index; offsets beyond ±k clip to the end classes.
  const std::vector<int64_t> ri = {0, 1, 2, 10, 50};
  const int64_t k = 4, n = 5, c = 2 * k + 1;
  const auto t = relpos_one_hot(Tensor::from_vector_i64(ri, {n}), k);
  ASSERT_EQ(t.shape(), Shape({n, n, c}));
  const auto v = t.to_vector();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t cls = std::min(std::max(ri[i] - ri[j] + k, int64_t{0}), 2 * k);
      for (int64_t b = 0; b < c; ++b) EXPECT_EQ(v[(i * n + j) * c + b], b == cls ? 1.f : 0.f) << i << "," << j;
    }
  EXPECT_EQ(v[(0 * n + 0) * c + k], 1.f);      // self: the centre class
  EXPECT_EQ(v[(0 * n + 4) * c + 0], 1.f);      // 0 − 50 → clipped to class 0
  EXPECT_EQ(v[(4 * n + 0) * c + 2 * k], 1.f);  // 50 − 0 → class 2k
  // Rows 1..3 built in bf16 (as the embedder asks under bf16 autocast): the same 0/1 values.
  const auto tb = relpos_one_hot(Tensor::from_vector_i64(ri, {n}), k, 1, 3, DType::bf16);
  EXPECT_EQ(tb.dtype(), DType::bf16);
  FC_EXPECT_CLOSE(tb.to(DType::f32), t.narrow(0, 1, 3), 0, 0);
  EXPECT_THROW(relpos_one_hot(Tensor::zeros({2, 2}, DType::i64), k), Error);
}

TEST(Af2Embedders, PseudoBetaAndMask) {
  const int gly = rc::restype_order('G'), ala = rc::restype_order('A');
  ASSERT_EQ(gly, 7);
  const int ca = rc::atom_order("CA"), cb = rc::atom_order("CB");
  Generator g(5);
  Tensor pos = randn({2, 3, 37, 3}, g), mask = rand_uniform({2, 3, 37}, g);
  Tensor aa = Tensor::from_vector_i64({gly, ala, gly, ala, ala, gly}, {2, 3});
  const auto pb = pseudo_beta(aa, pos), pm = pseudo_beta_mask(aa, mask);
  ASSERT_EQ(pb.shape(), Shape({2, 3, 3}));
  ASSERT_EQ(pm.shape(), Shape({2, 3}));
  const auto pv = pos.to_vector(), mv = mask.to_vector(), bv = pb.to_vector(), bm = pm.to_vector();
  const auto aav = aa.to_vector_i64();
  for (int r = 0; r < 6; ++r) {
    const int slot = aav[r] == gly ? ca : cb;
    for (int d = 0; d < 3; ++d) EXPECT_EQ(bv[r * 3 + d], pv[(r * 37 + slot) * 3 + d]);
    EXPECT_EQ(bm[r], mv[r * 37 + slot]);
  }
  EXPECT_THROW(pseudo_beta(aa, randn({2, 3, 14, 3}, g)), Error);
}

TEST(Af2Embedders, DgramBins) {
  // Recycling bins: lower = linspace(3.25, 20.75, 15)² (step 1.25), upper = next lower, last 1e8.
  // Points along x at chosen distances from the origin point.
  const std::vector<float> d = {0.f, 3.f, 3.3f, 4.6f, 20.8f, 500.f, 3.25f + 1.25f * 7 + 0.6f};
  const int64_t n = static_cast<int64_t>(d.size());
  std::vector<float> x(static_cast<size_t>(n * 3), 0.f);
  for (int64_t i = 0; i < n; ++i) x[i * 3] = d[i];
  const auto t = dgram_from_positions(Tensor::from_vector(x, {n, 3}), 3.25f, 20.75f, 15);
  ASSERT_EQ(t.shape(), Shape({n, n, 15}));
  const auto v = t.to_vector();
  auto bin_of = [&](int64_t i, int64_t j) {
    int found = -1;
    for (int b = 0; b < 15; ++b)
      if (v[(i * n + j) * 15 + b] == 1.f) {
        EXPECT_EQ(found, -1) << "two bins set";
        found = b;
      }
    return found;
  };
  EXPECT_EQ(bin_of(0, 0), -1);  // self: below the first break
  EXPECT_EQ(bin_of(0, 1), -1);  // 3.0 Å < 3.25
  EXPECT_EQ(bin_of(0, 2), 0);   // 3.3
  EXPECT_EQ(bin_of(0, 3), 1);   // 4.6 in [4.5, 5.75)
  EXPECT_EQ(bin_of(0, 4), 14);  // beyond the last break
  EXPECT_EQ(bin_of(0, 5), 14);
  EXPECT_EQ(bin_of(0, 6), 7);
  EXPECT_EQ(bin_of(6, 0), 7);   // symmetric
  EXPECT_EQ(bin_of(2, 3), -1);  // 1.3 Å apart
  // Batched leading dims keep their own positions.
  Generator g(2);
  Tensor p2 = randn({2, 4, 3}, g, 0.f, 10.f);
  const auto b2 = dgram_from_positions(p2, 3.25f, 50.75f, 39);
  ASSERT_EQ(b2.shape(), Shape({2, 4, 4, 39}));
  FC_EXPECT_CLOSE(b2.select(0, 1), dgram_from_positions(p2.select(0, 1).contiguous(), 3.25f, 50.75f, 39), 0, 0);
}

TEST(Af2Embedders, ExtraMsaFeatLayout) {
  Tensor msa = Tensor::from_vector_i64({0, 22, 5, 21}, {2, 2});
  Tensor hd = Tensor::from_vector({1, 0, 0, 1}, {2, 2}), dv = Tensor::from_vector({0.5f, 0, 0, 0.25f}, {2, 2});
  const auto f = extra_msa_feat(msa, hd, dv);
  ASSERT_EQ(f.shape(), Shape({2, 2, 25}));
  const auto v = f.to_vector();
  const int64_t aa[] = {0, 22, 5, 21};
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 23; ++c) EXPECT_EQ(v[r * 25 + c], c == aa[r] ? 1.f : 0.f);
    EXPECT_EQ(v[r * 25 + 23], hd.to_vector()[r]);
    EXPECT_EQ(v[r * 25 + 24], dv.to_vector()[r]);
  }
  EXPECT_THROW(extra_msa_feat(Tensor::from_vector_i64({23}, {1, 1}), Tensor::zeros({1, 1}, DType::f32),
                              Tensor::zeros({1, 1}, DType::f32)),
               Error);
}

// Small config for naive checks: c_m 6, c_z 5, k = 3.
Af2Config small_config() {
  Af2Config c;
  c.c_m = 6;
  c.c_z = 5;
  c.c_e = 4;
  c.target_feat_dim = 4;
  c.msa_feat_dim = 3;
  c.max_relative_feature = 3;
  return c;
}

std::vector<double> linear_naive(const std::vector<float>& x, int64_t rows, int64_t in, const std::vector<float>& w,
                                 const std::vector<float>& b, int64_t out) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (int64_t c = 0; c < in; ++c) s += static_cast<double>(x[r * in + c]) * w[c * out + o];
      y[r * out + o] = s;
    }
  return y;
}

TEST(Af2Embedders, InputEmbedderNaive) {
  Env e;
  const Af2Config cfg = small_config();
  InputEmbedder emb(e.scope(), cfg);
  e.ps.finalize();
  e.randomize(9);
  Generator g(4);
  const int64_t n = 5, s = 3;
  Tensor tf = randn({n, 4}, g), mf = randn({s, n, 3}, g);
  Tensor ri = Tensor::from_vector_i64({3, 4, 5, 9, 20}, {n});
  const MsaPair out = emb.forward(Variable(tf), Variable(mf), ri);
  ASSERT_EQ(out.msa.shape(), Shape({s, n, 6}));
  ASSERT_EQ(out.pair.shape(), Shape({n, n, 5}));
  auto p = [&](const std::string& name) { return e.ps.get(name).value().to_vector(); };
  const auto a = linear_naive(tf.to_vector(), n, 4, p("preprocess_1d/weight"), p("preprocess_1d/bias"), 6);
  const auto m = linear_naive(mf.to_vector(), s * n, 3, p("preprocess_msa/weight"), p("preprocess_msa/bias"), 6);
  const auto l = linear_naive(tf.to_vector(), n, 4, p("left_single/weight"), p("left_single/bias"), 5);
  const auto r = linear_naive(tf.to_vector(), n, 4, p("right_single/weight"), p("right_single/bias"), 5);
  const auto rp = linear_naive(relpos_one_hot(ri, 3).to_vector(), n * n, 7, p("pair_activiations/weight"),
                               p("pair_activiations/bias"), 5);
  const auto mv = out.msa.value().to_vector(), zv = out.pair.value().to_vector();
  for (int64_t q = 0; q < s * n; ++q)
    for (int64_t c = 0; c < 6; ++c) EXPECT_NEAR(mv[q * 6 + c], m[q * 6 + c] + a[(q % n) * 6 + c], 1e-5);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < 5; ++c)
        EXPECT_NEAR(zv[(i * n + j) * 5 + c], rp[(i * n + j) * 5 + c] + l[i * 5 + c] + r[j * 5 + c], 1e-5);
  EXPECT_THROW(emb.forward(Variable(tf), Variable(randn({s, n + 1, 3}, g)), ri), Error);
}

TEST(Af2Embedders, RecyclingEmbedderNaiveAndGradient) {
  Env e;
  const Af2Config cfg = small_config();
  RecyclingEmbedder rec(e.scope(), cfg);
  e.ps.finalize();
  e.randomize(10);
  Generator g(6);
  const int64_t n = 4, s = 3;
  Tensor m1 = randn({n, 6}, g), z = randn({n, n, 5}, g), x = randn({n, 3}, g, 0.f, 6.f);
  MsaPair base{Variable(randn({s, n, 6}, g)), Variable(randn({n, n, 5}, g))};
  const MsaPair out = rec.apply(base, Variable(m1), Variable(z), x);
  auto p = [&](const std::string& name) { return e.ps.get(name).value().to_vector(); };
  auto ln = [&](const std::vector<float>& v, int64_t rows, int64_t c, const std::string& name) {
    const auto sc = p(name + "/scale"), of = p(name + "/offset");
    std::vector<double> y(v.size());
    for (int64_t q = 0; q < rows; ++q) {
      double mu = 0, var = 0;
      for (int64_t k = 0; k < c; ++k) mu += v[q * c + k] / static_cast<double>(c);
      for (int64_t k = 0; k < c; ++k) var += (v[q * c + k] - mu) * (v[q * c + k] - mu) / static_cast<double>(c);
      for (int64_t k = 0; k < c; ++k) y[q * c + k] = (v[q * c + k] - mu) / std::sqrt(var + 1e-5) * sc[k] + of[k];
    }
    return y;
  };
  const auto lm = ln(m1.to_vector(), n, 6, "prev_msa_first_row_norm");
  const auto lz = ln(z.to_vector(), n * n, 5, "prev_pair_norm");
  const auto dz = linear_naive(dgram_from_positions(x, 3.25f, 20.75f, 15).to_vector(), n * n, 15,
                               p("prev_pos_linear/weight"), p("prev_pos_linear/bias"), 5);
  const auto bm = base.msa.value().to_vector(), bz = base.pair.value().to_vector();
  const auto om = out.msa.value().to_vector(), oz = out.pair.value().to_vector();
  for (int64_t q = 0; q < s * n * 6; ++q)  // only row 0 of the MSA changes
    EXPECT_NEAR(om[q], bm[q] + (q < n * 6 ? lm[q] : 0.0), 1e-5);
  for (int64_t q = 0; q < n * n * 5; ++q) EXPECT_NEAR(oz[q], bz[q] + lz[q] + dz[q], 1e-5);

  // Gradient w.r.t. prev_m1 through the row-0 update (LayerNorm: smooth; f32 central differences
  // with eps 1e-2 have O(eps²) truncation ~1e-4 relative; tolerance 2e-3).
  Variable m1v(m1.clone(), true);
  Tensor w = randn({s, n, 6}, g);
  autograd::backward(autograd::sum(autograd::mul(rec.apply(base, m1v, Variable(z), x).msa, Variable(w)), {0, 1, 2}));
  testing::check_gradient(
      [&] {
        autograd::NoGradGuard ng;
        return testing::weighted_sum(rec.apply(base, Variable(m1v.value()), Variable(z), x).msa.value(), w);
      },
      m1v.value(), m1v.grad(), 1e-2, 2e-3, 2e-3);
}

// Parity tolerance for the embedders: a few fp32 GEMMs with K ≤ 65 plus a LayerNorm; rounding
// differs from the reference by summation order only (~1e-6 of the scale). atol 1e-5·max|ref|
// plus rtol 1e-4 keeps a ≥ 10× margin.
void expect_parity(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  FC_EXPECT_CLOSE(got, want, 1e-5 * max_abs(want), 1e-4);
  std::printf("max|diff| %.3g, max|ref| %.3g\n", testing::all_close(got, want, 0, 0).max_abs, max_abs(want));
}

TEST(Af2Embedders, ParityWithReferenceInputs) {
  Env e;
  const Af2Config cfg;  // full widths, as the reference
  InputEmbedder input(e.scope("input"), cfg);
  RecyclingEmbedder recycling(e.scope("recycling"), cfg);
  ExtraMsaEmbedder extra(e.scope("extra"), cfg);
  e.ps.finalize();
  Af2ParamTable table;
  input.add_af2_params(table, "evoformer");
  recycling.add_af2_params(table, "evoformer");
  extra.add_af2_params(table, "evoformer");
  EXPECT_EQ(table.size(), 18u);
  EXPECT_EQ(load_af2_params(table, testing::shared_dir() + "/af2/ref/params.npz", {.allow_unused = true}), 18u);

  autograd::NoGradGuard ng;
  const int64_t r = 1;  // modules.npz captures the final iteration
  // Extra-MSA embedding = the extra-MSA stack's input.
  const Tensor ef =
      extra_msa_feat(feat("extra_msa", r), feat("extra_has_deletion", r), feat("extra_deletion_value", r));
  expect_parity(extra.forward(Variable(ef)).value(), ref("modules", "extra_m"));

  // Evoformer MSA input rows [0, S): input embedding with the recycled first row of iteration 0.
  MsaPair m = input.forward(Variable(feat("target_feat", r)), Variable(feat("msa_feat", r)), feat("residue_index", r));
  const Tensor prev_m1 = ref("outputs", "recycle_m1").select(0, r - 1).contiguous();
  const Tensor prev_z = ref("outputs", "recycle_z").select(0, r - 1).contiguous();
  const Tensor prev_x = ref("outputs", "recycle_x").select(0, r - 1).contiguous();
  m = recycling.apply(m, Variable(prev_m1), Variable(prev_z), pseudo_beta(feat("aatype", r), prev_x));
  const int64_t s = m.msa.size(0);
  expect_parity(m.msa.value(), ref("modules", "evo_m").narrow(0, 0, s).contiguous());
}

// The chunked inference embedding (alphafold_trunk.cpp) builds the pair from row ranges: the rows
// of relpos/dgram, of the input embedder's pair and of the recycling update must equal the same
// rows of the whole computation bit for bit (same ops, same order; a GEMM row does not depend on
// the other rows), for prev_z given and for the first iteration's zeros.
TEST(Af2Embedders, PairRowRangesEqualWholeBitForBit) {
  Env e;
  const Af2Config cfg = small_config();
  InputEmbedder emb(e.scope("in"), cfg);
  RecyclingEmbedder rec(e.scope("rec"), cfg);
  e.ps.finalize();
  e.randomize(11);
  Generator g(7);
  const int64_t n = 7;
  const Tensor tf = randn({n, 4}, g), mf = randn({2, n, 3}, g), z = randn({n, n, 5}, g);
  const Tensor x = randn({n, 3}, g, 0.f, 6.f), m1 = randn({n, 6}, g);
  const Tensor ri = Tensor::from_vector_i64({0, 1, 2, 5, 6, 30, 31}, {n});
  const MsaPair whole = emb.forward(Variable(tf), Variable(mf), ri);
  const Tensor upd = rec.forward(Variable(m1), Variable(z), x).pair.value();
  const Tensor upd0 = rec.forward(Variable(m1), Variable(Tensor::zeros({n, n, 5}, DType::f32)), x).pair.value();
  for (const auto& [r0, rows] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 3}, {6, 1}}) {
    FC_EXPECT_CLOSE(relpos_one_hot(ri, 3, r0, rows), relpos_one_hot(ri, 3).narrow(0, r0, rows), 0, 0);
    FC_EXPECT_CLOSE(dgram_from_positions(x, 3.25f, 20.75f, 15, r0, rows),
                    dgram_from_positions(x, 3.25f, 20.75f, 15).narrow(0, r0, rows), 0, 0);
    FC_EXPECT_CLOSE(emb.pair_rows(Variable(tf), ri, r0, rows).value(), whole.pair.value().narrow(0, r0, rows), 0, 0);
    FC_EXPECT_CLOSE(rec.pair_update_rows(Variable(z), x, r0, rows).value(), upd.narrow(0, r0, rows), 0, 0);
    FC_EXPECT_CLOSE(rec.pair_update_rows(Variable(), x, r0, rows).value(), upd0.narrow(0, r0, rows), 0, 0);
  }
  FC_EXPECT_CLOSE(emb.msa(Variable(tf), Variable(mf)).value(), whole.msa.value(), 0, 0);
  EXPECT_THROW(relpos_one_hot(ri, 3, 5, 3), Error);
  EXPECT_THROW(rec.pair_update_rows(Variable(z), x, 6, 2), Error);
}

}  // namespace
}  // namespace foldcore::af2
