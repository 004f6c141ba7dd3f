// AlphaFold2 structure module (suppl. Alg. 20), official parameter names under
// "structure_module/": single_layer_norm, initial_projection, pair_layer_norm and one
// fold_iteration whose weights the num_layers (8) iterations share:
//   invariant_point_attention (ipa.h), attention_layer_norm, transition, transition_1,
//   transition_2, transition_layer_norm, affine_update, rigid_sidechain/{input_projection,
//   input_projection_1, resblock1, resblock2, resblock1_1, resblock2_1, unnormalized_angles}.
//
// Per iteration l (AF2 FoldIteration):
//   s ← LN(s + IPA(s, z, T));  s ← LN(s + transition(s))                       (Alg. 20 l. 6–9)
//   T ← T ∘ (quaternion (1, b, c, d) normalised, t) with (b, c, d, t) = affine_update(s)   (Alg. 23)
//   α̃ = angle ResNet(s, s_initial) [N, 7, 2], α = α̃/|α̃|                                    (Alg. 24)
//   frames of the 8 rigid groups and atom14 positions from T (scaled to Å) and α (all_atom.h)
//   T's rotation is detached before the next iteration (AF2 stop_gradient on rotations): the
//   next iteration's IPA and quaternion update see it as a constant; its translation keeps its graph.
// Frames are kept in internal units (Å/10); outputs are in Å (position_scale 10).
//
// Everything is differentiable: the single representation path (LNs, linears, IPA, transition,
// angle ResNet, angle normalisation) through autograd ops, and the geometry — quaternion update,
// rotation matrices, torsions → rigid-group frames → atom14 — through the autograd functions of
// structure_geometry.h, whose forwards are the host math of rigid.h / all_atom.h (so inference is
// unchanged). The per-layer graph handles (frames_vars, positions_vars, sidechain_frames_vars,
// angles_vars, …) are what a training step hands the loss gradients to.
#pragma once

#include "models/alphafold/model/config.h"
#include "models/alphafold/structure/ipa.h"
#include "models/alphafold/params/param_table.h"
#include "models/alphafold/structure/rigid.h"
#include "models/alphafold/structure/structure_geometry.h"
#include "nn/layers.h"

namespace foldcore::af2 {

struct StructureModuleInputs {
  Variable single;  // [N, c_s] Evoformer single representation (before single_layer_norm)
  Variable pair;    // [N, N, c_z] Evoformer pair representation (before pair_layer_norm)
  Tensor aatype;    // [N] integer restypes 0..20
  Tensor seq_mask;  // [N] f32; undefined = all ones
  // From the features (AF2 make_atom14_masks); undefined = derived from aatype.
  Tensor residx_atom37_to_atom14;  // [N, 37] integer
  Tensor atom37_atom_exists;       // [N, 37] f32
  // Inference under DAP (pair_rows.h): pair holds this rank's rows of the padded pair, and the
  // invariant point attention computes this rank's query rows from them (every rank returns the
  // same outputs).
  const ParallelGroup* pair_split = nullptr;
};

struct StructureModuleOutputs {
  // One entry per iteration, stacked on axis 0 (L = num_layers):
  Tensor frames;               // [L, N, 7]  quaternion (w, x, y, z) + translation (Å)
  Tensor sidechain_frames;     // [L, N, 8, 4, 4] rigid-group frames (Å)
  Tensor positions;            // [L, N, 14, 3] atom14 (Å)
  Tensor angles;               // [L, N, 7, 2] normalised (sin, cos)
  Tensor unnormalized_angles;  // [L, N, 7, 2]
  Tensor states;               // [L, N, c_s]
  // Per-iteration graph handles (the training losses' gradients go in here):
  std::vector<Variable> angles_vars, unnormalized_angles_vars;  // [N, 7, 2]
  std::vector<QuatFrameVar> frames_vars;    // backbone quat [N, 4], trans [N, 3] (internal units, Å/10)
  std::vector<RigidVar> sidechain_frames_vars;  // rot [N, 8, 3, 3], trans [N, 8, 3] (Å)
  std::vector<Variable> positions_vars;     // atom14 [N, 14, 3] (Å)
  Variable single;                // [N, c_s] final activation (AF2 representations/structure_module)
  QuatRigid final_frames;         // internal units (Å/10)
  Tensor final_atom14_positions;  // [N, 14, 3] (Å)
  Tensor final_atom_positions;    // [N, 37, 3] (Å)
  Tensor final_atom_mask;         // [N, 37]
};

class AngleResnet : public nn::Module {
 public:
  AngleResnet(nn::Scope scope, const StructureModuleConfig& cfg);
  // s, s_initial [N, c_s] → unnormalised angles [N, 7, 2].
  Variable forward(const Variable& s, const Variable& s_initial) const;
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  nn::Linear input_projection_, input_projection_1_;
  std::vector<std::unique_ptr<nn::Linear>> resblock1_, resblock2_;
  nn::Linear unnormalized_angles_;
};

class StructureModule : public nn::Module {
 public:
  StructureModule(nn::Scope scope, const StructureModuleConfig& cfg);
  StructureModuleOutputs forward(const StructureModuleInputs& in) const;
  // key_prefix: "structure_module".
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix = "structure_module",
                      int64_t stack_index = -1) const;

 private:
  StructureModuleConfig cfg_;
  nn::LayerNorm single_layer_norm_;
  nn::Linear initial_projection_;
  nn::LayerNorm pair_layer_norm_;
  // fold_iteration (shared by every iteration)
  InvariantPointAttention ipa_;
  nn::Dropout ipa_dropout_;
  nn::LayerNorm attention_layer_norm_;
  std::vector<std::unique_ptr<nn::Linear>> transition_;
  nn::Dropout transition_dropout_;
  nn::LayerNorm transition_layer_norm_;
  nn::Linear affine_update_;
  AngleResnet rigid_sidechain_;
};

}  // namespace foldcore::af2
