// CUDA rigid-body geometry (kernels/rigid.h) against the CPU reference, every op forward and
// backward, restypes as i32 and i64.
//
// Tolerances: both backends run kernels/rigid_math.h's expressions in the same order (forwards
// fp32, backwards double rounded once), so they differ only where nvcc contracts a·b + c into an
// FMA: ~1 ulp per contracted operation over chains of a few dozen, on values ≤ ~30 here. atol 1e-5
// + rtol 1e-5 is a few hundred ulp; a wrong index or a missing term is O(1). The device path of
// kernels that read a bad restype (clamped, never out of bounds) is checked not to fault.
#include <gtest/gtest.h>

#include "core/random.h"
#include "kernels/rigid.h"
#include "test_util.h"

namespace foldcore {
namespace {

constexpr double kAtol = 1e-5, kRtol = 1e-5;

Tensor rand_f32(const Shape& s, Generator& g, float scale = 1.f) { return randn(s, g, 0.f, scale); }
Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda()); }
Tensor empty_gpu(const Shape& s) { return Tensor::empty(s, DType::f32, Device::cuda()); }
Tensor host(const Tensor& t) { return t.to(Device::cpu()); }

TEST(RigidCuda, QuaternionOpsMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator g(1);
  const int64_t b = 300;  // several blocks
  const Tensor q = rand_f32({b, 4}, g), t = rand_f32({b, 3}, g), u = rand_f32({b, 6}, g, 0.5f);
  const Tensor gr = rand_f32({b, 3, 3}, g), gq = rand_f32({b, 4}, g), gt = rand_f32({b, 3}, g);
  Tensor r = Tensor::empty({b, 3, 3}, DType::f32), dq = Tensor::empty({b, 4}, DType::f32);
  Tensor qo = Tensor::empty({b, 4}, DType::f32), to = Tensor::empty({b, 3}, DType::f32);
  Tensor dq2 = Tensor::empty({b, 4}, DType::f32), du = Tensor::empty({b, 6}, DType::f32);
  ops::quat_to_rot(q, r);
  ops::quat_to_rot_backward(q, gr, dq);
  ops::quat_pre_compose(q, t, u, qo, to);
  ops::quat_pre_compose_backward(q, u, gq, gt, dq2, du);

  Tensor r_d = empty_gpu({b, 3, 3}), dq_d = empty_gpu({b, 4}), qo_d = empty_gpu({b, 4}), to_d = empty_gpu({b, 3});
  Tensor dq2_d = empty_gpu({b, 4}), du_d = empty_gpu({b, 6});
  ops::quat_to_rot(on_gpu(q), r_d);
  ops::quat_to_rot_backward(on_gpu(q), on_gpu(gr), dq_d);
  ops::quat_pre_compose(on_gpu(q), on_gpu(t), on_gpu(u), qo_d, to_d);
  ops::quat_pre_compose_backward(on_gpu(q), on_gpu(u), on_gpu(gq), on_gpu(gt), dq2_d, du_d);
  FC_EXPECT_CLOSE(host(r_d), r, kAtol, kRtol);
  FC_EXPECT_CLOSE(host(dq_d), dq, kAtol, kRtol);
  FC_EXPECT_CLOSE(host(qo_d), qo, kAtol, kRtol);
  FC_EXPECT_CLOSE(host(to_d), to, kAtol, kRtol);
  FC_EXPECT_CLOSE(host(dq2_d), dq2, kAtol, kRtol);
  FC_EXPECT_CLOSE(host(du_d), du, kAtol, kRtol);
  // Without dquat (the stopped rotation): the update's gradient alone.
  Tensor du3_d = empty_gpu({b, 6});
  ops::quat_pre_compose_backward(on_gpu(q), on_gpu(u), on_gpu(gq), on_gpu(gt), Tensor(), du3_d);
  FC_EXPECT_CLOSE(host(du3_d), du, kAtol, kRtol);
}

