// Inputs `predict` shares with `serve`: any subset of AlphaFold's alignment files, one
// ColabFold-style A3M (--msa), and the memory estimate that refuses a target that cannot fit
// before anything large is allocated (a 200,000-residue FASTA used to end in std::bad_alloc).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "apps/memory_estimate.h"
#include "apps_test_util.h"
#include "data_pipeline/formats/pdb_reader.h"

namespace fs = std::filesystem;

namespace {

const std::string kQuery73 = "MAAHKGAEHHHKAAEHHEQAAKHHHAAAEHHEKGEHEQAAHHADTAYAHHKHAEEHAAQAAKHDAEHHAPKPH";

using foldcore::apps_test::foldcore_binary;
using foldcore::apps_test::read_file;

std::string source(const std::string& rel) { return std::string(FOLDCORE_SOURCE_DIR) + "/" + rel; }

struct TempDir : foldcore::apps_test::TempDir {
  TempDir() : foldcore::apps_test::TempDir("test_predict_inputs") {}
};

struct PredictRun {
  int rc = -1;
  std::string output;
};

PredictRun predict(const std::string& args, const fs::path& dir) {
  const fs::path log = dir / "run.log";
  const std::string cmd = "OMP_WAIT_POLICY=passive " + foldcore_binary() + " predict " + args +
                          " --random_params 0 --model_config " + source("configs/model/tiny.yaml") +
                          " --num_recycles 0 > " + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(log)};
}

int64_t msa_rows_logged(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex(R"((\d+) residues, (\d+) MSA rows)"))) return -1;
  return std::stoll(m[2]);
}

// Only MGnify's hits in msas/ (before: "missing alignment file uniref90_hits.sto").
TEST(PredictInputs, SubsetOfAlignmentFiles) {
  TempDir tmp;
  const fs::path msas = tmp.path() / "out" / "query" / "msas";
  fs::create_directories(msas);
  fs::copy_file(source("examples/query73/msas/mgnify_hits.sto"), msas / "mgnify_hits.sto");
  const PredictRun r = predict("--fasta_paths " + source("examples/query73/query.fasta") + " --output_dir " +
                            (tmp.path() / "out").string() + " --use_precomputed_msas",
                        tmp.path());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_GT(msa_rows_logged(r.output), 1) << r.output;
  EXPECT_EQ(foldcore::data::read_pdb((tmp.path() / "out" / "query" / "ranked_0.pdb").string()).chains[0].residues.size(),
            kQuery73.size());
}

// One ColabFold-style A3M ("#len card" first line) with --msa, no alignment folder.
TEST(PredictInputs, SingleA3mWithMsaFlag) {
  TempDir tmp;
  const fs::path a3m = tmp.path() / "colabfold.a3m";
  std::ofstream(a3m) << "#73\t1\n" << read_file(source("examples/query73/msas/bfd_uniclust_hits.a3m"));
  const PredictRun r = predict("--fasta_paths " + source("examples/query73/query.fasta") + " --output_dir " +
                            (tmp.path() / "out").string() + " --msa " + a3m.string(),
                        tmp.path());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_GT(msa_rows_logged(r.output), 1) << r.output;
  EXPECT_TRUE(fs::exists(tmp.path() / "out" / "query" / "done"));

  // An A3M of another protein is refused with the file named, and nothing is written.
  const fs::path other = tmp.path() / "other.a3m";
  std::ofstream(other) << ">q\nMKTAYIAKQRQ\n";
  const PredictRun bad = predict("--fasta_paths " + source("examples/query73/query.fasta") + " --output_dir " +
                              (tmp.path() / "out2").string() + " --msa " + other.string(),
                          tmp.path());
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.output.find("other.a3m"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(tmp.path() / "out2" / "query"));
}

