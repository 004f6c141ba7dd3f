// The trunk (EmbeddingsAndEvoformer: input, recycling, template, extra-MSA embedders, extra-MSA
// stack, Evoformer, single projection) against the reference, independently of the structure
// module: iteration 0 from zeros must give the reference's recycle_m1[0] / recycle_z[0]; iteration 1,
// fed the reference's recycled state (m1, z, x of iteration 0), must give the final msa, pair,
// single and recycle_m1[1] / recycle_z[1].
//
// Tolerance: |ours − ref| ≤ 1e-4·max|ref| + 1e-3·|ref| (fp32 on both sides, differences from
// summation order only; see test_af2_model.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/param_store.h"
#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/model/alphafold_trunk.h"
#include "models/alphafold/params/alphafold_params.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

std::string ref(const std::string& name) { return testing::shared_dir() + "/af2/ref/" + name; }

void expect_close(const char* what, const Tensor& ours, const Tensor& theirs) {
  SCOPED_TRACE(what);
  ASSERT_EQ(ours.shape(), theirs.shape());
  double scale = 0;
  for (float v : theirs.to_vector()) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  const Tensor a = ours.to(Device::cpu()).contiguous();
  const auto r = testing::all_close(a, theirs.contiguous(), 1e-4 * scale, 1e-3);
  EXPECT_TRUE(r.ok) << r.message;
  std::printf("  %-12s max|d| %.3g  max|ref| %.3g\n", what, r.max_abs, scale);
}

TEST(Af2Trunk, MatchesReferenceOnBothIterations) {
  const Af2Config config = infer_af2_config(ref("params.npz"));
  autograd::ParamStore params;
  Generator init_rng(0);
  EmbeddingsAndEvoformer trunk(nn::Scope{&params, &init_rng, nullptr, ""}, config);
  trunk.train(false);
  params.finalize();
  Af2ParamTable table;
  trunk.add_af2_params(table);
  // Only the trunk's parameters: the structure module's and the heads' keys stay unclaimed.
  Af2LoadOptions load;
  load.allow_unused = true;
  EXPECT_GT(load_af2_params(table, ref("params.npz"), load), 250u);

  std::map<std::string, Tensor> out;
  for (const auto& [name, a] : data::read_npz(ref("outputs.npz"))) out.emplace(name, a.to_tensor());
  const Af2Features features = Af2Features::read_npz(ref("features.npz"));

  autograd::NoGradGuard no_grad;
  const TrunkOutput it0 = trunk.forward(features.iteration(0), Af2RecycleState{});
  expect_close("m1 [0]", it0.m1.value(), out.at("recycle_m1").select(0, 0));
  expect_close("z [0]", it0.pair.value(), out.at("recycle_z").select(0, 0));

  const Af2RecycleState prev{out.at("recycle_m1").select(0, 0).contiguous(),
                             out.at("recycle_z").select(0, 0).contiguous(),
                             out.at("recycle_x").select(0, 0).contiguous()};
  const TrunkOutput it1 = trunk.forward(features.iteration(1), prev);
  expect_close("m1 [1]", it1.m1.value(), out.at("recycle_m1").select(0, 1));
  expect_close("z [1]", it1.pair.value(), out.at("recycle_z").select(0, 1));
  expect_close("msa", it1.msa.value(), out.at("msa"));
  expect_close("pair", it1.pair.value(), out.at("pair"));
  expect_close("single", it1.single.value(), out.at("single"));
}

}  // namespace
}  // namespace foldcore::af2
