#include "data_pipeline/structure/structure.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string_view>

#include "core/error.h"
#include "data_pipeline/structure/residue_constants.h"

namespace foldcore::data {
namespace {

struct CodePair {
  std::string_view three;
  char one;
};

// The 20 standard amino acids and UNK. Kept private: residue_constants owns the full tables.
constexpr CodePair kAminoAcids[] = {
    {"ALA", 'A'}, {"ARG", 'R'}, {"ASN", 'N'}, {"ASP", 'D'}, {"CYS", 'C'}, {"GLN", 'Q'}, {"GLU", 'E'},
    {"GLY", 'G'}, {"HIS", 'H'}, {"ILE", 'I'}, {"LEU", 'L'}, {"LYS", 'K'}, {"MET", 'M'}, {"PHE", 'F'},
    {"PRO", 'P'}, {"SER", 'S'}, {"THR", 'T'}, {"TRP", 'W'}, {"TYR", 'Y'}, {"VAL", 'V'}, {"UNK", 'X'},
};

// Common modified amino acids → parent's one-letter code (their _chem_comp parent).
constexpr CodePair kModifiedAminoAcids[] = {
    {"MSE", 'M'}, {"SEP", 'S'}, {"TPO", 'T'}, {"PTR", 'Y'}, {"HYP", 'P'}, {"MLY", 'K'},
    {"M3L", 'K'}, {"ALY", 'K'}, {"KCX", 'K'}, {"LLP", 'K'}, {"CSO", 'C'}, {"CSD", 'C'},
    {"CME", 'C'}, {"OCS", 'C'}, {"CSS", 'C'}, {"NLE", 'L'}, {"MLZ", 'K'}, {"SAC", 'S'},
};

constexpr CodePair kNucleotides[] = {
    {"DA", 'A'}, {"DC", 'C'}, {"DG", 'G'}, {"DT", 'T'}, {"DU", 'U'},
    {"A", 'A'},  {"C", 'C'},  {"G", 'G'},  {"U", 'U'},  {"T", 'T'},
};

template <size_t N> char lookup(const CodePair (&table)[N], std::string_view key) {
  for (const CodePair& p : table)
    if (p.three == key) return p.one;
  return 0;
}

bool is_nucleic(PolymerType t) {
  return t == PolymerType::kDna || t == PolymerType::kRna || t == PolymerType::kDnaRna;
}

}  // namespace

const Atom* Residue::find_atom(const std::string& atom_name) const {
  for (const Atom& a : atoms)
    if (a.name == atom_name) return &a;
  return nullptr;
}

const Entity* Structure::find_entity(const std::string& entity_id) const {
  for (const Entity& e : entities)
    if (e.id == entity_id) return &e;
  return nullptr;
}

const Chain* Structure::find_chain_by_label(const std::string& label_id) const {
  for (const Chain& c : chains)
    if (c.label_id == label_id) return &c;
  return nullptr;
}

const Chain* Structure::find_chain_by_auth(const std::string& auth_id) const {
  for (const Chain& c : chains)
    if (c.auth_id == auth_id) return &c;
  return nullptr;
}

PolymerType Structure::polymer_type(const Chain& chain) const {
  if (const Entity* e = find_entity(chain.entity_id)) return e->polymer_type;
  // No entity (PDB input): a chain is a peptide if any ATOM residue is a standard amino acid,
  // nucleic if any is a nucleotide (deoxy names "DA".. → DNA).
  for (const Residue& r : chain.residues) {
    if (r.hetero) continue;
    if (lookup(kAminoAcids, r.name)) return PolymerType::kPeptideL;
    if (lookup(kNucleotides, r.name)) return r.name.size() == 2 ? PolymerType::kDna : PolymerType::kRna;
  }
  return PolymerType::kNone;
}

std::string Structure::parent_comp_id(const std::string& label_asym_id, int label_seq_id) const {
  for (const ModifiedResidue& m : modified_residues)
    if (m.label_seq_id == label_seq_id && m.label_asym_id == label_asym_id) return m.parent_comp_id;
  return "";
}

size_t Structure::num_atoms() const {
  size_t n = 0;
  for (const Chain& c : chains)
    for (const Residue& r : c.residues) n += r.atoms.size();
  return n;
}

size_t Structure::num_residues() const {
  size_t n = 0;
  for (const Chain& c : chains) n += c.residues.size();
  return n;
}

char one_letter_code(const std::string& comp_id, PolymerType type) {
  if (is_nucleic(type)) {
    const char c = lookup(kNucleotides, comp_id);
    return c ? c : 'N';
  }
  if (const char c = lookup(kAminoAcids, comp_id)) return c;
  if (const char c = lookup(kModifiedAminoAcids, comp_id)) return c;
  return 'X';
}

std::string chain_sequence(const Structure& s, const Chain& chain, SequenceSource source) {
  const PolymerType type = s.polymer_type(chain);
  // Parent from the file's modification table first (it knows e.g. 5IU → DU), then built-ins.
  auto code = [&](const std::string& comp, int seq_index) {
    const std::string parent = seq_index > 0 ? s.parent_comp_id(chain.label_id, seq_index) : "";
    if (!parent.empty()) {
      const char c = one_letter_code(parent, type);
      if (c != 'X' && c != 'N') return c;
    }
    return one_letter_code(comp, type);
  };
  const Entity* entity = s.find_entity(chain.entity_id);
  std::string out;
  if (source == SequenceSource::kSeqres && entity && !entity->sequence_three.empty()) {
    out.reserve(entity->sequence_three.size());
    for (size_t p = 0; p < entity->sequence_three.size(); ++p) {
      // An observed residue may differ from the first-listed heterogeneous component: use it.
      const int r = p < chain.seqres_to_residue.size() ? chain.seqres_to_residue[p] : -1;
      const std::string& comp = r >= 0 ? chain.residues[static_cast<size_t>(r)].name : entity->sequence_three[p];
      out.push_back(code(comp, static_cast<int>(p) + 1));
    }
    return out;
  }
  out.reserve(chain.residues.size());
  for (const Residue& r : chain.residues) out.push_back(code(r.name, r.seq_index));
  return out;
}

void seqres_atom37(const Chain& chain, std::vector<float>& positions, std::vector<float>& mask) {
  const size_t n = chain.seqres_to_residue.size();
  positions.assign(n * rc::kAtomTypeNum * 3, 0.0f);
  mask.assign(n * rc::kAtomTypeNum, 0.0f);
  const int sd = rc::atom_order("SD");
  for (size_t p = 0; p < n; ++p) {
    const int r = chain.seqres_to_residue[p];
    if (r < 0) continue;
    const Residue& res = chain.residues[static_cast<size_t>(r)];
    for (const Atom& atom : res.atoms) {
      int idx = rc::atom_order(atom.name);
      if (idx < 0 && atom.name == "SE" && res.name == "MSE") idx = sd;  // selenium in the sulphur slot
      if (idx < 0) continue;
      float* xyz = &positions[(p * rc::kAtomTypeNum + static_cast<size_t>(idx)) * 3];
      xyz[0] = static_cast<float>(atom.x);
      xyz[1] = static_cast<float>(atom.y);
      xyz[2] = static_cast<float>(atom.z);
      mask[p * rc::kAtomTypeNum + static_cast<size_t>(idx)] = 1.0f;
    }
  }
}

std::vector<int> missing_seqres_positions(const Chain& chain) {
  std::vector<int> out;
  for (size_t p = 0; p < chain.seqres_to_residue.size(); ++p)
    if (chain.seqres_to_residue[p] < 0) out.push_back(static_cast<int>(p));
  return out;
}

void set_per_residue_b_factors(Structure& s, std::span<const float> values) {
  FC_CHECK(values.size() == s.num_residues(), "set_per_residue_b_factors: ", values.size(),
           " values for ", s.num_residues(), " residues");
  size_t k = 0;
  for (Chain& c : s.chains)
    for (Residue& r : c.residues) {
      for (Atom& a : r.atoms) a.b_factor = values[k];
      ++k;
    }
}

void add_atom(Residue& residue, Atom atom, AltLocPolicy policy) {
  for (Atom& a : residue.atoms)
    if (a.name == atom.name) {
      if (policy == AltLocPolicy::kHighestOccupancy && atom.occupancy > a.occupancy) a = std::move(atom);
      return;
    }
  residue.atoms.push_back(std::move(atom));
}

void write_text_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) FC_THROW(path, ": cannot create temporary file ", tmp);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      FC_THROW(path, ": write failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    FC_THROW(path, ": cannot rename temporary file into place (", why, ")");
  }
}

std::string element_from_atom_name(const std::string& padded_name_4) {
  // PDB atom names are left-aligned in columns 13-16 when the element symbol has two letters
  // ("FE  ", "CL1 "), and start in column 14 for one-letter elements (" CA ", " N  ").
  // Names of hydrogens with 4 characters ("HG21" in column 13) are H.
  std::string n = padded_name_4;
  n.resize(4, ' ');
  auto up = [](char c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(c))); };
  if (n[0] == ' ' || std::isdigit(static_cast<unsigned char>(n[0]))) {
    const char c = n[1];
    return std::isalpha(static_cast<unsigned char>(c)) ? std::string(1, up(c)) : std::string();
  }
  if (n[0] == 'H' && std::isalpha(static_cast<unsigned char>(n[1])) && n[3] != ' ') return "H";
  std::string e(1, up(n[0]));
  if (std::isalpha(static_cast<unsigned char>(n[1]))) e.push_back(up(n[1]));
  return e;
}

}  // namespace foldcore::data
