// CUDA gather / scatter-add / one-hot.
// Index errors: kernels clamp a bad index (no out-of-bounds access) and record the smallest bad
// position through atomicMax on (rows − position) in a one-element device flag; the op then
// synchronises to read the flag and throws the same message as the CPU reference.
// Backward (deterministic, no float atomics): keys = idx (bad ones mapped to V, sorted last and
// skipped) are sorted with their row numbers by a stable radix sort (CUB), so the rows of each
// index appear in increasing row order; one thread per (segment, column) then sums its segment
// in that order and adds the total to dtable. A very frequent index (padding) makes one long
// serial segment; that is the price of determinism.
#include "kernels/cuda/embedding_cuda.h"

#include <cub/cub.cuh>

#include <cstdint>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"

namespace foldcore::ops::cuda {
namespace {

constexpr int kBlock = 256;

__device__ __forceinline__ void flag_bad(unsigned long long* flag, int64_t rows, int64_t r) {
  atomicMax(flag, static_cast<unsigned long long>(rows - r));
}

template <typename T, typename TI>
__global__ void gather_kernel(const T* table, const TI* idx, int64_t rows, int64_t vocab, int64_t c, T* out,
                              unsigned long long* flag) {
  const int64_t n = rows * c;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / c, j = i - r * c;
    int64_t v = static_cast<int64_t>(idx[r]);
    if (v < 0 || v >= vocab) {
      if (j == 0) flag_bad(flag, rows, r);
      v = v < 0 ? 0 : vocab - 1;
    }
    out[i] = table[v * c + j];
  }
}

// keys[r] = idx[r] (V for a bad index, flagged), vals[r] = r.
template <typename TI>
__global__ void make_keys_kernel(const TI* idx, int64_t rows, int64_t vocab, int32_t* keys, int32_t* vals,
                                 unsigned long long* flag) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = static_cast<int64_t>(idx[r]);
    const bool bad = v < 0 || v >= vocab;
    if (bad) flag_bad(flag, rows, r);
    keys[r] = static_cast<int32_t>(bad ? vocab : v);
    vals[r] = static_cast<int32_t>(r);
  }
}

// grid (rows, ceil(C / kBlock)): block at sorted position p does nothing unless p starts a
// segment of equal keys; otherwise each thread sums its column over the segment in order.
template <typename T>
__global__ void segment_scatter_kernel(const int32_t* keys, const int32_t* rows_sorted, int64_t rows, int64_t vocab,
                                       int64_t c, const T* dout, float* dtable) {
  const int64_t p = blockIdx.x;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kBlock + threadIdx.x;
  const int32_t key = keys[p];
  if (col >= c || key >= vocab || (p > 0 && keys[p - 1] == key)) return;
  float acc = 0.f;
  for (int64_t q = p; q < rows && keys[q] == key; ++q) acc += to_f32(dout[static_cast<int64_t>(rows_sorted[q]) * c + col]);
  dtable[static_cast<int64_t>(key) * c + col] += acc;
}

template <typename TI>
__global__ void one_hot_kernel(const TI* idx, int64_t rows, int64_t c, float* out_f32, __nv_bfloat16* out_bf16,
                               __half* out_f16) {
  const int64_t n = rows * c;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / c, j = i - r * c;
    const float v = static_cast<int64_t>(idx[r]) == j ? 1.f : 0.f;
    if (out_f32) out_f32[i] = v;
    if (out_bf16) out_bf16[i] = __float2bfloat16(v);
    if (out_f16) out_f16[i] = __float2half(v);
  }
}

template <typename F> decltype(auto) dispatch_index(DType t, F&& f) {
  if (t == DType::i64) return f(int64_t{});
  return f(int32_t{});
}

// Reads the flag (synchronising) and throws for the first bad position.
void throw_if_flagged(const char* op, const Tensor& flag, const Tensor& idx, int64_t vocab) {
  const int64_t enc = flag.to_vector_i64()[0];
  if (enc == 0) return;
  const int64_t rows = idx.numel(), pos = rows - enc;
  const int64_t v = idx.flatten().narrow(0, pos, 1).to_vector_i64()[0];
  FC_THROW(op, ": index ", v, " at position ", pos, " is outside [0, ", vocab, ")");
}

}  // namespace

