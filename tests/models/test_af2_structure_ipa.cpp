// Invariant Point Attention: parity with the reference dump (modules.npz ipa_*: one IPA call of
// structure-module layer 1 with the official-format weights of params.npz), plus gradient checks
// of the IPA and of the host-side autograd Functions it uses.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/structure/ipa.h"
#include "models/alphafold/structure/rigid.h"
#include "models/alphafold/structure/structure_module_ops.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;

std::string ref(const std::string& f) { return testing::shared_dir() + "/af2/ref/" + f; }
const std::string kIpaKey = "structure_module/fold_iteration/invariant_point_attention";

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

TEST(Af2StructureIpa, MatchesReferenceDump) {
  ag::ParamStore ps;
  Generator init(1);
  InvariantPointAttention ipa(nn::Scope{&ps, &init, nullptr, "ipa"}, StructureModuleConfig{});
  ps.finalize();
  Af2ParamTable table;
  ipa.add_af2_params(table, kIpaKey);
  EXPECT_EQ(table.size(), 13u);
  EXPECT_EQ(load_af2_params(table, ref("params.npz"), {.allow_unused = true}), 13u);

  data::NpzReader npz(ref("modules.npz"));
  auto get = [&](const std::string& k) { return npz.read(k).to_tensor(); };
  const Tensor s = get("ipa_s"), z = get("ipa_z"), mask = get("ipa_mask");
  const Tensor quat = get("ipa_frame_quat"), rot = get("ipa_frame_rot"), trans = get("ipa_frame_trans");
  const Tensor expect = get("ipa_update");
  // The dump's rotation is the one of its quaternion (w, x, y, z).
  FC_EXPECT_CLOSE(quat_to_rot(quat), rot, 2e-6, 0);

  ag::NoGradGuard no_grad;
  const Tensor got = ipa.forward(Variable(s), Variable(z), mask, Variable(rot), Variable(trans)).value();
  ASSERT_EQ(got.shape(), expect.shape());
  // fp32 with different summation orders (and the point distance expanded as |q|²+|k|²−2q·k):
  // errors ~1e-6 relative to the output scale; 1e-4·max|ref| absolute + 1e-4 relative.
  const double scale = max_abs(expect);
  const auto r = testing::all_close(got, expect, 1e-4 * scale, 1e-4);
  EXPECT_TRUE(r.ok) << r.message;
  std::printf("ipa_update: max|ref| %.3g, max abs err %.3g\n", scale, r.max_abs);
}

// A small IPA: gradients of a weighted sum w.r.t. s, z, the translation and a parameter, against
// central differences. f32 with eps 1e-2 on O(1) inputs: truncation O(eps²)·f''' and rounding
// O(1e-7/eps) put the finite differences within ~1e-3 relative; tolerance 2e-3 + 2e-2·|fd|.
// A small IPA's config: c_s and c_z as given, head and point counts of a few each.
StructureModuleConfig small_ipa_config(int64_t c_s, int64_t c_z, int64_t heads, int64_t scalar_v, int64_t point_v) {
  StructureModuleConfig cfg;
  cfg.c_s = c_s;
  cfg.c_z = c_z;
  cfg.num_head = heads;
  cfg.num_scalar_qk = 4;
  cfg.num_scalar_v = scalar_v;
  cfg.num_point_qk = 2;
  cfg.num_point_v = point_v;
  return cfg;
}

// An IPA initialised from seed `init_seed`; output_projection starts at zero (AF2 zero init) and
// the point weights at one value, so both get random values from g: every path matters.
struct SmallIpa {
  ag::ParamStore ps;
  Generator init;
  InvariantPointAttention ipa;
  SmallIpa(const StructureModuleConfig& cfg, uint64_t init_seed, Generator& g)
      : init(init_seed), ipa(nn::Scope{&ps, &init, nullptr, "ipa"}, cfg) {
    ps.finalize();
    for (const auto& [name, v] : ipa.named_parameters())
      if (name.find("output_projection") != std::string::npos || name.find("point_weights") != std::string::npos)
        Tensor(v.value()).copy_(randn(v.shape(), g, 0.f, 0.5f));
  }
};

