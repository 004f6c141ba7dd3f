// Validation of `foldcore train`: the model predicts held-out chains of the feature store and the
// predictions are scored against the true structures with lDDT-Cα, GDT-TS and Cα-RMSD
// (structure_metrics.h), per chain and as the mean over the chains.
//
// Inputs per chain, prepared once when the validator is built (they do not change during a run):
// the training sample of the WHOLE chain (make_training_sample with crop_size = the chain's
// length, no spatial crop, no MSA block deletion; cluster sampling, masked-MSA corruption and the
// extra-MSA crop as in training, from a fixed SampleKey{seed, 0, i} for the i-th validation chain,
// so every validation of a run sees the same inputs). The model runs in eval mode (no dropout)
// through AlphaFold::predict with data.max_recycles recycling iterations (the model's full
// recycling), and is put back in its previous mode afterwards; no random number is drawn, so a
// validation does not change the training that follows it. Scored: the predicted Cα
// (final_atom_positions, atom37 slot 1) against the chain's observed Cα.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "data_pipeline/training/feature_store.h"
#include "data_pipeline/training/training_sample.h"
#include "models/alphafold/training/structure_metrics.h"

namespace foldcore::af2 {

class AlphaFold;
class Af2Features;

struct ValidationChainMetrics {
  std::string chain;
  StructureMetrics metrics;
};

struct ValidationResult {
  double lddt_ca = 0, gdt_ts = 0, rmsd_ca = 0;  // means over the chains
  std::vector<ValidationChainMetrics> chains;
  double seconds = 0;
};

class Af2Validator {
 public:
  // Reads `chains` (names in the store) and prepares their inputs. Throws foldcore::Error naming
  // the store and the chain when a chain is absent or has no observed Cα.
  Af2Validator(const data::FeatureStoreReader& reader, const std::vector<std::string>& chains,
               const data::TrainingSampleConfig& data, uint64_t seed);
  ~Af2Validator();

  // Predicts and scores every chain.
  ValidationResult run(AlphaFold& model, Device device) const;

  // The JSON members of a result for metrics.jsonl (", \"val_lddt_ca\": …" including per-chain
  // "val_lddt_ca/<chain>" …), and a one-line summary for the progress log.
  static std::string json_fields(const ValidationResult& r);
  static std::string summary(const ValidationResult& r);

 private:
  struct Chain;
  std::vector<Chain> chains_;
  int64_t num_recycles_ = 0;
};

}  // namespace foldcore::af2
