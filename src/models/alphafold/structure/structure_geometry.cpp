#include "models/alphafold/structure/structure_geometry.h"

#include <array>
#include <cmath>
#include <vector>

#include "data_pipeline/structure/residue_constants.h"
#include "models/alphafold/structure/all_atom.h"
#include "models/alphafold/losses/losses_common.h"
#include "models/alphafold/structure/rigid.h"

namespace foldcore::af2 {
namespace {

using autograd::BackwardCtx;
using autograd::Function;
namespace rc = data::rc;

using M3 = std::array<double, 9>;  // row-major 3x3
using V3 = std::array<double, 3>;

// The result of a host computation, in the dtype and on the device of `like`.
Tensor back_to(const Tensor& host, const Tensor& like) { return host.to(like.dtype()).to(like.device()); }
// A forward result: geometry stays fp32 whatever the network's dtype (bf16 autocast), on `like`'s device.
Tensor f32_on(const Tensor& host, const Tensor& like) { return host.to(like.device()); }

std::vector<double> doubles(const Tensor& t) {
  const Tensor h = host_f32(t);
  return std::vector<double>(h.data<float>(), h.data<float>() + h.numel());
}

Tensor floats(const std::vector<double>& v, const Shape& s) {
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_vector(f, s);
}

// Hamilton product c = a ⊗ b.
std::array<double, 4> hamilton(const double* a, const double* b) {
  return {a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3], a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
          a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1], a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0]};
}

M3 matmul(const M3& a, const M3& b) {
  M3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) c[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
  return c;
}
V3 matvec(const M3& a, const V3& x) {
  return {a[0] * x[0] + a[1] * x[1] + a[2] * x[2], a[3] * x[0] + a[4] * x[1] + a[5] * x[2],
          a[6] * x[0] + a[7] * x[1] + a[8] * x[2]};
}
// aᵀ b, a b ᵀ (the two products of a matrix product's backward).
M3 matmul_tn(const M3& a, const M3& b) {
  M3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) c[3 * i + j] = a[i] * b[j] + a[3 + i] * b[3 + j] + a[6 + i] * b[6 + j];
  return c;
}
M3 matmul_nt(const M3& a, const M3& b) {
  M3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      c[3 * i + j] = a[3 * i] * b[3 * j] + a[3 * i + 1] * b[3 * j + 1] + a[3 * i + 2] * b[3 * j + 2];
  return c;
}
V3 matvec_t(const M3& a, const V3& x) {
  return {a[0] * x[0] + a[3] * x[1] + a[6] * x[2], a[1] * x[0] + a[4] * x[1] + a[7] * x[2],
          a[2] * x[0] + a[5] * x[1] + a[8] * x[2]};
}

std::vector<int64_t> restypes(const Tensor& aatype, int64_t n, const char* op) {
  FC_CHECK(aatype.defined() && aatype.shape() == Shape({n}), op, ": aatype must be [", n, "], got ",
           aatype.defined() ? aatype.shape().str() : std::string("undefined"));
  std::vector<int64_t> a = aatype.to_vector_i64();
  for (int64_t v : a) FC_CHECK(v >= 0 && v < rc::kRestypeNumWithX, op, ": aatype value ", v, " outside [0, 21)");
  return a;
}

