// kernels/af2_features.h on the CPU: the distogram one-hot against distances computed in double
// (away from the bin edges, where fp32 rounding may legitimately pick the neighbour), row ranges
// against the whole, the template features' layout and unit vectors against naive math, and bad
// inputs. (tests/models/test_af2_template.cpp and test_af2_embedders.cpp check the model functions
// built on these ops; the CUDA kernels are compared with this reference in *_cuda.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "kernels/af2_features.h"
#include "test_util.h"

namespace foldcore {
namespace {

const ops::DistogramBins kBins{3.25f, 50.75f, 39};

// The bin of squared distance d2 (double), or -1 for none; `near_edge` when within 1e-4 relative
// of an edge.
int bin_of(double d2, const ops::DistogramBins& b, bool& near_edge) {
  near_edge = false;
  int found = -1;
  for (int64_t k = 0; k < b.num_bins; ++k) {
    const double lo = std::pow(b.min_bin + k * (b.max_bin - b.min_bin) / (b.num_bins - 1.0), 2);
    const double hi = k + 1 < b.num_bins ? std::pow(b.min_bin + (k + 1) * (b.max_bin - b.min_bin) / (b.num_bins - 1.0), 2) : 1e8;
    if (std::abs(d2 - lo) < 1e-4 * lo || std::abs(d2 - hi) < 1e-4 * hi) near_edge = true;
    if (d2 > lo && d2 < hi) found = static_cast<int>(k);
  }
  return found;
}

TEST(Af2Features, DistogramMatchesDoubleDistancesAndRowRanges) {
  Generator g(11);
  const int64_t t = 2, n = 37;
  const Tensor x = randn({t, n, 3}, g, 0.f, 15.f);
  Tensor out = Tensor::empty({t, n, n, kBins.num_bins}, DType::f32);
  ops::distogram_one_hot(x, kBins, 0, out);
  const std::vector<float> xv = x.to_vector(), ov = out.to_vector();
  int checked = 0;
  for (int64_t s = 0; s < t; ++s)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double d2 = 0;
        for (int d = 0; d < 3; ++d) {
          const double dd = static_cast<double>(xv[(s * n + i) * 3 + d]) - xv[(s * n + j) * 3 + d];
          d2 += dd * dd;
        }
        bool edge = false;
        const int want = bin_of(d2, kBins, edge);
        const float* o = ov.data() + ((s * n + i) * n + j) * kBins.num_bins;
        float sum = 0;
        for (int64_t k = 0; k < kBins.num_bins; ++k) sum += o[k];
        EXPECT_LE(sum, 1.f);  // one bin at most
        if (edge) continue;
        ++checked;
        for (int64_t k = 0; k < kBins.num_bins; ++k) ASSERT_EQ(o[k], k == want ? 1.f : 0.f) << s << "," << i << "," << j;
      }
  EXPECT_GT(checked, t * n * n * 9 / 10);
  // Rows [5, 5 + 11) equal those rows of the whole.
  Tensor part = Tensor::empty({t, 11, n, kBins.num_bins}, DType::f32);
  ops::distogram_one_hot(x, kBins, 5, part);
  FC_EXPECT_CLOSE(part, out.narrow(1, 5, 11), 0, 0);
}

TEST(Af2Features, TemplateFeaturesLayoutAndUnitVectors) {
  Generator g(12);
  const int64_t n = 9, nb = kBins.num_bins, c = ops::template_pair_feature_dim(nb);
  ASSERT_EQ(c, 88);
  const Tensor pos = randn({n, 3}, g, 0.f, 10.f);
  std::vector<float> pb(n, 1.f), bb(n, 1.f), frames(n * 12);
  pb[3] = 0.f;
  bb[6] = 0.f;
  std::vector<int64_t> aa(n);
  for (int64_t r = 0; r < n; ++r) aa[r] = (r * 5) % 22;
  // Orthonormal frames: a rotation about z by angle r, CA at a random place.
  const std::vector<float> ca = randn({n, 3}, g, 0.f, 10.f).to_vector();
  for (int64_t r = 0; r < n; ++r) {
    const float a = 0.3f * static_cast<float>(r), co = std::cos(a), si = std::sin(a);
    const float f[12] = {co, si, 0, -si, co, 0, 0, 0, 1, ca[r * 3], ca[r * 3 + 1], ca[r * 3 + 2]};
    for (int k = 0; k < 12; ++k) frames[r * 12 + k] = f[k];
  }
  ops::TemplatePairInputs in;
  in.pseudo_beta = pos;
  in.pseudo_beta_mask = Tensor::from_vector(pb, {n});
  in.aatype = Tensor::from_vector_i64(aa, {n}, DType::i32);
  in.backbone_mask = Tensor::from_vector(bb, {n});
  in.frames = Tensor::from_vector(frames, {n, 12});
  in.bins = kBins;
  Tensor out = Tensor::empty({n, n, c}, DType::f32);
  ops::template_pair_features(in, out);
  Tensor dg = Tensor::empty({1, n, n, nb}, DType::f32);
  ops::distogram_one_hot(pos.unsqueeze(0), kBins, 0, dg);
  const std::vector<float> o = out.to_vector(), d = dg.to_vector();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float* v = o.data() + (i * n + j) * c;
      const float m2 = bb[i] * bb[j];
      for (int64_t k = 0; k < nb; ++k) EXPECT_EQ(v[k], d[(i * n + j) * nb + k] * m2);
      EXPECT_EQ(v[nb], pb[i] * pb[j] * m2);
      for (int k = 0; k < 22; ++k) {
        EXPECT_EQ(v[nb + 1 + k], (k == aa[j] ? 1.f : 0.f) * m2);
        EXPECT_EQ(v[nb + 23 + k], (k == aa[i] ? 1.f : 0.f) * m2);
      }
      EXPECT_EQ(v[c - 1], m2);
      // Unit vector: R_iᵀ (CA_j − CA_i) normalised (zero for i = j up to the 1e-6 in the norm).
      double w[3], norm2 = 1e-6;
      for (int k = 0; k < 3; ++k) {
        w[k] = 0;
        for (int q = 0; q < 3; ++q) w[k] += static_cast<double>(frames[i * 12 + 3 * k + q]) * (ca[j * 3 + q] - ca[i * 3 + q]);
        norm2 += w[k] * w[k];
      }
      for (int k = 0; k < 3; ++k) EXPECT_NEAR(v[nb + 45 + k], w[k] / std::sqrt(norm2) * m2, 1e-6) << i << "," << j;
    }
  // Without frames (use_template_unit_vector off) the unit vector channels are zero.
  in.frames = Tensor();
  ops::template_pair_features(in, out);
  const std::vector<float> o2 = out.to_vector();
  for (int64_t e = 0; e < n * n; ++e)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(o2[e * c + nb + 45 + k], 0.f);
}

