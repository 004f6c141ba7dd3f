// Portability macros shared by host and device code.
#pragma once

#if defined(__CUDACC__)
#define FOLDCORE_HD __host__ __device__ __forceinline__
#define FOLDCORE_DEVICE __device__ __forceinline__
#else
#define FOLDCORE_HD inline
#define FOLDCORE_DEVICE inline
#endif

// `#pragma unroll` in code that the device and the host compilers both see (FOLDCORE_HD and
// __host__ __device__ functions): the device pass unrolls; the host compiler, which would warn on
// the pragma, sees nothing.
#if defined(__CUDA_ARCH__)
#define FC_UNROLL _Pragma("unroll")
#else
#define FC_UNROLL
#endif
