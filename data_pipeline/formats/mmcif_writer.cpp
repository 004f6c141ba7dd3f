#include "data_pipeline/formats/mmcif_writer.h"

#include <cctype>
#include <cstdarg>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace foldcore::data {
namespace {

struct OutResidue {
  const Residue* residue;
  int seq;  // label_seq_id, 0 = '.'
};
struct OutChain {
  std::string label, auth, entity;
  std::vector<OutResidue> residues;
};
struct OutEntity {
  std::string id;
  EntityType type = EntityType::kOther;
  PolymerType polymer_type = PolymerType::kNone;
  std::vector<std::string> seq;
  std::string can;
};
struct Plan {
  std::vector<OutEntity> entities;
  std::vector<OutChain> chains;
};

// A, B, ..., Z, AA, AB, ... (spreadsheet-style), the PDB's label asym id sequence.
std::string asym_id(size_t i) {
  std::string s;
  for (size_t n = i + 1; n > 0; n = (n - 1) / 26) s.insert(s.begin(), static_cast<char>('A' + (n - 1) % 26));
  return s;
}

std::string canonical_code(const std::vector<std::string>& seq, PolymerType t) {
  std::string out;
  for (const std::string& m : seq) out.push_back(one_letter_code(m, t));
  return out;
}

// printf-style append that never truncates (names can make a row arbitrarily long).
[[gnu::format(printf, 2, 3)]] void appendf(std::string& out, const char* fmt, ...) {
  char buf[256];
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n >= 0 && static_cast<size_t>(n) < sizeof buf) {
    out.append(buf, static_cast<size_t>(n));
  } else if (n > 0) {
    std::string big(static_cast<size_t>(n) + 1, '\0');
    std::vsnprintf(big.data(), big.size(), fmt, ap2);
    big.resize(static_cast<size_t>(n));
    out += big;
  }
  va_end(ap2);
}

bool is_water(const std::string& n) { return n == "HOH" || n == "WAT" || n == "DOD"; }

Plan plan_from_entities(const Structure& s) {
  Plan p;
  for (const Entity& e : s.entities) {
    OutEntity o{e.id, e.type, e.polymer_type, e.sequence_three, e.sequence_can};
    if (o.type == EntityType::kPolymer && o.can.empty()) o.can = canonical_code(o.seq, o.polymer_type);
    p.entities.push_back(std::move(o));
  }
  for (const Chain& c : s.chains) {
    FC_CHECK(s.find_entity(c.entity_id), "to_mmcif: chain ", c.label_id, " has unknown entity '", c.entity_id, "'");
    OutChain o{c.label_id, c.auth_id, c.entity_id, {}};
    for (const Residue& r : c.residues) o.residues.push_back({&r, r.seq_index});
    p.chains.push_back(std::move(o));
  }
  return p;
}

// Entities and label asyms for a structure read from PDB (see the header).
Plan plan_synthesised(const Structure& s) {
  Plan p;
  std::vector<OutChain> polymers, ligands, waters;
  auto entity_for = [&](EntityType type, PolymerType pt, const std::vector<std::string>& seq) {
    for (const OutEntity& e : p.entities)
      if (e.type == type && e.seq == seq) return e.id;
    OutEntity e{std::to_string(p.entities.size() + 1), type, pt, seq, ""};
    if (type == EntityType::kPolymer) e.can = canonical_code(seq, pt);
    p.entities.push_back(std::move(e));
    return p.entities.back().id;
  };
  // Pass 1: polymers (entities numbered first), remembering where each chain's tail starts.
  std::vector<size_t> tail_start(s.chains.size(), 0);
  for (size_t ci = 0; ci < s.chains.size(); ++ci) {
    const Chain& c = s.chains[ci];
    size_t end = 0;
    for (size_t i = 0; i < c.residues.size(); ++i)
      if (!c.residues[i].hetero) end = i + 1;
    tail_start[ci] = end;
    if (end == 0) continue;
    OutChain o{"", c.auth_id, "", {}};
    std::vector<std::string> seq;
    for (size_t i = 0; i < end; ++i) {
      o.residues.push_back({&c.residues[i], static_cast<int>(i) + 1});
      seq.push_back(c.residues[i].name);
    }
    PolymerType pt = s.polymer_type(c);
    if (pt == PolymerType::kNone) pt = PolymerType::kOther;
    o.entity = entity_for(EntityType::kPolymer, pt, seq);
    polymers.push_back(std::move(o));
  }
  for (size_t ci = 0; ci < s.chains.size(); ++ci) {
    const Chain& c = s.chains[ci];
    OutChain water{"", c.auth_id, "", {}};
    for (size_t i = tail_start[ci]; i < c.residues.size(); ++i) {
      const Residue& r = c.residues[i];
      if (is_water(r.name)) {
        water.residues.push_back({&r, 0});
      } else {
        OutChain o{"", c.auth_id, entity_for(EntityType::kNonPolymer, PolymerType::kNone, {r.name}), {{&r, 0}}};
        ligands.push_back(std::move(o));
      }
    }
    if (!water.residues.empty()) {
      water.entity = entity_for(EntityType::kWater, PolymerType::kNone, {"HOH"});
      waters.push_back(std::move(water));
    }
  }
  for (auto* group : {&polymers, &ligands, &waters})
    for (OutChain& o : *group) {
      o.label = asym_id(p.chains.size());
      p.chains.push_back(std::move(o));
    }
  return p;
}

