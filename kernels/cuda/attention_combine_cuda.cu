// attention_combine (kernels/attention.h) on CUDA: one thread per (b, h, l) row, the CPU
// reference's fp32 operations (expf/logf: within a few ulps of std::exp/std::log).
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "kernels/cuda/attention_cuda.h"

namespace foldcore::ops::cuda {
namespace {

constexpr int kBlock = 256;

struct CombineParams {
  void* a;
  const void* a_part;
  float* lse;
  const float* lse_part;
  int64_t a_s[3], p_s[3], l_s[3], lp_s[3];
  int64_t H, L, D, rows;
};

template <typename T> __global__ void combine_kernel(const CombineParams p) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < p.rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t l = r % p.L, h = (r / p.L) % p.H, b = r / (p.L * p.H);
    float* ls = p.lse + b * p.l_s[0] + h * p.l_s[1] + l * p.l_s[2];
    const float lp = p.lse_part[b * p.lp_s[0] + h * p.lp_s[1] + l * p.lp_s[2]];
    const float m = fmaxf(*ls, lp);
    if (m == -INFINITY) continue;  // neither side has a key
    const float w = expf(*ls - m), wp = expf(lp - m), total = w + wp;
    T* ar = static_cast<T*>(p.a) + b * p.a_s[0] + h * p.a_s[1] + l * p.a_s[2];
    const T* pr = static_cast<const T*>(p.a_part) + b * p.p_s[0] + h * p.p_s[1] + l * p.p_s[2];
    for (int64_t d = 0; d < p.D; ++d) ar[d] = from_f32<T>((w * to_f32(ar[d]) + wp * to_f32(pr[d])) / total);
    *ls = m + logf(total);
  }
}

}  // namespace

void attention_combine(const Tensor& a, const Tensor& lse, const Tensor& a_part, const Tensor& lse_part) {
  CombineParams p{};
  p.a = a.data_ptr();
  p.a_part = a_part.data_ptr();
  p.lse = lse.data<float>();
  p.lse_part = lse_part.data<float>();
  for (int d = 0; d < 3; ++d) {
    p.a_s[d] = a.stride(d);
    p.p_s[d] = a_part.stride(d);
    p.l_s[d] = lse.stride(d);
    p.lp_s[d] = lse_part.stride(d);
  }
  p.H = a.size(1);
  p.L = a.size(2);
  p.D = a.size(3);
  p.rows = a.size(0) * p.H * p.L;
  if (p.rows == 0) return;
  set_device(a.device());
  cuda_dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_kernel<combine_kernel<T>>(grid_for(p.rows, kBlock), kBlock, 0, cuda_stream_of(a.device()), p);
    FC_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace foldcore::ops::cuda
