// FASTA: parse_fasta under every alphabet; an accepted input must survive a format/parse round
// trip unchanged (the writer and the reader agree on what a record is).
#include "data_pipeline/formats/fasta.h"
#include "fuzz_util.h"

using namespace foldcore::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > foldcore::fuzz::kMaxInputBytes) return 0;
  const std::string text = foldcore::fuzz::as_text(data, size);
  for (Alphabet alphabet : {Alphabet::kAny, Alphabet::kProtein, Alphabet::kProteinAligned, Alphabet::kNucleic}) {
    foldcore::fuzz::expect_clean([&] {
      FastaOptions options;
      options.alphabet = alphabet;
      options.allow_empty_sequence = alphabet == Alphabet::kAny;
      options.allow_no_records = alphabet == Alphabet::kAny;
      const std::vector<FastaRecord> records = parse_fasta(text, "fuzz.fasta", options);
      for (int width : {0, 7}) {
        const std::vector<FastaRecord> again = parse_fasta(format_fasta(records, width), "again.fasta", options);
        if (again.size() != records.size()) foldcore::fuzz::property_failed("FASTA round trip: record count");
        for (size_t i = 0; i < records.size(); ++i) {
          if (again[i].description != records[i].description || again[i].sequence != records[i].sequence)
            foldcore::fuzz::property_failed("FASTA round trip: record differs");
        }
      }
    });
  }
  return 0;
}
