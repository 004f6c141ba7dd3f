// Evoformer parity against the OpenFold-generated fixtures (../shared/af2/ref: params.npz in the
// official AlphaFold2 layout, modules.npz with Evoformer block 0 / extra-MSA block 0 dumps), plus
// parameter binding, chunking and gradient checks.
//
// Tolerance: |ours − ref| ≤ kTol·max|ref| per array. Both sides are fp32 implementations of the same
// math with different summation orders (OpenBLAS vs PyTorch GEMMs, our attention kernel vs
// softmax(QKᵀ)V): one module's rounding error is O(√K·2⁻²⁴·|x|) ≈ 1e-6 relative for K ≤ 1024, a
// few-fold more after the layer norms amplify small differences; the fixture's own standalone vs
// in-model agreement is 3e-6 (absolute, on O(10) arrays). Measured here: ≤ 7e-7 relative on every
// array. 5e-6 relative leaves ~7× margin for other BLAS builds / CPUs and still fails on any
// convention error (a missing 1e-3, a transposed incoming product, an unscaled query, a missing
// output bias: all ≥ 1e-2 relative).
#include <gtest/gtest.h>

#include <optional>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>

#include "autograd/autograd.h"
#include "core/profile.h"
#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/evoformer/evoformer.h"
#include "evoformer_test_util.h"
#include "test_util.h"
#include "../autograd/grad_check.h"

namespace foldcore::af2 {
namespace {

using autograd::Variable;
constexpr double kTol = 5e-6;

std::string ref_path(const std::string& f) { return testing::shared_dir() + "/af2/ref/" + f; }

// |a − ref| ≤ tol·max|ref| everywhere; reports the relative max error.
void expect_parity(const Tensor& got, const Tensor& ref, const std::string& what, double tol = kTol) {
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  const std::vector<float> a = got.contiguous().to_vector(), b = ref.to_vector();
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_ref = std::max(max_ref, static_cast<double>(std::abs(b[i])));
    const double e = std::abs(static_cast<double>(a[i]) - b[i]);
    max_err = std::isnan(e) ? INFINITY : std::max(max_err, e);
  }
  const double rel = max_err / std::max(max_ref, 1e-30);
  EXPECT_LE(rel, tol) << what << ": max|err| " << max_err << " = " << rel << "·max|ref| (" << max_ref << ")";
  std::printf("[parity] %-28s max|err|/max|ref| = %.3g\n", what.c_str(), rel);
}

// The reference model: the main stack (2 blocks in params.npz) and the extra-MSA stack (1 block),
// loaded once for the suite through the official key table.
struct RefModel {
  autograd::ParamStore ps;
  Generator init{7};
  Af2Config cfg;
  std::unique_ptr<EvoformerStack> evo, extra;
  std::map<std::string, Tensor> ref;
  size_t table_size = 0, loaded = 0;

