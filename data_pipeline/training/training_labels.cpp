#include "data_pipeline/training/training_labels.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "core/error.h"
#include "data_pipeline/structure/geometry.h"
#include "data_pipeline/structure/residue_constants.h"

namespace foldcore::data {
namespace {

constexpr int kGroups = rc::kNumRigidGroups;
constexpr size_t kNumLabelArrays = 21;

// AlphaFold's per-restype rigid-group tables (all_atom.atom37_to_frames): the three base atoms
// (atom37 indices: point on -x, origin, point in the xy-plane) of each group, whether the group
// exists, and whether it is the π-symmetric (ambiguous) group of a renaming-swap residue.
struct RigidGroupTables {
  std::array<std::array<std::array<int, 3>, kGroups>, rc::kRestypeNumWithX> base_atoms{};
  std::array<std::array<float, kGroups>, rc::kRestypeNumWithX> group_exists{};
  std::array<std::array<float, kGroups>, rc::kRestypeNumWithX> is_ambiguous{};
};

const RigidGroupTables& rigid_group_tables() {
  static const RigidGroupTables tables = [] {
    RigidGroupTables t;
    const int c = rc::atom_order("C"), ca = rc::atom_order("CA"), n = rc::atom_order("N"), o = rc::atom_order("O");
    for (int r = 0; r < rc::kRestypeNumWithX; ++r) {
      auto& base = t.base_atoms[static_cast<size_t>(r)];
      base[0] = {c, ca, n};   // backbone
      base[3] = {ca, c, o};   // ψ
      t.group_exists[static_cast<size_t>(r)][0] = 1.0f;  // UNK included, as in AlphaFold
      t.group_exists[static_cast<size_t>(r)][3] = 1.0f;
      if (r == rc::kUnkRestypeIndex) continue;
      for (int k = 0; k < rc::num_chi_angles(r); ++k) {
        const rc::ChiQuad& quad = rc::kChiAnglesAtoms[static_cast<size_t>(r)][static_cast<size_t>(k)];
        base[static_cast<size_t>(4 + k)] = {rc::atom_order(quad[1]), rc::atom_order(quad[2]), rc::atom_order(quad[3])};
        t.group_exists[static_cast<size_t>(r)][static_cast<size_t>(4 + k)] = 1.0f;
      }
    }
    for (const rc::AtomSwap& swap : rc::kResidueAtomRenamingSwaps) {
      const int r = rc::resname_to_idx(swap.resname);
      t.is_ambiguous[static_cast<size_t>(r)][static_cast<size_t>(3 + rc::num_chi_angles(r))] = 1.0f;  // last χ
    }
    return t;
  }();
  return tables;
}

// Writes frame f, its columns multiplied by `flip` (±1 per axis), as a row-major 4x4 [R t; 0 1].
void write_4x4(const geom::Frame& f, const std::array<double, 3>& flip, float* out) {
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) out[i * 4 + j] = static_cast<float>(f.axes[static_cast<size_t>(j)][static_cast<size_t>(i)] * flip[static_cast<size_t>(j)]);
    out[i * 4 + 3] = static_cast<float>(f.origin[static_cast<size_t>(i)]);
  }
  out[12] = out[13] = out[14] = 0.0f;
  out[15] = 1.0f;
}

}  // namespace

int64_t ChainLabels::Array::row_size() const {
  int64_t s = 1;
  for (int64_t d : row_shape) s *= d;
  return s;
}

const ChainLabels::Array& ChainLabels::at(const std::string& name) const {
  for (const Array& a : arrays)
    if (a.name == name) return a;
  FC_THROW("ChainLabels: no label array '", name, "'");
}

