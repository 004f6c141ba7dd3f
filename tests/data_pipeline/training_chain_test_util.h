// Synthetic TrainingChains for the feature store and loader tests: valid (they pass
// TrainingChain::validate) and fully determined by (name, sizes, seed).
#pragma once

#include <cstdint>
#include <string>

#include "core/philox.h"
#include "data_pipeline/formats/msa.h"
#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/training/training_chain.h"

namespace foldcore::data {

inline TrainingChain synthetic_chain(const std::string& name, int64_t n, int64_t depth, int64_t num_templates,
                                     uint64_t seed) {
  uint64_t k = 0;
  auto bits = [&] { return philox_bits(seed, 7, k++); };
  auto uniform = [&] { return philox_uniform(seed, 7, k++); };
  TrainingChain c;
  c.name = name;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t a = static_cast<int32_t>(bits() % 21);
    c.aatype.push_back(a);
    c.sequence.push_back(rc::kRestypesWithX[static_cast<size_t>(a)]);
    c.residue_index.push_back(static_cast<int32_t>(i));
    for (int j = 0; j < 37; ++j) {
      const bool present = bits() % 3 != 0;
      c.all_atom_mask.push_back(present ? 1.0f : 0.0f);
      for (int d = 0; d < 3; ++d) c.all_atom_positions.push_back(present ? 100.0f * uniform() - 50.0f : 0.0f);
    }
  }
  c.resolution = 1.0 + static_cast<double>(bits() % 30) / 10.0;
  c.release_date = "20" + std::to_string(10 + bits() % 10) + "-0" + std::to_string(1 + bits() % 9) + "-15";
  c.msa.depth = depth;
  c.msa.num_columns = n;
  for (int64_t s = 0; s < depth; ++s)
    for (int64_t i = 0; i < n; ++i) {
      c.msa.msa.push_back(s == 0 ? hhblits_aa_to_id(c.sequence[static_cast<size_t>(i)]) : static_cast<int32_t>(bits() % 22));
      c.msa.deletion_matrix.push_back(s == 0 ? 0 : static_cast<int32_t>(bits() % 4 == 0 ? bits() % 5 : 0));
    }
  for (int64_t t = 0; t < num_templates; ++t) {
    TemplateFeatures tf;
    tf.domain_name = "9x" + std::to_string(t) + "a_B";
    tf.sequence = c.sequence;
    for (int64_t i = 0; i < n; ++i) {
      for (int j = 0; j < 22; ++j) tf.aatype.push_back(j == c.aatype[static_cast<size_t>(i)] ? 1.0f : 0.0f);
      for (int j = 0; j < 37; ++j) {
        tf.masks.push_back(static_cast<float>(bits() % 2));
        for (int d = 0; d < 3; ++d) tf.positions.push_back(uniform());
      }
    }
    tf.sum_probs = uniform() * 100.0f;
    c.templates.push_back(std::move(tf));
  }
  return c;
}

inline bool same_chain(const TrainingChain& a, const TrainingChain& b) {
  if (a.templates.size() != b.templates.size()) return false;
  for (size_t t = 0; t < a.templates.size(); ++t) {
    const TemplateFeatures &x = a.templates[t], &y = b.templates[t];
    if (x.domain_name != y.domain_name || x.sequence != y.sequence || x.aatype != y.aatype || x.masks != y.masks ||
        x.positions != y.positions || x.sum_probs != y.sum_probs)
      return false;
  }
  return a.name == b.name && a.sequence == b.sequence && a.aatype == b.aatype && a.residue_index == b.residue_index &&
         a.all_atom_positions == b.all_atom_positions && a.all_atom_mask == b.all_atom_mask &&
         a.resolution == b.resolution && a.release_date == b.release_date && a.is_distillation == b.is_distillation &&
         a.msa.depth == b.msa.depth && a.msa.num_columns == b.msa.num_columns && a.msa.msa == b.msa.msa &&
         a.msa.deletion_matrix == b.msa.deletion_matrix;
}

}  // namespace foldcore::data