  RefModel() {
    nn::Scope scope{&ps, &init, nullptr, ""};
    evo = std::make_unique<EvoformerStack>(scope.child("evoformer"), cfg.evoformer, 2);
    extra = std::make_unique<EvoformerStack>(scope.child("extra_msa_stack"), cfg.extra_msa, 1);
    evo->train(false);
    extra->train(false);
    ps.finalize();
    Af2ParamTable table;
    evo->add_af2_params(table, "evoformer/evoformer_iteration");
    extra->add_af2_params(table, "evoformer/extra_msa_stack");
    table_size = table.size();
    loaded = load_af2_params(table, ref_path("params.npz"), {.allow_unused = true});
    data::NpzReader npz(ref_path("modules.npz"));
    for (const std::string& n : npz.names())
      if (n != "_checks_json") ref[n] = npz.read(n).to_tensor();
  }
  const Tensor& r(const std::string& k) const {
    auto it = ref.find(k);
    if (it == ref.end()) FC_THROW("modules.npz has no '", k, "'");
    return it->second;
  }
  Variable v(const std::string& k) const { return Variable(r(k)); }
  const EvoformerBlock& block0() const { return evo->block(0); }
};

const RefModel& model() {
  static const RefModel m;
  return m;
}

TEST(Af2Evoformer, ParamsBindEveryOfficialArray) {
  const RefModel& m = model();
  // Every parameter of both stacks is bound to exactly one official key (stacked arrays once per
  // block: one table entry per parameter) ...
  EXPECT_EQ(m.table_size, m.evo->named_parameters().size() + m.extra->named_parameters().size());
  // ... and every official array of the two stacks in the file is claimed (93 per stack).
  size_t official = 0;
  const data::NpzReader npz(ref_path("params.npz"));
  for (const std::string& n : npz.names())
    official += n.rfind(kAf2Prefix + "evoformer/evoformer_iteration/", 0) == 0 ||
                n.rfind(kAf2Prefix + "evoformer/extra_msa_stack/", 0) == 0;
  EXPECT_EQ(official, 186u);
  EXPECT_EQ(m.loaded, official);
}

TEST(Af2Evoformer, LadderMsaRowAttention) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Variable u = m.block0().msa_row_attention().forward(m.v("evo_m"), m.v("evo_z"), m.r("evo_msa_mask"));
  expect_parity(u.value(), m.r("evo_row_att_update"), "evo_row_att_update");
}

TEST(Af2Evoformer, LadderMsaColumnAttention) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Variable u = m.block0().msa_column_update(m.v("evo_m1"), m.r("evo_msa_mask"));
  expect_parity(u.value(), m.r("evo_col_att_update"), "evo_col_att_update");
}

TEST(Af2Evoformer, LadderMsaTransition) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Variable u = transition_forward(m.block0().msa_transition(), m.v("evo_m2"), 0);
  expect_parity(u.value(), m.r("evo_msa_transition_update"), "evo_msa_transition_update");
}

TEST(Af2Evoformer, LadderOuterProductMean) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Variable u = m.block0().outer_product_mean().forward(m.v("evo_m3"), m.r("evo_msa_mask"));
  expect_parity(u.value(), m.r("evo_opm_update"), "evo_opm_update");
}

TEST(Af2Evoformer, LadderTriangleMultiplication) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Tensor& pm = m.r("evo_pair_mask");
  expect_parity(m.block0().triangle_multiplication_outgoing().forward(m.v("evo_z1"), pm).value(),
                m.r("evo_tri_mul_out_update"), "evo_tri_mul_out_update");
  expect_parity(m.block0().triangle_multiplication_incoming().forward(m.v("evo_z2"), pm).value(),
                m.r("evo_tri_mul_in_update"), "evo_tri_mul_in_update");
  // Standalone dumps (update before the residual add).
  expect_parity(
      m.block0().triangle_multiplication_outgoing().forward(m.v("trimul_out_z"), m.r("trimul_out_mask")).value(),
      m.r("trimul_out_update"), "trimul_out_update");
  expect_parity(
      m.block0().triangle_multiplication_incoming().forward(m.v("trimul_in_z"), m.r("trimul_in_mask")).value(),
      m.r("trimul_in_update"), "trimul_in_update");
}

TEST(Af2Evoformer, LadderTriangleAttention) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Tensor& pm = m.r("evo_pair_mask");
  expect_parity(m.block0().triangle_attention_starting_node().forward(m.v("evo_z3"), pm).value(),
                m.r("evo_tri_att_start_update"), "evo_tri_att_start_update");
  expect_parity(m.block0().triangle_attention_ending_node().forward(m.v("evo_z4"), pm).value(),
                m.r("evo_tri_att_end_update"), "evo_tri_att_end_update");
}

TEST(Af2Evoformer, LadderPairTransition) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Variable u = transition_forward(m.block0().pair_transition(), m.v("evo_z5"), 0);
  expect_parity(u.value(), m.r("evo_pair_transition_update"), "evo_pair_transition_update");
}

