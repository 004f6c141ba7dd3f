// End-to-end tests of `foldcore train` (the program runs as a subprocess) on a feature store of the
// shared mmCIFs, tiny preset with a few steps:
//   - a run SIGKILLed after its second step and resumed logs bit-identical per-step losses to an
//     uninterrupted run (the acceptance test), and so does one stopped by SIGTERM, which
//     checkpoints the step it ends;
//   - config errors (unknown key, missing key) and a checkpoint of another architecture each give
//     a message naming the file and the key, and leave the run folder as it was;
//   - non-finite losses (a learning rate that blows the weights up) are skipped and counted, and
//     max_nonfinite_in_a_row of them stop the run with a clear message, metrics intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps_test_util.h"
#include "train_test_util.h"
#include "nn/checkpoint.h"
#include "test_util.h"

namespace foldcore::apps_test {
namespace {

const std::string kSource = FOLDCORE_SOURCE_DIR;

// A metrics line without its timing fields (they differ between runs by nature).
std::string without_timing(const std::string& line) {
  static const std::regex timing(", \"(step_seconds|samples_per_second|peak_memory_bytes)\": [^,}]*");
  return std::regex_replace(line, timing, "");
}

std::string train_args(const fs::path& config, const fs::path& store, const fs::path& run, int steps) {
  return "train --config " + config.string() + " --store " + store.string() + " --out_dir " + run.string() +
         " --max_steps " + std::to_string(steps);
}

// `foldcore train` started in the background (its output to `log`, or discarded); its pid.
pid_t start_train(const std::string& args, const std::string& log = "/dev/null") {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd = foldcore_binary() + " " + args + " > " + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Waits (up to 2 minutes) until run/metrics.jsonl holds `lines` lines; the lines it holds then.
size_t wait_for_metrics(const fs::path& run, size_t lines) {
  size_t logged = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    logged = fs::exists(run / "metrics.jsonl") ? nonempty_lines(run / "metrics.jsonl").size() : 0;
    if (logged >= lines) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return logged;
}

TEST(Train, KilledAndResumedRunLogsTheSameLosses) {
  TempDir dir("train_resume");
  const fs::path store = make_train_store(dir.path());
  const fs::path config = tiny_train_config(dir.path(), "tiny.yaml", {{"checkpoint_every", "  checkpoint_every: 1"}});
  constexpr int kSteps = 40;  // ~20 ms each: enough for the kill to land mid-run

  const RunResult full = run_foldcore(train_args(config, store, dir.path() / "full", kSteps));
  ASSERT_EQ(full.status, 0) << full.output;
  const std::vector<std::string> expected = nonempty_lines(dir.path() / "full" / "metrics.jsonl");
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
  EXPECT_NE(full.output.find("samples/s | ETA"), std::string::npos) << full.output;  // the progress line
  for (const char* field : {"\"loss\"", "\"fape\"", "\"distogram\"", "\"masked_msa\"", "\"lr\"", "\"grad_norm\"",
                            "\"step_seconds\"", "\"peak_memory_bytes\""})
    EXPECT_NE(expected[0].find(field), std::string::npos) << field << " in " << expected[0];
  EXPECT_NE(expected.front(), expected.back());  // the steps differ (the weights move, the samples change)

  // The same run, SIGKILLed once two steps are logged, then resumed.
  const fs::path run = dir.path() / "killed";
  const pid_t pid = start_train(train_args(config, store, run, kSteps));
  ASSERT_GE(pid, 0);
  const size_t logged = wait_for_metrics(run, 2);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run ended before it could be killed (logged " << logged << " steps)";
  ASSERT_GE(logged, 2u);
  ASSERT_LT(logged, static_cast<size_t>(kSteps));
  // What a kill during a checkpoint write leaves (nn::save_checkpoint's temporary): removed on resume,
  // unlike a file that only looks similar.
  const fs::path leftover = run / "checkpoint.h5.tmp.4194301", lookalike = run / "checkpoint.h5.tmp.notes";
  std::ofstream(leftover) << "partial";
  std::ofstream(lookalike) << "kept";

  const RunResult resumed = run_foldcore(train_args(config, store, run, kSteps) + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed"), std::string::npos) << resumed.output;
  EXPECT_FALSE(fs::exists(leftover));
  EXPECT_NE(resumed.output.find("removed " + leftover.string()), std::string::npos) << resumed.output;
  EXPECT_TRUE(fs::exists(lookalike));
  fs::remove(lookalike);
  const std::vector<std::string> got = nonempty_lines(run / "metrics.jsonl");
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(without_timing(got[i]), without_timing(expected[i])) << "step " << i + 1;

  // Resuming with another architecture: refused by name, the run folder untouched.
  const fs::path wide_model = dir.path() / "wide_model.yaml";
  std::ofstream(wide_model) << std::regex_replace(read_file(kSource + "/configs/model/tiny.yaml"),
                                                  std::regex("\nnum_evoformer_blocks: 1\n"), "\nnum_evoformer_blocks: 2\n");
  const fs::path wide = tiny_train_config(dir.path(), "wide.yaml", {{"model", "model: " + wide_model.string()}});
  const std::string before = read_file(run / "metrics.jsonl");
  const RunResult other = run_foldcore(train_args(wide, store, run, kSteps + 1) + " --resume");
  EXPECT_EQ(other.status, 1) << other.output;
  EXPECT_NE(other.output.find("another architecture"), std::string::npos) << other.output;
  EXPECT_EQ(read_file(run / "metrics.jsonl"), before);

  // A fresh run into a folder that holds one is refused rather than overwriting it.
  const RunResult again = run_foldcore(train_args(config, store, run, kSteps));
  EXPECT_EQ(again.status, 1) << again.output;
  EXPECT_NE(again.output.find("--resume"), std::string::npos) << again.output;
}

// SIGTERM (what Slurm sends at a time limit or preemption, then SIGKILL 30 s later): the run stops at
// the end of the step it is in, writes its checkpoint there although checkpoint_every is far away,
// says so, and exits with 128 + 15; resumed, it logs the losses of an uninterrupted run. Before, the
// process ended at once and every step since the last checkpoint was lost.
TEST(Train, SigtermStopsAtAStepWithACheckpoint) {
  TempDir dir("train_sigterm");
  const fs::path store = make_train_store(dir.path());
  const fs::path config = tiny_train_config(dir.path(), "tiny.yaml", {{"checkpoint_every", "  checkpoint_every: 1000"}});
  constexpr int kSteps = 12;
  const RunResult full = run_foldcore(train_args(config, store, dir.path() / "full", kSteps));
  ASSERT_EQ(full.status, 0) << full.output;
  const std::vector<std::string> expected = nonempty_lines(dir.path() / "full" / "metrics.jsonl");
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));

  const fs::path run = dir.path() / "stopped";
  const fs::path log = dir.path() / "stopped.log";
  const pid_t pid = start_train(train_args(config, store, run, 1000), log.string());
  ASSERT_GE(pid, 0);
  ASSERT_GE(wait_for_metrics(run, 2), 2u);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string out = read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by a signal, not stopped:\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << out;
  const size_t steps = nonempty_lines(run / "metrics.jsonl").size();
  ASSERT_LT(steps, static_cast<size_t>(kSteps)) << "the stop took too long to test the resume";
  EXPECT_NE(out.find("SIGTERM received: stopping after this step"), std::string::npos) << out;
  EXPECT_NE(out.find("train: stopped by signal 15 ("), std::string::npos) << out;
  EXPECT_NE(out.find(") after step " + std::to_string(steps) + " of 1000"), std::string::npos) << out;
  EXPECT_NE(out.find("continue with --resume"), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(run / "checkpoint.h5"));

  const RunResult resumed = run_foldcore(train_args(config, store, run, kSteps) + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step " + std::to_string(steps)), std::string::npos) << resumed.output;
  const std::vector<std::string> got = nonempty_lines(run / "metrics.jsonl");
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(without_timing(got[i]), without_timing(expected[i])) << "step " << i + 1;
}

// recompute_keep_blocks: auto in a run (models/alphafold/training/keep_blocks.h): the first step
// measures a kept block, the log names the count chosen (on this machine's memory the tiny model's
// two blocks both fit), and the run's losses are those of a run configured with that count
// directly, up to the rounding between a recomputed and a kept first block in step 1 (a no-grad
// forward and its graph rerun sum in other orders: ≤ 1e-5 relative, carried through 3 steps).
TEST(Train, RecomputeKeepBlocksAutoIsChosenByTheFirstStep) {
  TempDir dir("train_keep_auto");
  const fs::path store = make_train_store(dir.path());
  auto model_with = [&](const std::string& name, const std::string& keep) {
    std::string text = read_file(kSource + "/configs/model/tiny.yaml");
    text = std::regex_replace(text, std::regex("\nnum_evoformer_blocks: 1\n"), "\nnum_evoformer_blocks: 2\n");
    text = std::regex_replace(text, std::regex("\nrecompute_blocks: 0 [^\n]*\n"), "\nrecompute_blocks: 1\n");
    text = std::regex_replace(text, std::regex("\nrecompute_keep_blocks: 0 [^\n]*\n"), "\nrecompute_keep_blocks: " + keep + "\n");
    const fs::path model = dir.path() / (name + "_model.yaml");
    std::ofstream(model) << text;
    return tiny_train_config(dir.path(), name + ".yaml", {{"model", "model: " + model.string()}});
  };
  const RunResult automatic = run_foldcore(train_args(model_with("auto", "auto"), store, dir.path() / "auto", 3));
  ASSERT_EQ(automatic.status, 0) << automatic.output;
  EXPECT_NE(automatic.output.find("recompute_keep_blocks auto: 2 of 2 Evoformer blocks kept (one kept block holds"),
            std::string::npos)
      << automatic.output;
  const RunResult fixed = run_foldcore(train_args(model_with("two", "2"), store, dir.path() / "two", 3));
  ASSERT_EQ(fixed.status, 0) << fixed.output;
  EXPECT_EQ(fixed.output.find("recompute_keep_blocks auto"), std::string::npos);
  const std::vector<std::string> a = nonempty_lines(dir.path() / "auto" / "metrics.jsonl");
  const std::vector<std::string> b = nonempty_lines(dir.path() / "two" / "metrics.jsonl");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  const std::regex loss_field("\"loss\": ([-0-9.eE+]+)");
  for (size_t i = 0; i < a.size(); ++i) {
    std::smatch ma, mb;
    ASSERT_TRUE(std::regex_search(a[i], ma, loss_field)) << a[i];
    ASSERT_TRUE(std::regex_search(b[i], mb, loss_field)) << b[i];
    const double la = std::stod(ma[1]), lb = std::stod(mb[1]);
    EXPECT_NEAR(la, lb, 1e-5 * std::abs(lb)) << "step " << i + 1;
  }
}

// export_params turns a checkpoint into an official parameter file that run_features reads with
// no config (the architecture is inferred from the array shapes); --ema exports the average.
TEST(Train, ExportedParametersRunInRunFeatures) {
  TempDir dir("train_export");
  const fs::path store = make_train_store(dir.path());
  const fs::path config = tiny_train_config(dir.path(), "tiny.yaml", {});
  const fs::path run = dir.path() / "run";
  ASSERT_EQ(run_foldcore(train_args(config, store, run, 3)).status, 0);
  const fs::path ckpt = run / "checkpoint.h5";
  // The checkpoint holds the weights, the optimiser, the EMA, the position and the RNG state.
  const nn::CheckpointSummary summary = nn::inspect_checkpoint(ckpt.string());
  EXPECT_EQ(summary.step, 3);
  std::set<std::string> entries;
  for (const nn::CheckpointEntry& e : summary.entries) entries.insert(e.path);
  for (const char* want : {"params/values", "optimizer/adam/m", "optimizer/adam/v", "optimizer/adam/step",
                           "optimizer/ema/ema", "optimizer/ema/step", "optimizer/trainer/step",
                           "optimizer/trainer/dropout_offset", "optimizer/trainer/skipped",
                           "optimizer/trainer/nonfinite_in_a_row"})
    EXPECT_TRUE(entries.count(want)) << want;
  for (const char* ema : {"", " --ema"}) {
    const fs::path params = dir.path() / (std::string("params") + (*ema ? "_ema" : "") + ".npz");
    RunResult r = run_foldcore("export_params --checkpoint " + ckpt.string() + " --output " + params.string() + ema);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("of step 3"), std::string::npos) << r.output;
    r = run_foldcore("run_features --features " + foldcore::testing::shared_dir() + "/af2/ref/features.npz" +
                     " --params_file " + params.string() + " --output " + (dir.path() / "out.npz").string());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("1 Evoformer blocks"), std::string::npos) << r.output;
  }
  EXPECT_NE(read_file(dir.path() / "params.npz"), read_file(dir.path() / "params_ema.npz"));
  const RunResult bad =
      run_foldcore("export_params --checkpoint " + store.string() + " --output " + (dir.path() / "x.npz").string());
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_FALSE(fs::exists(dir.path() / "x.npz"));
}

// --init_from: a new run starting from another run's weights (or their EMA). The first step's
// learning rate is 0 (AlphaFold's warm-up starts at 0), so after it the weights are exactly the
// loaded ones: their export equals the source run's export byte for byte.
TEST(Train, InitFromStartsANewRunFromAnotherRunsWeights) {
  TempDir dir("train_init_from");
  const fs::path store = make_train_store(dir.path());
  const fs::path config = tiny_train_config(dir.path(), "tiny.yaml", {});
  const fs::path source = dir.path() / "source", ckpt = source / "checkpoint.h5";
  ASSERT_EQ(run_foldcore(train_args(config, store, source, 3)).status, 0);
  auto export_params = [&](const fs::path& checkpoint, const std::string& name, bool ema) {
    const fs::path out = dir.path() / name;
    const RunResult r = run_foldcore("export_params --checkpoint " + checkpoint.string() + " --output " + out.string() +
                                     (ema ? " --ema" : ""));
    EXPECT_EQ(r.status, 0) << r.output;
    return read_file(out);
  };
  const std::string weights = export_params(ckpt, "source.npz", false);
  const std::string ema_weights = export_params(ckpt, "source_ema.npz", true);
  ASSERT_NE(weights, ema_weights);
  for (const bool ema : {false, true}) {
    SCOPED_TRACE(ema ? "EMA" : "weights");
    const fs::path run = dir.path() / (ema ? "from_ema" : "from");
    const RunResult r = run_foldcore(train_args(config, store, run, 1) + " --init_from " + ckpt.string() +
                                     (ema ? " --init_from_ema" : ""));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("starting from the ") + (ema ? "EMA weights" : "weights")), std::string::npos)
        << r.output;
    const std::vector<std::string> metrics = nonempty_lines(run / "metrics.jsonl");
    ASSERT_EQ(metrics.size(), 1u);
    EXPECT_NE(metrics[0].find("\"step\": 1,"), std::string::npos) << metrics[0];  // a new run: step 1
    EXPECT_NE(metrics[0].find("\"lr\": 0,"), std::string::npos) << metrics[0];
    EXPECT_EQ(nn::inspect_checkpoint((run / "checkpoint.h5").string()).step, 1);
    EXPECT_TRUE(export_params(run / "checkpoint.h5", "check.npz", false) == (ema ? ema_weights : weights));
  }
  // Refused: with --resume, another architecture, --init_from_ema alone.
  RunResult r = run_foldcore(train_args(config, store, dir.path() / "from", 2) + " --resume --init_from " + ckpt.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("exclude each other"), std::string::npos) << r.output;
  const fs::path wide_model = dir.path() / "wide_model.yaml";
  std::ofstream(wide_model) << std::regex_replace(read_file(kSource + "/configs/model/tiny.yaml"),
                                                  std::regex("\nnum_evoformer_blocks: 1\n"), "\nnum_evoformer_blocks: 2\n");
  const fs::path wide = tiny_train_config(dir.path(), "wide.yaml", {{"model", "model: " + wide_model.string()}});
  r = run_foldcore(train_args(wide, store, dir.path() / "wide", 1) + " --init_from " + ckpt.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("another architecture"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.path() / "wide"));
  r = run_foldcore(train_args(config, store, dir.path() / "x", 1) + " --init_from_ema");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--init_from_ema needs --init_from"), std::string::npos) << r.output;
}

