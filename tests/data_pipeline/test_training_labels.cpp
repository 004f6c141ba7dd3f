// Training labels (atom14 truth and its renamed alternative, rigid-group frames, torsions,
// pseudo-β) on real mmCIF chains, checked against naive geometry written out here, and against the
// model layer: torsion_angles_to_frames(aatype, true backbone frame, true torsions) rebuilds the
// true side-chain frames up to the difference between ideal and real bond geometry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "data_pipeline/data_test_util.h"
#include "data_pipeline/structure/geometry.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/training/training_chain.h"
#include "data_pipeline/training/training_labels.h"
#include "models/alphafold/structure/all_atom.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

using geom::Vec3;

std::string shared(const std::string& f) { return testing::shared_dir() + "/data/" + f; }

// Chains with every residue type the checks need: 4zey (X-ray 1.5 Å, MSE), 2q2k A (3.0 Å).
struct Labelled {
  TrainingChain chain;
  ChainLabels labels;
};
std::vector<Labelled> test_chains() {
  std::vector<Labelled> out;
  for (const char* id : {"4zey", "2q2k"}) {
    const Structure s = read_mmcif(shared(std::string("mmcifs/") + id + ".cif"));
    for (const Chain& c : s.chains)
      if (s.is_protein_chain(c)) {
        TrainingChain tc = training_chain_from_mmcif(s, c.auth_id, "");
        ChainLabels l = compute_chain_labels(tc.aatype, tc.all_atom_positions, tc.all_atom_mask);
        out.push_back({std::move(tc), std::move(l)});
        break;
      }
  }
  return out;
}

struct Mat4 {
  const float* m;
  double r(int i, int j) const { return m[i * 4 + j]; }
  Vec3 axis(int j) const { return {r(0, j), r(1, j), r(2, j)}; }
  Vec3 origin() const { return {r(0, 3), r(1, 3), r(2, 3)}; }
};

Vec3 atom(const TrainingChain& c, size_t i, std::string_view name) {
  const float* p = &c.all_atom_positions[(i * 37 + static_cast<size_t>(rc::atom_order(name))) * 3];
  return {p[0], p[1], p[2]};
}
bool has(const TrainingChain& c, size_t i, std::string_view name) {
  return c.all_atom_mask[i * 37 + static_cast<size_t>(rc::atom_order(name))] != 0.0f;
}
Vec3 unit(const Vec3& v) { return geom::scale(v, 1.0 / geom::norm(v)); }

// The frame defined by (p_neg_x, origin, p_xy), written out: origin at `origin`, x along
// p_neg_x→origin, p_xy in the xy-plane on the +y side, right-handed.
void expect_frame(const Mat4& f, const Vec3& p_neg_x, const Vec3& origin, const Vec3& p_xy, const std::string& what) {
  // float32 storage of coordinates up to ~100 Å: 1e-4 relative on axes, 1e-4 Å on the origin.
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(f.origin()[static_cast<size_t>(k)], origin[static_cast<size_t>(k)], 1e-4) << what;
  const Vec3 ex = unit(geom::sub(origin, p_neg_x));
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(f.axis(0)[static_cast<size_t>(k)], ex[static_cast<size_t>(k)], 1e-4) << what;
  const Vec3 local = geom::sub(p_xy, origin);
  EXPECT_NEAR(geom::dot(f.axis(2), local), 0.0, 1e-3) << what << ": p_xy off the xy-plane";
  EXPECT_GT(geom::dot(f.axis(1), local), 0.0) << what;
  // Orthonormal, right-handed.
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) EXPECT_NEAR(geom::dot(f.axis(a), f.axis(b)), a == b ? 1.0 : 0.0, 1e-5) << what;
  const Vec3 z = geom::cross(f.axis(0), f.axis(1));
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(z[static_cast<size_t>(k)], f.axis(2)[static_cast<size_t>(k)], 1e-5) << what;
  EXPECT_EQ(f.r(3, 0), 0.0);
  EXPECT_EQ(f.r(3, 3), 1.0);
}

