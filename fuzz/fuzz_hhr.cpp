// HHR: parse_hhr; every accepted hit must keep its documented invariants (aligned query and hit of
// the same length, one index per column, -1 exactly at the gaps).
#include "data_pipeline/formats/hhr.h"
#include "fuzz_util.h"

using namespace foldcore::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > foldcore::fuzz::kMaxInputBytes) return 0;
  const std::string text = foldcore::fuzz::as_text(data, size);
  foldcore::fuzz::expect_clean([&] {
    for (const TemplateHit& hit : parse_hhr(text, "fuzz.hhr")) {
      const size_t n = hit.query.size();
      if (hit.hit_sequence.size() != n || hit.indices_query.size() != n || hit.indices_hit.size() != n)
        foldcore::fuzz::property_failed("HHR hit lengths differ");
      for (size_t i = 0; i < n; ++i) {
        if ((hit.query[i] == '-') != (hit.indices_query[i] < 0)) foldcore::fuzz::property_failed("HHR query index/gap");
        if ((hit.hit_sequence[i] == '-') != (hit.indices_hit[i] < 0)) foldcore::fuzz::property_failed("HHR hit index/gap");
      }
    }
  });
  return 0;
}
