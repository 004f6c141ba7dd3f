#include "models/alphafold/structure/rigid.h"

#include <algorithm>
#include <cmath>

#include "kernels/rigid_math.h"

namespace foldcore::af2 {
namespace {

// The batch shape of a tensor whose last `trailing` axes are the element axes.
Shape leading(const Shape& s, int trailing, const char* what) {
  FC_CHECK(s.size() >= trailing, what, ": shape ", s.str(), " has fewer than ", trailing, " axes");
  Shape b;
  for (int i = 0; i < s.size() - trailing; ++i) b.push_back(s[i]);
  return b;
}

Shape with(const Shape& batch, std::initializer_list<int64_t> tail) {
  Shape s = batch;
  for (int64_t d : tail) s.push_back(d);
  return s;
}

void check_last(const Tensor& t, int64_t n, const char* op, const char* what) {
  FC_CHECK(t.defined() && t.dim() >= 1 && t.size(-1) == n, op, ": ", what, " must be [..., ", n, "], got ",
           t.defined() ? t.shape().str() : std::string("undefined"));
}

void check_rigid(const Rigid& a, const char* op) {
  FC_CHECK(a.rot.defined() && a.trans.defined(), op, ": undefined rigid");
  FC_CHECK(a.rot.dim() >= 2 && a.rot.size(-1) == 3 && a.rot.size(-2) == 3, op, ": rot must be [..., 3, 3], got ",
           a.rot.shape().str());
  check_last(a.trans, 3, op, "trans");
  FC_CHECK(leading(a.rot.shape(), 2, op) == leading(a.trans.shape(), 1, op), op, ": rot ", a.rot.shape().str(),
           " and trans ", a.trans.shape().str(), " have different batch shapes");
}

// How many elements of `inner` sit under each element of `outer` when outer is a prefix of inner.
int64_t broadcast_factor(const Shape& outer, const Shape& inner, const char* op) {
  bool ok = outer.size() <= inner.size();
  for (int i = 0; ok && i < outer.size(); ++i) ok = outer[i] == inner[i];
  FC_CHECK(ok, op, ": batch shape ", outer.str(), " is not a prefix of ", inner.str());
  int64_t f = 1;
  for (int i = outer.size(); i < inner.size(); ++i) f *= inner[i];
  return f;
}

// y = R x, y = Rᵀ x (R row-major 3x3): the per-residue math shared with the device ops.
inline void rot_vec(const float* r, const float* x, float* y) { ops::detail::rigid_rot_vec(r, x, y); }
inline void rot_t_vec(const float* r, const float* x, float* y) { ops::detail::rigid_rot_t_vec(r, x, y); }

}  // namespace

Tensor host_f32(const Tensor& t) {
  FC_CHECK(t.defined(), "host_f32: undefined tensor");
  return t.to(Device::cpu()).to(DType::f32).contiguous();
}

Shape Rigid::batch_shape() const { return leading(rot.shape(), 2, "Rigid"); }

Rigid Rigid::identity(const Shape& batch) {
  Rigid r{Tensor::zeros(with(batch, {3, 3}), DType::f32), Tensor::zeros(with(batch, {3}), DType::f32)};
  float* p = r.rot.data<float>();
  for (int64_t b = 0; b < batch.product(); ++b) p[9 * b] = p[9 * b + 4] = p[9 * b + 8] = 1.f;
  return r;
}

Tensor normalize_quat(const Tensor& quat) {
  check_last(quat, 4, "normalize_quat", "quat");
  Tensor q = host_f32(quat).clone();
  float* p = q.data<float>();
  for (int64_t b = 0; b < q.numel() / 4; ++b) {
    float* v = p + 4 * b;
    const float n = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3]);
    FC_CHECK(n > 0.f, "normalize_quat: zero quaternion at index ", b);
    for (int k = 0; k < 4; ++k) v[k] /= n;
  }
  return q;
}

Tensor quat_to_rot(const Tensor& quat) {
  check_last(quat, 4, "quat_to_rot", "quat");
  const Tensor q = host_f32(quat);
  Tensor r = Tensor::empty(with(leading(q.shape(), 1, "quat_to_rot"), {3, 3}), DType::f32);
  const float* qp = q.data<float>();
  float* rp = r.data<float>();
  for (int64_t b = 0; b < q.numel() / 4; ++b) ops::detail::quat_to_rot_elem(qp + 4 * b, rp + 9 * b);
  return r;
}

