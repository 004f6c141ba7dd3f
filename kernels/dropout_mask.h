// The dropout mask addressing shared by the CPU and CUDA implementations of
// bias_dropout_residual (kernels/elementwise.h), host- and device-compilable.
//
// Element i (flat, row-major over the full shape) is kept iff
//   philox_keep(seed, offset, idx'(i), p),   idx'(i) = Σ_a coord_a(i) · mstride_a,
// where mstride_a is the row-major stride of axis a in the full shape, or 0 for a shared axis.
// So idx' is "the flat index of i with the shared axes set to 0" and the mask is constant along
// the shared axes; with no shared axes idx' = i.
#pragma once

#include <cstdint>
#include <vector>

#include "core/macros.h"
#include "core/philox.h"
#include "core/shape.h"

namespace foldcore::ops {

struct DropoutMaskDesc {
  int ndim = 0;
  bool shared = false;  // any shared axis; when false idx' = i
  int64_t shape[kMaxDims] = {};
  int64_t mstride[kMaxDims] = {};

  FOLDCORE_HD int64_t mask_index(int64_t i) const {
    if (!shared) return i;
    int64_t idx = 0;
    for (int a = ndim - 1; a >= 0; --a) {
      idx += (i % shape[a]) * mstride[a];
      i /= shape[a];
    }
    return idx;
  }
};

// `shared_dims` may hold negative axes and repeats; they are normalised against shape.size().
DropoutMaskDesc make_dropout_mask_desc(const Shape& shape, const std::vector<int>& shared_dims);

// 1/(1−p) applied to kept elements (p in [0,1)).
FOLDCORE_HD float dropout_scale(float p) { return 1.0f / (1.0f - p); }

}  // namespace foldcore::ops