ChainLabels compute_chain_labels(std::span<const int32_t> aatype, std::span<const float> positions,
                                 std::span<const float> mask) {
  const size_t n = aatype.size();
  FC_CHECK(positions.size() == n * 37 * 3 && mask.size() == n * 37, "compute_chain_labels: positions (",
           positions.size(), ") / mask (", mask.size(), ") do not match N = ", n, " residues of [37,3] / [37]");
  for (size_t i = 0; i < n; ++i)
    FC_CHECK(aatype[i] >= 0 && aatype[i] <= rc::kUnkRestypeIndex, "compute_chain_labels: aatype[", i, "] = ",
             aatype[i], " outside 0..20");
  ChainLabels out;
  out.num_res = static_cast<int64_t>(n);
  auto add = [&](std::string name, std::vector<int64_t> row_shape) -> std::vector<float>& {
    ChainLabels::Array a{std::move(name), {}, std::move(row_shape)};
    a.values.assign(n * static_cast<size_t>(a.row_size()), 0.0f);
    out.arrays.push_back(std::move(a));
    return out.arrays.back().values;
  };
  // `add` hands out references into out.arrays: room for every array up front (21 of them).
  out.arrays.reserve(kNumLabelArrays);
  add("all_atom_positions", {37, 3}).assign(positions.begin(), positions.end());
  add("all_atom_mask", {37}).assign(mask.begin(), mask.end());

  // make_atom14_positions: gather atom37 → atom14 (masked by the restype's atom14 slots), the
  // alternative naming by the renaming swap.
  const rc::Atom14Maps& maps = rc::atom14_maps();
  std::vector<float>& gt_pos = add("atom14_gt_positions", {14, 3});
  std::vector<float>& gt_exists = add("atom14_gt_exists", {14});
  std::vector<float>& alt_pos = add("atom14_alt_gt_positions", {14, 3});
  std::vector<float>& alt_exists = add("atom14_alt_gt_exists", {14});
  std::vector<float>& ambiguous = add("atom14_atom_is_ambiguous", {14});
  for (size_t i = 0; i < n; ++i) {
    const size_t t = static_cast<size_t>(aatype[i]);
    for (size_t j = 0; j < 14; ++j) {
      const size_t a37 = static_cast<size_t>(maps.atom14_to_atom37[t][j]);
      const float m = maps.atom14_mask[t][j] * mask[i * 37 + a37];
      gt_exists[i * 14 + j] = m;
      for (size_t c = 0; c < 3; ++c) gt_pos[(i * 14 + j) * 3 + c] = m * positions[(i * 37 + a37) * 3 + c];
      ambiguous[i * 14 + j] = maps.atom14_is_ambiguous[t][j];
    }
    for (size_t j = 0; j < 14; ++j) {
      const size_t s = static_cast<size_t>(maps.atom14_swap_index[t][j]);
      alt_exists[i * 14 + j] = gt_exists[i * 14 + s];
      for (size_t c = 0; c < 3; ++c) alt_pos[(i * 14 + j) * 3 + c] = gt_pos[(i * 14 + s) * 3 + c];
    }
  }

  // atom37_to_frames.
  const RigidGroupTables& tables = rigid_group_tables();
  std::vector<float>& frames = add("rigidgroups_gt_frames", {kGroups, 4, 4});
  std::vector<float>& frames_exist = add("rigidgroups_gt_exists", {kGroups});
  std::vector<float>& group_exists = add("rigidgroups_group_exists", {kGroups});
  std::vector<float>& group_ambiguous = add("rigidgroups_group_is_ambiguous", {kGroups});
  std::vector<float>& alt_frames = add("rigidgroups_alt_gt_frames", {kGroups, 4, 4});
  std::vector<float>& backbone = add("backbone_rigid_tensor", {4, 4});
  std::vector<float>& backbone_mask = add("backbone_rigid_mask", {});
  auto point = [&](size_t i, int atom) {
    const float* p = &positions[(i * 37 + static_cast<size_t>(atom)) * 3];
    return geom::Vec3{p[0], p[1], p[2]};
  };
  for (size_t i = 0; i < n; ++i) {
    const size_t t = static_cast<size_t>(aatype[i]);
    for (size_t g = 0; g < kGroups; ++g) {
      const std::array<int, 3>& b = tables.base_atoms[t][g];
      const geom::Frame f = geom::frame_from_three_points(point(i, b[0]), point(i, b[1]), point(i, b[2]));
      // Backbone: π about y (x, z negated); every other group as built.
      const std::array<double, 3> flip = g == 0 ? std::array<double, 3>{-1, 1, -1} : std::array<double, 3>{1, 1, 1};
      write_4x4(f, flip, &frames[(i * kGroups + g) * 16]);
      // Ambiguous groups: additionally π about x (y, z negated).
      const bool amb = tables.is_ambiguous[t][g] != 0.0f;
      write_4x4(f, amb ? std::array<double, 3>{flip[0], -flip[1], -flip[2]} : flip, &alt_frames[(i * kGroups + g) * 16]);
      const float atoms_exist = std::min({mask[i * 37 + static_cast<size_t>(b[0])], mask[i * 37 + static_cast<size_t>(b[1])],
                                          mask[i * 37 + static_cast<size_t>(b[2])]});
      group_exists[i * kGroups + g] = tables.group_exists[t][g];
      frames_exist[i * kGroups + g] = atoms_exist * tables.group_exists[t][g];
      group_ambiguous[i * kGroups + g] = tables.is_ambiguous[t][g];
    }
    std::copy_n(&frames[i * kGroups * 16], 16, &backbone[i * 16]);
    backbone_mask[i] = frames_exist[i * kGroups];
  }

  // Torsion angles (geometry.h), χ = torsions 3..6.
  const std::vector<int64_t> aatype64(aatype.begin(), aatype.end());
  geom::TorsionAngles ta = geom::atom37_to_torsion_angles(aatype64, positions.data(), mask.data());
  std::vector<float>& chi = add("chi_angles_sin_cos", {4, 2});
  std::vector<float>& chi_mask = add("chi_mask", {4});
  for (size_t i = 0; i < n; ++i) {
    std::copy_n(&ta.sin_cos[i * 14 + 6], 8, &chi[i * 8]);
    std::copy_n(&ta.mask[i * 7 + 3], 4, &chi_mask[i * 4]);
  }
  add("torsion_angles_sin_cos", {7, 2}) = std::move(ta.sin_cos);
  add("alt_torsion_angles_sin_cos", {7, 2}) = std::move(ta.alt_sin_cos);
  add("torsion_angles_mask", {7}) = std::move(ta.mask);

  std::vector<float>& pb = add("pseudo_beta", {3});
  std::vector<float>& pb_mask = add("pseudo_beta_mask", {});
  for (size_t i = 0; i < n; ++i) {
    const geom::PseudoBeta b = geom::pseudo_beta(aatype[i], &positions[i * 37 * 3], &mask[i * 37]);
    for (size_t c = 0; c < 3; ++c) pb[i * 3 + c] = static_cast<float>(b.position[c]);
    pb_mask[i] = b.mask;
  }
  FC_CHECK(out.arrays.size() == kNumLabelArrays, "compute_chain_labels: ", out.arrays.size(), " arrays");
  return out;
}

