// Training data contract: one protein chain as the feature store keeps it (TrainingChain), and the
// per-(epoch, sample) transform that turns it into AlphaFold2 training features and labels.
//
//   mmCIF + alignment dir ──training_chain_from_mmcif──▶ TrainingChain ──feature store (HDF5)──▶
//   TrainingChain ──make_training_sample(config, key)──▶ FeatureDict (model inputs + labels)
//
// The store (feature_store.h) holds only what is fixed per chain: the sequence, the observed atoms,
// the MSA and deletion matrix, and the featurised template hits. Everything random (crop, MSA
// cluster sampling, BERT masking, recycling count, template choice) happens in
// make_training_sample, seeded by (seed, epoch, sample index), so a sample is reproducible without
// storing it and differs between epochs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data_pipeline/features/features.h"
#include "data_pipeline/formats/msa.h"
#include "data_pipeline/structure/structure.h"
#include "data_pipeline/features/templates.h"

namespace foldcore::data {

// One protein chain's training inputs before sampling. N = residues of the chain's full sequence
// (seqres: unobserved residues are kept with mask 0), S = MSA rows (row 0 is the chain's own
// sequence), T = featurised template hits (may be 0).
struct TrainingChain {
  std::string name;               // "<pdb id>_<author chain id>", e.g. "1abc_A" (lower-case id)
  std::string sequence;           // N one-letter codes; modified residues mapped to their parent, else X
  std::vector<int32_t> aatype;    // [N] AlphaFold restype order (0..19, 20 = X)
  std::vector<int32_t> residue_index;     // [N] 0..N-1 (seqres positions)
  std::vector<float> all_atom_positions;  // [N,37,3] Å, 0 where absent
  std::vector<float> all_atom_mask;       // [N,37] 1 where the atom was observed
  double resolution = 0.0;        // Å; 0 when the entry has none (NMR, predictions)
  std::string release_date;       // YYYY-MM-DD (may be empty for non-PDB sources)
  bool is_distillation = false;   // self-distillation / predicted structure
  MsaFeatures msa;                // [S,N] HHblits codes + deletion counts; depth ≥ 1
  std::vector<TemplateFeatures> templates;  // [T] featurised hits, best first

  int64_t num_res() const { return static_cast<int64_t>(aatype.size()); }
  // Throws foldcore::Error naming the chain and the inconsistent field (sizes, codes, masks).
  void validate() const;
};

// How training_chain_from_mmcif reads a chain's alignments and templates.
struct TrainingChainOptions {
  // Template hits: <alignment_dir>/pdb70_hits.hhr featurised against mmCIFs in this folder
  // (AlphaFold's TemplateHitFeaturizer, templates.h). Empty: no templates.
  std::string template_mmcif_dir;
  // Templates released on or after the chain's own release date are dropped (no time travel);
  // this further cap applies when non-empty (YYYY-MM-DD).
  std::string max_template_date;
  int max_template_hits = 20;
  std::string kalign_binary = "kalign";
  // Per-file row caps as AlphaFold's monomer pipeline (uniref90 10000, mgnify 501; 0 = no cap).
  size_t uniref_max_hits = 10000;
  size_t mgnify_max_hits = 501;
};

// The chain with author chain id `auth_chain_id` of `structure` (the first model, as read) as a
// TrainingChain. The sequence is the entity's seqres; atoms of observed residues go to their atom37
// slots (MSE's SE into SD, as AlphaFold's mmcif parsing does). Alignments are read from
// `alignment_dir` with AlphaFold/OpenFold file names (uniref90_hits.{a3m,sto},
// bfd_uniclust_hits.a3m or bfd_uniref_hits.a3m, mgnify_hits.{a3m,sto}, uniprot_hits.sto is
// ignored for monomers) and merged in AlphaFold's order with deduplication; an empty or absent
// `alignment_dir` gives a query-only MSA. An alignment whose query row differs from the chain's
// sequence is an error (naming the file). Throws foldcore::Error naming the structure, the chain
// and the problem (not a protein chain, no such chain, no observed residues).
TrainingChain training_chain_from_mmcif(const Structure& structure, const std::string& auth_chain_id,
                                        const std::string& alignment_dir, const TrainingChainOptions& options = {});

// The reproducibility key of one sample. Two calls with equal keys and config give identical
// samples on every platform; any field changed gives an independent draw.
struct SampleKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t sample_index = 0;  // position in the epoch's (unsharded) order
};

}  // namespace foldcore::data
