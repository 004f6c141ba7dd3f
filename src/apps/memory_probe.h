// The measurement the preflight's memory estimate (memory_estimate.h) is fitted to and checked
// against: one prediction at model_1_ptm widths with 1 Evoformer + 1 extra-MSA block (a block's
// activations die before the next one starts) on a synthetic target (synthetic_target.h), CPU
// tensors; measured is the allocator's peak above parameters and features. Used by
// tests/apps/test_memory_estimate, tests/dist/test_dap_memory_estimate_mpi (one DAP rank) and
// bench/bench_dap_predict_memory.
#pragma once

#include <cstdint>
#include <string>

#include "apps/memory_estimate.h"
#include "models/alphafold/parallel/model_parallel.h"

namespace foldcore::apps {

struct MemoryProbe {
  int64_t n_res = 128;
  int64_t chunk = 16;     // Af2Config::chunk_size
  int64_t clusters = 16;  // MSA clusters besides the template rows
  int64_t extra = 16;     // extra MSA rows
  int64_t recycles = 0;
  int64_t templates = 0;  // computed templates (of max_templates slots)
  std::string precision = "fp32";
  bool pair_logits = true;  // the pair logits kept (--result_arrays full) or not (summary)
};

struct MemoryProbeResult {
  double activation_bytes = 0;  // allocator peak above parameters and features
  double feature_bytes = 0;     // what the features hold
  double pair_unit_bytes = 0;   // one fp32 pair representation, N²·c_z·4
  MemoryEstimate estimate;      // for the same prediction (one rank's under DAP)
};

af2::Af2Config memory_probe_config(const MemoryProbe& probe);

// mp: the model parallelism the prediction runs under (DAP: this rank's peak, and the estimate
// for mp.dap_size() ranks); inactive: one process.
MemoryProbeResult measure_predict_memory(const MemoryProbe& probe, const af2::ModelParallel& mp = {});

}  // namespace foldcore::apps
