#include "nn/transformer.h"

namespace foldcore::nn {
namespace {
LinearOptions opts(Init init, ops::Activation act = ops::Activation::none) {
  LinearOptions o;
  o.init = init;
  o.act = act;
  return o;
}
}  // namespace

Transition::Transition(Scope scope, int64_t c, int64_t n)
    : Module(std::move(scope)),
      norm_(child_scope("input_layer_norm"), c),
      fc1_(child_scope("transition1"), c, n * c, opts(Init::relu, ops::Activation::relu)),
      fc2_(child_scope("transition2"), n * c, c, opts(Init::final)) {
  register_child(norm_);
  register_child(fc1_);
  register_child(fc2_);
}

Variable Transition::forward(const Variable& x) const { return forward_normalized(norm_.forward_for_gemm(x)); }

Variable Transition::forward_normalized(const Variable& x_ln) const { return fc2_.forward(fc1_.forward(x_ln)); }

FeedForward::FeedForward(Scope scope, int64_t d, int64_t ff, Init init)
    : Module(std::move(scope)),
      fc1_(child_scope("fc1"), d, ff, opts(init, ops::Activation::gelu)),
      fc2_(child_scope("fc2"), ff, d, opts(init)) {
  register_child(fc1_);
  register_child(fc2_);
}

Variable FeedForward::forward(const Variable& x) const { return fc2_.forward(fc1_.forward(x)); }
Variable FeedForward::forward_no_output_bias(const Variable& x) const {
  return fc2_.forward_no_bias(fc1_.forward(x));
}

static AttentionOptions encoder_attention(const EncoderLayerOptions& o) {
  AttentionOptions a = AttentionOptions::bert(o.d_model, o.num_heads);
  a.qkv_init = a.output_init = o.init;
  return a;
}

TransformerEncoderLayer::TransformerEncoderLayer(Scope scope, const EncoderLayerOptions& options)
    : Module(std::move(scope)),
      opt_(options),
      attention_(child_scope("attention"), encoder_attention(options)),
      attn_dropout_(child_scope("attention_dropout"), options.dropout),
      ln1_(child_scope("attention_layer_norm"), options.d_model, options.ln_eps),
      ffn_(child_scope("ffn"), options.d_model, options.d_ff, options.init),
      ffn_dropout_(child_scope("ffn_dropout"), options.dropout),
      ln2_(child_scope("ffn_layer_norm"), options.d_model, options.ln_eps) {
  FC_CHECK(options.d_model % options.num_heads == 0, "TransformerEncoderLayer '", path(), "': d_model ",
           options.d_model, " not divisible by ", options.num_heads, " heads");
  register_child(attention_);
  register_child(attn_dropout_);
  register_child(ln1_);
  register_child(ffn_);
  register_child(ffn_dropout_);
  register_child(ln2_);
}

Variable TransformerEncoderLayer::forward(const Variable& x, const Variable& mask_bias,
                                          const Tensor& cu_seqlens) const {
  std::vector<Variable> biases;
  if (mask_bias.defined()) biases.push_back(mask_bias);
  Variable h = attention_.forward_no_output_bias(x, x, biases, cu_seqlens);
  // Each post-LN site is one fused op: LN(residual + dropout(h + b)) (kernels/layernorm.h).
  // x belongs to the caller, so the first pre-LN sum gets its own buffer; y is ours, so the
  // second one may overwrite y's storage when no backward saved y (recompute forward).
  const Variable y = autograd::bias_dropout_residual_layer_norm(h, attention_.output().bias(), x, attn_dropout_.spec(),
                                                                ln1_.scale(), ln1_.offset(), opt_.ln_eps,
                                                                /*in_place=*/false);
  h = ffn_.forward_no_output_bias(y);
  return autograd::bias_dropout_residual_layer_norm(h, ffn_.fc2().bias(), y, ffn_dropout_.spec(), ln2_.scale(),
                                                    ln2_.offset(), opt_.ln_eps, /*in_place=*/true);
}

}  // namespace foldcore::nn
