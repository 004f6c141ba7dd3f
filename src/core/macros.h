// Portability macros shared by host and device code.
#pragma once

#if defined(__CUDACC__)
#define FOLDCORE_HD __host__ __device__ __forceinline__
#define FOLDCORE_DEVICE __device__ __forceinline__
#else
#define FOLDCORE_HD inline
#define FOLDCORE_DEVICE inline
#endif
