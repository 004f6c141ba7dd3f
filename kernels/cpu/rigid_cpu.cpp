#include "kernels/cpu/rigid_cpu.h"

#include <cstdint>

#include "core/error.h"
#include "kernels/rigid_math.h"

namespace foldcore::ops::cpu {
namespace {

using namespace detail;

const float* cf(const Tensor& t) { return t.data<float>(); }
float* mf(const Tensor& t) { return t.data<float>(); }

// Restype of residue i, checked against [0, types).
int64_t restype_at(const Tensor& restype, int64_t i, int64_t types, const char* op) {
  const int64_t a = restype.dtype() == DType::i32 ? restype.data<int32_t>()[i] : restype.data<int64_t>()[i];
  FC_CHECK(a >= 0 && a < types, op, ": restype ", a, " of residue ", i, " outside [0, ", types, ")");
  return a;
}

template <int N>
void to_double(const float* x, double* y) {
  for (int k = 0; k < N; ++k) y[k] = x[k];
}
template <int N>
void to_float(const double* x, float* y) {
  for (int k = 0; k < N; ++k) y[k] = static_cast<float>(x[k]);
}

}  // namespace

void quat_to_rot(const Tensor& quat, const Tensor& rot) {
  for (int64_t b = 0; b < quat.numel() / 4; ++b) quat_to_rot_elem(cf(quat) + 4 * b, mf(rot) + 9 * b);
}

void quat_to_rot_backward(const Tensor& quat, const Tensor& drot, const Tensor& dquat) {
  for (int64_t b = 0; b < quat.numel() / 4; ++b) {
    double q[4], g[9], d[4];
    to_double<4>(cf(quat) + 4 * b, q);
    to_double<9>(cf(drot) + 9 * b, g);
    quat_to_rot_backward_elem(q, g, d);
    to_float<4>(d, mf(dquat) + 4 * b);
  }
}

void quat_pre_compose(const Tensor& quat, const Tensor& trans, const Tensor& update, const Tensor& quat_out,
                      const Tensor& trans_out) {
  for (int64_t b = 0; b < quat.numel() / 4; ++b)
    quat_pre_compose_elem(cf(quat) + 4 * b, cf(trans) + 3 * b, cf(update) + 6 * b, mf(quat_out) + 4 * b,
                          mf(trans_out) + 3 * b);
}

void quat_pre_compose_backward(const Tensor& quat, const Tensor& update, const Tensor& dquat_out,
                               const Tensor& dtrans_out, const Tensor& dquat, const Tensor& dupdate) {
  for (int64_t b = 0; b < quat.numel() / 4; ++b) {
    double q[4], u[6], gq[4], gt[3], dq[4], du[6];
    to_double<4>(cf(quat) + 4 * b, q);
    to_double<6>(cf(update) + 6 * b, u);
    to_double<4>(cf(dquat_out) + 4 * b, gq);
    to_double<3>(cf(dtrans_out) + 3 * b, gt);
    quat_pre_compose_backward_elem(q, u, gq, gt, dq, du);
    if (dquat.defined()) to_float<4>(dq, mf(dquat) + 4 * b);
    if (dupdate.defined()) to_float<6>(du, mf(dupdate) + 6 * b);
  }
}

void torsion_frames(const Tensor& restype, const Tensor& frames, const Tensor& rot, const Tensor& trans,
                    const Tensor& angles, const Tensor& out_rot, const Tensor& out_trans) {
  const int64_t types = frames.size(0);
  for (int64_t i = 0; i < rot.size(0); ++i) {
    const int64_t a = restype_at(restype, i, types, "torsion_frames");
    torsion_frames_elem(cf(frames) + 128 * a, cf(rot) + 9 * i, cf(trans) + 3 * i, cf(angles) + 14 * i,
                        mf(out_rot) + 72 * i, mf(out_trans) + 24 * i);
  }
}

void torsion_frames_backward(const Tensor& restype, const Tensor& frames, const Tensor& rot, const Tensor& angles,
                             const Tensor& dout_rot, const Tensor& dout_trans, const Tensor& drot,
                             const Tensor& dtrans, const Tensor& dangles) {
  const int64_t types = frames.size(0);
  for (int64_t i = 0; i < rot.size(0); ++i) {
    const int64_t a = restype_at(restype, i, types, "torsion_frames_backward");
    double br[9], ang[14], gr[72], gt[24], d_br[9], d_bt[3], d_ang[14];
    to_double<9>(cf(rot) + 9 * i, br);
    to_double<14>(cf(angles) + 14 * i, ang);
    to_double<72>(cf(dout_rot) + 72 * i, gr);
    to_double<24>(cf(dout_trans) + 24 * i, gt);
    torsion_frames_backward_elem(cf(frames) + 128 * a, br, ang, gr, gt, d_br, d_bt, d_ang);
    if (drot.defined()) to_float<9>(d_br, mf(drot) + 9 * i);
    if (dtrans.defined()) to_float<3>(d_bt, mf(dtrans) + 3 * i);
    if (dangles.defined()) to_float<14>(d_ang, mf(dangles) + 14 * i);
  }
}

void frames_to_points(const Tensor& restype, const Tensor& group, const Tensor& positions, const Tensor& mask,
                      const Tensor& rot, const Tensor& trans, const Tensor& out) {
  const int64_t n = rot.size(0), groups = rot.size(1), types = group.size(0), points = group.size(1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = restype_at(restype, i, types, "frames_to_points");
    for (int64_t k = 0; k < points; ++k) {
      float* o = mf(out) + (i * points + k) * 3;
      const int32_t g = group.data<int32_t>()[a * points + k];
      if (cf(mask)[a * points + k] == 0.f) {
        o[0] = o[1] = o[2] = 0.f;
        continue;
      }
      FC_CHECK(g >= 0 && g < groups, "frames_to_points: group ", g, " of type ", a, " point ", k, " outside [0, ",
               groups, ")");
      frame_point_elem(cf(rot) + (i * groups + g) * 9, cf(trans) + (i * groups + g) * 3,
                       cf(positions) + (a * points + k) * 3, o);
    }
  }
}

void frames_to_points_backward(const Tensor& restype, const Tensor& group, const Tensor& positions,
                               const Tensor& mask, const Tensor& dout, const Tensor& drot, const Tensor& dtrans) {
  const int64_t n = drot.size(0), groups = drot.size(1), types = group.size(0), points = group.size(1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = restype_at(restype, i, types, "frames_to_points_backward");
    double dr[72] = {}, dt[24] = {};
    FC_CHECK(groups <= 8, "frames_to_points_backward: at most 8 groups, got ", groups);
    for (int64_t k = 0; k < points; ++k) {
      if (cf(mask)[a * points + k] == 0.f) continue;
      const int32_t g = group.data<int32_t>()[a * points + k];
      FC_CHECK(g >= 0 && g < groups, "frames_to_points_backward: group ", g, " outside [0, ", groups, ")");
      const float* p = cf(positions) + (a * points + k) * 3;
      const float* go = cf(dout) + (i * points + k) * 3;
      for (int x = 0; x < 3; ++x) {  // x = R p + t
        for (int y = 0; y < 3; ++y) dr[9 * g + 3 * x + y] += static_cast<double>(go[x]) * p[y];
        dt[3 * g + x] += go[x];
      }
    }
    for (int64_t k = 0; k < 9 * groups; ++k) mf(drot)[i * groups * 9 + k] = static_cast<float>(dr[k]);
    for (int64_t k = 0; k < 3 * groups; ++k) mf(dtrans)[i * groups * 3 + k] = static_cast<float>(dt[k]);
  }
}

void l2_normalize_rows(const Tensor& x, float eps, const Tensor& y, const Tensor& norm) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  for (int64_t r = 0; r < rows; ++r) mf(norm)[r] = l2_normalize_row(cf(x) + r * c, c, eps, mf(y) + r * c);
}

