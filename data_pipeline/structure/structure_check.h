// Structure check: stereochemistry and geometry report of a protein Structure.
//
//  - CA chirality per residue from RDKit (one RWMol per chain built from the coordinates: heavy
//    atoms with their elements, intra-residue bonds from the Engh & Huber bond list, peptide
//    C(i)-N(i+1) and disulfide SG-SG bonds; MolOps::assignChiralTypesFrom3D +
//    assignStereochemistry give CIP R/S). L/D follows from the CIP label and the CIP ranks of the
//    carbonyl C and CB: for the usual priorities N > C' > CB an L residue is S; when CB outranks C'
//    (CYS, selenocysteine) an L residue is R. GLY is achiral.
//  - Missing / extra heavy atoms per standard residue vs the atom14 tables (OXT is allowed).
//  - Bond-length and bond-angle outliers against Engh & Huber and AlphaFold's peptide-bond values:
//    |x − mean| > tolerance_factor · stddev, with AlphaFold's violation tolerance factor 12.
//  - Steric clashes as in AlphaFold's clash terms: heavy atoms i, j closer than
//    r_vdW(i) + r_vdW(j) − 1.5 Å, skipping pairs joined by one or two bonds (1-2 and 1-3) in the
//    bond graph and SG-SG pairs (disulfides), over all chains.
//
// Scope: residues of protein chains that are standard amino acids or have a known parent
// (rc::modified_residue_parent, or the file's own modified-residue table); other residues
// (ligands, water, nucleic acids) are counted as ignored. Hydrogens are ignored throughout.
// Residues i, i+1 are peptide-bonded when consecutive in the chain and adjacent in sequence
// (label_seq_id when known, else author numbering with no insertion code gap).
#pragma once

#include <string>
#include <vector>

#include "data_pipeline/structure/structure.h"

namespace foldcore::data {

struct CheckOptions {
  double bond_tolerance_factor = 12.0;   // AlphaFold violation_tolerance_factor
  double angle_tolerance_factor = 12.0;
  double clash_overlap_tolerance = 1.5;  // AlphaFold clash_overlap_tolerance (Å)
  double disulfide_max_distance = 2.5;   // SG-SG closer than this is bonded (Å)
};

enum class Chirality { kL, kD, kAchiral, kUndetermined };
const char* chirality_name(Chirality c);  // "L", "D", "achiral", "undetermined"

// Identifies an atom in the report: chain author id, residue number/insertion code, names.
struct AtomRef {
  std::string chain;
  int seq_num = 0;
  char ins_code = ' ';
  std::string residue;
  std::string atom;
};

struct ResidueCheck {
  std::string chain;
  int seq_num = 0;
  char ins_code = ' ';
  std::string name;
  std::string parent;  // standard parent (== name for standard residues)
  std::string ca_cip;  // "R", "S" or "" (no stereocentre assigned)
  Chirality chirality = Chirality::kUndetermined;
  std::vector<std::string> missing_atoms;  // heavy atoms of the parent's atom14 list not present
  std::vector<std::string> extra_atoms;    // heavy atoms not in that list (OXT allowed)
};

struct BondOutlier {
  AtomRef atom1, atom2;
  double distance, mean, stddev, z;  // z = (distance − mean) / stddev
};
struct AngleOutlier {
  AtomRef atom1, vertex, atom3;
  double angle_deg, mean_deg, stddev_deg, z;
};
struct Clash {
  AtomRef atom1, atom2;
  double distance, limit;  // limit = r_vdW(1) + r_vdW(2) − overlap tolerance
};

struct StructureCheckReport {
  std::string structure_id;
  int model_num = 1;
  CheckOptions options;
  int chains_checked = 0;
  int atoms_checked = 0;
  int ignored_residues = 0;
  int bonds_checked = 0;
  int angles_checked = 0;
  std::vector<ResidueCheck> residues;
  std::vector<BondOutlier> bond_outliers;
  std::vector<AngleOutlier> angle_outliers;
  std::vector<Clash> clashes;
  std::vector<std::string> warnings;  // e.g. a chain RDKit could not perceive

  int count(Chirality c) const;
  int num_missing_atoms() const;
  int num_extra_atoms() const;
};

// Runs every check (needs RDKit for the chirality part: built when FOLDCORE_HAVE_RDKIT).
StructureCheckReport check_structure(const Structure& structure, const CheckOptions& options = {});

// The report as JSON text (summary first, then per-residue chirality and problems, outliers and
// clashes); `indent` < 0 gives one line.
std::string report_to_json(const StructureCheckReport& report, int indent = 2);

namespace detail {

// The bonded heavy-atom graph the checks and the RDKit molecules are built from.
struct TopoAtom {
  int chain = 0, residue = 0, atom = 0;  // indices into Structure::chains / residues / atoms
  int check_residue = 0;                 // index into StructureCheckReport::residues
  std::string element;                   // upper case ("C", "SE")
  double x = 0, y = 0, z = 0;
};
struct Topology {
  std::vector<TopoAtom> atoms;
  std::vector<std::pair<int, int>> bonds;  // atom indices, each bond once
  std::vector<std::vector<int>> neighbours;
  // Per checked residue: atom indices of N, CA, C, CB (-1 when absent).
  struct Backbone {
    int n = -1, ca = -1, c = -1, cb = -1;
  };
  std::vector<Backbone> backbone;
  // Peptide bonds between checked residues (previous, next), both indices into report.residues.
  std::vector<std::pair<int, int>> peptide_links;
  // Per checked residue: atom name -> topology index for its heavy atoms.
  std::vector<std::vector<std::pair<std::string, int>>> residue_atoms;
  std::vector<std::pair<int, int>> chain_atom_ranges;  // [begin, end) of each checked chain
};

// Fills report.residues (and counters) and returns the topology; then the geometric checks.
Topology build_topology(const Structure& s, const CheckOptions& options, StructureCheckReport& report);
void check_geometry(const Structure& s, const Topology& topo, StructureCheckReport& report);

}  // namespace detail

}  // namespace foldcore::data
