#include "data_pipeline/formats/mmcif_parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <unordered_map>

#include "core/error.h"

namespace foldcore::data {
namespace {

// The categories the parser reads; everything else is syntax-checked and dropped.
constexpr std::string_view kCategories[] = {
    "entry",   "entity", "entity_poly",          "entity_poly_seq", "struct_asym", "pdbx_struct_mod_residue",
    "refine",  "reflns", "em_3d_reconstruction", "pdbx_audit_revision_history", "pdbx_database_status",
    "exptl",   "atom_site",
};

bool wanted_category(std::string_view c) {
  return std::find(std::begin(kCategories), std::end(kCategories), c) != std::end(kCategories);
}

[[noreturn]] void fail_at(const CifBlock& b, int line, const std::string& msg) {
  FC_THROW(b.source, ":", line, ": ", msg);
}

// Field accessor: value of column `col` in `row`, or "" when the column is absent or null.
const std::string& field(const CifTable& t, size_t row, int col) {
  static const std::string kEmpty;
  if (col < 0 || t.is_null(row, col)) return kEmpty;
  return t.at(row, col);
}

bool parse_double(const std::string& s, double& out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  const auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e && b != e;
}

bool parse_int(const std::string& s, int& out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  const auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e && b != e;
}

double number(const CifBlock& b, const CifTable& t, size_t row, int col, double fallback) {
  if (col < 0 || t.is_null(row, col)) return fallback;
  double v;
  if (!parse_double(t.at(row, col), v))
    fail_at(b, t.line_of(row, col),
            "_" + t.category + "." + t.columns[static_cast<size_t>(col)] + " value '" + t.at(row, col) + "' is not a number");
  return v;
}

int integer(const CifBlock& b, const CifTable& t, size_t row, int col, int fallback) {
  if (col < 0 || t.is_null(row, col)) return fallback;
  int v;
  if (!parse_int(t.at(row, col), v))
    fail_at(b, t.line_of(row, col),
            "_" + t.category + "." + t.columns[static_cast<size_t>(col)] + " value '" + t.at(row, col) + "' is not an integer");
  return v;
}

EntityType entity_type(const std::string& s) {
  if (s == "polymer") return EntityType::kPolymer;
  if (s == "non-polymer") return EntityType::kNonPolymer;
  if (s == "water") return EntityType::kWater;
  if (s == "branched") return EntityType::kBranched;
  return EntityType::kOther;
}

PolymerType polymer_type(const std::string& s) {
  if (s == "polypeptide(L)") return PolymerType::kPeptideL;
  if (s == "polypeptide(D)") return PolymerType::kPeptideD;
  if (s == "polydeoxyribonucleotide") return PolymerType::kDna;
  if (s == "polyribonucleotide") return PolymerType::kRna;
  if (s == "polydeoxyribonucleotide/polyribonucleotide hybrid") return PolymerType::kDnaRna;
  return PolymerType::kOther;
}

void read_metadata(const CifBlock& b, Structure& s) {
  if (const CifTable* t = b.find("entry"); t && t->num_rows()) s.id = field(*t, 0, t->column("id"));
  // Resolution fallbacks in AlphaFold's order; a non-numeric value is skipped, not an error.
  const std::pair<const char*, const char*> res_keys[] = {
      {"refine", "ls_d_res_high"}, {"em_3d_reconstruction", "resolution"}, {"reflns", "d_resolution_high"}};
  for (const auto& [cat, item] : res_keys) {
    const CifTable* t = b.find(cat);
    if (!t || !t->num_rows()) continue;
    double v;
    if (parse_double(field(*t, 0, t->column(item)), v)) {
      s.metadata.resolution = v;
      break;
    }
  }
  if (const CifTable* t = b.find("pdbx_audit_revision_history")) {
    const int c = t->column("revision_date");
    for (size_t r = 0; r < t->num_rows(); ++r) {
      const std::string& d = field(*t, r, c);
      if (!d.empty() && (s.metadata.release_date.empty() || d < s.metadata.release_date)) s.metadata.release_date = d;
    }
  }
  if (const CifTable* t = b.find("pdbx_database_status"); t && t->num_rows())
    s.metadata.deposition_date = field(*t, 0, t->column("recvd_initial_deposition_date"));
  if (const CifTable* t = b.find("exptl")) {
    const int c = t->column("method");
    for (size_t r = 0; r < t->num_rows(); ++r)
      if (!field(*t, r, c).empty()) s.metadata.methods.push_back(field(*t, r, c));
  }
}

void read_entities(const CifBlock& b, Structure& s) {
  if (const CifTable* t = b.find("entity")) {
    const int id = t->column("id"), type = t->column("type");
    for (size_t r = 0; r < t->num_rows(); ++r) {
      Entity e;
      e.id = field(*t, r, id);
      e.type = entity_type(field(*t, r, type));
      s.entities.push_back(std::move(e));
    }
  }
  auto entity = [&](const std::string& id) -> Entity& {
    for (Entity& e : s.entities)
      if (e.id == id) return e;
    s.entities.push_back(Entity{});
    s.entities.back().id = id;
    s.entities.back().type = EntityType::kPolymer;
    return s.entities.back();
  };
  if (const CifTable* t = b.find("entity_poly")) {
    const int id = t->column("entity_id"), type = t->column("type"), can = t->column("pdbx_seq_one_letter_code_can");
    for (size_t r = 0; r < t->num_rows(); ++r) {
      Entity& e = entity(field(*t, r, id));
      e.type = EntityType::kPolymer;
      e.polymer_type = polymer_type(field(*t, r, type));
      for (char c : field(*t, r, can))
        if (!std::isspace(static_cast<unsigned char>(c))) e.sequence_can.push_back(c);
    }
  }
  if (const CifTable* t = b.find("entity_poly_seq")) {
    const int id = t->column("entity_id"), num = t->column("num"), mon = t->column("mon_id");
    if (id < 0 || num < 0 || mon < 0)
      fail_at(b, t->lines.empty() ? 0 : t->lines[0], "_entity_poly_seq needs entity_id, num and mon_id");
    for (size_t r = 0; r < t->num_rows(); ++r) {
      Entity& e = entity(field(*t, r, id));
      if (e.polymer_type == PolymerType::kNone) e.polymer_type = PolymerType::kOther;
      const int n = integer(b, *t, r, num, 0);
      const size_t have = e.sequence_three.size();
      // Positions are 1..n in order; a repeated num is microheterogeneity: keep the first.
      if (n == static_cast<int>(have)) continue;
      if (n != static_cast<int>(have) + 1)
        fail_at(b, t->line_of(r, num), "_entity_poly_seq.num " + std::to_string(n) + " of entity " + e.id +
                                           " out of order (expected " + std::to_string(have + 1) + ")");
      e.sequence_three.push_back(field(*t, r, mon));
    }
  }
}

struct AtomColumns {
  int group, id, type_symbol, atom, alt, comp, asym, entity, seq, ins, x, y, z, occ, b, charge, auth_seq,
      auth_asym, model;
  explicit AtomColumns(const CifTable& t) {
    group = t.column("group_pdb");
    id = t.column("id");
    type_symbol = t.column("type_symbol");
    atom = t.column("label_atom_id");
    if (atom < 0) atom = t.column("auth_atom_id");
    alt = t.column("label_alt_id");
    comp = t.column("label_comp_id");
    if (comp < 0) comp = t.column("auth_comp_id");
    asym = t.column("label_asym_id");
    entity = t.column("label_entity_id");
    seq = t.column("label_seq_id");
    ins = t.column("pdbx_pdb_ins_code");
    x = t.column("cartn_x");
    y = t.column("cartn_y");
    z = t.column("cartn_z");
    occ = t.column("occupancy");
    b = t.column("b_iso_or_equiv");
    charge = t.column("pdbx_formal_charge");
    auth_seq = t.column("auth_seq_id");
    auth_asym = t.column("auth_asym_id");
    model = t.column("pdbx_pdb_model_num");
    if (asym < 0) asym = auth_asym;
    if (auth_asym < 0) auth_asym = asym;
  }
};

bool is_water_name(const std::string& n) { return n == "HOH" || n == "WAT" || n == "DOD"; }

void read_atoms(const CifBlock& b, const ReadOptions& opt, Structure& s) {
  const CifTable* t = b.find("atom_site");
  if (!t || t->num_rows() == 0) fail_at(b, 1, "no _atom_site records (no atoms)");
  const AtomColumns c(*t);
  const int first_line = t->lines[0];
  auto need = [&](int col, const char* name) {
    if (col < 0) fail_at(b, first_line, std::string("_atom_site has no ") + name + " column");
  };
  need(c.x, "Cartn_x");
  need(c.y, "Cartn_y");
  need(c.z, "Cartn_z");
  need(c.atom, "label_atom_id");
  need(c.comp, "label_comp_id");
  need(c.asym, "label_asym_id");

  // Chains in _struct_asym order, created lazily when their first atom is met.
  std::vector<std::pair<std::string, std::string>> asym_order;  // (label id, entity id)
  if (const CifTable* a = b.find("struct_asym")) {
    const int id = a->column("id"), ent = a->column("entity_id");
    for (size_t r = 0; r < a->num_rows(); ++r) {
      asym_order.emplace_back(field(*a, r, id), field(*a, r, ent));
      for (Entity& e : s.entities)
        if (e.id == field(*a, r, ent)) e.chain_ids.push_back(field(*a, r, id));
    }
  }
  std::unordered_map<std::string, size_t> chain_index;
  std::vector<Chain> chains;
  size_t last_chain = SIZE_MAX;

  const int model = opt.model_num != 0 ? opt.model_num : integer(b, *t, 0, c.model, 1);
  s.model_num = model;
  bool any = false;
  for (size_t r = 0; r < t->num_rows(); ++r) {
    if (c.model >= 0 && integer(b, *t, r, c.model, 1) != model) continue;
    const std::string& comp = field(*t, r, c.comp);
    const std::string& element = field(*t, r, c.type_symbol);
    if (!opt.keep_hydrogens && (element == "H" || element == "D")) continue;
    if (!opt.keep_water && is_water_name(comp)) continue;
    Atom atom;
    atom.x = number(b, *t, r, c.x, 0);
    atom.y = number(b, *t, r, c.y, 0);
    atom.z = number(b, *t, r, c.z, 0);
    if (c.x >= 0 && (t->is_null(r, c.x) || t->is_null(r, c.y) || t->is_null(r, c.z)))
      fail_at(b, t->line_of(r, c.x), "atom with unknown ('?' or '.') coordinates");
    atom.occupancy = static_cast<float>(number(b, *t, r, c.occ, 1.0));
    atom.b_factor = static_cast<float>(number(b, *t, r, c.b, 0.0));
    atom.charge = integer(b, *t, r, c.charge, 0);
    atom.serial = integer(b, *t, r, c.id, 0);
    atom.name = field(*t, r, c.atom);
    atom.element = element;
    for (char& ch : atom.element) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    const std::string& alt = field(*t, r, c.alt);
    atom.alt_loc = alt.empty() ? ' ' : alt[0];

    // Chain.
    const std::string& label = field(*t, r, c.asym);
    if (last_chain == SIZE_MAX || chains[last_chain].label_id != label) {
      auto it = chain_index.find(label);
      if (it == chain_index.end()) {
        Chain ch;
        ch.label_id = label;
        ch.auth_id = field(*t, r, c.auth_asym);
        ch.entity_id = field(*t, r, c.entity);
        for (const auto& [id, ent] : asym_order)
          if (id == label && ch.entity_id.empty()) ch.entity_id = ent;
        if (const Entity* e = s.find_entity(ch.entity_id); e && e->type == EntityType::kPolymer)
          ch.seqres_to_residue.assign(e->sequence_three.size(), -1);
        it = chain_index.emplace(label, chains.size()).first;
        chains.push_back(std::move(ch));
      }
      last_chain = it->second;
    }
    Chain& chain = chains[last_chain];

    // Residue: polymer residues are found by label_seq_id, others by author number + ins code.
    const int seq = integer(b, *t, r, c.seq, 0);
    const int auth_seq = integer(b, *t, r, c.auth_seq, seq);
    const std::string& ins = field(*t, r, c.ins);
    const char ins_code = ins.empty() ? ' ' : ins[0];
    Residue* res = nullptr;
    if (seq > 0 && static_cast<size_t>(seq) <= chain.seqres_to_residue.size()) {
      int& slot = chain.seqres_to_residue[static_cast<size_t>(seq - 1)];
      if (slot >= 0) {
        res = &chain.residues[static_cast<size_t>(slot)];
        if (res->name != comp) continue;  // microheterogeneity: keep the first component
      } else {
        slot = static_cast<int>(chain.residues.size());
      }
    } else if (seq > 0 && !chain.seqres_to_residue.empty()) {
      fail_at(b, t->line_of(r, c.seq), "label_seq_id " + std::to_string(seq) + " beyond the entity sequence length " +
                                           std::to_string(chain.seqres_to_residue.size()));
    } else if (!chain.residues.empty()) {
      Residue& last = chain.residues.back();
      if (last.seq_index == seq && last.auth_seq_num == auth_seq && last.ins_code == ins_code && last.name == comp)
        res = &last;
    }
    if (!res) {
      chain.residues.emplace_back();
      res = &chain.residues.back();
      res->name = comp;
      res->seq_index = seq;
      res->auth_seq_num = auth_seq;
      res->ins_code = ins_code;
      res->hetero = field(*t, r, c.group) == "HETATM";
    }
    add_atom(*res, std::move(atom), opt.alt_loc);  // alternative locations: one atom per name
    any = true;
  }
  if (!any) fail_at(b, first_line, "no atoms in model " + std::to_string(model));
  // Chains in _struct_asym order (then any not listed there, in file order).
  for (const auto& [id, ent] : asym_order) {
    auto it = chain_index.find(id);
    if (it == chain_index.end() || chains[it->second].label_id.empty()) continue;
    s.chains.push_back(std::move(chains[it->second]));
    chains[it->second].label_id.clear();
  }
  for (Chain& ch : chains)
    if (!ch.label_id.empty() && !s.find_chain_by_label(ch.label_id)) s.chains.push_back(std::move(ch));
}

void read_mod_residues(const CifBlock& b, Structure& s) {
  const CifTable* t = b.find("pdbx_struct_mod_residue");
  if (!t) return;
  const int asym = t->column("label_asym_id"), seq = t->column("label_seq_id"), comp = t->column("label_comp_id"),
            parent = t->column("parent_comp_id");
  for (size_t r = 0; r < t->num_rows(); ++r) {
    ModifiedResidue m;
    m.label_asym_id = field(*t, r, asym);
    m.label_seq_id = integer(b, *t, r, seq, 0);
    m.comp_id = field(*t, r, comp);
    m.parent_comp_id = field(*t, r, parent);
    s.modified_residues.push_back(std::move(m));
  }
}

}  // namespace

Structure structure_from_cif_block(const CifBlock& block, const ReadOptions& options) {
  Structure s;
  read_metadata(block, s);
  read_entities(block, s);
  read_mod_residues(block, s);
  read_atoms(block, options, s);
  return s;
}

Structure read_mmcif(const std::string& path, const ReadOptions& options) {
  CifTokenizer tz = CifTokenizer::open_file(path);
  const CifBlock block = read_cif_block(tz, wanted_category);
  return structure_from_cif_block(block, options);
}

Structure parse_mmcif(std::string text, const std::string& name, const ReadOptions& options) {
  CifTokenizer tz = CifTokenizer::from_string(std::move(text), name);
  const CifBlock block = read_cif_block(tz, wanted_category);
  return structure_from_cif_block(block, options);
}

}  // namespace foldcore::data
