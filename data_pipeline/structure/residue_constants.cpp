// AlphaFold2 residue constants: literal tables and their derivations. See residue_constants.h.
//
// The numeric tables below (rigid_group_atom_positions, chi atoms and masks) are data published
// with AlphaFold, Copyright 2021 DeepMind Technologies Limited, Apache License 2.0
// (alphafold/common/residue_constants.py).
#include "data_pipeline/structure/residue_constants.h"

#include <cctype>
#include <string>

#include "core/error.h"

namespace foldcore::data::rc {

// ---------------------------------------------------------------- residue types

int restype_order(char c) {
  for (int i = 0; i < kRestypeNum; ++i)
    if (kRestypes[i] == c) return i;
  return -1;
}

int restype_order_with_x(char c, bool map_unknown_to_x) {
  if (c == 'X') return kUnkRestypeIndex;
  const int i = restype_order(c);
  if (i >= 0) return i;
  if (map_unknown_to_x && c >= 'A' && c <= 'Z') return kUnkRestypeIndex;
  return -1;
}

std::string_view restype_1to3(char c) {
  const int i = restype_order(c);
  return kResnames[i >= 0 ? i : kUnkRestypeIndex];
}

int resname_to_idx(std::string_view name) {
  for (int i = 0; i < kRestypeNum; ++i)
    if (kResnames[i] == name) return i;
  return kUnkRestypeIndex;
}

char restype_3to1(std::string_view name) { return kRestypesWithX[resname_to_idx(name)]; }

// ---------------------------------------------------------------- atoms

int atom_order(std::string_view name) {
  for (int i = 0; i < kAtomTypeNum; ++i)
    if (kAtomTypes[i] == name) return i;
  return -1;
}

const std::array<std::array<std::string_view, kAtom14Num>, kRestypeNumWithX> kRestypeAtom14Names = {{
    {"N", "CA", "C", "O", "CB", "", "", "", "", "", "", "", "", ""},                  // ALA
    {"N", "CA", "C", "O", "CB", "CG", "CD", "NE", "CZ", "NH1", "NH2", "", "", ""},    // ARG
    {"N", "CA", "C", "O", "CB", "CG", "OD1", "ND2", "", "", "", "", "", ""},          // ASN
    {"N", "CA", "C", "O", "CB", "CG", "OD1", "OD2", "", "", "", "", "", ""},          // ASP
    {"N", "CA", "C", "O", "CB", "SG", "", "", "", "", "", "", "", ""},                // CYS
    {"N", "CA", "C", "O", "CB", "CG", "CD", "OE1", "NE2", "", "", "", "", ""},        // GLN
    {"N", "CA", "C", "O", "CB", "CG", "CD", "OE1", "OE2", "", "", "", "", ""},        // GLU
    {"N", "CA", "C", "O", "", "", "", "", "", "", "", "", "", ""},                    // GLY
    {"N", "CA", "C", "O", "CB", "CG", "ND1", "CD2", "CE1", "NE2", "", "", "", ""},    // HIS
    {"N", "CA", "C", "O", "CB", "CG1", "CG2", "CD1", "", "", "", "", "", ""},         // ILE
    {"N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "", "", "", "", "", ""},          // LEU
    {"N", "CA", "C", "O", "CB", "CG", "CD", "CE", "NZ", "", "", "", "", ""},          // LYS
    {"N", "CA", "C", "O", "CB", "CG", "SD", "CE", "", "", "", "", "", ""},            // MET
    {"N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "", "", ""},  // PHE
    {"N", "CA", "C", "O", "CB", "CG", "CD", "", "", "", "", "", "", ""},              // PRO
    {"N", "CA", "C", "O", "CB", "OG", "", "", "", "", "", "", "", ""},                // SER
    {"N", "CA", "C", "O", "CB", "OG1", "CG2", "", "", "", "", "", "", ""},            // THR
    {"N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "NE1", "CE2", "CE3", "CZ2", "CZ3", "CH2"},  // TRP
    {"N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "OH", "", ""},  // TYR
    {"N", "CA", "C", "O", "CB", "CG1", "CG2", "", "", "", "", "", "", ""},            // VAL
    {"", "", "", "", "", "", "", "", "", "", "", "", "", ""},                         // UNK
}};

int atom14_index(int restype, std::string_view name) {
  if (restype < 0 || restype >= kRestypeNumWithX || name.empty()) return -1;
  for (int i = 0; i < kAtom14Num; ++i)
    if (kRestypeAtom14Names[restype][i] == name) return i;
  return -1;
}

// ---------------------------------------------------------------- chi angles

const std::array<std::array<ChiQuad, kNumChiAngles>, kRestypeNum> kChiAnglesAtoms = {{
    {{}},                                                                        // ALA
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "CD"}, {"CB", "CG", "CD", "NE"},
      {"CG", "CD", "NE", "CZ"}}},                                                // ARG (chi5 ignored)
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "OD1"}}},                      // ASN
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "OD1"}}},                      // ASP
    {{{"N", "CA", "CB", "SG"}}},                                                 // CYS
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "CD"}, {"CB", "CG", "CD", "OE1"}}},  // GLN
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "CD"}, {"CB", "CG", "CD", "OE1"}}},  // GLU
    {{}},                                                                        // GLY
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "ND1"}}},                      // HIS
    {{{"N", "CA", "CB", "CG1"}, {"CA", "CB", "CG1", "CD1"}}},                    // ILE
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "CD1"}}},                      // LEU
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "CD"}, {"CB", "CG", "CD", "CE"},
      {"CG", "CD", "CE", "NZ"}}},                                                // LYS
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "SD"}, {"CB", "CG", "SD", "CE"}}},   // MET
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "CD1"}}},                      // PHE
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "CD"}}},                       // PRO
    {{{"N", "CA", "CB", "OG"}}},                                                 // SER
    {{{"N", "CA", "CB", "OG1"}}},                                                // THR
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "CD1"}}},                      // TRP
    {{{"N", "CA", "CB", "CG"}, {"CA", "CB", "CG", "CD1"}}},                      // TYR
    {{{"N", "CA", "CB", "CG1"}}},                                                // VAL
}};

