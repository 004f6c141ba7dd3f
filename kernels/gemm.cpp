// GEMM dispatcher: validates shapes/dtypes/layouts, reduces the call to a GemmProblem and hands it
// to the CPU or CUDA backend.
#include "kernels/gemm.h"

#include <atomic>

#include "kernels/cpu/gemm_cpu.h"
#include "kernels/gemm_problem.h"
#ifdef FOLDCORE_HAVE_CUDA
#include "kernels/cuda/gemm_cuda.h"
#endif

namespace foldcore::ops {
namespace {

Shape batch_dims(const Tensor& t) {
  Shape s;
  for (int i = 0; i + 2 < t.dim(); ++i) s.push_back(t.size(i));
  return s;
}

// Describes `t` ([batch..., rows, cols]) as a strided batch of row-major matrices. A matrix whose
// leading dims do not collapse to one uniform stride (e.g. a permuted view) is rejected: the caller
// must make it contiguous first. Size-1 dims may carry any stride.
MatrixRef matrix_ref(const Tensor& t, const char* name, bool writable) {
  const int nd = t.dim();
  const int64_t rows = t.size(-2), cols = t.size(-1);
  FC_CHECK(cols <= 1 || t.stride(-1) == 1, "gemm: ", name, " ", t.str(),
           " must have unit stride in its last dim (make it contiguous)");
  MatrixRef r;
  r.ptr = t.data_ptr();
  r.ld = (rows <= 1 || cols == 0) ? std::max<int64_t>(cols, 1) : t.stride(-2);
  FC_CHECK(r.ld >= std::max<int64_t>(cols, 1), "gemm: ", name, " ", t.str(), " has row stride ", r.ld,
           " smaller than its row length ", cols);
  // Collapse batch dims from the innermost outwards: each non-unit dim must step by exactly the
  // extent of the dims inside it.
  int64_t expect = -1;  // stride the next outer non-unit dim must have
  for (int i = nd - 3; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (expect < 0) {
      r.batch_stride = t.stride(i);
    } else {
      FC_CHECK(t.stride(i) == expect, "gemm: ", name, " ", t.str(),
               " batch dims are not a uniform strided batch (make it contiguous)");
    }
    expect = t.stride(i) * t.size(i);
  }
  if (writable && expect >= 0) {
    FC_CHECK(r.batch_stride != 0, "gemm: ", name, " ", t.str(), " is broadcast over its batch dims; cannot write it");
  }
  return r;
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args) {
  FC_CHECK(a.defined() && b.defined() && out.defined(), "gemm: a, b and out must be defined");
  FC_CHECK(a.dim() >= 2 && b.dim() >= 2 && out.dim() >= 2, "gemm: operands must be at least 2-D, got a ",
           a.str(), ", b ", b.str(), ", out ", out.str());
  // One floating dtype for a, b and out; or 16-bit a and b with an fp32 out (a weight gradient
  // accumulated into its fp32 master gradient), without bias, activation or pre_act.
  const DType dt = a.dtype();
  const bool mixed = out.dtype() == DType::f32 && is_16bit_float(dt);
  FC_CHECK(is_floating(dt) && b.dtype() == dt && (out.dtype() == dt || mixed), "gemm: a ", a.str(), ", b ", b.str(),
           " and out ", out.str(), " must share one floating dtype (or be 16-bit with an f32 out)");
  FC_CHECK(!mixed || (!args.bias.defined() && !args.pre_act.defined() && args.act == Activation::none), "gemm: a ",
           a.str(), " · b ", b.str(), " into an f32 out takes no bias, activation or pre_act");
  FC_CHECK(a.device() == out.device() && b.device() == out.device(), "gemm: a ", a.str(), ", b ", b.str(),
           " and out ", out.str(), " must be on one device");
  const int64_t m = args.trans_a ? a.size(-1) : a.size(-2);
  const int64_t ka = args.trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = args.trans_b ? b.size(-1) : b.size(-2);
  const int64_t n = args.trans_b ? b.size(-2) : b.size(-1);
  FC_CHECK(ka == kb && out.size(-2) == m && out.size(-1) == n, "gemm: shape mismatch: a ", a.str(),
           (args.trans_a ? "ᵀ" : ""), " · b ", b.str(), (args.trans_b ? "ᵀ" : ""), " -> out ", out.str());
  const Shape ob = batch_dims(out);
  FC_CHECK(a.dim() == 2 || batch_dims(a) == ob, "gemm: a ", a.str(), " batch dims must equal out's ", out.str(),
           " (or a must be 2-D and shared)");
  FC_CHECK(b.dim() == 2 || batch_dims(b) == ob, "gemm: b ", b.str(), " batch dims must equal out's ", out.str(),
           " (or b must be 2-D and shared)");

  GemmProblem p;
  p.dtype = dt;
  p.out_dtype = out.dtype();
  p.batch = ob.product();
  p.m = m;
  p.n = n;
  p.k = ka;
  p.trans_a = args.trans_a;
  p.trans_b = args.trans_b;
  p.alpha = args.alpha;
  p.beta = args.beta;
  p.act = args.act;
  p.a = matrix_ref(a, "a", false);
  p.b = matrix_ref(b, "b", false);
  p.out = matrix_ref(out, "out", true);
  if (a.dim() == 2) p.a.batch_stride = 0;
  if (b.dim() == 2) p.b.batch_stride = 0;
  if (args.bias.defined()) {
    const Tensor& bias = args.bias;
    Shape per_batch = ob;
    per_batch.push_back(n);
    const bool shared = bias.dim() == 1 && bias.size(0) == n;
    FC_CHECK((shared || (ob.size() > 0 && bias.shape() == per_batch)) && bias.is_contiguous() && bias.dtype() == dt &&
                 bias.device() == out.device(),
             "gemm: bias ", bias.str(), " must be a contiguous [", n, "] or ", per_batch.str(), " ", dtype_name(dt),
             " tensor on ", out.device().str());
    p.bias = bias.data_ptr();
    p.bias_batch_stride = shared ? 0 : n;
  }
  if (args.pre_act.defined()) {
    const Tensor& pa = args.pre_act;
    FC_CHECK(pa.shape() == out.shape() && pa.dtype() == dt && pa.device() == out.device(), "gemm: pre_act ",
             pa.str(), " must match out ", out.str());
    p.pre_act = matrix_ref(pa, "pre_act", true);
  }
  if (m == 0 || n == 0 || p.batch == 0) return;

  if (out.device().is_cpu()) {
    cpu::gemm(p);
  } else {
#ifdef FOLDCORE_HAVE_CUDA
    cuda::gemm(p, out.device());
#else
    FC_THROW("gemm: tensor on ", out.device().str(), " but this build has no CUDA backend");
#endif
  }
}

namespace {
std::atomic<bool> g_mixed_fallback{false};
}  // namespace

void set_gemm_mixed_fallback(bool on) { g_mixed_fallback = on; }

namespace {
std::atomic<bool> g_bias_batch_fallback{false};
}  // namespace

void set_gemm_bias_batch_fallback(bool on) { g_bias_batch_fallback = on; }
bool gemm_bias_batch_fallback() { return g_bias_batch_fallback; }

GemmPlanStats gemm_plan_stats() {
#ifdef FOLDCORE_HAVE_CUDA
  return cuda::plan_stats();
#else
  return {};
#endif
}
bool gemm_mixed_fallback() { return g_mixed_fallback; }

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  FC_CHECK(a.defined() && b.defined() && a.dim() >= 2 && b.dim() >= 2, "matmul: operands must be at least 2-D, got a ",
           a.str(), ", b ", b.str());
  Shape s = a.dim() > 2 ? batch_dims(a) : batch_dims(b);
  FC_CHECK(a.dim() == 2 || b.dim() == 2 || batch_dims(a) == batch_dims(b), "matmul: batch dims of a ", a.str(),
           " and b ", b.str(), " differ");
  s.push_back(trans_a ? a.size(-1) : a.size(-2));
  s.push_back(trans_b ? b.size(-2) : b.size(-1));
  Tensor out = Tensor::empty(s, a.dtype(), a.device());
  GemmArgs args;
  args.trans_a = trans_a;
  args.trans_b = trans_b;
  gemm(a, b, out, args);
  return out;
}

}  // namespace foldcore::ops
