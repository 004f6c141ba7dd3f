// mmCIF: the CIF tokenizer and the generic block reader over every category, then the mmCIF →
// Structure conversion (parse_mmcif) under the default and an alternative model choice.
#include "data_pipeline/formats/cif_tokenizer.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "fuzz_util.h"

using namespace foldcore::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > foldcore::fuzz::kMaxInputBytes) return 0;
  const std::string text = foldcore::fuzz::as_text(data, size);
  foldcore::fuzz::expect_clean([&] {
    CifTokenizer tz = CifTokenizer::from_string(text, "fuzz.cif");
    const CifBlock block = read_cif_block(tz);
    for (const CifTable& table : block.tables) {
      if (table.columns.empty() || table.values.size() % table.columns.size() != 0 ||
          table.nulls.size() != table.values.size() || table.lines.size() != table.values.size())
        foldcore::fuzz::property_failed("CIF table is not rectangular");
    }
    (void)structure_from_cif_block(block);
  });
  foldcore::fuzz::expect_clean([&] {
    ReadOptions options;
    options.model_num = 2;
    (void)parse_mmcif(text, "fuzz.cif", options);
  });
  return 0;
}
