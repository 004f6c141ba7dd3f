// Dropout keep decisions on the CPU, row by row of the last dim, equal to
// philox_keep(seed, offset, mask.mask_index(i), p) for every element i (the stream the CUDA kernels
// and the autograd recomputation replay), with less Philox work:
//   - unshared masks: one Philox block gives the four decisions of elements 4b..4b+3
//     (dropout_keep4), instead of one block per element;
//   - shared masks (AlphaFold's row- and column-wise dropout: one mask broadcast over an axis):
//     the compact mask (the shape with the shared axes of size 1) is computed once, four mask
//     indexes per Philox block, and every row reads its part of it, instead of every element
//     recomputing its mask index's block.
#pragma once

#include <cstdint>
#include <vector>

#include "core/philox.h"
#include "kernels/dropout_mask.h"

namespace foldcore::ops::cpu {

class DropoutKeep {
 public:
  // Rows of c elements of a contiguous tensor whose mask is `mask`; p in (0, 1).
  DropoutKeep(uint64_t seed, uint64_t offset, float p, const DropoutMaskDesc& mask, int64_t c);

  // keep[0..c) of row r: the decisions of elements r·c .. r·c + c − 1.
  void row(int64_t r, unsigned char* keep) const;

 private:
  uint64_t seed_, offset_;
  float p_;
  DropoutMaskDesc mask_;
  int64_t c_;
  std::vector<unsigned char> compact_;  // shared masks: keep decision per mask index from compact_first_
  int64_t compact_first_ = 0;
};

}  // namespace foldcore::ops::cpu
