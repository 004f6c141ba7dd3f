// Row-wise reduction and launch helpers shared by the softmax and LayerNorm CUDA kernels.
//
// A row is handled by a "group" of G threads: G = 32 (one warp, several rows per block) for short
// rows, G = kRowBlock (the whole block) for long rows. Reductions use a fixed order (xor-shuffle
// tree, then warps summed 0..n-1), so results are bitwise deterministic run to run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/cuda/vec.cuh"

namespace foldcore::ops::cuda {

constexpr int kRowBlock = 256;  // threads per block for all row kernels
// Rows up to this length use one warp per row; longer rows use one block per row.
constexpr int64_t kWarpRowMax = 1024;

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return a > b ? a : b; }
};

// Reduces v over the G threads of the calling group; every thread gets the result. For G > 32
// all threads of the block must call it (it synchronises the block).
template <int G, typename Op> __device__ __forceinline__ float group_reduce(float v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (G > 32) {
    FC_SHARED(float, partial, [G / 32]);
    __syncthreads();  // a previous call may still be reading `partial`
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    v = partial[0];
#pragma unroll
    for (int w = 1; w < G / 32; ++w) v = op(v, partial[w]);
  }
  return v;
}

// The row kernels move V consecutive elements per access (VecOf, core/cuda/vec.cuh): V·sizeof(T)
// = 16 bytes when vectorised, V = 1 otherwise.

// True when rows of `c` elements of `bytes_per_elem` starting at each pointer can be read with
// 16-byte vectors.
inline bool can_vectorise(int64_t c, size_t bytes_per_elem, std::initializer_list<const void*> ptrs) {
  if ((c * static_cast<int64_t>(bytes_per_elem)) % 16 != 0) return false;
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Blocks for `rows` rows when each block of kRowBlock threads handles kRowBlock / G rows.
template <int G> unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowBlock / G - 1) / (kRowBlock / G));
}

// Calls f(G, V) with G and V as std::integral_constant template constants: G = 32 (warp per row)
// up to kWarpRowMax, else kRowBlock; V = 16-byte vectors of T when `aligned` and c divides into
// them, else 1. One dispatch shared by the softmax and LayerNorm launchers.
template <typename T, typename F> void row_switch(int64_t c, bool aligned, F&& f) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = aligned && c % kVec == 0;
  if (c <= kWarpRowMax) {
    if (vec)
      f(std::integral_constant<int, 32>{}, std::integral_constant<int, kVec>{});
    else
      f(std::integral_constant<int, 32>{}, std::integral_constant<int, 1>{});
  } else {
    if (vec)
      f(std::integral_constant<int, kRowBlock>{}, std::integral_constant<int, kVec>{});
    else
      f(std::integral_constant<int, kRowBlock>{}, std::integral_constant<int, 1>{});
  }
}

}  // namespace foldcore::ops::cuda
