#include "models/alphafold/evoformer/outer_product_mean.h"

#include "autograd/grad_mode.h"
#include "kernels/elementwise.h"

namespace foldcore::af2 {

OuterProductMean::OuterProductMean(nn::Scope scope, int64_t c_m, int64_t c_hidden, int64_t c_z)
    : Module(std::move(scope)),
      layer_norm_input_(child_scope("layer_norm_input"), c_m),
      left_(child_scope("left_projection"), c_m, c_hidden),
      right_(child_scope("right_projection"), c_m, c_hidden),
      output_(child_scope("output"), c_hidden * c_hidden, c_z, {nn::Init::final, true}) {
  register_child(layer_norm_input_);
  register_child(left_);
  register_child(right_);
  register_child(output_);
  // left and right run as one op (projections): weights and biases back to back.
  place_together({left_.weight(), right_.weight()});
  place_together({left_.bias(), right_.bias()});
}

Variable OuterProductMean::forward(const Variable& m, const Tensor& msa_mask, int64_t chunk,
                                   const Tensor& into, const Variable& normed) const {
  const int64_t c_m = layer_norm_input_.scale().numel();
  FC_CHECK(m.dim() == 3 && m.size(2) == c_m && msa_mask.dim() == 2 && msa_mask.size(0) == m.size(0) &&
               msa_mask.size(1) == m.size(1),
           "OuterProductMean '", path(), "': m ", m.shape().str(), ", msa_mask ", msa_mask.shape().str(),
           " (expected [S, N, ", c_m, "] and [S, N])");
  const int64_t n = m.size(1);
  const Tensor mask = mask_in(msa_mask, DType::f32).contiguous();
  const auto [a, b] = projections(m, mask, chunk, normed);  // [S, N, c] each
  const Tensor inv_norm =
      derived_mask(mask, "outer product mean norm", [&] { return inverse_norm(mask, mask); }).view({n, n, 1});
  return run_chunked(n, chunk, [&](int64_t i0, int64_t len) {
    return autograd::mul(project_outer(autograd::narrow(a, 1, i0, len), b),
                         Variable(inv_norm.narrow(0, i0, len)));  // [i, j, c_z]
  }, 0, into);
}

Variable OuterProductMean::project_outer(const Variable& a, const Variable& b) const {
  return autograd::outer_product_project(a, b, output_.weight(), output_.bias());  // [i, j, c_z]
}

Tensor OuterProductMean::inverse_norm(const Tensor& rows_mask, const Tensor& mask) {
  // A GEMM and a reciprocal on the masks' device: no copy to the host (which waited for the
  // device's queue in every block). Not differentiable (masks). fp32 whatever the autocast (the
  // counts exact beyond bf16's 256, the normaliser as wide as the fp32 path's, so the update's
  // product with it stays fp32): (x + 1e-3) is 1e-3 + x exactly, and the device's IEEE division
  // gives the host's bits.
  const Variable r(rows_mask.to(DType::f32)), all(mask.to(DType::f32));
  const autograd::NoGradGuard no_grad;
  const autograd::AutocastGuard fp32(DType::f32);
  Tensor norm = autograd::matmul(r, all, true, false).value().to(DType::f32).contiguous();  // [K, N]
  ops::reciprocal_shift(norm, 1e-3f, norm);
  return norm;
}

std::pair<Variable, Variable> OuterProductMean::projections(const Variable& m, const Tensor& mask, int64_t chunk,
                                                            const Variable& normed) const {
  const auto project = [&](const Variable& rows, const Tensor& rows_mask) {
    const Variable x = normed.defined() ? normed : layer_norm_input_.forward_for_gemm(rows);
    const std::vector<Variable> lr = nn::project(x, {&left_, &right_});  // both from one cast of x
    const Variable &left = lr[0], &right = lr[1];
    // The mask (0 or 1) in the projections' dtype: under bf16 autocast the products stay bf16, the
    // same values as the fp32 products (exact), without a conversion to fp32 and back for the GEMM.
    const Variable mask3(mask_in(rows_mask, left.dtype()).unsqueeze(-1));
    return std::pair{autograd::mul(left, mask3), autograd::mul(right, mask3)};
  };
  const int64_t s = m.size(0);
  check_normalised_input("OuterProductMean '" + path() + "'", normed, m, chunk, s);
  if (autograd::grad_enabled() || chunk <= 0 || chunk >= s) return project(m, mask);
  Tensor a, b;
  for (int64_t r0 = 0; r0 < s; r0 += chunk) {
    const int64_t len = std::min(chunk, s - r0);
    const auto [ar, br] = project(autograd::narrow(m, 0, r0, len), mask.narrow(0, r0, len));
    if (!a.defined()) {
      a = Tensor::empty({s, ar.size(1), ar.size(2)}, ar.dtype(), ar.device());
      b = Tensor::empty({s, br.size(1), br.size(2)}, br.dtype(), br.device());
    }
    a.narrow(0, r0, len).copy_(ar.value());
    b.narrow(0, r0, len).copy_(br.value());
  }
  return {Variable(a), Variable(b)};
}

void OuterProductMean::add_af2_params(Af2ParamTable& t, const std::string& key, int64_t idx) const {
  require_finalized(scope().params, path());
  add_layer_norm_af2_params(layer_norm_input_, t, key + "/layer_norm_input", idx);
  add_linear_af2_params(left_, t, key + "/left_projection", idx);
  add_linear_af2_params(right_, t, key + "/right_projection", idx);
  t.add(key + "//output_w", output_.weight().value(), idx);  // [c, c, c_z] → [c·c, c_z]
  t.add(key + "//output_b", output_.bias().value(), idx);
}

}  // namespace foldcore::af2