// A 200,000-residue FASTA is refused by the estimate in well under a minute, with a message
// naming the input, its length, the estimated bytes and what is available; no output folder
// appears.
TEST(PredictInputs, TooLongSequenceRefusedByMemoryEstimate) {
  TempDir tmp;
  const fs::path fasta = tmp.path() / "huge.fasta";
  {
    std::ofstream out(fasta);
    out << ">huge\n";
    for (int i = 0; i < 200000 / 50; ++i) out << "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSG\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const PredictRun r = predict("--fasta_paths " + fasta.string() + " --output_dir " + (tmp.path() / "out").string(), tmp.path());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.rc, 1) << r.output;
  for (const std::string& piece : {std::string("huge.fasta"), std::string("200000 residues"),
                                   std::string("need an estimated"), std::string(" bytes"), std::string("are available")})
    EXPECT_NE(r.output.find(piece), std::string::npos) << "missing '" << piece << "' in:\n" << r.output;
  EXPECT_EQ(r.output.find("bad_alloc"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 60.0);
  EXPECT_FALSE(fs::exists(tmp.path() / "out" / "huge"));
}

// A device this process cannot use (no machine has 1,024 GPUs; a GPU-less one has none) is refused
// by name before any work: before, a machine with the CUDA libraries and no driver ended in "CUDA
// driver version is insufficient for CUDA runtime version" from the first op, and nothing named
// the flag.
TEST(PredictInputs, UnusableDeviceRefusedFirst) {
  TempDir tmp;
  const fs::path fasta = tmp.path() / "q.fasta";
  std::ofstream(fasta) << ">q\n" << kQuery73 << "\n";
  const PredictRun r = predict("--fasta_paths " + fasta.string() + " --output_dir " + (tmp.path() / "out").string() +
                                   " --device cuda:1023",
                               tmp.path());
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("device 'cuda:1023'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp.path() / "out"));
}

// An output folder that cannot be made (under a file) is refused when the command line is read; it
// used to be found after the prediction, when the first target's folder was made.
TEST(PredictInputs, OutputFolderThatCannotBeMadeRefusedFirst) {
  TempDir tmp;
  const fs::path fasta = tmp.path() / "q.fasta";
  std::ofstream(fasta) << ">q\n" << kQuery73 << "\n";
  const fs::path out = fasta / "out";
  const PredictRun r = predict("--fasta_paths " + fasta.string() + " --output_dir " + out.string(), tmp.path());
  EXPECT_NE(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("--output_dir: '" + out.string() + "' cannot be created: '" + fasta.string() +
                          "' is not a folder"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("mean pLDDT"), std::string::npos) << "the prediction ran:\n" << r.output;
}

// --chunk_size auto: a 73-residue target fits without chunking here, the log says what was
// chosen and the prediction completes; a chunk that is neither a count nor auto is refused.
TEST(PredictInputs, ChunkSizeAuto) {
  TempDir tmp;
  const PredictRun r = predict("--fasta_paths " + source("examples/query73/query.fasta") + " --output_dir " +
                                   (tmp.path() / "out").string() + " --chunk_size auto",
                               tmp.path());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("--chunk_size auto chose 0 (no chunking)"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(tmp.path() / "out" / "query" / "done"));
  const PredictRun bad = predict("--fasta_paths " + source("examples/query73/query.fasta") + " --output_dir " +
                                     (tmp.path() / "out2").string() + " --chunk_size big",
                                 tmp.path());
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.output.find("--chunk_size must be a count >= 0 or auto, got 'big'"), std::string::npos) << bad.output;
  const PredictRun bad_passes = predict("--fasta_paths " + source("examples/query73/query.fasta") + " --output_dir " +
                                            (tmp.path() / "out3").string() + " --template_passes 3",
                                        tmp.path());
  EXPECT_NE(bad_passes.rc, 0);
  EXPECT_NE(bad_passes.output.find("--template_passes must be auto, 1 or 2, got '3'"), std::string::npos)
      << bad_passes.output;
  EXPECT_FALSE(fs::exists(tmp.path() / "out3" / "query"));
}

TEST(MemoryEstimate, GrowsWithLengthAndDepthAndMatchesMaxLength) {
  using namespace foldcore::apps;
  foldcore::af2::Af2Config c;  // model_1 widths: c_z 128, c_m 256
  const int64_t params = 93'000'000;
  const int64_t a = estimate_predict_memory(c, 256, 1, 4, params).total_bytes;
  const int64_t b = estimate_predict_memory(c, 512, 1, 4, params).total_bytes;
  const int64_t deep = estimate_predict_memory(c, 256, 5000, 4, params).total_bytes;
  EXPECT_LT(a, b);
  EXPECT_LT(a, deep);
  // The pair term dominates long sequences: 4x the pair bytes when N doubles (within the other terms).
  EXPECT_GT(estimate_predict_memory(c, 4096, 1, 4, params).pair_bytes,
            3.9 * static_cast<double>(estimate_predict_memory(c, 2048, 1, 4, params).pair_bytes));
  // Chunking lowers the estimate.
  foldcore::af2::Af2Config chunked = c;
  chunked.chunk_size = 16;
  EXPECT_LT(estimate_predict_memory(chunked, 2048, 1, 4, params).total_bytes,
            estimate_predict_memory(c, 2048, 1, 4, params).total_bytes);
  // max_fitting_length is the boundary: it fits, one more does not.
  const foldcore::Device cpu = foldcore::Device::cpu();
  const int64_t limit = device_memory_limit(cpu);
  ASSERT_GT(limit, 0);
  const int64_t n = max_fitting_length(c, 1, 4, params, cpu);
  ASSERT_GT(n, 0);
  EXPECT_LE(estimate_predict_memory(c, n, 1, 4, params).total_bytes, limit);
  EXPECT_GT(estimate_predict_memory(c, n + 1, 1, 4, params).total_bytes, limit);
  EXPECT_THROW(check_fits_in_memory("x.fasta", c, n + 1, 1, 4, params, cpu), std::exception);
  EXPECT_NO_THROW(check_fits_in_memory("x.fasta", c, n, 1, 4, params, cpu));
}

}  // namespace