// ---------------------------------------------------------------- Alg. 23
struct PreComposeFn final : Function {
  std::vector<double> q, u;  // [B, 4], [B, 6]
  Tensor like_q, like_t, like_u;
  void backward(BackwardCtx& ctx) override {
    const std::vector<double> gq = doubles(ctx.grad_output(0)), gt = doubles(ctx.grad_output(1));
    const size_t b = q.size() / 4;
    std::vector<double> dq(4 * b), dt(gt), du(6 * b);
    for (size_t i = 0; i < b; ++i) {
      const double* qi = &q[4 * i];
      const double* ui = &u[6 * i];
      const double p[4] = {1.0, ui[0], ui[1], ui[2]};
      const auto raw = hamilton(qi, p);  // q ⊗ (1, v)
      const double nrm = std::sqrt(raw[0] * raw[0] + raw[1] * raw[1] + raw[2] * raw[2] + raw[3] * raw[3]);
      double qn[4], dot = 0;
      for (int k = 0; k < 4; ++k) {
        qn[k] = raw[k] / nrm;
        dot += qn[k] * gq[4 * i + k];
      }
      double draw[4];
      for (int k = 0; k < 4; ++k) draw[k] = (gq[4 * i + k] - qn[k] * dot) / nrm;
      const double qc[4] = {qi[0], -qi[1], -qi[2], -qi[3]}, pc[4] = {1.0, -ui[0], -ui[1], -ui[2]};
      const auto dp = hamilton(qc, draw);     // d(1, v) = q̄ ⊗ dq̃
      const auto dqa = hamilton(draw, pc);    // dq from q̃ = q ⊗ p: dq̃ ⊗ p̄
      const M3 r = loss_detail::quat_to_rot(qi);
      const V3 g{gt[3 * i], gt[3 * i + 1], gt[3 * i + 2]};
      const V3 dut = matvec_t(r, g);
      M3 dr{};
      for (int x = 0; x < 3; ++x)
        for (int y = 0; y < 3; ++y) dr[3 * x + y] = g[x] * ui[3 + y];
      const auto dqr = loss_detail::quat_to_rot_backward(qi, dr);
      for (int k = 0; k < 4; ++k) dq[4 * i + k] = dqa[k] + dqr[k];
      for (int k = 0; k < 3; ++k) {
        du[6 * i + k] = dp[1 + k];
        du[6 * i + 3 + k] = dut[k];
      }
    }
    if (ctx.needs_grad(0)) ctx.put_grad(0, back_to(floats(dq, like_q.shape()), like_q));
    if (ctx.needs_grad(1)) ctx.put_grad(1, back_to(floats(dt, like_t.shape()), like_t));
    if (ctx.needs_grad(2)) ctx.put_grad(2, back_to(floats(du, like_u.shape()), like_u));
  }
};

struct QuatToRotFn final : Function {
  std::vector<double> q;
  Tensor like;
  void backward(BackwardCtx& ctx) override {
    const std::vector<double> g = doubles(ctx.grad_output(0));
    std::vector<double> dq(q.size());
    for (size_t i = 0; i < q.size() / 4; ++i) {
      M3 gr;
      for (int k = 0; k < 9; ++k) gr[k] = g[9 * i + k];
      const auto d = loss_detail::quat_to_rot_backward(&q[4 * i], gr);
      for (int k = 0; k < 4; ++k) dq[4 * i + k] = d[k];
    }
    ctx.put_grad(0, back_to(floats(dq, like.shape()), like));
  }
};

// ---------------------------------------------------------------- Alg. 24 lines 10–12
// Local frames L_g (g = 0..7) of residue type `aa` for the angles `ang` [7 × (sin, cos)].
void local_frames(int64_t aa, const double* ang, M3* l, V3* t) {
  const auto& c = rc::rigid_group_constants();
  for (int g = 0; g < 8; ++g) {
    const auto& m = c.default_frame[static_cast<size_t>(aa)][static_cast<size_t>(g)];
    const double s = g == 0 ? 0.0 : ang[2 * (g - 1)], co = g == 0 ? 1.0 : ang[2 * (g - 1) + 1];
    for (int row = 0; row < 3; ++row) {  // D_g · R_x, R_x = [[1,0,0],[0,c,−s],[0,s,c]]
      l[g][3 * row] = m[row][0];
      l[g][3 * row + 1] = m[row][1] * co + m[row][2] * s;
      l[g][3 * row + 2] = -m[row][1] * s + m[row][2] * co;
      t[g][row] = m[row][3];
    }
  }
}

