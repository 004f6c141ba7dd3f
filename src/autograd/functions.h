// Differentiable ops: thin wrappers over kernels/*.h that record a graph node (when grad mode is
// on and an input requires grad) whose backward calls the op's backward kernels.
// Shapes in comments; "…" = any leading dims. Float inputs of an op must share a dtype unless
// stated; binary pointwise ops promote mixed float dtypes to the wider one (f32) via cast().
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "core/philox.h"
#include "kernels/gemm.h"

namespace foldcore::autograd {

// ---------------------------------------------------------------- dtype
// y = x in dtype `dtype` (identity when equal); the gradient is cast back.
Variable cast(const Variable& x, DType dtype);

// ---------------------------------------------------------------- GEMM (autocast)
// y[…, out] = act(x[…, in] · w[in, out] + b[out]); b optional. Under autocast x, w, b are cast
// to the autocast dtype for the GEMM; the weight/bias grads go to their fp32 master buffers.
Variable linear(const Variable& x, const Variable& w, const Variable& b = {},
                ops::Activation act = ops::Activation::none);
// Several projections of one input in one op: ys[i] = x[…, in] · ws[i] + bs[i] (bs[i] may be
// undefined: no bias; bs may be empty: none has one), shaped shapes[i] (default […, out_i]; any
// shape of as many elements). The values of linear() per projection; under autocast x is cast once,
// each run of projections of equal width is one strided-batch GEMM (their weights stacked, once per
// ParamCastScope; one bias per entry), and the outputs lie back to back in one buffer. The backward
// takes their gradients as one buffer (Node::packed_output_grads) and accumulates dx = Σ dy_i·w_iᵀ in
// fp32 (linear() rounds each product to the compute dtype before the engine sums them); a run whose
// weights' gradients lie back to back (a flat gradient buffer) gets its dW by one GEMM, and one
// whose biases' gradients do its db by one batched column sum.
std::vector<Variable> linears(const Variable& x, const std::vector<Variable>& ws, const std::vector<Variable>& bs = {},
                              const std::vector<Shape>& shapes = {});
// This thread's linears() products since it started: runs computed by one strided-batch GEMM
// (forward), runs whose weight gradients one GEMM gave and runs whose bias gradients one batched
// column sum gave (backward), and backwards whose bias gradients ops::gemm_sum_nt made with the
// input gradient (16-bit compute, 2 to 8 projections).
struct LinearsStats {
  int64_t batched_runs = 0, batched_weight_grads = 0, batched_bias_grads = 0, bias_grads_with_dx = 0;
};
LinearsStats linears_stats();
// c[…, M, N] = op(a)[…, M, K] · op(b)[…, K, N]; b may be 2-D (shared by every batch entry).
Variable matmul(const Variable& a, const Variable& b, bool trans_a = false, bool trans_b = false);
// y[i, j, :] = Σ_(c, e) (Σ_s a[s, i, c]·b[s, j, e])·w[c·E + e, :] + bias for a [S, I, C], b [S, J, E],
// w [C·E, Z] (AlphaFold's outer product mean before its normalisation: output_w viewed as [c·e, c_z])
// and bias [Z] (optional): [I, J, Z] in the GEMM dtype (autocast). The outer products are one
// strided-batch GEMM (per i: bᵀ·a_i, b shared) laid out [I, J, E, C], as the projection reads them
// (w's rows taken in (e, c) order: a permuted copy of w, not of the products). The backward makes
// their gradient as [(i, c), (e, j)] (per i: w·dy_iᵀ), the layout of both operands' gradient GEMMs
// (da = b·dᵀ, db = a·d with b and db as [S, E, J]), so nothing outer-product-sized is transposed.
Variable outer_product_project(const Variable& a, const Variable& b, const Variable& w,
                               const Variable& bias = Variable());

// ---------------------------------------------------------------- normalisation, softmax, loss
// LayerNorm over the last dim; gamma, beta f32 [C]; statistics in fp32; y has x's dtype, or
// `out` (a 16-bit dtype for an f32 x: y rounded once as it is stored, the same values as casting an
// f32 y, without the f32 y; its gradient arrives in that dtype and is read as it is). The
// backward adds x's gradient into an existing gradient of x directly where it can (a residual
// stream's gradient summed over its uses) instead of through a temporary.
Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float eps = 1e-5f,
                    std::optional<DType> out = std::nullopt);
