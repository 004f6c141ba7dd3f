// Per-residue rigid-body math of kernels/rigid.h, shared by the CPU reference and the CUDA kernels
// (and by the model's host geometry, src/models/alphafold/structure/rigid.cpp, all_atom.cpp), so
// every backend evaluates the same expressions in the same order: the forwards in fp32 (the
// structure module's geometry is fp32), the backwards in double (hand-derived chain rules, rounded
// to fp32 once). Backends differ only by FMA contraction.
//
// Layouts: quaternion (w, x, y, z); rotation row-major r[3·i + j] = R[i][j] (columns = the frame's
// axes); a rigid's frame table row is a 4×4 homogeneous matrix [R t; 0 1], row-major, 16 floats.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace foldcore::ops::detail {

// y = R x.
template <typename T>
FOLDCORE_HD void rigid_rot_vec(const T* r, const T* x, T* y) {
  for (int i = 0; i < 3; ++i) y[i] = r[3 * i] * x[0] + r[3 * i + 1] * x[1] + r[3 * i + 2] * x[2];
}
// y = Rᵀ x.
template <typename T>
FOLDCORE_HD void rigid_rot_t_vec(const T* r, const T* x, T* y) {
  for (int i = 0; i < 3; ++i) y[i] = r[i] * x[0] + r[3 + i] * x[1] + r[6 + i] * x[2];
}
// c = a b (3×3).
template <typename T>
FOLDCORE_HD void rigid_mat_mul(const T* a, const T* b, T* c) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) c[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
}
// c = aᵀ b.
template <typename T>
FOLDCORE_HD void rigid_mat_mul_tn(const T* a, const T* b, T* c) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) c[3 * i + j] = a[i] * b[j] + a[3 + i] * b[3 + j] + a[6 + i] * b[6 + j];
}
// c = a bᵀ.
template <typename T>
FOLDCORE_HD void rigid_mat_mul_nt(const T* a, const T* b, T* c) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      c[3 * i + j] = a[3 * i] * b[3 * j] + a[3 * i + 1] * b[3 * j + 1] + a[3 * i + 2] * b[3 * j + 2];
}
// Composition (ra, ta) ∘ (rb, tb) = (ra rb, ra tb + ta); the outputs may not alias the inputs.
template <typename T>
FOLDCORE_HD void rigid_compose(const T* ra, const T* ta, const T* rb, const T* tb, T* rc, T* tc) {
  rigid_mat_mul(ra, rb, rc);
  rigid_rot_vec(ra, tb, tc);
  for (int k = 0; k < 3; ++k) tc[k] += ta[k];
}

// Hamilton product c = a ⊗ b.
template <typename T>
FOLDCORE_HD void quat_hamilton(const T* a, const T* b, T* c) {
  c[0] = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3];
  c[1] = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2];
  c[2] = a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1];
  c[3] = a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0];
}

// R(q) of a unit quaternion (the quadratic form):
//   R = [[w²+x²−y²−z², 2(xy−wz), 2(xz+wy)], [2(xy+wz), w²−x²+y²−z², 2(yz−wx)], [2(xz−wy), 2(yz+wx), w²−x²−y²+z²]].
template <typename T>
FOLDCORE_HD void quat_to_rot_elem(const T* q, T* m) {
  const T w = q[0], x = q[1], y = q[2], z = q[3];
  m[0] = w * w + x * x - y * y - z * z;
  m[1] = 2 * (x * y - w * z);
  m[2] = 2 * (x * z + w * y);
  m[3] = 2 * (x * y + w * z);
  m[4] = w * w - x * x + y * y - z * z;
  m[5] = 2 * (y * z - w * x);
  m[6] = 2 * (x * z - w * y);
  m[7] = 2 * (y * z + w * x);
  m[8] = w * w - x * x - y * y + z * z;
}

