// Rigid-body geometry ops (kernels/rigid.h), CPU reference: forwards against naive double math
// written independently of kernels/rigid_math.h (quaternion sandwich products, 4×4 homogeneous
// matrices), backwards against central finite differences of the fp32 forwards.
//
// Tolerances: forwards are fp32 chains of a few dozen operations on O(1)-O(10) values, so 1e-5
// absolute (a few hundred ulp of the largest values) is loose for rounding and tight for any
// wrong term. Finite differences: h = 1e-2 on fp32 forwards; the loss Σ w·out (w ~ N(0, 1), a few
// hundred terms) rounds at ~1e-6, i.e. ~1e-4 after dividing by 2h, and the O(h²) truncation of
// these smooth (trigonometric, bilinear) maps is ~1e-4 of the gradient: atol 2e-3, rtol 2e-3. A
// wrong sign, a transposed factor or a missing term moves a gradient by O(1).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "kernels/rigid.h"
#include "test_util.h"

namespace foldcore {
namespace {

using testing::check_gradient;
using testing::weighted_sum;

using M4 = std::array<double, 16>;

Tensor rand_f32(const Shape& s, Generator& g, float scale = 1.f) { return randn(s, g, 0.f, scale); }

// Random unit quaternions [b, 4].
Tensor unit_quats(int64_t b, Generator& g) {
  Tensor q = rand_f32({b, 4}, g);
  float* p = q.data<float>();
  for (int64_t i = 0; i < b; ++i) {
    float* v = p + 4 * i;
    const float n = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3]);
    for (int k = 0; k < 4; ++k) v[k] /= n;
  }
  return q;
}

std::array<double, 4> hamilton(const std::array<double, 4>& a, const std::array<double, 4>& b) {
  return {a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3], a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
          a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1], a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0]};
}

// q v q̄ for a unit quaternion: the rotation of v, without any matrix.
std::array<double, 3> rotate(const std::array<double, 4>& q, const std::array<double, 3>& v) {
  const auto r = hamilton(hamilton(q, {0, v[0], v[1], v[2]}), {q[0], -q[1], -q[2], -q[3]});
  return {r[1], r[2], r[3]};
}

M4 mul4(const M4& a, const M4& b) {
  M4 c{};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 4; ++k) c[4 * i + j] += a[4 * i + k] * b[4 * k + j];
  return c;
}

// A random rotation (from a unit quaternion) and translation as a 4×4 [R t; 0 1].
M4 random_frame(Generator& g) {
  const Tensor q = unit_quats(1, g), t = rand_f32({3}, g, 2.f);
  M4 m{};
  Tensor r = Tensor::empty({1, 3, 3}, DType::f32);
  ops::quat_to_rot(q, r);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) m[4 * i + j] = r.data<float>()[3 * i + j];
    m[4 * i + 3] = t.data<float>()[i];
  }
  m[15] = 1;
  return m;
}

// A [T, 8, 4, 4] table of random frames.
Tensor frame_table(int64_t types, Generator& g) {
  Tensor t = Tensor::empty({types, 8, 4, 4}, DType::f32);
  for (int64_t k = 0; k < types * 8; ++k) {
    const M4 m = random_frame(g);
    for (int e = 0; e < 16; ++e) t.data<float>()[16 * k + e] = static_cast<float>(m[static_cast<size_t>(e)]);
  }
  return t;
}

// A point table: group [T, K] i32 in [0, 8), positions [T, K, 3], mask [T, K] with some zeros.
struct PointTables {
  Tensor group, positions, mask;
};
PointTables point_tables(int64_t types, int64_t points, Generator& g) {
  PointTables p{Tensor::empty({types, points}, DType::i32), rand_f32({types, points, 3}, g, 1.5f),
                Tensor::empty({types, points}, DType::f32)};
  const std::vector<int64_t> grp = randint({types * points}, g, 0, 8).to_vector_i64();
  for (int64_t k = 0; k < types * points; ++k) {
    p.group.data<int32_t>()[k] = static_cast<int32_t>(grp[static_cast<size_t>(k)]);
    p.mask.data<float>()[k] = k % 5 == 3 ? 0.f : 1.f;
  }
  return p;
}

