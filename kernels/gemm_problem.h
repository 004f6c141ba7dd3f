// Internal to the GEMM family: one GEMM call normalised to raw pointers, leading dimensions and
// batch strides (all in elements, row-major). Produced by the dispatcher in kernels/gemm.cpp after
// validation, consumed by the CPU and CUDA backends, so neither re-derives layouts from Tensors.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/gemm.h"

namespace foldcore::ops {

// A batch of row-major matrices: element (b, r, c) lives at ptr[b*batch_stride + r*ld + c].
// batch_stride 0 means the matrix is shared by every batch entry.
struct MatrixRef {
  void* ptr = nullptr;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

struct GemmProblem {
  DType dtype = DType::f32;      // of a, b, bias, pre_act (and of out, unless out_dtype differs)
  DType out_dtype = DType::f32;  // of out: dtype, or f32 for 16-bit a and b (no bias, act or pre_act)
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 0.f;
  Activation act = Activation::none;
  MatrixRef a;        // [m, k] or, trans_a, [k, m]
  MatrixRef b;        // [k, n] or, trans_b, [n, k]
  MatrixRef out;      // [m, n]
  MatrixRef pre_act;  // [m, n]; ptr null when not requested
  const void* bias = nullptr;  // [n] contiguous, or null
  int64_t bias_batch_stride = 0;  // elements between batch entries' biases; 0: one bias for all
};

}  // namespace foldcore::ops

namespace foldcore::ops {

// ops::gemm_sum_nt normalised: out[m, n] (out_dtype: fp32 or the pairs' dtype, row stride ldo) =
// beta·out + Σ_i a_i·b_iᵀ with a_i [m, k_i] (row stride lda_i) and b_i [n, k_i] (row stride ldb_i),
// all 16-bit of one dtype.
struct GemmSumPair {
  const void* a = nullptr;
  const void* b = nullptr;
  int64_t lda = 0, ldb = 0, k = 0;
  float* a_col_sum = nullptr;  // [k] fp32, += Σ over a's rows; null: not asked for
  bool vec16 = false;          // a and b on the 16-byte grid: bases, row strides and k multiples of 8 bf16
};
struct GemmSumProblem {
  DType dtype = DType::bf16;
  int n_pairs = 0;
  GemmSumPair pair[kGemmSumMaxPairs];
  int64_t m = 0, n = 0;
  void* out = nullptr;
  DType out_dtype = DType::f32;
  int64_t ldo = 0;
  float beta = 0.f;
};

}  // namespace foldcore::ops