struct TorsionFramesFn final : Function {
  std::vector<int64_t> aa;
  std::vector<double> rot, trans, ang;  // [N, 9], [N, 3], [N, 14]
  Tensor like_rot, like_trans, like_ang;
  void backward(BackwardCtx& ctx) override {
    const std::vector<double> g_rot = doubles(ctx.grad_output(0)), g_trans = doubles(ctx.grad_output(1));
    const size_t n = aa.size();
    std::vector<double> d_rot(9 * n), d_trans(3 * n), d_ang(14 * n, 0.0);
    const auto& c = rc::rigid_group_constants();
    for (size_t i = 0; i < n; ++i) {
      M3 l[8], cr[8];
      V3 lt[8], ct[8];
      local_frames(aa[i], &ang[14 * i], l, lt);
      for (int g = 0; g < 8; ++g) {
        cr[g] = l[g];
        ct[g] = lt[g];
      }
      for (int g = 5; g < 8; ++g) {  // χ2..χ4 chained: C_g = C_{g−1} ∘ L_g
        cr[g] = matmul(cr[g - 1], l[g]);
        const V3 r = matvec(cr[g - 1], lt[g]);
        for (int k = 0; k < 3; ++k) ct[g][k] = r[k] + ct[g - 1][k];
      }
      M3 b;
      for (int k = 0; k < 9; ++k) b[k] = rot[9 * i + k];
      // G_g = B ∘ C_g: rot B·C_g, trans B·c_g + t_B.
      M3 db{}, dc[8];
      V3 dtb{}, dct[8];
      for (int g = 0; g < 8; ++g) {
        M3 gr;
        V3 gt;
        for (int k = 0; k < 9; ++k) gr[k] = g_rot[(8 * i + g) * 9 + k];
        for (int k = 0; k < 3; ++k) gt[k] = g_trans[(8 * i + g) * 3 + k];
        const M3 a = matmul_nt(gr, cr[g]);
        for (int x = 0; x < 3; ++x)
          for (int y = 0; y < 3; ++y) db[3 * x + y] += a[3 * x + y] + gt[x] * ct[g][y];
        for (int k = 0; k < 3; ++k) dtb[k] += gt[k];
        dc[g] = matmul_tn(b, gr);
        dct[g] = matvec_t(b, gt);
      }
      // Back through the χ chain, χ4 first.
      M3 dl[8];
      for (int g = 7; g >= 5; --g) {
        const M3 a = matmul_nt(dc[g], l[g]);
        for (int x = 0; x < 3; ++x)
          for (int y = 0; y < 3; ++y) dc[g - 1][3 * x + y] += a[3 * x + y] + dct[g][x] * lt[g][y];
        dl[g] = matmul_tn(cr[g - 1], dc[g]);
        for (int k = 0; k < 3; ++k) dct[g - 1][k] += dct[g][k];
      }
      for (int g = 1; g <= 4; ++g) dl[g] = dc[g];
      // L_g = D_g · R_x(α): dR_x = D_gᵀ dL_g; ∂/∂sin = dR_x[2][1] − dR_x[1][2], ∂/∂cos = dR_x[1][1] + dR_x[2][2].
      for (int g = 1; g < 8; ++g) {
        const auto& m = c.default_frame[static_cast<size_t>(aa[i])][static_cast<size_t>(g)];
        M3 d;
        for (int x = 0; x < 3; ++x)
          for (int y = 0; y < 3; ++y) d[3 * x + y] = m[x][y];
        const M3 dr = matmul_tn(d, dl[g]);
        d_ang[14 * i + 2 * (g - 1)] = dr[7] - dr[5];
        d_ang[14 * i + 2 * (g - 1) + 1] = dr[4] + dr[8];
      }
      for (int k = 0; k < 9; ++k) d_rot[9 * i + k] = db[k];
      for (int k = 0; k < 3; ++k) d_trans[3 * i + k] = dtb[k];
    }
    if (ctx.needs_grad(0)) ctx.put_grad(0, back_to(floats(d_rot, like_rot.shape()), like_rot));
    if (ctx.needs_grad(1)) ctx.put_grad(1, back_to(floats(d_trans, like_trans.shape()), like_trans));
    if (ctx.needs_grad(2)) ctx.put_grad(2, back_to(floats(d_ang, like_ang.shape()), like_ang));
  }
};

