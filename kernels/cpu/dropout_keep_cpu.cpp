#include "kernels/cpu/dropout_keep_cpu.h"

namespace foldcore::ops::cpu {
namespace {

// The four keep decisions of Philox block b of stream (seed, offset): indexes 4b..4b+3 of an
// unshared mask (dropout_keep4).
inline void keep_block(uint64_t seed, uint64_t offset, float p, uint64_t b, unsigned char out[4]) {
  bool k4[4];
  dropout_keep4(DropoutMaskDesc{}, seed, offset, p, static_cast<int64_t>(b * 4), k4);
  for (int k = 0; k < 4; ++k) out[k] = k4[k];
}

}  // namespace

DropoutKeep::DropoutKeep(uint64_t seed, uint64_t offset, float p, const DropoutMaskDesc& mask, int64_t c)
    : seed_(seed), offset_(offset), p_(p), mask_(mask), c_(c) {
  if (!mask_.shared) return;
  int64_t m = 1;
  for (int a = 0; a < mask_.ndim; ++a)
    if (mask_.mstride[a] != 0) m *= mask_.shape[a];
  // Mask indexes index_base .. index_base + m − 1, from the Philox block holding the first.
  compact_first_ = mask_.index_base / 4 * 4;
  const int64_t blocks = (mask_.index_base + m - compact_first_ + 3) / 4, first_block = compact_first_ / 4;
  compact_.resize(static_cast<size_t>(blocks * 4));
#pragma omp parallel for schedule(static) if (blocks > 4096)
  for (int64_t b = 0; b < blocks; ++b)
    keep_block(seed_, offset_, p_, static_cast<uint64_t>(first_block + b), compact_.data() + 4 * b);
}

void DropoutKeep::row(int64_t r, unsigned char* keep) const {
  const int64_t i0 = r * c_;
  if (mask_.shared) {
    const int64_t m0 = mask_.mask_index(i0) - compact_first_, s = mask_.mstride[mask_.ndim - 1];
    for (int64_t k = 0; k < c_; ++k) keep[k] = compact_[static_cast<size_t>(m0 + k * s)];
    return;
  }
  // Unshared: mask index = element index; whole blocks in the 4-aligned middle.
  int64_t k = 0;
  for (; k < c_ && (i0 + k) % 4 != 0; ++k) keep[k] = philox_keep(seed_, offset_, static_cast<uint64_t>(i0 + k), p_);
  for (; k + 4 <= c_; k += 4) keep_block(seed_, offset_, p_, static_cast<uint64_t>(i0 + k) >> 2, keep + k);
  for (; k < c_; ++k) keep[k] = philox_keep(seed_, offset_, static_cast<uint64_t>(i0 + k), p_);
}

}  // namespace foldcore::ops::cpu
