// recompute_keep_blocks: auto (Af2Config::kKeepBlocksAuto). With recomputation, an Evoformer block
// whose activations are kept instead skips its second forward in the backward (all 48 kept: 17%
// fewer launches in a crop-256 step) and costs what the block holds, about 1.4 GiB at crop 256 in
// bf16 (docs/benchmarks.md). `auto` keeps as many as the device has room for, from two steps:
//
//   1. the first training step (one af2_train_step) keeps one block and measures what it leaves
//      allocated (EvoformerStack::max_kept_block_bytes: `block`) and the step's allocator peak
//      (peak₁); the second keeps
//        K₁ = 1 + floor((kBudgetFraction · usable − peak₁) / (kBlockMargin · block)),
//      clamped to [0, blocks], where usable = the bytes the allocator holds in use plus what the
//      device can still give (core/memory_info.h: the driver's free memory and the allocator's
//      cached blocks on CUDA; MemAvailable on the CPU);
//   2. when 1 < K₁ < blocks, the second step's peak (peak₂) gives what one more kept block really
//      costs at the peak, slope = (peak₂ − peak₁) / (K₁ − 1) (`block` counts the allocator's
//      rounded-up blocks, which a later block partly reuses: 1,679 MiB against a slope of 1,452 at
//      crop 256, docs/benchmarks.md), and every later step keeps
//        K₂ = K₁ + floor((kBudgetFraction · usable − peak₂) / (kBlockMargin · slope)),
//      clamped to [0, blocks] (the slope no less than half a block: a peak that did not grow with
//      the kept blocks says nothing of the next ones). Otherwise K₂ = K₁.
//
// recompute_keep_extra_msa_blocks: auto does the same for the extra-MSA stack's blocks, in the
// same two steps: the first keeps one block of each stack set to auto and measures each stack's
// block (`extra`, `block`); the fit then fills the budget with extra-MSA blocks first, Evoformer
// blocks with what is left (fit_kept_blocks). An extra-MSA block saves more time for about the same
// memory: on the H200 the 4 extra-MSA blocks' forward took 0.07 s of a crop-256 step, 17 ms per
// block, an Evoformer block's 10 ms (run 3, docs/benchmarks.md); one kept block holds 1,729 MiB
// against 1,615 (bf16, by the emulation's count, docs/benchmarks.md "Kept blocks instead of
// recomputed ones"). The second step's peak scales both costs by one factor:
// s = (peak₂ − peak₁) / Σ (kept₂ − kept₁)·cost over the stacks (≥ ½), the single-stack slope
// above in another form.
//
// A run's samples have fixed shapes (the crop, the MSA sizes and the templates padded), so its
// first steps predict the others. Kept blocks change no value (the gradients are the recomputed
// ones, Af2TrainMemory tests), so ranks may keep different counts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"

namespace foldcore::af2 {

class AlphaFold;

// One stack's share of the kept blocks: its blocks, how many it keeps, what one kept block costs
// at the step's peak (bytes).
struct KeptBlocks {
  int64_t num_blocks = 0;
  int64_t kept = 0;
  double cost = 0;
};
// Adds kept blocks to the stacks in list order (all of the first stack's before the next one's)
// while the budget, KeepBlocksAuto::kBudgetFraction · usable_bytes, has room beyond `peak` (a
// step's peak with the current counts) at kBlockMargin · cost per block; where the peak is over
// the budget, removes them in reverse order until it is not. A stack with no blocks or no
// measured cost keeps none.
void fit_kept_blocks(std::vector<KeptBlocks>& stacks, int64_t peak, int64_t usable_bytes);
// The second step's refinement: `stacks` hold the counts of that step (peak_second) and the
// measured costs, kept_first the counts of the first step (peak_first). When every count grew or
// stayed and the costs of the added blocks are positive, the costs are scaled by
// s = max((peak_second − peak_first) / Σ (kept − kept_first)·cost, ½) and the stacks fitted again
// from peak_second; otherwise left as they are.
void refine_kept_blocks(std::vector<KeptBlocks>& stacks, const std::vector<int64_t>& kept_first, int64_t peak_first,
                        int64_t peak_second, int64_t usable_bytes);

// K₁ of step 1 above (one stack). block_bytes <= 0 (nothing measured) or no blocks: 0.
int64_t fitting_keep_blocks(int64_t num_blocks, int64_t block_bytes, int64_t peak_with_one, int64_t usable_bytes);
// K₂ of step 2 above (one stack), from a step that kept `kept` blocks and peaked at peak_with_kept.
int64_t refined_keep_blocks(int64_t num_blocks, int64_t block_bytes, int64_t peak_with_one, int64_t kept,
                            int64_t peak_with_kept, int64_t usable_bytes);

class KeepBlocksAuto {
 public:
  static constexpr double kBudgetFraction = 0.95;  // of the usable bytes: the allocator's rounding, other processes
  static constexpr double kBlockMargin = 1.05;     // per kept block, over the measured cost

  // Active when the model's config says auto for the Evoformer's or the extra-MSA stack's kept
  // blocks (a stack with a fixed count keeps it) and it recomputes (recompute_blocks > 0);
  // otherwise every call is a no-op. `usable` returns the usable bytes (above); default: measured
  // on `device`.
  KeepBlocksAuto(AlphaFold& model, Device device, std::function<int64_t()> usable = {});

  bool active() const { return active_; }
  // Before a training step: while measuring, sets the step's kept blocks and resets the allocator's
  // peak.
  void before_step();
  // After a training step: while measuring, reads the step's peak and sets the next count on the
  // model. Returns true on the call that settled it (resolved() from then on; the later calls are
  // no-ops).
  bool after_step();
  bool resolved() const { return stage_ == Stage::resolved; }
  // The Evoformer's kept blocks (its first estimate, one block's bytes), and the extra-MSA stack's.
  int64_t kept_blocks() const { return evoformer_.kept; }
  int64_t first_estimate() const { return evoformer_.first; }
  int64_t block_bytes() const { return evoformer_.bytes; }
  int64_t kept_extra_msa_blocks() const { return extra_msa_.kept; }
  int64_t extra_msa_first_estimate() const { return extra_msa_.first; }
  int64_t extra_msa_block_bytes() const { return extra_msa_.bytes; }
  int64_t peak_with_one() const { return peak_with_one_; }
  int64_t peak_with_first() const { return peak_with_first_; }
  int64_t usable_bytes() const { return usable_bytes_; }
  // One line for the log: what was measured and what was chosen.
  std::string summary() const;

 private:
  enum class Stage { one, first, resolved };  // the step being measured: one kept block, K₁ kept
  // A stack whose kept blocks auto decides.
  struct Stack {
    const char* what = "";
    bool automatic = false;
    int64_t num = 0, kept = 0, first = 0, bytes = 0;
    void (AlphaFold::*set_kept)(int64_t) = nullptr;     // the model's setter of this stack's count
    int64_t (AlphaFold::*kept_bytes)() const = nullptr;  // what one of its kept blocks held
  };
  int64_t step_peak() const;
  // The automatic stacks in fitting order: the extra-MSA stack's blocks first.
  std::vector<Stack*> planned();
  void apply(const Stack& s) { (model_->*s.set_kept)(s.kept); }

  AlphaFold* model_;
  Device device_;
  std::function<int64_t()> usable_;
  bool active_ = false, measuring_ = false;
  Stage stage_ = Stage::one;
  Stack evoformer_, extra_msa_;
  int64_t peak_with_one_ = 0, peak_with_first_ = 0, usable_bytes_ = 0;
};

}  // namespace foldcore::af2