bool needs_quotes(const std::string& v) {
  if (v.empty() || v == "?" || v == ".") return true;
  const char c = v[0];
  if (c == '_' || c == '#' || c == '$' || c == '\'' || c == '"' || c == '[' || c == ']' || c == ';') return true;
  for (char ch : v)
    if (std::isspace(static_cast<unsigned char>(ch))) return true;
  std::string low = v.substr(0, 7);
  for (char& ch : low) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return low.rfind("data_", 0) == 0 || low.rfind("loop_", 0) == 0 || low.rfind("save_", 0) == 0 ||
         low == "global_" || low.rfind("stop_", 0) == 0;
}

// A string value in CIF syntax: bare when possible, else quoted, else a ';' text field.
std::string cif_value(const std::string& v) {
  if (v.find('\n') == std::string::npos) {
    if (!needs_quotes(v)) return v;
    if (v.find('\'') == std::string::npos) return "'" + v + "'";
    if (v.find('"') == std::string::npos) return "\"" + v + "\"";
  }
  return "\n;" + v + "\n;\n";
}

const char* entity_type_name(EntityType t) {
  switch (t) {
    case EntityType::kPolymer: return "polymer";
    case EntityType::kNonPolymer: return "non-polymer";
    case EntityType::kWater: return "water";
    case EntityType::kBranched: return "branched";
    case EntityType::kOther: break;
  }
  return "?";
}

const char* polymer_type_name(PolymerType t) {
  switch (t) {
    case PolymerType::kPeptideL: return "'polypeptide(L)'";
    case PolymerType::kPeptideD: return "'polypeptide(D)'";
    case PolymerType::kDna: return "polydeoxyribonucleotide";
    case PolymerType::kRna: return "polyribonucleotide";
    case PolymerType::kDnaRna: return "'polydeoxyribonucleotide/polyribonucleotide hybrid'";
    case PolymerType::kNone:
    case PolymerType::kOther: break;
  }
  return "other";
}

void loop_header(std::string& out, const char* category, std::initializer_list<const char*> items) {
  out += "#\nloop_\n";
  for (const char* it : items) {
    out += '_';
    out += category;
    out += '.';
    out += it;
    out += '\n';
  }
}

}  // namespace

