// AlphaFold2's residue constants, declared once for the data pipeline and the model.
//
// Source: AlphaFold (github.com/google-deepmind/alphafold, alphafold/common/residue_constants.py,
// Apache-2.0). The literal tables (atom names, chi atoms, idealised rigid-group atom positions,
// renaming swaps, van der Waals radii, between-residue peptide-bond statistics) are AlphaFold's
// published numbers embedded as data; the derived tables (atom14/atom37 maps, default frames,
// per-slot rigid-group positions) are recomputed here exactly as AlphaFold derives them.
//
// Dependency-free on purpose (standard library only): the model layer includes this header.
//
// Index conventions (AlphaFold's):
//   restype  0..19 in the order ARNDCQEGHILKMFPSTWYV (alphabetical by 3-letter code), 20 = X/UNK.
//   atom37   index into kAtomTypes; atom14 a per-residue compact slot (kRestypeAtom14Names).
//   rigid group 0 backbone, 1 pre-omega (identity), 2 phi, 3 psi, 4..7 chi1..chi4.
#pragma once

#include <array>
#include <span>
#include <string_view>

namespace foldcore::data::rc {

inline constexpr int kRestypeNum = 20;       // the 20 standard amino acids
inline constexpr int kRestypeNumWithX = 21;  // + unknown (X / UNK)
inline constexpr int kUnkRestypeIndex = 20;
inline constexpr int kAtomTypeNum = 37;
inline constexpr int kAtom14Num = 14;
inline constexpr int kNumRigidGroups = 8;
inline constexpr int kNumChiAngles = 4;

// Distance from one CA to the next CA for a trans peptide (omega = 180 degrees), Angstrom.
inline constexpr double kCaCa = 3.80209737096;

// ---------------------------------------------------------------- residue types
inline constexpr std::array<char, kRestypeNum> kRestypes = {'A', 'R', 'N', 'D', 'C', 'Q', 'E',
                                                            'G', 'H', 'I', 'L', 'K', 'M', 'F',
                                                            'P', 'S', 'T', 'W', 'Y', 'V'};
inline constexpr std::array<char, kRestypeNumWithX> kRestypesWithX = {
    'A', 'R', 'N', 'D', 'C', 'Q', 'E', 'G', 'H', 'I', 'L',
    'K', 'M', 'F', 'P', 'S', 'T', 'W', 'Y', 'V', 'X'};
// 3-letter names in restype order; index 20 is "UNK" (AlphaFold's `resnames`).
inline constexpr std::array<std::string_view, kRestypeNumWithX> kResnames = {
    "ALA", "ARG", "ASN", "ASP", "CYS", "GLN", "GLU", "GLY", "HIS", "ILE", "LEU",
    "LYS", "MET", "PHE", "PRO", "SER", "THR", "TRP", "TYR", "VAL", "UNK"};

// restype_order: index of a standard one-letter code (upper case), or -1.
int restype_order(char one_letter);
// restype_order_with_x: like restype_order but 'X' -> 20; with map_unknown_to_x every other
// upper-case letter also maps to 20 (AlphaFold's sequence_to_onehot(map_unknown_to_x=True)).
// Returns -1 for characters that are not accepted.
int restype_order_with_x(char one_letter, bool map_unknown_to_x = false);
// restype_1to3: "ALA" for 'A' ...; "UNK" for 'X' and anything else.
std::string_view restype_1to3(char one_letter);
// restype_3to1: 'A' for "ALA" ...; 'X' for any other name (AlphaFold's restype_3to1.get(n, 'X')).
char restype_3to1(std::string_view three_letter);
// resname_to_idx: 0..19 for a standard name, 20 for anything else.
int resname_to_idx(std::string_view three_letter);

// AlphaFold's MAP_HHBLITS_AATYPE_TO_OUR_AATYPE: HHblits residue ids (0..21: alphabetical one-letter
// order ACDEFGHIKLMNPQRSTVWY, 20 = X, 21 = gap) to our restype order (20 = X, 21 = gap). Used by
// the input pipeline to convert MSA rows produced by the parsers into model restypes.
inline constexpr std::array<int, 22> kMapHhblitsAatypeToOurAatype = {
    0, 4, 3, 6, 13, 7, 8, 9, 11, 10, 12, 2, 14, 5, 1, 15, 16, 19, 17, 18, 20, 21};

// ---------------------------------------------------------------- atoms
inline constexpr std::array<std::string_view, kAtomTypeNum> kAtomTypes = {
    "N",   "CA",  "C",   "CB",  "O",   "CG",  "CG1", "CG2", "OG",  "OG1", "SG",  "CD",  "CD1",
    "CD2", "ND1", "ND2", "OD1", "OD2", "SD",  "CE",  "CE1", "CE2", "CE3", "NE",  "NE1", "NE2",
    "OE1", "OE2", "CH2", "NH1", "NH2", "OH",  "CZ",  "CZ2", "CZ3", "NZ",  "OXT"};
// atom_order: atom37 index of an atom name, or -1.
int atom_order(std::string_view atom_name);

// Compact per-residue atom encoding; "" marks an unused slot. Row 20 (UNK) is empty.
extern const std::array<std::array<std::string_view, kAtom14Num>, kRestypeNumWithX>
    kRestypeAtom14Names;
// atom14 slot of `atom_name` in residue `restype`, or -1.
int atom14_index(int restype, std::string_view atom_name);

// ---------------------------------------------------------------- chi angles
// Atom names of chi1..chi4 (only the first chi_angles_mask entries are valid), per restype 0..19.
using ChiQuad = std::array<std::string_view, 4>;
extern const std::array<std::array<ChiQuad, kNumChiAngles>, kRestypeNum> kChiAnglesAtoms;
// Number of chi angles per restype (0..4); 0 for UNK.
int num_chi_angles(int restype);
// AlphaFold's chi_angles_mask [20] extended by the all-zero UNK row the model appends.
extern const std::array<std::array<float, kNumChiAngles>, kRestypeNumWithX> kChiAnglesMask;
// Chi angles that are pi-periodic (symmetric side chains): ASP chi2, GLU chi3, PHE/TYR chi2.
extern const std::array<std::array<float, kNumChiAngles>, kRestypeNumWithX> kChiPiPeriodic;

// ---------------------------------------------------------------- idealised geometry
// One atom of AlphaFold's rigid_group_atom_positions: the position is given in the frame of its
// rigid group (x along the rotation axis, the dihedral-defining atom in the xy-plane, y > 0).
struct RigidGroupAtom {
  std::string_view name;
  int group;
  std::array<double, 3> position;  // Angstrom
};
// The idealised atoms of a standard restype (0..19), in AlphaFold's listing order.
std::span<const RigidGroupAtom> rigid_group_atom_positions(int restype);

// Tables derived from rigid_group_atom_positions as AlphaFold's _make_rigid_group_constants does
// (float32 like AlphaFold). Row 20 (UNK) is all zero, frames included, as in AlphaFold.
struct RigidGroupConstants {
  // Frame of each rigid group in its parent frame (groups 0..4: backbone; 5,6,7: chi_{k-1}),
  // as a 4x4 homogeneous matrix [R t; 0 1] whose columns are ex, ey, ez, t.
  std::array<std::array<std::array<std::array<float, 4>, 4>, kNumRigidGroups>, kRestypeNumWithX>
      default_frame{};
  std::array<std::array<int, kAtomTypeNum>, kRestypeNumWithX> atom37_to_rigid_group{};
  std::array<std::array<float, kAtomTypeNum>, kRestypeNumWithX> atom37_mask{};
  std::array<std::array<std::array<float, 3>, kAtomTypeNum>, kRestypeNumWithX>
      atom37_rigid_group_positions{};
  std::array<std::array<int, kAtom14Num>, kRestypeNumWithX> atom14_to_rigid_group{};
  std::array<std::array<float, kAtom14Num>, kRestypeNumWithX> atom14_mask{};
  std::array<std::array<std::array<float, 3>, kAtom14Num>, kRestypeNumWithX>
      atom14_rigid_group_positions{};
};
// Computed once on first use (thread-safe), immutable afterwards.
const RigidGroupConstants& rigid_group_constants();

// AlphaFold's _make_rigid_transformation_4x4: ex normalised; ey Gram-Schmidt-orthogonalised against
// ex and normalised; ez = ex × ey; columns [ex ey ez t].
std::array<std::array<double, 4>, 4> make_rigid_transformation_4x4(const std::array<double, 3>& ex,
                                                                   const std::array<double, 3>& ey,
                                                                   const std::array<double, 3>& t);

// ---------------------------------------------------------------- atom14 <-> atom37 maps
// As AlphaFold's make_atom14_masks builds them: unused slots map to index 0 (and are masked out).
struct Atom14Maps {
  std::array<std::array<int, kAtom14Num>, kRestypeNumWithX> atom14_to_atom37{};
  std::array<std::array<int, kAtomTypeNum>, kRestypeNumWithX> atom37_to_atom14{};
  std::array<std::array<float, kAtom14Num>, kRestypeNumWithX> atom14_mask{};
  std::array<std::array<float, kAtomTypeNum>, kRestypeNumWithX> atom37_mask{};  // STANDARD_ATOM_MASK
  // Symmetric-atom renaming (AlphaFold's residue_atom_renaming_swaps): 1 where the slot's name is
  // ambiguous, and the slot it swaps with (identity elsewhere).
  std::array<std::array<float, kAtom14Num>, kRestypeNumWithX> atom14_is_ambiguous{};
  std::array<std::array<int, kAtom14Num>, kRestypeNumWithX> atom14_swap_index{};
};
const Atom14Maps& atom14_maps();

// ---------------------------------------------------------------- symmetry, radii
struct AtomSwap {
  std::string_view resname, atom1, atom2;
};
// ASP OD1<->OD2, GLU OE1<->OE2, PHE/TYR CD1<->CD2 and CE1<->CE2.
inline constexpr std::array<AtomSwap, 6> kResidueAtomRenamingSwaps = {{
    {"ASP", "OD1", "OD2"},
    {"GLU", "OE1", "OE2"},
    {"PHE", "CD1", "CD2"},
    {"PHE", "CE1", "CE2"},
    {"TYR", "CD1", "CD2"},
    {"TYR", "CE1", "CE2"},
}};

// Van der Waals radius (Angstrom) by element symbol (case-insensitive): AlphaFold's table for
// C 1.7, N 1.55, O 1.52, S 1.8 (Bondi values); other common elements from Bondi (1964) (H, F, P,
// Cl, Se, Br, I). Returns a negative number for an element not in the table.
double van_der_waals_radius(std::string_view element);

// ---------------------------------------------------------------- between-residue geometry
// Peptide bond C(i)-N(i+1): index 0 general, index 1 when residue i+1 is proline.
inline constexpr std::array<double, 2> kBetweenResBondLengthCN = {1.329, 1.341};
inline constexpr std::array<double, 2> kBetweenResBondLengthStddevCN = {0.014, 0.016};
// {mean, stddev} of cos(angle): CA(i)-C(i)-N(i+1) is 116.568 ± 1.995 degrees and
// C(i)-N(i+1)-CA(i+1) is 121.352 ± 2.315 degrees.
inline constexpr std::array<double, 2> kBetweenResCosAnglesCNCa = {-0.5203, 0.0353};
inline constexpr std::array<double, 2> kBetweenResCosAnglesCaCN = {-0.4473, 0.0311};

// ---------------------------------------------------------------- modified residues
// Parent standard residue of a common modified residue (MSE -> MET, SEP -> SER, ...), from the
// wwPDB Chemical Component Dictionary field _chem_comp.mon_nstd_parent_comp_id. Returns "" if the
// name is not in our table. Standard names map to themselves.
std::string_view modified_residue_parent(std::string_view three_letter);
struct ModifiedResidue {
  std::string_view name, parent;
};
// The whole table, sorted by name.
std::span<const ModifiedResidue> modified_residues();

}  // namespace foldcore::data::rc