const std::array<std::array<float, kNumChiAngles>, kRestypeNumWithX> kChiAnglesMask = {{
    {0, 0, 0, 0},  // ALA
    {1, 1, 1, 1},  // ARG
    {1, 1, 0, 0},  // ASN
    {1, 1, 0, 0},  // ASP
    {1, 0, 0, 0},  // CYS
    {1, 1, 1, 0},  // GLN
    {1, 1, 1, 0},  // GLU
    {0, 0, 0, 0},  // GLY
    {1, 1, 0, 0},  // HIS
    {1, 1, 0, 0},  // ILE
    {1, 1, 0, 0},  // LEU
    {1, 1, 1, 1},  // LYS
    {1, 1, 1, 0},  // MET
    {1, 1, 0, 0},  // PHE
    {1, 1, 0, 0},  // PRO
    {1, 0, 0, 0},  // SER
    {1, 0, 0, 0},  // THR
    {1, 1, 0, 0},  // TRP
    {1, 1, 0, 0},  // TYR
    {1, 0, 0, 0},  // VAL
    {0, 0, 0, 0},  // UNK
}};

const std::array<std::array<float, kNumChiAngles>, kRestypeNumWithX> kChiPiPeriodic = {{
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 1, 0, 0},  // ALA ARG ASN ASP
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 0},  // CYS GLN GLU GLY
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},  // HIS ILE LEU LYS
    {0, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},  // MET PHE PRO SER
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 0, 0},  // THR TRP TYR VAL
    {0, 0, 0, 0},                                            // UNK
}};

int num_chi_angles(int restype) {
  if (restype < 0 || restype >= kRestypeNumWithX) return 0;
  int n = 0;
  for (float m : kChiAnglesMask[restype]) n += m > 0.5f ? 1 : 0;
  return n;
}

