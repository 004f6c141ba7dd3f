// recompute_keep_blocks: auto's arithmetic (models/alphafold/training/keep_blocks.h), its two
// estimates, and when it acts. What a kept block holds and how the step's peak grows with it are measured on the
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
}

// Step 2: the observed growth of the peak per kept block replaces the measured block. The numbers of
// the emulated crop-256 step with an H100's memory (docs/benchmarks.md): one kept block counted
// 1,679 MiB, peak 6,331 MiB with one kept, 64,416 MiB with the first estimate's 41: the slope,
// 1,452 MiB, leaves room for all 48.
TEST(KeepBlocksAuto, RefinedCountUsesThePeaksSlope) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  const int64_t block = 1679 * kMiB, peak1 = 6331 * kMiB, usable = 81559 * kMiB;
  EXPECT_EQ(fitting_keep_blocks(48, block, peak1, usable), 41);
  EXPECT_EQ(refined_keep_blocks(48, block, peak1, 41, 64416 * kMiB, usable), 48);
  // A slope of 2 GiB per block from 10 kept: the room beyond peak₂ holds 4 more, not all.
  const int64_t slope = 2048 * kMiB, peak10 = peak1 + 9 * slope;
  EXPECT_EQ(refined_keep_blocks(48, block, peak1, 10, peak10, usable_for(peak10, slope, 4.5)), 14);
  // Over budget after all: fewer than the first estimate.
  EXPECT_EQ(refined_keep_blocks(48, block, peak1, 10, peak10, usable_for(peak10, slope, -2.5)), 7);
  // A peak that did not grow: half a block per block, not nothing.
  EXPECT_EQ(refined_keep_blocks(48, block, peak1, 10, peak1, usable_for(peak1, block / 2, 3.5)), 13);
  // One kept (no slope to read): unchanged.
  EXPECT_EQ(refined_keep_blocks(48, block, peak1, 1, peak1, int64_t{1} << 50), 1);
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
    EXPECT_EQ(plan.resolved(), !active);  // nothing to measure when inactive
  }
}

}  // namespace
}  // namespace foldcore::af2