TEST(Rigid, QuatToRotRotatesLikeTheQuaternion) {
  Generator g(1);
  const Tensor q = unit_quats(20, g), v = rand_f32({20, 3}, g);
  Tensor r = Tensor::empty({20, 3, 3}, DType::f32);
  ops::quat_to_rot(q, r);
  for (int64_t i = 0; i < 20; ++i) {
    const float* qi = q.data<float>() + 4 * i;
    const float* vi = v.data<float>() + 3 * i;
    const auto want = rotate({qi[0], qi[1], qi[2], qi[3]}, {vi[0], vi[1], vi[2]});
    const float* m = r.data<float>() + 9 * i;
    for (int k = 0; k < 3; ++k)
      EXPECT_NEAR(m[3 * k] * vi[0] + m[3 * k + 1] * vi[1] + m[3 * k + 2] * vi[2], want[static_cast<size_t>(k)], 1e-5);
  }
}

TEST(Rigid, PreComposeIsTheQuaternionUpdateOfAlgorithm23) {
  Generator g(2);
  const int64_t b = 16;
  const Tensor q = unit_quats(b, g), t = rand_f32({b, 3}, g), u = rand_f32({b, 6}, g, 0.5f);
  Tensor qo = Tensor::empty({b, 4}, DType::f32), to = Tensor::empty({b, 3}, DType::f32);
  ops::quat_pre_compose(q, t, u, qo, to);
  for (int64_t i = 0; i < b; ++i) {
    const float* qi = q.data<float>() + 4 * i;
    const float* ui = u.data<float>() + 6 * i;
    const std::array<double, 4> qq{qi[0], qi[1], qi[2], qi[3]};
    auto raw = hamilton(qq, {1, ui[0], ui[1], ui[2]});
    const double n = std::sqrt(raw[0] * raw[0] + raw[1] * raw[1] + raw[2] * raw[2] + raw[3] * raw[3]);
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(qo.data<float>()[4 * i + k], raw[static_cast<size_t>(k)] / n, 1e-6);
    const auto rt = rotate(qq, {ui[3], ui[4], ui[5]});
    for (int k = 0; k < 3; ++k)
      EXPECT_NEAR(to.data<float>()[3 * i + k], t.data<float>()[3 * i + k] + rt[static_cast<size_t>(k)], 1e-5);
  }
}

TEST(Rigid, TorsionFramesAreProductsOfHomogeneousMatrices) {
  Generator g(3);
  const int64_t n = 9, types = 4;
  const Tensor frames = frame_table(types, g);
  const Tensor restype = Tensor::from_vector_i64({0, 1, 2, 3, 3, 2, 1, 0, 2}, {n});
  const Tensor rot = Tensor::empty({n, 3, 3}, DType::f32), trans = rand_f32({n, 3}, g, 3.f);
  ops::quat_to_rot(unit_quats(n, g), rot);
  const Tensor ang = rand_f32({n, 7, 2}, g);  // (sin, cos) used as given: not unit on purpose
  Tensor out_r = Tensor::empty({n, 8, 3, 3}, DType::f32), out_t = Tensor::empty({n, 8, 3}, DType::f32);
  ops::torsion_frames(restype, frames, rot, trans, ang, out_r, out_t);
  for (int64_t i = 0; i < n; ++i) {
    M4 b{};
    for (int x = 0; x < 3; ++x) {
      for (int y = 0; y < 3; ++y) b[4 * x + y] = rot.data<float>()[9 * i + 3 * x + y];
      b[4 * x + 3] = trans.data<float>()[3 * i + x];
    }
    b[15] = 1;
    const int64_t a = restype.to_vector_i64()[static_cast<size_t>(i)];
    M4 prev{};
    for (int gi = 0; gi < 8; ++gi) {
      M4 d{}, rx{};
      for (int e = 0; e < 16; ++e) d[e] = frames.data<float>()[(a * 8 + gi) * 16 + e];
      const double s = gi == 0 ? 0 : ang.data<float>()[(i * 7 + gi - 1) * 2];
      const double c = gi == 0 ? 1 : ang.data<float>()[(i * 7 + gi - 1) * 2 + 1];
      rx = {1, 0, 0, 0, 0, c, -s, 0, 0, s, c, 0, 0, 0, 0, 1};
      M4 local = mul4(d, rx);
      if (gi >= 5) local = mul4(prev, local);
      prev = local;
      const M4 global = mul4(b, local);
      for (int x = 0; x < 3; ++x) {
        for (int y = 0; y < 3; ++y)
          EXPECT_NEAR(out_r.data<float>()[(i * 8 + gi) * 9 + 3 * x + y], global[4 * x + y], 1e-5)
              << "residue " << i << " group " << gi;
        EXPECT_NEAR(out_t.data<float>()[(i * 8 + gi) * 3 + x], global[4 * x + 3], 1e-5);
      }
    }
  }
}