// ---------------------------------------------------------------- rigid group atom positions
// AlphaFold's rigid_group_atom_positions: [atom name, rigid group, position in that group's frame].
namespace {

using A = RigidGroupAtom;
constexpr A kAla[] = {{"N", 0, {-0.525, 1.363, 0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.526, -0.000, -0.000}}, {"CB", 0, {-0.529, -0.774, -1.205}},
                      {"O", 3, {0.627, 1.062, 0.000}}};
constexpr A kArg[] = {{"N", 0, {-0.524, 1.362, -0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.525, -0.000, -0.000}}, {"CB", 0, {-0.524, -0.778, -1.209}},
                      {"O", 3, {0.626, 1.062, 0.000}},   {"CG", 4, {0.616, 1.390, -0.000}},
                      {"CD", 5, {0.564, 1.414, 0.000}},  {"NE", 6, {0.539, 1.357, -0.000}},
                      {"NH1", 7, {0.206, 2.301, 0.000}}, {"NH2", 7, {2.078, 0.978, -0.000}},
                      {"CZ", 7, {0.758, 1.093, -0.000}}};
constexpr A kAsn[] = {{"N", 0, {-0.536, 1.357, 0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.526, -0.000, -0.000}}, {"CB", 0, {-0.531, -0.787, -1.200}},
                      {"O", 3, {0.625, 1.062, 0.000}},   {"CG", 4, {0.584, 1.399, 0.000}},
                      {"ND2", 5, {0.593, -1.188, 0.001}}, {"OD1", 5, {0.633, 1.059, 0.000}}};
constexpr A kAsp[] = {{"N", 0, {-0.525, 1.362, -0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.527, 0.000, -0.000}},  {"CB", 0, {-0.526, -0.778, -1.208}},
                      {"O", 3, {0.626, 1.062, -0.000}},  {"CG", 4, {0.593, 1.398, -0.000}},
                      {"OD1", 5, {0.610, 1.091, 0.000}}, {"OD2", 5, {0.592, -1.101, -0.003}}};
constexpr A kCys[] = {{"N", 0, {-0.522, 1.362, -0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.524, 0.000, 0.000}},   {"CB", 0, {-0.519, -0.773, -1.212}},
                      {"O", 3, {0.625, 1.062, -0.000}},  {"SG", 4, {0.728, 1.653, 0.000}}};
constexpr A kGln[] = {{"N", 0, {-0.526, 1.361, -0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.526, 0.000, 0.000}},   {"CB", 0, {-0.525, -0.779, -1.207}},
                      {"O", 3, {0.626, 1.062, -0.000}},  {"CG", 4, {0.615, 1.393, 0.000}},
                      {"CD", 5, {0.587, 1.399, -0.000}}, {"NE2", 6, {0.593, -1.189, -0.001}},
                      {"OE1", 6, {0.634, 1.060, 0.000}}};
constexpr A kGlu[] = {{"N", 0, {-0.528, 1.361, 0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.526, -0.000, -0.000}}, {"CB", 0, {-0.526, -0.781, -1.207}},
                      {"O", 3, {0.626, 1.062, 0.000}},   {"CG", 4, {0.615, 1.392, 0.000}},
                      {"CD", 5, {0.600, 1.397, 0.000}},  {"OE1", 6, {0.607, 1.095, -0.000}},
                      {"OE2", 6, {0.589, -1.104, -0.001}}};
constexpr A kGly[] = {{"N", 0, {-0.572, 1.337, 0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.517, -0.000, -0.000}}, {"O", 3, {0.626, 1.062, -0.000}}};
constexpr A kHis[] = {{"N", 0, {-0.527, 1.360, 0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.525, 0.000, 0.000}},   {"CB", 0, {-0.525, -0.778, -1.208}},
                      {"O", 3, {0.625, 1.063, 0.000}},   {"CG", 4, {0.600, 1.370, -0.000}},
                      {"CD2", 5, {0.889, -1.021, 0.003}}, {"ND1", 5, {0.744, 1.160, -0.000}},
                      {"CE1", 5, {2.030, 0.851, 0.002}}, {"NE2", 5, {2.145, -0.466, 0.004}}};
constexpr A kIle[] = {{"N", 0, {-0.493, 1.373, -0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.527, -0.000, -0.000}}, {"CB", 0, {-0.536, -0.793, -1.213}},
                      {"O", 3, {0.627, 1.062, -0.000}},  {"CG1", 4, {0.534, 1.437, -0.000}},
                      {"CG2", 4, {0.540, -0.785, -1.199}}, {"CD1", 5, {0.619, 1.391, 0.000}}};
constexpr A kLeu[] = {{"N", 0, {-0.520, 1.363, 0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.525, -0.000, -0.000}}, {"CB", 0, {-0.522, -0.773, -1.214}},
                      {"O", 3, {0.625, 1.063, -0.000}},  {"CG", 4, {0.678, 1.371, 0.000}},
                      {"CD1", 5, {0.530, 1.430, -0.000}}, {"CD2", 5, {0.535, -0.774, 1.200}}};
constexpr A kLys[] = {{"N", 0, {-0.526, 1.362, -0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.526, 0.000, 0.000}},   {"CB", 0, {-0.524, -0.778, -1.208}},
                      {"O", 3, {0.626, 1.062, -0.000}},  {"CG", 4, {0.619, 1.390, 0.000}},
                      {"CD", 5, {0.559, 1.417, 0.000}},  {"CE", 6, {0.560, 1.416, 0.000}},
                      {"NZ", 7, {0.554, 1.387, 0.000}}};
constexpr A kMet[] = {{"N", 0, {-0.521, 1.364, -0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.525, 0.000, 0.000}},   {"CB", 0, {-0.523, -0.776, -1.210}},
                      {"O", 3, {0.625, 1.062, -0.000}},  {"CG", 4, {0.613, 1.391, -0.000}},
                      {"SD", 5, {0.703, 1.695, 0.000}},  {"CE", 6, {0.320, 1.786, -0.000}}};
constexpr A kPhe[] = {{"N", 0, {-0.518, 1.363, 0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.524, 0.000, -0.000}},  {"CB", 0, {-0.525, -0.776, -1.212}},
                      {"O", 3, {0.626, 1.062, -0.000}},  {"CG", 4, {0.607, 1.377, 0.000}},
                      {"CD1", 5, {0.709, 1.195, -0.000}}, {"CD2", 5, {0.706, -1.196, 0.000}},
                      {"CE1", 5, {2.102, 1.198, -0.000}}, {"CE2", 5, {2.098, -1.201, -0.000}},
                      {"CZ", 5, {2.794, -0.003, -0.001}}};
// PRO CD: AlphaFold's value with the CB-CG-CD angle made 2 degrees larger by hand.
constexpr A kPro[] = {{"N", 0, {-0.566, 1.351, -0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.527, -0.000, 0.000}},  {"CB", 0, {-0.546, -0.611, -1.293}},
                      {"O", 3, {0.621, 1.066, 0.000}},   {"CG", 4, {0.382, 1.445, 0.0}},
                      {"CD", 5, {0.477, 1.424, 0.0}}};
constexpr A kSer[] = {{"N", 0, {-0.529, 1.360, -0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.525, -0.000, -0.000}}, {"CB", 0, {-0.518, -0.777, -1.211}},
                      {"O", 3, {0.626, 1.062, -0.000}},  {"OG", 4, {0.503, 1.325, 0.000}}};
constexpr A kThr[] = {{"N", 0, {-0.517, 1.364, 0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.526, 0.000, -0.000}},  {"CB", 0, {-0.516, -0.793, -1.215}},
                      {"O", 3, {0.626, 1.062, 0.000}},   {"CG2", 4, {0.550, -0.718, -1.228}},
                      {"OG1", 4, {0.472, 1.353, 0.000}}};
constexpr A kTrp[] = {{"N", 0, {-0.521, 1.363, 0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.525, -0.000, 0.000}},  {"CB", 0, {-0.523, -0.776, -1.212}},
                      {"O", 3, {0.627, 1.062, 0.000}},   {"CG", 4, {0.609, 1.370, -0.000}},
                      {"CD1", 5, {0.824, 1.091, 0.000}}, {"CD2", 5, {0.854, -1.148, -0.005}},
                      {"CE2", 5, {2.186, -0.678, -0.007}}, {"CE3", 5, {0.622, -2.530, -0.007}},
                      {"NE1", 5, {2.140, 0.690, -0.004}}, {"CH2", 5, {3.028, -2.890, -0.013}},
                      {"CZ2", 5, {3.283, -1.543, -0.011}}, {"CZ3", 5, {1.715, -3.389, -0.011}}};
constexpr A kTyr[] = {{"N", 0, {-0.522, 1.362, 0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.524, -0.000, -0.000}}, {"CB", 0, {-0.522, -0.776, -1.213}},
                      {"O", 3, {0.627, 1.062, -0.000}},  {"CG", 4, {0.607, 1.382, -0.000}},
                      {"CD1", 5, {0.716, 1.195, -0.000}}, {"CD2", 5, {0.713, -1.194, -0.001}},
                      {"CE1", 5, {2.107, 1.200, -0.002}}, {"CE2", 5, {2.104, -1.201, -0.003}},
                      {"OH", 5, {4.168, -0.002, -0.005}}, {"CZ", 5, {2.791, -0.001, -0.003}}};
constexpr A kVal[] = {{"N", 0, {-0.494, 1.373, -0.000}}, {"CA", 0, {0.000, 0.000, 0.000}},
                      {"C", 0, {1.527, -0.000, -0.000}}, {"CB", 0, {-0.533, -0.795, -1.213}},
                      {"O", 3, {0.627, 1.062, -0.000}},  {"CG1", 4, {0.540, 1.429, -0.000}},
                      {"CG2", 4, {0.533, -0.776, 1.203}}};

constexpr std::array<std::span<const A>, kRestypeNum> kRigidGroupAtoms = {
    kAla, kArg, kAsn, kAsp, kCys, kGln, kGlu, kGly, kHis, kIle,
    kLeu, kLys, kMet, kPhe, kPro, kSer, kThr, kTrp, kTyr, kVal};

}  // namespace

