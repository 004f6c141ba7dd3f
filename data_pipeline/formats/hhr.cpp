#include "data_pipeline/formats/hhr.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "data_pipeline/formats/fasta.h"

namespace foldcore::data {
namespace {

constexpr size_t kNameFieldEnd = 17;  // "Q " / "T " + 15-character name + ' '

struct BlockLine {
  int64_t start = 0;  // 1-based first residue
  int64_t end = 0;
  std::string_view sequence;
};

bool parse_int(std::string_view s, int64_t& v) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool parse_double(std::string_view s, double& v) {
  const std::string tmp(s);  // strtod needs a terminated string; handles "3.8e+02"
  char* end = nullptr;
  v = std::strtod(tmp.c_str(), &end);
  return !tmp.empty() && end == tmp.c_str() + tmp.size();
}

// "<ws> <start> <SEQ> <ws> <end> (<len>)" after the name field.
bool parse_block_line(std::string_view line, BlockLine& out) {
  if (line.size() <= kNameFieldEnd) return false;
  std::string_view s = line.substr(kNameFieldEnd);
  size_t i = 0;
  auto skip_ws = [&]() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  };
  auto digits = [&]() {
    const size_t b = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return s.substr(b, i - b);
  };
  skip_ws();
  if (!parse_int(digits(), out.start)) return false;
  if (i >= s.size() || s[i] != ' ') return false;
  ++i;
  const size_t b = i;
  while (i < s.size() && ((s[i] >= 'A' && s[i] <= 'Z') || s[i] == '-')) ++i;
  out.sequence = s.substr(b, i - b);
  skip_ws();
  if (!parse_int(digits(), out.end)) return false;
  if (i + 1 >= s.size() || s[i] != ' ' || s[i + 1] != '(') return false;
  return true;
}

void append_indices(std::string_view seq, int64_t start0, std::vector<int32_t>& out) {
  int64_t counter = start0;
  for (const char c : seq) {
    if (c == '-') {
      out.push_back(-1);
    } else {
      out.push_back(static_cast<int32_t>(counter));
      ++counter;
    }
  }
}

bool is_annotation_line(std::string_view t, char kind) {
  const std::string p = std::string(1, kind) + " ";
  return t.rfind(p + "ss_dssp", 0) == 0 || t.rfind(p + "ss_pred", 0) == 0 || t.rfind(p + "Consensus", 0) == 0;
}

// Parses the "Probab=... Sum_probs=..." summary into `hit`.
void parse_summary(const LineReader& r, std::string_view line, TemplateHit& hit) {
  bool have_prob = false, have_e = false, have_cols = false, have_sum = false;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const size_t b = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const std::string_view tok = line.substr(b, i - b);
    const size_t eq = tok.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = tok.substr(0, eq);
    std::string_view value = tok.substr(eq + 1);
    if (!value.empty() && value.back() == '%') value.remove_suffix(1);
    double v = 0;
    if (key == "Probab" || key == "E-value" || key == "Aligned_cols" || key == "Sum_probs") {
      if (!parse_double(value, v)) r.fail("bad number '" + std::string(value) + "' for " + std::string(key));
    }
    if (key == "Probab") hit.probability = v, have_prob = true;
    if (key == "E-value") hit.e_value = v, have_e = true;
    if (key == "Aligned_cols") {
      // A column count: converting a double outside int's range is undefined, so check first.
      if (!(v >= 0 && v <= std::numeric_limits<int>::max() && v == std::floor(v)))
        r.fail("bad column count '" + std::string(value) + "' for Aligned_cols");
      hit.aligned_cols = static_cast<int>(v), have_cols = true;
    }
    if (key == "Sum_probs") hit.sum_probs = v, have_sum = true;
  }
  if (!(have_prob && have_e && have_cols && have_sum))
    r.fail("hit " + std::to_string(hit.index) +
           ": summary line lacks Probab=, E-value=, Aligned_cols= or Sum_probs=");
}

}  // namespace

