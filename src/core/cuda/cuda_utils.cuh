// Helpers for CUDA translation units: error checks, the stream of a tensor's device, the
// host<->device type mapping for 16-bit floats, and a strided tensor descriptor for kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
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

// Shape and strides by value, for kernels over arbitrary strided tensors.
struct StridedDesc {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
  __host__ __device__ int64_t offset_of(int64_t linear) const {
    int64_t off = 0;
    for (int a = ndim - 1; a >= 0; --a) {
      const int64_t i = linear % shape[a];
      linear /= shape[a];
      off += i * strides[a];
    }
    return off;
  }
};

inline StridedDesc strided_desc(const Tensor& t) {
  StridedDesc d{};
  d.ndim = t.dim();
  for (int i = 0; i < t.dim(); ++i) {
    d.shape[i] = t.shape()[i];
    d.strides[i] = t.strides()[i];
  }
  return d;
}

inline unsigned grid_for(int64_t n, int block) {
  const int64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 65535 * 64 ? g : 65535 * 64);
}

}  // namespace foldcore