FeatureDict label_features(const ChainLabels& labels, std::span<const int64_t> residues, int64_t padded_num_res,
                           double resolution, bool is_distillation) {
  FC_CHECK(static_cast<int64_t>(residues.size()) <= padded_num_res, "label_features: ", residues.size(),
           " residues do not fit in ", padded_num_res, " rows");
  for (int64_t r : residues)
    FC_CHECK(r >= 0 && r < labels.num_res, "label_features: residue ", r, " outside 0..", labels.num_res - 1);
  FeatureDict out;
  for (const ChainLabels::Array& a : labels.arrays) {
    const size_t w = static_cast<size_t>(a.row_size());
    std::vector<float> v(static_cast<size_t>(padded_num_res) * w, 0.0f);
    for (size_t k = 0; k < residues.size(); ++k)
      std::copy_n(&a.values[static_cast<size_t>(residues[k]) * w], w, &v[k * w]);
    std::vector<int64_t> shape{padded_num_res};
    shape.insert(shape.end(), a.row_shape.begin(), a.row_shape.end());
    out.set(a.name, NpyArray::from_f32(v, std::move(shape)));
  }
  out.set("resolution", NpyArray::from_f32({static_cast<float>(resolution)}, {1}));
  out.set("is_distillation", NpyArray::from_f32({is_distillation ? 1.0f : 0.0f}, {1}));
  return out;
}

}  // namespace foldcore::data