TEST(Train, ConfigErrorsNameTheKey) {
  TempDir dir("train_config");
  const fs::path store = dir.path() / "absent.h5";  // never reached: the config fails first
  const fs::path unknown = tiny_train_config(dir.path(), "unknown.yaml", {{"log_every", "  log_evry: 1"}});
  RunResult r = run_foldcore(train_args(unknown, store, dir.path() / "run", 1));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("unknown key 'run.log_evry'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(unknown.string()), std::string::npos) << r.output;

  const fs::path missing = tiny_train_config(dir.path(), "missing.yaml", {{"crop_size", ""}});
  r = run_foldcore(train_args(missing, store, dir.path() / "run", 1));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("missing key 'data.crop_size'"), std::string::npos) << r.output;

  const fs::path stage = tiny_train_config(dir.path(), "stage.yaml", {{"stage", "stage: pretrain"}});
  r = run_foldcore(train_args(stage, store, dir.path() / "run", 1));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("pretrain"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.path() / "run"));

  // A corrupt store (a real one cut in half): refused by name before anything is written.
  const fs::path real_store = make_train_store(dir.path());
  const std::string bytes = read_file(real_store);
  const fs::path cut = dir.path() / "cut.h5";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  r = run_foldcore(train_args(tiny_train_config(dir.path(), "ok.yaml", {}), cut, dir.path() / "run", 1));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(cut.string()), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.path() / "run"));

  // The shipped presets parse (with their model YAMLs): the run stops at the absent store.
  for (const char* preset : {"tiny", "overfit", "initial", "finetune"}) {
    r = run_foldcore(train_args(kSource + "/configs/train/" + preset + ".yaml", store, dir.path() / "run", 1));
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_EQ(r.output.find("train config"), std::string::npos) << preset << ": " << r.output;
    EXPECT_NE(r.output.find(store.string()), std::string::npos) << preset << ": " << r.output;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "run"));

  // --max_steps 0 (it used to run the config's run.max_steps) and a device this process cannot use
  // (no machine has 1,024 GPUs): refused by name, before the store is opened or the run folder made.
  r = run_foldcore(train_args(tiny_train_config(dir.path(), "ok.yaml", {}), real_store, dir.path() / "run", 0));
  EXPECT_NE(r.status, 0) << r.output;  // CLI11's validation error
  EXPECT_NE(r.output.find("--max_steps: must be at least 1, got 0"), std::string::npos) << r.output;
  r = run_foldcore(train_args(tiny_train_config(dir.path(), "ok.yaml", {}), real_store, dir.path() / "run", 1) +
                   " --device cuda:1023");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("device 'cuda:1023'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.path() / "run"));
  // A run folder that cannot be made (under a file) is refused with the option's name.
  const fs::path under_file = dir.path() / "ok.yaml" / "run";
  r = run_foldcore(train_args(tiny_train_config(dir.path(), "ok.yaml", {}), real_store, under_file, 1));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--out_dir: '" + under_file.string() + "' cannot be created"), std::string::npos)
      << r.output;
}

