// The whole structure module against the reference (outputs.npz sm_* and final_atom_*), run on the
// reference's final-iteration Evoformer outputs `single` [N, 384] and `pair` [N, N, 128] with the
// official-format weights of params.npz; plus torsion → frames → atom geometry checks.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <map>

#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/structure/residue_constants.h"
#include "models/alphafold/structure/all_atom.h"
#include "models/alphafold/structure/structure_module.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;

std::string ref(const std::string& f) { return testing::shared_dir() + "/af2/ref/" + f; }

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

// The final recycling iteration of a feature (recycling axis last).
Tensor last_iteration(const Tensor& t) { return t.select(-1, t.size(-1) - 1).contiguous(); }

TEST(Af2StructureModule, MatchesReference) {
  ag::ParamStore ps;
  Generator init(1);
  StructureModule sm(nn::Scope{&ps, &init, nullptr, "structure_module"}, StructureModuleConfig{});
  ps.finalize();
  sm.train(false);
  Af2ParamTable table;
  sm.add_af2_params(table);
  // Exactly the structure_module keys of the official model_1_ptm manifest, with matching sizes.
  std::map<std::string, int64_t> manifest;  // key → number of elements
  {
    std::ifstream f(testing::shared_dir() + "/af2/params_manifest_model_1_ptm.txt");
    ASSERT_TRUE(f.good());
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind(kAf2Prefix + "structure_module/", 0) != 0) continue;
      const auto tab = line.find('\t');
      const std::string shape = line.substr(tab + 1, line.find('\t', tab + 1) - tab - 1);  // "(384, 6)"
      int64_t numel = 1;
      for (size_t p = 1; p < shape.size();) {
        size_t end = 0;
        if (!std::isdigit(static_cast<unsigned char>(shape[p]))) { ++p; continue; }
        numel *= std::stoll(shape.substr(p), &end);
        p += end;
      }
      manifest[line.substr(0, tab)] = numel;
    }
  }
  EXPECT_EQ(manifest.size(), 45u);
  std::map<std::string, int64_t> ours;
  for (const auto& e : table.entries()) ours[e.key] = e.target.numel();
  EXPECT_EQ(ours, manifest);
  EXPECT_EQ(load_af2_params(table, ref("params.npz"), {.allow_unused = true}), manifest.size());

  data::NpzReader outputs(ref("outputs.npz")), features(ref("features.npz"));
  auto out = [&](const std::string& k) { return outputs.read(k).to_tensor(); };
  auto feat = [&](const std::string& k) { return last_iteration(features.read(k).to_tensor()); };

  StructureModuleInputs in;
  in.single = Variable(out("single"));
  in.pair = Variable(out("pair"));
  in.aatype = feat("aatype");
  in.seq_mask = feat("seq_mask");
  in.residx_atom37_to_atom14 = feat("residx_atom37_to_atom14");
  in.atom37_atom_exists = feat("atom37_atom_exists");
  // The maps AF2 derives from aatype are the ones in the features.
  const Atom37Maps maps = atom37_maps(in.aatype);
  EXPECT_EQ(maps.residx_atom37_to_atom14.to_vector_i64(), in.residx_atom37_to_atom14.to_vector_i64());
  EXPECT_EQ(maps.atom37_atom_exists.to_vector(), in.atom37_atom_exists.to_vector());

  ag::NoGradGuard no_grad;
  const StructureModuleOutputs got = sm.forward(in);

  // fp32 against fp32 with different summation orders through 8 iterations: observed errors are
  // 1e-6–2e-5 relative to each array's scale (positions 1.2e-4 Å on a 73 Å scale). Tolerance: atol 1e-4·max|ref| + rtol 1e-4; atom
  // positions (Å) within 1e-3 Å absolute.
  auto expect_close = [&](const char* name, const Tensor& a, const std::string& key, double atol_abs = -1) {
    const Tensor r = out(key);
    ASSERT_EQ(a.shape(), r.shape()) << name;
    const double scale = max_abs(r);
    const double atol = atol_abs > 0 ? atol_abs : 1e-4 * scale;
    const auto c = testing::all_close(a, r, atol, atol_abs > 0 ? 0 : 1e-4);
    EXPECT_TRUE(c.ok) << name << ": " << c.message;
    std::printf("%-24s max|ref| %9.4g  max abs err %9.3g\n", name, scale, c.max_abs);
  };
  expect_close("sm_frames", got.frames, "sm_frames");
  expect_close("sm_sidechain_frames", got.sidechain_frames, "sm_sidechain_frames");
  expect_close("sm_positions", got.positions, "sm_positions", 1e-3);
  expect_close("sm_angles", got.angles, "sm_angles");
  expect_close("sm_unnormalized_angles", got.unnormalized_angles, "sm_unnormalized_angles");
  expect_close("sm_states", got.states, "sm_states");
  expect_close("sm_single", got.single.value(), "sm_single");
  expect_close("final_atom_positions", got.final_atom_positions, "final_atom_positions", 1e-3);
  EXPECT_EQ(got.final_atom_mask.to_vector(), out("final_atom_mask").to_vector());
}