Tensor rot_to_quat(const Tensor& rot) {
  FC_CHECK(rot.dim() >= 2 && rot.size(-1) == 3 && rot.size(-2) == 3, "rot_to_quat: rot must be [..., 3, 3], got ",
           rot.shape().str());
  const Tensor r = host_f32(rot);
  Tensor q = Tensor::empty(with(leading(r.shape(), 2, "rot_to_quat"), {4}), DType::f32);
  const float* rp = r.data<float>();
  float* qp = q.data<float>();
  for (int64_t b = 0; b < q.numel() / 4; ++b) {
    const float* m = rp + 9 * b;
    // 4w² = 1 + tr, 4x² = 1 + m00 − m11 − m22, …: take the largest for a well-conditioned root.
    const double d[4] = {1.0 + m[0] + m[4] + m[8], 1.0 + m[0] - m[4] - m[8], 1.0 - m[0] + m[4] - m[8],
                         1.0 - m[0] - m[4] + m[8]};
    const int k = static_cast<int>(std::max_element(d, d + 4) - d);
    const double s = 0.5 * std::sqrt(std::max(d[k], 1e-30));  // the largest component
    const double f = 0.25 / s;
    double v[4];
    switch (k) {
      case 0: v[0] = s; v[1] = (m[7] - m[5]) * f; v[2] = (m[2] - m[6]) * f; v[3] = (m[3] - m[1]) * f; break;
      case 1: v[1] = s; v[0] = (m[7] - m[5]) * f; v[2] = (m[1] + m[3]) * f; v[3] = (m[2] + m[6]) * f; break;
      case 2: v[2] = s; v[0] = (m[2] - m[6]) * f; v[1] = (m[1] + m[3]) * f; v[3] = (m[5] + m[7]) * f; break;
      default: v[3] = s; v[0] = (m[3] - m[1]) * f; v[1] = (m[2] + m[6]) * f; v[2] = (m[5] + m[7]) * f; break;
    }
    for (int i = 0; i < 4; ++i) qp[4 * b + i] = static_cast<float>(v[i]);
  }
  return q;
}

namespace {
inline void hamilton(const float* a, const float* b, float* c) { ops::detail::quat_hamilton(a, b, c); }
}  // namespace

Tensor quat_multiply(const Tensor& a, const Tensor& b) {
  check_last(a, 4, "quat_multiply", "a");
  FC_CHECK(a.shape() == b.shape(), "quat_multiply: shapes ", a.shape().str(), " and ", b.shape().str(), " differ");
  const Tensor ah = host_f32(a), bh = host_f32(b);
  Tensor c = Tensor::empty(a.shape(), DType::f32);
  for (int64_t i = 0; i < a.numel() / 4; ++i)
    hamilton(ah.data<float>() + 4 * i, bh.data<float>() + 4 * i, c.data<float>() + 4 * i);
  return c;
}

Tensor quat_multiply_by_vec(const Tensor& quat, const Tensor& vec) {
  check_last(quat, 4, "quat_multiply_by_vec", "quat");
  check_last(vec, 3, "quat_multiply_by_vec", "vec");
  FC_CHECK(leading(quat.shape(), 1, "quat_multiply_by_vec") == leading(vec.shape(), 1, "quat_multiply_by_vec"),
           "quat_multiply_by_vec: quat ", quat.shape().str(), " and vec ", vec.shape().str(), " batch shapes differ");
  const Tensor qh = host_f32(quat), vh = host_f32(vec);
  Tensor c = Tensor::empty(quat.shape(), DType::f32);
  for (int64_t i = 0; i < quat.numel() / 4; ++i) {
    const float* v = vh.data<float>() + 3 * i;
    const float p[4] = {0.f, v[0], v[1], v[2]};
    hamilton(qh.data<float>() + 4 * i, p, c.data<float>() + 4 * i);
  }
  return c;
}

Rigid compose(const Rigid& a, const Rigid& b) {
  check_rigid(a, "compose");
  check_rigid(b, "compose");
  const int64_t f = broadcast_factor(a.batch_shape(), b.batch_shape(), "compose");
  const Tensor ar = host_f32(a.rot), at = host_f32(a.trans), br = host_f32(b.rot), bt = host_f32(b.trans);
  Rigid c{Tensor::empty(b.rot.shape(), DType::f32), Tensor::empty(b.trans.shape(), DType::f32)};
  for (int64_t i = 0; i < b.trans.numel() / 3; ++i) {
    const float* ra = ar.data<float>() + 9 * (i / f);
    const float* ta = at.data<float>() + 3 * (i / f);
    const float* rb = br.data<float>() + 9 * i;
    ops::detail::rigid_compose(ra, ta, rb, bt.data<float>() + 3 * i, c.rot.data<float>() + 9 * i,
                               c.trans.data<float>() + 3 * i);
  }
  return c;
}

