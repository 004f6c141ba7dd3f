// CPU reference of kernels/af2_features.h: one loop per output element, the arithmetic of
// af2_features_math.h; OpenMP over rows.
#include "kernels/cpu/af2_features_cpu.h"

#include <cmath>

#include "kernels/af2_features_breaks.h"

#define AF2F_FN
#define AF2F_FMUL(a, b) ((a) * (b))
#define AF2F_FADD(a, b) ((a) + (b))
#define AF2F_DMUL(a, b) ((a) * (b))
#define AF2F_DADD(a, b) ((a) + (b))
#define AF2F_DSUB(a, b) ((a) - (b))
#define AF2F_DDIV(a, b) ((a) / (b))
#define AF2F_DSQRT(a) std::sqrt(a)
#include "kernels/af2_features_math.h"

namespace foldcore::ops::cpu {

void distogram_one_hot(const Tensor& positions, const DistogramBins& bins, int64_t row0, const Tensor& out) {
  const detail::SquaredBreaks br = detail::squared_breaks(bins);
  const int64_t t_n = positions.size(0), n = positions.size(1), rows = out.size(1), nb = bins.num_bins;
  const float* x = positions.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t t = 0; t < t_n; ++t)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float d2 = af2f::squared_distance(x + (t * n + row0 + i) * 3, x + (t * n + j) * 3);
        float* oj = o + ((t * rows + i) * n + j) * nb;
        for (int64_t b = 0; b < nb; ++b) oj[b] = af2f::in_bin(d2, br.lower[b], br.upper[b]);
      }
}

void template_pair_features(const TemplatePairInputs& in, const Tensor& out, int64_t row0) {
  const detail::SquaredBreaks br = detail::squared_breaks(in.bins);
  const int64_t n = in.pseudo_beta.size(0), nb = in.bins.num_bins, c = out.size(2), rows = out.size(0);
  const float* pos = in.pseudo_beta.data<float>();
  const float* pb = in.pseudo_beta_mask.data<float>();
  const float* bb = in.backbone_mask.data<float>();
  const int32_t* aa = in.aatype.data<int32_t>();
  const float* frames = in.frames.defined() ? in.frames.data<float>() : nullptr;
  float* o = out.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t q = 0; q < c; ++q)
        o[(i * n + j) * c + q] = af2f::template_pair_channel(row0 + i, j, q, nb, pos, pb, aa, bb, frames,
                                                             br.lower.data(), br.upper.data());
}

void extra_msa_features(const Tensor& extra_msa, const Tensor& has_deletion, const Tensor& deletion_value,
                        const Tensor& out) {
  const int64_t rows = extra_msa.numel(), c = kExtraMsaFeatureDim;
  const float* hd = has_deletion.data<float>();
  const float* dv = deletion_value.data<float>();
  float* o = out.data<float>();
  const void* aa = extra_msa.data_ptr();
  const bool is64 = extra_msa.dtype() == DType::i64;
#pragma omp parallel for schedule(static) if (rows >= (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t cls = is64 ? static_cast<const int64_t*>(aa)[r] : static_cast<const int32_t*>(aa)[r];
    float* orow = o + r * c;
    for (int64_t k = 0; k < kExtraMsaClasses; ++k) orow[k] = cls == k ? 1.f : 0.f;
    orow[kExtraMsaClasses] = hd[r];
    orow[kExtraMsaClasses + 1] = dv[r];
  }
}

}  // namespace foldcore::ops::cpu
