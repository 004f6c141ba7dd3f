#include "data_pipeline/formats/a3m.h"

#include <cctype>

#include "data_pipeline/formats/fasta.h"

namespace foldcore::data {

void a3m_row_to_aligned(std::string_view row, std::string& aligned, std::vector<int32_t>& deletions) {
  int32_t pending = 0;  // insertions seen since the last aligned column
  for (const char c : row) {
    if (c >= 'a' && c <= 'z') {
      ++pending;
    } else if (c == '.') {
      continue;
    } else {
      aligned.push_back(c);
      deletions.push_back(pending);
      pending = 0;
    }
  }
  // Insertions after the last aligned column have no column to be counted into (AlphaFold drops
  // them the same way).
}

Msa read_a3m(LineReader& reader, size_t max_sequences) {
  Msa msa;
  std::string line, row;
  int64_t header_line = 0;
  bool have_record = false;
  auto finish = [&]() {
    if (!have_record) return;
    std::string aligned;
    std::vector<int32_t> del;
    aligned.reserve(row.size());
    del.reserve(row.size());
    a3m_row_to_aligned(row, aligned, del);
    if (aligned.empty())
      throw_parse_error(reader.name(), header_line, "A3M record '" + msa.descriptions.back() + "' has no aligned columns");
    if (!msa.sequences.empty() && aligned.size() != msa.sequences[0].size())
      throw_parse_error(reader.name(), header_line,
                        "A3M record '" + msa.descriptions.back() + "' has " + std::to_string(aligned.size()) +
                            " aligned columns (upper case and '-'), the query has " +
                            std::to_string(msa.sequences[0].size()));
    msa.sequences.push_back(std::move(aligned));
    msa.deletion_matrix.push_back(std::move(del));
    row.clear();
    have_record = false;
  };
  while (reader.next(line)) {
    const std::string_view t = trim(line);
    if (t.empty() || t.front() == '#') continue;
    if (t.front() == '>') {
      finish();
      if (max_sequences > 0 && msa.sequences.size() >= max_sequences) return msa;
      msa.descriptions.emplace_back(trim(t.substr(1)));
      header_line = reader.line_number();
      have_record = true;
      continue;
    }
    if (!have_record) reader.fail("A3M sequence data before the first '>' header");
    for (size_t i = 0; i < t.size(); ++i) {
      const char c = t[i];
      if (!is_ascii_letter(c) && c != '-' && c != '.')
        reader.fail(std::string("invalid A3M character '") + (std::isprint(static_cast<unsigned char>(c)) ? c : '?') +
                    "' at column " + std::to_string(i + 1 + static_cast<size_t>(t.data() - line.data())));
    }
    row.append(t);
  }
  finish();
  if (msa.sequences.empty())
    throw_parse_error(reader.name(), 0, reader.line_number() == 0 ? "empty file: no A3M records" : "no A3M records");
  return msa;
}

Msa read_a3m(const std::string& path, size_t max_sequences) {
  LineReader reader(path);
  return read_a3m(reader, max_sequences);
}

Msa parse_a3m(std::string_view text, const std::string& name, size_t max_sequences) {
  LineReader reader = LineReader::from_string(std::string(text), name);
  return read_a3m(reader, max_sequences);
}

}  // namespace foldcore::data
