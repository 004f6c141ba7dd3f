// The training-step fixture of ../shared/af2/ref/train (OpenFold, fp32) as loss inputs:
// batch.npz's last recycling slice as the labels, outputs.npz as the model outputs. The side-chain
// frames are not in outputs.npz; they are rebuilt from the final layer's backbone frame and torsion
// angles with the model's own torsion_angles_to_frames (Alg. 24), as the structure module does.
#pragma once

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/json_text.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/structure/all_atom.h"
#include "models/alphafold/losses/losses_total.h"
#include "models/alphafold/structure/rigid.h"
#include "test_util.h"

namespace foldcore::af2 {

inline std::string train_fixture_dir() { return testing::shared_dir() + "/af2/ref/train"; }

// Every array of batch.npz at recycling iteration `r` (the last axis); r = -1 is the last.
inline std::map<std::string, Tensor> train_batch_arrays(int64_t r = -1) {
  const data::NpzReader npz(train_fixture_dir() + "/batch.npz");
  std::map<std::string, Tensor> out;
  for (const auto& name : npz.names()) {
    const Tensor t = npz.read(name).to_tensor();
    const int64_t idx = r < 0 ? t.size(-1) + r : r;
    out[name] = t.select(-1, idx).contiguous();
  }
  return out;
}

inline Af2LossOutputs train_fixture_outputs(const Tensor& aatype) {
  const data::NpzReader npz(train_fixture_dir() + "/outputs.npz");
  auto get = [&](const std::string& name) { return npz.read(name).to_tensor(); };
  Af2LossOutputs o;
  o.sm_frames = get("sm_frames");
  o.sm_angles = get("sm_angles");
  o.sm_unnormalized_angles = get("sm_unnormalized_angles");
  const int64_t nl = o.sm_frames.size(0);
  const Tensor positions = get("sm_positions");
  o.atom14_positions = positions.select(0, nl - 1).contiguous();
  o.final_atom_positions = get("final_atom_positions");
  o.distogram_logits = get("distogram_logits");
  o.masked_msa_logits = get("masked_msa_logits");
  o.lddt_logits = get("lddt_logits");
  o.experimentally_resolved_logits = get("experimentally_resolved_logits");
  o.tm_logits = get("tm_logits");
  // Final-layer backbone (quaternion, Å) → 8 rigid-group frames (Alg. 24 lines 10–12).
  const Tensor last = o.sm_frames.select(0, nl - 1).contiguous();
  const Rigid backbone{quat_to_rot(last.narrow(-1, 0, 4).contiguous()), last.narrow(-1, 4, 3).contiguous()};
  const Rigid groups = torsion_angles_to_frames(aatype, backbone, o.sm_angles.select(0, nl - 1).contiguous());
  o.sidechain_frames = rigid_to_4x4(groups);
  return o;
}

}  // namespace foldcore::af2
