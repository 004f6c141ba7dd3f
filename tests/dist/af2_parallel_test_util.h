// Helpers of the AlphaFold2 model-parallel tests (test_af2_model_parallel_mpi.cpp on CPU tensors,
// test_af2_model_parallel_cuda_mpi.cpp on CUDA tensors): the tiny preset, a seeded model, the
// padded synthetic target and the output comparison against one process.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "autograd/param_store.h"
#include "core/random.h"
#include "dist_test_util.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/config.h"
#include "models/alphafold/model/synthetic_target.h"
#include "test_util.h"

namespace foldcore::af2::parallel_test {

// The tiny preset (configs/model/tiny.yaml, built in code: no yaml-cpp needed).
inline Af2Config tiny(bool parallel_evoformer) {
  Af2Config c = tiny_af2_config();
  c.evoformer.parallel = parallel_evoformer;
  return c;
}

// The tiny model with seeded weights (and, when `dropout`, a seeded dropout generator) on
// `device`: equal on every rank and in every instance.
struct Model {
  autograd::ParamStore params;
  Generator init{7}, drop{19};
  AlphaFold model;
  Model(const Af2Config& c, bool dropout, Device device = Device::cpu())
      : params(device), model(nn::Scope{&params, &init, dropout ? &drop : nullptr, ""}, c) {
    model.train(dropout);
    params.finalize();
    // AlphaFold's initialisation zeroes the output layers (every Evoformer update would be 0):
    // seeded noise on every parameter makes each module's contribution count.
    Generator g(23);
    const std::vector<float> e = randn(params.values().shape(), g).to_vector();
    std::vector<float> v = params.values().to(Device::cpu()).to_vector();
    for (size_t i = 0; i < v.size(); ++i) v[i] += kNoise * e[i];
    Tensor values = params.values();
    values.copy_(Tensor::from_vector(v, values.shape()));
  }
  static constexpr float kNoise = 0.1f;
};

#ifdef FOLDCORE_HAVE_DATA
// 21 residues, 10 MSA rows with the template rows, 7 extra rows: sizes no group size divides
// (the padding path), one recycle; `templates` of the 4 template slots computed (0: all masked).
inline Af2Features small_target(int64_t templates = 0) {
  SyntheticTargetOptions o;
  o.templates = templates;
  o.num_res = 21;
  o.msa_rows = 24;
  o.recycles = 1;
  o.max_templates = 4;
  o.max_msa_clusters = 6;
  o.max_extra_msa = 7;
  std::mt19937 g(5);
  return synthetic_target(o, g);
}
#endif

// Every output within atol 1e-4 + rtol 1e-3 of the one-process reference (which must be finite);
// rank 0 prints the worst difference under `label`.
inline void expect_same_outputs(const Af2Outputs& got, const Af2Outputs& want, const std::string& label = "outputs") {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].first);
    ASSERT_EQ(got[i].first, want[i].first);
    ASSERT_EQ(got[i].second.shape(), want[i].second.shape());
    int64_t nonfinite = 0;
    for (float v : want[i].second.to(DType::f32).contiguous().to_vector()) nonfinite += !std::isfinite(v);
    ASSERT_EQ(nonfinite, 0) << "the one-process reference is not finite";
    const auto r = foldcore::testing::all_close(got[i].second.to(DType::f32), want[i].second.to(DType::f32), 1e-4, 1e-3);
    EXPECT_TRUE(r.ok) << r.message;
    worst = std::max(worst, r.max_abs);
  }
  if (foldcore::testing::mpi_world().rank() == 0) std::printf("  %s: max |diff| %.3g\n", label.c_str(), worst);
}

}  // namespace foldcore::af2::parallel_test
