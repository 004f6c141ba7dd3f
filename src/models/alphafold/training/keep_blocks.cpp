#include "models/alphafold/training/keep_blocks.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/allocator.h"
#include "core/error.h"
#include "core/memory_info.h"
#include "models/alphafold/model/alphafold.h"

namespace foldcore::af2 {

void fit_kept_blocks(std::vector<KeptBlocks>& stacks, int64_t peak, int64_t usable_bytes) {
  double room = KeepBlocksAuto::kBudgetFraction * static_cast<double>(usable_bytes) - static_cast<double>(peak);
  for (KeptBlocks& s : stacks)
    s.kept = s.num_blocks <= 0 || s.cost <= 0 ? 0 : std::clamp<int64_t>(s.kept, 0, s.num_blocks);
  // From here a stack without blocks or cost keeps 0 and gets none: every add and removal below is
  // bounded by num_blocks − kept or by kept, and its room by a positive cost.
  if (room >= 0) {
    for (KeptBlocks& s : stacks) {
      if (s.cost <= 0) continue;
      const double each = KeepBlocksAuto::kBlockMargin * s.cost;
      const int64_t add =
          static_cast<int64_t>(std::min(std::floor(room / each), static_cast<double>(s.num_blocks - s.kept)));
      s.kept += add;
      room -= static_cast<double>(add) * each;
    }
    return;
  }
  for (auto it = stacks.rbegin(); it != stacks.rend() && room < 0; ++it) {
    if (it->cost <= 0) continue;
    const double each = KeepBlocksAuto::kBlockMargin * it->cost;
    const int64_t remove = static_cast<int64_t>(std::min(std::ceil(-room / each), static_cast<double>(it->kept)));
    it->kept -= remove;
    room += static_cast<double>(remove) * each;
  }
}

void refine_kept_blocks(std::vector<KeptBlocks>& stacks, const std::vector<int64_t>& kept_first, int64_t peak_first,
                        int64_t peak_second, int64_t usable_bytes) {
  FC_CHECK(kept_first.size() == stacks.size(), "refine_kept_blocks: ", kept_first.size(), " first counts for ",
           stacks.size(), " stacks");
  double added = 0;
  for (size_t i = 0; i < stacks.size(); ++i) {
    if (stacks[i].kept < kept_first[i]) return;  // a count fell: no slope to read
    added += static_cast<double>(stacks[i].kept - kept_first[i]) * stacks[i].cost;
  }
  if (added <= 0) return;
  const double scale = std::max(static_cast<double>(peak_second - peak_first) / added, 0.5);
  for (KeptBlocks& s : stacks) s.cost *= scale;
  fit_kept_blocks(stacks, peak_second, usable_bytes);
}

int64_t fitting_keep_blocks(int64_t num_blocks, int64_t block_bytes, int64_t peak_with_one, int64_t usable_bytes) {
  if (block_bytes <= 0 || num_blocks <= 0) return 0;
  std::vector<KeptBlocks> one{{num_blocks, 1, static_cast<double>(block_bytes)}};
  fit_kept_blocks(one, peak_with_one, usable_bytes);
  return one[0].kept;
}

int64_t refined_keep_blocks(int64_t num_blocks, int64_t block_bytes, int64_t peak_with_one, int64_t kept,
                            int64_t peak_with_kept, int64_t usable_bytes) {
  if (kept <= 1 || block_bytes <= 0) return std::clamp<int64_t>(kept, 0, num_blocks);
  std::vector<KeptBlocks> one{{num_blocks, kept, static_cast<double>(block_bytes)}};
  refine_kept_blocks(one, {1}, peak_with_one, peak_with_kept, usable_bytes);
  return one[0].kept;
}

KeepBlocksAuto::KeepBlocksAuto(AlphaFold& model, Device device, std::function<int64_t()> usable)
    : model_(&model), device_(device), usable_(std::move(usable)) {
  const Af2Config& c = model.config();
  evoformer_ = {"Evoformer", c.recompute_keep_blocks == Af2Config::kKeepBlocksAuto, c.num_evoformer_blocks, 0, 0, 0,
                &AlphaFold::set_recompute_keep_blocks, &AlphaFold::max_kept_block_bytes};
  extra_msa_ = {"extra-MSA", c.recompute_keep_extra_msa_blocks == Af2Config::kKeepBlocksAuto,
                c.num_extra_msa_blocks, 0, 0, 0, &AlphaFold::set_recompute_keep_extra_msa_blocks,
                &AlphaFold::max_kept_extra_msa_block_bytes};
  active_ = (evoformer_.automatic || extra_msa_.automatic) && c.recompute_blocks > 0;
  if (!active_) stage_ = Stage::resolved;
  if (!usable_)
    usable_ = [device] {
      return device_memory_available(device) + static_cast<int64_t>(default_allocator(device).stats().current);
    };
}

std::vector<KeepBlocksAuto::Stack*> KeepBlocksAuto::planned() {
  std::vector<Stack*> out;
  for (Stack* s : {&extra_msa_, &evoformer_})
    if (s->automatic) out.push_back(s);
  return out;
}

int64_t KeepBlocksAuto::step_peak() const {
  synchronize(device_);
  return static_cast<int64_t>(default_allocator(device_).stats().peak);
}

void KeepBlocksAuto::before_step() {
  if (resolved()) return;
  if (stage_ == Stage::one)
    for (Stack* s : planned()) {
      s->kept = std::min<int64_t>(1, s->num);
      apply(*s);
    }
  synchronize(device_);
  default_allocator(device_).reset_peak();
  measuring_ = true;
}

bool KeepBlocksAuto::after_step() {
  if (resolved() || !measuring_) return false;
  measuring_ = false;
  usable_bytes_ = usable_();
  const std::vector<Stack*> stacks = planned();
  if (stage_ == Stage::one)
    for (Stack* s : {&extra_msa_, &evoformer_}) s->bytes = (model_->*s->kept_bytes)();
  std::vector<KeptBlocks> fit;
  for (const Stack* s : stacks) fit.push_back({s->num, s->kept, static_cast<double>(s->bytes)});
  if (stage_ == Stage::one) {
    peak_with_one_ = step_peak();
    fit_kept_blocks(fit, peak_with_one_, usable_bytes_);
    // A second measurement only where a slope can be read (no count fell, one grew) and more (or
    // fewer) blocks could follow.
    bool grew = false, fell = false, room_left = false;
    for (size_t i = 0; i < stacks.size(); ++i) {
      grew |= fit[i].kept > stacks[i]->kept;
      fell |= fit[i].kept < stacks[i]->kept;
      room_left |= fit[i].kept < stacks[i]->num;
      stacks[i]->first = stacks[i]->kept = fit[i].kept;
      apply(*stacks[i]);
    }
    stage_ = grew && !fell && room_left ? Stage::first : Stage::resolved;
    return resolved();
  }
  peak_with_first_ = step_peak();
  std::vector<int64_t> one;
  for (const Stack* s : stacks) one.push_back(std::min<int64_t>(1, s->num));
  refine_kept_blocks(fit, one, peak_with_one_, peak_with_first_, usable_bytes_);
  for (size_t i = 0; i < stacks.size(); ++i) {
    stacks[i]->kept = fit[i].kept;
    apply(*stacks[i]);
  }
  stage_ = Stage::resolved;
  return true;
}

std::string KeepBlocksAuto::summary() const {
  constexpr double kMiB = 1 << 20;
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(0);
  s << "recompute_keep_blocks auto:";
  const char* sep = " ";
  for (const Stack* st : {&extra_msa_, &evoformer_}) {
    if (!st->automatic) continue;
    s << sep << st->kept << " of " << st->num << " " << st->what << " blocks kept (one kept block holds "
      << static_cast<double>(st->bytes) / kMiB << " MiB)";
    sep = ", ";
  }
  s << "; the first step's peak with one kept " << static_cast<double>(peak_with_one_) / kMiB << " MiB";
  if (peak_with_first_ > 0) {
    s << ", the second's with";
    sep = " ";
    for (const Stack* st : {&extra_msa_, &evoformer_})
      if (st->automatic) {
        s << sep << st->first << " " << st->what;
        sep = " and ";
      }
    s << " kept " << static_cast<double>(peak_with_first_) / kMiB << " MiB";
  }
  s << "; " << static_cast<double>(usable_bytes_) / kMiB << " MiB usable on " << device_.str();
  return s.str();
}

}  // namespace foldcore::af2
