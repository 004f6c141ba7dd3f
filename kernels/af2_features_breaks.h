// The distogram's squared bin edges (kernels/af2_features.h), shared by both backends: AF2 builds
// the breaks in fp32 (linspace, then squared).
#pragma once

#include <vector>

#include "kernels/af2_features.h"

namespace foldcore::ops::detail {

struct SquaredBreaks {
  std::vector<float> lower, upper;
};

inline SquaredBreaks squared_breaks(const DistogramBins& bins) {
  const int64_t nb = bins.num_bins;
  SquaredBreaks b{std::vector<float>(static_cast<size_t>(nb)), std::vector<float>(static_cast<size_t>(nb))};
  for (int64_t k = 0; k < nb; ++k) {
    const float v = bins.min_bin + static_cast<float>(k) * (bins.max_bin - bins.min_bin) / static_cast<float>(nb - 1);
    b.lower[k] = v * v;
  }
  for (int64_t k = 0; k + 1 < nb; ++k) b.upper[k] = b.lower[k + 1];
  b.upper[nb - 1] = 1e8f;
  return b;
}

}  // namespace foldcore::ops::detail