TEST(Rigid, FramesToPointsPlaceEachPointInItsGroupsFrame) {
  Generator g(4);
  const int64_t n = 6, types = 3, points = 14;
  const PointTables t = point_tables(types, points, g);
  const Tensor restype = Tensor::from_vector_i64({2, 0, 1, 1, 2, 0}, {n}).to(DType::i32);
  const Tensor rot = rand_f32({n, 8, 3, 3}, g), trans = rand_f32({n, 8, 3}, g);
  Tensor out = Tensor::full({n, points, 3}, 7.0, DType::f32);
  ops::frames_to_points(restype, t.group, t.positions, t.mask, rot, trans, out);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = restype.data<int32_t>()[i];
    for (int64_t k = 0; k < points; ++k) {
      const int64_t grp = t.group.data<int32_t>()[a * points + k];
      const bool on = t.mask.data<float>()[a * points + k] != 0.f;
      for (int x = 0; x < 3; ++x) {
        double want = 0;
        if (on) {
          want = trans.data<float>()[(i * 8 + grp) * 3 + x];
          for (int y = 0; y < 3; ++y)
            want += static_cast<double>(rot.data<float>()[(i * 8 + grp) * 9 + 3 * x + y]) *
                    t.positions.data<float>()[(a * points + k) * 3 + y];
        }
        EXPECT_NEAR(out.data<float>()[(i * points + k) * 3 + x], want, 1e-5);
      }
    }
  }
}

TEST(Rigid, RowNormsAndSoftplusMatchNaiveMath) {
  Generator g(5);
  Tensor x = rand_f32({5, 7}, g);
  for (int k = 0; k < 7; ++k) x.data<float>()[2 * 7 + k] = 0.f;  // a zero row: the l2 clamp
  Tensor y = Tensor::empty({5, 7}, DType::f32), n = Tensor::empty({5}, DType::f32), r = Tensor::empty({5}, DType::f32);
  ops::l2_normalize_rows(x, 1e-12f, y, n);
  ops::norm_rows(x, 1e-8f, r);
  for (int64_t i = 0; i < 5; ++i) {
    double ss = 0;
    for (int k = 0; k < 7; ++k) ss += static_cast<double>(x.data<float>()[i * 7 + k]) * x.data<float>()[i * 7 + k];
    EXPECT_NEAR(n.data<float>()[i], std::sqrt(std::max(ss, 1e-12)), 1e-6);
    EXPECT_NEAR(r.data<float>()[i], std::sqrt(ss + 1e-8), 1e-6);
    for (int k = 0; k < 7; ++k)
      EXPECT_NEAR(y.data<float>()[i * 7 + k], x.data<float>()[i * 7 + k] / std::sqrt(std::max(ss, 1e-12)), 1e-6);
  }
  const Tensor v = Tensor::from_vector({-30.f, -2.f, 0.f, 0.5f, 3.f, 40.f}, {6});
  Tensor sp = Tensor::empty({6}, DType::f32);
  ops::softplus_forward(v, sp);
  for (int64_t i = 0; i < 6; ++i) {
    const double xv = v.data<float>()[i];
    EXPECT_NEAR(sp.data<float>()[i], xv > 20 ? xv : std::log1p(std::exp(xv)), 1e-6 * std::max(1.0, std::fabs(xv)));
  }
}

// ------------------------------------------------------------------ backwards

constexpr double kH = 1e-2, kAtol = 2e-3, kRtol = 2e-3;

TEST(Rigid, QuatToRotBackwardMatchesFiniteDifferences) {
  Generator g(6);
  Tensor q = rand_f32({5, 4}, g);  // any quaternion: R(q) is the quadratic form
  const Tensor w = rand_f32({5, 3, 3}, g);
  auto loss = [&] {
    Tensor r = Tensor::empty({5, 3, 3}, DType::f32);
    ops::quat_to_rot(q, r);
    return weighted_sum(r, w);
  };
  Tensor dq = Tensor::empty({5, 4}, DType::f32);
  ops::quat_to_rot_backward(q, w, dq);
  check_gradient(loss, q, dq, kH, kAtol, kRtol);
}