// dq = (∂R/∂q)ᵀ : g, with ∂R/∂w = 2[[w,−z,y],[z,w,−x],[−y,x,w]], ∂R/∂x = 2[[x,y,z],[y,−x,−w],[z,w,−x]],
// ∂R/∂y = 2[[−y,x,w],[x,y,z],[−w,z,−y]], ∂R/∂z = 2[[−z,−w,x],[w,−z,y],[x,y,z]].
FOLDCORE_HD void quat_to_rot_backward_elem(const double* q, const double* g, double* dq) {
  const double w = q[0], x = q[1], y = q[2], z = q[3];
  const double dw[9] = {w, -z, y, z, w, -x, -y, x, w};
  const double dx[9] = {x, y, z, y, -x, -w, z, w, -x};
  const double dy[9] = {-y, x, w, x, y, z, -w, z, -y};
  const double dz[9] = {-z, -w, x, w, -z, y, x, y, z};
  dq[0] = dq[1] = dq[2] = dq[3] = 0;
  for (int k = 0; k < 9; ++k) {
    dq[0] += 2 * dw[k] * g[k];
    dq[1] += 2 * dx[k] * g[k];
    dq[2] += 2 * dy[k] * g[k];
    dq[3] += 2 * dz[k] * g[k];
  }
}

// AF2 Alg. 23 (QuatAffine.pre_compose), update u = (b, c, d, tx, ty, tz):
//   q' = (q + q ⊗ (0, b, c, d)) / |…|,  t' = t + R(q)·(tx, ty, tz).
FOLDCORE_HD void quat_pre_compose_elem(const float* q, const float* t, const float* u, float* qo, float* to) {
  const float v[4] = {0.f, u[0], u[1], u[2]};
  float dq[4];
  quat_hamilton(q, v, dq);
  for (int k = 0; k < 4; ++k) qo[k] = q[k] + dq[k];
  const float n = std::sqrt(qo[0] * qo[0] + qo[1] * qo[1] + qo[2] * qo[2] + qo[3] * qo[3]);
  for (int k = 0; k < 4; ++k) qo[k] /= n;
  float r[9];
  quat_to_rot_elem(q, r);
  rigid_rot_vec(r, u + 3, to);
  for (int k = 0; k < 3; ++k) to[k] += t[k];
}

// Backward of quat_pre_compose_elem given the gradients gq of q' and gt of t' (dt = gt is the
// caller's): with q̃ = q ⊗ p, p = (1, b, c, d): dq̃ = (gq − q'(q'·gq))/|q̃|; dp = q̄ ⊗ dq̃ (a left
// product's transpose is the conjugate's); dq = dq̃ ⊗ p̄ + (∂R(q)/∂q)ᵀ : (gt ⊗ u_t); du_t = R(q)ᵀ gt.
FOLDCORE_HD void quat_pre_compose_backward_elem(const double* q, const double* u, const double* gq, const double* gt,
                                                double* dq, double* du) {
  const double p[4] = {1.0, u[0], u[1], u[2]};
  double raw[4];
  quat_hamilton(q, p, raw);
  const double nrm = std::sqrt(raw[0] * raw[0] + raw[1] * raw[1] + raw[2] * raw[2] + raw[3] * raw[3]);
  double qn[4], dot = 0;
  for (int k = 0; k < 4; ++k) {
    qn[k] = raw[k] / nrm;
    dot += qn[k] * gq[k];
  }
  double draw[4];
  for (int k = 0; k < 4; ++k) draw[k] = (gq[k] - qn[k] * dot) / nrm;
  const double qc[4] = {q[0], -q[1], -q[2], -q[3]}, pc[4] = {1.0, -u[0], -u[1], -u[2]};
  double dp[4], dqa[4];
  quat_hamilton(qc, draw, dp);
  quat_hamilton(draw, pc, dqa);
  double r[9];
  quat_to_rot_elem(q, r);
  double dr[9];
  for (int x = 0; x < 3; ++x)
    for (int y = 0; y < 3; ++y) dr[3 * x + y] = gt[x] * u[3 + y];
  double dqr[4];
  quat_to_rot_backward_elem(q, dr, dqr);
  for (int k = 0; k < 4; ++k) dq[k] = dqa[k] + dqr[k];
  double dut[3];
  rigid_rot_t_vec(r, gt, dut);
  for (int k = 0; k < 3; ++k) {
    du[k] = dp[1 + k];
    du[3 + k] = dut[k];
  }
}