TEST(RigidCuda, TorsionFramesAndPointsMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator g(2);
  const int64_t n = 150, types = 21, points = 14;
  const Tensor frames = rand_f32({types, 8, 4, 4}, g);
  Tensor group = Tensor::empty({types, points}, DType::i32), mask = Tensor::empty({types, points}, DType::f32);
  const std::vector<int64_t> grp = randint({types * points}, g, 0, 8).to_vector_i64();
  for (int64_t k = 0; k < types * points; ++k) {
    group.data<int32_t>()[k] = static_cast<int32_t>(grp[static_cast<size_t>(k)]);
    mask.data<float>()[k] = k % 4 == 1 ? 0.f : 1.f;
  }
  const Tensor positions = rand_f32({types, points, 3}, g);
  const Tensor rot = rand_f32({n, 3, 3}, g), trans = rand_f32({n, 3}, g), ang = rand_f32({n, 7, 2}, g);
  const Tensor g_r = rand_f32({n, 8, 3, 3}, g), g_t = rand_f32({n, 8, 3}, g), g_x = rand_f32({n, points, 3}, g);
  for (DType it : {DType::i64, DType::i32}) {
    SCOPED_TRACE(it == DType::i64 ? "i64 restype" : "i32 restype");
    const Tensor restype = randint({n}, g, 0, types).to(it);
    Tensor fr = Tensor::empty({n, 8, 3, 3}, DType::f32), ft = Tensor::empty({n, 8, 3}, DType::f32);
    Tensor dr = Tensor::empty({n, 3, 3}, DType::f32), dt = Tensor::empty({n, 3}, DType::f32),
           da = Tensor::empty({n, 7, 2}, DType::f32);
    Tensor x = Tensor::empty({n, points, 3}, DType::f32), dxr = Tensor::empty({n, 8, 3, 3}, DType::f32),
           dxt = Tensor::empty({n, 8, 3}, DType::f32);
    ops::torsion_frames(restype, frames, rot, trans, ang, fr, ft);
    ops::torsion_frames_backward(restype, frames, rot, ang, g_r, g_t, dr, dt, da);
    ops::frames_to_points(restype, group, positions, mask, fr, ft, x);
    ops::frames_to_points_backward(restype, group, positions, mask, g_x, dxr, dxt);

    const Tensor rt_d = on_gpu(restype), fr_tab = on_gpu(frames), grp_d = on_gpu(group), pos_d = on_gpu(positions),
                 mask_d = on_gpu(mask);
    Tensor fr_d = empty_gpu({n, 8, 3, 3}), ft_d = empty_gpu({n, 8, 3});
    Tensor dr_d = empty_gpu({n, 3, 3}), dt_d = empty_gpu({n, 3}), da_d = empty_gpu({n, 7, 2});
    Tensor x_d = empty_gpu({n, points, 3}), dxr_d = empty_gpu({n, 8, 3, 3}), dxt_d = empty_gpu({n, 8, 3});
    ops::torsion_frames(rt_d, fr_tab, on_gpu(rot), on_gpu(trans), on_gpu(ang), fr_d, ft_d);
    ops::torsion_frames_backward(rt_d, fr_tab, on_gpu(rot), on_gpu(ang), on_gpu(g_r), on_gpu(g_t), dr_d, dt_d, da_d);
    ops::frames_to_points(rt_d, grp_d, pos_d, mask_d, on_gpu(fr), on_gpu(ft), x_d);
    ops::frames_to_points_backward(rt_d, grp_d, pos_d, mask_d, on_gpu(g_x), dxr_d, dxt_d);
    FC_EXPECT_CLOSE(host(fr_d), fr, kAtol, kRtol);
    FC_EXPECT_CLOSE(host(ft_d), ft, kAtol, kRtol);
    FC_EXPECT_CLOSE(host(dr_d), dr, kAtol, kRtol);
    FC_EXPECT_CLOSE(host(dt_d), dt, kAtol, kRtol);
    FC_EXPECT_CLOSE(host(da_d), da, kAtol, kRtol);
    FC_EXPECT_CLOSE(host(x_d), x, kAtol, kRtol);
    FC_EXPECT_CLOSE(host(dxr_d), dxr, kAtol, kRtol);
    FC_EXPECT_CLOSE(host(dxt_d), dxt, kAtol, kRtol);

    // Only the angles' gradient: the same values.
    Tensor da2_d = empty_gpu({n, 7, 2});
    ops::torsion_frames_backward(rt_d, fr_tab, on_gpu(rot), on_gpu(ang), on_gpu(g_r), on_gpu(g_t), Tensor(), Tensor(),
                                 da2_d);
    FC_EXPECT_CLOSE(host(da2_d), da, kAtol, kRtol);
  }
  // A bad restype on the device is read as the last type (the caller validates): no fault.
  const Tensor bad = on_gpu(Tensor::from_vector_i64({-3, 99}, {2}));
  Tensor fr_d = empty_gpu({2, 8, 3, 3}), ft_d = empty_gpu({2, 8, 3});
  ops::torsion_frames(bad, on_gpu(frames), on_gpu(rot.narrow(0, 0, 2).contiguous()),
                      on_gpu(trans.narrow(0, 0, 2).contiguous()), on_gpu(ang.narrow(0, 0, 2).contiguous()), fr_d,
                      ft_d);
  EXPECT_EQ(host(fr_d).numel(), 144);
}