TEST(Af2Evoformer, WholeBlock0) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Tensor m_in = m.r("evo_m").clone(), z_in = m.r("evo_z").clone();
  const auto [mo, zo] = m.block0().forward(Variable(m_in), Variable(z_in), m.r("evo_msa_mask"), m.r("evo_pair_mask"));
  expect_parity(mo.value(), m.r("evo_m_out"), "evo_m_out");
  expect_parity(zo.value(), m.r("evo_z_out"), "evo_z_out");
  // The inputs are not overwritten by the in-place residual adds.
  EXPECT_EQ(m_in.to_vector(), m.r("evo_m").to_vector());
  EXPECT_EQ(z_in.to_vector(), m.r("evo_z").to_vector());
}

TEST(Af2Evoformer, ExtraMsaBlock0) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const auto [mo, zo] = m.extra->forward(m.v("extra_m"), m.v("extra_z"), m.r("extra_msa_mask"), m.r("extra_pair_mask"));
  expect_parity(mo.value(), m.r("extra_m_out"), "extra_m_out");
  expect_parity(zo.value(), m.r("extra_z_out"), "extra_z_out");
}

// Chunked inference (rows/columns of the attention modules, transitions, outer product mean) gives
// the whole-axis result. Chunks of 7 and 5 divide none of the axes (S 32/64, N 40), so the last
// chunk is ragged. Tolerance 2e-6·max|ref| (measured: 0 for the main block, ≤ 5e-7 for the extra
// block, whose global attention batches its GEMMs differently): every slice runs the same kernels
// on the same data, but a GEMM over fewer rows may take a different OpenBLAS kernel path (a
// different summation order: ~1e-7 relative).
TEST(Af2Evoformer, ChunkedEqualsWhole) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const auto [m0, z0] = m.block0().forward(m.v("evo_m"), m.v("evo_z"), m.r("evo_msa_mask"), m.r("evo_pair_mask"));
  const auto [m1, z1] =
      m.block0().forward(m.v("evo_m"), m.v("evo_z"), m.r("evo_msa_mask"), m.r("evo_pair_mask"), /*chunk=*/7);
  expect_parity(m1.value(), m0.value(), "evo_m_out chunk 7", 2e-6);
  expect_parity(z1.value(), z0.value(), "evo_z_out chunk 7", 2e-6);
  const auto [e0, f0] = m.extra->forward(m.v("extra_m"), m.v("extra_z"), m.r("extra_msa_mask"), m.r("extra_pair_mask"));
  const auto [e1, f1] =
      m.extra->forward(m.v("extra_m"), m.v("extra_z"), m.r("extra_msa_mask"), m.r("extra_pair_mask"), 5);
  expect_parity(e1.value(), e0.value(), "extra_m_out chunk 5", 2e-6);
  expect_parity(f1.value(), f0.value(), "extra_z_out chunk 5", 2e-6);
  // And each chunked module against the fixture.
  expect_parity(m.block0().outer_product_mean().forward(m.v("evo_m3"), m.r("evo_msa_mask"), 3).value(),
                m.r("evo_opm_update"), "evo_opm_update chunk 3");
  expect_parity(m.block0().triangle_attention_ending_node().forward(m.v("evo_z4"), m.r("evo_pair_mask"), 6).value(),
                m.r("evo_tri_att_end_update"), "evo_tri_att_end_update chunk 6");
}

// The stack (with its in-place residual adds on its own intermediates) equals the blocks applied one
// by one through the public forward, bit for bit, and leaves its inputs untouched.
TEST(Af2Evoformer, StackEqualsBlocksInSequence) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Tensor mask = m.r("evo_msa_mask"), pmask = m.r("evo_pair_mask");
  const auto [m1, z1] = m.evo->block(0).forward(m.v("evo_m"), m.v("evo_z"), mask, pmask);
  const auto [m2, z2] = m.evo->block(1).forward(m1, z1, mask, pmask);
  const auto [ms, zs] = m.evo->forward(m.v("evo_m"), m.v("evo_z"), mask, pmask);
  EXPECT_EQ(ms.value().to_vector(), m2.value().to_vector());
  EXPECT_EQ(zs.value().to_vector(), z2.value().to_vector());
  expect_parity(m.v("evo_m").value(), data::NpzReader(ref_path("modules.npz")).read("evo_m").to_tensor(),
                "evo_m untouched", 0.0);
}

