// Validation and device dispatch for the attention family (see attention.h for the math).
#include "kernels/attention.h"

#include <atomic>
#include <string>
#include <vector>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/env_choice.h"
#ifdef FOLDCORE_HAVE_CUDA
#include "kernels/cuda/attention_cuda.h"
#endif

namespace foldcore::ops {
namespace {

void check_shape(const Tensor& t, const Shape& want, const char* op, const char* name) {
  FC_CHECK(t.defined(), op, ": ", name, " is required");
  FC_CHECK(t.shape() == want, op, ": ", name, " has shape ", t.shape().str(), ", expected ", want.str());
}

void check_like(const Tensor& t, const Tensor& ref, const Shape& want, const char* op, const char* name) {
  check_shape(t, want, op, name);
  FC_CHECK(t.dtype() == ref.dtype(), op, ": ", name, " is ", dtype_name(t.dtype()), ", expected ",
           dtype_name(ref.dtype()));
  FC_CHECK(t.device() == ref.device(), op, ": ", name, " is on ", t.device().str(), ", expected ",
           ref.device().str());
  FC_CHECK(t.stride(-1) == 1 || t.size(-1) == 1, op, ": ", name, " must have unit stride in its last dim (strides ",
           t.strides().str(), ")");
}

// A bias or dbias dim must be the full extent or 1 (broadcast / reduced).
void check_broadcastable(const Tensor& t, const Shape& full, const char* op, const char* name, size_t idx) {
  FC_CHECK(t.dim() == 4, op, ": ", name, "[", idx, "] must be 4-D, got ", t.shape().str());
  for (int d = 0; d < 4; ++d)
    FC_CHECK(t.size(d) == full[d] || t.size(d) == 1, op, ": ", name, "[", idx, "] shape ", t.shape().str(),
             " is not broadcastable to ", full.str(), " (each dim must be full or 1)");
}

void check_cu_seqlens(const Tensor& cu, int64_t L, const char* op) {
  FC_CHECK(cu.dtype() == DType::i32 && cu.dim() == 1 && cu.size(0) >= 2, op,
           ": cu_seqlens must be i32 [n+1] with n >= 1, got ", cu.str());
  FC_CHECK(cu.is_contiguous(), op, ": cu_seqlens must be contiguous");
  if (cu.device().is_cpu()) {  // on CUDA the values are not inspected (that would synchronise)
    const int32_t* c = cu.data<int32_t>();
    const int64_t n = cu.size(0) - 1;
    FC_CHECK(c[0] == 0 && c[n] == L, op, ": cu_seqlens must start at 0 and end at L = ", L, " (got ", c[0],
             " .. ", c[n], ")");
    for (int64_t s = 0; s < n; ++s) FC_CHECK(c[s] <= c[s + 1], op, ": cu_seqlens must be non-decreasing");
  }
}

void validate_inputs(const AttentionInputs& in, const char* op) {
  FC_CHECK(in.q.defined() && in.k.defined() && in.v.defined(), op, ": q, k and v are required");
  FC_CHECK(is_floating(in.q.dtype()), op, ": q must be f32/bf16/f16, got ", dtype_name(in.q.dtype()));
  FC_CHECK(in.q.dim() == 4, op, ": q must be [B,H,Lq,D], got ", in.q.shape().str());
  FC_CHECK(in.k.dim() == 4, op, ": k must be [B,H,Lk,D], got ", in.k.shape().str());
  const int64_t B = in.q.size(0), H = in.q.size(1), Lq = in.q.size(2), D = in.q.size(3), Lk = in.k.size(2);
  check_like(in.q, in.q, in.q.shape(), op, "q");
  check_like(in.k, in.q, Shape{B, H, Lk, D}, op, "k");
  check_like(in.v, in.q, Shape{B, H, Lk, D}, op, "v");
  if (in.gate.defined()) check_like(in.gate, in.q, in.q.shape(), op, "gate");
  FC_CHECK(in.biases.size() <= static_cast<size_t>(kMaxBiases), op, ": at most ", kMaxBiases, " biases, got ",
           in.biases.size());
  const Shape full{B, H, Lq, Lk};
  for (size_t t = 0; t < in.biases.size(); ++t) {
    const Tensor& b = in.biases[t];
    FC_CHECK(b.defined(), op, ": bias[", t, "] is undefined");
    check_broadcastable(b, full, op, "bias", t);
    FC_CHECK(b.dtype() == in.q.dtype() && b.device() == in.q.device(), op, ": bias[", t, "] is ", b.str(),
             ", expected dtype ", dtype_name(in.q.dtype()), " on ", in.q.device().str());
  }
  if (in.cu_seqlens.defined()) {
    FC_CHECK(B == 1 && Lq == Lk, op, ": cu_seqlens needs B == 1 and Lq == Lk, got q ", in.q.shape().str(), ", k ",
             in.k.shape().str());
    FC_CHECK(in.cu_seqlens.device() == in.q.device(), op, ": cu_seqlens must be on ", in.q.device().str());
    check_cu_seqlens(in.cu_seqlens, Lq, op);
  }
}

void check_lse(const Tensor& lse, const Tensor& q, const char* op) {
  check_shape(lse, Shape{q.size(0), q.size(1), q.size(2)}, op, "lse");
  FC_CHECK(lse.dtype() == DType::f32 && lse.device() == q.device(), op, ": lse must be f32 on ",
           q.device().str(), ", got ", lse.str());
}

#ifndef FOLDCORE_HAVE_CUDA
[[noreturn]] void no_cuda(const char* op) { FC_THROW(op, ": CUDA tensors given but FoldCore was built without CUDA"); }
#endif

}  // namespace

namespace {
using detail::choice_from_env;
std::atomic<int>& kernel_choice() {
  static std::atomic<int> choice{choice_from_env("FOLDCORE_ATTENTION_KERNEL", {"mma", "smem"})};
  return choice;
}
std::atomic<int>& batch_slice_choice() {
  static std::atomic<int> rows{65535};
  return rows;
}
std::atomic<bool>& dbias_pass_choice() {
  static std::atomic<bool> choice{choice_from_env("FOLDCORE_ATTENTION_DBIAS", {"atomic", "pass"}) == 1};
  return choice;
}
std::atomic<bool>& bwd_vec_rows_choice() {
  static std::atomic<bool> choice{true};
  return choice;
}
std::atomic<bool>& bwd_row_form_choice() {
  static std::atomic<bool> choice{choice_from_env("FOLDCORE_ATTENTION_BWD_FORM", {"rows", "scores"}) == 0};
  return choice;
}
std::atomic<bool>& bwd_composed_choice() {
  static std::atomic<bool> choice{choice_from_env("FOLDCORE_ATTENTION_BWD", {"fused", "composed"}) == 1};
  return choice;
}
std::atomic<int64_t>& bwd_composed_bytes_choice() {
  static std::atomic<int64_t> bytes{int64_t{256} << 20};
  return bytes;
}
std::atomic<bool>& pipeline_choice() {
  static std::atomic<bool> choice{choice_from_env("FOLDCORE_ATTENTION_PIPELINE", {"on", "off"}) == 0};
  return choice;
}
}  // namespace

void set_attention_kernel(AttentionKernel k) { kernel_choice().store(static_cast<int>(k)); }
AttentionKernel attention_kernel() { return static_cast<AttentionKernel>(kernel_choice().load()); }
const char* attention_kernel_name(AttentionKernel k) { return k == AttentionKernel::mma ? "mma" : "smem"; }
void set_attention_dbias_pass(bool on) { dbias_pass_choice().store(on); }
bool attention_dbias_pass() { return dbias_pass_choice().load(); }
void set_attention_pipeline(bool on) { pipeline_choice().store(on); }
bool attention_pipeline() { return pipeline_choice().load(); }
void set_attention_bwd_row_form(bool on) { bwd_row_form_choice().store(on); }
bool attention_bwd_row_form() { return bwd_row_form_choice().load(); }
void set_attention_bwd_composed(bool on) { bwd_composed_choice().store(on); }
bool attention_bwd_composed() { return bwd_composed_choice().load(); }
void set_attention_bwd_composed_bytes(int64_t bytes) {
  FC_CHECK(bytes >= 1, "set_attention_bwd_composed_bytes: bytes must be >= 1, got ", bytes);
  bwd_composed_bytes_choice().store(bytes);
}
int64_t attention_bwd_composed_bytes() { return bwd_composed_bytes_choice().load(); }
void set_attention_bwd_vec_rows(bool on) { bwd_vec_rows_choice().store(on); }
bool attention_bwd_vec_rows() { return bwd_vec_rows_choice().load(); }
void set_attention_batch_slice(int rows) {
  FC_CHECK(rows >= 1 && rows <= 65535, "set_attention_batch_slice: rows must be in [1, 65535], got ", rows);
  batch_slice_choice().store(rows);
}
int attention_batch_slice() { return batch_slice_choice().load(); }

void attention_forward(const AttentionInputs& in, const Tensor& o, const Tensor& lse, const Tensor& a) {
  const char* op = "attention_forward";
  validate_inputs(in, op);
  check_like(o, in.q, in.q.shape(), op, "o");
  if (a.defined()) check_like(a, in.q, in.q.shape(), op, "a");
  check_lse(lse, in.q, op);
  if (in.q.device().is_cpu()) return cpu::attention_forward(in, o, lse, a);
#ifdef FOLDCORE_HAVE_CUDA
  cuda::attention_forward(in, o, lse, a);
#else
  no_cuda(op);
#endif
}

void attention_combine(const Tensor& a, const Tensor& lse, const Tensor& a_part, const Tensor& lse_part) {
  const char* op = "attention_combine";
  FC_CHECK(a.defined() && lse.defined() && a_part.defined() && lse_part.defined(), op,
           ": a, lse, a_part and lse_part are required");
  FC_CHECK(is_floating(a.dtype()) && a.dim() == 4, op, ": a must be a float [B,H,L,D] tensor, got ", a.str());
  check_like(a, a, a.shape(), op, "a");
  check_like(a_part, a, a.shape(), op, "a_part");
  const Shape rows{a.size(0), a.size(1), a.size(2)};
  for (const auto& [t, name] : {std::pair{&lse, "lse"}, std::pair{&lse_part, "lse_part"}}) {
    check_shape(*t, rows, op, name);
    FC_CHECK(t->dtype() == DType::f32 && t->device() == a.device(), op, ": ", name, " must be f32 on ",
             a.device().str(), ", got ", t->str());
  }
  if (a.numel() == 0 && lse.numel() == 0) return;
  if (a.device().is_cpu()) return cpu::attention_combine(a, lse, a_part, lse_part);
#ifdef FOLDCORE_HAVE_CUDA
  cuda::attention_combine(a, lse, a_part, lse_part);
#else
  no_cuda(op);
#endif
}

void attention_backward(const AttentionInputs& in, const Tensor& a_or_o, const Tensor& lse, const Tensor& d_o,
                        const AttentionGrads& grads) {
  const char* op = "attention_backward";
  validate_inputs(in, op);
  check_like(a_or_o, in.q, in.q.shape(), op, "a_or_o");
  check_like(d_o, in.q, in.q.shape(), op, "d_o");
  check_lse(lse, in.q, op);
  if (grads.dq.defined()) check_like(grads.dq, in.q, in.q.shape(), op, "dq");
  if (grads.dk.defined()) check_like(grads.dk, in.q, in.k.shape(), op, "dk");
  if (grads.dv.defined()) check_like(grads.dv, in.q, in.v.shape(), op, "dv");
  if (grads.dgate.defined()) {
    FC_CHECK(in.gate.defined(), op, ": dgate given but there is no gate");
    check_like(grads.dgate, in.q, in.q.shape(), op, "dgate");
  }
  FC_CHECK(grads.dbias.empty() || grads.dbias.size() == in.biases.size(), op, ": ", grads.dbias.size(),
           " dbias tensors for ", in.biases.size(), " biases");
  const Shape full{in.q.size(0), in.q.size(1), in.q.size(2), in.k.size(2)};
  for (size_t t = 0; t < grads.dbias.size(); ++t) {
    const Tensor& db = grads.dbias[t];
    if (!db.defined()) continue;
    check_broadcastable(db, full, op, "dbias", t);
    FC_CHECK(db.dtype() == DType::f32 && db.device() == in.q.device(), op, ": dbias[", t, "] must be f32 on ",
             in.q.device().str(), ", got ", db.str());
  }
  FC_CHECK(grads.dbias_zero.empty() || grads.dbias_zero.size() == grads.dbias.size(), op, ": ",
           grads.dbias_zero.size(), " dbias_zero flags for ", grads.dbias.size(), " dbias tensors");
  if (in.q.device().is_cpu()) {
    grads.zero_fresh_dbias();
    return cpu::attention_backward(in, a_or_o, lse, d_o, grads);
  }
#ifdef FOLDCORE_HAVE_CUDA
  cuda::attention_backward(in, a_or_o, lse, d_o, grads);
#else
  no_cuda(op);
#endif
}

namespace {
void validate_global(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, const Tensor& g,
                     const char* op) {
  FC_CHECK(q.defined() && k.defined() && v.defined() && g.defined(), op, ": q, k, v and g are required");
  FC_CHECK(is_floating(q.dtype()), op, ": q must be f32/bf16/f16, got ", dtype_name(q.dtype()));
  FC_CHECK(q.dim() == 3, op, ": q must be [B,H,D], got ", q.shape().str());
  FC_CHECK(k.dim() == 3, op, ": k must be [B,S,D], got ", k.shape().str());
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), S = k.size(1);
  check_like(q, q, q.shape(), op, "q");
  check_like(k, q, Shape{B, S, D}, op, "k");
  check_like(v, q, Shape{B, S, D}, op, "v");
  check_like(g, q, Shape{B, S, H, D}, op, "g");
  if (bias.defined()) check_like(bias, q, Shape{B, S}, op, "bias");
}
}  // namespace