TEST(TrainingLabels, FramesAreThoseOfTheBaseAtoms) {
  int checked_chi = 0;
  for (const auto& [c, l] : test_chains()) {
    const auto& frames = l.at("rigidgroups_gt_frames").values;
    const auto& exists = l.at("rigidgroups_gt_exists").values;
    const auto& bb = l.at("backbone_rigid_tensor").values;
    for (size_t i = 0; i < static_cast<size_t>(c.num_res()); ++i) {
      const std::string what = c.name + " residue " + std::to_string(i);
      const bool bb_atoms = has(c, i, "N") && has(c, i, "CA") && has(c, i, "C");
      EXPECT_EQ(exists[i * 8], bb_atoms ? 1.0f : 0.0f) << what;
      EXPECT_EQ(l.at("backbone_rigid_mask").values[i], exists[i * 8]);
      EXPECT_TRUE(std::equal(&bb[i * 16], &bb[i * 16] + 16, &frames[i * 128])) << what;
      EXPECT_EQ(exists[i * 8 + 1] + exists[i * 8 + 2], 0.0f);  // no truth for pre-ω, φ groups
      if (bb_atoms) {
        // Backbone: origin CA, x along CA→C, N on the +y side — i.e. frame (N-side: C reflected).
        const Mat4 f{&frames[i * 128]};
        const Vec3 ca = atom(c, i, "CA");
        expect_frame(f, geom::sub(geom::scale(ca, 2.0), atom(c, i, "C")), ca, atom(c, i, "N"), what + " backbone");
      }
      if (has(c, i, "CA") && has(c, i, "C") && has(c, i, "O")) {
        EXPECT_EQ(exists[i * 8 + 3], 1.0f);
        expect_frame(Mat4{&frames[(i * 8 + 3) * 16]}, atom(c, i, "CA"), atom(c, i, "C"), atom(c, i, "O"), what + " psi");
      }
      const int t = c.aatype[i];
      for (int k = 0; k < 4; ++k) {
        const bool has_chi = t < 20 && k < rc::num_chi_angles(t);
        if (!has_chi) {
          EXPECT_EQ(exists[i * 8 + 4 + static_cast<size_t>(k)], 0.0f) << what;
          continue;
        }
        const rc::ChiQuad& q = rc::kChiAnglesAtoms[static_cast<size_t>(t)][static_cast<size_t>(k)];
        const bool all = has(c, i, q[0]) && has(c, i, q[1]) && has(c, i, q[2]) && has(c, i, q[3]);
        const bool base = has(c, i, q[1]) && has(c, i, q[2]) && has(c, i, q[3]);
        EXPECT_EQ(exists[i * 8 + 4 + static_cast<size_t>(k)], base ? 1.0f : 0.0f) << what;
        if (!all) continue;
        ++checked_chi;
        expect_frame(Mat4{&frames[(i * 8 + 4 + static_cast<size_t>(k)) * 16]}, atom(c, i, q[1]), atom(c, i, q[2]),
                     atom(c, i, q[3]), what + " chi" + std::to_string(k + 1));
      }
    }
  }
  EXPECT_GT(checked_chi, 200);
}

TEST(TrainingLabels, AlternativeFramesAndAtomsAreTheSymmetricRenaming) {
  int ambiguous = 0;
  for (const auto& [c, l] : test_chains()) {
    const auto& frames = l.at("rigidgroups_gt_frames").values;
    const auto& alt = l.at("rigidgroups_alt_gt_frames").values;
    const auto& amb = l.at("rigidgroups_group_is_ambiguous").values;
    for (size_t i = 0; i < static_cast<size_t>(c.num_res()); ++i) {
      const char letter = c.sequence[i];
      // The π-symmetric group: ASP χ2, GLU χ3, PHE χ2, TYR χ2 (groups 5, 6, 5, 5).
      const int expected_group = letter == 'D' || letter == 'F' || letter == 'Y' ? 5 : letter == 'E' ? 6 : -1;
      for (int g = 0; g < 8; ++g) {
        const float* f = &frames[(i * 8 + static_cast<size_t>(g)) * 16];
        const float* a = &alt[(i * 8 + static_cast<size_t>(g)) * 16];
        EXPECT_EQ(amb[i * 8 + static_cast<size_t>(g)], g == expected_group ? 1.0f : 0.0f);
        for (int r = 0; r < 4; ++r)
          for (int col = 0; col < 4; ++col) {
            // Rotated by π about x: columns y and z negated.
            const float sign = g == expected_group && (col == 1 || col == 2) ? -1.0f : 1.0f;
            EXPECT_EQ(a[r * 4 + col], sign * f[r * 4 + col]);
          }
      }
      ambiguous += expected_group >= 0;
      // atom14: the truth by name, the alternative with the renaming swap's names exchanged.
      const int t = c.aatype[i];
      const auto& gt = l.at("atom14_gt_positions").values;
      const auto& gt_exists = l.at("atom14_gt_exists").values;
      const auto& alt_pos = l.at("atom14_alt_gt_positions").values;
      const auto& alt_exists = l.at("atom14_alt_gt_exists").values;
      const auto& is_amb = l.at("atom14_atom_is_ambiguous").values;
      for (size_t j = 0; j < 14; ++j) {
        const std::string_view name = rc::kRestypeAtom14Names[static_cast<size_t>(t)][j];
        if (name.empty()) {
          EXPECT_EQ(gt_exists[i * 14 + j], 0.0f);
          continue;
        }
        std::string_view partner = name;
        for (const rc::AtomSwap& s : rc::kResidueAtomRenamingSwaps)
          if (s.resname == rc::kResnames[static_cast<size_t>(t)]) {
            if (s.atom1 == name) partner = s.atom2;
            if (s.atom2 == name) partner = s.atom1;
          }
        EXPECT_EQ(is_amb[i * 14 + j], partner != name ? 1.0f : 0.0f) << name;
        EXPECT_EQ(gt_exists[i * 14 + j], has(c, i, name) ? 1.0f : 0.0f);
        EXPECT_EQ(alt_exists[i * 14 + j], has(c, i, partner) ? 1.0f : 0.0f);
        const Vec3 p = has(c, i, name) ? atom(c, i, name) : Vec3{0, 0, 0};
        const Vec3 q = has(c, i, partner) ? atom(c, i, partner) : Vec3{0, 0, 0};
        for (size_t k = 0; k < 3; ++k) {
          EXPECT_EQ(gt[(i * 14 + j) * 3 + k], static_cast<float>(p[k]));
          EXPECT_EQ(alt_pos[(i * 14 + j) * 3 + k], static_cast<float>(q[k]));
        }
      }
    }
  }
  EXPECT_GT(ambiguous, 10);
}