struct Atom14Fn final : Function {
  std::vector<int64_t> aa;
  Tensor like_rot, like_trans;
  void backward(BackwardCtx& ctx) override {
    const std::vector<double> g = doubles(ctx.grad_output(0));  // [N, 14, 3]
    const size_t n = aa.size();
    std::vector<double> d_rot(n * 8 * 9, 0.0), d_trans(n * 8 * 3, 0.0);
    const auto& c = rc::rigid_group_constants();
    for (size_t i = 0; i < n; ++i) {
      const auto r = static_cast<size_t>(aa[i]);
      for (int a = 0; a < rc::kAtom14Num; ++a) {
        if (c.atom14_mask[r][static_cast<size_t>(a)] == 0.f) continue;
        const size_t grp = 8 * i + static_cast<size_t>(c.atom14_to_rigid_group[r][static_cast<size_t>(a)]);
        const auto& p = c.atom14_rigid_group_positions[r][static_cast<size_t>(a)];
        const double* go = &g[(i * rc::kAtom14Num + static_cast<size_t>(a)) * 3];
        for (int k = 0; k < 3; ++k) {  // x = R p + t
          for (int j = 0; j < 3; ++j) d_rot[grp * 9 + 3 * static_cast<size_t>(k) + static_cast<size_t>(j)] += go[k] * p[j];
          d_trans[grp * 3 + static_cast<size_t>(k)] += go[k];
        }
      }
    }
    if (ctx.needs_grad(0)) ctx.put_grad(0, back_to(floats(d_rot, like_rot.shape()), like_rot));
    if (ctx.needs_grad(1)) ctx.put_grad(1, back_to(floats(d_trans, like_trans.shape()), like_trans));
  }
};

}  // namespace

QuatFrameVar pre_compose_var(const QuatFrameVar& frame, const Variable& update) {
  FC_CHECK(frame.quat.defined() && frame.trans.defined() && update.defined(), "pre_compose_var: undefined input");
  const QuatRigid out = pre_compose(QuatRigid{frame.quat.value(), frame.trans.value()}, update.value());
  auto fn = std::make_unique<PreComposeFn>();
  fn->q = doubles(frame.quat.value());
  fn->u = doubles(update.value());
  fn->like_q = frame.quat.value();
  fn->like_t = frame.trans.value();
  fn->like_u = update.value();
  const Tensor& like = update.value();
  const auto v = autograd::record("pre_compose", std::move(fn), {frame.quat, frame.trans, update},
                                  {f32_on(out.quat, like), f32_on(out.trans, like)});
  return {v[0], v[1]};
}

Variable quat_to_rot_var(const Variable& quat) {
  FC_CHECK(quat.defined(), "quat_to_rot_var: undefined input");
  const Tensor r = quat_to_rot(quat.value());
  auto fn = std::make_unique<QuatToRotFn>();
  fn->q = doubles(quat.value());
  fn->like = quat.value();
  return autograd::record1("quat_to_rot", std::move(fn), {quat}, f32_on(r, quat.value()));
}

RigidVar torsion_angles_to_frames_var(const Tensor& aatype, const RigidVar& backbone, const Variable& angles) {
  FC_CHECK(backbone.rot.defined() && backbone.trans.defined() && angles.defined(),
           "torsion_angles_to_frames_var: undefined input");
  const int64_t n = angles.size(0);
  const Rigid g = torsion_angles_to_frames(aatype, Rigid{host_f32(backbone.rot.value()), host_f32(backbone.trans.value())},
                                           angles.value());
  auto fn = std::make_unique<TorsionFramesFn>();
  fn->aa = restypes(aatype, n, "torsion_angles_to_frames_var");
  fn->rot = doubles(backbone.rot.value());
  fn->trans = doubles(backbone.trans.value());
  fn->ang = doubles(angles.value());
  fn->like_rot = backbone.rot.value();
  fn->like_trans = backbone.trans.value();
  fn->like_ang = angles.value();
  const Tensor& like = angles.value();
  const auto v = autograd::record("torsion_angles_to_frames", std::move(fn), {backbone.rot, backbone.trans, angles},
                                  {f32_on(g.rot, like), f32_on(g.trans, like)});
  return {v[0], v[1]};
}

Variable frames_to_atom14_positions_var(const Tensor& aatype, const RigidVar& frames) {
  FC_CHECK(frames.rot.defined() && frames.trans.defined(), "frames_to_atom14_positions_var: undefined input");
  const int64_t n = frames.rot.size(0);
  const Tensor x = frames_to_atom14_positions(aatype, Rigid{host_f32(frames.rot.value()), host_f32(frames.trans.value())});
  auto fn = std::make_unique<Atom14Fn>();
  fn->aa = restypes(aatype, n, "frames_to_atom14_positions_var");
  fn->like_rot = frames.rot.value();
  fn->like_trans = frames.trans.value();
  return autograd::record1("frames_to_atom14_positions", std::move(fn), {frames.rot, frames.trans},
                           f32_on(x, frames.rot.value()));
}

}  // namespace foldcore::af2
