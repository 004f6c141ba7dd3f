// Structure check, RDKit part: one RWMol per chain from the check topology, CIP labels from 3D,
// CA chirality per residue; and check_structure(), which runs all checks. See structure_check.h.
#include <GraphMol/Conformer.h>
#include <GraphMol/MolOps.h>
#include <GraphMol/PeriodicTable.h>
#include <GraphMol/RWMol.h>

#include <memory>
#include <string>

#include "core/error.h"
#include "data_pipeline/structure/structure_check.h"

namespace foldcore::data {
namespace {

// Atomic number of an upper-case element symbol ("SE" -> 34); 0 (dummy atom) if unknown.
int atomic_number(const std::string& element) {
  if (element.empty()) return 0;
  std::string symbol = element.substr(0, 1);
  for (size_t i = 1; i < element.size(); ++i)
    symbol.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(element[i]))));
  try {
    return RDKit::PeriodicTable::getTable()->getAtomicNumber(symbol);
  } catch (const std::exception&) {
    return 0;
  }
}

// CIP rank RDKit's legacy perception stores on each atom (higher = higher priority), or -1.
long cip_rank(const RDKit::Atom* atom) {
  unsigned int rank = 0;
  if (atom->getPropIfPresent(RDKit::common_properties::_CIPRank, rank)) return rank;
  return -1;
}

// Assigns CA CIP labels and L/D for the residues of one chain (atoms [begin, end) of `topo`).
void assign_chain_chirality(const Structure& s, const detail::Topology& topo, int begin, int end,
                            StructureCheckReport& report) {
  RDKit::RWMol mol;
  for (int i = begin; i < end; ++i) {
    RDKit::Atom atom(atomic_number(topo.atoms[i].element));
    atom.setNoImplicit(false);  // hydrogens are implicit: the graph is heavy atoms only
    mol.addAtom(&atom, true, false);
  }
  for (const auto& [i, j] : topo.bonds) {
    if (i < begin || i >= end || j < begin || j >= end) continue;
    // The backbone carbonyl C=O is double (the C-terminal OXT stays single): this keeps the
    // carbon's valence right, and the C' substituent set {O, O, N} is what CIP ranking expects.
    const detail::TopoAtom &a = topo.atoms[i], &b = topo.atoms[j];
    const auto atom_name = [&](const detail::TopoAtom& t) -> const std::string& {
      return s.chains[t.chain].residues[t.residue].atoms[t.atom].name;
    };
    const bool carbonyl = a.check_residue == b.check_residue &&
                          ((atom_name(a) == "C" && atom_name(b) == "O") ||
                           (atom_name(a) == "O" && atom_name(b) == "C"));
    mol.addBond(static_cast<unsigned>(i - begin), static_cast<unsigned>(j - begin),
                carbonyl ? RDKit::Bond::DOUBLE : RDKit::Bond::SINGLE);
  }
  auto conf = std::make_unique<RDKit::Conformer>(static_cast<unsigned>(end - begin));
  for (int i = begin; i < end; ++i)
    conf->setAtomPos(static_cast<unsigned>(i - begin),
                     RDGeom::Point3D(topo.atoms[i].x, topo.atoms[i].y, topo.atoms[i].z));
  conf->set3D(true);
  mol.addConformer(conf.release(), true);  // the molecule owns it from here

  // Non-strict: odd valences (e.g. a misplaced atom bonded twice) must not abort the report.
  mol.updatePropertyCache(false);
  RDKit::MolOps::fastFindRings(mol);
  RDKit::MolOps::assignChiralTypesFrom3D(mol, -1, true);
  RDKit::MolOps::assignStereochemistry(mol, /*cleanIt=*/true, /*force=*/true);

  for (size_t k = 0; k < report.residues.size(); ++k) {
    const auto& bb = topo.backbone[k];
    if (bb.ca < begin || bb.ca >= end) continue;
    ResidueCheck& res = report.residues[k];
    const RDKit::Atom* ca = mol.getAtomWithIdx(static_cast<unsigned>(bb.ca - begin));
    std::string code;
    if (ca->getPropIfPresent(RDKit::common_properties::_CIPCode, code)) res.ca_cip = code;
    if (res.parent == "GLY") {
      res.chirality = Chirality::kAchiral;
      continue;
    }
    if (bb.n < 0 || bb.c < 0 || bb.cb < 0 || (code != "R" && code != "S")) continue;  // undetermined
    // L = counter-clockwise N -> C' -> CB seen with H towards the viewer. With CIP priorities
    // N > C' > CB that is S; when CB outranks C' the order of the last two flips and L is R.
    const long rank_c = cip_rank(mol.getAtomWithIdx(static_cast<unsigned>(bb.c - begin)));
    const long rank_cb = cip_rank(mol.getAtomWithIdx(static_cast<unsigned>(bb.cb - begin)));
    if (rank_c < 0 || rank_cb < 0) continue;
    const std::string l_code = rank_cb > rank_c ? "R" : "S";
    res.chirality = code == l_code ? Chirality::kL : Chirality::kD;
  }
}

}  // namespace

StructureCheckReport check_structure(const Structure& structure, const CheckOptions& options) {
  StructureCheckReport report;
  report.structure_id = structure.id;
  report.model_num = structure.model_num;
  report.options = options;
  FC_CHECK(options.bond_tolerance_factor > 0 && options.angle_tolerance_factor > 0,
           "check_structure: tolerance factors must be positive (bond ", options.bond_tolerance_factor,
           ", angle ", options.angle_tolerance_factor, ")");
  const detail::Topology topo = detail::build_topology(structure, options, report);
  for (const auto& [begin, end] : topo.chain_atom_ranges) {
    try {
      assign_chain_chirality(structure, topo, begin, end, report);
    } catch (const std::exception& e) {
      // RDKit rejects some pathological inputs; the chain's chirality stays "undetermined", the
      // geometric checks below still run, and the report says why.
      const auto& first = topo.atoms[begin];
      report.warnings.push_back("chain " + structure.chains[first.chain].auth_id +
                                ": stereo perception failed: " + e.what());
    }
  }
  detail::check_geometry(structure, topo, report);
  return report;
}

}  // namespace foldcore::data
