// HelixFold's Parallel Evoformer (EvoformerBlockConfig::parallel, YAML `parallel_evoformer`): the
// MSA branch is AlphaFold's, bit for bit; the pair stack reads only the block's input pair and the
// outer product mean of the updated MSA is added last; gradients against finite differences; the
// YAML key reaches the main Evoformer stack only.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "core/random.h"
#include "models/alphafold/model/config_yaml.h"
#include "models/alphafold/evoformer/evoformer.h"
#include "models/alphafold/evoformer/evoformer_util.h"
#include "evoformer_test_util.h"
#include "test_util.h"
#include "../autograd/grad_check.h"

namespace foldcore::af2 {
namespace {

EvoformerBlockConfig small_config(bool parallel) {
  EvoformerBlockConfig c = small_block_config();
  c.parallel = parallel;
  return c;
}

// A block with seeded random (non-trivial) parameters: the same for both variants, since the
// variant does not change which parameters exist or their order.
struct Block {
  autograd::ParamStore ps;
  Generator init{3};
  EvoformerBlock block;
  explicit Block(bool parallel) : block(nn::Scope{&ps, &init, nullptr, "block"}, small_config(parallel)) {
    block.train(false);
    ps.finalize();
    Generator gen{11};
    std::vector<float> v = randn(ps.values().shape(), gen).to_vector();
    for (float& x : v) x *= 0.4f;
    Tensor values = ps.values();
    values.copy_(Tensor::from_vector(v, values.shape()));
  }
};

struct Inputs {
  Tensor m, z, msa_mask, pair_mask;
};
Inputs inputs() {
  Generator gen{5};
  const int64_t s = 3, n = 5;
  Inputs in{randn({s, n, 8}, gen), randn({n, n, 6}, gen), {}, {}};
  std::vector<float> mm(static_cast<size_t>(s * n), 1.f), pm(static_cast<size_t>(n * n), 1.f);
  mm[4] = pm[3] = 0.f;
  in.msa_mask = Tensor::from_vector(mm, {s, n});
  in.pair_mask = Tensor::from_vector(pm, {n, n});
  return in;
}

double max_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.contiguous().to_vector(), y = b.contiguous().to_vector();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(x[i]) - y[i]));
  return d;
}

TEST(Af2ParallelEvoformer, MsaBranchIsAlphaFoldsAndOuterProductMeanComesLast) {
  autograd::NoGradGuard ng;
  Block std_block(false), par_block(true);
  const Inputs in = inputs();
  const auto [m_std, z_std] = std_block.block.forward(Variable(in.m), Variable(in.z), in.msa_mask, in.pair_mask);
  const auto [m_par, z_par] = par_block.block.forward(Variable(in.m), Variable(in.z), in.msa_mask, in.pair_mask);
  EXPECT_EQ(max_diff(m_par.value(), m_std.value()), 0.0);
  // The reference composition: the pair stack on the input pair, then the outer product mean.
  const EvoformerBlock& b = par_block.block;
  Variable z(in.z.clone());
  z = autograd::add(z, b.triangle_multiplication_outgoing().forward(z, in.pair_mask));
  z = autograd::add(z, b.triangle_multiplication_incoming().forward(z, in.pair_mask));
  z = autograd::add(z, b.triangle_attention_starting_node().forward(z, in.pair_mask));
  z = autograd::add(z, b.triangle_attention_ending_node().forward(z, in.pair_mask));
  z = autograd::add(z, transition_forward(b.pair_transition(), z, 0));
  z = autograd::add(z, b.outer_product_mean().forward(m_par, in.msa_mask));
  EXPECT_LE(max_diff(z_par.value(), z.value()), 1e-6);
  // And it is a different model from AlphaFold's order.
  EXPECT_GT(max_diff(z_par.value(), z_std.value()), 1e-3);
}

// Finite differences of the parallel block's outputs w.r.t. both inputs: atol 3e-3 + rtol 3e-2 as in
// test_af2_evoformer.cpp, with eps 1e-3. The block's random parameters fill the flat buffer in layout
// order; with the layout that places the triangle multiplications' projections back to back, one of
// the 48 points is off at eps 1e-2 (0.370 against the analytic 0.328) and agrees at eps 1e-3: a
// ReLU kink or strong curvature within 1e-2 of it. Rounding of the difference quotient at 1e-3: ≈ 1e-7·|loss|/eps ≈ 1e-3 for O(10)
// losses, inside the tolerance; truncation O(eps²) is negligible.
TEST(Af2ParallelEvoformer, GradientsMatchFiniteDifferences) {
  Block par(true);
  const Inputs in = inputs();
  auto f = [&](const std::vector<Variable>& x) {
    const auto [mo, zo] = par.block.forward(x[0], x[1], in.msa_mask, in.pair_mask);
    return autograd::concat({autograd::reshape(mo, {mo.numel()}), autograd::reshape(zo, {zo.numel()})}, 0);
  };
  autograd::testing::expect_grads_match_fd(f, {in.m, in.z}, {}, 1e-3, 3e-3, 3e-2);
}

TEST(Af2ParallelEvoformer, YamlKeyTurnsOnTheMainStackOnly) {
  std::ifstream file(std::string(FOLDCORE_SOURCE_DIR) + "/configs/model/tiny.yaml");
  std::stringstream text;
  text << file.rdbuf();
  std::string yaml = text.str();
  EXPECT_FALSE(parse_af2_config(yaml, "tiny.yaml").evoformer.parallel);
  const std::string key = "parallel_evoformer: false";
  const size_t at = yaml.find(key);
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, key.size(), "parallel_evoformer: true");
  const Af2Config c = parse_af2_config(yaml, "tiny.yaml");
  EXPECT_TRUE(c.evoformer.parallel);
  EXPECT_FALSE(c.extra_msa.parallel);
}

}  // namespace
}  // namespace foldcore::af2
