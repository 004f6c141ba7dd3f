// The processed AlphaFold2 feature batch (model inputs after the data pipeline: MSA clustering,
// masking, extra-MSA sampling), read from an .npz in the layout of the shared parity fixture
// (/work/shared/af2/ref/features.npz): AlphaFold's names and per-example shapes with the
// RECYCLING AXIS LAST — array[..., r] feeds recycling iteration r, since MSA sampling and
// masking differ per iteration.
//
// Symbols: N residues, S MSA rows (clusters), E extra-MSA rows, T templates.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace foldcore::af2 {

// One iteration's features (recycling axis removed). Integer features are i64, the rest f32,
// all contiguous CPU tensors. Template tensors are undefined when the file has no templates.
struct Af2Batch {
  Tensor aatype;                        // i64 [N] (0..20, 20 = unknown)
  Tensor residue_index;                 // i64 [N]
  Tensor seq_mask;                      // f32 [N]
  Tensor target_feat;                   // f32 [N, 22]
  Tensor msa_feat;                      // f32 [S, N, 49]
  Tensor msa_mask;                      // f32 [S, N]
  Tensor extra_msa;                     // i64 [E, N] (0..22)
  Tensor extra_msa_mask;                // f32 [E, N]
  Tensor extra_has_deletion;            // f32 [E, N]
  Tensor extra_deletion_value;          // f32 [E, N]
  Tensor template_aatype;               // i64 [T, N]
  Tensor template_all_atom_positions;   // f32 [T, N, 37, 3] (Å)
  Tensor template_all_atom_mask;        // f32 [T, N, 37]
  Tensor template_mask;                 // f32 [T]
  Tensor template_pseudo_beta;          // f32 [T, N, 3]
  Tensor template_pseudo_beta_mask;     // f32 [T, N]
  Tensor template_torsion_angles_sin_cos;      // f32 [T, N, 7, 2]
  Tensor template_alt_torsion_angles_sin_cos;  // f32 [T, N, 7, 2]
  Tensor template_torsion_angles_mask;         // f32 [T, N, 7]
  Tensor atom14_atom_exists;            // f32 [N, 14]
  Tensor atom37_atom_exists;            // f32 [N, 37]
  Tensor residx_atom14_to_atom37;       // i64 [N, 14]
  Tensor residx_atom37_to_atom14;       // i64 [N, 37]
  // Present in training/evaluation feature files; undefined otherwise.
  Tensor bert_mask;                     // f32 [S, N]
  Tensor true_msa;                      // i64 [S, N]

  int64_t num_res() const { return aatype.size(0); }
  int64_t num_msa() const { return msa_feat.size(0); }
  int64_t num_extra_msa() const { return extra_msa.size(0); }
  int64_t num_templates() const { return template_aatype.defined() ? template_aatype.size(0) : 0; }
  bool has_templates() const { return num_templates() > 0; }
};

// Every feature of a file, recycling axis last, checked for mutually consistent shapes.
class Af2Features {
 public:
  // Reads and checks `path`. Errors (foldcore::Error naming the file and the feature): unreadable
  // or corrupt archive, a required feature missing, a wrong rank/extent (N, S, E, T must agree
  // across features; fixed extents such as 37, 14, 7, 3 must match), recycling extents that
  // differ, a non-numeric dtype. Arrays the model does not use are ignored.
  static Af2Features read_npz(const std::string& path);
  // The same checks on arrays already in memory (a training sample from the loader); `origin`
  // names them in errors. Arrays the model does not use are ignored.
  static Af2Features from_arrays(const std::map<std::string, Tensor>& arrays, const std::string& origin);

  int64_t num_iterations() const { return num_iterations_; }
  // Features of iteration r (0 ≤ r < num_iterations()), freshly sliced contiguous tensors.
  Af2Batch iteration(int64_t r) const;
  // The raw arrays (recycling axis last), by AF2 name.
  const std::map<std::string, Tensor>& arrays() const { return arrays_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int64_t num_iterations_ = 0;
  std::map<std::string, Tensor> arrays_;
};

// The required features (always present) and the template features (all or none).
const std::vector<std::string>& af2_required_features();
const std::vector<std::string>& af2_template_features();

}  // namespace foldcore::af2