TEST(Rigid, PreComposeBackwardMatchesFiniteDifferences) {
  Generator g(7);
  const int64_t b = 6;
  Tensor q = unit_quats(b, g), t = rand_f32({b, 3}, g), u = rand_f32({b, 6}, g, 0.5f);
  const Tensor wq = rand_f32({b, 4}, g), wt = rand_f32({b, 3}, g);
  auto loss = [&] {
    Tensor qo = Tensor::empty({b, 4}, DType::f32), to = Tensor::empty({b, 3}, DType::f32);
    ops::quat_pre_compose(q, t, u, qo, to);
    return weighted_sum(qo, wq) + weighted_sum(to, wt);
  };
  Tensor dq = Tensor::empty({b, 4}, DType::f32), du = Tensor::empty({b, 6}, DType::f32);
  ops::quat_pre_compose_backward(q, u, wq, wt, dq, du);
  check_gradient(loss, q, dq, kH, kAtol, kRtol);
  check_gradient(loss, u, du, kH, kAtol, kRtol);
  check_gradient(loss, t, wt, kH, kAtol, kRtol);  // dt = dtrans_out
  // Only the update's gradient (the structure module's stopped rotation): the same values.
  Tensor du2 = Tensor::empty({b, 6}, DType::f32);
  ops::quat_pre_compose_backward(q, u, wq, wt, Tensor(), du2);
  FC_EXPECT_CLOSE(du2, du, 0, 0);
}

TEST(Rigid, TorsionFramesBackwardMatchesFiniteDifferences) {
  Generator g(8);
  const int64_t n = 5, types = 3;
  const Tensor frames = frame_table(types, g);
  const Tensor restype = Tensor::from_vector_i64({0, 2, 1, 2, 0}, {n});
  Tensor rot = rand_f32({n, 3, 3}, g), trans = rand_f32({n, 3}, g), ang = rand_f32({n, 7, 2}, g);
  const Tensor wr = rand_f32({n, 8, 3, 3}, g), wt = rand_f32({n, 8, 3}, g);
  auto loss = [&] {
    Tensor r = Tensor::empty({n, 8, 3, 3}, DType::f32), t = Tensor::empty({n, 8, 3}, DType::f32);
    ops::torsion_frames(restype, frames, rot, trans, ang, r, t);
    return weighted_sum(r, wr) + weighted_sum(t, wt);
  };
  Tensor dr = Tensor::empty({n, 3, 3}, DType::f32), dt = Tensor::empty({n, 3}, DType::f32),
         da = Tensor::empty({n, 7, 2}, DType::f32);
  ops::torsion_frames_backward(restype, frames, rot, ang, wr, wt, dr, dt, da);
  check_gradient(loss, rot, dr, kH, kAtol, kRtol);
  check_gradient(loss, trans, dt, kH, kAtol, kRtol);
  check_gradient(loss, ang, da, kH, kAtol, kRtol);
}

TEST(Rigid, FramesToPointsBackwardMatchesFiniteDifferences) {
  Generator g(9);
  const int64_t n = 4, types = 2, points = 14;
  const PointTables t = point_tables(types, points, g);
  const Tensor restype = Tensor::from_vector_i64({1, 0, 1, 1}, {n});
  Tensor rot = rand_f32({n, 8, 3, 3}, g), trans = rand_f32({n, 8, 3}, g);
  const Tensor w = rand_f32({n, points, 3}, g);
  auto loss = [&] {
    Tensor out = Tensor::empty({n, points, 3}, DType::f32);
    ops::frames_to_points(restype, t.group, t.positions, t.mask, rot, trans, out);
    return weighted_sum(out, w);
  };
  Tensor dr = Tensor::empty({n, 8, 3, 3}, DType::f32), dt = Tensor::empty({n, 8, 3}, DType::f32);
  ops::frames_to_points_backward(restype, t.group, t.positions, t.mask, w, dr, dt);
  check_gradient(loss, rot, dr, kH, kAtol, kRtol, 200);
  check_gradient(loss, trans, dt, kH, kAtol, kRtol, 200);
}