TEST(Train, NonFiniteStepsAreSkippedThenStop) {
  TempDir dir("train_nonfinite");
  const fs::path store = make_train_store(dir.path());
  // lr 1e30 after a one-step warm-up: the second update throws the weights to ~1e30, after which
  // every forward overflows.
  const fs::path config = tiny_train_config(dir.path(), "blowup.yaml",
                                            {{"lr", "  lr: 1.0e+30"},
                                             {"warmup_steps", "  warmup_steps: 1"},
                                             {"max_nonfinite_in_a_row", "  max_nonfinite_in_a_row: 2"},
                                             {"batch_size", "  batch_size: 1"}});
  const fs::path run = dir.path() / "run";
  const RunResult r = run_foldcore(train_args(config, store, run, 8));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("2 non-finite steps in a row"), std::string::npos) << r.output;
  const std::vector<std::string> got = nonempty_lines(run / "metrics.jsonl");
  ASSERT_GE(got.size(), 3u);
  EXPECT_LT(got.size(), 8u);
  EXPECT_NE(got.back().find("\"skipped\": true"), std::string::npos) << got.back();
  EXPECT_NE(got[got.size() - 2].find("\"skipped\": true"), std::string::npos);
  EXPECT_NE(got.front().find("\"skipped\": false"), std::string::npos) << got.front();
}

}  // namespace
}  // namespace foldcore::apps_test

