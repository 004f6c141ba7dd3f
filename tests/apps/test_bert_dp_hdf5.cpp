// `mpirun -np 2 foldcore bert --dp 2` equals `foldcore bert` with twice the gradient accumulation
// on the same shards: the same samples, per-step loss (the final one in the summary, 1e-5
// relative) and eval accuracy. Dropout off in the config (with dropout the masks of a rank's
// micro-batches differ from one process's). Needs MPI (mpirun) and HDF5 (the shards).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "apps_test_util.h"
#include "dist/bert_dp_corpus.h"

namespace foldcore {
namespace {

namespace fs = std::filesystem;

using apps_test::foldcore_binary;
using CommandRun = apps_test::RunResult;
CommandRun run(const std::string& cmd) { return apps_test::run_shell(cmd); }

// A number field of the summary JSON line ("key": value).
double field(const std::string& out, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("\"" + key + "\": ([-0-9.eE+]+)"))) return std::nan("");
  return std::stod(m[1].str());
}

TEST(BertDataParallelCli, TwoRanksEqualOneProcessWithTwiceTheAccumulation) {
  const testing::BertDpCorpus corpus("cli");
  const fs::path& dir = corpus.dir;
  std::ofstream(dir / "dp.yaml") << "name: tiny-dp\n"
                                    "model: {vocab_size: 2000, hidden: 32, num_layers: 2, num_heads: 4, ffn: 64,\n"
                                    "        max_positions: 32, dropout: 0.0}\n"
                                    "train: {lr: 5.0e-3, warmup_steps: 2, total_steps: 6, batch_size: 4,\n"
                                    "        grad_accumulation: 1, max_seq_length: 32, max_predictions: 5,\n"
                                    "        eval_every_samples: 0, target_mlm_accuracy: 0.0, seed: 7}\n";
  const std::string common = " bert --config " + (dir / "dp.yaml").string() + " --train_dir " + (dir / "train").string() +
                             " --eval_dir " + (dir / "eval").string() + " --max_steps 4";
  const CommandRun one = run("OMP_NUM_THREADS=1 " + foldcore_binary() + common + " --grad_accumulation 4");
  const CommandRun dp = run("OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 timeout -s KILL 300 " FOLDCORE_MPIEXEC
                     " --oversubscribe --allow-run-as-root -n 2 " + foldcore_binary() + common +
                     " --grad_accumulation 2 --dp 2");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(dp.status, 0) << dp.output;
  EXPECT_EQ(field(dp.output, "dp_ranks"), 2) << dp.output;
  EXPECT_EQ(field(one.output, "dp_ranks"), 1);
  EXPECT_EQ(field(dp.output, "samples"), field(one.output, "samples"));
  EXPECT_EQ(field(dp.output, "samples"), 4 * 4 * 4);  // steps × batch × global micro-batches
  const double l1 = field(one.output, "final_loss"), l2 = field(dp.output, "final_loss");
  EXPECT_NEAR(l2, l1, 1e-5 * std::abs(l1)) << dp.output;
  EXPECT_NEAR(field(dp.output, "mlm_accuracy"), field(one.output, "mlm_accuracy"), 1e-9);
  // Buckets (25 MiB each; the tiny model fits in one) go out during the backward of the step's
  // last micro-batch, through the autograd engine's gradient-ready hook: all of them here.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dp.output, m, std::regex("([0-9]+) of ([0-9]+) gradient buckets went out"))) << dp.output;
  EXPECT_EQ(m[1].str(), m[2].str()) << dp.output;
  EXPECT_GE(std::stoi(m[2].str()), 1);
  // One summary line: rank 1 prints nothing of its own.
  EXPECT_EQ(dp.output.find("\"benchmark\""), dp.output.rfind("\"benchmark\"")) << dp.output;
}

TEST(BertDataParallelCli, WrongProcessCountIsAClearError) {
  const CommandRun r = run(foldcore_binary() + " bert --train_dir x --eval_dir y --dp 3 --config " FOLDCORE_SOURCE_DIR
                    "/configs/bert/tiny.yaml");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("bert --dp 3: this job has 1 processes"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace foldcore
