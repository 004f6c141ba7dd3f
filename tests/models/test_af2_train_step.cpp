// One AlphaFold2 training step (forward over recycling, every loss term, backward into every
// parameter; train_step.h) against OpenFold's fixture ../shared/af2/ref/train, CPU fp32, fine-tuning
// weights; tolerances and the zero-gradient tensors in af2_train_compare.h.
#include <gtest/gtest.h>

#include "af2_train_compare.h"
#include "core/error.h"
#include "models/alphafold/training/train_step.h"

namespace foldcore::af2 {
namespace {

namespace tc = train_compare;

TrainStepOptions fixture_options() {
  TrainStepOptions o;
  o.batch_path = tc::train_dir() + "/batch.npz";
  o.params_path = tc::params_path();
  o.stage = "finetune";
  return o;
}

const TrainStepResult& step() {
  static const TrainStepResult r = run_train_step(fixture_options());
  return r;
}

TEST(Af2TrainStep, LossTermsMatchOpenFold) {
  const TrainStepResult& r = step();
  EXPECT_TRUE(r.loss.skipped.empty());
  std::map<std::string, double> terms = r.loss.terms;
  terms["unscaled_loss"] = r.loss.unscaled_loss;
  terms["loss"] = r.loss.loss;
  EXPECT_EQ(tc::compare_terms(terms), 0);
}

TEST(Af2TrainStep, GradientsMatchOpenFold) {
  const TrainStepResult& r = step();
  const std::map<std::string, Tensor> grads(r.grads.begin(), r.grads.end());
  const tc::GradComparison c = tc::compare_grads(grads);
  EXPECT_EQ(c.failed, 0);
  EXPECT_LE(tc::rel(c.ours_norm, c.ref_norm), tc::kNormTol);
  EXPECT_NEAR(r.grad_norm, c.ours_norm, 1e-9 * c.ours_norm);
}

TEST(Af2TrainStep, BadInputIsAnError) {
  TrainStepOptions o = fixture_options();
  o.stage = "pretrain";
  EXPECT_THROW(run_train_step(o), Error);
  o = fixture_options();
  o.batch_path = tc::params_path();  // not a feature file
  EXPECT_THROW(run_train_step(o), Error);
}

}  // namespace
}  // namespace foldcore::af2
