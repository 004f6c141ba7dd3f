#include "models/alphafold/training/keep_blocks.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/allocator.h"
#include "core/memory_info.h"
#include "models/alphafold/model/alphafold.h"

namespace foldcore::af2 {

int64_t fitting_keep_blocks(int64_t num_blocks, int64_t block_bytes, int64_t peak_with_one, int64_t usable_bytes) {
  if (block_bytes <= 0 || num_blocks <= 0) return 0;
  const double room = KeepBlocksAuto::kBudgetFraction * static_cast<double>(usable_bytes) -
                      static_cast<double>(peak_with_one);
  if (room < 0) return 0;  // even the measuring step's one block was too many
  const double more = std::floor(room / (KeepBlocksAuto::kBlockMargin * static_cast<double>(block_bytes)));
  return std::min<int64_t>(num_blocks, 1 + static_cast<int64_t>(std::min(more, 1e9)));
}

KeepBlocksAuto::KeepBlocksAuto(AlphaFold& model, Device device, std::function<int64_t()> usable)
    : model_(&model), device_(device), usable_(std::move(usable)) {
  const Af2Config& c = model.config();
  active_ = c.recompute_keep_blocks == Af2Config::kKeepBlocksAuto && c.recompute_blocks > 0;
  num_blocks_ = c.num_evoformer_blocks;
  if (!usable_)
    usable_ = [device] {
      return device_memory_available(device) + static_cast<int64_t>(default_allocator(device).stats().current);
    };
}

void KeepBlocksAuto::before_step() {
  if (!active_ || resolved_) return;
  model_->set_recompute_keep_blocks(std::min<int64_t>(1, num_blocks_));
  synchronize(device_);
  default_allocator(device_).reset_peak();
  measuring_ = true;
}

bool KeepBlocksAuto::after_step() {
  if (!active_ || resolved_ || !measuring_) return false;
  synchronize(device_);
  peak_with_one_ = static_cast<int64_t>(default_allocator(device_).stats().peak);
  block_bytes_ = model_->max_kept_block_bytes();
  usable_bytes_ = usable_();
  kept_ = fitting_keep_blocks(num_blocks_, block_bytes_, peak_with_one_, usable_bytes_);
  model_->set_recompute_keep_blocks(kept_);
  resolved_ = true;
  measuring_ = false;
  return true;
}

std::string KeepBlocksAuto::summary() const {
  constexpr double kMiB = 1 << 20;
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(0);
  s << "recompute_keep_blocks auto: " << kept_ << " of " << num_blocks_ << " Evoformer blocks kept (one kept block holds "
    << static_cast<double>(block_bytes_) / kMiB << " MiB; the first step's peak with one kept "
    << static_cast<double>(peak_with_one_) / kMiB << " MiB of " << static_cast<double>(usable_bytes_) / kMiB
    << " MiB usable on " << device_.str() << ")";
  return s.str();
}

}  // namespace foldcore::af2
