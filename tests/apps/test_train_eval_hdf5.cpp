// Validation during `foldcore train` (af2_validation.h) and `foldcore plot_metrics`, end to end
// (the program runs as a subprocess) on a feature store of the shared mmCIFs, tiny preset:
//   - held-out chains are scored before the first step and every validation.every steps
//     (val_* fields in metrics.jsonl, mean and per chain, the progress log) and never trained on;
//   - validating does not change the training (same losses with and without it: no random number
//     drawn, the model back in training mode);
//   - bad validation settings name the key or the chain;
//   - plot_metrics writes a PNG, and names the file and the line of a missing or corrupt input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "apps_test_util.h"
#include "train_test_util.h"
#include "test_util.h"

namespace foldcore::apps_test {
namespace {

const std::string kSource = FOLDCORE_SOURCE_DIR;

double field(const std::string& line, const std::string& key) {
  std::string pattern = "\"";
  pattern.append(std::regex_replace(key, std::regex("[/.]"), "\\$&"));
  pattern.append("\": ([-0-9.eE+]+)");
  const std::regex re(pattern);
  std::smatch m;
  if (!std::regex_search(line, m, re)) return NAN;
  return std::stod(m[1]);
}

std::string train_args(const fs::path& config, const fs::path& store, const fs::path& run, int steps) {
  return "train --config " + config.string() + " --store " + store.string() + " --out_dir " + run.string() +
         " --max_steps " + std::to_string(steps);
}

TEST(TrainEval, HeldOutChainsAreScoredAndNotTrainedOn) {
  TempDir dir("train_eval");
  const fs::path store = make_train_store(dir.path(), false);
  const fs::path config = tiny_train_config(dir.path(), "val.yaml",
                                            {{"chains", "  chains: [2q2k_A, 4zey_A]"}, {"every", "  every: 2"}});
  const fs::path run = dir.path() / "run";
  const RunResult r = run_foldcore(train_args(config, store, run, 5));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("step 0 validation (2 chains"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 4 validation (2 chains"), std::string::npos) << r.output;
  const std::vector<std::string> got = nonempty_lines(run / "metrics.jsonl");
  ASSERT_EQ(got.size(), 6u);  // step 0 (validation only) and steps 1..5
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t step = static_cast<int64_t>(i);
    EXPECT_EQ(field(got[i], "step"), step);
    // Validation at 0, every 2 steps and at the last step (5).
    const bool validated = step % 2 == 0 || step == 5;
    EXPECT_EQ(got[i].find("\"val_lddt_ca\"") != std::string::npos, validated) << got[i];
    if (validated) {
      for (const char* chain : {"2q2k_A", "4zey_A"}) {
        const std::string c(chain);
        const double lddt = field(got[i], "val_lddt_ca/" + c);
        const double gdt = field(got[i], "val_gdt_ts/" + c);
        const double rmsd = field(got[i], "val_rmsd_ca/" + c);
        EXPECT_TRUE(lddt >= 0 && lddt <= 1) << got[i];
        EXPECT_TRUE(gdt > 0 && gdt <= 1) << got[i];
        EXPECT_GT(rmsd, 0.0) << got[i];
      }
      // The mean over the two chains.
      EXPECT_NEAR(field(got[i], "val_lddt_ca"),
                  (field(got[i], "val_lddt_ca/2q2k_A") + field(got[i], "val_lddt_ca/4zey_A")) / 2, 1e-12);
      EXPECT_NEAR(field(got[i], "val_rmsd_ca"),
                  (field(got[i], "val_rmsd_ca/2q2k_A") + field(got[i], "val_rmsd_ca/4zey_A")) / 2, 1e-12);
    }
    // Held out: never in a training batch.
    if (step > 0) {
      EXPECT_NE(got[i].find("\"chains\": [\""), std::string::npos) << got[i];
      EXPECT_EQ(got[i].find("\"2q2k_A\""), std::string::npos) << got[i];
      EXPECT_EQ(got[i].find("\"4zey_A\""), std::string::npos) << got[i];
    }
  }
  // The untrained model of step 0: near-random structures, far from the truth.
  EXPECT_LT(field(got[0], "val_lddt_ca"), 0.3) << got[0];

  // plot_metrics: the default output next to the metrics, a PNG.
  RunResult p = run_foldcore("plot_metrics " + run.string());
  ASSERT_EQ(p.status, 0) << p.output;
  const std::string png = read_file(run / "metrics.png");
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_NE(p.output.find("3 panels"), std::string::npos) << p.output;  // loss, validation scores, RMSD
  p = run_foldcore("plot_metrics " + (run / "metrics.jsonl").string() + " --output " +
                   (dir.path() / "other.png").string());
  ASSERT_EQ(p.status, 0) << p.output;
  EXPECT_TRUE(fs::exists(dir.path() / "other.png"));
}

TEST(TrainEval, ValidationDoesNotChangeTheTraining) {
  TempDir dir("train_eval_same");
  const fs::path store = make_train_store(dir.path(), false);
  // Dropout on (tiny preset): a validation that drew from the dropout generator or left the model
  // in eval mode would change every later loss. held_out false keeps the training chains equal.
  const fs::path plain = tiny_train_config(dir.path(), "plain.yaml", {});
  const fs::path val = tiny_train_config(dir.path(), "val.yaml",
                                         {{"chains", "  chains: [2q2k_A]"}, {"every", "  every: 1"},
                                          {"held_out", "  held_out: false"}});
  const RunResult a = run_foldcore(train_args(plain, store, dir.path() / "a", 4));
  ASSERT_EQ(a.status, 0) << a.output;
  const RunResult b = run_foldcore(train_args(val, store, dir.path() / "b", 4));
  ASSERT_EQ(b.status, 0) << b.output;
  static const std::regex volatile_fields(", \"(step_seconds|samples_per_second|peak_memory_bytes|val_[^\"]*)\": [^,}]*");
  const std::vector<std::string> la = nonempty_lines(dir.path() / "a" / "metrics.jsonl");
  std::vector<std::string> lb = nonempty_lines(dir.path() / "b" / "metrics.jsonl");
  ASSERT_EQ(lb.size(), la.size() + 1);
  // The same validation of the trained weights instead of their EMA (validation.ema: false): the
  // same training too, the same scores at step 0 (the EMA starts as the weights), other scores
  // once the weights have moved away from their average.
  const fs::path val_weights = tiny_train_config(dir.path(), "val_weights.yaml",
                                                 {{"chains", "  chains: [2q2k_A]"}, {"every", "  every: 1"},
                                                  {"held_out", "  held_out: false"}, {"ema", "  ema: false"}});
  const RunResult c = run_foldcore(train_args(val_weights, store, dir.path() / "c", 4));
  ASSERT_EQ(c.status, 0) << c.output;
  std::vector<std::string> lc = nonempty_lines(dir.path() / "c" / "metrics.jsonl");
  ASSERT_EQ(lc.size(), lb.size());
  EXPECT_EQ(field(lb[0], "val_rmsd_ca"), field(lc[0], "val_rmsd_ca"));
  EXPECT_NE(field(lb.back(), "val_rmsd_ca"), field(lc.back(), "val_rmsd_ca"));
  std::printf("last step Ca-RMSD: EMA %.6g, weights %.6g\n", field(lb.back(), "val_rmsd_ca"),
              field(lc.back(), "val_rmsd_ca"));
  lb.erase(lb.begin());  // the step-0 validation line
  lc.erase(lc.begin());
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_NE(lb[i].find("\"val_lddt_ca\""), std::string::npos) << lb[i];
    EXPECT_EQ(std::regex_replace(la[i], volatile_fields, ""), std::regex_replace(lb[i], volatile_fields, ""));
    EXPECT_EQ(std::regex_replace(la[i], volatile_fields, ""), std::regex_replace(lc[i], volatile_fields, ""));
  }
}

TEST(TrainEval, BadValidationSettingsAreNamed) {
  TempDir dir("train_eval_bad");
  const fs::path store = make_train_store(dir.path(), false);
  const fs::path absent = tiny_train_config(dir.path(), "absent.yaml", {{"chains", "  chains: [9zzz_Q]"}, {"every", "  every: 1"}});
  RunResult r = run_foldcore(train_args(absent, store, dir.path() / "run", 1));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("chain '9zzz_Q' (validation.chains) is not in store " + store.string()), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir.path() / "run"));
  const fs::path empty = tiny_train_config(dir.path(), "empty.yaml", {{"every", "  every: 5"}});
  r = run_foldcore(train_args(empty, store, dir.path() / "run", 1));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("'validation.every' is 5 but 'validation.chains' is empty"), std::string::npos) << r.output;
  const fs::path missing = tiny_train_config(dir.path(), "missing.yaml", {{"held_out", ""}});
  r = run_foldcore(train_args(missing, store, dir.path() / "run", 1));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("missing key 'validation.held_out'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.path() / "run"));
}

