// Argument checks and backend dispatch of kernels/rigid.h.
#include "kernels/rigid.h"

#include <initializer_list>
#include <string_view>

#include "kernels/cpu/rigid_cpu.h"
#include "kernels/pointwise_checks.h"
#ifdef FOLDCORE_HAVE_CUDA
#include "kernels/cuda/rigid_cuda.h"
#endif

namespace foldcore::ops {
namespace {

using detail::check_contiguous;
using detail::check_defined;
using detail::check_index;
using detail::check_same_device;

// An f32 contiguous tensor of shape [lead, tail…] on `like`'s device (`like` itself when null).
void check_f32(std::string_view op, std::string_view name, const Tensor& t, int64_t lead,
               std::initializer_list<int64_t> tail, const Tensor* like = nullptr) {
  check_defined(op, name, t);
  Shape s;
  s.push_back(lead);
  for (int64_t d : tail) s.push_back(d);
  FC_CHECK(t.dtype() == DType::f32, op, ": ", name, " must be f32, got ", t.str());
  FC_CHECK(t.shape() == s, op, ": ", name, " must be ", s.str(), ", got ", t.str());
  check_contiguous(op, name, t);
  if (like != nullptr) check_same_device(op, "the first input", *like, name, t);
}

// Rows of a batch tensor [B…, k]: B = numel / k, with its last axis k.
int64_t batch_of(std::string_view op, std::string_view name, const Tensor& t, int64_t k) {
  check_defined(op, name, t);
  FC_CHECK(t.dim() >= 1 && t.size(-1) == k, op, ": ", name, " must be [..., ", k, "], got ", t.str());
  return t.numel() / k;
}

// A batch tensor flattened to [B, tail…] (a view; checked f32 and contiguous).
Tensor flat(std::string_view op, std::string_view name, const Tensor& t, int64_t b, std::initializer_list<int64_t> tail,
            const Tensor* like) {
  check_defined(op, name, t);
  Shape s;
  s.push_back(b);
  for (int64_t d : tail) s.push_back(d);
  FC_CHECK(t.numel() == s.product(), op, ": ", name, " ", t.str(), " must hold ", s.str(), " values");
  check_contiguous(op, name, t);
  const Tensor v = t.view(s);
  check_f32(op, name, v, b, tail, like);
  return v;
}

void check_restype(std::string_view op, const Tensor& restype, int64_t n, const Tensor& like) {
  check_index(op, "restype", restype);
  FC_CHECK(restype.shape() == Shape({n}), op, ": restype must be [", n, "], got ", restype.str());
  check_same_device(op, "restype", restype, "rot", like);
}

}  // namespace

void quat_to_rot(const Tensor& quat, const Tensor& rot) {
  const int64_t b = batch_of("quat_to_rot", "quat", quat, 4);
  const Tensor q = flat("quat_to_rot", "quat", quat, b, {4}, nullptr);
  const Tensor r = flat("quat_to_rot", "rot", rot, b, {3, 3}, &q);
  if (b == 0) return;
  FC_POINTWISE_DISPATCH(q.device(), quat_to_rot(q, r));
}

void quat_to_rot_backward(const Tensor& quat, const Tensor& drot, const Tensor& dquat) {
  const int64_t b = batch_of("quat_to_rot_backward", "quat", quat, 4);
  const Tensor q = flat("quat_to_rot_backward", "quat", quat, b, {4}, nullptr);
  const Tensor g = flat("quat_to_rot_backward", "drot", drot, b, {3, 3}, &q);
  const Tensor d = flat("quat_to_rot_backward", "dquat", dquat, b, {4}, &q);
  if (b == 0) return;
  FC_POINTWISE_DISPATCH(q.device(), quat_to_rot_backward(q, g, d));
}

void quat_pre_compose(const Tensor& quat, const Tensor& trans, const Tensor& update, const Tensor& quat_out,
                      const Tensor& trans_out) {
  constexpr std::string_view op = "quat_pre_compose";
  const int64_t b = batch_of(op, "quat", quat, 4);
  const Tensor q = flat(op, "quat", quat, b, {4}, nullptr);
  const Tensor t = flat(op, "trans", trans, b, {3}, &q);
  const Tensor u = flat(op, "update", update, b, {6}, &q);
  const Tensor qo = flat(op, "quat_out", quat_out, b, {4}, &q);
  const Tensor to = flat(op, "trans_out", trans_out, b, {3}, &q);
  if (b == 0) return;
  FC_POINTWISE_DISPATCH(q.device(), quat_pre_compose(q, t, u, qo, to));
}

void quat_pre_compose_backward(const Tensor& quat, const Tensor& update, const Tensor& dquat_out,
                               const Tensor& dtrans_out, const Tensor& dquat, const Tensor& dupdate) {
  constexpr std::string_view op = "quat_pre_compose_backward";
  const int64_t b = batch_of(op, "quat", quat, 4);
  const Tensor q = flat(op, "quat", quat, b, {4}, nullptr);
  const Tensor u = flat(op, "update", update, b, {6}, &q);
  const Tensor gq = flat(op, "dquat_out", dquat_out, b, {4}, &q);
  const Tensor gt = flat(op, "dtrans_out", dtrans_out, b, {3}, &q);
  const Tensor dq = dquat.defined() ? flat(op, "dquat", dquat, b, {4}, &q) : Tensor();
  const Tensor du = dupdate.defined() ? flat(op, "dupdate", dupdate, b, {6}, &q) : Tensor();
  if (b == 0 || (!dq.defined() && !du.defined())) return;
  FC_POINTWISE_DISPATCH(q.device(), quat_pre_compose_backward(q, u, gq, gt, dq, du));
}

void torsion_frames(const Tensor& restype, const Tensor& frames, const Tensor& rot, const Tensor& trans,
                    const Tensor& angles, const Tensor& out_rot, const Tensor& out_trans) {
  constexpr std::string_view op = "torsion_frames";
  check_defined(op, "rot", rot);
  const int64_t n = rot.dim() == 3 ? rot.size(0) : -1;
  check_f32(op, "rot", rot, n, {3, 3});
  check_restype(op, restype, n, rot);
  check_f32(op, "frames", frames, frames.defined() && frames.dim() == 4 ? frames.size(0) : -1, {8, 4, 4}, &rot);
  check_f32(op, "trans", trans, n, {3}, &rot);
  check_f32(op, "angles", angles, n, {7, 2}, &rot);
  check_f32(op, "out_rot", out_rot, n, {8, 3, 3}, &rot);
  check_f32(op, "out_trans", out_trans, n, {8, 3}, &rot);
  FC_CHECK(frames.size(0) > 0, op, ": frames has no residue type");
  if (n == 0) return;
  FC_POINTWISE_DISPATCH(rot.device(), torsion_frames(restype, frames, rot, trans, angles, out_rot, out_trans));
}

void torsion_frames_backward(const Tensor& restype, const Tensor& frames, const Tensor& rot, const Tensor& angles,
                             const Tensor& dout_rot, const Tensor& dout_trans, const Tensor& drot,
                             const Tensor& dtrans, const Tensor& dangles) {
  constexpr std::string_view op = "torsion_frames_backward";
  check_defined(op, "rot", rot);
  const int64_t n = rot.dim() == 3 ? rot.size(0) : -1;
  check_f32(op, "rot", rot, n, {3, 3});
  check_restype(op, restype, n, rot);
  check_f32(op, "frames", frames, frames.defined() && frames.dim() == 4 ? frames.size(0) : -1, {8, 4, 4}, &rot);
  check_f32(op, "angles", angles, n, {7, 2}, &rot);
  check_f32(op, "dout_rot", dout_rot, n, {8, 3, 3}, &rot);
  check_f32(op, "dout_trans", dout_trans, n, {8, 3}, &rot);
  if (drot.defined()) check_f32(op, "drot", drot, n, {3, 3}, &rot);
  if (dtrans.defined()) check_f32(op, "dtrans", dtrans, n, {3}, &rot);
  if (dangles.defined()) check_f32(op, "dangles", dangles, n, {7, 2}, &rot);
  FC_CHECK(frames.size(0) > 0, op, ": frames has no residue type");
  if (n == 0 || (!drot.defined() && !dtrans.defined() && !dangles.defined())) return;
  FC_POINTWISE_DISPATCH(rot.device(), torsion_frames_backward(restype, frames, rot, angles, dout_rot, dout_trans, drot,
                                                              dtrans, dangles));
}

namespace {
// The per-type tables of frames_to_points: group [T, K] i32, positions [T, K, 3], mask [T, K].
void check_point_tables(std::string_view op, const Tensor& group, const Tensor& positions, const Tensor& mask,
                        const Tensor& like) {
  check_defined(op, "group", group);
  FC_CHECK(group.dtype() == DType::i32 && group.dim() == 2 && group.size(0) > 0, op,
           ": group must be a non-empty i32 [T, K], got ", group.str());
  check_contiguous(op, "group", group);
  check_same_device(op, "rot", like, "group", group);
  check_f32(op, "positions", positions, group.size(0), {group.size(1), 3}, &like);
  check_f32(op, "mask", mask, group.size(0), {group.size(1)}, &like);
}
}  // namespace

void frames_to_points(const Tensor& restype, const Tensor& group, const Tensor& positions, const Tensor& mask,
                      const Tensor& rot, const Tensor& trans, const Tensor& out) {
  constexpr std::string_view op = "frames_to_points";
  check_defined(op, "rot", rot);
  FC_CHECK(rot.dim() == 4, op, ": rot must be [N, G, 3, 3], got ", rot.str());
  const int64_t n = rot.size(0), g = rot.size(1);
  FC_CHECK(g >= 1 && g <= 8, op, ": between 1 and 8 frames per residue, got ", g);
  check_f32(op, "rot", rot, n, {g, 3, 3});
  check_restype(op, restype, n, rot);
  check_point_tables(op, group, positions, mask, rot);
  check_f32(op, "trans", trans, n, {g, 3}, &rot);
  check_f32(op, "out", out, n, {group.size(1), 3}, &rot);
  if (n == 0) return;
  FC_POINTWISE_DISPATCH(rot.device(), frames_to_points(restype, group, positions, mask, rot, trans, out));
}

void frames_to_points_backward(const Tensor& restype, const Tensor& group, const Tensor& positions,
                               const Tensor& mask, const Tensor& dout, const Tensor& drot, const Tensor& dtrans) {
  constexpr std::string_view op = "frames_to_points_backward";
  check_defined(op, "drot", drot);
  FC_CHECK(drot.dim() == 4, op, ": drot must be [N, G, 3, 3], got ", drot.str());
  const int64_t n = drot.size(0), g = drot.size(1);
  FC_CHECK(g >= 1 && g <= 8, op, ": between 1 and 8 frames per residue, got ", g);
  check_f32(op, "drot", drot, n, {g, 3, 3});
  check_restype(op, restype, n, drot);
  check_point_tables(op, group, positions, mask, drot);
  check_f32(op, "dtrans", dtrans, n, {g, 3}, &drot);
  check_f32(op, "dout", dout, n, {group.size(1), 3}, &drot);
  if (n == 0) return;
  FC_POINTWISE_DISPATCH(drot.device(), frames_to_points_backward(restype, group, positions, mask, dout, drot, dtrans));
}

void l2_normalize_rows(const Tensor& x, float eps, const Tensor& y, const Tensor& norm) {
  constexpr std::string_view op = "l2_normalize_rows";
  check_defined(op, "x", x);
  FC_CHECK(x.dim() >= 1 && x.size(-1) > 0, op, ": x must have a non-empty last axis, got ", x.str());
  const int64_t c = x.size(-1), rows = x.numel() / c;
  const Tensor xv = flat(op, "x", x, rows, {c}, nullptr);
  const Tensor yv = flat(op, "y", y, rows, {c}, &xv);
  check_f32(op, "norm", norm.defined() ? norm.view({norm.numel()}) : norm, rows, {}, &xv);
  if (rows == 0) return;
  FC_POINTWISE_DISPATCH(x.device(), l2_normalize_rows(xv, eps, yv, norm));
}

void l2_normalize_rows_backward(const Tensor& y, const Tensor& norm, float eps, const Tensor& dy, const Tensor& dx) {
  constexpr std::string_view op = "l2_normalize_rows_backward";
  check_defined(op, "y", y);
  FC_CHECK(y.dim() >= 1 && y.size(-1) > 0, op, ": y must have a non-empty last axis, got ", y.str());
  const int64_t c = y.size(-1), rows = y.numel() / c;
  const Tensor yv = flat(op, "y", y, rows, {c}, nullptr);
  check_f32(op, "norm", norm.defined() ? norm.view({norm.numel()}) : norm, rows, {}, &yv);
  const Tensor gv = flat(op, "dy", dy, rows, {c}, &yv);
  const Tensor dv = flat(op, "dx", dx, rows, {c}, &yv);
  if (rows == 0) return;
  FC_POINTWISE_DISPATCH(y.device(), l2_normalize_rows_backward(yv, norm, eps, gv, dv));
}

void norm_rows(const Tensor& x, float eps, const Tensor& y) {
  constexpr std::string_view op = "norm_rows";
  check_defined(op, "x", x);
  FC_CHECK(x.dim() >= 1 && x.size(-1) > 0, op, ": x must have a non-empty last axis, got ", x.str());
  const int64_t c = x.size(-1), rows = x.numel() / c;
  const Tensor xv = flat(op, "x", x, rows, {c}, nullptr);
  const Tensor yv = flat(op, "y", y, rows, {}, &xv);
  if (rows == 0) return;
  FC_POINTWISE_DISPATCH(x.device(), norm_rows(xv, eps, yv));
}

void norm_rows_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  constexpr std::string_view op = "norm_rows_backward";
  check_defined(op, "x", x);
  FC_CHECK(x.dim() >= 1 && x.size(-1) > 0, op, ": x must have a non-empty last axis, got ", x.str());
  const int64_t c = x.size(-1), rows = x.numel() / c;
  const Tensor xv = flat(op, "x", x, rows, {c}, nullptr);
  const Tensor yv = flat(op, "y", y, rows, {}, &xv);
  const Tensor gv = flat(op, "dy", dy, rows, {}, &xv);
  const Tensor dv = flat(op, "dx", dx, rows, {c}, &xv);
  if (rows == 0) return;
  FC_POINTWISE_DISPATCH(x.device(), norm_rows_backward(xv, yv, gv, dv));
}

void softplus_forward(const Tensor& x, const Tensor& y) {
  check_defined("softplus_forward", "x", x);
  const Tensor xv = flat("softplus_forward", "x", x, x.numel(), {}, nullptr);
  const Tensor yv = flat("softplus_forward", "y", y, x.numel(), {}, &xv);
  if (x.numel() == 0) return;
  FC_POINTWISE_DISPATCH(x.device(), softplus_forward(xv, yv));
}

void softplus_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_defined("softplus_backward", "x", x);
  const Tensor xv = flat("softplus_backward", "x", x, x.numel(), {}, nullptr);
  const Tensor gv = flat("softplus_backward", "dy", dy, x.numel(), {}, &xv);
  const Tensor dv = flat("softplus_backward", "dx", dx, x.numel(), {}, &xv);
  if (x.numel() == 0) return;
  FC_POINTWISE_DISPATCH(x.device(), softplus_backward(xv, gv, dv));
}

}  // namespace foldcore::ops
