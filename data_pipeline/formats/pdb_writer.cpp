#include "data_pipeline/formats/pdb_writer.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace foldcore::data {
namespace {

void push_line(std::string& out, std::string line) {
  if (line.size() < 80) line.resize(80, ' ');
  out += line;
  out += '\n';
}

// Atom name in columns 13-16: 4-character names fill them; shorter names start in column 14
// (the element's second column) unless the element symbol has two letters and begins the name.
std::string format_atom_name(const Atom& a, const std::string& element) {
  if (a.name.size() >= 4) return a.name.substr(0, 4);
  std::string n = (element.size() == 2 && a.name.size() >= 2 && a.name.compare(0, 2, element) == 0) ? a.name
                                                                                                    : " " + a.name;
  n.resize(4, ' ');
  return n;
}

// Is the last residue of `c` the end of a polymer (where a TER record belongs)?
int last_polymer_residue(const Structure& s, const Chain& c) {
  if (const Entity* e = s.find_entity(c.entity_id))
    return e->type == EntityType::kPolymer ? static_cast<int>(c.residues.size()) - 1 : -1;
  for (int i = static_cast<int>(c.residues.size()) - 1; i >= 0; --i)
    if (!c.residues[static_cast<size_t>(i)].hetero) return i;
  return -1;
}

}  // namespace

std::string to_pdb(const Structure& s, const PdbWriteOptions& options) {
  std::string out;
  for (const std::string& r : options.remarks) {
    // Wrap at 80 columns: "REMARK " + 73 characters per line.
    for (size_t i = 0; i < r.size() || i == 0; i += 73) push_line(out, "REMARK " + r.substr(i, 73));
  }
  if (!options.parent.empty()) push_line(out, "PARENT " + options.parent);
  push_line(out, "MODEL     1");
  int serial = 1;
  char buf[128];
  for (const Chain& c : s.chains) {
    FC_CHECK(c.auth_id.size() <= 1, "to_pdb: chain id '", c.auth_id,
             "' does not fit the PDB format's single chain-id column (write mmCIF instead)");
    const char chain_id = c.auth_id.empty() ? ' ' : c.auth_id[0];
    const int ter_after = last_polymer_residue(s, c);
    for (size_t ri = 0; ri < c.residues.size(); ++ri) {
      const Residue& r = c.residues[ri];
      FC_CHECK(r.name.size() <= 3, "to_pdb: residue name '", r.name, "' in chain ", c.auth_id, " is longer than 3");
      FC_CHECK(r.auth_seq_num >= -999 && r.auth_seq_num <= 9999, "to_pdb: residue number ", r.auth_seq_num,
               " in chain ", c.auth_id, " does not fit columns 23-26");
      for (const Atom& a : r.atoms) {
        for (double v : {a.x, a.y, a.z})
          FC_CHECK(std::isfinite(v) && v > -999.9995 && v < 9999.9995, "to_pdb: coordinate ", v, " of atom ",
                   a.name, " in residue ", r.name, " ", r.auth_seq_num, " does not fit columns of width 8");
        const std::string element = a.element.empty() ? element_from_atom_name(" " + a.name) : a.element;
        std::string charge;
        if (a.charge != 0) charge = std::to_string(std::abs(a.charge) % 10) + (a.charge > 0 ? "+" : "-");
        std::snprintf(buf, sizeof buf, "%-6s%5d %4s%c%3s %c%4d%c   %8.3f%8.3f%8.3f%6.2f%6.2f          %2s%2s",
                      r.hetero ? "HETATM" : "ATOM", serial % 100000, format_atom_name(a, element).c_str(), a.alt_loc,
                      r.name.c_str(), chain_id, r.auth_seq_num, r.ins_code, a.x, a.y, a.z,
                      static_cast<double>(a.occupancy), static_cast<double>(a.b_factor), element.substr(0, 2).c_str(),
                      charge.c_str());
        push_line(out, buf);
        ++serial;
      }
      if (static_cast<int>(ri) == ter_after) {
        std::snprintf(buf, sizeof buf, "%-6s%5d      %3s %c%4d%c", "TER", serial % 100000, r.name.c_str(), chain_id,
                      r.auth_seq_num, r.ins_code);
        push_line(out, buf);
        ++serial;
      }
    }
  }
  push_line(out, "ENDMDL");
  push_line(out, "END");
  return out;
}

void write_pdb(const std::string& path, const Structure& s, const PdbWriteOptions& options) {
  write_text_file_atomic(path, to_pdb(s, options));
}

}  // namespace foldcore::data