TEST(Af2Features, BadInputIsAnError) {
  Generator g(13);
  const Tensor x = randn({1, 8, 3}, g);
  Tensor out = Tensor::empty({1, 8, 8, 15}, DType::f32);
  EXPECT_THROW(ops::distogram_one_hot(x, {3.25f, 20.75f, 1}, 0, out), Error);           // one bin
  EXPECT_THROW(ops::distogram_one_hot(x, {20.75f, 3.25f, 15}, 0, out), Error);          // max < min
  EXPECT_THROW(ops::distogram_one_hot(x, {3.25f, 20.75f, 15}, 1, out), Error);          // rows past N
  EXPECT_THROW(ops::distogram_one_hot(x.reshape({8, 3}), {3.25f, 20.75f, 15}, 0, out), Error);  // not [T, N, 3]
  ops::TemplatePairInputs in;
  in.pseudo_beta = x.reshape({8, 3});
  in.pseudo_beta_mask = Tensor::full({8}, 1.0, DType::f32);
  in.backbone_mask = Tensor::full({8}, 1.0, DType::f32);
  in.aatype = Tensor::zeros({8}, DType::i64);  // must be i32
  in.bins = {3.25f, 50.75f, 39};
  Tensor tout = Tensor::empty({8, 8, 88}, DType::f32);
  EXPECT_THROW(ops::template_pair_features(in, tout), Error);
  in.aatype = Tensor::zeros({8}, DType::i32);
  EXPECT_NO_THROW(ops::template_pair_features(in, tout));
  EXPECT_THROW(ops::template_pair_features(in, Tensor::empty({8, 8, 87}, DType::f32)), Error);
  EXPECT_THROW(ops::template_pair_features(in, Tensor::empty({3, 8, 88}, DType::f32), 6), Error);  // rows past N
  EXPECT_THROW(ops::template_pair_features(in, Tensor::empty({3, 8, 88}, DType::f32), -1), Error);
}

