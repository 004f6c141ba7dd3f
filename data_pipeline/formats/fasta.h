// FASTA reading and writing. A record is a '>' header line (its text after '>' is the
// description, as in AlphaFold's parsers.parse_fasta) followed by sequence lines that are joined.
// Blank lines are skipped; lines starting with ';' or '#' before any record are comments.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "data_pipeline/formats/text_reader.h"

namespace foldcore::data {

enum class Alphabet {
  kAny,             // any printable non-space ASCII
  kProtein,         // amino-acid letters: 20 standard + X B Z U O J (case-insensitive)
  kProteinAligned,  // protein letters in either case (A3M insertions) plus gaps '-' and '.'
  kNucleic,         // A C G T U N (case-insensitive)
};

struct FastaRecord {
  std::string description;  // header text after '>', surrounding whitespace trimmed
  std::string sequence;     // joined sequence lines
};

struct FastaOptions {
  Alphabet alphabet = Alphabet::kProtein;
  bool uppercase = false;           // convert sequences to upper case after validation
  bool allow_empty_sequence = false;
  bool allow_no_records = false;    // an empty input gives {} instead of an error
};

// True when `c` belongs to `alphabet`.
bool in_alphabet(char c, Alphabet alphabet);

std::vector<FastaRecord> read_fasta(const std::string& path, const FastaOptions& options = {});
std::vector<FastaRecord> parse_fasta(std::string_view text, const std::string& name = "<string>",
                                     const FastaOptions& options = {});
// Reads records from an open reader (shared with the A3M parser).
std::vector<FastaRecord> read_fasta(LineReader& reader, const FastaOptions& options);

// FASTA text with sequences wrapped at `line_width` characters (0: one line per sequence).
std::string format_fasta(const std::vector<FastaRecord>& records, int line_width = 80);
void write_fasta(const std::string& path, const std::vector<FastaRecord>& records, int line_width = 80);

// ASCII letter test without the locale lookup of std::isalpha (hot in the MSA parsers).
inline bool is_ascii_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

// Trims ASCII whitespace from both ends.
std::string_view trim(std::string_view s);

}  // namespace foldcore::data
