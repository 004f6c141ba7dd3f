// The trainer's per-example clipping and averaging (af2_trainer.h): AlphaFold2 clips each
// example's gradient to global norm 0.1 on its own, then averages the examples.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/json_text.h"
#include "core/tensor.h"
#include "models/alphafold/model/config_yaml.h"
#include "models/alphafold/training/af2_trainer.h"

namespace foldcore::af2 {
namespace {

Tensor flat(const std::vector<float>& v) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, DType::f32);
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

TEST(Af2Trainer, EachExampleIsClippedBeforeAveraging) {
  // Example 1: norm 0.05 (under the limit, kept); example 2: norm 5 (scaled to 0.1).
  const std::vector<float> g1 = {0.03f, 0.04f, 0.f}, g2 = {3.f, 0.f, -4.f};
  std::vector<float> acc(3, 0.f);
  accumulate_clipped_gradient(acc, flat(g1), 0.05, 0.1, 2);
  accumulate_clipped_gradient(acc, flat(g2), 5.0, 0.1, 2);
  const double s2 = 0.1 / (5.0 + 1e-6);
  const double s1 = 0.1 / (0.05 + 1e-6) > 1 ? 1.0 : 0.1 / (0.05 + 1e-6);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(acc[i], (s1 * g1[i] + s2 * g2[i]) / 2, 1e-7) << i;
  // The clipped example contributes norm 0.1 / 2, not 5 / 2: clipping the average instead would
  // have let example 2 dominate and then scaled example 1 away.
  EXPECT_NEAR(std::hypot(acc[0] - g1[0] / 2, acc[1] - g1[1] / 2, acc[2]), 0.05, 1e-6);

  // max_norm ≤ 0: plain averaging.
  std::vector<float> plain(3, 0.f);
  accumulate_clipped_gradient(plain, flat(g2), 5.0, 0.0, 2);
  EXPECT_FLOAT_EQ(plain[0], 1.5f);
  EXPECT_FLOAT_EQ(plain[2], -2.f);

  std::vector<float> wrong(2, 0.f);
  EXPECT_THROW(accumulate_clipped_gradient(wrong, flat(g1), 0.05, 0.1, 1), Error);
}

// A checkpoint's architecture check (af2_trainer.h): the same config matches; the settings a run
// may change on resume (recomputation, kept blocks, the bf16 training streams) match too; a
// checkpoint written before a config key existed (its YAML lacks the key: the default applies)
// matches; another block count, another parameter count or an unreadable meta does not.
TEST(Af2Trainer, CheckpointArchitectureIgnoresRuntimeSettingsAndKeysAddedLater) {
  const Af2Config tiny = tiny_af2_config();
  const int64_t params = 12345;
  const std::string meta = architecture_meta(tiny, params);
  EXPECT_TRUE(same_architecture(meta, tiny, params));

  Af2Config runtime = tiny;
  runtime.recompute_blocks = 1;
  runtime.recompute_keep_blocks = Af2Config::kKeepBlocksAuto;
  runtime.recompute_keep_extra_msa_blocks = 3;
  runtime.bf16_training_streams = !tiny.bf16_training_streams;
  EXPECT_EQ(architecture_meta(runtime, params), meta);
  EXPECT_TRUE(same_architecture(meta, runtime, params));

  // The meta an older build wrote: recompute_keep_extra_msa_blocks as configured (`auto`) and no
  // bf16_training_streams key.
  std::string old_yaml = af2_config_to_yaml(tiny);
  const size_t key = old_yaml.find("bf16_training_streams:");
  ASSERT_NE(key, std::string::npos);
  old_yaml.erase(key, old_yaml.find('\n', key) + 1 - key);
  const size_t extra = old_yaml.find("recompute_keep_extra_msa_blocks: 0");
  ASSERT_NE(extra, std::string::npos);
  old_yaml.replace(extra, std::string("recompute_keep_extra_msa_blocks: 0").size(), "recompute_keep_extra_msa_blocks: auto");
  const std::string old_meta =
      "{\"architecture\": " + json_string(old_yaml) + ", \"num_parameters\": " + std::to_string(params) + "}";
  EXPECT_NE(old_meta, meta);
  EXPECT_TRUE(same_architecture(old_meta, tiny, params));
  EXPECT_TRUE(same_architecture(old_meta, runtime, params));

  Af2Config deeper = tiny;
  deeper.num_evoformer_blocks = 2;
  EXPECT_FALSE(same_architecture(meta, deeper, params));
  EXPECT_FALSE(same_architecture(old_meta, deeper, params));
  EXPECT_FALSE(same_architecture(meta, tiny, params + 1));
  EXPECT_FALSE(same_architecture(old_meta, tiny, params + 1));
  EXPECT_FALSE(same_architecture("{}", tiny, params));
  EXPECT_FALSE(same_architecture("{\"architecture\": \"c_m: [\", \"num_parameters\": 12345}", tiny, params));
  EXPECT_FALSE(same_architecture("{\"architecture\": \"unterminated", tiny, params));
}

}  // namespace
}  // namespace foldcore::af2
