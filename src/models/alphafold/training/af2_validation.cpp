#include "models/alphafold/training/af2_validation.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/json_text.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/features.h"

namespace foldcore::af2 {
namespace {

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

struct Af2Validator::Chain {
  std::string name;
  Af2Features features;
  std::vector<Vec3d> reference;  // [N] true Cα (Å)
  std::vector<float> mask;       // [N] 1 where the Cα is observed
};

Af2Validator::~Af2Validator() = default;

Af2Validator::Af2Validator(const data::FeatureStoreReader& reader, const std::vector<std::string>& chains,
                           const data::TrainingSampleConfig& data, uint64_t seed)
    : num_recycles_(data.max_recycles) {
  // The sample keys that carry the recycling axis: the processed features, which
  // training_sample_layout lists before num_recycles (the labels follow it).
  std::vector<std::string> recycled;
  for (const data::TrainingFeatureSpec& spec : data::training_sample_layout(data)) {
    if (spec.name == "num_recycles") break;
    recycled.push_back(spec.name);
  }
  for (size_t i = 0; i < chains.size(); ++i) {
    const std::string& name = chains[i];
    FC_CHECK(reader.find(name).has_value(), "validation: chain '", name, "' (validation.chains) is not in store ",
             reader.path());
    const data::TrainingChain chain = reader.read(name);
    data::TrainingSampleConfig c = data;
    c.crop_size = chain.num_res();  // the whole chain
    c.spatial_crop = false;
    c.spatial_crop_probability = 0.0;
    c.block_delete_msa = false;
    const data::FeatureDict sample =
        data::make_training_sample(chain, c, data::SampleKey{seed, 0, static_cast<int64_t>(i)});
    std::map<std::string, Tensor> arrays;
    for (const std::string& key : recycled)
      if (sample.contains(key)) arrays[key] = sample.at(key).to_tensor();
    Chain v{name, Af2Features::from_arrays(arrays, "validation chain " + name + " of " + reader.path()), {}, {}};
    const int64_t n = chain.num_res();
    for (int64_t r = 0; r < n; ++r) {
      const float* p = chain.all_atom_positions.data() + (r * 37 + 1) * 3;  // atom37 slot 1: CA
      v.reference.push_back({p[0], p[1], p[2]});
      v.mask.push_back(chain.all_atom_mask[static_cast<size_t>(r * 37 + 1)] > 0 ? 1.f : 0.f);
    }
    int64_t observed = 0;
    for (float m : v.mask) observed += m > 0;
    FC_CHECK(observed >= 3, "validation: chain '", name, "' of store ", reader.path(), " has ", observed,
             " observed CA atoms; at least 3 are needed to score a prediction");
    chains_.push_back(std::move(v));
  }
}

ValidationResult Af2Validator::run(AlphaFold& model, Device device) const {
  const auto t0 = std::chrono::steady_clock::now();
  ValidationResult out;
  const bool was_training = model.training();
  model.train(false);
  try {
    for (const Chain& c : chains_) {
      const Af2Outputs o = model.predict(c.features, num_recycles_, device, {},
                                           {.recycle_states = false, .representations = false, .pair_logits = false});
      const Tensor* pos = nullptr;
      for (const auto& [key, t] : o)
        if (key == "final_atom_positions") pos = &t;
      FC_CHECK(pos != nullptr, "validation: the model gave no final_atom_positions");
      const Tensor x = pos->to(Device::cpu()).contiguous();
      FC_CHECK(x.dim() == 3 && x.size(0) == static_cast<int64_t>(c.reference.size()), "validation: chain ", c.name,
               ": predicted positions ", x.shape().str(), " for ", c.reference.size(), " residues");
      const std::vector<float> v = x.to_vector();
      std::vector<Vec3d> pred;
      for (size_t r = 0; r < c.reference.size(); ++r) {
        const float* p = v.data() + (r * 37 + 1) * 3;
        pred.push_back({p[0], p[1], p[2]});
      }
      out.chains.push_back({c.name, structure_metrics(pred, c.reference, c.mask)});
    }
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  for (const ValidationChainMetrics& c : out.chains) {
    out.lddt_ca += c.metrics.lddt_ca / static_cast<double>(out.chains.size());
    out.gdt_ts += c.metrics.gdt_ts / static_cast<double>(out.chains.size());
    out.rmsd_ca += c.metrics.rmsd_ca / static_cast<double>(out.chains.size());
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::string Af2Validator::json_fields(const ValidationResult& r) {
  std::ostringstream s;
  s << ", \"val_lddt_ca\": " << num(r.lddt_ca) << ", \"val_gdt_ts\": " << num(r.gdt_ts)
    << ", \"val_rmsd_ca\": " << num(r.rmsd_ca) << ", \"val_seconds\": " << num(r.seconds);
  for (const ValidationChainMetrics& c : r.chains)
    s << ", " << json_string("val_lddt_ca/" + c.chain) << ": " << num(c.metrics.lddt_ca) << ", "
      << json_string("val_gdt_ts/" + c.chain) << ": " << num(c.metrics.gdt_ts) << ", "
      << json_string("val_rmsd_ca/" + c.chain) << ": " << num(c.metrics.rmsd_ca);
  return s.str();
}

std::string Af2Validator::summary(const ValidationResult& r) {
  std::ostringstream s;
  s.precision(4);
  s << "validation (" << r.chains.size() << " chains, " << r.seconds << " s): lDDT-Cα " << r.lddt_ca << " GDT-TS "
    << r.gdt_ts << " Cα-RMSD " << r.rmsd_ca << " Å";
  for (const ValidationChainMetrics& c : r.chains)
    s << " | " << c.chain << " " << c.metrics.lddt_ca << " / " << c.metrics.gdt_ts << " / " << c.metrics.rmsd_ca;
  return s.str();
}

}  // namespace foldcore::af2