// Random non-trivial parameters (gating/final layers are zero-initialised), scaled by 0.4 to keep
// activations O(1).
void randomize_params(autograd::ParamStore& ps, Generator& gen) {
  Tensor values = ps.values();  // shares the flat buffer
  std::vector<float> v = randn(values.shape(), gen).to_vector();
  for (float& x : v) x *= 0.4f;
  values.copy_(Tensor::from_vector(v, values.shape()));
}

// A small block (eval mode; training mode with dropout masks from `rng` where one is given) with
// random parameters and inputs m [3, 5, c_m], z [5, 5, c_z], drawn from `gen` after the parameters;
// the MSA mask is 0 at the flat indices `msa_zeros`, the pair mask at 3 and 11.
struct SmallBlock {
  EvoformerBlockConfig c;
  autograd::ParamStore ps;
  Generator init, gen;
  EvoformerBlock block;
  Tensor m, z, msa_mask, pair_mask;
  SmallBlock(const EvoformerBlockConfig& cfg, uint64_t init_seed, uint64_t gen_seed, const std::vector<int>& msa_zeros,
             Generator* rng = nullptr)
      : c(cfg), init(init_seed), gen(gen_seed), block(nn::Scope{&ps, &init, rng, "block"}, c) {
    block.train(rng != nullptr);
    ps.finalize();
    randomize_params(ps, gen);
    const int64_t s = 3, n = 5;
    m = randn({s, n, c.c_m}, gen);
    z = randn({n, n, c.c_z}, gen);
    std::vector<float> mm(static_cast<size_t>(s * n), 1.f), pm(static_cast<size_t>(n * n), 1.f);
    for (int i : msa_zeros) mm[static_cast<size_t>(i)] = 0.f;
    pm[3] = pm[11] = 0.f;
    msa_mask = Tensor::from_vector(mm, {s, n});
    pair_mask = Tensor::from_vector(pm, {n, n});
  }
};

// A small block (odd sizes, both column-attention kinds, a mask with zeros, random non-trivial
// parameters) backpropagates correctly: analytic gradients of the inputs and of the parameters
// (the flat ParamStore buffer, 64 sampled coordinates) against f32 central differences.
// Tolerance (tests/autograd/grad_check.h rationale): eps 1e-2 gives O(1e-4) rounding and
// truncation error on O(1) outputs; atol 3e-3 + rtol 3e-2 is an order of magnitude above that
// and far below any missing or wrong term.
void check_block_gradients(bool global_column) {
  EvoformerBlockConfig cfg = small_block_config();
  cfg.global_column_attention = global_column;
  SmallBlock sb(cfg, 3, 11, {4, 7});
  autograd::ParamStore& ps = sb.ps;
  Generator& gen = sb.gen;
  const EvoformerBlock& block = sb.block;
  const Tensor &m = sb.m, &z = sb.z, &msa_mask = sb.msa_mask, &pair_mask = sb.pair_mask;
  auto f = [&](const std::vector<Variable>& in) {
    const auto [mo, zo] = block.forward(in[0], in[1], msa_mask, pair_mask);
    return autograd::concat({autograd::reshape(mo, {mo.numel()}), autograd::reshape(zo, {zo.numel()})}, 0);
  };
  autograd::testing::expect_grads_match_fd(f, {m, z});
  // Parameters.
  ps.zero_grad();
  Variable out = f({Variable(m), Variable(z)});
  const Tensor w = randn(out.shape(), gen);
  autograd::backward({out}, {w});
  testing::check_gradient(
      [&] {
        autograd::NoGradGuard ng;
        return testing::weighted_sum(f({Variable(m), Variable(z)}).value(), w);
      },
      ps.values(), ps.grads(), 1e-2, 3e-3, 3e-2, 64);
}

