// `foldcore train_step` on OpenFold's training fixture (../shared/af2/ref/train): the program's
// grads.npz and losses.json against the fixture with the acceptance tolerances of
// tests/models/af2_train_compare.h; bad input ends in a clear error and leaves no output file.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "apps_test_util.h"
#include "data_pipeline/formats/npy.h"
#include "models/af2_train_compare.h"

namespace foldcore {
namespace {

namespace tc = af2::train_compare;
using apps_test::fs::path;

using Result = apps_test::RunResult;
Result run(const std::string& args) { return apps_test::run_foldcore(args); }

std::string step_args(const std::string& batch, const std::string& stage, const path& dir) {
  return "train_step --batch " + batch + " --params_file " + tc::params_path() + " --stage " + stage + " --output " +
         (dir / "grads.npz").string() + " --losses " + (dir / "losses.json").string();
}

// Nothing but the inputs the test put there: no output, no temporary.
void expect_no_outputs(const path& dir) {
  for (const auto& e : apps_test::fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.find("grads") == std::string::npos && name.find("losses") == std::string::npos)
        << "left behind: " << e.path();
  }
}

TEST(TrainStepCli, MatchesOpenFoldFixture) {
  apps_test::TempDir dir("train_step");
  const Result r = run(step_args(tc::train_dir() + "/batch.npz", "finetune", dir.path()));
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json losses = tc::read_json((dir.path() / "losses.json").string());
  std::map<std::string, double> terms;
  for (const auto& [name, v] : losses["terms"].items()) terms[name] = v.get<double>();
  EXPECT_EQ(tc::compare_terms(terms), 0);
  const nlohmann::json ref = tc::read_json(tc::train_dir() + "/losses.json");
  EXPECT_EQ(losses["weights"], ref["weights"]);

  const data::NpzReader npz((dir.path() / "grads.npz").string());
  std::map<std::string, Tensor> grads;
  for (const std::string& name : npz.names()) grads[name] = npz.read(name).to_tensor();
  const tc::GradComparison c = tc::compare_grads(grads);
  EXPECT_EQ(c.failed, 0);
  EXPECT_LE(tc::rel(c.ours_norm, c.ref_norm), tc::kNormTol);
  EXPECT_NEAR(losses["grad_norm"].get<double>(), c.ours_norm, 1e-6 * c.ours_norm);
}

TEST(TrainStepCli, UnknownStageFails) {
  apps_test::TempDir dir("train_step");
  const Result r = run(step_args(tc::train_dir() + "/batch.npz", "pretrain", dir.path()));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("stage"), std::string::npos) << r.output;
  expect_no_outputs(dir.path());
}

TEST(TrainStepCli, MissingLabelFailsNamingIt) {
  apps_test::TempDir dir("train_step");
  // The fixture batch without chi_mask.
  const data::NpzReader in(tc::train_dir() + "/batch.npz");
  std::vector<std::pair<std::string, data::NpyArray>> arrays;
  for (const std::string& name : in.names())
    if (name != "chi_mask") arrays.emplace_back(name, in.read(name));
  const std::string bad = (dir.path() / "batch_no_chi_mask.npz").string();
  data::write_npz(bad, arrays);
  const Result r = run(step_args(bad, "finetune", dir.path()));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("foldcore train_step: error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("chi_mask"), std::string::npos) << r.output;
  expect_no_outputs(dir.path());
}

// An output in a folder that does not exist, or an output path that is a folder, is refused when the
// command line is read (it used to be found only after the whole step, at the write), naming the
// option and the path; nothing is written.
TEST(TrainStepCli, UnwritableOutputRefusedBeforeTheStep) {
  apps_test::TempDir dir("train_step");
  const std::string batch = tc::train_dir() + "/batch.npz";
  const path absent = dir.path() / "absent";
  const std::string common = "train_step --batch " + batch + " --params_file " + tc::params_path() + " --stage initial";
  Result r = run(common + " --output " + (absent / "grads.npz").string() + " --losses " +
                 (dir.path() / "losses.json").string());
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--output"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(absent.string() + "' of"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  r = run(common + " --output " + (dir.path() / "grads.npz").string() + " --losses " + dir.path().string());
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--losses"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is a folder"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("train_step: inferred"), std::string::npos) << "the step ran:\n" << r.output;
  expect_no_outputs(dir.path());
}

}  // namespace
}  // namespace foldcore