void l2_normalize_rows_backward(const Tensor& y, const Tensor& norm, float eps, const Tensor& dy, const Tensor& dx) {
  const int64_t c = y.size(-1), rows = y.numel() / c;
  for (int64_t r = 0; r < rows; ++r)
    l2_normalize_row_backward(cf(y) + r * c, cf(norm)[r], eps, cf(dy) + r * c, c, mf(dx) + r * c);
}

void norm_rows(const Tensor& x, float eps, const Tensor& y) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  for (int64_t r = 0; r < rows; ++r) mf(y)[r] = norm_row(cf(x) + r * c, c, eps);
}

void norm_rows_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  for (int64_t r = 0; r < rows; ++r) {
    const float s = cf(dy)[r] / cf(y)[r];
    for (int64_t k = 0; k < c; ++k) mf(dx)[r * c + k] = s * cf(x)[r * c + k];
  }
}

void softplus_forward(const Tensor& x, const Tensor& y) {
  for (int64_t i = 0; i < x.numel(); ++i) mf(y)[i] = softplus_elem(cf(x)[i]);
}

void softplus_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  for (int64_t i = 0; i < x.numel(); ++i) mf(dx)[i] = softplus_grad_elem(cf(x)[i], cf(dy)[i]);
}

}  // namespace foldcore::ops::cpu