std::vector<TemplateHit> read_hhr(LineReader& reader) {
  std::vector<TemplateHit> hits;
  std::string line;
  bool header_seen = false;
  int stage = 0;            // within a hit: 0 expect '>', 1 expect summary, 2 alignment blocks
  int64_t block_len = -1;   // length of the current block's query line; -1 before any
  while (reader.next(line)) {
    if (!header_seen) {
      if (trim(line).empty()) continue;
      if (line.rfind("Query", 0) != 0) reader.fail("not an HHR file: expected a 'Query' line first");
      header_seen = true;
      continue;
    }
    if (line.rfind("No ", 0) == 0) {
      TemplateHit hit;
      std::string_view rest = trim(std::string_view(line).substr(3));
      int64_t n = 0;
      if (!parse_int(rest, n) || n < 0 || n > (int64_t{1} << 30)) reader.fail("bad hit number line '" + line + "'");
      hit.index = static_cast<int>(n);
      hits.push_back(std::move(hit));
      stage = 0;
      block_len = -1;
      continue;
    }
    if (hits.empty()) continue;  // the summary table before the first hit
    TemplateHit& hit = hits.back();
    if (stage == 0) {
      if (line.empty() || line[0] != '>') reader.fail("hit " + std::to_string(hit.index) + ": expected a '>' name line");
      hit.name = line.substr(1);
      stage = 1;
      continue;
    }
    if (stage == 1) {
      parse_summary(reader, line, hit);
      stage = 2;
      continue;
    }
    const bool is_q = line.rfind("Q ", 0) == 0 && !is_annotation_line(line, 'Q');
    const bool is_t = line.rfind("T ", 0) == 0 && !is_annotation_line(line, 'T');
    if (!is_q && !is_t) continue;
    BlockLine b;
    if (!parse_block_line(line, b))
      reader.fail("hit " + std::to_string(hit.index) + ": cannot parse alignment line (expected '" +
                  std::string(1, line[0]) + " <name> <start> <SEQUENCE> <end> (<length>)')");
    if (b.start < 1) reader.fail("alignment start must be >= 1");
    // indices_query/indices_hit are int32: the last residue index (start - 1 + residues - 1) must fit.
    const auto residues = static_cast<int64_t>(b.sequence.size() - std::count(b.sequence.begin(), b.sequence.end(), '-'));
    if (b.start > std::numeric_limits<int32_t>::max() || residues > std::numeric_limits<int32_t>::max() - (b.start - 1))
      reader.fail("hit " + std::to_string(hit.index) + ": residue numbers from " + std::to_string(b.start) +
                  " exceed the int32 index range");
    if (is_q) {
      int64_t gaps = 0;
      for (const char c : b.sequence) gaps += c == '-';
      block_len = b.end - (b.start - 1) + gaps;
      if (block_len != static_cast<int64_t>(b.sequence.size()))
        reader.fail("hit " + std::to_string(hit.index) + ": query block " + std::to_string(b.start) + "-" +
                    std::to_string(b.end) + " with " + std::to_string(gaps) + " gaps does not match its " +
                    std::to_string(b.sequence.size()) + " aligned characters");
      hit.query.append(b.sequence);
      append_indices(b.sequence, b.start - 1, hit.indices_query);
    } else {
      if (block_len != static_cast<int64_t>(b.sequence.size()))
        reader.fail("hit " + std::to_string(hit.index) + ": template block has " + std::to_string(b.sequence.size()) +
                    " aligned characters, the query block " + std::to_string(block_len));
      hit.hit_sequence.append(b.sequence);
      append_indices(b.sequence, b.start - 1, hit.indices_hit);
    }
  }
  if (!header_seen) throw_parse_error(reader.name(), 0, "empty file: no HHR content");
  for (const TemplateHit& h : hits) {
    if (h.query.empty() || h.hit_sequence.size() != h.query.size())
      throw_parse_error(reader.name(), reader.line_number(),
                        "hit " + std::to_string(h.index) + " is incomplete (truncated file?): " +
                            std::to_string(h.query.size()) + " query and " + std::to_string(h.hit_sequence.size()) +
                            " template alignment columns");
  }
  return hits;
}

std::vector<TemplateHit> read_hhr(const std::string& path) {
  LineReader reader(path);
  return read_hhr(reader);
}

std::vector<TemplateHit> parse_hhr(std::string_view text, const std::string& name) {
  LineReader reader = LineReader::from_string(std::string(text), name);
  return read_hhr(reader);
}

}  // namespace foldcore::data
