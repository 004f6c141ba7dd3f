// Feed-forward blocks and the post-LN Transformer encoder layer.
#pragma once

#include "nn/attention.h"

namespace foldcore::nn {

// AF2 Alg. 9/15 transition: LN → Linear(c, n·c, 'relu' init) + ReLU → Linear(n·c, c, 'final').
class Transition : public Module {
 public:
  Transition(Scope scope, int64_t c, int64_t n = 4);
  Variable forward(const Variable& x) const;
  // The same from x_ln = norm().forward_for_gemm(x) made by the caller (a fused residual add).
  Variable forward_normalized(const Variable& x_ln) const;
  const LayerNorm& norm() const { return norm_; }

 private:
  LayerNorm norm_;
  Linear fc1_, fc2_;
};

// BERT feed-forward: Linear(d, ff) + GELU (fused epilogue) → Linear(ff, d).
class FeedForward : public Module {
 public:
  FeedForward(Scope scope, int64_t d, int64_t ff, Init init = Init::bert);
  Variable forward(const Variable& x) const;
  Variable forward_no_output_bias(const Variable& x) const;
  const Linear& fc2() const { return fc2_; }

 private:
  Linear fc1_, fc2_;
};

struct EncoderLayerOptions {
  int64_t d_model = 0, num_heads = 1, d_ff = 0;
  float dropout = 0.1f;  // hidden dropout after attention and FFN (fused with bias + residual)
  float ln_eps = 1e-12f;  // BERT's
  Init init = Init::bert;
};

// Post-LN encoder layer (BERT):
//   x = LN1(x + dropout(Attn(x) + b_o));   x = LN2(x + dropout(FFN(x) + b_2))
// with each "LN(residual + dropout(h + bias))" a single fused op (bias_dropout_residual_layer_norm);
// ln1_/ln2_ hold the LayerNorm parameters (their eps is options.ln_eps).
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(Scope scope, const EncoderLayerOptions& options);
  // x [B, L, d]; mask_bias optional 4-D broadcastable to [B, H, L, L] (e.g. [B,1,1,L] padding);
  // cu_seqlens for packed sequences (B = 1).
  Variable forward(const Variable& x, const Variable& mask_bias = {}, const Tensor& cu_seqlens = {}) const;

 private:
  EncoderLayerOptions opt_;
  Attention attention_;
  Dropout attn_dropout_;
  LayerNorm ln1_;
  FeedForward ffn_;
  Dropout ffn_dropout_;
  LayerNorm ln2_;
};

}  // namespace foldcore::nn
