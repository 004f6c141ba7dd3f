// The Transformer-core smoke training on CPU: 2-layer post-LN encoder (d 32, 4 heads, FFN 64,
// vocab 12, seq 12) learns to reverse sequences with Adam; fixed seed; the loss must fall ≥ 10×.
#include <gtest/gtest.h>

#include <cmath>

#include "nn/smoke.h"

namespace foldcore::nn {
namespace {

TEST(SmokeTraining, ReversalLossFallsTenfold) {
  SmokeConfig c;  // defaults: 150 steps, seed 0, CPU, fp32
  int logs = 0;
  const SmokeResult r = run_smoke_training(c, [&](const SmokeLog& l) {
    ++logs;
    EXPECT_TRUE(std::isfinite(l.loss));
  });
  EXPECT_EQ(logs, c.steps / c.log_every);
  EXPECT_NEAR(r.initial_loss, std::log(12.0), 1.0);  // ≈ uniform over the vocabulary at init
  EXPECT_GE(r.ratio, 10.0) << "initial " << r.initial_loss << " final " << r.final_loss;
  EXPECT_GT(r.peak_bytes, 0u);
}

}  // namespace
}  // namespace foldcore::nn
