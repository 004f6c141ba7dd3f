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

// Two stacks (recompute_keep_extra_msa_blocks: auto too): the extra-MSA blocks take the room
// first, the Evoformer's what is left; over budget, the Evoformer's go first. Costs: an extra-MSA
// block 2,000 MiB, an Evoformer block 1,400 MiB, one of each kept by the measuring step.
TEST(KeepBlocksAuto, TwoStacksFillTheRoomExtraMsaBlocksFirst) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  const double extra = 2000.0 * kMiB, evo = 1400.0 * kMiB;
  const int64_t peak = 9000 * kMiB;
  // The usable bytes that leave `room` (bytes, before the margin) beyond the peak.
  auto usable = [&](double room) {
    return static_cast<int64_t>((static_cast<double>(peak) + KeepBlocksAuto::kBlockMargin * room) /
                                KeepBlocksAuto::kBudgetFraction);
  };
  auto fit = [&](double room, int64_t extra_blocks = 4) {
    std::vector<KeptBlocks> s{{extra_blocks, std::min<int64_t>(1, extra_blocks), extra}, {48, 1, evo}};
    fit_kept_blocks(s, peak, usable(room));
    return std::pair{s[0].kept, s[1].kept};
  };
  EXPECT_EQ(fit(3 * extra + 10.5 * evo), std::pair(int64_t{4}, int64_t{11}));  // all extra-MSA blocks, then 10 more
  EXPECT_EQ(fit(2.5 * extra), std::pair(int64_t{3}, int64_t{1}));             // the rest holds no Evoformer block
  // Two more extra-MSA blocks; the rest (1.2 Evoformer blocks, less than an extra-MSA block) holds one.
  EXPECT_EQ(fit(2 * extra + 1.2 * evo), std::pair(int64_t{3}, int64_t{2}));
  EXPECT_EQ(fit(100 * extra + 100 * evo), std::pair(int64_t{4}, int64_t{48}));
  EXPECT_EQ(fit(0.2 * evo), std::pair(int64_t{1}, int64_t{1}));
  // Over budget: the Evoformer's block first, then the extra-MSA stack's.
  EXPECT_EQ(fit(-0.5 * evo), std::pair(int64_t{1}, int64_t{0}));
  EXPECT_EQ(fit(-1.5 * evo), std::pair(int64_t{0}, int64_t{0}));
  // No extra-MSA blocks: the Evoformer alone, as fitting_keep_blocks.
  EXPECT_EQ(fit(10.5 * evo, 0), std::pair(int64_t{0}, int64_t{11}));
  EXPECT_EQ(fit(10.5 * evo, 0).second, fitting_keep_blocks(48, static_cast<int64_t>(evo), peak, usable(10.5 * evo)));
}

// The second step: both stacks' costs scaled by the growth of the peak over what the added blocks
// were measured to cost.
TEST(KeepBlocksAuto, TwoStacksRefineWithOneScale) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  const double extra = 2000.0 * kMiB, evo = 1400.0 * kMiB;
  const int64_t peak1 = 9000 * kMiB;
  // The second step kept 4 and 11: its peak grew by 0.9 of their measured cost.
  const double scale = 0.9;
  const int64_t peak2 = peak1 + static_cast<int64_t>(scale * (3 * extra + 10 * evo));
  auto usable = [&](double room) {
    return static_cast<int64_t>((static_cast<double>(peak2) + KeepBlocksAuto::kBlockMargin * room) /
                                KeepBlocksAuto::kBudgetFraction);
  };
  auto refine = [&](double room, int64_t extra_kept, int64_t evo_kept, int64_t peak) {
    std::vector<KeptBlocks> s{{4, extra_kept, extra}, {48, evo_kept, evo}};
    refine_kept_blocks(s, {1, 1}, peak1, peak, usable(room));
    return std::pair{s[0].kept, s[1].kept};
  };
  // Room for 5.5 Evoformer blocks at their real cost: 5 more (at the measured cost only 4).
  EXPECT_EQ(refine(5.5 * scale * evo, 4, 11, peak2), std::pair(int64_t{4}, int64_t{16}));
  // Over budget by 1.5 real blocks: two fewer.
  EXPECT_EQ(refine(-1.5 * scale * evo, 4, 11, peak2), std::pair(int64_t{4}, int64_t{9}));
  // A count that fell says nothing of the slope: unchanged.
  EXPECT_EQ(refine(50 * evo, 4, 0, peak2), std::pair(int64_t{4}, int64_t{0}));
  // Only the Evoformer's count grew (a one-block extra-MSA stack, kept whole): its own slope, as
  // refined_keep_blocks.
  std::vector<KeptBlocks> s{{1, 1, extra}, {48, 11, evo}};
  const int64_t peak_evo = peak1 + static_cast<int64_t>(10 * scale * evo);
  refine_kept_blocks(s, {1, 1}, peak1, peak_evo, usable(2.5 * scale * evo));
  EXPECT_EQ(s[1].kept, refined_keep_blocks(48, static_cast<int64_t>(evo), peak1, 11, peak_evo, usable(2.5 * scale * evo)));
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
  // The extra-MSA stack's count alone on auto: its measuring step keeps one extra-MSA block, the
  // Evoformer keeps its fixed count.
  Af2Config config = tiny_af2_config();
  config.recompute_blocks = 1;
  config.recompute_keep_blocks = 0;
  config.recompute_keep_extra_msa_blocks = Af2Config::kKeepBlocksAuto;
  autograd::ParamStore params(Device::cpu());
  Generator rng(1);
  AlphaFold model(nn::Scope{&params, &rng, nullptr, ""}, config);
  params.finalize();
  KeepBlocksAuto plan(model, Device::cpu(), [] { return int64_t{1} << 40; });
  EXPECT_TRUE(plan.active());
  plan.before_step();
  EXPECT_EQ(model.config().recompute_keep_extra_msa_blocks, 1);
  EXPECT_EQ(model.config().recompute_keep_blocks, 0);
}

}  // namespace
}  // namespace foldcore::af2
