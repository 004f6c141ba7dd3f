// The dropout mask addressing shared by the CPU and CUDA implementations of
// bias_dropout_residual (kernels/elementwise.h), host- and device-compilable.
//
// Element i (flat, row-major over the full shape) is kept iff
//   philox_keep(seed, offset, idx'(i), p),   idx'(i) = Σ_a coord_a(i) · mstride_a,
// where mstride_a is the row-major stride of axis a in the MASK's shape (the full shape with every
// shared axis of size 1), or 0 for a shared axis. So idx' is the flat index of i's element in that
// mask and the mask is constant along the shared axes; with no shared axes idx' = i. A slab of the
// tensor cut along a shared axis therefore draws the same mask as the whole tensor (DAP relies on
// it: evoformer_parallel.cpp). `index_base` is added to idx': a slab cut along the mask's leading
// unshared axis draws its part of the whole tensor's mask when index_base is the slab's first
// mask index (a DAP rank's rows of a mask drawn for all rows: r·k·Π of the mask's later sizes).
#pragma once

#include <cstdint>
#include <vector>

#include "core/macros.h"
#include "core/philox.h"
#include "core/shape.h"

namespace foldcore::ops {

struct DropoutMaskDesc {
  int ndim = 0;
  bool shared = false;  // any shared axis or an index base; when false idx' = i
  // shared, but every group of 4 elements i..i+3 (i % 4 == 0) maps to 4 consecutive mask indices
  // starting at a multiple of 4: the last axis is not shared, its size is a multiple of 4, and so is
  // index_base (then every mask stride but the last's 1 is a multiple of 4 too).
  bool quads = false;
  int64_t shape[kMaxDims] = {};
  int64_t mstride[kMaxDims] = {};
  int64_t index_base = 0;

  FOLDCORE_HD int64_t mask_index(int64_t i) const {
    if (!shared) return i;
    int64_t idx = index_base;
    FC_UNROLL
    for (int a = kMaxDims - 1; a >= 0; --a) {  // unrolled: constant indices (no local copy on a GPU)
      if (a >= ndim) continue;
      idx += (i % shape[a]) * mstride[a];
      i /= shape[a];
    }
    return idx;
  }
};

// `shared_dims` may hold negative axes and repeats; they are normalised against shape.size().
// index_base ≥ 0 (a non-zero base takes the per-element path, `shared`).
DropoutMaskDesc make_dropout_mask_desc(const Shape& shape, const std::vector<int>& shared_dims,
                                       int64_t index_base = 0);

// 1/(1−p) applied to kept elements (p in [0,1)).
FOLDCORE_HD float dropout_scale(float p) { return 1.0f / (1.0f - p); }

// Keep decisions of the four elements base..base+3 (base % 4 == 0) of stream (seed, offset),
// equal to philox_keep(seed, offset, m.mask_index(base + k), p) for each k. Unshared, or shared
// with `quads`: the four mask indices are m..m+3 with m % 4 == 0, so one Philox block gives all
// four words (philox_bits takes word idx%4 of block idx/4) instead of four blocks; otherwise per
// element.
FOLDCORE_HD void dropout_keep4(const DropoutMaskDesc& m, uint64_t seed, uint64_t offset, float p, int64_t base,
                               bool keep[4]) {
  if (!m.shared || m.quads) {
    const uint64_t block = static_cast<uint64_t>(m.shared ? m.mask_index(base) : base) >> 2;
    const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                        static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                                        static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    FC_UNROLL
    for (int k = 0; k < 4; ++k) keep[k] = static_cast<float>(b.v[k] >> 8) * (1.0f / 16777216.0f) >= p;
  } else {
    FC_UNROLL
    for (int k = 0; k < 4; ++k) keep[k] = philox_keep(seed, offset, m.mask_index(base + k), p);
  }
}

}  // namespace foldcore::ops
