// ops::gemm_sum_nt (kernels/gemm.h): validation, then one product per operand pair (CPU, and CUDA
// where the one-kernel form does not apply) or the one mma.sync kernel (CUDA).
#include <atomic>
#include <cstdint>
#include <string>

#include "kernels/env_choice.h"
#include "kernels/gemm.h"
#include "kernels/gemm_problem.h"
#include "kernels/pointwise_checks.h"
#include "kernels/reduce.h"
#ifdef FOLDCORE_HAVE_CUDA
#include "kernels/cuda/gemm_cuda.h"
#endif

namespace foldcore::ops {
namespace {

std::atomic<bool>& fused_choice() {
  static std::atomic<bool> choice{detail::choice_from_env("FOLDCORE_GEMM_SUM", {"fused", "per_pair"}) == 0};
  return choice;
}
thread_local int64_t t_fused_calls = 0;

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The one kernel's conditions (kernels/cuda/gemm_sum_cuda.cu): bf16 pairs read 16 bytes at a time
// (8 elements: base, row stride and K_i multiples of 8) or, with K_i <= 32 (one chunk of the
// kernel), element by element; out written two elements at a time; the CTA rows of M within the
// grid's y limit.
bool fused_fits(const GemmSumProblem& p) {
  if (p.dtype != DType::bf16 || p.n_pairs < 2 || p.n % 2 != 0 || p.ldo % 2 != 0 ||
      !aligned(p.out, 2 * dtype_size(p.out_dtype)))
    return false;
  if ((p.m + 127) / 128 > 65535) return false;
  for (int i = 0; i < p.n_pairs; ++i)
    if (!p.pair[i].vec16 && p.pair[i].k > 32) return false;
  return true;
}

}  // namespace

void set_gemm_sum_fused(bool on) { fused_choice().store(on); }
bool gemm_sum_fused() { return fused_choice().load(); }
int64_t gemm_sum_fused_calls() { return t_fused_calls; }

void gemm_sum_nt(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const Tensor& out, float beta,
                 const std::vector<Tensor>& a_col_sums) {
  const int n_pairs = static_cast<int>(a.size());
  FC_CHECK(n_pairs >= 1 && n_pairs <= kGemmSumMaxPairs && b.size() == a.size(), "gemm_sum_nt: ", a.size(), " a and ",
           b.size(), " b operands (1 to ", kGemmSumMaxPairs, " pairs)");
  FC_CHECK(a_col_sums.empty() || a_col_sums.size() == a.size(), "gemm_sum_nt: ", a_col_sums.size(),
           " column-sum destinations for ", a.size(), " pairs");
  const DType dt = a[0].defined() ? a[0].dtype() : DType::f32;
  FC_CHECK(dt == DType::bf16 || dt == DType::f16, "gemm_sum_nt: a[0] ", a[0].defined() ? a[0].str() : "undefined",
           " must be bf16 or f16");
  FC_CHECK(out.defined() && out.dim() == 2 && (out.dtype() == DType::f32 || out.dtype() == dt) &&
               (out.size(1) <= 1 || out.stride(1) == 1),
           "gemm_sum_nt: out ", out.defined() ? out.str() : "undefined", " must be a 2-D f32 or ", dtype_name(dt),
           " tensor with unit stride in its last dim");
  const int64_t m = out.size(0), n = out.size(1);
  GemmSumProblem p;
  p.dtype = dt;
  p.n_pairs = n_pairs;
  p.m = m;
  p.n = n;
  p.out = out.data_ptr();
  p.out_dtype = out.dtype();
  p.ldo = out.stride(0);
  p.beta = beta;
  for (int i = 0; i < n_pairs; ++i) {
    const Tensor& ai = a[static_cast<size_t>(i)];
    const Tensor& bi = b[static_cast<size_t>(i)];
    FC_CHECK(ai.defined() && bi.defined() && ai.dim() == 2 && bi.dim() == 2 && ai.dtype() == dt && bi.dtype() == dt,
             "gemm_sum_nt: pair ", i, ": a ", ai.defined() ? ai.str() : "undefined", " and b ",
             bi.defined() ? bi.str() : "undefined", " must be 2-D ", dtype_name(dt));
    FC_CHECK(ai.size(0) == m && bi.size(0) == n && ai.size(1) == bi.size(1), "gemm_sum_nt: pair ", i, ": a ", ai.str(),
             " · b ", bi.str(), "ᵀ does not give out ", out.str());
    FC_CHECK((ai.size(1) <= 1 || ai.stride(1) == 1) && (bi.size(1) <= 1 || bi.stride(1) == 1), "gemm_sum_nt: pair ", i,
             ": a ", ai.str(), " and b ", bi.str(), " must have unit stride in their last dim");
    FC_CHECK(ai.device() == out.device() && bi.device() == out.device(), "gemm_sum_nt: pair ", i, ": a ", ai.str(),
             ", b ", bi.str(), " and out ", out.str(), " must be on one device");
    GemmSumPair& q = p.pair[i];
    q = {ai.data_ptr(), bi.data_ptr(), ai.stride(0), bi.stride(0), ai.size(1), nullptr};
    q.vec16 = q.k % 8 == 0 && q.lda % 8 == 0 && q.ldb % 8 == 0 && aligned(q.a, 16) && aligned(q.b, 16);
    if (!a_col_sums.empty() && a_col_sums[static_cast<size_t>(i)].defined()) {
      const Tensor& ci = a_col_sums[static_cast<size_t>(i)];
      detail::check_bias_grad("gemm_sum_nt: pair " + std::to_string(i), "column sums", ci, "a", ai);
      q.a_col_sum = ci.data<float>();
    }
  }
  // The column sums outside the one kernel: one per pair (over no rows: nothing to add).
  const auto col_sums_per_pair = [&] {
    for (size_t i = 0; i < a_col_sums.size(); ++i)
      if (a_col_sums[i].defined() && m > 0) sum_rows_accumulate(a[i].contiguous(), a_col_sums[i]);
  };
  if (m == 0 || n == 0) {
    col_sums_per_pair();
    return;
  }
#ifdef FOLDCORE_HAVE_CUDA
  if (out.device().is_cuda() && gemm_sum_fused() && fused_fits(p)) {
    ++t_fused_calls;
    cuda::gemm_sum_nt(p, out.device());
    return;
  }
#endif
  // One product per pair, each added into what the one before left; a 16-bit out through an fp32
  // temporary (out's values converted exactly into it where beta reads them), rounded once at the end.
  const bool narrow = out.dtype() != DType::f32;
  Tensor acc = out;
  if (narrow) {
    acc = Tensor::empty({m, n}, DType::f32, out.device());
    if (beta != 0.f) acc.copy_(out);
  }
  for (int i = 0; i < n_pairs; ++i) {
    GemmArgs g;
    g.trans_b = true;
    g.beta = i == 0 ? beta : 1.f;
    gemm(a[static_cast<size_t>(i)], b[static_cast<size_t>(i)], acc, g);
  }
  if (narrow) copy_tensor(out, acc);
  col_sums_per_pair();
}

}  // namespace foldcore::ops
