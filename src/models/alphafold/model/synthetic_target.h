// A random AlphaFold2 target for benchmarks and memory tests: a random query with a synthetic MSA
// (row 0 = the query, other rows with 15% substitutions and 10% gaps, no deletions) and either no
// templates (one masked template slot) or `templates` synthetic ones (the query's sequence on a
// random chain, every backbone atom present), processed by AlphaFold's inference pipeline
// (data_pipeline/features/feature_processing.h) and read back as the model reads a feature file.
#pragma once

#include <cstdint>
#include <random>

#include "models/alphafold/model/features.h"

namespace foldcore::af2 {

struct SyntheticTargetOptions {
  int64_t num_res = 64;
  int64_t msa_rows = 128;         // raw MSA rows before clustering
  int64_t recycles = 0;           // the features hold recycles + 1 iterations
  int64_t max_templates = 4;      // template slots
  int64_t max_msa_clusters = 0;   // <= 0: the pipeline's default
  int64_t max_extra_msa = 0;      // <= 0: the pipeline's default
  int64_t templates = 0;          // synthetic templates (<= max_templates); 0: all slots masked
};

// Deterministic for a given generator state. Goes through a temporary .npz (removed before
// returning) so the features are exactly what `foldcore predict` would read.
Af2Features synthetic_target(const SyntheticTargetOptions& options, std::mt19937& g);

}  // namespace foldcore::af2