Rigid invert(const Rigid& a) {
  check_rigid(a, "invert");
  const Tensor ar = host_f32(a.rot), at = host_f32(a.trans);
  Rigid c{Tensor::empty(a.rot.shape(), DType::f32), Tensor::empty(a.trans.shape(), DType::f32)};
  for (int64_t i = 0; i < a.trans.numel() / 3; ++i) {
    const float* r = ar.data<float>() + 9 * i;
    float* rc = c.rot.data<float>() + 9 * i;
    for (int x = 0; x < 3; ++x)
      for (int y = 0; y < 3; ++y) rc[3 * x + y] = r[3 * y + x];
    float* tc = c.trans.data<float>() + 3 * i;
    rot_t_vec(r, at.data<float>() + 3 * i, tc);
    for (int k = 0; k < 3; ++k) tc[k] = -tc[k];
  }
  return c;
}

namespace {
Tensor apply_impl(const Rigid& a, const Tensor& points, bool inverse) {
  const char* op = inverse ? "apply_inverse" : "apply";
  check_rigid(a, op);
  check_last(points, 3, op, "points");
  const int64_t f = broadcast_factor(a.batch_shape(), leading(points.shape(), 1, op), op);
  const Tensor ar = host_f32(a.rot), at = host_f32(a.trans), x = host_f32(points);
  Tensor y = Tensor::empty(points.shape(), DType::f32);
  for (int64_t i = 0; i < points.numel() / 3; ++i) {
    const float* r = ar.data<float>() + 9 * (i / f);
    const float* t = at.data<float>() + 3 * (i / f);
    const float* xi = x.data<float>() + 3 * i;
    float* yi = y.data<float>() + 3 * i;
    if (inverse) {
      const float d[3] = {xi[0] - t[0], xi[1] - t[1], xi[2] - t[2]};
      rot_t_vec(r, d, yi);
    } else {
      rot_vec(r, xi, yi);
      for (int k = 0; k < 3; ++k) yi[k] += t[k];
    }
  }
  return y;
}
}  // namespace

Tensor apply(const Rigid& a, const Tensor& points) { return apply_impl(a, points, false); }
Tensor apply_inverse(const Rigid& a, const Tensor& points) { return apply_impl(a, points, true); }

Rigid scale_translation(const Rigid& a, float s) {
  check_rigid(a, "scale_translation");
  Tensor t = host_f32(a.trans).clone();
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] *= s;
  return {host_f32(a.rot), t};
}

Rigid rigid_from_3_points(const Tensor& x1, const Tensor& x2, const Tensor& x3, float eps) {
  check_last(x1, 3, "rigid_from_3_points", "x1");
  FC_CHECK(x1.shape() == x2.shape() && x1.shape() == x3.shape(), "rigid_from_3_points: shapes ", x1.shape().str(),
           ", ", x2.shape().str(), ", ", x3.shape().str(), " differ");
  const Tensor a = host_f32(x1), o = host_f32(x2), c = host_f32(x3);
  const Shape batch = leading(x1.shape(), 1, "rigid_from_3_points");
  Rigid r{Tensor::empty(with(batch, {3, 3}), DType::f32), host_f32(x2).clone()};
  for (int64_t i = 0; i < batch.product(); ++i) {
    const float* pa = a.data<float>() + 3 * i;
    const float* po = o.data<float>() + 3 * i;
    const float* pc = c.data<float>() + 3 * i;
    float v1[3], v2[3];
    for (int k = 0; k < 3; ++k) {
      v1[k] = pc[k] - po[k];
      v2[k] = pa[k] - po[k];
    }
    const float n1 = std::sqrt(v1[0] * v1[0] + v1[1] * v1[1] + v1[2] * v1[2] + eps);
    float e1[3] = {v1[0] / n1, v1[1] / n1, v1[2] / n1};
    const float d = e1[0] * v2[0] + e1[1] * v2[1] + e1[2] * v2[2];
    float u2[3] = {v2[0] - d * e1[0], v2[1] - d * e1[1], v2[2] - d * e1[2]};
    const float n2 = std::sqrt(u2[0] * u2[0] + u2[1] * u2[1] + u2[2] * u2[2] + eps);
    float e2[3] = {u2[0] / n2, u2[1] / n2, u2[2] / n2};
    float e3[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2], e1[0] * e2[1] - e1[1] * e2[0]};
    float* m = r.rot.data<float>() + 9 * i;
    for (int k = 0; k < 3; ++k) {  // columns e1, e2, e3
      m[3 * k] = e1[k];
      m[3 * k + 1] = e2[k];
      m[3 * k + 2] = e3[k];
    }
  }
  return r;
}