// Idealised geometry: identity backbone and zero torsions (sin 0, cos 1) place every atom at
// AF2's literature position composed through the default frames; the backbone atoms N, CA, C
// land exactly where residue_constants puts them (frame 0 is the identity).
TEST(Af2StructureModule, IdealGeometryFromDefaultFrames) {
  namespace rc = data::rc;
  const int64_t n = 20;
  std::vector<int64_t> aa(n);
  for (int64_t i = 0; i < n; ++i) aa[static_cast<size_t>(i)] = i;
  const Tensor aatype = Tensor::from_vector_i64(aa, {n});
  std::vector<float> ang;
  for (int64_t i = 0; i < n * 7; ++i) ang.insert(ang.end(), {0.f, 1.f});
  const Rigid groups = torsion_angles_to_frames(aatype, Rigid::identity({n}), Tensor::from_vector(ang, {n, 7, 2}));
  const Tensor atom14 = frames_to_atom14_positions(aatype, groups);
  const auto v = atom14.to_vector();
  const auto& c = rc::rigid_group_constants();
  for (int64_t r = 0; r < n; ++r) {
    for (int a = 0; a < 3; ++a) {  // N, CA, C are atom14 slots 0..2 and group 0
      for (int k = 0; k < 3; ++k)
        EXPECT_NEAR(v[static_cast<size_t>((r * 14 + a) * 3 + k)], c.atom14_rigid_group_positions[r][a][k], 1e-6);
    }
    // Absent slots are zero.
    for (int a = 0; a < 14; ++a) {
      if (c.atom14_mask[r][a] != 0.f) continue;
      for (int k = 0; k < 3; ++k) EXPECT_EQ(v[static_cast<size_t>((r * 14 + a) * 3 + k)], 0.f);
    }
  }
  // A χ1 rotation by 90° moves valine's γ atom CG1 (group 4) about the CA–CB axis, keeping its
  // distance to CB (which belongs to the backbone group and stays put).
  const int val = rc::restype_order('V');
  std::vector<float> ang2 = ang;
  ang2[static_cast<size_t>((val * 7 + 3) * 2)] = 1.f;      // sin χ1
  ang2[static_cast<size_t>((val * 7 + 3) * 2 + 1)] = 0.f;  // cos χ1
  const Tensor rotated =
      frames_to_atom14_positions(aatype, torsion_angles_to_frames(aatype, Rigid::identity({n}),
                                                                  Tensor::from_vector(ang2, {n, 7, 2})));
  const auto w = rotated.to_vector();
  const int cb = rc::atom14_index(val, "CB"), cg1 = rc::atom14_index(val, "CG1");
  auto at = [&](const std::vector<float>& x, int a) {
    const size_t o = static_cast<size_t>((val * 14 + a) * 3);
    return std::array<double, 3>{x[o], x[o + 1], x[o + 2]};
  };
  auto dist = [](const std::array<double, 3>& p, const std::array<double, 3>& q) {
    return std::sqrt((p[0] - q[0]) * (p[0] - q[0]) + (p[1] - q[1]) * (p[1] - q[1]) + (p[2] - q[2]) * (p[2] - q[2]));
  };
  EXPECT_NEAR(dist(at(w, cb), at(w, cg1)), dist(at(v, cb), at(v, cg1)), 1e-5);
  EXPECT_GT(dist(at(w, cg1), at(v, cg1)), 0.5);
}

}  // namespace
}  // namespace foldcore::af2
