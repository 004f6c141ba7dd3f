// Structure check, RDKit-free part: residue topology, missing/extra atoms, bond and angle outliers
// against Engh & Huber, clashes, JSON. The chirality part is in structure_check_rdkit.cpp.
#include "data_pipeline/structure/structure_check.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/structure/stereo_chemistry.h"

namespace foldcore::data {

const char* chirality_name(Chirality c) {
  switch (c) {
    case Chirality::kL: return "L";
    case Chirality::kD: return "D";
    case Chirality::kAchiral: return "achiral";
    case Chirality::kUndetermined: break;
  }
  return "undetermined";
}

int StructureCheckReport::count(Chirality c) const {
  return static_cast<int>(std::count_if(residues.begin(), residues.end(),
                                        [c](const ResidueCheck& r) { return r.chirality == c; }));
}
int StructureCheckReport::num_missing_atoms() const {
  int n = 0;
  for (const ResidueCheck& r : residues) n += static_cast<int>(r.missing_atoms.size());
  return n;
}
int StructureCheckReport::num_extra_atoms() const {
  int n = 0;
  for (const ResidueCheck& r : residues) n += static_cast<int>(r.extra_atoms.size());
  return n;
}

namespace detail {
namespace {

std::string atom_element(const Atom& a) {
  std::string e = a.element;
  if (e.empty() && !a.name.empty()) e = a.name.substr(0, 1);  // PDB convention for amino acids
  for (char& ch : e) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return e;
}

bool is_hydrogen(const std::string& element) { return element == "H" || element == "D"; }

// Single-bond covalent radii (Cordero et al. 2008), Angstrom, for bonding inside modified residues.
double covalent_radius(const std::string& e) {
  if (e == "C") return 0.76;
  if (e == "N") return 0.71;
  if (e == "O") return 0.66;
  if (e == "S") return 1.05;
  if (e == "SE") return 1.20;
  if (e == "P") return 1.07;
  return 0.77;
}

double distance(const TopoAtom& a, const TopoAtom& b) {
  return std::sqrt((a.x - b.x) * (a.x - b.x) + (a.y - b.y) * (a.y - b.y) + (a.z - b.z) * (a.z - b.z));
}

int find_atom(const std::vector<std::pair<std::string, int>>& atoms, std::string_view name) {
  for (const auto& [n, i] : atoms)
    if (n == name) return i;
  return -1;
}

// Standard parent of a residue, or "" when the residue is not an amino acid we check.
std::string residue_parent(const Structure& s, const Chain& c, const Residue& r) {
  if (rc::resname_to_idx(r.name) < rc::kRestypeNum) return r.name;
  std::string parent = s.parent_comp_id(c.label_id, r.seq_index);
  if (parent.empty()) parent = std::string(rc::modified_residue_parent(r.name));
  return rc::resname_to_idx(parent) < rc::kRestypeNum ? parent : std::string();
}

// Sequence adjacency of two consecutive observed residues (see the header).
bool sequence_adjacent(const Residue& a, const Residue& b) {
  if (a.seq_index > 0 && b.seq_index > 0) return b.seq_index == a.seq_index + 1;
  if (b.auth_seq_num == a.auth_seq_num + 1) return true;
  return b.auth_seq_num == a.auth_seq_num && b.ins_code != a.ins_code;
}

AtomRef make_ref(const Structure& s, const TopoAtom& a) {
  const Chain& c = s.chains[a.chain];
  const Residue& r = c.residues[a.residue];
  return {c.auth_id, r.auth_seq_num, r.ins_code, r.name, r.atoms[a.atom].name};
}

void add_bond(Topology& t, int i, int j) {
  if (i < 0 || j < 0 || i == j) return;
  for (int k : t.neighbours[i])
    if (k == j) return;
  t.bonds.emplace_back(std::min(i, j), std::max(i, j));
  t.neighbours[i].push_back(j);
  t.neighbours[j].push_back(i);
}

}  // namespace

Topology build_topology(const Structure& s, const CheckOptions& options, StructureCheckReport& report) {
  Topology t;
  for (int ci = 0; ci < static_cast<int>(s.chains.size()); ++ci) {
    const Chain& chain = s.chains[ci];
    if (!s.is_protein_chain(chain)) {
      report.ignored_residues += static_cast<int>(chain.residues.size());
      continue;
    }
    const int chain_begin = static_cast<int>(t.atoms.size());
    int prev_check = -1, prev_res = -1;
    for (int ri = 0; ri < static_cast<int>(chain.residues.size()); ++ri) {
      const Residue& res = chain.residues[ri];
      const std::string parent = residue_parent(s, chain, res);
      if (parent.empty()) {
        ++report.ignored_residues;
        continue;
      }
      const int check = static_cast<int>(report.residues.size());
      ResidueCheck rcheck{chain.auth_id, res.auth_seq_num, res.ins_code, res.name, parent, "",
                          Chirality::kUndetermined, {}, {}};
      std::vector<std::pair<std::string, int>> names;
      for (int ai = 0; ai < static_cast<int>(res.atoms.size()); ++ai) {
        const Atom& atom = res.atoms[ai];
        const std::string element = atom_element(atom);
        if (is_hydrogen(element)) continue;
        names.emplace_back(atom.name, static_cast<int>(t.atoms.size()));
        t.atoms.push_back({ci, ri, ai, check, element, atom.x, atom.y, atom.z});
        t.neighbours.emplace_back();
      }
      const int restype = rc::resname_to_idx(parent);
      const auto& expected = rc::kRestypeAtom14Names[restype];
      const bool standard = parent == res.name;
      for (const std::string_view e : expected) {
        if (e.empty() || find_atom(names, e) >= 0) continue;
        // Modified residues: only the backbone is required to match the parent.
        if (standard || e == "N" || e == "CA" || e == "C" || e == "O") rcheck.missing_atoms.emplace_back(e);
      }
      if (standard)
        for (const auto& [n, i] : names)
          if (n != "OXT" && rc::atom14_index(restype, n) < 0) rcheck.extra_atoms.push_back(n);
      // Intra-residue bonds: the Engh & Huber bond list of the parent for standard names; inside
      // modified residues, any heavy-atom pair within covalent-radius distance.
      if (standard) {
        for (const auto& b : stereo::residue_bonds(parent))
          add_bond(t, find_atom(names, b.atom1), find_atom(names, b.atom2));
      } else {
        for (size_t a = 0; a < names.size(); ++a)
          for (size_t b = a + 1; b < names.size(); ++b) {
            const TopoAtom &p = t.atoms[names[a].second], &q = t.atoms[names[b].second];
            if (distance(p, q) < covalent_radius(p.element) + covalent_radius(q.element) + 0.4)
              add_bond(t, names[a].second, names[b].second);
          }
      }
      add_bond(t, find_atom(names, "C"), find_atom(names, "OXT"));
      t.backbone.push_back({find_atom(names, "N"), find_atom(names, "CA"), find_atom(names, "C"),
                            find_atom(names, "CB")});
      // Peptide bond to the previous checked residue when sequence-adjacent.
      if (prev_check >= 0 && prev_res == ri - 1 && sequence_adjacent(chain.residues[prev_res], res)) {
        const int c_prev = t.backbone[prev_check].c, n_cur = t.backbone[check].n;
        if (c_prev >= 0 && n_cur >= 0) {
          add_bond(t, c_prev, n_cur);
          t.peptide_links.emplace_back(prev_check, check);
        }
      }
      prev_check = check;
      prev_res = ri;
      t.residue_atoms.push_back(std::move(names));
      report.residues.push_back(std::move(rcheck));
    }
    const int chain_end = static_cast<int>(t.atoms.size());
    if (chain_end == chain_begin) continue;
    // Disulfides inside the chain.
    std::vector<int> sg;
    for (int i = chain_begin; i < chain_end; ++i)
      if (report.residues[t.atoms[i].check_residue].parent == "CYS" &&
          s.chains[ci].residues[t.atoms[i].residue].atoms[t.atoms[i].atom].name == "SG")
        sg.push_back(i);
    for (size_t a = 0; a < sg.size(); ++a)
      for (size_t b = a + 1; b < sg.size(); ++b)
        if (distance(t.atoms[sg[a]], t.atoms[sg[b]]) < options.disulfide_max_distance) add_bond(t, sg[a], sg[b]);
    t.chain_atom_ranges.emplace_back(chain_begin, chain_end);
    ++report.chains_checked;
  }
  report.atoms_checked = static_cast<int>(t.atoms.size());
  return t;
}

namespace {

double angle_deg(const TopoAtom& a, const TopoAtom& v, const TopoAtom& b) {
  const double ux = a.x - v.x, uy = a.y - v.y, uz = a.z - v.z;
  const double wx = b.x - v.x, wy = b.y - v.y, wz = b.z - v.z;
  const double nu = std::sqrt(ux * ux + uy * uy + uz * uz), nw = std::sqrt(wx * wx + wy * wy + wz * wz);
  if (nu == 0.0 || nw == 0.0) return 0.0;  // coincident atoms: report as a 0-degree angle
  const double c = std::clamp((ux * wx + uy * wy + uz * wz) / (nu * nw), -1.0, 1.0);
  return std::acos(c) * 180.0 / std::numbers::pi;
}

}  // namespace

void check_geometry(const Structure& s, const Topology& t, StructureCheckReport& report) {
  const CheckOptions& o = report.options;
  auto check_bond = [&](int i, int j, double mean, double sd) {
    if (i < 0 || j < 0) return;
    ++report.bonds_checked;
    const double d = distance(t.atoms[i], t.atoms[j]);
    const double z = (d - mean) / sd;
    if (std::abs(z) > o.bond_tolerance_factor)
      report.bond_outliers.push_back({make_ref(s, t.atoms[i]), make_ref(s, t.atoms[j]), d, mean, sd, z});
  };
  auto check_angle = [&](int i, int v, int j, double mean, double sd) {
    if (i < 0 || v < 0 || j < 0) return;
    ++report.angles_checked;
    const double a = angle_deg(t.atoms[i], t.atoms[v], t.atoms[j]);
    const double z = (a - mean) / sd;
    if (std::abs(z) > o.angle_tolerance_factor)
      report.angle_outliers.push_back(
          {make_ref(s, t.atoms[i]), make_ref(s, t.atoms[v]), make_ref(s, t.atoms[j]), a, mean, sd, z});
  };
  for (size_t k = 0; k < report.residues.size(); ++k) {
    const auto& names = t.residue_atoms[k];
    const std::string& parent = report.residues[k].parent;
    for (const auto& b : stereo::residue_bonds(parent))
      check_bond(find_atom(names, b.atom1), find_atom(names, b.atom2), b.mean, b.stddev);
    for (const auto& a : stereo::residue_angles(parent))
      check_angle(find_atom(names, a.atom1), find_atom(names, a.atom2), find_atom(names, a.atom3),
                  a.mean_deg, a.stddev_deg);
  }
  for (const auto& [prev, next] : t.peptide_links) {
    const auto pb = stereo::peptide_bond_c_n(report.residues[next].parent == "PRO");
    const auto& bp = t.backbone[prev];
    const auto& bn = t.backbone[next];
    check_bond(bp.c, bn.n, pb.mean, pb.stddev);
    const auto a1 = stereo::peptide_angle_ca_c_n_deg(), a2 = stereo::peptide_angle_c_n_ca_deg();
    check_angle(bp.ca, bp.c, bn.n, a1.mean, a1.stddev);
    check_angle(bp.c, bn.n, bn.ca, a2.mean, a2.stddev);
  }

  // Clashes: uniform grid with cells larger than the largest clash limit, so only the 27
  // neighbouring cells of an atom can hold clash partners.
  std::vector<double> radius(t.atoms.size());
  double max_radius = 0.0;
  for (size_t i = 0; i < t.atoms.size(); ++i) {
    radius[i] = rc::van_der_waals_radius(t.atoms[i].element);  // < 0: unknown element, skipped
    max_radius = std::max(max_radius, radius[i]);
  }
  const double cell = std::max(1.0, 2.0 * max_radius - o.clash_overlap_tolerance);
  auto key = [cell](double x, double y, double z) {
    const auto q = [cell](double v) { return static_cast<int64_t>(std::floor(v / cell)) & 0x1fffff; };
    return (q(x) << 42) | (q(y) << 21) | q(z);
  };
  std::unordered_map<int64_t, std::vector<int>> grid;
  for (size_t i = 0; i < t.atoms.size(); ++i)
    if (radius[i] > 0) grid[key(t.atoms[i].x, t.atoms[i].y, t.atoms[i].z)].push_back(static_cast<int>(i));
  auto within_two_bonds = [&](int i, int j) {
    for (int k : t.neighbours[i]) {
      if (k == j) return true;
      for (int l : t.neighbours[k])
        if (l == j) return true;
    }
    return false;
  };
  auto is_sg = [&](int i) {
    const TopoAtom& a = t.atoms[i];
    return s.chains[a.chain].residues[a.residue].atoms[a.atom].name == "SG" &&
           report.residues[a.check_residue].parent == "CYS";
  };
  for (size_t ii = 0; ii < t.atoms.size(); ++ii) {
    const int i = static_cast<int>(ii);
    if (radius[i] <= 0) continue;
    const TopoAtom& a = t.atoms[i];
    for (int dx = -1; dx <= 1; ++dx)
      for (int dy = -1; dy <= 1; ++dy)
        for (int dz = -1; dz <= 1; ++dz) {
          const auto it = grid.find(key(a.x + dx * cell, a.y + dy * cell, a.z + dz * cell));
          if (it == grid.end()) continue;
          for (int j : it->second) {
            if (j <= i) continue;
            const double limit = radius[i] + radius[j] - o.clash_overlap_tolerance;
            const double d = distance(a, t.atoms[j]);
            if (d >= limit || within_two_bonds(i, j) || (is_sg(i) && is_sg(j))) continue;
            report.clashes.push_back({make_ref(s, a), make_ref(s, t.atoms[j]), d, limit});
          }
        }
  }
}

}  // namespace detail

std::string report_to_json(const StructureCheckReport& r, int indent) {
  using nlohmann::ordered_json;
  auto ref = [](const AtomRef& a) {
    std::string id = a.chain + ":" + a.residue + std::to_string(a.seq_num);
    if (a.ins_code != ' ') id += a.ins_code;
    return id + ":" + a.atom;
  };
  ordered_json j;
  j["structure"] = r.structure_id;
  j["model"] = r.model_num;
  j["options"] = {{"bond_tolerance_factor", r.options.bond_tolerance_factor},
                  {"angle_tolerance_factor", r.options.angle_tolerance_factor},
                  {"clash_overlap_tolerance", r.options.clash_overlap_tolerance}};
  j["summary"] = {{"chains", r.chains_checked},
                  {"residues", r.residues.size()},
                  {"atoms", r.atoms_checked},
                  {"ignored_residues", r.ignored_residues},
                  {"l_residues", r.count(Chirality::kL)},
                  {"d_residues", r.count(Chirality::kD)},
                  {"achiral_residues", r.count(Chirality::kAchiral)},
                  {"undetermined_chirality", r.count(Chirality::kUndetermined)},
                  {"missing_atoms", r.num_missing_atoms()},
                  {"extra_atoms", r.num_extra_atoms()},
                  {"bonds_checked", r.bonds_checked},
                  {"bond_outliers", r.bond_outliers.size()},
                  {"angles_checked", r.angles_checked},
                  {"angle_outliers", r.angle_outliers.size()},
                  {"clashes", r.clashes.size()}};
  ordered_json residues = ordered_json::array();
  for (const ResidueCheck& c : r.residues) {
    ordered_json e = {{"chain", c.chain}, {"seq_num", c.seq_num}, {"name", c.name},
                      {"ca_cip", c.ca_cip}, {"chirality", chirality_name(c.chirality)}};
    if (c.ins_code != ' ') e["ins_code"] = std::string(1, c.ins_code);
    if (c.parent != c.name) e["parent"] = c.parent;
    if (!c.missing_atoms.empty()) e["missing_atoms"] = c.missing_atoms;
    if (!c.extra_atoms.empty()) e["extra_atoms"] = c.extra_atoms;
    residues.push_back(std::move(e));
  }
  j["residues"] = std::move(residues);
  j["bond_outliers"] = ordered_json::array();
  for (const BondOutlier& b : r.bond_outliers)
    j["bond_outliers"].push_back({{"atoms", {ref(b.atom1), ref(b.atom2)}}, {"distance", b.distance},
                                  {"mean", b.mean}, {"stddev", b.stddev}, {"z", b.z}});
  j["angle_outliers"] = ordered_json::array();
  for (const AngleOutlier& a : r.angle_outliers)
    j["angle_outliers"].push_back({{"atoms", {ref(a.atom1), ref(a.vertex), ref(a.atom3)}},
                                   {"angle_deg", a.angle_deg}, {"mean_deg", a.mean_deg},
                                   {"stddev_deg", a.stddev_deg}, {"z", a.z}});
  j["clashes"] = ordered_json::array();
  for (const Clash& c : r.clashes)
    j["clashes"].push_back({{"atoms", {ref(c.atom1), ref(c.atom2)}}, {"distance", c.distance}, {"limit", c.limit}});
  j["warnings"] = r.warnings;
  return j.dump(indent);
}

}  // namespace foldcore::data
