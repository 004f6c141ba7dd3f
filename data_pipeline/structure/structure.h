// Structure: one macromolecular model as read from mmCIF or PDB, and the helpers templates,
// output writers and structure checks need (chain sequences, seqres ↔ observed residue mapping,
// per-residue B-factors).
//
// Layout (mmCIF naming; a PDB file fills the same fields as described at each member):
//   Structure
//     metadata     resolution (Å, NaN if absent), release/deposition dates, experimental methods
//     entities     one per _entity row: type, polymer sequence (_entity_poly_seq), its chains
//     chains       one per label asym id (_struct_asym): author chain id, entity, observed residues
//       residues   in file order; each carries label_seq_id, author number + insertion code, atoms
//     modified_residues   _pdbx_struct_mod_residue: (label asym, label seq) → parent comp id
//
// Only one model is held (the first one by default: NMR ensembles). Alternative locations are
// resolved at read time (see AltLocPolicy), so every residue holds at most one atom per name.
// Missing residues: a polymer chain's seqres is its entity's sequence; Chain::seqres_to_residue
// maps every seqres position to the index of the observed residue, or -1 when the position has
// no atoms (disordered / unmodelled). See missing_seqres_positions().
//
// Typical use:
//   Structure s = read_mmcif("1abc.cif.gz");           // mmcif_parser.h
//   for (const Chain& c : s.chains)
//     if (s.is_protein_chain(c))
//       use(c.auth_id, chain_sequence(s, c, SequenceSource::kSeqres));
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace foldcore::data {

// Which copy of an atom with alternative locations (label_alt_id / PDB column 17) is kept.
enum class AltLocPolicy {
  kHighestOccupancy,  // the one with the largest occupancy, ties → first in the file (Biopython's rule)
  kFirst,             // the first one in the file
};

struct ReadOptions {
  // Model to keep: 0 = the first model in the file (the model number of the first atom record,
  // as AlphaFold's mmcif_parsing does); otherwise that model number (error if absent).
  int model_num = 0;
  AltLocPolicy alt_loc = AltLocPolicy::kHighestOccupancy;
  bool keep_hydrogens = true;
  bool keep_water = true;
};

struct Atom {
  std::string name;      // label_atom_id / PDB columns 13-16, trimmed ("CA", "O5'")
  std::string element;   // type_symbol / PDB columns 77-78, upper case ("C", "FE"); may be empty
  double x = 0, y = 0, z = 0;  // Å
  float occupancy = 1.0f;
  float b_factor = 0.0f;  // B_iso_or_equiv; per-residue pLDDT in predictions
  char alt_loc = ' ';     // ' ' when the atom has no alternative location
  int charge = 0;         // formal charge (0 when absent)
  int serial = 0;         // _atom_site.id / PDB serial, as read (informational; writers renumber)
};

struct Residue {
  std::string name;      // three-letter (or shorter) component id: "ALA", "MSE", "HOH", "DA"
  int seq_index = 0;     // label_seq_id (1-based position in the entity sequence); 0 when absent
                         // (non-polymer residues, and every residue read from a PDB file)
  int auth_seq_num = 0;  // author residue number (auth_seq_id / PDB columns 23-26)
  char ins_code = ' ';   // insertion code (pdbx_PDB_ins_code / PDB column 27), ' ' if none
  bool hetero = false;   // HETATM record
  std::vector<Atom> atoms;

  // The atom called `atom_name`, or nullptr.
  const Atom* find_atom(const std::string& atom_name) const;
};

enum class EntityType { kPolymer, kNonPolymer, kWater, kBranched, kOther };

// From _entity_poly.type.
enum class PolymerType { kNone, kPeptideL, kPeptideD, kDna, kRna, kDnaRna, kOther };

struct Entity {
  std::string id;
  EntityType type = EntityType::kOther;
  PolymerType polymer_type = PolymerType::kNone;
  // _entity_poly_seq.mon_id per position (1-based position p is element p-1). On
  // microheterogeneity (several rows with the same num) the first listed component is kept.
  std::vector<std::string> sequence_three;
  // _entity_poly.pdbx_seq_one_letter_code_can as written in the file, whitespace removed
  // (empty when absent). Informational: chain_sequence() derives sequences from components.
  std::string sequence_can;
  std::vector<std::string> chain_ids;  // label asym ids of this entity's chains
};

struct Chain {
  std::string auth_id;    // author chain id (auth_asym_id / PDB column 22)
  std::string label_id;   // label_asym_id (PDB: same as auth_id)
  std::string entity_id;  // empty when unknown (PDB input)
  std::vector<Residue> residues;  // observed residues of the kept model, in file order
  // For polymer chains with a known entity sequence: size = entity sequence length; element p is
  // the index into `residues` of the residue at label_seq_id p+1, or -1 when it has no atoms.
  // Empty when the chain has no entity sequence (non-polymers, PDB input).
  std::vector<int> seqres_to_residue;
};

struct ModifiedResidue {
  std::string label_asym_id;
  int label_seq_id = 0;
  std::string comp_id;         // the modified component, e.g. "MSE"
  std::string parent_comp_id;  // its standard parent, e.g. "MET"
};

struct StructureMetadata {
  double resolution = std::numeric_limits<double>::quiet_NaN();  // Å; NaN if absent (e.g. NMR)
  std::string release_date;     // earliest _pdbx_audit_revision_history.revision_date, YYYY-MM-DD
  std::string deposition_date;  // _pdbx_database_status.recvd_initial_deposition_date
  std::vector<std::string> methods;  // _exptl.method values as written ("X-RAY DIFFRACTION")
  bool has_resolution() const { return !std::isnan(resolution); }
};

struct Structure {
  std::string id;  // _entry.id / PDB HEADER id code; may be empty
  StructureMetadata metadata;
  std::vector<Entity> entities;
  std::vector<Chain> chains;
  std::vector<ModifiedResidue> modified_residues;
  int model_num = 1;  // number of the model held

  const Entity* find_entity(const std::string& entity_id) const;
  // First chain with this label asym id / author chain id, or nullptr.
  const Chain* find_chain_by_label(const std::string& label_id) const;
  const Chain* find_chain_by_auth(const std::string& auth_id) const;
  // Polymer type of the chain: from its entity, or for PDB input guessed from the residues
  // (standard amino acids → kPeptideL, deoxy/ribo nucleotides → kDna/kRna, else kNone).
  PolymerType polymer_type(const Chain& chain) const;
  bool is_protein_chain(const Chain& chain) const {
    const PolymerType t = polymer_type(chain);
    return t == PolymerType::kPeptideL || t == PolymerType::kPeptideD;
  }
  // Parent component of a modified residue (by label asym id + label_seq_id), or "" if none.
  std::string parent_comp_id(const std::string& label_asym_id, int label_seq_id) const;
  size_t num_atoms() const;
  size_t num_residues() const;  // observed residues over all chains
};

// One-letter code of a component in a polymer of type `type`: standard amino acids (peptides),
// A/C/G/U/T (DA/DC/DG/DT/DU and A/C/G/U nucleotides), a small built-in table of common modified
// amino acids (MSE→M, SEP→S, ...), else 'X' (peptides) / 'N' (nucleic acids). The full residue
// tables live in residue_constants; this map is only for sequence extraction from files.
char one_letter_code(const std::string& comp_id, PolymerType type);

enum class SequenceSource {
  kSeqres,    // the full entity sequence (_entity_poly_seq), missing residues included
  kObserved,  // only residues with atoms in the kept model, in file order
};

// One-letter sequence of a chain. Modified residues are mapped to their parent through the
// file's _pdbx_struct_mod_residue table first, then the built-in table; unknowns become X/N.
// kSeqres on a chain without an entity sequence (PDB input) falls back to kObserved.
std::string chain_sequence(const Structure& s, const Chain& chain,
                           SequenceSource source = SequenceSource::kSeqres);

// AlphaFold's _get_atom_positions for one polymer chain over its seqres: positions [L,37,3] (Å)
// and mask [L,37] of the observed residues' atoms in their atom37 slots (residue_constants),
// L = chain.seqres_to_residue.size(); MSE's selenium goes into the SD slot (AlphaFold treats MSE
// as MET); atoms without an atom37 name (hydrogens, ligand atoms) are skipped; unobserved
// positions stay zero with mask 0.
void seqres_atom37(const Chain& chain, std::vector<float>& positions, std::vector<float>& mask);

// 0-based seqres positions with no atoms (empty for chains without an entity sequence).
std::vector<int> missing_seqres_positions(const Chain& chain);

// Sets every atom's B-factor to a per-residue value (e.g. pLDDT): values[k] is for the k-th
// observed residue over all chains in order. Throws if the count differs from num_residues().
void set_per_residue_b_factors(Structure& s, std::span<const float> values);

// Adds `atom` to `residue`, resolving alternative locations: when an atom of the same name is
// already there, keeps the one `policy` prefers (readers call this for every atom record).
void add_atom(Residue& residue, Atom atom, AltLocPolicy policy);

// Writes `content` to `path` atomically: a temporary file in the same folder, then rename, so a
// failure never leaves a half-written file. Throws foldcore::Error naming the path.
void write_text_file_atomic(const std::string& path, const std::string& content);

// Upper-cased element symbol guessed from an atom name when the element column is empty
// (PDB convention: a name starting in column 13 is a two-letter element, e.g. "FE  ").
std::string element_from_atom_name(const std::string& padded_name_4);

}  // namespace foldcore::data
