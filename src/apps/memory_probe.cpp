#include "apps/memory_probe.h"

#include <random>

#include "autograd/param_store.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/random.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/synthetic_target.h"

namespace foldcore::apps {

af2::Af2Config memory_probe_config(const MemoryProbe& probe) {
  af2::Af2Config c;
  c.num_evoformer_blocks = 1;
  c.num_extra_msa_blocks = 1;
  c.num_recycles = 0;
  c.chunk_size = probe.chunk;
  c.precision = probe.precision;
  // What synthetic_target's pipeline does: `clusters` clusters besides the template rows.
  c.max_msa_clusters = probe.clusters + c.templates.max_templates;
  c.max_extra_msa = probe.extra;
  af2::validate_af2_config(c);
  return c;
}

MemoryProbeResult measure_predict_memory(const MemoryProbe& probe, const af2::ModelParallel& mp) {
  const af2::Af2Config config = memory_probe_config(probe);
  const int64_t raw_rows = probe.clusters + probe.extra;
  autograd::ParamStore params(Device::cpu());
  Generator init(7);
  af2::AlphaFold model(nn::Scope{&params, &init, nullptr, ""}, config);
  model.train(false);
  params.finalize();
  if (mp.active()) model.set_model_parallel(mp);
  Allocator& alloc = default_allocator(Device::cpu());
  std::mt19937 g(42);
  const size_t before_features = alloc.stats().current;
  const af2::Af2Features features = af2::synthetic_target(
      {probe.n_res, raw_rows, probe.recycles, config.templates.max_templates, probe.clusters, probe.extra,
       probe.templates},
      g);
  MemoryProbeResult m;
  alloc.reset_peak();
  const size_t base = alloc.stats().current;
  m.feature_bytes = static_cast<double>(base - before_features);
  {
    // As `foldcore predict` runs it: without the recycled states (which it does not write).
    const af2::Af2Outputs out =
        model.predict(features, probe.recycles, Device::cpu(), {},
                      {.recycle_states = false, .representations = false, .pair_logits = probe.pair_logits});
    FC_CHECK(!out.empty(), "measure_predict_memory: the prediction returned nothing");
    m.activation_bytes = static_cast<double>(alloc.stats().peak - base);
  }
  m.pair_unit_bytes = static_cast<double>(probe.n_res * probe.n_res * config.c_z * 4);
  m.estimate = estimate_predict_memory(config, probe.n_res, raw_rows, probe.recycles + 1, params.num_elements(),
                                       probe.templates,
                                       pair_logits_on_device(Device::cpu(), probe.pair_logits ? "full" : "summary"),
                                       mp.dap_size());
  return m;
}

}  // namespace foldcore::apps
