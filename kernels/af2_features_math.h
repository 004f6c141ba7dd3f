// The per-element arithmetic of kernels/af2_features.h, shared by the CPU reference and the CUDA
// kernels so both do the same fp32/double operations in the same order. The including file
// defines AF2F_FN (function qualifiers) and the rounding operations AF2F_FMUL, AF2F_FADD
// (float) and AF2F_DMUL, AF2F_DADD, AF2F_DSUB, AF2F_DDIV, AF2F_DSQRT (double): plain operators on
// the CPU (ISO C++: no contraction), the _rn intrinsics on CUDA (nvcc would otherwise fuse a
// multiply and an add into one FMA, with one rounding less).
#pragma once

#include <cstdint>

#include "kernels/af2_features.h"

namespace foldcore::ops::af2f {

// |a − b|² in fp32, summed x, y, z from the left.
AF2F_FN inline float squared_distance(const float* a, const float* b) {
  const float dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
  return AF2F_FADD(AF2F_FADD(AF2F_FMUL(dx, dx), AF2F_FMUL(dy, dy)), AF2F_FMUL(dz, dz));
}

AF2F_FN inline float in_bin(float d2, float lower, float upper) { return d2 > lower && d2 < upper ? 1.f : 0.f; }

// Channel q of template pair (i, j) (kernels/af2_features.h for the layout). pb, bb: masks;
// aa: aatype; frames: [N, 12] (e1, e2, e3, CA) or nullptr; lower/upper: the squared breaks.
AF2F_FN inline float template_pair_channel(int64_t i, int64_t j, int64_t q, int64_t nb, const float* pb_pos,
                                           const float* pb, const int32_t* aa, const float* bb,
                                           const float* frames, const float* lower, const float* upper) {
  const float bb2 = AF2F_FMUL(bb[i], bb[j]);
  if (bb2 == 0.f) return 0.f;
  float v = 0.f;
  if (q < nb) {
    v = in_bin(squared_distance(pb_pos + i * 3, pb_pos + j * 3), lower[q], upper[q]);
  } else if (q == nb) {
    v = AF2F_FMUL(pb[i], pb[j]);
  } else if (q < nb + 1 + kTemplateAatypeClasses) {
    v = aa[j] == q - (nb + 1) ? 1.f : 0.f;  // the column residue's aatype
  } else if (q < nb + 1 + 2 * kTemplateAatypeClasses) {
    v = aa[i] == q - (nb + 1 + kTemplateAatypeClasses) ? 1.f : 0.f;  // the row residue's aatype
  } else if (q < nb + 1 + 2 * kTemplateAatypeClasses + 3) {
    if (frames != nullptr) {
      const float* fi = frames + i * 12;
      const float* caj = frames + j * 12 + 9;
      double dv[3], w[3];
      for (int d = 0; d < 3; ++d) dv[d] = AF2F_DSUB(static_cast<double>(caj[d]), static_cast<double>(fi[9 + d]));
      for (int k = 0; k < 3; ++k) {
        const float* e = fi + 3 * k;
        w[k] = AF2F_DADD(AF2F_DADD(AF2F_DMUL(static_cast<double>(e[0]), dv[0]), AF2F_DMUL(static_cast<double>(e[1]), dv[1])),
                         AF2F_DMUL(static_cast<double>(e[2]), dv[2]));
      }
      const double sq = AF2F_DADD(AF2F_DADD(AF2F_DADD(1e-6, AF2F_DMUL(w[0], w[0])), AF2F_DMUL(w[1], w[1])),
                                  AF2F_DMUL(w[2], w[2]));
      const double inv = AF2F_DMUL(AF2F_DMUL(AF2F_DDIV(1.0, AF2F_DSQRT(sq)), static_cast<double>(bb[i])),
                                   static_cast<double>(bb[j]));
      v = static_cast<float>(AF2F_DMUL(w[q - (nb + 1 + 2 * kTemplateAatypeClasses)], inv));
    }
  } else {
    v = 1.f;  // the backbone mask 2-D (bb2 ≠ 0 here), times bb2 below
  }
  return AF2F_FMUL(v, bb2);
}

}  // namespace foldcore::ops::af2f