TEST(TrainingLabels, TorsionsAndPseudoBetaMatchNaiveGeometry) {
  for (const auto& [c, l] : test_chains()) {
    const auto& sc = l.at("torsion_angles_sin_cos").values;
    const auto& mask = l.at("torsion_angles_mask").values;
    const auto& chi = l.at("chi_angles_sin_cos").values;
    const auto& chi_mask = l.at("chi_mask").values;
    int compared = 0;
    auto expect_angle = [&](size_t i, size_t k, double phi, const char* what) {
      // float32 positions and the float32 torsion computation: 1e-4 on sin/cos.
      EXPECT_NEAR(sc[(i * 7 + k) * 2], std::sin(phi), 1e-4) << what << " residue " << i;
      EXPECT_NEAR(sc[(i * 7 + k) * 2 + 1], std::cos(phi), 1e-4) << what << " residue " << i;
      ++compared;
    };
    for (size_t i = 0; i < static_cast<size_t>(c.num_res()); ++i) {
      if (i > 0 && mask[i * 7 + 1] != 0)
        expect_angle(i, 1, geom::dihedral(atom(c, i - 1, "C"), atom(c, i, "N"), atom(c, i, "CA"), atom(c, i, "C")), "phi");
      if (mask[i * 7 + 2] != 0)  // ψ from O, shifted by π
        expect_angle(i, 2, geom::dihedral(atom(c, i, "N"), atom(c, i, "CA"), atom(c, i, "C"), atom(c, i, "O")) + std::numbers::pi,
                     "psi");
      const int t = c.aatype[i];
      for (size_t k = 0; k < 4; ++k) {
        EXPECT_EQ(chi_mask[i * 4 + k], mask[i * 7 + 3 + k]);
        EXPECT_EQ(chi[(i * 4 + k) * 2], sc[(i * 7 + 3 + k) * 2]);
        if (mask[i * 7 + 3 + k] == 0) continue;
        const rc::ChiQuad& q = rc::kChiAnglesAtoms[static_cast<size_t>(t)][k];
        expect_angle(i, 3 + k, geom::dihedral(atom(c, i, q[0]), atom(c, i, q[1]), atom(c, i, q[2]), atom(c, i, q[3])), "chi");
      }
      const std::string_view pb_atom = c.sequence[i] == 'G' ? "CA" : "CB";
      EXPECT_EQ(l.at("pseudo_beta_mask").values[i], has(c, i, pb_atom) ? 1.0f : 0.0f);
      if (has(c, i, pb_atom)) {
        for (size_t k = 0; k < 3; ++k) EXPECT_EQ(l.at("pseudo_beta").values[i * 3 + k], static_cast<float>(atom(c, i, pb_atom)[k]));
      }
    }
    EXPECT_GT(compared, 3 * c.num_res() / 2);
  }
}

// Angle of the rotation R1ᵀR2 (degrees).
double rotation_angle_deg(const float* a, const float* b) {
  double trace = 0;
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 3; ++k) trace += double(a[k * 4 + i]) * double(b[k * 4 + i]);
  return std::acos(std::clamp((trace - 1.0) / 2.0, -1.0, 1.0)) * 180.0 / std::numbers::pi;
}

