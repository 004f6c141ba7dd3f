#include "data_pipeline/search/kalign_align.h"

#include <vector>

#include "core/error.h"
#include "data_pipeline/formats/fasta.h"
#include "data_pipeline/search/subprocess.h"

namespace foldcore::data {

std::pair<std::string, std::string> kalign_pairwise(const std::string& a, const std::string& b,
                                                    const std::string& kalign_binary) {
  for (const std::string* s : {&a, &b})
    FC_CHECK(s->size() >= 6, "kalign: sequences must be at least 6 residues long, got ", s->size(), " ('", *s, "')");
  const TempDir dir("foldcore_kalign");
  const std::string in = dir.file("input.fasta"), out = dir.file("output.fasta");
  write_fasta(in, {{"seq0", a}, {"seq1", b}}, 0);
  ProcessOptions options;
  options.install_hint = "install kalign (e.g. apt-get install kalign)";
  options.timeout_s = 600;  // two sequences take milliseconds; a hung binary must not hang us
  run_checked({kalign_binary, "-i", in, "-o", out, "-f", "fasta"}, options);

  FastaOptions fasta;
  fasta.alphabet = Alphabet::kProteinAligned;
  fasta.uppercase = true;
  const std::vector<FastaRecord> records = read_fasta(out, fasta);
  // Rows are matched by name: kalign may reorder its output.
  std::string rows[2];
  bool seen[2] = {false, false};
  for (const FastaRecord& r : records)
    for (int k = 0; k < 2; ++k)
      if (r.description == "seq" + std::to_string(k)) {
        rows[k] = r.sequence;
        seen[k] = true;
      }
  FC_CHECK(seen[0] && seen[1] && rows[0].size() == rows[1].size(), "kalign: output ", out,
           " does not hold the two aligned sequences (", records.size(), " records)");
  return {rows[0], rows[1]};
}

}  // namespace foldcore::data