// LayerNorm over the FIRST dim of a channel-major x [C, rows...], y [rows..., C]: the values and
// gradients of layer_norm(contiguous(permute(x, channels last)), ...) without the transposed copies
// of x and of its gradient (kernels/layernorm.h, layernorm_channel_major_*). The triangle
// multiplication's centre LayerNorm, whose input comes out of its per-channel contraction [C, N, N].
Variable layer_norm_channel_major(const Variable& x, const Variable& gamma, const Variable& beta, float eps = 1e-5f,
                                  std::optional<DType> out = std::nullopt);
// LayerNorm of x [rows..., C] and a projection of it without bias, laid out heads first:
// out[h, rows...] = Σ_c (LN(x)·γ + β)[rows..., c]·w[c, h] (kernels/layernorm.h,
// layernorm_project_heads_*), in the GEMM dtype (autocast; LN(x) rounded to it as the composition
// stores it). The values and gradients of permute(linear(layer_norm(x), w), heads first), without
// LN(x), the [rows, H] product or the transposed copies: AlphaFold's pair bias of the MSA row
// attention. Its gradient is read in fp32 where it comes so (an attention's bias gradient).
Variable layer_norm_project_heads(const Variable& x, const Variable& gamma, const Variable& beta, const Variable& w,
                                  float eps = 1e-5f);
Variable softmax(const Variable& x);  // over the last dim

struct CrossEntropyOptions {
  Tensor labels;   // hard labels i32/i64 [rows]; < 0 = ignored
  Tensor targets;  // or soft targets [rows…, C]
  Tensor weights;  // optional f32 [rows]
  // Denominator of the mean; <= 0: Σ_r w[r] over the non-ignored rows (computed on the host).
  double denominator = 0;
};
// Scalar (shape {}) f32 mean loss Σ_r loss[r] / denominator; logits [rows…, C].
Variable softmax_cross_entropy(const Variable& logits, const CrossEntropyOptions& opt);

// ---------------------------------------------------------------- attention (autocast)
// Gated multi-head attention (kernels/attention.h), in the layout projections produce:
// q, gate: [B, Lq, H, D]; k, v: [B, Lk, H, D] (views of [B, L, H·D] linear outputs);
// biases: 4-D Variables broadcastable to [B, H, Lq, Lk] (pair bias [1,H,Lq,Lk], mask bias
// [B,1,1,Lk], …; gradients flow to those that require them); cu_seqlens i32 [n+1] (B == 1).
// Returns o [B, Lq, H, D] = sigmoid(gate) ⊙ Σ_j softmax_j(scale·q·k + Σ biases) v.
// seq_major: q, gate and o are [Lq, B, H, D], k and v [Lk, B, H, D] instead (the attention runs
// along the first axis: AlphaFold's column-wise attentions on projections of a tensor as it lies,
// with no transposed copies; the kernels take the permuted views, the gradients come back in
// this layout); the biases keep their [B, H, Lq, Lk] terms. The same values.
Variable attention(const Variable& q, const Variable& k, const Variable& v, const std::vector<Variable>& biases = {},
                   const Variable& gate = {}, const Tensor& cu_seqlens = {}, float scale = 1.f,
                   bool seq_major = false);
// Inference (no graph; inputs must not require grad): the ungated attention over one PART of the
// keys, as attention() lays it out, with its log-sum-exp: {a [B, Lq, H, D], lse [B, H, Lq] f32}.
// Parts over disjoint keys merge with ops::attention_combine (kernels/attention.h) on the
// [B, H, Lq, D] views (permute {0, 2, 1, 3}) into the attention over all of them.
struct AttentionPart {
  Tensor a, lse;
};
AttentionPart attention_part(const Variable& q, const Variable& k, const Variable& v,
                             const std::vector<Variable>& biases = {}, float scale = 1.f);
// AF2 Alg. 19: q [B,H,D], k, v [B,S,D], bias [B,S] (no grad), gate [B,S,H,D] → o [B,S,H,D].
Variable global_attention(const Variable& q, const Variable& k, const Variable& v, const Tensor& bias,
                          const Variable& gate, float scale);

