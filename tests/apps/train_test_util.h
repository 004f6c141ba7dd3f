// Helpers shared by the `foldcore train` tests (tests/apps/test_train*_hdf5.cpp): a feature store
// of the shared mmCIFs, the tiny training preset with edits, and a file's non-empty lines.
#pragma once

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "apps_test_util.h"
#include "test_util.h"

namespace foldcore::apps_test {

// `foldcore preprocess` of every shared mmCIF into dir/store.h5. With `real_2q2k_alignments`,
// 2q2k_A gets its real alignments (OpenFold's folder layout), the other chains a query-only MSA;
// without, every chain has a query-only MSA.
inline fs::path make_train_store(const fs::path& dir, bool real_2q2k_alignments = true) {
  const std::string shared = foldcore::testing::shared_dir() + "/data/";
  fs::create_directories(dir / "aln");
  if (real_2q2k_alignments) {
    fs::create_directories(dir / "aln" / "2q2k_A");
    for (const auto& e : fs::directory_iterator(shared + "2q2k_A/alignments"))
      fs::copy_file(e.path(), dir / "aln" / "2q2k_A" / e.path().filename());
  }
  const fs::path store = dir / "store.h5";
  const RunResult r = run_foldcore("preprocess --mmcif_dir " + shared + "mmcifs --alignment_dir " +
                                   (dir / "aln").string() + " --out " + store.string());
  EXPECT_EQ(r.status, 0) << r.output;
  return store;
}

// configs/train/tiny.yaml written to dir/name with `edits` applied: the line of each key is
// replaced by the given text (an empty text deletes it), and the model path made absolute.
inline fs::path tiny_train_config(const fs::path& dir, const std::string& name,
                                  const std::map<std::string, std::string>& edits) {
  const std::string source = FOLDCORE_SOURCE_DIR;
  std::istringstream in(read_file(source + "/configs/train/tiny.yaml"));
  std::string line, out;
  while (std::getline(in, line)) {
    const std::string key = std::regex_replace(line, std::regex("^\\s*([A-Za-z_]+):.*$"), "$1");
    if (key == "model") line = "model: " + source + "/configs/model/tiny.yaml";
    const auto it = edits.find(key);
    if (it != edits.end()) {
      if (it->second.empty()) continue;
      line = it->second;
    }
    out += line + "\n";
  }
  const fs::path p = dir / name;
  std::ofstream(p) << out;
  return p;
}

// The non-empty lines of a text file.
inline std::vector<std::string> nonempty_lines(const fs::path& p) {
  std::vector<std::string> out;
  std::istringstream in(read_file(p));
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) out.push_back(l);
  return out;
}

}  // namespace foldcore::apps_test
