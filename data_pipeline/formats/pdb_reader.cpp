#include "data_pipeline/formats/pdb_reader.h"

#include <cctype>
#include <charconv>
#include <memory>

#include "core/error.h"
#include "data_pipeline/formats/cif_tokenizer.h"

namespace foldcore::data {
namespace {

// Columns [first, last] (1-based, inclusive) of a line, "" when the line is shorter.
std::string_view cols(const std::string& line, size_t first, size_t last) {
  if (line.size() < first) return {};
  return std::string_view(line).substr(first - 1, std::min(last, line.size()) - (first - 1));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

class PdbParser {
 public:
  PdbParser(LineReader src, std::string name, const ReadOptions& opt)
      : src_(std::move(src)), name_(std::move(name)), opt_(opt) {}

  Structure run() {
    std::string line;
    while (src_.next(line)) {
      ++line_no_;
      const std::string_view rec = trim(cols(line, 1, 6));
      if (rec == "ATOM" || rec == "HETATM") {
        atom_record(line, rec == "HETATM");
      } else if (rec == "MODEL") {
        const std::string_view n = trim(cols(line, 7, 80));
        current_model_ = n.empty() ? 1 : to_int(n, "MODEL serial");
        in_model_ = true;
      } else if (rec == "ENDMDL") {
        in_model_ = false;
        if (taken_model_ != 0 && taken_model_ == current_model_) done_ = true;
      } else if (rec == "HEADER") {
        s_.id = std::string(trim(cols(line, 63, 66)));
      } else if (rec == "EXPDTA") {
        const std::string_view m = trim(cols(line, 11, 80));
        if (!m.empty()) s_.metadata.methods.emplace_back(m);
      } else if (rec == "REMARK" && trim(cols(line, 7, 10)) == "2") {
        const std::string_view body = cols(line, 11, 80);
        const size_t k = body.find("RESOLUTION.");
        if (k != std::string_view::npos) {
          std::string_view v = trim(body.substr(k + 11));
          v = v.substr(0, v.find(' '));
          double r;
          const auto res = std::from_chars(v.data(), v.data() + v.size(), r);
          if (res.ec == std::errc() && !v.empty()) s_.metadata.resolution = r;  // "NOT APPLICABLE" stays NaN
        }
      }
    }
    if (s_.chains.empty()) {
      if (opt_.model_num != 0) FC_THROW(name_, ":", line_no_, ": no ATOM/HETATM records in model ", opt_.model_num);
      FC_THROW(name_, ":", line_no_, ": no ATOM/HETATM records (not a PDB file?)");
    }
    s_.model_num = taken_model_ == 0 ? 1 : taken_model_;
    return std::move(s_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const { FC_THROW(name_, ":", line_no_, ": ", msg); }

  int to_int(std::string_view v, const char* what) const {
    v = trim(v);
    if (!v.empty() && v.front() == '+') v.remove_prefix(1);
    int out = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), out);
    if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size())
      fail(std::string(what) + " '" + std::string(v) + "' is not an integer");
    return out;
  }
  double to_double(std::string_view v, const char* what) const {
    v = trim(v);
    if (!v.empty() && v.front() == '+') v.remove_prefix(1);
    double out = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), out);
    if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size())
      fail(std::string(what) + " '" + std::string(v) + "' is not a number");
    return out;
  }

  void atom_record(const std::string& line, bool het) {
    if (done_) return;
    const int model = in_model_ ? current_model_ : 1;
    if (opt_.model_num != 0) {
      if (model != opt_.model_num) return;
    } else if (taken_model_ != 0 && model != taken_model_) {
      return;
    }
    if (line.size() < 54)
      fail("coordinate record has " + std::to_string(line.size()) + " columns; x, y, z need columns 31-54");
    taken_model_ = model;
    Atom a;
    a.x = to_double(cols(line, 31, 38), "x coordinate");
    a.y = to_double(cols(line, 39, 46), "y coordinate");
    a.z = to_double(cols(line, 47, 54), "z coordinate");
    const std::string_view occ = trim(cols(line, 55, 60)), b = trim(cols(line, 61, 66));
    a.occupancy = occ.empty() ? 1.0f : static_cast<float>(to_double(occ, "occupancy"));
    a.b_factor = b.empty() ? 0.0f : static_cast<float>(to_double(b, "temperature factor"));
    const std::string_view serial = trim(cols(line, 7, 11));
    // Serials past 99999 are written in hexadecimal or '*****' by some programs: not an error.
    if (!serial.empty()) {
      int v = 0;
      std::from_chars(serial.data(), serial.data() + serial.size(), v);
      a.serial = v;
    }
    const std::string padded_name(cols(line, 13, 16));
    a.name = std::string(trim(padded_name));
    if (a.name.empty()) fail("atom record without an atom name (columns 13-16)");
    const std::string_view alt = cols(line, 17, 17);
    a.alt_loc = alt.empty() ? ' ' : alt[0];
    a.element = std::string(trim(cols(line, 77, 78)));
    if (a.element.empty()) a.element = element_from_atom_name(padded_name);
    for (char& c : a.element) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const std::string_view charge = trim(cols(line, 79, 80));
    if (charge.size() == 2 && std::isdigit(static_cast<unsigned char>(charge[0])) && (charge[1] == '+' || charge[1] == '-'))
      a.charge = (charge[0] - '0') * (charge[1] == '-' ? -1 : 1);
    if (!opt_.keep_hydrogens && (a.element == "H" || a.element == "D")) return;

    const std::string res_name(trim(cols(line, 18, 20)));
    if (!opt_.keep_water && (res_name == "HOH" || res_name == "WAT" || res_name == "DOD")) return;
    const std::string chain_id(cols(line, 22, 22));
    const int res_seq = to_int(cols(line, 23, 26), "residue number (columns 23-26)");
    const std::string_view ins = cols(line, 27, 27);
    const char ins_code = ins.empty() ? ' ' : ins[0];

    if (!chain_ || chain_->auth_id != chain_id) {
      chain_ = nullptr;
      for (Chain& c : s_.chains)
        if (c.auth_id == chain_id) chain_ = &c;
      if (!chain_) {
        s_.chains.emplace_back();
        chain_ = &s_.chains.back();
        chain_->auth_id = chain_->label_id = chain_id;
      }
    }
    Residue* res = chain_->residues.empty() ? nullptr : &chain_->residues.back();
    if (!res || res->auth_seq_num != res_seq || res->ins_code != ins_code || res->name != res_name) {
      chain_->residues.emplace_back();
      res = &chain_->residues.back();
      res->name = res_name;
      res->auth_seq_num = res_seq;
      res->ins_code = ins_code;
      res->hetero = het;
    }
    add_atom(*res, std::move(a), opt_.alt_loc);
  }

  LineReader src_;
  std::string name_;
  ReadOptions opt_;
  Structure s_;
  Chain* chain_ = nullptr;  // s_.chains only grows by emplace_back: re-found after each growth
  int line_no_ = 0;
  int current_model_ = 1;
  int taken_model_ = 0;  // model whose atoms are kept (0: none yet)
  bool in_model_ = false;
  bool done_ = false;
};

}  // namespace

Structure read_pdb(const std::string& path, const ReadOptions& options) {
  return PdbParser(LineReader(path), path, options).run();
}

Structure parse_pdb(std::string text, const std::string& name, const ReadOptions& options) {
  return PdbParser(LineReader::from_string(std::move(text), name), name, options).run();
}

}  // namespace foldcore::data
