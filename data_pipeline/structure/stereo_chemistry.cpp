// Lookups over the Engh & Huber tables and AlphaFold's derived bounds. See stereo_chemistry.h.
#include "data_pipeline/structure/stereo_chemistry.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace foldcore::data::stereo {

std::span<const BondStat> bonds() { return {detail::kBondTable, detail::kBondTableSize}; }
std::span<const AngleStat> angles() { return {detail::kAngleTable, detail::kAngleTableSize}; }
std::span<const NonBondedStat> non_bonded() {
  return {detail::kNonBondedTable, detail::kNonBondedTableSize};
}

namespace {

// The contiguous run of entries of `resname` (the tables are grouped by residue).
template <typename T> std::span<const T> residue_run(std::span<const T> table, std::string_view resname) {
  size_t first = 0;
  while (first < table.size() && table[first].resname != resname) ++first;
  size_t last = first;
  while (last < table.size() && table[last].resname == resname) ++last;
  return table.subspan(first, last - first);
}

}  // namespace

std::span<const BondStat> residue_bonds(std::string_view resname) { return residue_run(bonds(), resname); }
std::span<const AngleStat> residue_angles(std::string_view resname) {
  return residue_run(angles(), resname);
}

std::optional<MeanStd> bond_length(std::string_view resname, std::string_view a1, std::string_view a2) {
  for (const BondStat& b : residue_bonds(resname))
    if ((b.atom1 == a1 && b.atom2 == a2) || (b.atom1 == a2 && b.atom2 == a1))
      return MeanStd{b.mean, b.stddev};
  return std::nullopt;
}

std::optional<MeanStd> bond_angle_deg(std::string_view resname, std::string_view a1,
                                      std::string_view vertex, std::string_view a3) {
  for (const AngleStat& a : residue_angles(resname)) {
    if (a.atom2 != vertex) continue;
    if ((a.atom1 == a1 && a.atom3 == a3) || (a.atom1 == a3 && a.atom3 == a1))
      return MeanStd{a.mean_deg, a.stddev_deg};
  }
  return std::nullopt;
}

std::optional<MeanStd> non_bonded_min_distance(std::string_view e1, std::string_view e2) {
  for (const NonBondedStat& n : non_bonded())
    if ((n.element1 == e1 && n.element2 == e2) || (n.element1 == e2 && n.element2 == e1))
      return MeanStd{n.min_distance, n.tolerance};
  return std::nullopt;
}

MeanStd peptide_bond_c_n(bool next_is_proline) {
  const int i = next_is_proline ? 1 : 0;
  return {rc::kBetweenResBondLengthCN[i], rc::kBetweenResBondLengthStddevCN[i]};
}
MeanStd peptide_angle_ca_c_n_deg() { return {116.568, 1.995}; }
MeanStd peptide_angle_c_n_ca_deg() { return {121.352, 2.315}; }

std::vector<VirtualBond> residue_virtual_bonds(std::string_view resname) {
  std::vector<VirtualBond> out;
  for (const AngleStat& a : residue_angles(resname)) {
    const auto b1 = bond_length(resname, a.atom1, a.atom2);
    const auto b2 = bond_length(resname, a.atom2, a.atom3);
    FC_CHECK(b1 && b2, "stereo tables: angle ", a.atom1, "-", a.atom2, "-", a.atom3, " of ",
             resname, " has no matching bonds");
    const double gamma = a.mean_deg * std::numbers::pi / 180.0;
    const double sd_gamma = a.stddev_deg * std::numbers::pi / 180.0;
    const double l1 = b1->mean, l2 = b2->mean;
    const double length = std::sqrt(l1 * l1 + l2 * l2 - 2.0 * l1 * l2 * std::cos(gamma));
    // Partial derivatives of the law-of-cosines length; first-order error propagation.
    const double outer = 0.5 / length;
    const double dl_dgamma = 2.0 * l1 * l2 * std::sin(gamma) * outer;
    const double dl_db1 = (2.0 * l1 - 2.0 * l2 * std::cos(gamma)) * outer;
    const double dl_db2 = (2.0 * l2 - 2.0 * l1 * std::cos(gamma)) * outer;
    const double sd = std::sqrt(std::pow(dl_dgamma * sd_gamma, 2) + std::pow(dl_db1 * b1->stddev, 2) +
                                std::pow(dl_db2 * b2->stddev, 2));
    out.push_back({a.atom1, a.atom3, length, sd});
  }
  return out;
}

Atom14DistBounds make_atom14_dists_bounds(double overlap_tolerance, double bond_length_tolerance_factor) {
  Atom14DistBounds out;
  for (int r = 0; r < rc::kRestypeNum; ++r) {
    const std::string_view resname = rc::kResnames[r];
    const auto& names = rc::kRestypeAtom14Names[r];
    // Clash bounds for every pair of distinct atoms (the element is the name's first letter).
    for (int i = 0; i < rc::kAtom14Num; ++i) {
      if (names[i].empty()) continue;
      const double ri = rc::van_der_waals_radius(names[i].substr(0, 1));
      for (int j = 0; j < rc::kAtom14Num; ++j) {
        if (names[j].empty() || i == j) continue;
        const double rj = rc::van_der_waals_radius(names[j].substr(0, 1));
        out.lower_bound[r][i][j] = static_cast<float>(ri + rj - overlap_tolerance);
        out.upper_bound[r][i][j] = 1e10f;
      }
    }
    // Bonds and virtual bonds overwrite them.
    auto set = [&](std::string_view a1, std::string_view a2, double length, double sd) {
      const int i = rc::atom14_index(r, a1), j = rc::atom14_index(r, a2);
      FC_CHECK(i >= 0 && j >= 0, "stereo tables: atom ", a1, " or ", a2, " not in ", resname);
      const float lo = static_cast<float>(length - bond_length_tolerance_factor * sd);
      const float hi = static_cast<float>(length + bond_length_tolerance_factor * sd);
      out.lower_bound[r][i][j] = out.lower_bound[r][j][i] = lo;
      out.upper_bound[r][i][j] = out.upper_bound[r][j][i] = hi;
      out.stddev[r][i][j] = out.stddev[r][j][i] = static_cast<float>(sd);
    };
    for (const BondStat& b : residue_bonds(resname)) set(b.atom1, b.atom2, b.mean, b.stddev);
    for (const VirtualBond& v : residue_virtual_bonds(resname)) set(v.atom1, v.atom3, v.length, v.stddev);
  }
  return out;
}

}  // namespace foldcore::data::stereo