TEST(TrainingLabels, ModelRebuildsTheTrueFramesFromTrueTorsions) {
  std::vector<double> angles;
  for (const auto& [c, l] : test_chains()) {
    const int64_t n = c.num_res();
    const auto& bb = l.at("backbone_rigid_tensor").values;
    std::vector<float> rot(static_cast<size_t>(n) * 9), trans(static_cast<size_t>(n) * 3);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i)
      for (int r = 0; r < 3; ++r) {
        for (int k = 0; k < 3; ++k) rot[i * 9 + static_cast<size_t>(r * 3 + k)] = bb[i * 16 + static_cast<size_t>(r * 4 + k)];
        trans[i * 3 + static_cast<size_t>(r)] = bb[i * 16 + static_cast<size_t>(r * 4 + 3)];
      }
    const af2::Rigid backbone{Tensor::from_vector(rot, {n, 3, 3}), Tensor::from_vector(trans, {n, 3})};
    const std::vector<int64_t> aa(c.aatype.begin(), c.aatype.end());
    const af2::Rigid groups = af2::torsion_angles_to_frames(
        Tensor::from_vector_i64(aa, {n}), backbone, Tensor::from_vector(l.at("torsion_angles_sin_cos").values, {n, 7, 2}));
    const std::vector<float> grot = groups.rot.to_vector();
    const auto& gt = l.at("rigidgroups_gt_frames").values;
    const auto& exists = l.at("rigidgroups_gt_exists").values;
    const auto& tmask = l.at("torsion_angles_mask").values;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (exists[i * 8] == 0) continue;
      for (size_t g = 3; g < 8; ++g) {
        // The group's own torsion and, for χ2..χ4, the parent χs must be defined.
        bool ok = exists[i * 8 + g] != 0 && tmask[i * 7 + g - 1] != 0;
        for (size_t p = 4; p < g && g >= 5; ++p) ok = ok && tmask[i * 7 + p - 1] != 0;
        if (!ok) continue;
        float model[16] = {};
        for (int r = 0; r < 3; ++r)
          for (int k = 0; k < 3; ++k) model[r * 4 + k] = grot[(i * 8 + g) * 9 + static_cast<size_t>(r * 3 + k)];
        angles.push_back(rotation_angle_deg(model, &gt[(i * 8 + g) * 16]));
      }
    }
  }
  ASSERT_GT(angles.size(), 300u);
  std::sort(angles.begin(), angles.end());
  const double median = angles[angles.size() / 2], p95 = angles[angles.size() * 95 / 100];
  // The model places group g with AlphaFold's ideal bond angles and the true torsion: the frame's
  // x axis (the bond the torsion turns about) then differs from the real bond by the deviation
  // of the real bond angles from ideal (typically 1-3°, accumulating along χ1→χ4; a few more in
  // low-resolution side chains). A wrong frame convention (axis, sign, base atoms) gives ~90-180°.
  EXPECT_LT(median, 4.0) << "median " << median << "°, 95% " << p95 << "°";
  EXPECT_LT(p95, 12.0) << "median " << median << "°, 95% " << p95 << "°";
}

TEST(TrainingLabels, FeaturesGatherAndPadTheRequestedResidues) {
  const std::vector<Labelled> chains = test_chains();
  const TrainingChain& c = chains[1].chain;
  const ChainLabels& l = chains[1].labels;
  const std::vector<int64_t> rows = {5, 6, 7, 20};
  const FeatureDict f = label_features(l, rows, 6, 3.0, true);
  const NpyArray& frames = f.at("rigidgroups_gt_frames");
  EXPECT_EQ(frames.shape, (std::vector<int64_t>{6, 8, 4, 4}));
  const std::vector<float> v(frames.as<float>(), frames.as<float>() + frames.numel());
  const auto& full = l.at("rigidgroups_gt_frames").values;
  for (size_t k = 0; k < rows.size(); ++k)
    EXPECT_TRUE(std::equal(&v[k * 128], &v[k * 128] + 128, &full[static_cast<size_t>(rows[k]) * 128]));
  EXPECT_TRUE(std::all_of(v.begin() + 4 * 128, v.end(), [](float x) { return x == 0.0f; }));
  EXPECT_EQ(f.at("backbone_rigid_mask").shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(f.at("resolution").as<float>()[0], 3.0f);
  EXPECT_EQ(f.at("is_distillation").as<float>()[0], 1.0f);
  EXPECT_NE(error_of([&] { label_features(l, rows, 3, 0, false); }).find("do not fit"), std::string::npos);
  const std::vector<int64_t> bad = {c.num_res()};
  EXPECT_NE(error_of([&] { label_features(l, bad, 6, 0, false); }).find("outside"), std::string::npos);
  const std::vector<int32_t> bad_aatype(2, 21);
  EXPECT_NE(error_of([&] { compute_chain_labels(bad_aatype, std::vector<float>(2 * 111), std::vector<float>(2 * 37)); }),
            "");
}

}  // namespace
}  // namespace foldcore::data
