#include "models/alphafold/training/keep_blocks.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/allocator.h"
#include "core/memory_info.h"
#include "models/alphafold/model/alphafold.h"

namespace foldcore::af2 {
namespace {

// kept + the blocks of `cost` bytes each that the budget has room for beyond `peak` (negative room:
// fewer), clamped to [0, num_blocks].
int64_t kept_with_room(int64_t num_blocks, int64_t kept, double cost, int64_t peak, int64_t usable_bytes) {
  const double room = KeepBlocksAuto::kBudgetFraction * static_cast<double>(usable_bytes) - static_cast<double>(peak);
  const double more = std::floor(room / (KeepBlocksAuto::kBlockMargin * cost));
  return static_cast<int64_t>(std::clamp(static_cast<double>(kept) + more, 0.0, static_cast<double>(num_blocks)));
}

}  // namespace

int64_t fitting_keep_blocks(int64_t num_blocks, int64_t block_bytes, int64_t peak_with_one, int64_t usable_bytes) {
  if (block_bytes <= 0 || num_blocks <= 0) return 0;
  return kept_with_room(num_blocks, 1, static_cast<double>(block_bytes), peak_with_one, usable_bytes);
}

int64_t refined_keep_blocks(int64_t num_blocks, int64_t block_bytes, int64_t peak_with_one, int64_t kept,
                            int64_t peak_with_kept, int64_t usable_bytes) {
  if (kept <= 1 || block_bytes <= 0) return std::clamp<int64_t>(kept, 0, num_blocks);
  const double slope = std::max(static_cast<double>(peak_with_kept - peak_with_one) / static_cast<double>(kept - 1),
                                0.5 * static_cast<double>(block_bytes));
  return kept_with_room(num_blocks, kept, slope, peak_with_kept, usable_bytes);
}

KeepBlocksAuto::KeepBlocksAuto(AlphaFold& model, Device device, std::function<int64_t()> usable)
    : model_(&model), device_(device), usable_(std::move(usable)) {
  const Af2Config& c = model.config();
  active_ = c.recompute_keep_blocks == Af2Config::kKeepBlocksAuto && c.recompute_blocks > 0;
  num_blocks_ = c.num_evoformer_blocks;
  if (!active_) stage_ = Stage::resolved;
  if (!usable_)
    usable_ = [device] {
      return device_memory_available(device) + static_cast<int64_t>(default_allocator(device).stats().current);
    };
}

int64_t KeepBlocksAuto::step_peak() const {
  synchronize(device_);
  return static_cast<int64_t>(default_allocator(device_).stats().peak);
}

void KeepBlocksAuto::before_step() {
  if (resolved()) return;
  if (stage_ == Stage::one) model_->set_recompute_keep_blocks(std::min<int64_t>(1, num_blocks_));
  synchronize(device_);
  default_allocator(device_).reset_peak();
  measuring_ = true;
}

bool KeepBlocksAuto::after_step() {
  if (resolved() || !measuring_) return false;
  measuring_ = false;
  usable_bytes_ = usable_();
  if (stage_ == Stage::one) {
    peak_with_one_ = step_peak();
    block_bytes_ = model_->max_kept_block_bytes();
    first_ = kept_ = fitting_keep_blocks(num_blocks_, block_bytes_, peak_with_one_, usable_bytes_);
    model_->set_recompute_keep_blocks(kept_);
    // A second measurement only where a slope can be read and more (or fewer) blocks could follow.
    stage_ = kept_ > 1 && kept_ < num_blocks_ ? Stage::first : Stage::resolved;
    return resolved();
  }
  peak_with_first_ = step_peak();
  kept_ = refined_keep_blocks(num_blocks_, block_bytes_, peak_with_one_, first_, peak_with_first_, usable_bytes_);
  model_->set_recompute_keep_blocks(kept_);
  stage_ = Stage::resolved;
  return true;
}

std::string KeepBlocksAuto::summary() const {
  constexpr double kMiB = 1 << 20;
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(0);
  s << "recompute_keep_blocks auto: " << kept_ << " of " << num_blocks_ << " Evoformer blocks kept (one kept block holds "
    << static_cast<double>(block_bytes_) / kMiB << " MiB; the first step's peak with one kept "
    << static_cast<double>(peak_with_one_) / kMiB << " MiB";
  if (peak_with_first_ > 0)
    s << ", the second's with " << first_ << " kept " << static_cast<double>(peak_with_first_) / kMiB << " MiB";
  s << "; " << static_cast<double>(usable_bytes_) / kMiB << " MiB usable on " << device_.str() << ")";
  return s.str();
}

}  // namespace foldcore::af2