// With FOLDCORE_PROFILE=1 each module of a block's forward with gradients (training's forward and
// the recomputed forward inside the backward) is a stage of its own, as in the chunked no-grad
// path: where a training step's forward goes, module by module.
TEST(Af2Evoformer, GradForwardModulesAreProfileStages) {
  const profile::EnabledGuard profiling;
  ASSERT_TRUE(profile::enabled());
  const EvoformerBlockConfig c = small_block_config();
  autograd::ParamStore ps;
  Generator init{3}, gen{11};
  EvoformerBlock block(nn::Scope{&ps, &init, nullptr, "block"}, c);
  block.train(false);
  ps.finalize();
  const Tensor m = randn({3, 5, c.c_m}, gen), z = randn({5, 5, c.c_z}, gen);
  const Tensor msa_mask = Tensor::full({3, 5}, 1.0, DType::f32), pair_mask = Tensor::full({5, 5}, 1.0, DType::f32);
  profile::reset();
  {
    const profile::Scope stage("forward", Device::cpu());
    const auto [mo, zo] = block.forward(Variable(m, true), Variable(z, true), msa_mask, pair_mask);
    EXPECT_TRUE(mo.requires_grad() && zo.requires_grad());
  }
  std::vector<std::string> paths;
  for (const profile::Stage& st : profile::report()) paths.push_back(st.path);
  for (const char* module : {"msa_row_attention", "msa_column_attention", "msa_transition", "outer_product_mean",
                             "triangle_multiplication_outgoing", "triangle_multiplication_incoming",
                             "triangle_attention_starting_node", "triangle_attention_ending_node", "pair_transition"}) {
    const std::string path = std::string("forward/") + module;
    EXPECT_NE(std::find(paths.begin(), paths.end(), path), paths.end()) << path;
  }
  profile::reset();
}

// In training (dropout on: a block's forward with gradients, and a recomputed block's first,
// no-grad forward) each residual add makes the next module's input LayerNorm in the same pass
// (stream_residual_norm). The block's outputs, in both modes, and every gradient are bit for bit
// those of the LayerNorms made apart in the modules (set_residual_norm_fused(false)), fp32 and under
// bf16 autocast, with either column attention; the same dropout masks (the generator re-seeded).
TEST(Af2Evoformer, ResidualLayerNormsFusedGiveTheSameBlock) {
  for (const bool global_column : {false, true})
    for (const DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(global_column ? "global" : "plain") + " column attention, " +
                   std::string(dtype_name(dt)));
      EvoformerBlockConfig cfg = small_block_config();
      cfg.global_column_attention = global_column;
      cfg.msa_row.dropout = 0.15f;
      cfg.tri_mul_dropout = 0.25f;
      cfg.tri_att.dropout = 0.25f;
      Generator rng(21);
      SmallBlock sb(cfg, 3, 11, {4, 7}, &rng);
      const Tensor wm = randn(sb.m.shape(), sb.gen), wz = randn(sb.z.shape(), sb.gen);
      auto run = [&](bool fused) {
        set_residual_norm_fused(fused);
        std::optional<autograd::AutocastGuard> ac;
        if (dt != DType::f32) ac.emplace(dt);
        std::vector<Tensor> out;
        {
          const autograd::NoGradGuard no_grad;
          rng = Generator(5);
          const auto [mo, zo] = sb.block.forward(Variable(sb.m), Variable(sb.z), sb.msa_mask, sb.pair_mask);
          out = {mo.value(), zo.value()};
        }
        rng = Generator(5);
        sb.ps.zero_grad();
        const Variable m(sb.m, true), z(sb.z, true);
        const auto [mo, zo] = sb.block.forward(m, z, sb.msa_mask, sb.pair_mask);
        autograd::backward({mo, zo}, {wm.to(mo.dtype()), wz.to(zo.dtype())});
        for (const Tensor& t : {mo.value(), zo.value(), m.grad(), z.grad(), sb.ps.grads()}) out.push_back(t.clone());
        return out;
      };
      const std::vector<Tensor> fused = run(true), apart = run(false);
      set_residual_norm_fused(true);
      ASSERT_EQ(fused.size(), apart.size());
      for (size_t i = 0; i < fused.size(); ++i) {
        SCOPED_TRACE(i);
        FC_EXPECT_CLOSE(fused[i].to(DType::f32), apart[i].to(DType::f32), 0, 0);
      }
    }
}

