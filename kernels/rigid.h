// Rigid-body geometry ops of the AlphaFold2 structure module (suppl. 1.8), on the tensors' device,
// so that the structure module's per-layer geometry and its backward never wait for the device's
// queue (on a GPU every host copy drains it). fp32 in and out; the per-residue math is
// kernels/rigid_math.h, shared by both backends: forwards in fp32, backwards in double rounded
// once to fp32. Outputs are passed in (contiguous f32, written over); restype tensors are i32 or
// i64 with values in [0, T) (the CPU reference checks them; the CUDA kernels read a bad value as
// T − 1, so the caller validates them on the host, where they come from).
//
// Layouts: quat [B, 4] (w, x, y, z), unit; rot [B, 3, 3] row-major R[i][j]; trans [B, 3];
// B is any batch (all leading axes flattened).
#pragma once

#include "core/tensor.h"

namespace foldcore::ops {

// rot[b] = R(quat[b]) (the quadratic form rigid_math.h's quat_to_rot_elem).
void quat_to_rot(const Tensor& quat, const Tensor& rot);
// dquat[b] = (∂R/∂q)ᵀ : drot[b].
void quat_to_rot_backward(const Tensor& quat, const Tensor& drot, const Tensor& dquat);

// AF2 Alg. 23: update [B, 6] = (b, c, d, tx, ty, tz);
//   quat_out = normalize(q + q ⊗ (0, b, c, d)),  trans_out = t + R(q)·(tx, ty, tz).
void quat_pre_compose(const Tensor& quat, const Tensor& trans, const Tensor& update, const Tensor& quat_out,
                      const Tensor& trans_out);
// Gradients of quat and update from those of quat_out and trans_out (trans's gradient is
// dtrans_out itself). dquat may be undefined (the structure module stops the rotation's gradient).
void quat_pre_compose_backward(const Tensor& quat, const Tensor& update, const Tensor& dquat_out,
                               const Tensor& dtrans_out, const Tensor& dquat, const Tensor& dupdate);

// AF2 Alg. 24 lines 10–12 (all_atom.torsion_angles_to_frames), per residue n of type a = restype[n]
// with default frames D = frames[a] ([T, 8, 4, 4], [R t; 0 1]): L_g = D_g ∘ R_x(α_g), α_0 = 0, α_g =
// torsion g − 1 given as angles[n, g − 1] = (sin, cos) (used as given); C_g = L_g (g ≤ 4), C_g =
// C_{g−1} ∘ L_g (g = 5..7, χ2..χ4); out_g = (rot[n], trans[n]) ∘ C_g.
// rot [N, 3, 3], trans [N, 3], angles [N, 7, 2] → out_rot [N, 8, 3, 3], out_trans [N, 8, 3].
void torsion_frames(const Tensor& restype, const Tensor& frames, const Tensor& rot, const Tensor& trans,
                    const Tensor& angles, const Tensor& out_rot, const Tensor& out_trans);
// Gradients of rot, trans, angles (each may be undefined when not needed).
void torsion_frames_backward(const Tensor& restype, const Tensor& frames, const Tensor& rot, const Tensor& angles,
                             const Tensor& dout_rot, const Tensor& dout_trans, const Tensor& drot,
                             const Tensor& dtrans, const Tensor& dangles);

// all_atom.frames_and_literature_positions_to_atom14_pos: per residue n of type a and point k,
// out[n, k] = R_{n,g} p + t_{n,g} with g = group[a, k], p = positions[a, k], where mask[a, k] ≠ 0;
// else 0. group [T, K] i32, positions [T, K, 3], mask [T, K] f32; rot [N, G, 3, 3], trans [N, G, 3]
// → out [N, K, 3].
void frames_to_points(const Tensor& restype, const Tensor& group, const Tensor& positions, const Tensor& mask,
                      const Tensor& rot, const Tensor& trans, const Tensor& out);
// drot, dtrans (overwritten): each group's sum over its points in point order (no atomics).
void frames_to_points_backward(const Tensor& restype, const Tensor& group, const Tensor& positions,
                               const Tensor& mask, const Tensor& dout, const Tensor& drot, const Tensor& dtrans);

// Rows of x [R, C] (C the last axis): y = x / n, n = √max(Σ_k x_k², eps) (AF2 l2_normalize; `norm`
// [R] keeps n for the backward).
void l2_normalize_rows(const Tensor& x, float eps, const Tensor& y, const Tensor& norm);
// dx = (dy − y (y·dy)) / n, or dy / n where the clamp is active (n² ≤ eps: a linear map).
void l2_normalize_rows_backward(const Tensor& y, const Tensor& norm, float eps, const Tensor& dy, const Tensor& dx);

// Row norms with an inner epsilon: y[r] = √(eps + Σ_k x[r, k]²) (IPA's point-value norms).
void norm_rows(const Tensor& x, float eps, const Tensor& y);
// dx[r, k] = dy[r] · x[r, k] / y[r].
void norm_rows_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx);

// y = softplus(x) = max(x, 0) + log1p(e^−|x|);  dx = dy · σ(x) = dy / (1 + e^−x).
void softplus_forward(const Tensor& x, const Tensor& y);
void softplus_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

}  // namespace foldcore::ops
