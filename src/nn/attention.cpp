#include "nn/attention.h"

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace foldcore::nn {
namespace {

LinearOptions proj(Init init, bool bias) {
  LinearOptions o;
  o.init = init;
  o.bias = bias;
  return o;
}

Shape with_last(const Shape& s, int64_t last) {
  Shape r = s;
  r[r.size() - 1] = last;
  return r;
}

}  // namespace

AttentionOptions AttentionOptions::alphafold(int64_t c_q, int64_t c_kv, int64_t heads, int64_t head_dim,
                                             int64_t c_out) {
  AttentionOptions o;
  o.c_q = c_q;
  o.c_kv = c_kv;
  o.num_heads = heads;
  o.head_dim = head_dim;
  o.c_out = c_out;
  return o;
}

AttentionOptions AttentionOptions::bert(int64_t d_model, int64_t heads) {
  AttentionOptions o;
  o.c_q = o.c_kv = o.c_out = d_model;
  o.num_heads = heads;
  o.head_dim = d_model / heads;
  o.gating = false;
  o.qkv_bias = true;
  o.qkv_init = o.output_init = Init::bert;
  return o;
}

static AttentionOptions resolved(AttentionOptions o) {
  if (o.c_kv == 0) o.c_kv = o.c_q;
  if (o.c_out == 0) o.c_out = o.c_q;
  FC_CHECK(o.c_q > 0 && o.num_heads > 0 && o.head_dim > 0, "Attention: c_q ", o.c_q, ", heads ", o.num_heads,
           ", head_dim ", o.head_dim, " must be positive");
  return o;
}

Attention::Attention(Scope scope, const AttentionOptions& options)
    : Module(std::move(scope)),
      opt_(resolved(options)),
      q_(child_scope("q"), opt_.c_q, opt_.num_heads * opt_.head_dim, proj(opt_.qkv_init, opt_.qkv_bias)),
      k_(child_scope("k"), opt_.c_kv, opt_.num_heads * opt_.head_dim, proj(opt_.qkv_init, opt_.qkv_bias)),
      v_(child_scope("v"), opt_.c_kv, opt_.num_heads * opt_.head_dim, proj(opt_.qkv_init, opt_.qkv_bias)),
      gate_(opt_.gating ? std::make_unique<Linear>(child_scope("gate"), opt_.c_q, opt_.num_heads * opt_.head_dim,
                                                   proj(Init::gating, true))
                        : nullptr),
      output_(child_scope("output"), opt_.num_heads * opt_.head_dim, opt_.c_out, proj(opt_.output_init, true)) {
  register_child(q_);
  register_child(k_);
  register_child(v_);
  if (gate_) register_child(*gate_);
  register_child(output_);
}

std::vector<Variable> Attention::self_projections(const Variable& x, const Shape& q_shape, const Shape& kv_shape,
                                                 bool gate, const Linear* extra) const {
  std::vector<const Linear*> layers{&q_, &k_, &v_};
  std::vector<Shape> shapes{q_shape, kv_shape, kv_shape};
  if (gate) {
    layers.push_back(gate_.get());
    shapes.push_back(q_shape);
  }
  if (extra != nullptr) {
    layers.push_back(extra);
    shapes.push_back(with_last(x.shape(), extra->weight().size(1)));
  }
  return nn::project(x, layers, shapes);
}

Attention::Projected Attention::project(const Variable& q_data, const Variable& kv_data, bool gate,
                                        const Linear* extra) const {
  FC_CHECK(q_data.dim() >= 2 && kv_data.dim() == q_data.dim() && q_data.size(-1) == opt_.c_q &&
               kv_data.size(-1) == opt_.c_kv,
           "Attention '", path(), "': q_data ", q_data.shape().str(), " kv_data ", kv_data.shape().str(),
           " (expected [..., L, ", opt_.c_q, "] and [..., L, ", opt_.c_kv, "])");
  const int64_t lq = q_data.size(-2), lk = kv_data.size(-2);
  const int64_t b = q_data.numel() / (lq * opt_.c_q);
  const int64_t h = opt_.num_heads, d = opt_.head_dim;
  // [B, L, H·d] projections viewed per head: the attention op takes [B, L, H, d] directly.
  // AF2 scales q by 1/√d before q·kᵀ; the kernel applies the same factor to the scores.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const bool with_gate = gate && gate_ != nullptr;
  const Shape qs{b, lq, h, d}, ks{b, lk, h, d};
  if (q_data.impl() == kv_data.impl()) {  // self-attention: every projection of the one input at once
    const std::vector<Variable> y = self_projections(q_data, qs, ks, with_gate, extra);
    return {y[0], y[1], y[2], scale, with_gate ? y[3] : Variable(), extra != nullptr ? y.back() : Variable()};
  }
  FC_CHECK(extra == nullptr, "Attention '", path(), "': a projected input bias needs self-attention");
  return {autograd::reshape(q_.forward(q_data), qs), autograd::reshape(k_.forward(kv_data), ks),
          autograd::reshape(v_.forward(kv_data), ks), scale,
          with_gate ? autograd::reshape(gate_->forward(q_data), qs) : Variable(), Variable()};
}

Variable Attention::heads(const Variable& q_data, const Variable& kv_data, const std::vector<Variable>& biases,
                          const Tensor& cu_seqlens, const std::function<Variable()>& late_bias,
                          const InputBias* input_bias) const {
  const Projected p = project(q_data, kv_data, true, input_bias != nullptr ? input_bias->layer : nullptr);
  const Variable& g = p.gate;
  std::vector<Variable> all;
  const bool more = late_bias || input_bias != nullptr;
  if (more) all = biases;
  if (late_bias) all.push_back(late_bias());
  if (input_bias != nullptr) all.push_back(input_bias->make(p.extra));
  const Variable o = autograd::attention(p.q, p.k, p.v, more ? all : biases, g, cu_seqlens, p.scale);
  return autograd::reshape(o, with_last(q_data.shape(), opt_.num_heads * opt_.head_dim));
}

autograd::AttentionPart Attention::heads_part(const Variable& q_data, const Variable& kv_data,
                                              const std::vector<Variable>& biases) const {
  const Projected p = project(q_data, kv_data);
  return autograd::attention_part(p.q, p.k, p.v, biases, p.scale);
}

Variable Attention::finish_heads(const Variable& q_data, const Variable& a) const {
  const int64_t lq = q_data.size(-2), b = q_data.numel() / (lq * opt_.c_q);
  const int64_t h = opt_.num_heads, d = opt_.head_dim;
  FC_CHECK(a.shape() == Shape({b, lq, h, d}), "Attention '", path(), "': heads ", a.shape().str(), " for q_data ",
           q_data.shape().str(), " (expected [", b, ", ", lq, ", ", h, ", ", d, "])");
  const Variable g = gate_ ? autograd::sigmoid_gate(autograd::reshape(gate_->forward(q_data), {b, lq, h, d}), a) : a;
  return output_.forward(autograd::reshape(g, with_last(q_data.shape(), h * d)));
}

Variable Attention::values(const Variable& kv_data) const {
  FC_CHECK(kv_data.dim() >= 2 && kv_data.size(-1) == opt_.c_kv, "Attention '", path(), "': kv_data ",
           kv_data.shape().str(), " (expected [..., L, ", opt_.c_kv, "])");
  const int64_t lk = kv_data.size(-2), b = kv_data.numel() / (lk * opt_.c_kv);
  return autograd::reshape(v_.forward(kv_data), {b, lk, opt_.num_heads, opt_.head_dim});
}

Variable Attention::forward(const Variable& q_data, const Variable& kv_data, const std::vector<Variable>& biases,
                            const Tensor& cu_seqlens) const {
  return output_.forward(heads(q_data, kv_data, biases, cu_seqlens));
}

Variable Attention::forward(const Variable& q_data, const Variable& kv_data, const std::vector<Variable>& biases,
                            const std::function<Variable()>& late_bias) const {
  return output_.forward(heads(q_data, kv_data, biases, Tensor(), late_bias));
}

Variable Attention::forward(const Variable& x, const std::vector<Variable>& biases,
                            const InputBias& input_bias) const {
  FC_CHECK(input_bias.layer != nullptr && input_bias.make, "Attention '", path(), "': an input bias without its layer");
  return output_.forward(heads(x, x, biases, Tensor(), {}, &input_bias));
}

Variable Attention::forward_seq_major(const Variable& x, const std::vector<Variable>& biases,
                                      const std::function<Variable()>& late_bias) const {
  return seq_major(x, biases, late_bias, nullptr);
}

Variable Attention::forward_seq_major(const Variable& x, const std::vector<Variable>& biases,
                                      const InputBias& input_bias) const {
  FC_CHECK(input_bias.layer != nullptr && input_bias.make, "Attention '", path(), "': an input bias without its layer");
  return seq_major(x, biases, {}, &input_bias);
}

Variable Attention::seq_major(const Variable& x, const std::vector<Variable>& biases,
                              const std::function<Variable()>& late_bias, const InputBias* input_bias) const {
  FC_CHECK(x.dim() == 3 && x.size(2) == opt_.c_q && opt_.c_q == opt_.c_kv, "Attention '", path(), "': x ",
           x.shape().str(), " (expected [L, B, ", opt_.c_q, "] for self-attention along the first axis)");
  const int64_t l = x.size(0), b = x.size(1), h = opt_.num_heads, d = opt_.head_dim;
  Variable o;
  {  // the projections die before the output projection (no-grad: 4 fewer [L, B, H·d] beside it)
    const std::vector<Variable> y = self_projections(x, {l, b, h, d}, {l, b, h, d}, gate_ != nullptr,
                                                     input_bias != nullptr ? input_bias->layer : nullptr);
    std::vector<Variable> all = biases;
    if (late_bias) all.push_back(late_bias());
    if (input_bias != nullptr) all.push_back(input_bias->make(y.back()));
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    o = autograd::attention(y[0], y[1], y[2], all, gate_ ? y[3] : Variable(), Tensor(), scale, /*seq_major=*/true);
  }
  return output_.forward(autograd::reshape(o, {l, b, h * d}));
}

Variable Attention::forward_no_output_bias(const Variable& q_data, const Variable& kv_data,
                                           const std::vector<Variable>& biases, const Tensor& cu_seqlens) const {
  return output_.forward_no_bias(heads(q_data, kv_data, biases, cu_seqlens));
}

GlobalAttention::GlobalAttention(Scope scope, int64_t c_in, int64_t num_heads, int64_t head_dim, int64_t c_out)
    : Module(std::move(scope)),
      c_in_(c_in),
      heads_(num_heads),
      dim_(head_dim),
      c_out_(c_out > 0 ? c_out : c_in),
      q_(child_scope("q"), c_in, num_heads * head_dim, proj(Init::glorot, false)),
      k_(child_scope("k"), c_in, head_dim, proj(Init::glorot, false)),
      v_(child_scope("v"), c_in, head_dim, proj(Init::glorot, false)),
      gate_(child_scope("gate"), c_in, num_heads * head_dim, proj(Init::gating, true)),
      output_(child_scope("output"), num_heads * head_dim, c_out_, proj(Init::final, true)) {
  register_child(q_);
  register_child(k_);
  register_child(v_);
  register_child(gate_);
  register_child(output_);
}

Variable GlobalAttention::forward(const Variable& m, const Tensor& mask) const {
  FC_CHECK(m.dim() >= 2 && m.size(-1) == c_in_ && mask.numel() * c_in_ == m.numel(), "GlobalAttention '", path(),
           "': m ", m.shape().str(), ", mask ", mask.shape().str(), " (expected [..., S, ", c_in_, "] and [..., S])");
  const int64_t s = m.size(-2), b = m.numel() / (s * c_in_);
  const Variable m3 = autograd::reshape(m, {b, s, c_in_});
  // Masked mean over the sequences (Alg. 19 line 2) as a batched [1, S]·[S, c] product with
  // weights mask/(Σ mask + 1e-10), and the mask bias 1e9·(mask − 1); both made from the (small)
  // mask on its device (no copy to the host, which waited for the device's queue per call).
  const Tensor mk = mask.to(DType::f32).contiguous().view({b, s});
  Tensor inv_total = Tensor::empty({b, 1}, DType::f32, mk.device());
  ops::sum(mk, {1}, inv_total);
  ops::reciprocal_shift(inv_total, 1e-10f, inv_total);
  Tensor w = Tensor::empty({b, s}, DType::f32, mk.device()), bias_t = Tensor::empty({b, s}, DType::f32, mk.device());
  ops::mul(mk, inv_total, w);
  ops::axpby(1e9f, mk, -1e9f, Tensor::full({1}, 1.0, DType::f32, mk.device()), bias_t);
  const Variable wv(w.view({b, 1, s}));
  const Variable q_avg = autograd::reshape(autograd::matmul(wv, m3), {b, c_in_});
  const Variable q = autograd::reshape(q_.forward(q_avg), {b, heads_, dim_});
  // k, v and the gate: the projections of m in one op (m cast once, k and v by one strided batch).
  const std::vector<Variable> kvg = nn::project(m3, {&k_, &v_, &gate_}, {{b, s, dim_}, {b, s, dim_}, {b, s, heads_, dim_}});
  const Variable &k = kvg[0], &v = kvg[1], &g = kvg[2];
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim_)));
  const Variable o = autograd::global_attention(q, k, v, bias_t, g, scale);
  return output_.forward(autograd::reshape(o, with_last(m.shape(), heads_ * dim_)));
}

}  // namespace foldcore::nn