TEST(Af2StructureIpa, GradientsMatchFiniteDifferences) {
  const StructureModuleConfig cfg = small_ipa_config(8, 5, 3, 3, 3);
  Generator g(8);
  SmallIpa small(cfg, 7, g);
  const InvariantPointAttention& ipa = small.ipa;
  ag::ParamStore& ps = small.ps;

  const int64_t n = 5;
  const Tensor s = randn({n, cfg.c_s}, g), z = randn({n, n, cfg.c_z}, g);
  const Tensor mask = Tensor::from_vector({1, 1, 0, 1, 1}, {n});
  const Tensor rot = quat_to_rot(normalize_quat(randn({n, 4}, g)));
  const Tensor trans = randn({n, 3}, g);
  // Rows of masked residues carry −1e5 on every logit, where fp32 resolves only ~1e-2: their
  // (meaningless) outputs are quantisation noise to finite differences, so they get weight 0.
  Tensor w = randn({n, cfg.c_s}, g);
  w.select(0, 2).zero_();

  Variable vs(s, true), vz(z, true), vt(trans, true);
  const Variable out = ipa.forward(vs, vz, mask, Variable(rot), vt);
  ag::backward({out}, {w});
  auto loss = [&] {
    ag::NoGradGuard ng;
    return testing::weighted_sum(ipa.forward(Variable(s), Variable(z), mask, Variable(rot), Variable(trans)).value(),
                                 w);
  };
  testing::check_gradient(loss, s, vs.grad(), 1e-2, 2e-3, 2e-2);
  testing::check_gradient(loss, z, vz.grad(), 1e-2, 2e-3, 2e-2);
  testing::check_gradient(loss, trans, vt.grad(), 1e-2, 2e-3, 2e-2);
  const Variable& pw = ps.get("ipa/trainable_point_weights");
  testing::check_gradient(loss, pw.value(), pw.grad(), 1e-2, 2e-3, 2e-2);
}

// Inference takes the query rows in blocks only where the whole [N, N, max(H, c_z)] exceeds 2²³
// values (c_z = 128: N > 256); below, all rows at once, the grad mode's path: the same bits. At
// N = 300 the blocks (3 of 109 rows) give the whole's values up to the GEMMs' blocking over fewer
// rows (fp32 rounding: 1e-6 relative to the output's scale).
TEST(Af2StructureIpa, InferenceRowBlocksOnlyBeyondAWholeOf2To23Values) {
  const StructureModuleConfig cfg = small_ipa_config(16, 128, 4, 4, 2);
  Generator g(12);
  SmallIpa small(cfg, 11, g);
  const InvariantPointAttention& ipa = small.ipa;
  for (const int64_t n : {250, 300}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    const Tensor s = randn({n, cfg.c_s}, g), z = randn({n, n, cfg.c_z}, g, 0.f, 0.2f);
    const Tensor mask = Tensor::full({n}, 1.0, DType::f32);
    const Tensor rot = quat_to_rot(normalize_quat(randn({n, 4}, g)));
    const Tensor trans = randn({n, 3}, g);
    const Tensor whole = ipa.forward(Variable(s, true), Variable(z), mask, Variable(rot), Variable(trans)).value();
    ag::NoGradGuard ng;
    const Tensor inference = ipa.forward(Variable(s), Variable(z), mask, Variable(rot), Variable(trans)).value();
    if (n == 250) {
      FC_EXPECT_CLOSE(inference, whole, 0, 0);
    } else {
      FC_EXPECT_CLOSE(inference, whole, 1e-6 * max_abs(whole), 1e-6);
    }
  }
}

// softplus, norm_last, l2_normalize_last: values against naive math, gradients against central
// differences (same tolerance reasoning as above).
TEST(Af2StructureIpa, HostFunctions) {
  Generator g(9);
  const Tensor x = randn({7, 3}, g, 0.f, 2.f), w = randn({7, 3}, g), w1 = randn({7}, g);
  const auto xv = x.to_vector();
  {
    Variable v(x, true);
    const Variable y = softplus(v);
    const auto yv = y.value().to_vector();
    for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yv[i], std::log1p(std::exp(double(xv[i]))), 1e-6);
    ag::backward({y}, {w});
    testing::check_gradient([&] { return testing::weighted_sum(softplus(Variable(x)).value(), w); }, x, v.grad(),
                            1e-2, 1e-3, 1e-2);
  }
  {
    Variable v(x, true);
    const Variable y = norm_last(v, 1e-8f);
    const auto yv = y.value().to_vector();
    for (int r = 0; r < 7; ++r)
      EXPECT_NEAR(yv[r], std::sqrt(1e-8 + xv[3 * r] * xv[3 * r] + xv[3 * r + 1] * xv[3 * r + 1] +
                                   xv[3 * r + 2] * xv[3 * r + 2]),
                  1e-5);
    ag::backward({y}, {w1});
    testing::check_gradient([&] { return testing::weighted_sum(norm_last(Variable(x), 1e-8f).value(), w1); }, x,
                            v.grad(), 1e-2, 1e-3, 1e-2);
  }
  {
    Variable v(x, true);
    const Variable y = l2_normalize_last(v);
    const auto yv = y.value().to_vector();
    for (int r = 0; r < 7; ++r) {
      const double n = std::sqrt(double(xv[3 * r]) * xv[3 * r] + double(xv[3 * r + 1]) * xv[3 * r + 1] +
                                 double(xv[3 * r + 2]) * xv[3 * r + 2]);
      for (int k = 0; k < 3; ++k) EXPECT_NEAR(yv[3 * r + k], xv[3 * r + k] / n, 1e-6);
    }
    ag::backward({y}, {w});
    testing::check_gradient([&] { return testing::weighted_sum(l2_normalize_last(Variable(x)).value(), w); }, x,
                            v.grad(), 1e-2, 1e-3, 1e-2);
  }
}

}  // namespace
}  // namespace foldcore::af2
