// Stereochemistry reference values: Engh & Huber (1991/2001) bond lengths and angles per residue,
// as tabulated for AlphaFold, and AlphaFold's between-residue peptide-bond statistics. Derived
// tables follow AlphaFold (residue_constants.load_stereo_chemical_props and
// make_atom14_dists_bounds), for the structure checks and the structural-violation losses.
//
// Units: Angstrom and degrees. Lookups are order-independent in the end atoms.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "data_pipeline/structure/residue_constants.h"

namespace foldcore::data::stereo {

struct MeanStd {
  double mean;
  double stddev;
};

struct BondStat {  // a covalent bond atom1-atom2 within residue `resname`
  std::string_view resname, atom1, atom2;
  double mean, stddev;  // Angstrom
};
struct AngleStat {  // the angle atom1-atom2-atom3 (vertex atom2) within residue `resname`
  std::string_view resname, atom1, atom2, atom3;
  double mean_deg, stddev_deg;
};
struct NonBondedStat {  // minimum distance between non-bonded atoms of two elements
  std::string_view element1, element2;
  double min_distance, tolerance;  // Angstrom
};

// The whole tables, in the source's order (grouped by residue).
std::span<const BondStat> bonds();
std::span<const AngleStat> angles();
std::span<const NonBondedStat> non_bonded();

// The entries of one residue (3-letter name); empty for names not in the table (e.g. UNK).
std::span<const BondStat> residue_bonds(std::string_view resname);
std::span<const AngleStat> residue_angles(std::string_view resname);

// Bond atom1-atom2 in `resname` (either order), or nullopt if the table has no such bond.
std::optional<MeanStd> bond_length(std::string_view resname, std::string_view atom1,
                                   std::string_view atom2);
// Angle atom1-vertex-atom3 in `resname` (end atoms in either order), degrees, or nullopt.
std::optional<MeanStd> bond_angle_deg(std::string_view resname, std::string_view atom1,
                                      std::string_view vertex, std::string_view atom3);
std::optional<MeanStd> non_bonded_min_distance(std::string_view element1, std::string_view element2);

// Peptide bond C(i)-N(i+1) (AlphaFold's between_res_bond_length_c_n: 1.329 ± 0.014 Angstrom, or
// 1.341 ± 0.016 when residue i+1 is proline).
MeanStd peptide_bond_c_n(bool next_is_proline);
// Peptide angles in degrees, AlphaFold's values: CA(i)-C(i)-N(i+1) 116.568 ± 1.995 and
// C(i)-N(i+1)-CA(i+1) 121.352 ± 2.315. (AlphaFold's loss uses their cosines:
// rc::kBetweenResCosAnglesCaCN / kBetweenResCosAnglesCNCa.)
MeanStd peptide_angle_ca_c_n_deg();
MeanStd peptide_angle_c_n_ca_deg();

// AlphaFold's "virtual bonds": each angle a1-a2-a3 turned into the a1-a3 distance by the law of
// cosines, c² = a² + b² − 2ab·cos γ, with the standard deviation propagated from the two bond
// lengths and the angle assuming independent errors.
struct VirtualBond {
  std::string_view atom1, atom3;
  double length, stddev;
};
std::vector<VirtualBond> residue_virtual_bonds(std::string_view resname);

// AlphaFold's make_atom14_dists_bounds: per restype [21][14][14] lower/upper distance bounds between
// atom14 slots (non-bonded pairs: lower = r_vdW(a) + r_vdW(b) − overlap_tolerance, upper = 1e10;
// bonds and virtual bonds: mean ∓ tolerance_factor·stddev) and the stddev of bonded pairs.
struct Atom14DistBounds {
  using Table = std::array<std::array<std::array<float, rc::kAtom14Num>, rc::kAtom14Num>,
                           rc::kRestypeNumWithX>;
  Table lower_bound{}, upper_bound{}, stddev{};
};
Atom14DistBounds make_atom14_dists_bounds(double overlap_tolerance = 1.5,
                                          double bond_length_tolerance_factor = 15.0);

namespace detail {
extern const BondStat kBondTable[];
extern const AngleStat kAngleTable[];
extern const NonBondedStat kNonBondedTable[];
extern const size_t kBondTableSize, kAngleTableSize, kNonBondedTableSize;
}  // namespace detail

}  // namespace foldcore::data::stereo
