// Stereochemistry tables: the embedded Engh & Huber values equal the shared
// stereo_chemical_props.txt entry for entry (read at test time, never copied into the repo), and
// the derived AlphaFold tables (virtual bonds, atom14 bounds) follow their formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/structure/stereo_chemistry.h"
#include "test_util.h"

namespace rc = foldcore::data::rc;
namespace st = foldcore::data::stereo;

namespace {

struct FileTables {
  std::vector<std::tuple<std::string, std::string, double, double>> bonds;   // "A-B", res, mean, sd
  std::vector<std::tuple<std::string, std::string, double, double>> angles;  // "A-B-C", res, ...
  std::vector<std::tuple<std::string, double, double>> non_bonded;           // "E-F", min, tol
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream is(s);
  while (std::getline(is, part, sep)) out.push_back(part);
  return out;
}

// Parses the three sections (header line, entries, "-" terminator) of the shared file.
FileTables read_shared_file() {
  const std::string path = foldcore::testing::shared_dir() + "/data/stereo/stereo_chemical_props.txt";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path + " (set FOLDCORE_SHARED_DIR)");
  FileTables t;
  std::string line;
  int section = -1;  // -1 before a header, 0 bonds, 1 angles, 2 non-bonded
  int headers = 0;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string a, b, c, d;
    if (!(is >> a)) continue;
    if (a == "-") {
      section = -1;
      continue;
    }
    if (section == -1) {
      section = headers++;
      continue;
    }
    if (section == 2) {
      is >> c >> d;
      t.non_bonded.emplace_back(a, std::stod(c), std::stod(d));
    } else {
      is >> b >> c >> d;
      (section == 0 ? t.bonds : t.angles).emplace_back(a, b, std::stod(c), std::stod(d));
    }
  }
  return t;
}

}  // namespace

TEST(Stereo, EmbeddedTablesMatchTheSharedFileExactly) {
  const FileTables f = read_shared_file();
  ASSERT_EQ(f.bonds.size(), st::bonds().size());
  ASSERT_EQ(f.angles.size(), st::angles().size());
  ASSERT_EQ(f.non_bonded.size(), st::non_bonded().size());
  for (size_t i = 0; i < f.bonds.size(); ++i) {
    const auto& [atoms, res, mean, sd] = f.bonds[i];
    const st::BondStat& b = st::bonds()[i];
    const auto names = split(atoms, '-');
    ASSERT_EQ(names.size(), 2u);
    EXPECT_EQ(b.resname, res);
    EXPECT_EQ(b.atom1, names[0]);
    EXPECT_EQ(b.atom2, names[1]);
    EXPECT_EQ(b.mean, mean) << atoms << " " << res;  // exact: same decimal literal
    EXPECT_EQ(b.stddev, sd) << atoms << " " << res;
  }
  for (size_t i = 0; i < f.angles.size(); ++i) {
    const auto& [atoms, res, mean, sd] = f.angles[i];
    const st::AngleStat& a = st::angles()[i];
    const auto names = split(atoms, '-');
    ASSERT_EQ(names.size(), 3u);
    EXPECT_EQ(a.resname, res);
    EXPECT_EQ(a.atom1, names[0]);
    EXPECT_EQ(a.atom2, names[1]);
    EXPECT_EQ(a.atom3, names[2]);
    EXPECT_EQ(a.mean_deg, mean) << atoms << " " << res;
    EXPECT_EQ(a.stddev_deg, sd) << atoms << " " << res;
  }
  for (size_t i = 0; i < f.non_bonded.size(); ++i) {
    const auto& [elements, min_d, tol] = f.non_bonded[i];
    const auto names = split(elements, '-');
    EXPECT_EQ(st::non_bonded()[i].element1, names.at(0));
    EXPECT_EQ(st::non_bonded()[i].element2, names.at(1));
    EXPECT_EQ(st::non_bonded()[i].min_distance, min_d);
    EXPECT_EQ(st::non_bonded()[i].tolerance, tol);
  }
}

TEST(Stereo, Lookups) {
  const auto ca_cb = st::bond_length("ALA", "CB", "CA");  // reversed order
  ASSERT_TRUE(ca_cb);
  EXPECT_DOUBLE_EQ(ca_cb->mean, 1.520);
  EXPECT_DOUBLE_EQ(ca_cb->stddev, 0.021);
  EXPECT_FALSE(st::bond_length("ALA", "CA", "O"));
  EXPECT_FALSE(st::bond_length("UNK", "N", "CA"));
  const auto pro_ring = st::bond_length("PRO", "N", "CD");
  ASSERT_TRUE(pro_ring);
  EXPECT_DOUBLE_EQ(pro_ring->mean, 1.474);
  const auto nh = st::bond_angle_deg("ARG", "NH2", "CZ", "NH1");
  ASSERT_TRUE(nh);
  EXPECT_DOUBLE_EQ(nh->mean, 119.4);
  EXPECT_DOUBLE_EQ(nh->stddev, 1.1);
  EXPECT_FALSE(st::bond_angle_deg("ARG", "CZ", "NH1", "NH2"));  // wrong vertex
  EXPECT_DOUBLE_EQ(st::non_bonded_min_distance("O", "C")->mean, 3.22);
  // Every residue's bonds form its full heavy-atom topology: each of the 20 residues has one
  // entry per residue table, all atoms are atom14 atoms, and every heavy atom is bonded.
  for (int r = 0; r < 20; ++r) {
    const auto bonds = st::residue_bonds(rc::kResnames[r]);
    ASSERT_FALSE(bonds.empty());
    std::vector<int> degree(14, 0);
    for (const auto& b : bonds) {
      const int i = rc::atom14_index(r, b.atom1), j = rc::atom14_index(r, b.atom2);
      ASSERT_GE(i, 0) << b.atom1;
      ASSERT_GE(j, 0) << b.atom2;
      ++degree[i];
      ++degree[j];
    }
    for (int i = 0; i < 14; ++i)
      if (!rc::kRestypeAtom14Names[r][i].empty()) {
        EXPECT_GT(degree[i], 0) << rc::kResnames[r] << i;
      }
    EXPECT_FALSE(st::residue_angles(rc::kResnames[r]).empty());
  }
}