TEST(RigidCuda, RowOpsMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator g(3);
  const int64_t rows = 333, c = 3;
  Tensor x = rand_f32({rows, c}, g);
  for (int k = 0; k < c; ++k) x.data<float>()[5 * c + k] = 0.f;  // a clamped row
  const Tensor dy = rand_f32({rows, c}, g), dn = rand_f32({rows}, g);
  Tensor y = Tensor::empty({rows, c}, DType::f32), n = Tensor::empty({rows}, DType::f32),
         dx = Tensor::empty({rows, c}, DType::f32);
  Tensor r = Tensor::empty({rows}, DType::f32), dxr = Tensor::empty({rows, c}, DType::f32);
  Tensor sp = Tensor::empty({rows, c}, DType::f32), dsp = Tensor::empty({rows, c}, DType::f32);
  ops::l2_normalize_rows(x, 1e-12f, y, n);
  ops::l2_normalize_rows_backward(y, n, 1e-12f, dy, dx);
  ops::norm_rows(x, 1e-8f, r);
  ops::norm_rows_backward(x, r, dn, dxr);
  ops::softplus_forward(x, sp);
  ops::softplus_backward(x, dy, dsp);

  const Tensor xd = on_gpu(x);
  Tensor y_d = empty_gpu({rows, c}), n_d = empty_gpu({rows}), dx_d = empty_gpu({rows, c});
  Tensor r_d = empty_gpu({rows}), dxr_d = empty_gpu({rows, c}), sp_d = empty_gpu({rows, c}), dsp_d = empty_gpu({rows, c});
  ops::l2_normalize_rows(xd, 1e-12f, y_d, n_d);
  ops::l2_normalize_rows_backward(y_d, n_d, 1e-12f, on_gpu(dy), dx_d);
  ops::norm_rows(xd, 1e-8f, r_d);
  ops::norm_rows_backward(xd, r_d, on_gpu(dn), dxr_d);
  ops::softplus_forward(xd, sp_d);
  ops::softplus_backward(xd, on_gpu(dy), dsp_d);
  FC_EXPECT_CLOSE(host(y_d), y, kAtol, kRtol);
  FC_EXPECT_CLOSE(host(n_d), n, kAtol, kRtol);
  // The clamped row's gradient is dy/1e-6: O(1e6), relative tolerance only there.
  FC_EXPECT_CLOSE(host(dx_d), dx, kAtol, kRtol);
  FC_EXPECT_CLOSE(host(r_d), r, kAtol, kRtol);
  FC_EXPECT_CLOSE(host(dxr_d), dxr, kAtol, kRtol);
  FC_EXPECT_CLOSE(host(sp_d), sp, kAtol, kRtol);
  FC_EXPECT_CLOSE(host(dsp_d), dsp, kAtol, kRtol);
}

}  // namespace
}  // namespace foldcore
