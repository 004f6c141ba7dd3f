// What a client submits to POST /api/jobs, checked before any job exists: FASTA text (one
// record, or a bare sequence) or JSON {"name", "sequence", "a3m"?}. Every problem is an
// InputError with the HTTP status that says what went wrong.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace foldcore::apps::serve {

struct InputError : std::runtime_error {
  InputError(int status, const std::string& what) : std::runtime_error(what), status(status) {}
  int status;  // HTTP status (400: bad sequence or malformed body)
};

struct JobInput {
  std::string name;      // letters, digits, '_', '-', '.', ' ' (at most 100); "query" when none given
  std::string sequence;  // upper-case amino-acid letters
  std::string a3m;       // "" or an alignment whose first sequence is `sequence`
};

// `content_type` decides JSON (application/json) vs FASTA text (anything else); a body starting
// with '{' is JSON either way. Throws InputError: malformed JSON, a missing or non-string field,
// more than one FASTA record, an empty sequence, a letter outside the 20 amino acids + X/B/Z/U/O/J,
// more than `max_length` residues, an A3M whose query row is not the sequence.
JobInput parse_job_input(const std::string& body, const std::string& content_type, int64_t max_length);

// FASTA text of one record, 60 letters a line.
std::string to_fasta(const std::string& name, const std::string& sequence);

}  // namespace foldcore::apps::serve
