// Attention Functions over the fused kernels in kernels/attention.h.
// The autograd layout is [B, L, H, D] (a projection output [B, L, H·D] viewed per head); the
// kernels get [B, H, L, D] permuted views of the same memory, so no transposes are copied, and
// the gradients come out contiguous in the [B, L, H, D] layout the projections' backward wants.
#include "autograd/function_util.h"
#include "autograd/functions.h"
#include "kernels/attention.h"

namespace foldcore::autograd {
namespace {

Tensor bhld(const Tensor& t) { return t.permute({0, 2, 1, 3}); }  // [B,L,H,D] <-> [B,H,L,D]

// The autograd layout ([B, L, H, D], or [L, B, H, D] when seq_major) to the kernels' [B, H, L, D]
// view of the same memory, and back.
Tensor to_kernel(const Tensor& t, bool seq_major) { return seq_major ? t.permute({1, 2, 0, 3}) : bhld(t); }
Tensor from_kernel(const Tensor& t, bool seq_major) { return seq_major ? t.permute({2, 0, 1, 3}) : bhld(t); }

struct AttentionFn final : Function {
  ops::AttentionInputs in;  // kernel layout views of the saved compute-dtype inputs
  Tensor a_or_o, lse;
  DType cd = DType::f32;
  int n_bias = 0;
  bool seq_major = false;

  void backward(BackwardCtx& ctx) override {
    const auto kv = [this](const Tensor& t) { return to_kernel(t, seq_major); };
    const auto av = [this](const Tensor& t) { return from_kernel(t, seq_major); };
    const Tensor d_o = kv(ctx.grad_output(0));
    ops::AttentionGrads g;
    // Every present input gets a destination: the kernel computes dq/dk/dv together anyway.
    g.dq = kv(detail::new_grad_or_scratch(ctx, 0, av(in.q), cd));
    g.dk = kv(detail::new_grad_or_scratch(ctx, 1, av(in.k), cd));
    g.dv = kv(detail::new_grad_or_scratch(ctx, 2, av(in.v), cd));
    if (in.gate.defined()) g.dgate = kv(detail::new_grad_or_scratch(ctx, 3, av(in.gate), cd));
    // A bias's first gradient is a fresh slot the op zeroes (in its preprocess on CUDA) before adding.
    for (int t = 0; t < n_bias; ++t) {
      bool add = false;
      g.dbias.push_back(ctx.needs_grad(4 + t) ? detail::grad_to_add_or_new(ctx, 4 + t, DType::f32, add) : Tensor());
      g.dbias_zero.push_back(g.dbias.back().defined() && !add);
    }
    ops::attention_backward(in, a_or_o, lse, d_o, g);
  }
};

struct GlobalAttentionFn final : Function {
  Tensor q, k, v, bias, g, a;
  float scale = 1.f;
  void backward(BackwardCtx& ctx) override {
    const Tensor dq = detail::new_grad_or_scratch(ctx, 0, q, q.dtype());
    const Tensor dk = detail::new_grad_or_scratch(ctx, 1, k, k.dtype());
    const Tensor dv = detail::new_grad_or_scratch(ctx, 2, v, v.dtype());
    const Tensor dg = detail::new_grad_or_scratch(ctx, 3, g, g.dtype());
    ops::global_attention_backward(q, k, v, bias, g, scale, a, ctx.grad_output(0), dq, dk, dv, dg);
  }
};

}  // namespace

namespace {

// Checks attention()'s arguments and builds the kernel's inputs in the compute dtype cd (inputs
// whose last dim is not unit-stride, or in another dtype, are copied once).
ops::AttentionInputs kernel_inputs(const Variable& q, const Variable& k, const Variable& v,
                                   const std::vector<Variable>& biases, const Variable& gate,
                                   const Tensor& cu_seqlens, float scale, DType cd, bool seq_major = false) {
  const char* layout = seq_major ? "[L, B, H, D]" : "[B, L, H, D]";
  FC_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: q ", q.shape().str(), ", k ", k.shape().str(),
           ", v ", v.shape().str(), " must be ", layout);
  const int bat = seq_major ? 1 : 0, seq = 1 - bat;  // the batch and sequence axes
  FC_CHECK(k.shape() == v.shape() && q.size(bat) == k.size(bat) && q.size(2) == k.size(2) && q.size(3) == k.size(3),
           "attention: q ", q.shape().str(), ", k ", k.shape().str(), ", v ", v.shape().str(), " are inconsistent (",
           layout, ")");
  FC_CHECK(!gate.defined() || gate.shape() == q.shape(), "attention: gate ", gate.shape().str(), " vs q ",
           q.shape().str());
  FC_CHECK(static_cast<int>(biases.size()) <= ops::kMaxBiases, "attention: ", biases.size(), " biases (max ",
           ops::kMaxBiases, ")");
  FC_CHECK(!seq_major || !cu_seqlens.defined(), "attention: packed sequences (cu_seqlens) need the [B, L, H, D] layout");
  const int64_t b = q.size(bat), lq = q.size(seq), h = q.size(2), lk = k.size(seq);
  auto cast = [&](const Variable& x) {  // in cd, unit-stride last dim
    Tensor t = x.value().to(cd);
    return t.stride(-1) != 1 ? t.contiguous() : t;
  };
  auto prep = [&](const Variable& x) { return to_kernel(cast(x), seq_major); };
  ops::AttentionInputs in;
  in.q = prep(q);
  in.k = prep(k);
  in.v = prep(v);
  if (gate.defined()) in.gate = prep(gate);
  const Shape full{b, h, lq, lk};
  for (const Variable& bias : biases) {
    FC_CHECK(bias.dim() == 4, "attention: bias ", bias.shape().str(), " must be 4-D (broadcastable to ", full.str(),
             ")");
    FC_CHECK(broadcast_shapes(bias.shape(), full) == full, "attention: bias ", bias.shape().str(),
             " does not broadcast to ", full.str());
    in.biases.push_back(cast(bias));  // un-expanded: dbias then has the bias's own shape
  }
  in.cu_seqlens = cu_seqlens;
  in.scale = scale;
  return in;
}

}  // namespace

