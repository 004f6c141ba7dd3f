// CUDA kernels of kernels/af2_features.h: one thread per output element (grid-stride), so the
// stores are coalesced; each thread recomputes the little it needs (a squared distance, a unit
// vector component), which costs less than the store.
#include "kernels/cuda/af2_features_cuda.h"

#include <cstdint>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "kernels/af2_features_breaks.h"

#define AF2F_FN __device__
#define AF2F_FMUL(a, b) __fmul_rn(a, b)
#define AF2F_FADD(a, b) __fadd_rn(a, b)
#define AF2F_DMUL(a, b) __dmul_rn(a, b)
#define AF2F_DADD(a, b) __dadd_rn(a, b)
#define AF2F_DSUB(a, b) __dsub_rn(a, b)
#define AF2F_DDIV(a, b) __ddiv_rn(a, b)
#define AF2F_DSQRT(a) __dsqrt_rn(a)
#include "kernels/af2_features_math.h"

namespace foldcore::ops::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int64_t kMaxBins = 64;

struct Breaks {  // by value: the squared bin edges
  float lower[kMaxBins], upper[kMaxBins];
};

Breaks device_breaks(const DistogramBins& bins, const char* op) {
  FC_CHECK(bins.num_bins <= kMaxBins, op, " (CUDA): at most ", kMaxBins, " bins, got ", bins.num_bins);
  const detail::SquaredBreaks b = detail::squared_breaks(bins);
  Breaks d{};
  for (int64_t k = 0; k < bins.num_bins; ++k) {
    d.lower[k] = b.lower[k];
    d.upper[k] = b.upper[k];
  }
  return d;
}

__global__ void distogram_kernel(const float* x, int64_t t_n, int64_t n, int64_t row0, int64_t rows, int64_t nb,
                                 const Breaks br, float* out) {
  const int64_t total = t_n * rows * n * nb;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e % nb, j = (e / nb) % n, i = (e / (nb * n)) % rows, t = e / (nb * n * rows);
    const float d2 = af2f::squared_distance(x + (t * n + row0 + i) * 3, x + (t * n + j) * 3);
    out[e] = af2f::in_bin(d2, br.lower[b], br.upper[b]);
  }
}

__global__ void template_pair_kernel(const float* pos, const float* pb, const int32_t* aa, const float* bb,
                                     const float* frames, int64_t n, int64_t row0, int64_t rows, int64_t nb,
                                     int64_t c, const Breaks br, float* out) {
  const int64_t total = rows * n * c;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t q = e % c, j = (e / c) % n, i = row0 + e / (c * n);
    out[e] = af2f::template_pair_channel(i, j, q, nb, pos, pb, aa, bb, frames, br.lower, br.upper);
  }
}

// One thread per output element: out[r, k] = [aa_r == k] for k < 23, then has_deletion_r, deletion_value_r.
template <typename TI>
__global__ void extra_msa_kernel(const TI* aa, const float* hd, const float* dv, int64_t rows, float* out) {
  constexpr int64_t c = kExtraMsaFeatureDim;
  const int64_t total = rows * c;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / c, k = e - r * c;
    out[e] = k < kExtraMsaClasses ? (static_cast<int64_t>(aa[r]) == k ? 1.f : 0.f)
                                  : (k == kExtraMsaClasses ? hd[r] : dv[r]);
  }
}

}  // namespace

void distogram_one_hot(const Tensor& positions, const DistogramBins& bins, int64_t row0, const Tensor& out) {
  const Breaks br = device_breaks(bins, "distogram_one_hot");
  const int64_t t_n = positions.size(0), n = positions.size(1), rows = out.size(1);
  launch_kernel<distogram_kernel>(grid_for(out.numel(), kBlock), kBlock, 0, cuda_stream_of(out.device()),
                                  positions.data<float>(), t_n, n, row0, rows, bins.num_bins, br, out.data<float>());
  FC_CUDA_CHECK_LAUNCH();
}

void template_pair_features(const TemplatePairInputs& in, const Tensor& out, int64_t row0) {
  const Breaks br = device_breaks(in.bins, "template_pair_features");
  const int64_t n = in.pseudo_beta.size(0);
  launch_kernel<template_pair_kernel>(grid_for(out.numel(), kBlock), kBlock, 0, cuda_stream_of(out.device()),
                                      in.pseudo_beta.data<float>(), in.pseudo_beta_mask.data<float>(),
                                      in.aatype.data<int32_t>(), in.backbone_mask.data<float>(),
                                      in.frames.defined() ? in.frames.data<float>() : nullptr, n, row0, out.size(0),
                                      in.bins.num_bins, out.size(2), br, out.data<float>());
  FC_CUDA_CHECK_LAUNCH();
}

void extra_msa_features(const Tensor& extra_msa, const Tensor& has_deletion, const Tensor& deletion_value,
                        const Tensor& out) {
  const int64_t rows = extra_msa.numel();
  const cudaStream_t stream = cuda_stream_of(out.device());
  auto go = [&](auto tag) {
    using TI = decltype(tag);
    launch_kernel<extra_msa_kernel<TI>>(grid_for(out.numel(), kBlock), kBlock, 0, stream,
                                        static_cast<const TI*>(extra_msa.data_ptr()), has_deletion.data<float>(),
                                        deletion_value.data<float>(), rows, out.data<float>());
  };
  if (extra_msa.dtype() == DType::i64) go(int64_t{});
  else go(int32_t{});
  FC_CUDA_CHECK_LAUNCH();
}

}  // namespace foldcore::ops::cuda
