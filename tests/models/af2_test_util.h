// Fixtures shared by the AlphaFold module tests: a parameter store with a fixed-seed initialiser,
// the reference arrays of ../shared/af2/ref (outputs.npz, modules.npz, features.npz), max |x|.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/param_store.h"
#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/evoformer/template.h"
#include "nn/module.h"
#include "test_util.h"

namespace foldcore::af2 {

struct Env {
  explicit Env(Device device = Device::cpu()) : ps(device) {}
  autograd::ParamStore ps;
  Generator init{1};
  nn::Scope scope(const std::string& prefix = "") { return nn::Scope{&ps, &init, nullptr, prefix}; }
  // Non-trivial random values for every parameter (AF2 zero-inits some; LN scale 1).
  void randomize(uint64_t seed) {
    Generator g(seed);
    for (auto [name, v] : ps.named_values()) v.copy_(randn(v.shape(), g, 0.f, 0.5f));
  }
};

// The reference archive "outputs", "modules" or "features" (opened once).
inline const data::NpzReader& npz(const std::string& file) {
  static const data::NpzReader outputs(testing::shared_dir() + "/af2/ref/outputs.npz");
  static const data::NpzReader modules(testing::shared_dir() + "/af2/ref/modules.npz");
  static const data::NpzReader features(testing::shared_dir() + "/af2/ref/features.npz");
  return file == "outputs" ? outputs : file == "modules" ? modules : features;
}
inline Tensor ref(const std::string& file, const std::string& name) { return npz(file).read(name).to_tensor(); }
// A feature of recycling iteration r (the recycling axis is last in features.npz).
inline Tensor feat(const std::string& name, int64_t r) {
  return ref("features", name).select(-1, r).contiguous();
}

// Small template widths for module tests: c_t 8, 2 heads × 4 everywhere, `blocks` pair blocks,
// an ungated pointwise attention (AF2's).
inline TemplateConfig small_templates(int64_t blocks) {
  TemplateConfig t;
  t.c_t = 8;
  t.tri_att = {2, 4, true, 0.f};
  t.tri_mul_channels = 8;
  t.pointwise_att = {2, 4, false, 0.f};
  t.num_pair_blocks = blocks;
  return t;
}

// Template inputs for module tests: T = template_mask.size() templates of n residues, aatype
// (i·step) mod classes over the T·n slots, atom positions N(0, 6²) from g, every atom present.
inline TemplateInputs random_template_inputs(int64_t n, const std::vector<float>& template_mask, Generator& g,
                                             int64_t step = 7, int64_t classes = 22) {
  const auto t = static_cast<int64_t>(template_mask.size());
  std::vector<int64_t> aa(static_cast<size_t>(t * n));
  for (size_t i = 0; i < aa.size(); ++i) aa[i] = static_cast<int64_t>((static_cast<int64_t>(i) * step) % classes);
  TemplateInputs in;
  in.aatype = Tensor::from_vector_i64(aa, {t, n});
  in.all_atom_positions = randn({t, n, 37, 3}, g, 0.f, 6.f);
  in.all_atom_mask = Tensor::full({t, n, 37}, 1.0, DType::f32);
  in.template_mask = Tensor::from_vector(template_mask, {t});
  return in;
}

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

}  // namespace foldcore::af2
