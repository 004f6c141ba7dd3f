// Rigid/quaternion geometry (models/alphafold/structure/rigid.h) against naive double-precision math.
// Tolerance: everything is fp32 with O(1) values and a handful of flops per element, so 1e-5
// absolute (≈ 100 ulp at 1.0) is ample and still catches any sign/index mistake (errors O(0.1–1)).
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "core/random.h"
#include "data_pipeline/structure/residue_constants.h"
#include "models/alphafold/structure/rigid.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

constexpr double kTol = 1e-5;

using Quat = std::array<double, 4>;
using Mat = std::array<std::array<double, 3>, 3>;

Quat naive_hamilton(const Quat& a, const Quat& b) {
  return {a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3], a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
          a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1], a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0]};
}

// Rotation matrix of a unit quaternion, column by column: R e_k = q (0, e_k) q*.
Mat naive_rot(const Quat& q) {
  const Quat conj = {q[0], -q[1], -q[2], -q[3]};
  Mat r{};
  for (int k = 0; k < 3; ++k) {
    Quat e = {0, 0, 0, 0};
    e[k + 1] = 1;
    const Quat v = naive_hamilton(naive_hamilton(q, e), conj);
    for (int i = 0; i < 3; ++i) r[i][k] = v[i + 1];
  }
  return r;
}

Tensor random_quats(int64_t n, Generator& g) { return normalize_quat(randn({n, 4}, g)); }

Quat quat_at(const Tensor& q, int64_t i) {
  const auto v = q.to_vector();
  return {v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]};
}

TEST(Af2Rigid, QuatToRotMatchesConjugation) {
  Generator g(1);
  const int64_t n = 37;
  const Tensor q = random_quats(n, g);
  const Tensor r = quat_to_rot(q);
  ASSERT_EQ(r.shape(), Shape({n, 3, 3}));
  const auto rv = r.to_vector();
  for (int64_t b = 0; b < n; ++b) {
    const Mat ref = naive_rot(quat_at(q, b));
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_NEAR(rv[9 * b + 3 * i + j], ref[i][j], kTol) << b << " " << i << j;
  }
  // q and −q give the same rotation; rot_to_quat inverts up to that sign.
  const Tensor back = rot_to_quat(r);
  for (int64_t b = 0; b < n; ++b) {
    const Quat a = quat_at(q, b), c = quat_at(back, b);
    const double dot = a[0] * c[0] + a[1] * c[1] + a[2] * c[2] + a[3] * c[3];
    EXPECT_NEAR(std::fabs(dot), 1.0, kTol) << b;
  }
}

TEST(Af2Rigid, QuatMultiplyComposesRotations) {
  Generator g(2);
  const int64_t n = 11;
  const Tensor a = random_quats(n, g), b = random_quats(n, g);
  const Tensor ab = quat_multiply(a, b);
  for (int64_t i = 0; i < n; ++i) {
    const Quat ref = naive_hamilton(quat_at(a, i), quat_at(b, i));
    const Quat got = quat_at(ab, i);
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(got[k], ref[k], kTol);
  }
  // R(a ⊗ b) = R(a) R(b) (via compose of rigids with zero translation).
  const Rigid ra{quat_to_rot(a), Tensor::zeros({n, 3}, DType::f32)};
  const Rigid rb{quat_to_rot(b), Tensor::zeros({n, 3}, DType::f32)};
  FC_EXPECT_CLOSE(compose(ra, rb).rot, quat_to_rot(ab), kTol, 0);
  // q ⊗ (0, v) = quat_multiply(q, (0, v)).
  const Tensor v = randn({n, 3}, g);
  std::vector<float> pv;
  const auto vv = v.to_vector();
  for (int64_t i = 0; i < n; ++i) pv.insert(pv.end(), {0.f, vv[3 * i], vv[3 * i + 1], vv[3 * i + 2]});
  FC_EXPECT_CLOSE(quat_multiply_by_vec(a, v), quat_multiply(a, Tensor::from_vector(pv, {n, 4})), kTol, 0);
}