TEST(Stereo, PeptideBondValues) {
  EXPECT_DOUBLE_EQ(st::peptide_bond_c_n(false).mean, 1.329);
  EXPECT_DOUBLE_EQ(st::peptide_bond_c_n(true).mean, 1.341);
  EXPECT_DOUBLE_EQ(st::peptide_bond_c_n(true).stddev, 0.016);
  // The degree values agree with AlphaFold's cosines to the 4 decimals it gives them.
  EXPECT_NEAR(std::cos(st::peptide_angle_ca_c_n_deg().mean * std::numbers::pi / 180),
              rc::kBetweenResCosAnglesCaCN[0], 1e-4);
  EXPECT_NEAR(std::cos(st::peptide_angle_c_n_ca_deg().mean * std::numbers::pi / 180),
              rc::kBetweenResCosAnglesCNCa[0], 1e-4);
}

TEST(Stereo, VirtualBondsByLawOfCosines) {
  // ALA N-CA-CB: N-CA 1.459 ± 0.020, CA-CB 1.520 ± 0.021, angle 110.1 ± 1.4 degrees.
  const auto v = st::residue_virtual_bonds("ALA");
  ASSERT_EQ(v.size(), st::residue_angles("ALA").size());
  const double g = 110.1 * std::numbers::pi / 180, a = 1.459, b = 1.520;
  const double c = std::sqrt(a * a + b * b - 2 * a * b * std::cos(g));
  EXPECT_EQ(v[0].atom1, "N");
  EXPECT_EQ(v[0].atom3, "CB");
  EXPECT_NEAR(v[0].length, c, 1e-12);
  // Numerical derivative check of the propagated stddev.
  auto len = [](double l1, double l2, double gamma) {
    return std::sqrt(l1 * l1 + l2 * l2 - 2 * l1 * l2 * std::cos(gamma));
  };
  const double h = 1e-6, sg = 1.4 * std::numbers::pi / 180;
  const double dg = (len(a, b, g + h) - len(a, b, g - h)) / (2 * h);
  const double da = (len(a + h, b, g) - len(a - h, b, g)) / (2 * h);
  const double db = (len(a, b + h, g) - len(a, b - h, g)) / (2 * h);
  const double sd = std::sqrt(dg * dg * sg * sg + da * da * 0.020 * 0.020 + db * db * 0.021 * 0.021);
  EXPECT_NEAR(v[0].stddev, sd, 1e-8);
}

TEST(Stereo, Atom14DistBounds) {
  const auto bounds = st::make_atom14_dists_bounds(1.5, 15.0);
  const int ala = rc::restype_order('A');
  const int ca = rc::atom14_index(ala, "CA"), cb = rc::atom14_index(ala, "CB"),
            o = rc::atom14_index(ala, "O"), n = rc::atom14_index(ala, "N");
  EXPECT_NEAR(bounds.lower_bound[ala][ca][cb], 1.520 - 15 * 0.021, 1e-6);
  EXPECT_NEAR(bounds.upper_bound[ala][cb][ca], 1.520 + 15 * 0.021, 1e-6);
  EXPECT_NEAR(bounds.stddev[ala][ca][cb], 0.021, 1e-7);
  EXPECT_NEAR(bounds.lower_bound[ala][o][cb], 1.52 + 1.7 - 1.5, 1e-6);  // clash bound
  EXPECT_EQ(bounds.upper_bound[ala][o][cb], 1e10f);
  EXPECT_GT(bounds.stddev[ala][n][cb], 0.0f);  // virtual bond N..CB
  EXPECT_EQ(bounds.lower_bound[ala][ca][ca], 0.0f);
  for (const auto& row : bounds.lower_bound[20])
    for (float x : row) EXPECT_EQ(x, 0.0f);
}

TEST(Stereo, IdealisedGeometryAgreesWithEnghHuber) {
  // AlphaFold's idealised side chains and Engh & Huber are independent sources for the same
  // chemistry: bonds within one rigid group (both atoms given in the same frame) must agree
  // within 3 standard deviations.
  int checked = 0;
  for (int r = 0; r < 20; ++r) {
    const auto atoms = rc::rigid_group_atom_positions(r);
    for (const auto& b : st::residue_bonds(rc::kResnames[r])) {
      const rc::RigidGroupAtom *p = nullptr, *q = nullptr;
      for (const auto& a : atoms) {
        if (a.name == b.atom1) p = &a;
        if (a.name == b.atom2) q = &a;
      }
      ASSERT_TRUE(p && q);
      if (p->group != q->group) continue;
      const double d = std::hypot(p->position[0] - q->position[0], p->position[1] - q->position[1],
                                  p->position[2] - q->position[2]);
      EXPECT_LT(std::abs(d - b.mean), 3 * b.stddev) << rc::kResnames[r] << " " << b.atom1 << "-" << b.atom2;
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}
