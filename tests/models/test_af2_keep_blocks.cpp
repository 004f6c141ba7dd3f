// recompute_keep_blocks: auto's arithmetic (models/alphafold/training/keep_blocks.h) and when it
// acts. What a kept block holds and how the step's peak grows with it are measured on the
// training fixture in test_af2_train_memory.cpp (AutoKeepBlocksMeasuresOneBlockAndKeepsWhatFits).
#include <gtest/gtest.h>

#include "autograd/param_store.h"
#include "core/philox.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/training/keep_blocks.h"

namespace foldcore::af2 {
namespace {

// The usable bytes that leave room for the measuring step's peak and `more` blocks beyond it.
int64_t usable_for(int64_t peak, int64_t block, double more) {
  return static_cast<int64_t>((static_cast<double>(peak) + more * KeepBlocksAuto::kBlockMargin * static_cast<double>(block)) /
                              KeepBlocksAuto::kBudgetFraction);
}

TEST(KeepBlocksAuto, FittingCountIsOnePlusTheBlocksTheRoomHolds) {
  const int64_t block = int64_t{1493} << 20, peak = int64_t{7000} << 20;
  EXPECT_EQ(fitting_keep_blocks(48, block, peak, usable_for(peak, block, 0.5)), 1);
  EXPECT_EQ(fitting_keep_blocks(48, block, peak, usable_for(peak, block, 1.5)), 2);
  EXPECT_EQ(fitting_keep_blocks(48, block, peak, usable_for(peak, block, 38.5)), 39);
  EXPECT_EQ(fitting_keep_blocks(48, block, peak, usable_for(peak, block, 100.5)), 48);  // every block
  // Not even the measuring step's one block fits: none kept.
  EXPECT_EQ(fitting_keep_blocks(48, block, peak, usable_for(peak, block, -0.5)), 0);
  // Nothing measured, or no blocks: none.
  EXPECT_EQ(fitting_keep_blocks(48, 0, peak, usable_for(peak, block, 10.5)), 0);
  EXPECT_EQ(fitting_keep_blocks(0, block, peak, usable_for(peak, block, 10.5)), 0);
  // An H100's 80 GB at crop 256, with the emulated step's numbers (docs/benchmarks.md: 5,576 MiB
  // with every block recomputed, 1,493 MiB held by a kept block): between 40 and 48.
  const int64_t k = fitting_keep_blocks(48, block, (int64_t{5576} << 20) + block, int64_t{80} * 1000 * 1000 * 1000);
  EXPECT_GE(k, 40);
  EXPECT_LT(k, 48);
}

TEST(KeepBlocksAuto, ActsOnlyOnAutoWithRecomputation) {
  for (const auto& [keep, recompute, active] :
       {std::tuple{Af2Config::kKeepBlocksAuto, 1, true}, std::tuple{Af2Config::kKeepBlocksAuto, 0, false},
        std::tuple{int64_t{0}, 1, false}, std::tuple{int64_t{3}, 1, false}}) {
    SCOPED_TRACE(std::to_string(keep) + " kept, recompute " + std::to_string(recompute));
    Af2Config config = tiny_af2_config();
    config.recompute_keep_blocks = keep;
    config.recompute_blocks = recompute;
    autograd::ParamStore params(Device::cpu());
    Generator rng(1);
    AlphaFold model(nn::Scope{&params, &rng, nullptr, ""}, config);
    params.finalize();
    KeepBlocksAuto plan(model, Device::cpu(), [] { return int64_t{1} << 40; });
    EXPECT_EQ(plan.active(), active);
    plan.before_step();
    // Inactive: the configured count stays; active: the measuring step keeps one block.
    EXPECT_EQ(model.config().recompute_keep_blocks, active ? 1 : keep);
    EXPECT_FALSE(plan.resolved());
  }
}

}  // namespace
}  // namespace foldcore::af2