Rigid random_rigid(const Shape& batch, Generator& g) {
  const Tensor q = random_quats(batch.product(), g);
  Shape rs = batch, ts = batch;
  rs.push_back(3);
  rs.push_back(3);
  ts.push_back(3);
  return {quat_to_rot(q).reshape(rs), randn(ts, g)};
}

TEST(Af2Rigid, ComposeInvertApply) {
  Generator g(3);
  const Rigid a = random_rigid({5}, g), b = random_rigid({5, 8}, g);
  const Tensor x = randn({5, 8, 7, 3}, g);
  // (a ∘ b)(x) = a(b(x)) with a broadcast over b's rigid-group axis.
  FC_EXPECT_CLOSE(apply(compose(a, b), x), apply(a, apply(b, x)), kTol, 1e-5);
  // Naive check of apply for one point.
  const auto xa = apply(a, x).to_vector(), xv = x.to_vector(), r = a.rot.to_vector(), t = a.trans.to_vector();
  const int64_t res = 3, p = (res * 8 + 2) * 7 + 4;  // residue 3, group 2, point 4
  for (int i = 0; i < 3; ++i) {
    double y = t[3 * res + i];
    for (int j = 0; j < 3; ++j) y += r[9 * res + 3 * i + j] * xv[3 * p + j];
    EXPECT_NEAR(xa[3 * p + i], y, kTol);
  }
  // a⁻¹(a(x)) = x; apply_inverse = apply ∘ invert; a ∘ a⁻¹ = identity.
  const Tensor y = apply(a, x);
  FC_EXPECT_CLOSE(apply_inverse(a, y), x, kTol, 1e-5);
  FC_EXPECT_CLOSE(apply(invert(a), y), x, kTol, 1e-5);
  const Rigid id = compose(a, invert(a)), ref = Rigid::identity({5});
  FC_EXPECT_CLOSE(id.rot, ref.rot, kTol, 0);
  FC_EXPECT_CLOSE(id.trans, ref.trans, kTol, 0);
  // Scaled translation.
  const Rigid s = scale_translation(a, 10.f);
  const auto sv = s.trans.to_vector();
  for (size_t i = 0; i < sv.size(); ++i) EXPECT_FLOAT_EQ(sv[i], 10.f * t[i]);
}

TEST(Af2Rigid, FourByFourRoundTrip) {
  Generator g(4);
  const Rigid a = random_rigid({3, 2}, g);
  const Tensor m = rigid_to_4x4(a);
  ASSERT_EQ(m.shape(), Shape({3, 2, 4, 4}));
  const auto mv = m.to_vector();
  for (int b = 0; b < 6; ++b) {
    EXPECT_EQ(mv[16 * b + 12], 0.f);
    EXPECT_EQ(mv[16 * b + 13], 0.f);
    EXPECT_EQ(mv[16 * b + 14], 0.f);
    EXPECT_EQ(mv[16 * b + 15], 1.f);
    EXPECT_EQ(mv[16 * b + 3], a.trans.to_vector()[3 * b]);
  }
  const Rigid back = rigid_from_4x4(m);
  FC_EXPECT_CLOSE(back.rot, a.rot, 0, 0);
  FC_EXPECT_CLOSE(back.trans, a.trans, 0, 0);
}

