// GEMM family.
//
//   out[b] = act( alpha * op_a(a[b]) · op_b(b[b]) + beta * out[b] + bias )      (row-major)
//
// op_x(X) = X or Xᵀ (trans flags). a: [..., M, K] (or [..., K, M] when trans_a), b: [..., K, N]
// (or [..., N, K] when trans_b), out: [..., M, N]. Leading (batch) dims: out's batch dims; a or b
// may instead be 2-D and is then shared by every batch entry (stride 0). Each operand must have
// unit stride in its last dim and a uniform batch stride (any view that is a "strided batch").
// bias: [N], added to every row; or [batch..., N] (out's batch dims, contiguous), one bias per batch
// entry (a strided batch of projections of one input, autograd::linears). act: none, relu or gelu (exact erf form; see elementwise.h).
// pre_act (optional, [..., M, N]): receives the value before the activation, for the backward.
// dtypes: f32, bf16, f16 inputs (a, b, out, bias all the same dtype); accumulation is fp32.
// CPU: OpenBLAS sgemm (16-bit inputs converted to fp32). CUDA: cuBLASLt with fused epilogues.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace foldcore::ops {

enum class Activation { none, relu, gelu };

struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.f;
  float beta = 0.f;
  Tensor bias;              // optional [N], or [batch..., N]: one per batch entry
  Activation act = Activation::none;
  Tensor pre_act;           // optional [..., M, N], written when act != none
};

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args = {});

// Convenience: allocates out ([..., M, N], dtype of a, device of a) and runs gemm.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// out[M, N] = beta·out + Σ_i a_i·b_iᵀ: one product over the K of several operand pairs, as if their
// K were concatenated. The input gradient of several projections of one input is this form:
// dx = Σ_i dy_i·W_iᵀ with dy_i [R, out_i] and W_i [in, out_i] (autograd::linears). a_i [M, K_i] and
// b_i [N, K_i] 2-D, 16-bit, one dtype, unit stride in their last dim (any row stride); out [M, N]
// fp32 or the pairs' 16-bit dtype, unit stride in its last dim; at most 8 pairs. beta = 0 ignores
// out's values. A 16-bit out is the fp32 value beta·out + Σ rounded once (a lone consumer's input
// gradient handed to a bf16 LayerNorm output in its own dtype: half the bytes written and read).
// CPU: one gemm per pair (beta on the first, 1 after), so the sum is rounded to fp32 after each pair;
// a 16-bit out is summed in an fp32 temporary (out's values converted into it first where beta ≠ 0)
// and converted at the end. CUDA: where the pairs are bf16, each 16-byte aligned with K_i % 8 == 0
// or with K_i <= 32 (read element by element: a [R, 4] pair bias's gradient), N even and out
// aligned to two elements, one mma.sync kernel (kernels/cuda/gemm_sum_cuda.cu) reads
// and writes out once and keeps the whole sum in fp32 registers (rounded once to out's dtype);
// otherwise one cuBLASLt product per pair, as on the CPU.
// a_col_sums (empty, or one per pair: undefined, or fp32 [K_i] contiguous on out's device):
// a_col_sums[i] += Σ_r a_i[r, :] — the bias gradients of the projections whose dx this is (the
// column sums of their dy_i). On CUDA the one kernel makes them from the a tiles it already holds
// (per-CTA partials, then one small kernel adds them in order: deterministic), so the dy_i are not
// read again; elsewhere one sum_rows_accumulate per pair.
constexpr int kGemmSumMaxPairs = 8;
void gemm_sum_nt(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const Tensor& out, float beta = 0.f,
                 const std::vector<Tensor>& a_col_sums = {});
// CUDA: whether gemm_sum_nt may use its one-kernel form (default on; FOLDCORE_GEMM_SUM=fused|per_pair).
// Tests and benchmarks force the per-pair products here.
void set_gemm_sum_fused(bool on);
bool gemm_sum_fused();
// This thread's gemm_sum_nt calls that ran as the one kernel (tests: which form ran).
int64_t gemm_sum_fused_calls();

// CUDA: 16-bit operands into an fp32 out run as one cuBLASLt product; where cuBLASLt offers no
// algorithm for that mix, as a 16-bit product plus an fp32 add. Tests force that second path here.
void set_gemm_mixed_fallback(bool on);
bool gemm_mixed_fallback();
// CUDA: a batch with one bias per entry runs as one cuBLASLt product (its bias batch stride);
// where cuBLASLt offers no algorithm for it, as one product per entry with that entry's bias.
// Tests force that second path here.
void set_gemm_bias_batch_fallback(bool on);
bool gemm_bias_batch_fallback();

// CUDA: each thread keeps the cuBLASLt plan of every GEMM shape it ran (descriptors, layouts and
// the heuristic's algorithm, keyed by dtypes, sizes, transposes, leading dims, batch strides, the
// epilogue and the operands' alignments), so a repeated shape — every block of a stack — skips the
// descriptor set-up and the heuristic query on the host. Plans made and reused by this thread.
struct GemmPlanStats {
  int64_t made = 0, reused = 0;
};
GemmPlanStats gemm_plan_stats();

}  // namespace foldcore::ops
