// The activations' derivatives as device functors over fp32 values, shared by the elementwise
// backward maps (elementwise_cuda.cu) and the fused activation backward + bias-gradient column sums
// (reduce_cuda.cu), so both give the same bits. x[0] is the saved tensor (relu: its output y, whose
// sign is the pre-activation's; gelu: the pre-activation), x[1] the incoming gradient dy.
#pragma once

#include <cuda_runtime.h>

namespace foldcore::ops::cuda {

__device__ __forceinline__ float gelu_cdf(float v) { return 0.5f * (1.0f + erff(v * 0.70710678118654752f)); }

struct ReluBwd {  // relu'(p) = [p > 0] = [y > 0]
  __device__ float operator()(const float* x, int64_t) const { return x[0] > 0.f ? x[1] : 0.f; }
};
struct GeluBwd {  // dy · (Φ(x) + x·φ(x))
  __device__ float operator()(const float* x, int64_t) const {
    const float pdf = 0.39894228040143268f * expf(-0.5f * x[0] * x[0]);
    return x[1] * (gelu_cdf(x[0]) + x[0] * pdf);
  }
};

}  // namespace foldcore::ops::cuda