TEST(Rigid, RowOpsBackwardMatchFiniteDifferences) {
  Generator g(10);
  Tensor x = rand_f32({6, 3}, g);
  const Tensor w = rand_f32({6, 3}, g), wn = rand_f32({6}, g);
  {
    auto loss = [&] {
      Tensor y = Tensor::empty({6, 3}, DType::f32), n = Tensor::empty({6}, DType::f32);
      ops::l2_normalize_rows(x, 1e-12f, y, n);
      return weighted_sum(y, w);
    };
    Tensor y = Tensor::empty({6, 3}, DType::f32), n = Tensor::empty({6}, DType::f32), dx = Tensor::empty({6, 3}, DType::f32);
    ops::l2_normalize_rows(x, 1e-12f, y, n);
    ops::l2_normalize_rows_backward(y, n, 1e-12f, w, dx);
    check_gradient(loss, x, dx, 1e-3, kAtol, kRtol);
  }
  {
    auto loss = [&] {
      Tensor y = Tensor::empty({6}, DType::f32);
      ops::norm_rows(x, 1e-8f, y);
      return weighted_sum(y, wn);
    };
    Tensor y = Tensor::empty({6}, DType::f32), dx = Tensor::empty({6, 3}, DType::f32);
    ops::norm_rows(x, 1e-8f, y);
    ops::norm_rows_backward(x, y, wn, dx);
    check_gradient(loss, x, dx, 1e-3, kAtol, kRtol);
  }
  {
    Tensor v = rand_f32({8}, g, 3.f);
    const Tensor wv = rand_f32({8}, g);
    auto loss = [&] {
      Tensor y = Tensor::empty({8}, DType::f32);
      ops::softplus_forward(v, y);
      return weighted_sum(y, wv);
    };
    Tensor dv = Tensor::empty({8}, DType::f32);
    ops::softplus_backward(v, wv, dv);
    check_gradient(loss, v, dv, 1e-3, kAtol, kRtol);
  }
  // The clamp: a zero row's gradient is dy/√eps (y = x/√eps there), not NaN.
  Tensor z = Tensor::zeros({1, 3}, DType::f32), y = Tensor::empty({1, 3}, DType::f32), n = Tensor::empty({1}, DType::f32);
  ops::l2_normalize_rows(z, 1e-12f, y, n);
  const Tensor dy = Tensor::from_vector({1.f, -2.f, 0.5f}, {1, 3});
  Tensor dx = Tensor::empty({1, 3}, DType::f32);
  ops::l2_normalize_rows_backward(y, n, 1e-12f, dy, dx);
  for (int k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(dx.data<float>()[k], dy.data<float>()[k] / 1e-6f);
}

TEST(Rigid, BadArgumentsAreErrorsNamingTheOp) {
  Generator g(11);
  const Tensor frames = frame_table(2, g);
  const Tensor rot = rand_f32({3, 3, 3}, g), trans = rand_f32({3, 3}, g), ang = rand_f32({3, 7, 2}, g);
  Tensor out_r = Tensor::empty({3, 8, 3, 3}, DType::f32), out_t = Tensor::empty({3, 8, 3}, DType::f32);
  auto message_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // A restype outside the table.
  EXPECT_NE(message_of([&] {
              ops::torsion_frames(Tensor::from_vector_i64({0, 2, 1}, {3}), frames, rot, trans, ang, out_r, out_t);
            }).find("torsion_frames: restype 2 of residue 1 outside [0, 2)"),
            std::string::npos);
  // Shapes, dtypes.
  EXPECT_NE(message_of([&] {
              ops::torsion_frames(Tensor::from_vector_i64({0, 1}, {2}), frames, rot, trans, ang, out_r, out_t);
            }).find("restype must be [3]"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              ops::quat_to_rot(rand_f32({4, 3}, g), Tensor::empty({4, 3, 3}, DType::f32));
            }).find("quat_to_rot: quat must be [..., 4]"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              ops::quat_to_rot(rand_f32({4, 4}, g).to(DType::bf16), Tensor::empty({4, 3, 3}, DType::f32));
            }).find("must be f32"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              ops::quat_pre_compose(rand_f32({2, 4}, g), rand_f32({2, 3}, g), rand_f32({2, 5}, g),
                                    Tensor::empty({2, 4}, DType::f32), Tensor::empty({2, 3}, DType::f32));
            }).find("quat_pre_compose: update"),
            std::string::npos);
  const PointTables t = point_tables(2, 14, g);
  t.group.data<int32_t>()[3] = 9;
  t.mask.data<float>()[3] = 1.f;
  EXPECT_NE(message_of([&] {
              Tensor out = Tensor::empty({1, 14, 3}, DType::f32);
              ops::frames_to_points(Tensor::from_vector_i64({0}, {1}), t.group, t.positions, t.mask,
                                    rand_f32({1, 8, 3, 3}, g), rand_f32({1, 8, 3}, g), out);
            }).find("frames_to_points: group 9"),
            std::string::npos);
}

}  // namespace
}  // namespace foldcore
