#include "models/alphafold/structure/all_atom.h"

#include <vector>

#include "data_pipeline/structure/residue_constants.h"
#include "kernels/rigid_math.h"

namespace foldcore::af2 {
namespace {

namespace rc = data::rc;

std::vector<int64_t> restypes(const Tensor& aatype, const char* op) {
  FC_CHECK(aatype.defined() && aatype.dim() == 1, op, ": aatype must be [N], got ",
           aatype.defined() ? aatype.shape().str() : std::string("undefined"));
  std::vector<int64_t> a = aatype.to_vector_i64();
  for (int64_t v : a) FC_CHECK(v >= 0 && v < rc::kRestypeNumWithX, op, ": aatype value ", v, " outside [0, 21)");
  return a;
}

}  // namespace

Rigid torsion_angles_to_frames(const Tensor& aatype, const Rigid& backbone, const Tensor& angles_sin_cos) {
  const std::vector<int64_t> aa = restypes(aatype, "torsion_angles_to_frames");
  const int64_t n = static_cast<int64_t>(aa.size());
  FC_CHECK(angles_sin_cos.shape() == Shape({n, 7, 2}), "torsion_angles_to_frames: angles must be [", n,
           ", 7, 2], got ", angles_sin_cos.shape().str());
  FC_CHECK(backbone.batch_shape() == Shape({n}), "torsion_angles_to_frames: backbone must be a Rigid [", n,
           "], got rot ", backbone.rot.shape().str());
  const Tensor ang = host_f32(angles_sin_cos), br = host_f32(backbone.rot), bt = host_f32(backbone.trans);
  const auto& c = rc::rigid_group_constants();
  // L_g = D_g ∘ R_x(α_g); χ2..χ4 chained onto the previous χ frame; then the backbone frame ∘ each.
  Rigid out{Tensor::empty({n, 8, 3, 3}, DType::f32), Tensor::empty({n, 8, 3}, DType::f32)};
  for (int64_t i = 0; i < n; ++i)
    ops::detail::torsion_frames_elem(&c.default_frame[static_cast<size_t>(aa[static_cast<size_t>(i)])][0][0][0],
                                     br.data<float>() + 9 * i, bt.data<float>() + 3 * i, ang.data<float>() + 14 * i,
                                     out.rot.data<float>() + 72 * i, out.trans.data<float>() + 24 * i);
  return out;
}

Tensor frames_to_atom14_positions(const Tensor& aatype, const Rigid& frames) {
  const std::vector<int64_t> aa = restypes(aatype, "frames_to_atom14_positions");
  const int64_t n = static_cast<int64_t>(aa.size());
  FC_CHECK(frames.batch_shape() == Shape({n, 8}), "frames_to_atom14_positions: frames must be a Rigid [", n,
           ", 8], got rot ", frames.rot.shape().str());
  const auto& c = rc::rigid_group_constants();
  const Tensor rot = host_f32(frames.rot), trans = host_f32(frames.trans);
  Tensor out = Tensor::zeros({n, rc::kAtom14Num, 3}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(aa[static_cast<size_t>(i)]);
    for (int a = 0; a < rc::kAtom14Num; ++a) {
      if (c.atom14_mask[r][static_cast<size_t>(a)] == 0.f) continue;
      const int64_t g = c.atom14_to_rigid_group[r][static_cast<size_t>(a)];
      const auto& p = c.atom14_rigid_group_positions[r][static_cast<size_t>(a)];
      const float* m = rot.data<float>() + (i * 8 + g) * 9;
      const float* t = trans.data<float>() + (i * 8 + g) * 3;
      float* o = out.data<float>() + (i * rc::kAtom14Num + a) * 3;
      ops::detail::frame_point_elem(m, t, p.data(), o);
    }
  }
  return out;
}

Tensor atom14_to_atom37(const Tensor& atom14, const Tensor& residx_atom37_to_atom14, const Tensor& atom37_exists) {
  FC_CHECK(atom14.dim() == 3 && atom14.size(1) == rc::kAtom14Num && atom14.size(2) == 3,
           "atom14_to_atom37: atom14 must be [N, 14, 3], got ", atom14.shape().str());
  const int64_t n = atom14.size(0);
  FC_CHECK(residx_atom37_to_atom14.shape() == Shape({n, rc::kAtomTypeNum}) &&
               atom37_exists.shape() == Shape({n, rc::kAtomTypeNum}),
           "atom14_to_atom37: maps must be [", n, ", 37], got ", residx_atom37_to_atom14.shape().str(), " and ",
           atom37_exists.shape().str());
  const Tensor x = host_f32(atom14), exists = host_f32(atom37_exists);
  const std::vector<int64_t> idx = residx_atom37_to_atom14.to_vector_i64();
  Tensor out = Tensor::empty({n, rc::kAtomTypeNum, 3}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    for (int a = 0; a < rc::kAtomTypeNum; ++a) {
      const int64_t s = idx[static_cast<size_t>(i * rc::kAtomTypeNum + a)];
      FC_CHECK(s >= 0 && s < rc::kAtom14Num, "atom14_to_atom37: atom14 index ", s, " outside [0, 14)");
      const float e = exists.data<float>()[i * rc::kAtomTypeNum + a];
      for (int k = 0; k < 3; ++k)
        out.data<float>()[(i * rc::kAtomTypeNum + a) * 3 + k] = x.data<float>()[(i * rc::kAtom14Num + s) * 3 + k] * e;
    }
  }
  return out;
}

Atom37Maps atom37_maps(const Tensor& aatype) {
  const std::vector<int64_t> aa = restypes(aatype, "atom37_maps");
  const int64_t n = static_cast<int64_t>(aa.size());
  const auto& m = rc::atom14_maps();
  std::vector<int64_t> idx;
  std::vector<float> exists;
  for (int64_t r : aa) {
    for (int a = 0; a < rc::kAtomTypeNum; ++a) {
      idx.push_back(m.atom37_to_atom14[static_cast<size_t>(r)][static_cast<size_t>(a)]);
      exists.push_back(m.atom37_mask[static_cast<size_t>(r)][static_cast<size_t>(a)]);
    }
  }
  return {Tensor::from_vector_i64(idx, {n, rc::kAtomTypeNum}), Tensor::from_vector(exists, {n, rc::kAtomTypeNum})};
}

}  // namespace foldcore::af2