void embedding_forward(const Tensor& table, const Tensor& idx, const Tensor& out) {
  const int64_t rows = idx.numel(), vocab = table.size(0), c = table.size(1);
  Tensor flag = Tensor::zeros({1}, DType::i64, table.device());
  cudaStream_t stream = cuda_stream_of(table.device());
  cuda_dispatch_float(table.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(idx.dtype(), [&](auto itag) {
      using TI = decltype(itag);
      launch_kernel<gather_kernel<T, TI>>(grid_for(rows * c, kBlock), kBlock, 0, stream,
          static_cast<const T*>(table.data_ptr()), static_cast<const TI*>(idx.data_ptr()), rows, vocab, c,
          static_cast<T*>(out.data_ptr()), static_cast<unsigned long long*>(flag.data_ptr()));
      FC_CUDA_CHECK_LAUNCH();
    });
  });
  throw_if_flagged("embedding_forward", flag, idx, vocab);
}

void embedding_backward(const Tensor& dout, const Tensor& idx, const Tensor& dtable) {
  const int64_t rows = idx.numel(), vocab = dtable.size(0), c = dtable.size(1);
  FC_CHECK(rows < (int64_t{1} << 31) - 1 && vocab < (int64_t{1} << 31) - 1, "embedding_backward: ", rows,
           " rows or vocabulary ", vocab, " exceed the 32-bit sort keys");
  const Device dev = dtable.device();
  cudaStream_t stream = cuda_stream_of(dev);
  Tensor flag = Tensor::zeros({1}, DType::i64, dev);
  Tensor keys = Tensor::empty({2, rows}, DType::i32, dev);  // unsorted, sorted
  Tensor vals = Tensor::empty({2, rows}, DType::i32, dev);
  int32_t* k_in = keys.data<int32_t>();
  int32_t* k_out = k_in + rows;
  int32_t* v_in = vals.data<int32_t>();
  int32_t* v_out = v_in + rows;
  dispatch_index(idx.dtype(), [&](auto itag) {
    using TI = decltype(itag);
    launch_kernel<make_keys_kernel<TI>>(grid_for(rows, kBlock), kBlock, 0, stream,
        static_cast<const TI*>(idx.data_ptr()), rows, vocab, k_in, v_in,
        static_cast<unsigned long long*>(flag.data_ptr()));
    FC_CUDA_CHECK_LAUNCH();
  });
  // Keys lie in [0, V]: sort only the bits that can be set.
  int end_bit = 1;
  while (end_bit < 32 && (int64_t{1} << end_bit) <= vocab) ++end_bit;
  size_t temp_bytes = 0;
  FC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k_in, k_out, v_in, v_out, static_cast<int>(rows),
                                                0, end_bit, stream));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes) + 1}, DType::u8, dev);
  ::foldcore::detail::count_launch();  // one sort (cub launches a few kernels for it)
  const kernel_profile::detail::Scope timed("cub radix sort (embedding backward)", stream);
  FC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, k_in, k_out, v_in, v_out,
                                                static_cast<int>(rows), 0, end_bit, stream));
  cuda_dispatch_float(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((c + kBlock - 1) / kBlock));
    launch_kernel<segment_scatter_kernel<T>>(grid, kBlock, 0, stream, k_out, v_out, rows, vocab, c,
                                                           static_cast<const T*>(dout.data_ptr()),
                                                           dtable.data<float>());
    FC_CUDA_CHECK_LAUNCH();
  });
  throw_if_flagged("embedding_backward", flag, idx, vocab);
}

void one_hot(const Tensor& idx, int64_t num_classes, const Tensor& out) {
  const int64_t rows = idx.numel();
  cudaStream_t stream = cuda_stream_of(out.device());
  float* f32 = out.dtype() == DType::f32 ? static_cast<float*>(out.data_ptr()) : nullptr;
  auto* b16 = out.dtype() == DType::bf16 ? static_cast<__nv_bfloat16*>(out.data_ptr()) : nullptr;
  auto* h16 = out.dtype() == DType::f16 ? static_cast<__half*>(out.data_ptr()) : nullptr;
  dispatch_index(idx.dtype(), [&](auto itag) {
    using TI = decltype(itag);
    launch_kernel<one_hot_kernel<TI>>(grid_for(rows * num_classes, kBlock), kBlock, 0, stream,
        static_cast<const TI*>(idx.data_ptr()), rows, num_classes, f32, b16, h16);
    FC_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace foldcore::ops::cuda