void global_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                              const Tensor& g, float scale, const Tensor& o, const Tensor& a) {
  const char* op = "global_attention_forward";
  validate_global(q, k, v, bias, g, op);
  check_like(o, q, g.shape(), op, "o");
  check_like(a, q, q.shape(), op, "a");
  if (q.device().is_cpu()) return cpu::global_attention_forward(q, k, v, bias, g, scale, o, a);
#ifdef FOLDCORE_HAVE_CUDA
  cuda::global_attention_forward(q, k, v, bias, g, scale, o, a);
#else
  no_cuda(op);
#endif
}

void global_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                               const Tensor& g, float scale, const Tensor& a, const Tensor& d_o, const Tensor& dq,
                               const Tensor& dk, const Tensor& dv, const Tensor& dg) {
  const char* op = "global_attention_backward";
  validate_global(q, k, v, bias, g, op);
  check_like(a, q, q.shape(), op, "a");
  check_like(d_o, q, g.shape(), op, "d_o");
  check_like(dq, q, q.shape(), op, "dq");
  check_like(dk, q, k.shape(), op, "dk");
  check_like(dv, q, v.shape(), op, "dv");
  check_like(dg, q, g.shape(), op, "dg");
  if (q.device().is_cpu()) return cpu::global_attention_backward(q, k, v, bias, g, scale, a, d_o, dq, dk, dv, dg);
#ifdef FOLDCORE_HAVE_CUDA
  cuda::global_attention_backward(q, k, v, bias, g, scale, a, d_o, dq, dk, dv, dg);
#else
  no_cuda(op);
#endif
}

}  // namespace foldcore::ops
