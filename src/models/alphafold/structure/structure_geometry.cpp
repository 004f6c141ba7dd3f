#include "models/alphafold/structure/structure_geometry.h"

#include <cstring>
#include <vector>

#include "data_pipeline/structure/residue_constants.h"
#include "kernels/rigid.h"

namespace foldcore::af2 {
namespace {

using autograd::BackwardCtx;
using autograd::Function;
namespace rc = data::rc;

// Geometry is fp32 whatever the network's dtype (bf16 autocast): an input or an incoming
// gradient as contiguous fp32 on its own device (itself when it already is).
Tensor f32c(const Tensor& t) { return t.to(DType::f32).contiguous(); }

Tensor empty_like_f32(const Shape& s, const Tensor& like) { return Tensor::empty(s, DType::f32, like.device()); }

// An overwrite target for input i's gradient, fp32 (the engine converts it to the input's dtype).
Tensor grad_target(BackwardCtx& ctx, int i) { return ctx.needs_grad(i) ? ctx.new_grad(i, DType::f32) : Tensor(); }

// ---------------------------------------------------------------- Alg. 23
struct PreComposeFn final : Function {
  Tensor q, u;  // fp32 inputs
  void backward(BackwardCtx& ctx) override {
    const Tensor gq = f32c(ctx.grad_output(0)), gt = f32c(ctx.grad_output(1));
    const Tensor dq = grad_target(ctx, 0), du = grad_target(ctx, 2);
    ops::quat_pre_compose_backward(q, u, gq, gt, dq, du);
    if (ctx.needs_grad(1)) ctx.put_grad(1, gt.clone());
  }
};

struct QuatToRotFn final : Function {
  Tensor q;
  void backward(BackwardCtx& ctx) override {
    const Tensor dq = grad_target(ctx, 0);
    if (dq.defined()) ops::quat_to_rot_backward(q, f32c(ctx.grad_output(0)), dq);
  }
};

// ---------------------------------------------------------------- Alg. 24 lines 10–12
struct TorsionFramesFn final : Function {
  ResidueGeometry geo;
  Tensor rot, ang;  // fp32 inputs
  void backward(BackwardCtx& ctx) override {
    const Tensor dr = grad_target(ctx, 0), dt = grad_target(ctx, 1), da = grad_target(ctx, 2);
    ops::torsion_frames_backward(geo.restype, geo.frames, rot, ang, f32c(ctx.grad_output(0)),
                                 f32c(ctx.grad_output(1)), dr, dt, da);
  }
};

struct Atom14Fn final : Function {
  ResidueGeometry geo;
  Shape rot_shape, trans_shape;
  Device device;
  void backward(BackwardCtx& ctx) override {
    // The op writes both; an unneeded one goes to a scratch buffer.
    const Tensor dr = ctx.needs_grad(0) ? ctx.new_grad(0, DType::f32) : Tensor::empty(rot_shape, DType::f32, device);
    const Tensor dt = ctx.needs_grad(1) ? ctx.new_grad(1, DType::f32) : Tensor::empty(trans_shape, DType::f32, device);
    ops::frames_to_points_backward(geo.restype, geo.group, geo.positions, geo.mask, f32c(ctx.grad_output(0)), dr,
                                   dt);
  }
};

// AlphaFold2's per-type tables as host tensors, built once (immutable afterwards).
struct HostTables {
  Tensor frames, group, positions, mask;
};
const HostTables& host_tables() {
  static const HostTables t = [] {
    const auto& c = rc::rigid_group_constants();
    constexpr int64_t kTypes = rc::kRestypeNumWithX, kAtoms = rc::kAtom14Num;
    HostTables h{Tensor::empty({kTypes, 8, 4, 4}, DType::f32), Tensor::empty({kTypes, kAtoms}, DType::i32),
                 Tensor::empty({kTypes, kAtoms, 3}, DType::f32), Tensor::empty({kTypes, kAtoms}, DType::f32)};
    static_assert(sizeof(c.default_frame) == sizeof(float) * kTypes * 8 * 16);
    std::memcpy(h.frames.data<float>(), c.default_frame.data(), sizeof(c.default_frame));
    for (int64_t a = 0; a < kTypes; ++a)
      for (int64_t k = 0; k < kAtoms; ++k) {
        const auto ua = static_cast<size_t>(a), uk = static_cast<size_t>(k);
        h.group.data<int32_t>()[a * kAtoms + k] = c.atom14_to_rigid_group[ua][uk];
        h.mask.data<float>()[a * kAtoms + k] = c.atom14_mask[ua][uk];
        for (int x = 0; x < 3; ++x)
          h.positions.data<float>()[(a * kAtoms + k) * 3 + x] = c.atom14_rigid_group_positions[ua][uk][static_cast<size_t>(x)];
      }
    return h;
  }();
  return t;
}

}  // namespace

ResidueGeometry ResidueGeometry::of(const Tensor& aatype, int64_t n, Device device) {
  FC_CHECK(aatype.defined() && aatype.shape() == Shape({n}), "ResidueGeometry: aatype must be [", n, "], got ",
           aatype.defined() ? aatype.shape().str() : std::string("undefined"));
  const std::vector<int64_t> a = aatype.to_vector_i64();
  for (int64_t v : a) FC_CHECK(v >= 0 && v < rc::kRestypeNumWithX, "ResidueGeometry: aatype value ", v, " outside [0, 21)");
  const HostTables& h = host_tables();
  return {Tensor::from_vector_i64(a, {n}, DType::i64, device), h.frames.to(device), h.group.to(device),
          h.positions.to(device), h.mask.to(device)};
}

QuatFrameVar pre_compose_var(const QuatFrameVar& frame, const Variable& update) {
  FC_CHECK(frame.quat.defined() && frame.trans.defined() && update.defined(), "pre_compose_var: undefined input");
  FC_CHECK(update.dim() >= 1 && update.size(-1) == 6, "pre_compose_var: update must be [..., 6], got ",
           update.shape().str());
  auto fn = std::make_unique<PreComposeFn>();
  fn->q = f32c(frame.quat.value());
  fn->u = f32c(update.value());
  const Tensor t = f32c(frame.trans.value());
  Tensor qo = empty_like_f32(fn->q.shape(), fn->q), to = empty_like_f32(t.shape(), fn->q);
  ops::quat_pre_compose(fn->q, t, fn->u, qo, to);
  const auto v = autograd::record("pre_compose", std::move(fn), {frame.quat, frame.trans, update}, {qo, to});
  return {v[0], v[1]};
}

Variable quat_to_rot_var(const Variable& quat) {
  FC_CHECK(quat.defined() && quat.dim() >= 1 && quat.size(-1) == 4, "quat_to_rot_var: quat must be [..., 4]");
  auto fn = std::make_unique<QuatToRotFn>();
  fn->q = f32c(quat.value());
  Shape s;
  for (int i = 0; i + 1 < quat.dim(); ++i) s.push_back(quat.size(i));
  s.push_back(3);
  s.push_back(3);
  Tensor r = empty_like_f32(s, fn->q);
  ops::quat_to_rot(fn->q, r);
  return autograd::record1("quat_to_rot", std::move(fn), {quat}, r);
}

RigidVar torsion_angles_to_frames_var(const ResidueGeometry& geo, const RigidVar& backbone, const Variable& angles) {
  FC_CHECK(backbone.rot.defined() && backbone.trans.defined() && angles.defined(),
           "torsion_angles_to_frames_var: undefined input");
  const int64_t n = angles.size(0);
  FC_CHECK(geo.restype.shape() == Shape({n}), "torsion_angles_to_frames_var: ", n, " residues' angles for ",
           geo.restype.size(0), " residue types");
  auto fn = std::make_unique<TorsionFramesFn>();
  fn->geo = geo;
  fn->rot = f32c(backbone.rot.value());
  fn->ang = f32c(angles.value());
  const Tensor t = f32c(backbone.trans.value());
  Tensor gr = empty_like_f32({n, 8, 3, 3}, fn->rot), gt = empty_like_f32({n, 8, 3}, fn->rot);
  ops::torsion_frames(geo.restype, geo.frames, fn->rot, t, fn->ang, gr, gt);
  const auto v = autograd::record("torsion_angles_to_frames", std::move(fn), {backbone.rot, backbone.trans, angles},
                                  {gr, gt});
  return {v[0], v[1]};
}

RigidVar torsion_angles_to_frames_var(const Tensor& aatype, const RigidVar& backbone, const Variable& angles) {
  FC_CHECK(angles.defined() && angles.dim() >= 1, "torsion_angles_to_frames_var: undefined angles");
  return torsion_angles_to_frames_var(ResidueGeometry::of(aatype, angles.size(0), angles.device()), backbone, angles);
}

Variable frames_to_atom14_positions_var(const ResidueGeometry& geo, const RigidVar& frames) {
  FC_CHECK(frames.rot.defined() && frames.trans.defined(), "frames_to_atom14_positions_var: undefined input");
  const int64_t n = frames.rot.size(0);
  FC_CHECK(geo.restype.shape() == Shape({n}), "frames_to_atom14_positions_var: ", n, " residues' frames for ",
           geo.restype.size(0), " residue types");
  auto fn = std::make_unique<Atom14Fn>();
  fn->geo = geo;
  const Tensor r = f32c(frames.rot.value()), t = f32c(frames.trans.value());
  fn->rot_shape = r.shape();
  fn->trans_shape = t.shape();
  fn->device = r.device();
  Tensor x = empty_like_f32({n, rc::kAtom14Num, 3}, r);
  ops::frames_to_points(geo.restype, geo.group, geo.positions, geo.mask, r, t, x);
  return autograd::record1("frames_to_atom14_positions", std::move(fn), {frames.rot, frames.trans}, x);
}

Variable frames_to_atom14_positions_var(const Tensor& aatype, const RigidVar& frames) {
  FC_CHECK(frames.rot.defined(), "frames_to_atom14_positions_var: undefined input");
  return frames_to_atom14_positions_var(ResidueGeometry::of(aatype, frames.rot.size(0), frames.rot.device()), frames);
}

}  // namespace foldcore::af2
