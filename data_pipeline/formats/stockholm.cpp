#include "data_pipeline/formats/stockholm.h"

#include <cctype>
#include <unordered_map>

#include "data_pipeline/formats/fasta.h"

namespace foldcore::data {
namespace {

bool is_gap(char c) { return c == '-' || c == '.'; }

// Splits off the first whitespace-delimited token of `s`; `rest` is what follows, trimmed.
std::string_view first_token(std::string_view s, std::string_view& rest) {
  size_t i = 0;
  while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  rest = trim(s.substr(i));
  return s.substr(0, i);
}

}  // namespace

StockholmAlignment read_stockholm_alignment(LineReader& reader, size_t max_sequences) {
  StockholmAlignment sto;
  std::unordered_map<std::string, size_t> index;
  std::unordered_map<std::string, std::string> de;
  std::string line;
  bool header_seen = false;
  bool terminated = false;
  while (reader.next(line)) {
    const std::string_view t = trim(line);
    if (t.empty()) continue;
    if (!header_seen) {
      if (t.rfind("# STOCKHOLM", 0) != 0) reader.fail("not a Stockholm file: expected '# STOCKHOLM 1.0' first");
      header_seen = true;
      continue;
    }
    if (t.rfind("//", 0) == 0) {
      terminated = true;
      break;
    }
    if (t.front() == '#') {
      if (t.rfind("#=GS", 0) == 0) {
        std::string_view rest;
        first_token(t, rest);
        std::string_view after_name;
        const std::string_view name = first_token(rest, after_name);
        std::string_view value;
        const std::string_view feature = first_token(after_name, value);
        if (name.empty() || feature.empty()) reader.fail("malformed #=GS line (expected '#=GS <name> <feature> <text>')");
        if (feature == "DE") de[std::string(name)] = std::string(value);
      }
      continue;  // #=GF, #=GC, #=GR and plain comments
    }
    std::string_view seq;
    const std::string_view name = first_token(t, seq);
    if (seq.empty()) reader.fail("sequence line without aligned text (expected '<name> <sequence>')");
    for (const char c : seq) {
      if (!is_ascii_letter(c) && !is_gap(c))
        reader.fail(std::string("invalid character '") + (std::isprint(static_cast<unsigned char>(c)) ? c : '?') +
                    "' in the aligned sequence of '" + std::string(name) + "'");
    }
    auto it = index.find(std::string(name));
    if (it == index.end()) {
      if (max_sequences > 0 && sto.names.size() >= max_sequences) continue;
      it = index.emplace(std::string(name), sto.names.size()).first;
      sto.names.emplace_back(name);
      sto.rows.emplace_back();
    }
    sto.rows[it->second].append(seq);
  }
  if (!header_seen) throw_parse_error(reader.name(), 0, "empty file: no Stockholm alignment");
  if (!terminated) throw_parse_error(reader.name(), reader.line_number(), "truncated Stockholm file: no '//' terminator");
  if (sto.names.empty()) throw_parse_error(reader.name(), 0, "Stockholm alignment has no sequences");
  const size_t width = sto.rows[0].size();
  for (size_t i = 0; i < sto.names.size(); ++i) {
    if (sto.rows[i].size() != width)
      throw_parse_error(reader.name(), 0,
                        "sequence '" + sto.names[i] + "' has " + std::to_string(sto.rows[i].size()) +
                            " alignment columns, the query '" + sto.names[0] + "' has " + std::to_string(width));
    auto d = de.find(sto.names[i]);
    sto.descriptions.push_back(d == de.end() ? std::string() : d->second);
  }
  return sto;
}

StockholmAlignment read_stockholm_alignment(const std::string& path, size_t max_sequences) {
  LineReader reader(path);
  return read_stockholm_alignment(reader, max_sequences);
}

Msa stockholm_to_msa(const StockholmAlignment& sto) {
  FC_CHECK(!sto.rows.empty(), "stockholm_to_msa: no sequences");
  const std::string& query = sto.rows[0];
  std::vector<size_t> keep;
  for (size_t c = 0; c < query.size(); ++c)
    if (!is_gap(query[c])) keep.push_back(c);
  Msa msa;
  msa.descriptions = sto.names;
  for (const std::string& row : sto.rows) {
    FC_CHECK(row.size() == query.size(), "stockholm_to_msa: row length ", row.size(), " != query length ",
             query.size());
    std::string aligned;
    aligned.reserve(keep.size());
    std::vector<int32_t> del;
    del.reserve(keep.size());
    int32_t pending = 0;
    for (size_t c = 0; c < row.size(); ++c) {
      if (is_gap(query[c])) {
        if (!is_gap(row[c])) ++pending;  // residue in a column the query lacks: an insertion
      } else {
        aligned.push_back(row[c]);
        del.push_back(pending);
        pending = 0;
      }
    }
    msa.sequences.push_back(std::move(aligned));
    msa.deletion_matrix.push_back(std::move(del));
  }
  return msa;
}

Msa read_stockholm(const std::string& path, size_t max_sequences) {
  return stockholm_to_msa(read_stockholm_alignment(path, max_sequences));
}

Msa parse_stockholm(std::string_view text, const std::string& name, size_t max_sequences) {
  LineReader reader = LineReader::from_string(std::string(text), name);
  return stockholm_to_msa(read_stockholm_alignment(reader, max_sequences));
}

std::string stockholm_to_a3m(const StockholmAlignment& sto, bool remove_first_row_gaps) {
  FC_CHECK(!sto.rows.empty(), "stockholm_to_a3m: no sequences");
  const std::string& query = sto.rows[0];
  std::string out;
  for (size_t i = 0; i < sto.rows.size(); ++i) {
    out += '>';
    out += sto.names[i];
    out += ' ';
    out += sto.descriptions[i];
    out += '\n';
    const std::string& row = sto.rows[i];
    for (size_t c = 0; c < row.size(); ++c) {
      const char r = row[c];
      if (r == '.') continue;
      if (!remove_first_row_gaps || !is_gap(query[c])) {
        out += r;
      } else if (r != '-') {
        out += static_cast<char>(std::tolower(static_cast<unsigned char>(r)));
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace foldcore::data