Tensor rigid_to_4x4(const Rigid& a) {
  check_rigid(a, "rigid_to_4x4");
  const Tensor ar = host_f32(a.rot), at = host_f32(a.trans);
  Tensor m = Tensor::zeros(with(a.batch_shape(), {4, 4}), DType::f32);
  for (int64_t i = 0; i < a.trans.numel() / 3; ++i) {
    float* p = m.data<float>() + 16 * i;
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) p[4 * r + c] = ar.data<float>()[9 * i + 3 * r + c];
      p[4 * r + 3] = at.data<float>()[3 * i + r];
    }
    p[15] = 1.f;
  }
  return m;
}

Rigid rigid_from_4x4(const Tensor& m) {
  FC_CHECK(m.dim() >= 2 && m.size(-1) == 4 && m.size(-2) == 4, "rigid_from_4x4: expects [..., 4, 4], got ",
           m.shape().str());
  const Tensor h = host_f32(m);
  const Shape batch = leading(m.shape(), 2, "rigid_from_4x4");
  Rigid r{Tensor::empty(with(batch, {3, 3}), DType::f32), Tensor::empty(with(batch, {3}), DType::f32)};
  for (int64_t i = 0; i < batch.product(); ++i) {
    const float* p = h.data<float>() + 16 * i;
    for (int x = 0; x < 3; ++x) {
      for (int c = 0; c < 3; ++c) r.rot.data<float>()[9 * i + 3 * x + c] = p[4 * x + c];
      r.trans.data<float>()[3 * i + x] = p[4 * x + 3];
    }
  }
  return r;
}

QuatRigid QuatRigid::identity(const Shape& batch) {
  QuatRigid r{Tensor::zeros(with(batch, {4}), DType::f32), Tensor::zeros(with(batch, {3}), DType::f32)};
  float* q = r.quat.data<float>();
  for (int64_t b = 0; b < batch.product(); ++b) q[4 * b] = 1.f;
  return r;
}

Tensor QuatRigid::to_tensor7(float trans_scale) const {
  check_last(quat, 4, "QuatRigid::to_tensor7", "quat");
  check_last(trans, 3, "QuatRigid::to_tensor7", "trans");
  const Tensor q = host_f32(quat), t = host_f32(trans);
  Tensor out = Tensor::empty(with(leading(q.shape(), 1, "to_tensor7"), {7}), DType::f32);
  for (int64_t i = 0; i < q.numel() / 4; ++i) {
    float* o = out.data<float>() + 7 * i;
    for (int k = 0; k < 4; ++k) o[k] = q.data<float>()[4 * i + k];
    for (int k = 0; k < 3; ++k) o[4 + k] = t.data<float>()[3 * i + k] * trans_scale;
  }
  return out;
}

QuatRigid pre_compose(const QuatRigid& a, const Tensor& update) {
  check_last(update, 6, "pre_compose", "update");
  const Tensor u = host_f32(update);
  const Shape batch = leading(u.shape(), 1, "pre_compose");
  FC_CHECK(leading(a.quat.shape(), 1, "pre_compose") == batch, "pre_compose: quat ", a.quat.shape().str(),
           " and update ", update.shape().str(), " batch shapes differ");
  const Tensor q = host_f32(a.quat), t = host_f32(a.trans);
  QuatRigid out{Tensor::empty(q.shape(), DType::f32), Tensor::empty(t.shape(), DType::f32)};
  for (int64_t i = 0; i < batch.product(); ++i)
    ops::detail::quat_pre_compose_elem(q.data<float>() + 4 * i, t.data<float>() + 3 * i, u.data<float>() + 6 * i,
                                       out.quat.data<float>() + 4 * i, out.trans.data<float>() + 3 * i);
  return out;
}

}  // namespace foldcore::af2