TEST(Af2Evoformer, BlockGradientsMatchFiniteDifferences) { check_block_gradients(false); }
TEST(Af2Evoformer, ExtraBlockGradientsMatchFiniteDifferences) { check_block_gradients(true); }

// Alg. 19 against a naive double-precision transcription of AlphaFold's GlobalAttention, with a mask
// that has zeros and one fully masked column (the fixtures' extra-MSA mask is all ones): the query
// is the mask-weighted mean Σ_s mask·x / (Σ_s mask + 1e-10), keys/values [S, d] are shared by the
// heads, the gates are per sequence. Tolerance 1e-5·max|ref|: fp32 vs fp64 of sums over ≤ 16 terms.
TEST(Af2Evoformer, GlobalColumnAttentionMatchesNaive) {
  const int64_t s = 5, n = 3, c = 8, h = 2, d = 3;
  autograd::ParamStore ps;
  Generator init{4}, gen{9};
  MsaColumnGlobalAttention att(nn::Scope{&ps, &init, nullptr, "g"}, c, AttentionConfig{h, d, true, 0.f});
  ps.finalize();
  Tensor values = ps.values();
  values.copy_(randn(values.shape(), gen));
  const Tensor m = randn({s, n, c}, gen);
  std::vector<float> mask(static_cast<size_t>(s * n), 1.f);
  mask[0 * n + 0] = mask[3 * n + 0] = 0.f;                    // column 0: two sequences masked
  for (int64_t i = 0; i < s; ++i) mask[static_cast<size_t>(i * n + 2)] = 0.f;  // column 2: all masked
  autograd::NoGradGuard ng;
  const Tensor got = att.forward(Variable(m), Tensor::from_vector(mask, {s, n})).value().contiguous();

  auto P = [&](const std::string& k) { return module_param(att, k).to_vector(); };
  const auto ln_s = P("query_norm/scale"), ln_o = P("query_norm/offset"), wq = P("attention/q/weight"),
             wk = P("attention/k/weight"), wv = P("attention/v/weight"), wg = P("attention/gate/weight"),
             bg = P("attention/gate/bias"), wo = P("attention/output/weight"), bo = P("attention/output/bias");
  const std::vector<float> mv = m.to_vector();
  std::vector<float> want(static_cast<size_t>(s * n * c));
  for (int64_t col = 0; col < n; ++col) {
    std::vector<std::vector<double>> x(static_cast<size_t>(s), std::vector<double>(static_cast<size_t>(c)));
    auto mval = [&](int64_t i, int64_t k) { return double(mv[static_cast<size_t>((i * n + col) * c + k)]); };
    for (int64_t i = 0; i < s; ++i) {  // LayerNorm, eps 1e-5
      double mu = 0, var = 0;
      for (int64_t k = 0; k < c; ++k) mu += mval(i, k) / double(c);
      for (int64_t k = 0; k < c; ++k) var += (mval(i, k) - mu) * (mval(i, k) - mu) / double(c);
      for (int64_t k = 0; k < c; ++k) x[i][k] = (mval(i, k) - mu) / std::sqrt(var + 1e-5) * ln_s[k] + ln_o[k];
    }
    double msum = 0;
    std::vector<double> qa(static_cast<size_t>(c), 0.0);
    for (int64_t i = 0; i < s; ++i) msum += mask[static_cast<size_t>(i * n + col)];
    for (int64_t i = 0; i < s; ++i)
      for (int64_t k = 0; k < c; ++k) qa[k] += mask[static_cast<size_t>(i * n + col)] * x[i][k] / (msum + 1e-10);
    std::vector<double> o(static_cast<size_t>(h * d), 0.0);
    for (int64_t hh = 0; hh < h; ++hh) {
      std::vector<double> logit(static_cast<size_t>(s));
      double mx = -1e300;
      for (int64_t j = 0; j < s; ++j) {
        double l = 0;
        for (int64_t dd = 0; dd < d; ++dd) {
          double q = 0, kk = 0;
          for (int64_t k = 0; k < c; ++k) q += qa[k] * wq[static_cast<size_t>(k * h * d + hh * d + dd)];
          for (int64_t k = 0; k < c; ++k) kk += x[j][k] * wk[static_cast<size_t>(k * d + dd)];
          l += q / std::sqrt(double(d)) * kk;
        }
        logit[j] = l + 1e9 * (mask[static_cast<size_t>(j * n + col)] - 1.0);
        mx = std::max(mx, logit[j]);
      }
      double z = 0;
      for (double& l : logit) z += (l = std::exp(l - mx));
      for (int64_t j = 0; j < s; ++j)
        for (int64_t dd = 0; dd < d; ++dd) {
          double v = 0;
          for (int64_t k = 0; k < c; ++k) v += x[j][k] * wv[static_cast<size_t>(k * d + dd)];
          o[hh * d + dd] += logit[j] / z * v;
        }
    }
    for (int64_t i = 0; i < s; ++i)
      for (int64_t out = 0; out < c; ++out) {
        double acc = bo[out];
        for (int64_t hd = 0; hd < h * d; ++hd) {
          double g = bg[hd];
          for (int64_t k = 0; k < c; ++k) g += x[i][k] * wg[static_cast<size_t>(k * h * d + hd)];
          acc += o[hd] / (1 + std::exp(-g)) * wo[static_cast<size_t>(hd * c + out)];
        }
        want[static_cast<size_t>((i * n + col) * c + out)] = static_cast<float>(acc);
      }
  }
  expect_parity(got, Tensor::from_vector(want, {s, n, c}), "global attention vs naive", 1e-5);
}

