#include "apps/serve/job_input.h"

#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace foldcore::apps::serve {

namespace {

// The letters data::Alphabet::kProtein accepts (fasta.h): the 20 standard amino acids and the
// ambiguity / rare codes AlphaFold maps to X.
bool is_amino_acid(char c) { return c >= 'A' && c <= 'Z' && std::string_view("ACDEFGHIKLMNPQRSTVWYXBZUOJ").find(c) != std::string_view::npos; }

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::string clean_name(const std::string& raw) {
  std::string name;
  for (char c : trim(raw)) {
    if (name.size() >= 100) break;
    name += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ' ') ? c : '_';
  }
  return name.empty() ? "query" : name;
}

// Upper-cases, drops whitespace (and a trailing '*' stop), checks letters and length.
std::string clean_sequence(const std::string& raw, int64_t max_length) {
  std::string seq;
  size_t position = 0;
  const size_t last = raw.find_last_not_of(" \t\r\n");
  for (size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    ++position;
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (!is_amino_acid(u)) {
      if (u == '*' && i == last) continue;  // a stop codon mark ends many pasted sequences
      char shown[8];
      std::snprintf(shown, sizeof shown, std::isprint(static_cast<unsigned char>(c)) ? "%c" : "\\x%02x",
                    static_cast<unsigned char>(c));
      throw InputError(400, "sequence: '" + std::string(shown) + "' at position " + std::to_string(position) +
                                " is not an amino-acid letter (allowed: ACDEFGHIKLMNPQRSTVWY and X B Z U O J)");
    }
    seq += u;
  }
  if (seq.empty()) throw InputError(400, "sequence: empty (no amino-acid letters)");
  if (static_cast<int64_t>(seq.size()) > max_length)
    throw InputError(400, "sequence: " + std::to_string(seq.size()) + " residues, more than this server's limit of " +
                              std::to_string(max_length));
  return seq;
}

// The first sequence of an A3M (lines after the first '>' up to the next), '#' lines skipped.
std::string a3m_query(const std::string& a3m) {
  std::istringstream in(a3m);
  std::string line, seq;
  bool in_first = false;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '>') {
      if (in_first) break;
      in_first = true;
      continue;
    }
    if (!in_first) throw InputError(400, "a3m: sequence data before the first '>' header");
    seq += line;
  }
  std::string upper;
  for (char c : seq) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return upper;
}

}  // namespace

JobInput parse_job_input(const std::string& body, const std::string& content_type, int64_t max_length) {
  const std::string text = trim(body);
  if (text.empty()) throw InputError(400, "empty request body: send FASTA text or JSON {\"name\", \"sequence\"}");
  JobInput in;
  if (content_type.find("json") != std::string::npos || text[0] == '{') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(400, std::string("malformed JSON: ") + e.what());
    }
    if (!j.is_object()) throw InputError(400, "JSON body must be an object {\"name\", \"sequence\", \"a3m\"?}");
    for (const auto& [key, value] : j.items()) {
      if (key != "name" && key != "sequence" && key != "a3m")
        throw InputError(400, "JSON: unknown field '" + key + "' (expected name, sequence, a3m)");
      if (!value.is_string()) throw InputError(400, "JSON: field '" + key + "' must be a string");
    }
    if (!j.contains("sequence")) throw InputError(400, "JSON: field 'sequence' is missing");
    in.name = clean_name(j.value("name", ""));
    in.sequence = clean_sequence(j["sequence"].get<std::string>(), max_length);
    in.a3m = j.value("a3m", "");
  } else {
    std::istringstream lines(text);
    std::string line, header, seq;
    int records = 0;
    while (std::getline(lines, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty() && line[0] == '>') {
        if (++records > 1) throw InputError(400, "FASTA: more than one record; submit one chain per job");
        header = line.substr(1);
        continue;
      }
      if (!line.empty() && line[0] == ';') continue;  // FASTA comment
      seq += line + "\n";
    }
    // The name is the header's first word, as AlphaFold's FASTA parsing takes the description.
    in.name = clean_name(header.substr(0, header.find_first_of(" \t")));
    in.sequence = clean_sequence(seq, max_length);
  }
  if (!trim(in.a3m).empty()) {
    const std::string q = a3m_query(in.a3m);
    if (q != in.sequence)
      throw InputError(400, "a3m: the first sequence (" + std::to_string(q.size()) +
                                " columns) is not the submitted sequence (" + std::to_string(in.sequence.size()) +
                                " residues)");
  } else {
    in.a3m.clear();
  }
  return in;
}

std::string to_fasta(const std::string& name, const std::string& sequence) {
  std::string out = ">" + name + "\n";
  for (size_t i = 0; i < sequence.size(); i += 60) out += sequence.substr(i, 60) + "\n";
  return out;
}

}  // namespace foldcore::apps::serve
