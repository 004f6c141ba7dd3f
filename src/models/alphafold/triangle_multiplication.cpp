#include "models/alphafold/triangle_multiplication.h"

namespace foldcore::af2 {

TriangleMultiplication::TriangleMultiplication(nn::Scope scope, int64_t c_z, int64_t c_hidden, bool outgoing)
    : Module(std::move(scope)),
      outgoing_(outgoing),
      layer_norm_input_(child_scope("layer_norm_input"), c_z),
      center_layer_norm_(child_scope("center_layer_norm"), c_hidden),
      left_projection_(child_scope("left_projection"), c_z, c_hidden),
      right_projection_(child_scope("right_projection"), c_z, c_hidden),
      left_gate_(child_scope("left_gate"), c_z, c_hidden, {nn::Init::gating, true}),
      right_gate_(child_scope("right_gate"), c_z, c_hidden, {nn::Init::gating, true}),
      output_projection_(child_scope("output_projection"), c_hidden, c_z, {nn::Init::final, true}),
      gating_linear_(child_scope("gating_linear"), c_z, c_z, {nn::Init::gating, true}) {
  for (nn::Module* c : std::initializer_list<nn::Module*>{&layer_norm_input_, &center_layer_norm_, &left_projection_,
                                                          &right_projection_, &left_gate_, &right_gate_,
                                                          &output_projection_, &gating_linear_})
    register_child(*c);
}

Variable TriangleMultiplication::forward(const Variable& z, const Tensor& pair_mask) const {
  const int64_t c_z = layer_norm_input_.scale().numel();
  FC_CHECK(z.dim() == 3 && z.size(0) == z.size(1) && z.size(2) == c_z && pair_mask.dim() == 2 &&
               pair_mask.size(0) == z.size(0) && pair_mask.size(1) == z.size(1),
           "TriangleMultiplication '", path(), "': z ", z.shape().str(), ", pair_mask ", pair_mask.shape().str(),
           " (expected [N, N, ", c_z, "] and [N, N])");
  const Variable mask3(pair_mask.to(DType::f32).contiguous().unsqueeze(-1));  // [N, N, 1]
  const Variable x = layer_norm_input_.forward(z);                             // [N, N, c_z]
  const Variable a = autograd::mul(autograd::sigmoid_gate(left_gate_.forward(x), left_projection_.forward(x)),
                                   mask3);  // [N, N, c]
  const Variable b = autograd::mul(autograd::sigmoid_gate(right_gate_.forward(x), right_projection_.forward(x)),
                                   mask3);  // [N, N, c]
  // Channel-major copies [c, N, N]: the batch of the GEMM is the channel.
  const Variable ac = autograd::contiguous(autograd::permute(a, {2, 0, 1}));
  const Variable bc = autograd::contiguous(autograd::permute(b, {2, 0, 1}));
  // outgoing: t[c,i,j] = Σ_k a[c,i,k] b[c,j,k]  = A·Bᵀ
  // incoming: t[c,i,j] = Σ_k b[c,k,i] a[c,k,j]  = Bᵀ·A
  const Variable t = outgoing_ ? autograd::matmul(ac, bc, false, true) : autograd::matmul(bc, ac, true, false);
  const Variable t_ij = autograd::contiguous(autograd::permute(t, {1, 2, 0}));  // [N, N, c]
  const Variable o = output_projection_.forward(center_layer_norm_.forward(t_ij));  // [N, N, c_z]
  return autograd::sigmoid_gate(gating_linear_.forward(x), o);
}

void TriangleMultiplication::add_af2_params(Af2ParamTable& t, const std::string& key, int64_t idx) const {
  require_finalized(scope().params, path());
  add_layer_norm_af2_params(layer_norm_input_, t, key + "/layer_norm_input", idx);
  add_linear_af2_params(left_projection_, t, key + "/left_projection", idx);
  add_linear_af2_params(right_projection_, t, key + "/right_projection", idx);
  add_linear_af2_params(left_gate_, t, key + "/left_gate", idx);
  add_linear_af2_params(right_gate_, t, key + "/right_gate", idx);
  add_layer_norm_af2_params(center_layer_norm_, t, key + "/center_layer_norm", idx);
  add_linear_af2_params(output_projection_, t, key + "/output_projection", idx);
  add_linear_af2_params(gating_linear_, t, key + "/gating_linear", idx);
}

}  // namespace foldcore::af2
