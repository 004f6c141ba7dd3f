#include "nn/layers.h"

#include <cmath>

#include "core/random.h"

namespace foldcore::nn {
namespace {

Tensor init_weight(Init init, int64_t in, int64_t out, Generator* g) {
  const Shape s{in, out};
  if (init == Init::gating || init == Init::final) return Tensor();  // zeros
  Generator& gen = *g;
  switch (init) {
    case Init::lecun: return trunc_normal(s, gen, static_cast<float>(std::sqrt(1.0 / static_cast<double>(in))));
    case Init::relu: return trunc_normal(s, gen, static_cast<float>(std::sqrt(2.0 / static_cast<double>(in))));
    case Init::glorot: {
      const float lim = static_cast<float>(std::sqrt(6.0 / static_cast<double>(in + out)));
      return rand_uniform(s, gen, -lim, lim);
    }
    case Init::bert: return trunc_normal(s, gen, 0.02f);
    case Init::gating:
    case Init::final: return Tensor();  // zeros
  }
  return Tensor();
}

}  // namespace

Linear::Linear(Scope scope, int64_t in, int64_t out, LinearOptions options)
    : Module(std::move(scope)), in_(in), out_(out), opt_(options) {
  FC_CHECK(in > 0 && out > 0, "Linear '", path(), "': bad size ", in, " -> ", out);
  FC_CHECK(this->scope().init_rng != nullptr || options.init == Init::gating || options.init == Init::final,
           "Linear '", path(), "': the Scope has no init_rng");
  weight_ = add_parameter("weight", {in, out}, true,
                          init_weight(options.init, in, out, this->scope().init_rng));
  if (options.bias) {
    const Tensor b = options.init == Init::gating ? Tensor::full({out}, 1.0, DType::f32) : Tensor();
    bias_ = add_parameter("bias", {out}, false, b);
  }
}

Variable Linear::forward(const Variable& x) const { return autograd::linear(x, weight_, bias_, opt_.act); }

Variable Linear::forward_no_bias(const Variable& x) const { return autograd::linear(x, weight_); }

std::vector<Variable> project(const Variable& x, const std::vector<const Linear*>& layers,
                              const std::vector<Shape>& shapes) {
  std::vector<Variable> ws, bs;
  for (const Linear* l : layers) {
    FC_CHECK(l->options().act == ops::Activation::none, "project: '", l->path(), "' has an activation");
    ws.push_back(l->weight());
    bs.push_back(l->bias());
  }
  return autograd::linears(x, ws, bs, shapes);
}

LayerNorm::LayerNorm(Scope scope, int64_t c, float eps) : Module(std::move(scope)), eps_(eps) {
  scale_ = add_parameter("scale", {c}, false, Tensor::full({c}, 1.0, DType::f32));
  offset_ = add_parameter("offset", {c}, false);
}

Variable LayerNorm::forward(const Variable& x) const { return autograd::layer_norm(x, scale_, offset_, eps_); }

Variable LayerNorm::forward_project_heads(const Variable& x, const Variable& w) const {
  return autograd::layer_norm_project_heads(x, scale_, offset_, w, eps_);
}

Variable LayerNorm::forward_channel_major(const Variable& x) const {
  return autograd::layer_norm_channel_major(x, scale_, offset_, eps_);
}

std::optional<DType> LayerNorm::gemm_output_dtype(DType x) {
  const std::optional<DType> ac = autograd::autocast_dtype();
  if (x == DType::f32 && ac && is_16bit_float(*ac)) return ac;
  return std::nullopt;
}

Variable LayerNorm::forward_for_gemm(const Variable& x) const {
  if (const std::optional<DType> out = gemm_output_dtype(x.dtype())) return autograd::layer_norm(x, scale_, offset_, eps_, out);
  return forward(x);
}

std::pair<Variable, Variable> LayerNorm::residual_forward_for_gemm(const Variable& update, const Variable& residual,
                                                                   const autograd::DropoutSpec& d,
                                                                   bool in_place) const {
  // h has residual's dtype.
  return autograd::residual_layer_norm(update, residual, d, scale_, offset_, eps_, gemm_output_dtype(residual.dtype()),
                                       in_place);
}

Dropout::Dropout(Scope scope, float p, std::vector<int> shared_dims)
    : Module(std::move(scope)), p_(p), shared_dims_(std::move(shared_dims)) {
  FC_CHECK(p >= 0.f && p < 1.f, "Dropout '", path(), "': rate ", p, " outside [0, 1)");
}

autograd::DropoutSpec Dropout::spec() const {
  autograd::DropoutSpec d;
  if (training() && p_ > 0.f && scope().rng != nullptr) {
    d.p = p_;
    d.gen = scope().rng;
    d.shared_dims = shared_dims_;
  }
  return d;
}

Variable Dropout::forward(const Variable& x) const {
  const autograd::DropoutSpec d = spec();
  return d.p > 0.f ? autograd::dropout(x, d) : x;
}

}  // namespace foldcore::nn
