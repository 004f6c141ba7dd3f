// A3M: parse_a3m (with and without a depth limit); an accepted MSA must be valid (rows of the
// query's length, one deletion row per sequence) and convertible to features or cleanly rejected.
#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/formats/msa.h"
#include "fuzz_util.h"

using namespace foldcore::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > foldcore::fuzz::kMaxInputBytes) return 0;
  const std::string text = foldcore::fuzz::as_text(data, size);
  for (size_t max_sequences : {size_t{0}, size_t{2}}) {
    foldcore::fuzz::expect_clean([&] {
      const Msa msa = parse_a3m(text, "fuzz.a3m", max_sequences);
      foldcore::fuzz::expect_valid([&] { msa.validate("fuzz.a3m"); }, "A3M result fails Msa::validate");
      if (max_sequences != 0 && msa.depth() > max_sequences) foldcore::fuzz::property_failed("A3M depth limit");
      const MsaFeatures features = msa_features(msa);
      if (features.msa.size() != msa.depth() * msa.num_columns()) foldcore::fuzz::property_failed("A3M features size");
    });
  }
  return 0;
}
