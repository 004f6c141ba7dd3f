// PDB: parse_pdb under the default and an alternative model choice.
#include "data_pipeline/formats/pdb_reader.h"
#include "fuzz_util.h"

using namespace foldcore::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > foldcore::fuzz::kMaxInputBytes) return 0;
  const std::string text = foldcore::fuzz::as_text(data, size);
  for (int model : {0, 2}) {
    foldcore::fuzz::expect_clean([&] {
      ReadOptions options;
      if (model != 0) options.model_num = model;
      (void)parse_pdb(text, "fuzz.pdb", options);
    });
  }
  return 0;
}
