// The structure module's geometry as autograd functions (AF2 suppl. Alg. 23, Alg. 24 lines
// 10–12, all_atom.frames_and_literature_positions_to_atom14_pos), so that the training losses'
// gradients w.r.t. backbone frames, rigid-group frames and atom positions flow back into
// affine_update, the angle ResNet and (through the translations) IPA.
//
// Each op runs on its inputs' device (kernels/rigid.h: CPU reference and CUDA kernels sharing
// kernels/rigid_math.h), so a training step's structure module neither copies to the host nor
// waits for the device. Each forward is the fp32 math of rigid.h / all_atom.h (the CPU gives the
// same bits as those); each backward is the hand-derived chain rule, evaluated in double per
// residue and rounded once to fp32.
//
// Shapes: B… a batch shape; quat [B…, 4] unit (w, x, y, z); trans [B…, 3]; rot [B…, 3, 3] row-major
// R[i][j] (columns = the frame's axes).
#pragma once

#include "autograd/autograd.h"
#include "core/tensor.h"

namespace foldcore::af2 {

using autograd::Variable;

// A backbone frame with graph handles (AF2 QuatAffine): quat [B…, 4], trans [B…, 3].
struct QuatFrameVar {
  Variable quat;
  Variable trans;
};

// A rigid transform with graph handles: rot [B…, 3, 3], trans [B…, 3].
struct RigidVar {
  Variable rot;
  Variable trans;
};

// The residue types of a chain and AlphaFold2's per-type rigid-group tables (residue_constants),
// on one device, for torsion_angles_to_frames_var and frames_to_atom14_positions_var: made once
// per structure-module forward (the tables go to the device as small queued copies, no wait).
struct ResidueGeometry {
  Tensor restype;    // [N] i64, values checked in [0, 21)
  Tensor frames;     // [21, 8, 4, 4] default frames of the rigid groups
  Tensor group;      // [21, 14] i32: atom14 slot → rigid group
  Tensor positions;  // [21, 14, 3] literature positions in their group's frame (Å)
  Tensor mask;       // [21, 14] atom14 slot exists

  // aatype [N] integer (any device; read on the host once).
  static ResidueGeometry of(const Tensor& aatype, int64_t n, Device device);
};

// AF2 Alg. 23 / QuatAffine.pre_compose, differentiable in all three inputs:
//   update [B…, 6] = (b, c, d, tx, ty, tz);  q̃ = q + q ⊗ (0, b, c, d) = q ⊗ (1, b, c, d),
//   q' = q̃ / |q̃|,  t' = t + R(q)·(tx, ty, tz)  (the translation is rotated by the OLD rotation).
// Backward: dq̃ = (g_q' − q'(q'·g_q'))/|q̃|; d(1, b, c, d) = q̄ ⊗ dq̃ (left multiplication's
// transpose is multiplication by the conjugate); dq = dq̃ ⊗ (1, −b, −c, −d) + ∂R(q)/∂q : (g_t' ⊗ u_t);
// du_t = R(q)ᵀ g_t'; dt = g_t'. The structure module passes q detached (AF2's stop_gradient on
// rotations), so in training dq is not needed; it is implemented (and tested) all the same.
QuatFrameVar pre_compose_var(const QuatFrameVar& frame, const Variable& update);

// R(q) of rigid.h's quat_to_rot (the quadratic form, exact for unit q): [B…, 4] → [B…, 3, 3].
Variable quat_to_rot_var(const Variable& quat);

// AF2 Alg. 24 lines 10–12 (all_atom.torsion_angles_to_frames), differentiable in the backbone
// frame (rot [N, 3, 3], trans [N, 3], Å) and the angles [N, 7, 2] (sin, cos; used as given, not
// renormalised): group g's local frame L_g = D_g ∘ R_x(α_g) (D_g the literature frame, g = 1..7 use
// angle g − 1), C_g = L_g for g ≤ 4, C_g = C_{g−1} ∘ L_g for g = 5, 6, 7 (χ2..χ4), global G_g = B ∘ C_g.
// Returns the 8 global frames: rot [N, 8, 3, 3], trans [N, 8, 3].
RigidVar torsion_angles_to_frames_var(const ResidueGeometry& geo, const RigidVar& backbone, const Variable& angles);
RigidVar torsion_angles_to_frames_var(const Tensor& aatype, const RigidVar& backbone, const Variable& angles);

// all_atom.frames_and_literature_positions_to_atom14_pos: x[n, a] = R_g p_a + t_g with g the
// atom's rigid group and p_a its literature position; absent slots are 0 (no gradient).
// frames rot [N, 8, 3, 3], trans [N, 8, 3] → [N, 14, 3].
Variable frames_to_atom14_positions_var(const ResidueGeometry& geo, const RigidVar& frames);
Variable frames_to_atom14_positions_var(const Tensor& aatype, const RigidVar& frames);

}  // namespace foldcore::af2
