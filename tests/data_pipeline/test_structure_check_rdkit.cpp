// Structure check on real PDB entries: all-L chirality and few outliers; the mirror image is all D;
// an atom moved onto another gives a clash and bond outliers; a deleted atom is reported missing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/formats/pdb_reader.h"
#include "data_pipeline/structure/structure_check.h"
#include "test_util.h"

using namespace foldcore::data;

namespace {

Structure load(const std::string& id) {
  return read_mmcif(foldcore::testing::shared_dir() + "/data/mmcifs/" + id + ".cif");
}

Residue* find_residue(Structure& s, const std::string& name, int skip = 0) {
  for (Chain& c : s.chains)
    for (Residue& r : c.residues)
      if (r.name == name && skip-- == 0) return &r;
  return nullptr;
}

Atom* find_atom(Residue& r, const std::string& name) {
  for (Atom& a : r.atoms)
    if (a.name == name) return &a;
  return nullptr;
}

int count_chirality(const StructureCheckReport& r, const std::string& residue, Chirality c) {
  int n = 0;
  for (const ResidueCheck& x : r.residues) n += (x.name == residue && x.chirality == c) ? 1 : 0;
  return n;
}

}  // namespace

TEST(StructureCheck, RealStructureIsAllLWithFewOutliers) {
  const Structure s = load("4zey");  // X-ray, 1.5 Angstrom
  const StructureCheckReport r = check_structure(s);
  ASSERT_GT(r.residues.size(), 50u);
  const int gly = static_cast<int>(std::count_if(r.residues.begin(), r.residues.end(),
                                                 [](const ResidueCheck& c) { return c.parent == "GLY"; }));
  EXPECT_EQ(r.count(Chirality::kD), 0);
  EXPECT_EQ(r.count(Chirality::kAchiral), gly);
  // Only residues with an incomplete backbone/CB may stay undetermined.
  EXPECT_LE(r.count(Chirality::kUndetermined), 3);
  EXPECT_GE(r.count(Chirality::kL), static_cast<int>(r.residues.size()) - gly - 3);
  // CIP: L-amino acids are S except cysteine (R).
  for (const ResidueCheck& c : r.residues) {
    if (c.chirality != Chirality::kL) continue;
    EXPECT_EQ(c.ca_cip, c.parent == "CYS" ? "R" : "S") << c.name << c.seq_num;
  }
  // A well-refined structure: at 12 sigma essentially nothing is an outlier.
  EXPECT_GT(r.bonds_checked, 500);
  EXPECT_GT(r.angles_checked, 500);
  EXPECT_LE(r.bond_outliers.size(), 2u);
  EXPECT_LE(r.angle_outliers.size(), 2u);
  EXPECT_LE(r.clashes.size(), 3u);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(StructureCheck, CysteinesAreRAndNonProteinChainsAreIgnored) {
  // 4i6p (X-ray, 2.9 Angstrom) has cysteines: L-cysteine is R by CIP (SG outranks C').
  const StructureCheckReport r = check_structure(load("4i6p"));
  EXPECT_EQ(r.count(Chirality::kD), 0);
  int cys = 0;
  for (const ResidueCheck& c : r.residues)
    if (c.parent == "CYS" && c.chirality == Chirality::kL) {
      EXPECT_EQ(c.ca_cip, "R");
      ++cys;
    }
  EXPECT_GE(cys, 1);
  // 2q2k is a protein-DNA complex: the DNA residues are not amino acids and are skipped.
  const StructureCheckReport dna = check_structure(load("2q2k"));
  EXPECT_EQ(dna.count(Chirality::kD), 0);
  EXPECT_GT(dna.count(Chirality::kL), 50);
  EXPECT_GT(dna.ignored_residues, 0);
}

TEST(StructureCheck, LegacyPdbFileAndModifiedResidues) {
  // glucagon (1GCN, PDB format) is all L; 4zey's selenomethionines are checked as MET.
  const StructureCheckReport r =
      check_structure(read_pdb(foldcore::testing::shared_dir() + "/data/pdb/glucagon.pdb"));
  EXPECT_EQ(r.residues.size(), 29u);
  EXPECT_EQ(r.count(Chirality::kD), 0);
  EXPECT_GE(r.count(Chirality::kL), 26);
  const StructureCheckReport m = check_structure(load("4zey"));
  int mse = 0;
  for (const ResidueCheck& c : m.residues)
    if (c.name == "MSE") {
      EXPECT_EQ(c.parent, "MET");
      EXPECT_EQ(c.chirality, Chirality::kL);
      EXPECT_TRUE(c.missing_atoms.empty());  // only the backbone is compared for modified residues
      ++mse;
    }
  EXPECT_GE(mse, 1);
}

TEST(StructureCheck, MirrorImageIsAllD) {
  Structure s = load("4zey");
  const StructureCheckReport original = check_structure(s);
  for (Chain& c : s.chains)
    for (Residue& res : c.residues)
      for (Atom& a : res.atoms) a.x = -a.x;
  const StructureCheckReport mirrored = check_structure(s);
  EXPECT_EQ(mirrored.count(Chirality::kL), 0);
  EXPECT_EQ(mirrored.count(Chirality::kD), original.count(Chirality::kL));
  for (const ResidueCheck& c : mirrored.residues) {
    if (c.chirality != Chirality::kD) continue;
    EXPECT_EQ(c.ca_cip, c.parent == "CYS" ? "S" : "R") << c.name << c.seq_num;
  }
  // Mirroring keeps every distance and angle: the geometry report is unchanged.
  EXPECT_EQ(mirrored.bond_outliers.size(), original.bond_outliers.size());
  EXPECT_EQ(mirrored.clashes.size(), original.clashes.size());
}

TEST(StructureCheck, AtomMovedOntoAnotherClashesAndBreaksBonds) {
  Structure s = load("4zey");
  const StructureCheckReport before = check_structure(s);
  Residue* leu = find_residue(s, "LEU", 1);
  Residue* other = find_residue(s, "LEU", 4);
  ASSERT_TRUE(leu && other);
  Atom* moved = find_atom(*leu, "CD1");
  const Atom* target = find_atom(*other, "CA");
  ASSERT_TRUE(moved && target);
  moved->x = target->x + 0.3;  // almost on top of a CA far along the chain
  moved->y = target->y;
  moved->z = target->z;
  const StructureCheckReport r = check_structure(s);
  bool clash_found = false;
  for (const Clash& c : r.clashes)
    if ((c.atom1.atom == "CD1" && c.atom1.seq_num == leu->auth_seq_num && c.atom2.atom == "CA") ||
        (c.atom2.atom == "CD1" && c.atom2.seq_num == leu->auth_seq_num && c.atom1.atom == "CA"))
      clash_found = true;
  EXPECT_TRUE(clash_found);
  EXPECT_GT(r.clashes.size(), before.clashes.size());
  bool bond_found = false;
  for (const BondOutlier& b : r.bond_outliers)
    if (b.atom1.seq_num == leu->auth_seq_num && (b.atom1.atom == "CD1" || b.atom2.atom == "CD1"))
      bond_found = true;
  EXPECT_TRUE(bond_found);
  EXPECT_GT(r.bond_outliers.size(), before.bond_outliers.size());
  EXPECT_GT(r.angle_outliers.size(), before.angle_outliers.size());
}

TEST(StructureCheck, DeletedAtomIsMissing) {
  Structure s = load("4zey");
  Residue* res = find_residue(s, "LEU", 2);
  ASSERT_TRUE(res);
  const auto it = std::find_if(res->atoms.begin(), res->atoms.end(), [](const Atom& a) { return a.name == "CG"; });
  ASSERT_NE(it, res->atoms.end());
  res->atoms.erase(it);
  const StructureCheckReport r = check_structure(s);
  int found = 0;
  for (const ResidueCheck& c : r.residues) {
    if (c.seq_num == res->auth_seq_num && c.name == "LEU") {
      ASSERT_EQ(c.missing_atoms.size(), 1u);
      EXPECT_EQ(c.missing_atoms[0], "CG");
      ++found;
    }
  }
  EXPECT_EQ(found, 1);
  EXPECT_GE(r.num_missing_atoms(), 1);
}

TEST(StructureCheck, JsonSummary) {
  const StructureCheckReport r = check_structure(load("4zey"));
  const auto j = nlohmann::json::parse(report_to_json(r));
  EXPECT_EQ(j["summary"]["residues"].get<size_t>(), r.residues.size());
  EXPECT_EQ(j["summary"]["d_residues"].get<int>(), 0);
  EXPECT_EQ(j["summary"]["l_residues"].get<int>(), r.count(Chirality::kL));
  EXPECT_EQ(j["residues"].size(), r.residues.size());
  EXPECT_EQ(j["clashes"].size(), r.clashes.size());
  EXPECT_EQ(j["structure"].get<std::string>(), r.structure_id);
  EXPECT_EQ(count_chirality(r, "GLY", Chirality::kL), 0);
}
