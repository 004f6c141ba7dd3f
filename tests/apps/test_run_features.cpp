// `foldcore run_features` on bad inputs: truncated or foreign feature/parameter files end in a
// clear error (non-zero exit, the offending file named) and leave no output file behind.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "apps_test_util.h"
#include "test_util.h"

namespace foldcore {
namespace {

namespace fs = std::filesystem;

fs::path foldcore_binary() { return apps_test::foldcore_binary(); }
using Result = apps_test::RunResult;
Result run(const std::string& args) { return apps_test::run_foldcore(args); }

class RunFeaturesCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(foldcore_binary())) << foldcore_binary() << " not built";
    dir_ = fs::temp_directory_path() / ("fc_run_features_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    features_ = testing::shared_dir() + "/af2/ref/features.npz";
    params_ = testing::shared_dir() + "/af2/ref/params.npz";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string truncated_copy(const std::string& src, const std::string& name, double fraction) {
    std::ifstream in(src, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const fs::path out = dir_ / name;
    std::ofstream(out, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() * fraction));
    return out.string();
  }
  // Runs with the given inputs; expects failure naming `named`, and no output (nor temporary) file.
  void expect_clean_failure(const std::string& features, const std::string& params, const std::string& named,
                            const std::string& extra = "") {
    const fs::path out = dir_ / "out.npz";
    const Result r = run("run_features --features " + features + " --params_file " + params + " --output " +
                         out.string() + " " + extra);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("foldcore run_features: error:"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(named), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out));
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().filename().string().find("out.npz"), std::string::npos) << "left behind: " << e.path();
  }

  fs::path dir_;
  std::string features_, params_;
};

TEST_F(RunFeaturesCli, TruncatedFeaturesFail) {
  const std::string bad = truncated_copy(features_, "features_trunc.npz", 0.6);
  expect_clean_failure(bad, params_, "features_trunc.npz");
}

TEST_F(RunFeaturesCli, ForeignFeaturesFail) {
  // A parameter file given as features: no AlphaFold feature in it.
  expect_clean_failure(params_, params_, "required feature 'aatype' is missing");
}

TEST_F(RunFeaturesCli, TruncatedParamsFail) {
  const std::string bad = truncated_copy(params_, "params_trunc.npz", 0.5);
  expect_clean_failure(features_, bad, "params_trunc.npz");
}

TEST_F(RunFeaturesCli, ForeignParamsFail) {
  // A feature file given as parameters: its arrays are not AlphaFold parameters.
  expect_clean_failure(features_, features_, "is not an AlphaFold parameter");
}

TEST_F(RunFeaturesCli, ParamsOfAnotherArchitectureFail) {
  // The tiny preset's model cannot take the full-width reference weights.
  expect_clean_failure(features_, params_, "params.npz",
                       "--config " + std::string(FOLDCORE_SOURCE_DIR) + "/configs/model/tiny.yaml");
}

TEST_F(RunFeaturesCli, TooManyRecyclesFail) {
  expect_clean_failure(features_, params_, "features.npz", "--num_recycles 5");
}

TEST_F(RunFeaturesCli, MissingFileAndMissingArgumentFail) {
  expect_clean_failure(dir_.string() + "/nope.npz", params_, "nope.npz");
  const Result r = run("run_features --features " + features_);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--params_file"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace foldcore