TEST(TrainEval, PlotMetricsNamesAMissingOrCorruptFile) {
  TempDir dir("plot_metrics");
  RunResult r = run_foldcore("plot_metrics " + (dir.path() / "nothing").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find((dir.path() / "nothing").string() + " does not exist"), std::string::npos) << r.output;
  fs::create_directories(dir.path() / "run");
  const fs::path m = dir.path() / "run" / "metrics.jsonl";
  std::ofstream(m) << "{\"step\": 1, \"loss\": 3.5, \"fape\": 1.0}\n{\"step\": 2, \"loss\": 3.\n";
  r = run_foldcore("plot_metrics " + (dir.path() / "run").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(m.string() + " line 2 is not valid JSON"), std::string::npos) << r.output;
  std::ofstream(m) << "{\"loss\": 3.5}\n";
  r = run_foldcore("plot_metrics " + (dir.path() / "run").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("line 1 is not a metrics object with a numeric \"step\""), std::string::npos) << r.output;
  std::ofstream(m) << "";
  r = run_foldcore("plot_metrics " + (dir.path() / "run").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("holds no metrics line"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.path() / "run" / "metrics.png"));
  // Training lines without validation, the last one torn (a run writing it): one panel, a warning.
  std::ofstream(m) << "{\"step\": 1, \"loss\": 3.5, \"fape\": 1.0}\n{\"step\": 2, \"loss\": 2.5, \"fape\": 0.5}\n{\"st";
  r = run_foldcore("plot_metrics " + (dir.path() / "run").string());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("unterminated"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 panels"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir.path() / "run" / "metrics.png"));
}

}  // namespace
}  // namespace foldcore::apps_test