// Derived masks: made once per DerivedMaskScope (keyed by the source view and the name), made
// every time outside one, dropped when the outermost scope ends; a block's forward and backward
// inside a scope (which takes its key biases, transposed masks and the outer product mean's
// normaliser from the cache) give the same bits as without one.
TEST(Af2Evoformer, DerivedMasksAreMadeOncePerScopeWithTheSameResults) {
  const Tensor mask = Tensor::from_vector({1.f, 0.f, 1.f, 1.f, 1.f, 0.f}, {2, 3});
  int made = 0;
  auto make = [&] {
    ++made;
    return mask.transpose(0, 1).contiguous();
  };
  derived_mask(mask, "t", make);
  derived_mask(mask, "t", make);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(derived_mask_count(), 0u);
  {
    const DerivedMaskScope outer;
    const Tensor a = derived_mask(mask, "t", make);
    {
      const DerivedMaskScope inner;  // shares the outer scope's entries
      EXPECT_EQ(derived_mask(mask, "t", make).data_ptr(), a.data_ptr());
    }
    EXPECT_EQ(derived_mask(mask, "t", make).data_ptr(), a.data_ptr());
    derived_mask(mask, "other", make);                    // another name
    derived_mask(mask.narrow(1, 0, 2), "t", make);        // another view of the same storage
    EXPECT_EQ(made, 5);
    EXPECT_EQ(derived_mask_count(), 3u);
    EXPECT_EQ(transposed_mask(mask).to_vector(), mask.transpose(0, 1).contiguous().to_vector());
  }
  EXPECT_EQ(derived_mask_count(), 0u);

  SmallBlock sb(small_block_config(), 5, 12, {4});
  autograd::ParamStore& ps = sb.ps;
  const EvoformerBlock& block = sb.block;
  const Tensor &m = sb.m, &z = sb.z, &msa_mask = sb.msa_mask, &pair_mask = sb.pair_mask;
  auto run = [&](bool scoped) {
    std::optional<DerivedMaskScope> scope;
    if (scoped) scope.emplace();
    ps.zero_grad();
    Variable vm(m.clone(), true), vz(z.clone(), true);
    const auto [mo, zo] = block.forward(vm, vz, msa_mask, pair_mask);
    if (scoped) {
      EXPECT_GE(derived_mask_count(), 4u);  // key biases, transposed masks, the normaliser
    }
    autograd::backward({mo, zo}, {Tensor::full(mo.shape(), 0.5, DType::f32), Tensor::full(zo.shape(), -0.25, DType::f32)});
    return std::vector<std::vector<float>>{mo.value().to_vector(), zo.value().to_vector(), vm.grad().to_vector(),
                                           vz.grad().to_vector(), ps.grads().to_vector()};
  };
  EXPECT_EQ(run(true), run(false));
}

