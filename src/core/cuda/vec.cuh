// Vector accesses of the CUDA kernels: V consecutive elements of T moved as one aligned load or
// store (at most 16 bytes). The copies, the elementwise maps, the row kernels (softmax,
// LayerNorm) and the attention backward's preprocess all read and write through it; each caller
// checks that its pointers (and strides) are aligned to the vector before choosing a vector path.
#pragma once

#include <cuda_runtime.h>

namespace foldcore {

template <typename T, int V> struct alignas(sizeof(T) * V) VecOf {
  static constexpr int kN = V;
  T v[V];
};

// Four elements (8 bytes of bf16, 16 of fp32) and 16 bytes (8 bf16, 4 fp32).
template <typename T> using Quad = VecOf<T, 4>;
template <typename T> using Pack16 = VecOf<T, 16 / static_cast<int>(sizeof(T))>;

template <typename T, int V> __device__ __forceinline__ VecOf<T, V> load_vec(const T* p) {
  return *reinterpret_cast<const VecOf<T, V>*>(p);
}
template <typename T, int V> __device__ __forceinline__ void store_vec(T* p, const VecOf<T, V>& v) {
  *reinterpret_cast<VecOf<T, V>*>(p) = v;
}

}  // namespace foldcore
