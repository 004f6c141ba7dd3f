// Rigid-body geometry of the AlphaFold2 structure module (suppl. 1.8): rotations, unit
// quaternions (w, x, y, z), rigid transforms T = (R, t) acting as x ↦ R·x + t, and AF2's
// quaternion backbone update (Alg. 23).
//
// Plain fp32 host math on Tensors (any device in, CPU f32 out): the structure module's geometry
// runs in fp32 whatever the network's dtype. These functions record no autograd graph; the
// differentiable parts of the structure module (IPA, its frame application) use autograd ops on
// the rotation/translation tensors produced here (see ipa.h).
//
// Shapes: "B…" is a batch shape; rot [B…, 3, 3] holds R[i][j] row-major (columns = the frame's
// axes e1, e2, e3), trans [B…, 3], quat [B…, 4].
#pragma once

#include "core/tensor.h"

namespace foldcore::af2 {

struct Rigid {
  Tensor rot;    // [B…, 3, 3] f32 CPU
  Tensor trans;  // [B…, 3]    f32 CPU

  Shape batch_shape() const;
  static Rigid identity(const Shape& batch);
};

// A contiguous f32 CPU copy (or the tensor itself when it already is one).
Tensor host_f32(const Tensor& t);

// ---------------------------------------------------------------- quaternions
// q / |q| over the last axis.
Tensor normalize_quat(const Tensor& quat);
// Rotation of a unit quaternion (w, x, y, z) [B…, 4] → [B…, 3, 3]:
//   R = [[w²+x²−y²−z², 2(xy−wz),    2(xz+wy)   ],
//        [2(xy+wz),    w²−x²+y²−z², 2(yz−wx)   ],
//        [2(xz−wy),    2(yz+wx),    w²−x²−y²+z²]]
Tensor quat_to_rot(const Tensor& quat);
// Unit quaternion of a rotation (Shepperd's method: the largest of w², x², y², z² is taken from
// the trace, the rest from the off-diagonals; sign chosen so the largest component is positive).
Tensor rot_to_quat(const Tensor& rot);
// Hamilton product a ⊗ b, [B…, 4] each.
Tensor quat_multiply(const Tensor& a, const Tensor& b);
// q ⊗ (0, v): v [B…, 3] a pure-vector quaternion (AF2 quat_multiply_by_vec).
Tensor quat_multiply_by_vec(const Tensor& quat, const Tensor& vec);

// ---------------------------------------------------------------- rigid transforms
// a ∘ b: x ↦ R_a (R_b x + t_b) + t_a. a's batch shape must be a prefix of b's (a broadcasts over
// b's trailing batch axes, e.g. backbone [N] ∘ rigid groups [N, 8]).
Rigid compose(const Rigid& a, const Rigid& b);
// a⁻¹: x ↦ Rᵀ(x − t).
Rigid invert(const Rigid& a);
// R·x + t for points x [B…, E…, 3] (the rigid's batch shape B… a prefix of x's leading axes).
Tensor apply(const Rigid& a, const Tensor& points);
// Rᵀ(x − t), same shapes as apply.
Tensor apply_inverse(const Rigid& a, const Tensor& points);
// t ↦ s·t (AF2 scale_translation: internal units → Å with s = position_scale).
Rigid scale_translation(const Rigid& a, float s);
// AF2 Alg. 21 rigidFrom3Points(x1, x2, x3), each [B…, 3]: e1 = (x3−x2)/|x3−x2|,
// u2 = (x1−x2) − e1·(e1ᵀ(x1−x2)), e2 = u2/|u2|, e3 = e1 × e2, R = (e1 e2 e3), t = x2.
// Backbone frames: (x1, x2, x3) = (N, CA, C). eps (1e-8) guards the norms of degenerate input.
Rigid rigid_from_3_points(const Tensor& x1, const Tensor& x2, const Tensor& x3, float eps = 1e-8f);
// [B…, 4, 4] homogeneous matrices [[R, t], [0 0 0 1]] ↔ Rigid.
Tensor rigid_to_4x4(const Rigid& a);
Rigid rigid_from_4x4(const Tensor& m);

// ---------------------------------------------------------------- quaternion backbone frames
// The structure module's backbone state: unit quaternion + translation (AF2 QuatAffine).
struct QuatRigid {
  Tensor quat;   // [B…, 4] unit (w, x, y, z)
  Tensor trans;  // [B…, 3]

  static QuatRigid identity(const Shape& batch);  // (1, 0, 0, 0), 0
  Rigid to_rigid() const { return {quat_to_rot(quat), trans}; }
  // [B…, 7]: (w, x, y, z, t·scale) — AF2's affine tensor, the structure module's "frames" output.
  Tensor to_tensor7(float trans_scale = 1.f) const;
};

// AF2 Alg. 23 / QuatAffine.pre_compose: update [B…, 6] = (b, c, d, tx, ty, tz);
//   q' = normalize(q + q ⊗ (0, b, c, d)),  t' = t + R(q)·(tx, ty, tz)
// (the translation update is rotated by the OLD rotation).
QuatRigid pre_compose(const QuatRigid& a, const Tensor& update);

}  // namespace foldcore::af2
