// Basic layers: Linear (AlphaFold2 initialisers), LayerNorm, Dropout (incl. shared masks).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "kernels/gemm.h"
#include "nn/module.h"

namespace foldcore::nn {

// AlphaFold2's initialisers (suppl. 1.11.4) plus BERT's:
//   lecun  ('default'): truncated normal, std √(1/fan_in)      relu: truncated normal, std √(2/fan_in)
//   glorot: uniform ±√(6/(fan_in+fan_out))                    gating: w = 0, b = 1
//   final : w = 0, b = 0                                       bert: truncated normal, std 0.02
// (The std is that of the truncated distribution, as in AF2, whose haiku initialiser divides by
// 0.8796, the std of N(0,1) truncated to ±2.)
enum class Init { lecun, relu, glorot, gating, final, bert };

struct LinearOptions {
  Init init = Init::lecun;
  bool bias = true;
  ops::Activation act = ops::Activation::none;  // fused GEMM epilogue
};

// y[…, out] = act(x[…, in]·W + b), W [in, out] (AF2's layout), parameters "<path>/weight", "/bias".
class Linear : public Module {
 public:
  Linear(Scope scope, int64_t in, int64_t out, LinearOptions options = {});
  Variable forward(const Variable& x) const;
  // x·W only (no bias, no activation): for consumers that fuse the bias (bias+dropout+residual).
  Variable forward_no_bias(const Variable& x) const;
  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }  // undefined when built without bias
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  const LinearOptions& options() const { return opt_; }

 private:
  int64_t in_, out_;
  LinearOptions opt_;
  Variable weight_, bias_;
};

// The projections of one input by several Linears (no activation) in one op (autograd::linears):
// the same values as each Linear's forward, shaped shapes[i] when given.
std::vector<Variable> project(const Variable& x, const std::vector<const Linear*>& layers,
                              const std::vector<Shape>& shapes = {});

// LayerNorm over the last dim; parameters "<path>/scale" (ones) and "/offset" (zeros) as in AF2.
class LayerNorm : public Module {
 public:
  LayerNorm(Scope scope, int64_t c, float eps = 1e-5f);
  Variable forward(const Variable& x) const;
  // forward(x permuted channels last) of a channel-major x [C, rows...], returned [rows..., C]
  // without the transposed copies (autograd::layer_norm_channel_major).
  Variable forward_channel_major(const Variable& x) const;
  // A projection without bias of forward_for_gemm(x), laid out heads first ([H, rows...] for w
  // [C, H]) without the LN output or the transposes (autograd::layer_norm_project_heads).
  Variable forward_project_heads(const Variable& x, const Variable& w) const;
  // LN(x) for GEMMs to read: under a 16-bit autocast an f32 x is normalised straight into the
  // autocast dtype (what the GEMMs would cast an f32 LN(x) to, the same values, with no f32 copy and
  // no conversion pass, and the gradient read back as it comes); otherwise forward(x).
  Variable forward_for_gemm(const Variable& x) const;
  // A pre-LN stream's residual add and this LayerNorm of its result, for GEMMs to read, in one pass
  // (autograd::residual_layer_norm): {h, forward_for_gemm(h)} for h = residual + dropout(update),
  // the same values and gradients as the two made apart.
  std::pair<Variable, Variable> residual_forward_for_gemm(const Variable& update, const Variable& residual,
                                                          const autograd::DropoutSpec& d, bool in_place) const;
  const Variable& scale() const { return scale_; }
  const Variable& offset() const { return offset_; }

 private:
  // forward_for_gemm's output dtype for an input of dtype x: the 16-bit autocast dtype for an f32
  // x, else none (x's own).
  static std::optional<DType> gemm_output_dtype(DType x);
  float eps_;
  Variable scale_, offset_;
};

// Dropout with rate p; shared_dims share the mask along those axes (AF2 row-wise dropout on an
// MSA/pair activation [.., N, M, C]: {-3}; column-wise: {-2}). Identity in eval mode or when the
// scope has no rng.
class Dropout : public Module {
 public:
  Dropout(Scope scope, float p, std::vector<int> shared_dims = {});
  Variable forward(const Variable& x) const;
  // The spec to pass to fused consumers (bias_dropout_residual); p = 0 in eval mode.
  autograd::DropoutSpec spec() const;

 private:
  float p_;
  std::vector<int> shared_dims_;
};

}  // namespace foldcore::nn
