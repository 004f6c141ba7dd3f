// Stockholm: the alignment reader (with and without a depth limit), the AlphaFold conversion to an
// Msa (which must then be valid) and the conversion to A3M (which the A3M parser must accept).
#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/formats/stockholm.h"
#include "fuzz_util.h"

using namespace foldcore::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > foldcore::fuzz::kMaxInputBytes) return 0;
  const std::string text = foldcore::fuzz::as_text(data, size);
  for (size_t max_sequences : {size_t{0}, size_t{3}}) {
    foldcore::fuzz::expect_clean([&] {
      LineReader reader = LineReader::from_string(text, "fuzz.sto");
      const StockholmAlignment sto = read_stockholm_alignment(reader, max_sequences);
      if (max_sequences != 0 && sto.names.size() > max_sequences) foldcore::fuzz::property_failed("Stockholm depth limit");
      const Msa msa = stockholm_to_msa(sto);
      foldcore::fuzz::expect_valid([&] { msa.validate("fuzz.sto"); }, "Stockholm result fails Msa::validate");
      for (bool remove_gaps : {true, false}) {
        const std::string a3m = stockholm_to_a3m(sto, remove_gaps);
        // The A3M may still be rejected for its letters (Stockholm accepts any name/row text).
        foldcore::fuzz::expect_clean([&] { (void)parse_a3m(a3m, "fuzz.sto.a3m"); });
      }
    });
  }
  return 0;
}
