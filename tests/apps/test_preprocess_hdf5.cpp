// End-to-end tests of `foldcore preprocess` (the program runs as a subprocess): the shared mmCIFs
// with 2q2k_A's alignments in OpenFold's layout, then a truncated mmCIF and a corrupt A3M that
// must be reported and skipped, inputs from which nothing can be written, and an unwritable output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "data_pipeline/training/feature_store.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace foldcore;
using namespace foldcore::data;

namespace {

std::string foldcore_binary() { return (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "foldcore").string(); }

struct RunResult {
  int rc = -1;
  std::string output;
};

RunResult preprocess(const std::string& args, const fs::path& dir) {
  const fs::path log = dir / "run.log";
  const std::string cmd = foldcore_binary() + " preprocess " + args + " > " + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fc_preprocess_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string shared(const std::string& f) { return foldcore::testing::shared_dir() + "/data/" + f; }

// <dir>/aln/2q2k_A/ with the shared alignments (OpenFold's per-chain folder name).
fs::path alignment_dir(const fs::path& dir) {
  const fs::path aln = dir / "aln";
  fs::create_directories(aln / "2q2k_A");
  for (const auto& e : fs::directory_iterator(shared("2q2k_A/alignments"))) fs::copy_file(e.path(), aln / "2q2k_A" / e.path().filename());
  return aln;
}

TEST(Preprocess, SharedMmcifsWithAlignments) {
  const fs::path dir = temp_dir("shared");
  const fs::path aln = alignment_dir(dir);
  const std::string out = (dir / "store.h5").string();
  const RunResult r = preprocess("--mmcif_dir " + shared("mmcifs") + " --alignment_dir " + aln.string() + " --out " + out +
                                     " --threads 2",
                                 dir);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("preprocess: wrote 10 chains"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("skipped 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1psm_A: no alignment folder"), std::string::npos) << r.output;
  FeatureStoreReader s(out);
  ASSERT_EQ(s.size(), 10);
  // Index order = file order, then chain order: deterministic for any thread count.
  EXPECT_EQ(s.entries()[0].name, "1psm_A");
  const TrainingChain a = s.read("2q2k_A");
  // The stored chain is what the in-process conversion gives (MSA: merged uniref90 + bfd + mgnify).
  const TrainingChain want = training_chain_from_mmcif(read_mmcif(shared("mmcifs/2q2k.cif")), "A", (aln / "2q2k_A").string());
  EXPECT_GT(a.msa.depth, 1);
  EXPECT_EQ(a.msa.msa, want.msa.msa);
  EXPECT_EQ(a.msa.deletion_matrix, want.msa.deletion_matrix);
  EXPECT_EQ(a.all_atom_positions, want.all_atom_positions);
  EXPECT_EQ(a.release_date.size(), 10u);
  EXPECT_GT(a.resolution, 0.0);
  EXPECT_EQ(s.read("2q2k_B").msa.depth, 1);  // no alignment folder: query only
  // Same store content with one thread.
  const std::string out1 = (dir / "store1.h5").string();
  ASSERT_EQ(preprocess("--mmcif_dir " + shared("mmcifs") + " --alignment_dir " + aln.string() + " --out " + out1 + " --threads 1", dir).rc, 0);
  FeatureStoreReader s1(out1);
  ASSERT_EQ(s1.size(), s.size());
  for (int64_t i = 0; i < s.size(); ++i) EXPECT_EQ(s1.entries()[static_cast<size_t>(i)].name, s.entries()[static_cast<size_t>(i)].name);
  // Filters.
  const std::string out2 = (dir / "store2.h5").string();
  ASSERT_EQ(preprocess("--mmcif_dir " + shared("mmcifs") + " --alignment_dir " + aln.string() + " --out " + out2 +
                           " --min_length 90 --max_resolution 2.5",
                       dir)
                .rc,
            0);
  FeatureStoreReader s2(out2);
  EXPECT_GT(s2.size(), 0);
  EXPECT_LT(s2.size(), 10);
  for (const auto& e : s2.entries()) {
    EXPECT_GE(e.num_res, 90);
    EXPECT_GT(e.resolution, 0.0);
    EXPECT_LE(e.resolution, 2.5);
  }
}

TEST(Preprocess, TruncatedMmcifAndCorruptA3mAreReportedAndSkipped) {
  const fs::path dir = temp_dir("corrupt");
  const fs::path cifs = dir / "cifs";
  fs::create_directories(cifs);
  fs::copy_file(shared("mmcifs/2q2k.cif"), cifs / "2q2k.cif");
  // A gzip-compressed mmCIF is read like a plain one.
  ASSERT_EQ(std::system(("gzip -c " + shared("mmcifs/3zee.cif") + " > " + (cifs / "3zee.cif.gz").string()).c_str()), 0);
  // A truncated copy of 4zey: cut in the middle of the atom records.
  {
    std::ifstream in(shared("mmcifs/4zey.cif"));
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    std::ofstream(cifs / "4zey.cif") << text.substr(0, text.size() * 2 / 3) << "ATOM 1 C";
  }
  const fs::path aln = alignment_dir(dir);
  std::ofstream(aln / "2q2k_A" / "bfd_uniclust_hits.a3m") << ">query\nMKV\n>hit\n@@##!!\n";
  const std::string out = (dir / "store.h5").string();
  const RunResult r = preprocess("--mmcif_dir " + cifs.string() + " --alignment_dir " + aln.string() + " --out " + out, dir);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("4zey.cif"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bfd_uniclust_hits.a3m"), std::string::npos) << r.output;
  FeatureStoreReader s(out);
  EXPECT_FALSE(s.find("2q2k_A").has_value());
  EXPECT_TRUE(s.find("2q2k_B").has_value());
  EXPECT_TRUE(s.find("3zee_A").has_value());
  for (const auto& e : s.entries()) EXPECT_NE(e.name.substr(0, 4), "4zey");
}

TEST(Preprocess, NothingWritableOrUnwritableOutputFails) {
  const fs::path dir = temp_dir("fail");
  const fs::path cifs = dir / "cifs";
  fs::create_directories(cifs);
  std::ofstream(cifs / "bad.cif") << "data_bad\nloop_\n_atom_site.id\n";
  const std::string out = (dir / "store.h5").string();
  RunResult r = preprocess("--mmcif_dir " + cifs.string() + " --alignment_dir " + dir.string() + " --out " + out, dir);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("no chain could be written"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bad.cif"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  r = preprocess("--mmcif_dir " + shared("mmcifs") + " --alignment_dir " + dir.string() + " --out " + (dir / "no/such/dir/s.h5").string(), dir);
  EXPECT_NE(r.rc, 0);
  // Refused when the command line is read, before any chain is processed (apps/commands.h: file_to_write).
  EXPECT_NE(r.output.find("--out: the folder '" + (dir / "no/such/dir").string() + "'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("preprocess: wrote"), std::string::npos) << r.output;
  r = preprocess("--mmcif_dir " + (dir / "absent").string() + " --alignment_dir " + dir.string() + " --out " + out, dir);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("not a folder"), std::string::npos) << r.output;
}

}  // namespace