namespace foldcore::apps_test {
namespace {

// `--precision bf16` (autocast in the step; fp32 master weights, optimizer and checkpoint): a short
// tiny run whose losses are all finite and fall as the fp32 run's do — the mean loss of the last 10
// of 40 steps below that of the first 10 (warm-up is 10 steps; measured 37.23 → 35.90, fp32
// 37.23 → 35.94), by at least half the fp32 run's drop on the same samples and dropout masks, with
// losses that differ from fp32's (the bf16 path ran) — and whose checkpoint holds fp32
// arrays only (the step counters are i64).
std::vector<double> run_losses(const fs::path& store, const fs::path& run, int steps, const std::string& precision) {
  const RunResult r =
      run_foldcore(train_args(kSource + "/configs/train/tiny.yaml", store, run, steps) + " --precision " + precision);
  EXPECT_EQ(r.status, 0) << r.output;
  std::vector<double> loss;
  const std::regex loss_re("\"loss\": ([-+0-9.eE]+)");
  for (const std::string& l : nonempty_lines(run / "metrics.jsonl")) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(l, m, loss_re)) << "no finite loss in " << l;
    EXPECT_NE(l.find("\"skipped\": false"), std::string::npos) << l;
    if (!m.empty()) loss.push_back(std::stod(m[1]));
  }
  EXPECT_EQ(loss.size(), static_cast<size_t>(steps));
  return loss;
}