// ---------------------------------------------------------------- pointwise
Variable add(const Variable& a, const Variable& b);  // b may broadcast to a's shape
Variable mul(const Variable& a, const Variable& b);  // b may broadcast to a's shape
Variable scale(const Variable& x, float s);
Variable relu(const Variable& x);
Variable gelu(const Variable& x);
Variable sigmoid(const Variable& x);
Variable sigmoid_gate(const Variable& g, const Variable& x);  // sigmoid(g) ⊙ x
// The triangle update's masked gated edge made channel-major in one op (kernels/elementwise.h,
// masked_gate_channel_major_forward): out[c, i, k] = (sigmoid(g) ⊙ x)[i, k, c] · mask[i, k] for g, x
// [N1, N2, C] and a constant mask [N1, N2] → [C, N1, N2]; the values and gradients of
// contiguous(permute(mul(sigmoid_gate(g, x), mask[..., None]), {2, 0, 1})), without its passes.
Variable masked_gate_channel_major(const Variable& g, const Variable& x, const Tensor& mask);

// Dropout randomness: rate p, the generator the mask stream offset is reserved from, and the
// axes along which the mask is shared (AF2 row-wise: {-3}, column-wise: {-2}). gen == nullptr or
// p == 0 means identity (eval).
struct DropoutSpec {
  float p = 0.f;
  Generator* gen = nullptr;
  std::vector<int> shared_dims;
  // Added to every mask index (kernels/dropout_mask.h): the mask of a slab cut along the mask's
  // leading unshared axis, as part of the whole tensor's (a DAP rank's rows).
  int64_t index_base = 0;
};
Variable dropout(const Variable& x, const DropoutSpec& d);
// out = residual + dropout(x + bias); bias [C] and residual optional. With `in_place`, out is
// written into residual's storage when that is safe: nothing else (in particular no saved tensor
// of any backward) refers to residual's storage, and residual is not a leaf that needs grad.
// Dtypes: out is the promoted dtype of x and residual, except for an fp32 x without bias into a
// 16-bit residual, where out keeps residual's dtype (a 16-bit stream stays 16-bit: the sum taken
// in fp32 and rounded once).
Variable bias_dropout_residual(const Variable& x, const Variable& bias, const Variable& residual,
                               const DropoutSpec& d, bool in_place = false);
// Post-LN residual block in one fused op (kernels/layernorm.h):
//   y = LayerNorm(residual + dropout(x + bias))·gamma + beta
// equal to layer_norm(bias_dropout_residual(x, bias, residual, d), gamma, beta, eps) with the same
// dropout stream. bias [C] optional; gamma, beta [C]. The backward saves the pre-LN sum h; with
// `in_place`, h is written into residual's storage under bias_dropout_residual's safety rule.
// Without a backward (no grad), h is not stored at all.
Variable bias_dropout_residual_layer_norm(const Variable& x, const Variable& bias, const Variable& residual,
                                          const DropoutSpec& d, const Variable& gamma, const Variable& beta,
                                          float eps, bool in_place = false);
// Pre-LN residual add and the next module's LayerNorm in one pass (kernels/layernorm.h):
//   h = residual + dropout(x),  y = LayerNorm(h)·gamma + beta in dtype `out` (default: h's)
// returned as {h, y}, equal to {bias_dropout_residual(x, {}, residual, d, in_place), layer_norm(h,
// gamma, beta, eps, out)} bit for bit, with the same dropout stream and the same two backward nodes
// (so the gradients are theirs), without the LayerNorm's second read of h. x: residual's dtype,
// 16-bit for an fp32 residual, or fp32 for a 16-bit one (h keeps residual's dtype, as in
// bias_dropout_residual); `out`: residual's dtype or 16-bit for an fp32 one. Other dtypes run the
// two ops.
std::pair<Variable, Variable> residual_layer_norm(const Variable& x, const Variable& residual, const DropoutSpec& d,
                                                  const Variable& gamma, const Variable& beta, float eps,
                                                  std::optional<DType> out = std::nullopt, bool in_place = false);

// ---------------------------------------------------------------- gather
Variable embedding(const Variable& table, const Tensor& idx);  // table [V, C], idx […] → […, C]
Tensor one_hot(const Tensor& idx, int64_t num_classes, DType dtype = DType::f32);  // no grad

// ---------------------------------------------------------------- views and reductions
// Views share storage with x; their backward copies the grad into a (zero) grad of x's shape.
Variable reshape(const Variable& x, const Shape& shape);
Variable permute(const Variable& x, const std::vector<int>& order);
Variable transpose(const Variable& x, int a, int b);
Variable narrow(const Variable& x, int axis, int64_t start, int64_t length);
Variable unsqueeze(const Variable& x, int axis);
Variable contiguous(const Variable& x);
Variable sum(const Variable& x, const std::vector<int>& axes);
Variable mean(const Variable& x, const std::vector<int>& axes);
Variable concat(const std::vector<Variable>& xs, int axis);

}  // namespace foldcore::autograd
