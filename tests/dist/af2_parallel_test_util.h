// Helpers of the AlphaFold2 model-parallel tests (test_af2_model_parallel_mpi.cpp on CPU tensors,
// test_af2_model_parallel_cuda_mpi.cpp on CUDA tensors): the tiny preset, a seeded model, the
// padded synthetic target and the output comparison against one process.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "autograd/param_store.h"
#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "dist_test_util.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/alphafold_trunk.h"
#include "models/alphafold/evoformer/template.h"
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

// The training batch at `npz_path` (recycling axis last, as the training fixture's) with the first
// `computed` template slots unmasked and filled from the example's own ground truth: aatype,
// atoms and pseudo-β, the coordinates shifted by seeded N(0, 0.5 Å) noise per slot so that the
// templates differ. The training fixture's slots are all masked, which runs no template stack.
// slots > 0: only the first `slots` template slots are kept (a training step runs every slot's
// stack, masked or not).
inline Af2Features with_computed_templates(const std::string& npz_path, int64_t computed, int64_t slots = 0) {
  std::map<std::string, Tensor> a;
  const data::NpzReader npz(npz_path);
  for (const std::string& name : npz.names()) {
    a[name] = npz.read(name).to_tensor();
    if (slots > 0 && name.rfind("template_", 0) == 0) a[name] = a[name].narrow(0, 0, slots).contiguous();
  }
  std::mt19937 gen(11);
  std::normal_distribution<float> noise(0.f, 0.5f);
  // template_<name>[k] = <from> (+ noise) for the first `computed` slots; the rest left as they are.
  const auto fill = [&](const std::string& name, const std::string& from, bool jitter) {
    Tensor& dst = a.at(name);
    const std::vector<float> src = a.at(from).to(DType::f32).to_vector();
    std::vector<float> out = dst.to(DType::f32).to_vector();
    EXPECT_EQ(out.size(), src.size() * static_cast<size_t>(dst.size(0))) << name << " vs " << from;
    for (int64_t k = 0; k < computed; ++k)
      for (size_t i = 0; i < src.size(); ++i)
        out[static_cast<size_t>(k) * src.size() + i] = src[i] + (jitter ? noise(gen) : 0.f);
    dst = Tensor::from_vector(out, dst.shape()).to(dst.dtype());
  };
  fill("template_aatype", "aatype", false);
  fill("template_all_atom_positions", "all_atom_positions", true);
  fill("template_all_atom_mask", "all_atom_mask", false);
  fill("template_pseudo_beta", "pseudo_beta", true);
  fill("template_pseudo_beta_mask", "pseudo_beta_mask", false);
  Tensor& tm = a.at("template_mask");  // [T, R]
  std::vector<float> mask = tm.to(DType::f32).to_vector();
  const auto per_slot = static_cast<size_t>(tm.numel() / tm.size(0));
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = i / per_slot < static_cast<size_t>(computed) ? 1.f : 0.f;
  tm = Tensor::from_vector(mask, tm.shape()).to(tm.dtype());
  return Af2Features::from_arrays(a, npz_path + " (" + std::to_string(computed) + " templates computed)");
}

// The largest |gradient| of the template embedding's parameters (after a backward): > 0 when the
// template stacks ran.
inline double template_grad_max(const AlphaFold& model) {
  double gmax = 0;
  for (const auto& [name, v] : model.trunk().template_embedder()->named_parameters())
    for (float g : v.grad().to(Device::cpu()).to_vector()) gmax = std::max(gmax, static_cast<double>(std::fabs(g)));
  return gmax;
}

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
