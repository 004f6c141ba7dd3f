// recompute_keep_blocks: auto (Af2Config::kKeepBlocksAuto). With recomputation, an Evoformer block
// whose activations are kept instead skips its second forward in the backward (all 48 kept: 17%
// fewer launches in a crop-256 step) and costs what the block holds, about 1.4 GiB at crop 256 in
// bf16 (docs/benchmarks.md). `auto` keeps as many as the device has room for:
//
//   1. the first training step (one af2_train_step) keeps one block and measures what it leaves
//      allocated (EvoformerStack::max_kept_block_bytes) and the step's allocator peak;
//   2. every later step keeps
//        K = 1 + floor((kBudgetFraction · usable − peak₁) / (kBlockMargin · block)),
//      clamped to [0, blocks], where usable = the bytes the allocator holds in use now plus what
//      the device can still give (core/memory_info.h: the driver's free memory and the
//      allocator's cached blocks on CUDA; MemAvailable on the CPU), and peak₁ the first step's
//      peak of bytes in use.
//
// A step's peak grows by about one block's bytes per kept block (1,451 MiB per block between 24
// and 48 kept at crop 256, against 1,493 MiB held by one: docs/benchmarks.md), and the samples of
// a run have fixed shapes (the crop, the MSA sizes and the templates padded), so the first step
// predicts the others. Kept blocks change no value (the gradients are the recomputed ones,
// Af2TrainMemory tests), so ranks may keep different counts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/device.h"

namespace foldcore::af2 {

class AlphaFold;

// The kept blocks that fit (step 2 above). block_bytes <= 0 (nothing measured): 0.
int64_t fitting_keep_blocks(int64_t num_blocks, int64_t block_bytes, int64_t peak_with_one, int64_t usable_bytes);

class KeepBlocksAuto {
 public:
  static constexpr double kBudgetFraction = 0.95;  // of the usable bytes: the allocator's rounding, other processes
  static constexpr double kBlockMargin = 1.05;     // per kept block, over the measured one

  // Active when the model's config says auto and it recomputes (recompute_blocks > 0); otherwise
  // every call is a no-op. `usable` returns the usable bytes (above); default: measured on `device`.
  KeepBlocksAuto(AlphaFold& model, Device device, std::function<int64_t()> usable = {});

  bool active() const { return active_; }
  // Before a training step: the first one keeps one block, with the allocator's peak reset.
  void before_step();
  // After a training step: the first one resolves K and sets it on the model (later: no-op).
  // Returns true on the call that resolved.
  bool after_step();
  bool resolved() const { return resolved_; }
  int64_t kept_blocks() const { return kept_; }
  int64_t block_bytes() const { return block_bytes_; }
  int64_t peak_with_one() const { return peak_with_one_; }
  int64_t usable_bytes() const { return usable_bytes_; }
  // One line for the log: what was measured and what was chosen.
  std::string summary() const;

 private:
  AlphaFold* model_;
  Device device_;
  std::function<int64_t()> usable_;
  bool active_ = false, resolved_ = false, measuring_ = false;
  int64_t num_blocks_ = 0, kept_ = 0, block_bytes_ = 0, peak_with_one_ = 0, usable_bytes_ = 0;
};

}  // namespace foldcore::af2
