#include "data_pipeline/formats/fasta.h"

#include <cctype>

namespace foldcore::data {
namespace {

bool is_protein_letter(char c) {
  const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  // Every letter but none: the 20 standard residues plus X (unknown), B (D/N), Z (E/Q),
  // U (selenocysteine), O (pyrrolysine) and J (I/L) cover A..Z.
  return u >= 'A' && u <= 'Z';
}

std::string describe_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (std::isprint(u)) return std::string("'") + c + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "byte 0x%02x", u);
  return buf;
}

const char* alphabet_name(Alphabet a) {
  switch (a) {
    case Alphabet::kAny: return "printable";
    case Alphabet::kProtein: return "protein";
    case Alphabet::kProteinAligned: return "aligned protein";
    case Alphabet::kNucleic: return "nucleic acid";
  }
  return "?";
}

}  // namespace

std::string_view trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool in_alphabet(char c, Alphabet alphabet) {
  switch (alphabet) {
    case Alphabet::kAny: return c > ' ' && c < 127;
    case Alphabet::kProtein: return is_protein_letter(c);
    case Alphabet::kProteinAligned: return is_protein_letter(c) || c == '-' || c == '.';
    case Alphabet::kNucleic: {
      const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      return u == 'A' || u == 'C' || u == 'G' || u == 'T' || u == 'U' || u == 'N';
    }
  }
  return false;
}

std::vector<FastaRecord> read_fasta(LineReader& reader, const FastaOptions& options) {
  std::vector<FastaRecord> records;
  std::string line;
  int64_t header_line = 0;
  auto finish_record = [&]() {
    if (records.empty()) return;
    if (!options.allow_empty_sequence && records.back().sequence.empty())
      throw_parse_error(reader.name(), header_line,
                        "record '" + records.back().description + "' has an empty sequence");
  };
  while (reader.next(line)) {
    const std::string_view t = trim(line);
    if (t.empty()) continue;
    if (t.front() == '>') {
      finish_record();
      records.push_back({std::string(trim(t.substr(1))), {}});
      header_line = reader.line_number();
      continue;
    }
    if (records.empty()) {
      if (t.front() == ';' || t.front() == '#') continue;  // comments before the first record
      reader.fail("sequence data before the first '>' header");
    }
    std::string& seq = records.back().sequence;
    for (size_t i = 0; i < t.size(); ++i) {
      const char c = t[i];
      if (!in_alphabet(c, options.alphabet))
        reader.fail("invalid " + std::string(alphabet_name(options.alphabet)) + " character " + describe_char(c) +
                    " at column " + std::to_string(i + 1 + static_cast<size_t>(t.data() - line.data())));
      seq.push_back(options.uppercase ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
    }
  }
  finish_record();
  if (records.empty() && !options.allow_no_records)
    throw_parse_error(reader.name(), 0, reader.line_number() == 0 ? "empty file: no FASTA records"
                                                                  : "no FASTA records (no '>' header line)");
  return records;
}

std::vector<FastaRecord> read_fasta(const std::string& path, const FastaOptions& options) {
  LineReader reader(path);
  return read_fasta(reader, options);
}

std::vector<FastaRecord> parse_fasta(std::string_view text, const std::string& name, const FastaOptions& options) {
  LineReader reader = LineReader::from_string(std::string(text), name);
  return read_fasta(reader, options);
}

std::string format_fasta(const std::vector<FastaRecord>& records, int line_width) {
  std::string out;
  for (const FastaRecord& r : records) {
    FC_CHECK(r.description.find('\n') == std::string::npos, "format_fasta: description contains a newline");
    // A wrapped line starting with '>' would read back as a header, and whitespace is trimmed or
    // splits lines: only printable non-space characters other than '>' can be written.
    for (const char c : r.sequence)
      FC_CHECK(in_alphabet(c, Alphabet::kAny) && c != '>', "format_fasta: record '", r.description,
               "' has the character ", describe_char(c), " in its sequence, which FASTA cannot hold");
    out += '>';
    out += r.description;
    out += '\n';
    const size_t w = line_width > 0 ? static_cast<size_t>(line_width) : r.sequence.size();
    for (size_t i = 0; i < r.sequence.size(); i += std::max<size_t>(w, 1)) {
      out.append(r.sequence, i, w);
      out += '\n';
    }
  }
  return out;
}

void write_fasta(const std::string& path, const std::vector<FastaRecord>& records, int line_width) {
  write_file_atomic(path, format_fasta(records, line_width));
}

}  // namespace foldcore::data