// AF2 Alg. 24 lines 10–12 for one residue: frames[16·g …] its 8 default frames D_g (4×4),
// ang[2·k + {0, 1}] = (sin, cos) of torsion k. L_g = D_g ∘ R_x(α_g) with α_0 = 0 and α_g torsion g − 1,
// R_x = [[1,0,0],[0,c,−s],[0,s,c]]; C_g = L_g for g ≤ 4, C_{g} = C_{g−1} ∘ L_g for g = 5, 6, 7; out
// G_g = B ∘ C_g (rot [8·9], trans [8·3]).
template <typename T>
FOLDCORE_HD void torsion_local_frames(const float* frames, const T* ang, T* lr, T* lt) {
  for (int g = 0; g < 8; ++g) {
    const float* m = frames + 16 * g;
    const T s = g == 0 ? T(0) : ang[2 * (g - 1)], co = g == 0 ? T(1) : ang[2 * (g - 1) + 1];
    for (int row = 0; row < 3; ++row) {
      lr[9 * g + 3 * row] = m[4 * row];
      lr[9 * g + 3 * row + 1] = m[4 * row + 1] * co + m[4 * row + 2] * s;
      lr[9 * g + 3 * row + 2] = m[4 * row + 1] * -s + m[4 * row + 2] * co;
      lt[3 * g + row] = m[4 * row + 3];
    }
  }
}

FOLDCORE_HD void torsion_frames_elem(const float* frames, const float* br, const float* bt, const float* ang,
                                     float* out_r, float* out_t) {
  float lr[72], lt[24];
  torsion_local_frames(frames, ang, lr, lt);
  for (int g = 5; g < 8; ++g) {  // χ2..χ4: compose onto the previous χ frame
    float cr[9], ct[3];
    rigid_compose(lr + 9 * (g - 1), lt + 3 * (g - 1), lr + 9 * g, lt + 3 * g, cr, ct);
    for (int k = 0; k < 9; ++k) lr[9 * g + k] = cr[k];
    for (int k = 0; k < 3; ++k) lt[3 * g + k] = ct[k];
  }
  for (int g = 0; g < 8; ++g) rigid_compose(br, bt, lr + 9 * g, lt + 3 * g, out_r + 9 * g, out_t + 3 * g);
}