AttentionPart attention_part(const Variable& q, const Variable& k, const Variable& v,
                             const std::vector<Variable>& biases, float scale) {
  std::vector<Variable> inputs{q, k, v};
  inputs.insert(inputs.end(), biases.begin(), biases.end());
  FC_CHECK(!any_requires_grad(inputs), "attention_part: inference only (an input requires grad)");
  const DType cd = detail::gemm_dtype(q.dtype());
  const ops::AttentionInputs in = kernel_inputs(q, k, v, biases, Variable(), Tensor(), scale, cd);
  const int64_t b = q.size(0), lq = q.size(1), h = q.size(2), d = q.size(3);
  AttentionPart r{Tensor::empty({b, lq, h, d}, cd, q.device()), Tensor::empty({b, h, lq}, DType::f32, q.device())};
  ops::attention_forward(in, bhld(r.a), r.lse);
  return r;
}

Variable attention(const Variable& q, const Variable& k, const Variable& v, const std::vector<Variable>& biases,
                   const Variable& gate, const Tensor& cu_seqlens, float scale, bool seq_major) {
  const DType cd = detail::gemm_dtype(q.dtype());
  ops::AttentionInputs in = kernel_inputs(q, k, v, biases, gate, cu_seqlens, scale, cd, seq_major);
  const int64_t b = in.q.size(0), h = in.q.size(1), lq = in.q.size(2);
  std::vector<Variable> inputs{q, k, v, gate};
  inputs.insert(inputs.end(), biases.begin(), biases.end());
  const bool rg = any_requires_grad(inputs);
  Tensor o = Tensor::empty(q.shape(), cd, q.device());  // q's layout, contiguous
  Tensor lse = Tensor::empty({b, h, lq}, DType::f32, q.device());
  Tensor a = (rg && gate.defined()) ? Tensor::empty(q.shape(), cd, q.device()) : Tensor();
  ops::attention_forward(in, to_kernel(o, seq_major), lse, a.defined() ? to_kernel(a, seq_major) : Tensor());
  if (!rg) return Variable(o);
  auto fn = std::make_unique<AttentionFn>();
  fn->in = std::move(in);
  fn->a_or_o = to_kernel(gate.defined() ? a : o, seq_major);
  fn->lse = lse;
  fn->cd = cd;
  fn->n_bias = static_cast<int>(biases.size());
  fn->seq_major = seq_major;
  return record1("attention", std::move(fn), inputs, o);
}

Variable global_attention(const Variable& q, const Variable& k, const Variable& v, const Tensor& bias,
                          const Variable& gate, float scale) {
  FC_CHECK(q.dim() == 3 && k.dim() == 3 && k.shape() == v.shape() && gate.dim() == 4, "global_attention: q ",
           q.shape().str(), " [B,H,D], k ", k.shape().str(), ", v ", v.shape().str(), " [B,S,D], gate ",
           gate.shape().str(), " [B,S,H,D]");
  const int64_t b = q.size(0), h = q.size(1), d = q.size(2), s = k.size(1);
  FC_CHECK(k.size(0) == b && k.size(2) == d && gate.shape() == Shape({b, s, h, d}) &&
               (!bias.defined() || bias.shape() == Shape({b, s})),
           "global_attention: inconsistent shapes q ", q.shape().str(), ", k ", k.shape().str(), ", gate ",
           gate.shape().str(), ", bias ", bias.defined() ? bias.shape().str() : "none");
  const DType cd = detail::gemm_dtype(q.dtype());
  const Tensor qv = q.value().to(cd).contiguous(), kv = k.value().to(cd).contiguous();
  const Tensor vv = v.value().to(cd).contiguous(), gv = gate.value().to(cd).contiguous();
  const Tensor bv = bias.defined() ? bias.to(cd).contiguous() : Tensor();
  Tensor o = Tensor::empty({b, s, h, d}, cd, q.device());
  Tensor a = Tensor::empty({b, h, d}, cd, q.device());
  ops::global_attention_forward(qv, kv, vv, bv, gv, scale, o, a);
  if (!any_requires_grad({q, k, v, gate})) return Variable(o);
  auto fn = std::make_unique<GlobalAttentionFn>();
  fn->q = qv;
  fn->k = kv;
  fn->v = vv;
  fn->bias = bv;
  fn->g = gv;
  fn->a = a;
  fn->scale = scale;
  return record1("global_attention", std::move(fn), {q, k, v, gate}, o);
}

}  // namespace foldcore::autograd