std::span<const RigidGroupAtom> rigid_group_atom_positions(int restype) {
  FC_CHECK(restype >= 0 && restype < kRestypeNum, "rigid_group_atom_positions: restype ", restype,
           " is not a standard residue (0..19)");
  return kRigidGroupAtoms[restype];
}

// ---------------------------------------------------------------- radii

double van_der_waals_radius(std::string_view element) {
  std::string e;
  for (char c : element)
    if (c != ' ') e.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  // AlphaFold's van_der_waals_radius (C, N, O, S); the rest Bondi (1964), J. Phys. Chem. 68:441.
  struct Radius {
    std::string_view element;
    double radius;
  };
  static constexpr Radius kRadii[] = {{"C", 1.7},  {"N", 1.55},  {"O", 1.52}, {"S", 1.8},
                                      {"H", 1.2},  {"F", 1.47},  {"P", 1.8},  {"CL", 1.75},
                                      {"SE", 1.9}, {"BR", 1.85}, {"I", 1.98}};
  for (const Radius& r : kRadii)
    if (r.element == e) return r.radius;
  return -1.0;
}

// ---------------------------------------------------------------- modified residues
// Parent residues from the wwPDB Chemical Component Dictionary (_chem_comp.mon_nstd_parent_comp_id)
// for modified amino acids common in the PDB (selenomethionine, phosphorylations, methylations,
// cysteine oxidation states, hydroxyproline, pyroglutamate, ...), plus force-field protonation-state
// names (HID/HIE/HIP, CYX, ...) that some PDB writers emit. Kept sorted for binary search.
namespace {
constexpr ModifiedResidue kModifiedParents[] = {
    {"2AS", "ASP"}, {"3AH", "HIS"}, {"5HP", "GLU"}, {"ABA", "ALA"},
    {"AGM", "ARG"}, {"AIB", "ALA"}, {"ALY", "LYS"}, {"ASH", "ASP"},
    {"BMT", "THR"}, {"CAS", "CYS"}, {"CCS", "CYS"},
    {"CEA", "CYS"}, {"CGU", "GLU"}, {"CME", "CYS"}, {"CMT", "CYS"}, {"CSD", "CYS"},
    {"CSO", "CYS"}, {"CSS", "CYS"}, {"CSX", "CYS"}, {"CXM", "MET"}, {"CYM", "CYS"},
    {"CYX", "CYS"}, {"DAH", "PHE"}, {"FME", "MET"}, {"GLH", "GLU"}, {"GMA", "GLU"},
    {"HIC", "HIS"}, {"HID", "HIS"}, {"HIE", "HIS"}, {"HIP", "HIS"}, {"HSD", "HIS"},
    {"HSE", "HIS"}, {"HSP", "HIS"}, {"HTR", "TRP"}, {"HY3", "PRO"}, {"HYP", "PRO"},
    {"IAS", "ASP"}, {"IYR", "TYR"}, {"KCX", "LYS"}, {"LLP", "LYS"}, {"LYN", "LYS"},
    {"LYZ", "LYS"}, {"M3L", "LYS"}, {"MAA", "ALA"}, {"MEN", "ASN"}, {"MHO", "MET"},
    {"MHS", "HIS"}, {"MIS", "SER"}, {"MLE", "LEU"}, {"MLY", "LYS"}, {"MLZ", "LYS"},
    {"MSE", "MET"}, {"MSO", "MET"}, {"MVA", "VAL"}, {"NEP", "HIS"}, {"NLE", "LEU"},
    {"OAS", "SER"}, {"OCS", "CYS"}, {"OMT", "MET"}, {"PCA", "GLU"},
    {"PHD", "ASP"}, {"PTR", "TYR"}, {"SAC", "SER"}, {"SAR", "GLY"}, {"SCH", "CYS"},
    {"SCY", "CYS"}, {"SEP", "SER"}, {"SMC", "CYS"}, {"SME", "MET"}, {"SNC", "CYS"},
    {"STY", "TYR"}, {"SVA", "SER"}, {"TPO", "THR"}, {"TRO", "TRP"},
    {"TYI", "TYR"}, {"TYS", "TYR"}, {"YCM", "CYS"},
};
}  // namespace

std::span<const ModifiedResidue> modified_residues() { return kModifiedParents; }

std::string_view modified_residue_parent(std::string_view name) {
  if (resname_to_idx(name) != kUnkRestypeIndex) return kResnames[resname_to_idx(name)];
  size_t lo = 0, hi = std::size(kModifiedParents);
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (kModifiedParents[mid].name < name)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < std::size(kModifiedParents) && kModifiedParents[lo].name == name)
    return kModifiedParents[lo].parent;
  return {};
}

}  // namespace foldcore::data::rc
