// CUDA vs CPU for kernels/af2_features.h: both backends do the same fp32/double operations in the
// same order (af2_features_math.h; the CUDA side with rounding intrinsics, no FMA contraction), so
// the outputs are equal bit for bit: tolerance 0, also for the one-hot bins next to an edge.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/random.h"
#include "kernels/af2_features.h"
#include "test_util.h"

namespace foldcore {
namespace {

const Device kGpu = Device::cuda(0);

TEST(Af2FeaturesCuda, DistogramEqualsCpu) {
  FC_REQUIRE_CUDA();
  Generator g(21);
  for (const ops::DistogramBins bins : {ops::DistogramBins{3.25f, 20.75f, 15}, ops::DistogramBins{3.25f, 50.75f, 39}}) {
    const int64_t t = 3, n = 67;
    const Tensor x = randn({t, n, 3}, g, 0.f, 12.f);
    for (const auto& [row0, rows] : {std::pair<int64_t, int64_t>{0, n}, {13, 16}}) {
      Tensor c = Tensor::empty({t, rows, n, bins.num_bins}, DType::f32), d = Tensor::empty({t, rows, n, bins.num_bins}, DType::f32, kGpu);
      ops::distogram_one_hot(x, bins, row0, c);
      ops::distogram_one_hot(x.to(kGpu), bins, row0, d);
      FC_EXPECT_CLOSE(d.to(Device::cpu()), c, 0, 0);
    }
  }
}

TEST(Af2FeaturesCuda, TemplateFeaturesEqualCpu) {
  FC_REQUIRE_CUDA();
  Generator g(22);
  const int64_t n = 53;
  const ops::DistogramBins bins{3.25f, 50.75f, 39};
  const int64_t c = ops::template_pair_feature_dim(bins.num_bins);
  // Random masks with zeros, random aatypes, frames from random (not orthonormal: the arithmetic is
  // what is compared) axes and CA positions.
  std::vector<float> pb = rand_uniform({n}, g).to_vector(), bb = rand_uniform({n}, g).to_vector();
  for (float& v : pb) v = v < 0.2f ? 0.f : 1.f;
  for (float& v : bb) v = v < 0.2f ? 0.f : 1.f;
  ops::TemplatePairInputs in;
  in.pseudo_beta = randn({n, 3}, g, 0.f, 12.f);
  in.pseudo_beta_mask = Tensor::from_vector(pb, {n});
  in.backbone_mask = Tensor::from_vector(bb, {n});
  in.aatype = randint({n}, g, 0, 22, DType::i32);
  in.frames = randn({n, 12}, g, 0.f, 5.f);
  in.bins = bins;
  for (const bool unit : {true, false}) {
    ops::TemplatePairInputs cin = in, gin = in;
    if (!unit) cin.frames = gin.frames = Tensor();
    gin.pseudo_beta = in.pseudo_beta.to(kGpu);
    gin.pseudo_beta_mask = in.pseudo_beta_mask.to(kGpu);
    gin.backbone_mask = in.backbone_mask.to(kGpu);
    gin.aatype = in.aatype.to(kGpu);
    if (unit) gin.frames = in.frames.to(kGpu);
    Tensor co = Tensor::empty({n, n, c}, DType::f32), go = Tensor::empty({n, n, c}, DType::f32, kGpu);
    ops::template_pair_features(cin, co);
    ops::template_pair_features(gin, go);
    FC_EXPECT_CLOSE(go.to(Device::cpu()), co, 0, 0);
    // A row block (inference builds the features one row chunk at a time).
    Tensor gb = Tensor::empty({7, n, c}, DType::f32, kGpu);
    ops::template_pair_features(gin, gb, 40);
    FC_EXPECT_CLOSE(gb.to(Device::cpu()), co.narrow(0, 40, 7).contiguous(), 0, 0);
  }
}

// The extra MSA's features: classes in range and outside it (zeros on both), i64 and i32.
TEST(Af2FeaturesCuda, ExtraMsaFeaturesEqualCpu) {
  FC_REQUIRE_CUDA();
  Generator g(23);
  const int64_t e = 37, n = 29;
  const Tensor msa = randint({e, n}, g, -2, 25, DType::i64);
  const Tensor hd = rand_uniform({e, n}, g), dv = randn({e, n}, g);
  Tensor c = Tensor::empty({e, n, ops::kExtraMsaFeatureDim}, DType::f32);
  ops::extra_msa_features(msa, hd, dv, c);
  for (DType it : {DType::i64, DType::i32}) {
    Tensor d = Tensor::empty({e, n, ops::kExtraMsaFeatureDim}, DType::f32, kGpu);
    ops::extra_msa_features(msa.to(it).to(kGpu), hd.to(kGpu), dv.to(kGpu), d);
    FC_EXPECT_CLOSE(d.to(Device::cpu()), c, 0, 0);
  }
}

}  // namespace
}  // namespace foldcore
