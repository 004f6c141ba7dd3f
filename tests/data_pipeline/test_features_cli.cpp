// `foldcore features` end to end: the program (built next to the tests folder as build/foldcore)
// is run on query73 and its .npz compared with DeepMind's af2_raw_features.npz; bad inputs exit
// non-zero with the file named and leave no output file. Skipped when the program is not built.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data_pipeline/formats/npy.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

namespace fs = std::filesystem;

std::string shared(const std::string& f) { return testing::shared_dir() + "/data/" + f; }

// build/tests/<this test> → build/foldcore.
std::string foldcore_binary() {
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  const fs::path bin = exe.parent_path().parent_path() / "foldcore";
  return fs::exists(bin) ? bin.string() : "";
}

struct RunResult {
  int status = -1;
  std::string output;
};

RunResult run(const std::string& args, const fs::path& dir) {
  const std::string log = (dir / "log.txt").string();
  RunResult r;
  r.status = std::system((foldcore_binary() + " features " + args + " > " + log + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  return r;
}

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    path = fs::temp_directory_path() / ("foldcore_features_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

TEST(FeaturesCli, Query73ReproducesAlphaFoldFeatures) {
  if (foldcore_binary().empty()) GTEST_SKIP() << "foldcore program not built";
  ScratchDir dir;
  const std::string out = (dir.path / "features.npz").string();
  const RunResult r = run("--fasta " + shared("query73/query.fasta") + " --msa_dir " + shared("query73/alignments") +
                        " --template_hits " + shared("query73/alignments/pdb70_hits.hhr") + " --mmcif_dir " +
                        shared("mmcifs") + " --max_template_date 2021-12-20 --output " + out,
                    dir.path);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1hf9_B"), std::string::npos) << r.output;  // the missing mmCIF is reported
  EXPECT_NE(r.output.find("missing mmCIF"), std::string::npos) << r.output;

  NpzReader ours(out), ref(shared("query73/af2_raw_features.npz"));
  EXPECT_EQ(ours.names(), ref.names());
  for (const char* name : {"aatype", "between_segment_residues", "domain_name", "residue_index", "seq_length",
                           "sequence", "deletion_matrix_int", "msa", "num_alignments"}) {
    const NpyArray a = ours.read(name), b = ref.read(name);
    EXPECT_EQ(a.dtype, b.dtype) << name;
    EXPECT_EQ(a.shape, b.shape) << name;
    EXPECT_TRUE(a.data == b.data) << name;
  }
  // Templates: the reference's, without 1hf9_B (its mmCIF is not in the shared data).
  const auto ref_names = ref.read("template_domain_names").strings();
  const auto our_names = ours.read("template_domain_names").strings();
  ASSERT_EQ(our_names.size(), 7u);
  size_t skip = 0;
  const NpyArray rp = ref.read("template_all_atom_positions"), op = ours.read("template_all_atom_positions");
  const NpyArray rm = ref.read("template_all_atom_masks"), om = ours.read("template_all_atom_masks");
  const size_t per_pos = 73 * 37 * 3, per_mask = 73 * 37;
  for (size_t i = 0; i < our_names.size(); ++i) {
    if (ref_names[i + skip] == "1hf9_B") ++skip;
    const size_t k = i + skip;
    ASSERT_EQ(our_names[i], ref_names[k]);
    double max_diff = 0;
    for (size_t j = 0; j < per_pos; ++j)
      max_diff = std::max(max_diff, double(std::fabs(op.as<float>()[i * per_pos + j] - rp.as<float>()[k * per_pos + j])));
    EXPECT_LE(max_diff, 1e-3) << our_names[i];
    for (size_t j = 0; j < per_mask; ++j)
      ASSERT_EQ(om.as<float>()[i * per_mask + j], rm.as<float>()[k * per_mask + j]) << our_names[i];
  }
}

TEST(FeaturesCli, BadInputsFailWithoutOutput) {
  if (foldcore_binary().empty()) GTEST_SKIP() << "foldcore program not built";
  ScratchDir dir;
  const std::string out = (dir.path / "features.npz").string();
  const std::string empty = (dir.path / "empty.fasta").string();
  std::ofstream(empty).close();
  RunResult r = run("--fasta " + empty + " --msa_dir " + shared("query73/alignments") + " --output " + out, dir.path);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("empty.fasta"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));

  r = run("--fasta " + shared("query73/query.fasta") + " --msa_dir " + dir.path.string() + " --output " + out, dir.path);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("uniref90_hits.sto"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
  for (const auto& entry : fs::directory_iterator(dir.path))  // no temporary left behind either
    EXPECT_EQ(entry.path().string().find("features.npz"), std::string::npos) << entry.path();
}

}  // namespace
}  // namespace foldcore::data
