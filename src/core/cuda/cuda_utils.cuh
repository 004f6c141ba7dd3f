// Helpers for CUDA translation units: error checks, the stream of a tensor's device, the
// host<->device type mapping for 16-bit floats, and a strided tensor descriptor for kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "core/macros.h"
#include "core/stream.h"
#include "core/tensor.h"

#define FC_CUDA_CHECK(expr)                                                                       \
  do {                                                                                            \
    const cudaError_t fc_err_ = (expr);                                                           \
    if (fc_err_ != cudaSuccess)                                                                   \
      ::foldcore::detail::throw_check_failure(__FILE__, __LINE__, #expr,                          \
                                              ::foldcore::detail::concat("CUDA error: ",          \
                                                                         cudaGetErrorString(fc_err_))); \
  } while (0)

// Shared memory declarations. On a CUDA build they are plain `__shared__` declarations; under the
// host emulation a static one is a function-local static that is refilled with the NaN pattern
// for every block (so a read before write shows), and the dynamic one is the running block's
// buffer (C++ has no block-scope extern arrays of unknown size).
//   FC_SHARED(float, tile, [32][33]);        __shared__ float tile[32][33];
//   FC_DYNAMIC_SHARED(float, smem, 16);      extern __shared__ __align__(16) float smem[];
#if defined(FOLDCORE_CUDA_EMULATE)
#define FC_SHARED(type, name, dims) \
  alignas(16) static type name dims; \
  ::fc_emu::fresh_shared(&name, sizeof(name))
#define FC_DYNAMIC_SHARED(type, name, align) type* name = static_cast<type*>(::fc_emu::dynamic_shared())
#else
#define FC_SHARED(type, name, dims) __shared__ type name dims
#define FC_DYNAMIC_SHARED(type, name, align) extern __shared__ __align__(align) type name[]
#endif

// Checks the last kernel launch.
#define FC_CUDA_CHECK_LAUNCH() FC_CUDA_CHECK(cudaGetLastError())

namespace foldcore {

inline cudaStream_t cuda_stream_of(Device d) { return static_cast<cudaStream_t>(current_stream(d).native()); }

// Host storage type -> CUDA arithmetic type.
template <typename T> struct CudaType { using type = T; };
template <> struct CudaType<bf16> { using type = __nv_bfloat16; };
template <> struct CudaType<f16> { using type = __half; };

template <typename T> __device__ __forceinline__ float to_f32(T v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half(v); }

// Calls f(T{}) with T the CUDA arithmetic type for a floating DType.
template <typename F> decltype(auto) cuda_dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::bf16: return f(__nv_bfloat16{});
    case DType::f16: return f(__half{});
    default: return f(float{});
  }
}

// Shape and strides by value, for kernels over arbitrary strided tensors: the offset of element
// `linear` (row-major over shape). I is the index type: int64_t, or int32_t where every index and
// offset fits (32-bit divisions are several times cheaper than 64-bit ones on the GPU).
template <typename I> struct StridedDescT {
  int ndim;
  I shape[kMaxDims];
  I strides[kMaxDims];
  // The loop runs over every possible dim with the unused ones skipped, so that it unrolls and the
  // arrays are read at constant indices: a dynamic index into a kernel parameter makes the compiler
  // copy the whole descriptor to local memory in every thread (ptxas reported a 72-byte stack
  // frame per thread for the broadcast kernels, 104 bytes for the copies).
  __host__ __device__ I offset_of(I linear) const {
    if (ndim == 1) return linear * strides[0];  // uniform per launch: no division
    I off = 0;
    FC_UNROLL
    for (int a = kMaxDims - 1; a >= 0; --a) {
      if (a >= ndim) continue;
      const I q = linear / shape[a];
      off += (linear - q * shape[a]) * strides[a];
      linear = q;
    }
    return off;
  }
};
using StridedDesc = StridedDescT<int64_t>;

// t's dims with the extent-1 ones dropped and neighbours merged (push_merged_dim, core/shape.h:
// contiguous runs, and broadcast dims of stride 0 next to each other): the same offsets with fewer
// divisions (a mask [N, N, 1] expanded over C: two dims).
inline StridedDesc strided_desc(const Tensor& t) {
  StridedDesc d{};
  for (int i = 0; i < t.dim(); ++i) push_merged_dim(d.ndim, d.shape, d.strides, t.shape()[i], t.strides()[i]);
  if (d.ndim == 0) {  // one element (or none)
    d.ndim = 1;
    d.shape[0] = 1;
    d.strides[0] = 0;
  }
  return d;
}

// The 32-bit form of d, when n elements and every offset fit int32 (with room for a grid-stride
// index plus its stride); else ok = false.
inline StridedDescT<int32_t> strided_desc32(const StridedDesc& d, int64_t n, bool& ok) {
  StridedDescT<int32_t> r{};
  int64_t max_off = 0;
  for (int a = 0; a < d.ndim; ++a) max_off += (d.shape[a] - 1) * d.strides[a];
  ok = n < (int64_t{1} << 30) && max_off < (int64_t{1} << 31) - 1;
  r.ndim = d.ndim;
  for (int a = 0; a < d.ndim; ++a) {
    r.shape[a] = static_cast<int32_t>(d.shape[a]);
    r.strides[a] = static_cast<int32_t>(d.strides[a]);
  }
  return r;
}

inline unsigned grid_for(int64_t n, int block) {
  const int64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 65535 * 64 ? g : 65535 * 64);
}

}  // namespace foldcore