std::string to_mmcif(const Structure& s, const MmcifWriteOptions& options) {
  const Plan p = s.entities.empty() ? plan_synthesised(s) : plan_from_entities(s);
  const std::string id = s.id.empty() ? "model" : s.id;
  std::string out = "data_" + (needs_quotes(id) ? std::string("model") : id) + "\n";
  out += "#\n_entry.id " + cif_value(id) + "\n";
  const StructureMetadata& m = s.metadata;
  if (!m.methods.empty()) {
    loop_header(out, "exptl", {"entry_id", "method"});
    for (const std::string& meth : m.methods) out += cif_value(id) + " " + cif_value(meth) + "\n";
  }
  if (m.has_resolution()) {
    appendf(out, "#\n_refine.entry_id %s\n_refine.ls_d_res_high %.6g\n", cif_value(id).c_str(),
                  m.resolution);
  }
  if (!m.deposition_date.empty())
    out += "#\n_pdbx_database_status.recvd_initial_deposition_date " + cif_value(m.deposition_date) + "\n";
  if (!m.release_date.empty())
    out += "#\n_pdbx_audit_revision_history.ordinal 1\n_pdbx_audit_revision_history.revision_date " +
           cif_value(m.release_date) + "\n";

  loop_header(out, "entity", {"id", "type"});
  for (const OutEntity& e : p.entities) out += cif_value(e.id) + " " + entity_type_name(e.type) + "\n";
  bool any_polymer = false;
  for (const OutEntity& e : p.entities) any_polymer |= e.type == EntityType::kPolymer;
  if (any_polymer) {
    loop_header(out, "entity_poly", {"entity_id", "type", "pdbx_seq_one_letter_code_can"});
    for (const OutEntity& e : p.entities)
      if (e.type == EntityType::kPolymer)
        out += cif_value(e.id) + " " + polymer_type_name(e.polymer_type) + " " + cif_value(e.can) + "\n";
    loop_header(out, "entity_poly_seq", {"entity_id", "num", "mon_id", "hetero"});
    for (const OutEntity& e : p.entities)
      for (size_t i = 0; i < e.seq.size(); ++i)
        out += cif_value(e.id) + " " + std::to_string(i + 1) + " " + cif_value(e.seq[i]) + " n\n";
  }
  loop_header(out, "struct_asym", {"id", "entity_id"});
  for (const OutChain& c : p.chains) out += cif_value(c.label) + " " + cif_value(c.entity) + "\n";

  if (!s.modified_residues.empty() && !s.entities.empty()) {
    loop_header(out, "pdbx_struct_mod_residue", {"id", "label_asym_id", "label_seq_id", "label_comp_id", "parent_comp_id"});
    int k = 0;
    for (const ModifiedResidue& mr : s.modified_residues)
      appendf(out, "%d %s %d %s %s\n", ++k, cif_value(mr.label_asym_id).c_str(), mr.label_seq_id,
              cif_value(mr.comp_id).c_str(), mr.parent_comp_id.empty() ? "?" : cif_value(mr.parent_comp_id).c_str());
  }
  loop_header(out, "atom_site",
              {"group_PDB", "id", "type_symbol", "label_atom_id", "label_alt_id", "label_comp_id", "label_asym_id",
               "label_entity_id", "label_seq_id", "pdbx_PDB_ins_code", "Cartn_x", "Cartn_y", "Cartn_z", "occupancy",
               "B_iso_or_equiv", "pdbx_formal_charge", "auth_seq_id", "auth_comp_id", "auth_asym_id", "auth_atom_id",
               "pdbx_PDB_model_num"});
  long serial = 1;
  for (const OutChain& c : p.chains) {
    const std::string label = cif_value(c.label), auth = cif_value(c.auth), entity = cif_value(c.entity);
    for (const OutResidue& orr : c.residues) {
      const Residue& r = *orr.residue;
      const std::string comp = cif_value(r.name);
      const std::string seq = orr.seq > 0 ? std::to_string(orr.seq) : ".";
      const std::string ins = r.ins_code == ' ' ? "?" : cif_value(std::string(1, r.ins_code));
      for (const Atom& a : r.atoms) {
        const std::string name = cif_value(a.name);
        const std::string alt = a.alt_loc == ' ' ? "." : cif_value(std::string(1, a.alt_loc));
        const std::string charge = a.charge == 0 ? "?" : std::to_string(a.charge);
        appendf(out, "%s %ld %s %s %s %s %s %s %s %s %.3f %.3f %.3f %.2f %.2f %s %d %s %s %s %d\n",
                      r.hetero ? "HETATM" : "ATOM", serial++, a.element.empty() ? "?" : cif_value(a.element).c_str(),
                      name.c_str(), alt.c_str(), comp.c_str(), label.c_str(), entity.c_str(), seq.c_str(), ins.c_str(),
                      a.x, a.y, a.z, static_cast<double>(a.occupancy), static_cast<double>(a.b_factor), charge.c_str(),
                      r.auth_seq_num, comp.c_str(), auth.c_str(), name.c_str(), s.model_num);
      }
    }
  }

  if (options.plddt_tables) {
    // ModelCIF quality tables as AlphaFold writes them: one local pLDDT per polymer residue.
    std::string local;
    double sum = 0;
    long n = 0;
    for (const OutChain& c : p.chains)
      for (const OutResidue& orr : c.residues) {
        if (orr.seq <= 0 || orr.residue->atoms.empty()) continue;
        const double v = orr.residue->atoms.front().b_factor;
        sum += v;
        ++n;
        appendf(local, "%s %s %d 2 %.2f 1 %ld\n", cif_value(c.label).c_str(),
                      cif_value(orr.residue->name).c_str(), orr.seq, v, n);
      }
    if (n > 0) {
      loop_header(out, "ma_qa_metric", {"id", "mode", "name", "software_group_id", "type"});
      out += "1 global pLDDT 1 pLDDT\n2 local pLDDT 1 pLDDT\n";
      appendf(out, "#\n_ma_qa_metric_global.metric_id 1\n_ma_qa_metric_global.metric_value %.2f\n"
                    "_ma_qa_metric_global.model_id 1\n_ma_qa_metric_global.ordinal_id 1\n", sum / static_cast<double>(n));
      loop_header(out, "ma_qa_metric_local", {"label_asym_id", "label_comp_id", "label_seq_id", "metric_id",
                                              "metric_value", "model_id", "ordinal_id"});
      out += local;
    }
  }
  out += "#\n";
  return out;
}

void write_mmcif(const std::string& path, const Structure& s, const MmcifWriteOptions& options) {
  write_text_file_atomic(path, to_mmcif(s, options));
}

}  // namespace foldcore::data