TEST(Train, Bf16RunLearnsAndCheckpointsFp32) {
  TempDir dir("train_bf16");
  const fs::path store = make_train_store(dir.path());
  constexpr int kSteps = 40;
  auto drop = [](const std::vector<double>& loss, double& first, double& last) {
    first = last = 0;
    for (size_t i = 0; i < 10; ++i) first += loss[i] / 10, last += loss[loss.size() - 10 + i] / 10;
    return first - last;
  };
  const std::vector<double> bf16 = run_losses(store, dir.path() / "bf16", kSteps, "bf16");
  const std::vector<double> fp32 = run_losses(store, dir.path() / "fp32", kSteps, "fp32");
  ASSERT_EQ(bf16.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(fp32.size(), static_cast<size_t>(kSteps));
  double bf_first, bf_last, fp_first, fp_last;
  const double bf_drop = drop(bf16, bf_first, bf_last), fp_drop = drop(fp32, fp_first, fp_last);
  std::printf("tiny run, mean loss of steps 1-10 -> 31-40: bf16 %.4g -> %.4g, fp32 %.4g -> %.4g\n", bf_first, bf_last,
              fp_first, fp_last);
  EXPECT_LT(bf_last, bf_first);
  EXPECT_GE(bf_drop, 0.5 * fp_drop);
  EXPECT_NE(bf16, fp32);  // bf16 rounding did change the run (the autocast path ran)
  const nn::CheckpointSummary ckpt = nn::inspect_checkpoint((dir.path() / "bf16" / "checkpoint.h5").string());
  EXPECT_FALSE(ckpt.entries.empty());
  for (const nn::CheckpointEntry& e : ckpt.entries) {
    if (e.dtype != DType::i64) {
      EXPECT_EQ(e.dtype, DType::f32) << e.path;
    }
  }
}

}  // namespace
}  // namespace foldcore::apps_test