TEST(Af2Evoformer, BadInputsAndUnfinalizedStore) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Tensor mask = m.r("evo_msa_mask"), pmask = m.r("evo_pair_mask");
  const Variable msa = m.v("evo_m"), pair = m.v("evo_z");
  EXPECT_THROW(m.block0().forward(pair, pair, mask, pmask), Error);              // c_z where c_m belongs
  EXPECT_THROW(m.block0().msa_row_attention().forward(msa, pair, pmask), Error);  // mask [N, N] for [S, N]
  EXPECT_THROW(m.block0().outer_product_mean().forward(msa, pmask), Error);
  EXPECT_THROW(m.block0().triangle_multiplication_outgoing().forward(pair, mask), Error);
  EXPECT_THROW(m.block0().triangle_attention_starting_node().forward(msa, pmask), Error);
  autograd::ParamStore ps;
  Generator init{1};
  TriangleMultiplication tm(nn::Scope{&ps, &init, nullptr, "t"}, 6, 4, true);
  Af2ParamTable t;
  EXPECT_THROW(tm.add_af2_params(t, "x"), Error);  // before finalize(): no views to bind
  ps.finalize();
  tm.add_af2_params(t, "x");
  EXPECT_EQ(t.size(), 16u);
  EXPECT_EQ(t.entries()[0].key, kAf2Prefix + "x/layer_norm_input//scale");
}

// A module's normalised input (the preceding residual add's LayerNorm, stream_residual_norm) is
// checked the same way in each module that takes one: of its stream's shape, and only where the
// module runs unchunked. Each error names the module.
TEST(Af2Evoformer, NormalisedInputsOfAnotherShapeOrChunkedAreErrors) {
  const RefModel& m = model();
  autograd::NoGradGuard ng;
  const Tensor mask = m.r("evo_msa_mask"), pmask = m.r("evo_pair_mask");
  const Variable msa = m.v("evo_m"), pair = m.v("evo_z");
  const Variable wrong(Tensor::zeros({2, 3, 4}, DType::f32));
  const auto expect_error = [](const std::function<void()>& f, const std::string& module, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << module << ": no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(module), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const EvoformerBlock& b = m.block0();
  for (const bool chunked : {false, true}) {
    const Variable zn = chunked ? pair : wrong, mn = chunked ? msa : wrong;
    const int64_t chunk = chunked ? 2 : 0;
    const std::string what = chunked ? "unchunked only" : "normalised input [2,3,4]";
    expect_error([&] { b.triangle_multiplication_outgoing().forward(pair, pmask, chunk, Tensor(), zn); },
                 "TriangleMultiplication", what);
    expect_error([&] { b.triangle_attention_starting_node().forward(pair, pmask, chunk, Tensor(), zn); },
                 "TriangleAttention", what);
    expect_error([&] { b.outer_product_mean().forward(msa, mask, chunk, Tensor(), mn); }, "OuterProductMean", what);
    expect_error([&] { transition_forward(b.pair_transition(), pair, chunk, Tensor(), zn); }, "transition_forward", what);
  }
}

}  // namespace
}  // namespace foldcore::af2