TEST(Af2Rigid, FromThreePointsGramSchmidt) {
  Generator g(5);
  const int64_t n = 9;
  const Tensor x1 = randn({n, 3}, g), x2 = randn({n, 3}, g), x3 = randn({n, 3}, g);
  const Rigid f = rigid_from_3_points(x1, x2, x3);
  FC_EXPECT_CLOSE(f.trans, x2, 0, 0);
  const auto r = f.rot.to_vector();
  for (int64_t b = 0; b < n; ++b) {
    // Orthonormal, right-handed: RᵀR = I, det R = 1.
    const float* m = r.data() + 9 * b;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        double d = 0;
        for (int k = 0; k < 3; ++k) d += m[3 * k + i] * m[3 * k + j];
        EXPECT_NEAR(d, i == j ? 1.0 : 0.0, kTol);
      }
    const double det = m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
                       m[2] * (m[3] * m[7] - m[4] * m[6]);
    EXPECT_NEAR(det, 1.0, kTol);
  }
  // In the local frame x3 lies on +x and x1 in the xy-plane with y > 0.
  const auto l3 = apply_inverse(f, x3).to_vector(), l1 = apply_inverse(f, x1).to_vector();
  for (int64_t b = 0; b < n; ++b) {
    EXPECT_GT(l3[3 * b], 0.f);
    EXPECT_NEAR(l3[3 * b + 1], 0.0, 1e-5);
    EXPECT_NEAR(l3[3 * b + 2], 0.0, 1e-5);
    EXPECT_GT(l1[3 * b + 1], 0.f);
    EXPECT_NEAR(l1[3 * b + 2], 0.0, 1e-5);
  }
  // AF2's idealised alanine backbone (N, CA, C) defines the identity frame.
  const auto& c = data::rc::rigid_group_constants();
  auto atom = [&](int a37) {
    const auto& p = c.atom37_rigid_group_positions[0][static_cast<size_t>(a37)];
    return Tensor::from_vector({p[0], p[1], p[2]}, {1, 3});
  };
  const Rigid bb = rigid_from_3_points(atom(0), atom(1), atom(2));
  FC_EXPECT_CLOSE(bb.rot, Rigid::identity({1}).rot, 1e-6, 0);
}

TEST(Af2Rigid, PreComposeIsAlgorithm23) {
  Generator g(6);
  const int64_t n = 13;
  QuatRigid a{random_quats(n, g), randn({n, 3}, g)};
  const Tensor u = randn({n, 6}, g);
  const QuatRigid b = pre_compose(a, u);
  const auto uv = u.to_vector(), tv = a.trans.to_vector(), qb = b.quat.to_vector(), tb = b.trans.to_vector();
  for (int64_t i = 0; i < n; ++i) {
    const Quat q = quat_at(a.quat, i);
    Quat nq = naive_hamilton(q, {0, uv[6 * i], uv[6 * i + 1], uv[6 * i + 2]});
    double norm = 0;
    for (int k = 0; k < 4; ++k) {
      nq[k] += q[k];
      norm += nq[k] * nq[k];
    }
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(qb[4 * i + k], nq[k] / std::sqrt(norm), kTol);
    const Mat r = naive_rot(q);  // the OLD rotation rotates the translation update
    for (int k = 0; k < 3; ++k) {
      double t = tv[3 * i + k];
      for (int j = 0; j < 3; ++j) t += r[k][j] * uv[6 * i + 3 + j];
      EXPECT_NEAR(tb[3 * i + k], t, 1e-5 * (1 + std::fabs(t)));
    }
  }
  // Identity start and to_tensor7 (w, x, y, z, t·scale).
  const QuatRigid id = QuatRigid::identity({2});
  const auto t7 = pre_compose(id, Tensor::from_vector({0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0}, {2, 6}))
                      .to_tensor7(10.f)
                      .to_vector();
  const std::vector<float> expect = {1, 0, 0, 0, 10, 20, 30, 1, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(t7, expect);
}

TEST(Af2Rigid, ShapeErrors) {
  EXPECT_THROW(quat_to_rot(Tensor::zeros({3, 3}, DType::f32)), Error);
  EXPECT_THROW(normalize_quat(Tensor::zeros({1, 4}, DType::f32)), Error);
  const Rigid a = Rigid::identity({4});
  EXPECT_THROW(apply(a, Tensor::zeros({5, 3}, DType::f32)), Error);
  EXPECT_THROW(compose(Rigid::identity({4, 2}), Rigid::identity({4})), Error);
  EXPECT_THROW(pre_compose(QuatRigid::identity({4}), Tensor::zeros({4, 5}, DType::f32)), Error);
}

}  // namespace
}  // namespace foldcore::af2