// Backward of torsion_frames_elem (the translation of B only enters additively: dt_B = Σ_g g_t,g).
// g_r [8·9], g_t [8·3] → d_br [9], d_bt [3], d_ang [14].
FOLDCORE_HD void torsion_frames_backward_elem(const float* frames, const double* br, const double* ang,
                                              const double* g_r, const double* g_t, double* d_br, double* d_bt,
                                              double* d_ang) {
  double l[72], lt[24], cr[72], ct[24];
  torsion_local_frames(frames, ang, l, lt);
  for (int k = 0; k < 72; ++k) cr[k] = l[k];
  for (int k = 0; k < 24; ++k) ct[k] = lt[k];
  for (int g = 5; g < 8; ++g) {
    rigid_mat_mul(cr + 9 * (g - 1), l + 9 * g, cr + 9 * g);
    double r[3];
    rigid_rot_vec(cr + 9 * (g - 1), lt + 3 * g, r);
    for (int k = 0; k < 3; ++k) ct[3 * g + k] = r[k] + ct[3 * (g - 1) + k];
  }
  // G_g = B ∘ C_g: rot B·C_g, trans B·c_g + t_B.
  double dc[72], dct[24];
  for (int k = 0; k < 9; ++k) d_br[k] = 0;
  for (int k = 0; k < 3; ++k) d_bt[k] = 0;
  for (int g = 0; g < 8; ++g) {
    const double* gr = g_r + 9 * g;
    const double* gt = g_t + 3 * g;
    double a[9];
    rigid_mat_mul_nt(gr, cr + 9 * g, a);
    for (int x = 0; x < 3; ++x)
      for (int y = 0; y < 3; ++y) d_br[3 * x + y] += a[3 * x + y] + gt[x] * ct[3 * g + y];
    for (int k = 0; k < 3; ++k) d_bt[k] += gt[k];
    rigid_mat_mul_tn(br, gr, dc + 9 * g);
    rigid_rot_t_vec(br, gt, dct + 3 * g);
  }
  // Back through the χ chain, χ4 first.
  double dl[72];
  for (int g = 7; g >= 5; --g) {
    double a[9];
    rigid_mat_mul_nt(dc + 9 * g, l + 9 * g, a);
    for (int x = 0; x < 3; ++x)
      for (int y = 0; y < 3; ++y) dc[9 * (g - 1) + 3 * x + y] += a[3 * x + y] + dct[3 * g + x] * lt[3 * g + y];
    rigid_mat_mul_tn(cr + 9 * (g - 1), dc + 9 * g, dl + 9 * g);
    for (int k = 0; k < 3; ++k) dct[3 * (g - 1) + k] += dct[3 * g + k];
  }
  for (int g = 1; g <= 4; ++g)
    for (int k = 0; k < 9; ++k) dl[9 * g + k] = dc[9 * g + k];
  // L_g = D_g · R_x(α): dR_x = D_gᵀ dL_g; ∂/∂sin = dR_x[2][1] − dR_x[1][2], ∂/∂cos = dR_x[1][1] + dR_x[2][2].
  for (int g = 1; g < 8; ++g) {
    double d[9];
    for (int x = 0; x < 3; ++x)
      for (int y = 0; y < 3; ++y) d[3 * x + y] = frames[16 * g + 4 * x + y];
    double dr[9];
    rigid_mat_mul_tn(d, dl + 9 * g, dr);
    d_ang[2 * (g - 1)] = dr[7] - dr[5];
    d_ang[2 * (g - 1) + 1] = dr[4] + dr[8];
  }
}

// x = R p + t for one atom (frame r, t; literature position p).
FOLDCORE_HD void frame_point_elem(const float* r, const float* t, const float* p, float* x) {
  for (int k = 0; k < 3; ++k) x[k] = r[3 * k] * p[0] + r[3 * k + 1] * p[1] + r[3 * k + 2] * p[2] + t[k];
}


// One row of l2_normalize_rows: n = √max(Σ x², eps), y = x / n; returns n.
FOLDCORE_HD float l2_normalize_row(const float* x, int64_t c, float eps, float* y) {
  float ss = 0.f;
  for (int64_t k = 0; k < c; ++k) ss += x[k] * x[k];
  const float nr = std::sqrt(ss < eps ? eps : ss);
  for (int64_t k = 0; k < c; ++k) y[k] = x[k] / nr;
  return nr;
}
FOLDCORE_HD void l2_normalize_row_backward(const float* y, float nr, float eps, const float* g, int64_t c, float* d) {
  if (nr * nr <= eps) {  // clamp active: y = x/√eps, a linear map
    for (int64_t k = 0; k < c; ++k) d[k] = g[k] / nr;
    return;
  }
  float gy = 0.f;
  for (int64_t k = 0; k < c; ++k) gy += g[k] * y[k];
  for (int64_t k = 0; k < c; ++k) d[k] = (g[k] - gy * y[k]) / nr;
}

// √(eps + Σ x²) of one row.
FOLDCORE_HD float norm_row(const float* x, int64_t c, float eps) {
  float acc = eps;
  for (int64_t k = 0; k < c; ++k) acc += x[k] * x[k];
  return std::sqrt(acc);
}

FOLDCORE_HD float softplus_elem(float v) { return (v < 0.f ? 0.f : v) + std::log1p(std::exp(-std::fabs(v))); }
FOLDCORE_HD float softplus_grad_elem(float v, float g) { return g / (1.f + std::exp(-v)); }

}  // namespace foldcore::ops::detail
