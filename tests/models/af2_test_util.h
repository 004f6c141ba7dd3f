// Fixtures shared by the AlphaFold module tests: a parameter store with a fixed-seed initialiser,
// the reference arrays of ../shared/af2/ref (outputs.npz, modules.npz, features.npz), max |x|.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/param_store.h"
#include "core/random.h"
#include "data_pipeline/npy.h"
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

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

}  // namespace foldcore::af2