// The extra MSA's features against their definition, element by element: a one-hot of the class
// (zeros for a class outside [0, 23): the op's contract, the model checks the values first), then
// has_deletion and deletion_value; i32 and i64 classes give the same array; bad shapes are errors.
TEST(Af2Features, ExtraMsaFeaturesOneHotThenDeletions) {
  Generator g(31);
  const int64_t e = 5, n = 7;
  std::vector<int64_t> cls = randint({e, n}, g, 0, 23, DType::i64).to_vector_i64();
  cls[3] = 23;   // outside: zeros
  cls[4] = -1;   // outside: zeros
  cls[5] = 22;   // the mask token
  const Tensor msa = Tensor::from_vector_i64(cls, {e, n}, DType::i64);
  const Tensor hd = rand_uniform({e, n}, g), dv = randn({e, n}, g);
  Tensor out = Tensor::empty({e, n, ops::kExtraMsaFeatureDim}, DType::f32);
  ops::extra_msa_features(msa, hd, dv, out);
  const std::vector<float> o = out.to_vector(), h = hd.to_vector(), d = dv.to_vector();
  for (int64_t r = 0; r < e * n; ++r) {
    for (int64_t k = 0; k < ops::kExtraMsaClasses; ++k)
      EXPECT_EQ(o[r * 25 + k], cls[r] == k ? 1.f : 0.f) << r << " " << k;
    EXPECT_EQ(o[r * 25 + 23], h[r]);
    EXPECT_EQ(o[r * 25 + 24], d[r]);
  }
  Tensor out32 = Tensor::empty({e, n, 25}, DType::f32);
  ops::extra_msa_features(msa.to(DType::i32), hd, dv, out32);
  FC_EXPECT_CLOSE(out32, out, 0, 0);
  EXPECT_THROW(ops::extra_msa_features(msa.to(DType::f32), hd, dv, out), Error);                      // not integer
  EXPECT_THROW(ops::extra_msa_features(msa, hd.reshape({n, e}), dv, out), Error);                     // shape
  EXPECT_THROW(ops::extra_msa_features(msa, hd, dv, Tensor::empty({e, n, 24}, DType::f32)), Error);  // width
}

// A row block (row0, rows) is the same rows of the whole array, bit for bit (each element is
// computed alone), so inference can build the features one row chunk at a time.
TEST(Af2Features, TemplateFeatureRowBlocksEqualWholeRows) {
  Generator g(14);
  const int64_t n = 11;
  ops::TemplatePairInputs in;
  in.pseudo_beta = randn({n, 3}, g, 0.f, 9.f);
  in.pseudo_beta_mask = Tensor::full({n}, 1.0, DType::f32);
  in.backbone_mask = Tensor::full({n}, 1.0, DType::f32);
  in.aatype = randint({n}, g, 0, 22, DType::i32);
  in.frames = randn({n, 12}, g);
  in.bins = {3.25f, 50.75f, 39};
  const int64_t c = ops::template_pair_feature_dim(39);
  Tensor whole = Tensor::empty({n, n, c}, DType::f32);
  ops::template_pair_features(in, whole);
  for (const auto& [row0, rows] : {std::pair<int64_t, int64_t>{0, 4}, {4, 4}, {8, 3}, {10, 1}, {0, n}}) {
    Tensor block = Tensor::empty({rows, n, c}, DType::f32);
    ops::template_pair_features(in, block, row0);
    EXPECT_EQ(block.to_vector(), whole.narrow(0, row0, rows).contiguous().to_vector()) << row0;
  }
}

}  // namespace
}  // namespace foldcore
