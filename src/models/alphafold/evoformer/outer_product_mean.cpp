#include "models/alphafold/evoformer/outer_product_mean.h"

namespace foldcore::af2 {

OuterProductMean::OuterProductMean(nn::Scope scope, int64_t c_m, int64_t c_hidden, int64_t c_z)
    : Module(std::move(scope)),
      c_hidden_(c_hidden),
      layer_norm_input_(child_scope("layer_norm_input"), c_m),
      left_(child_scope("left_projection"), c_m, c_hidden),
      right_(child_scope("right_projection"), c_m, c_hidden),
      output_(child_scope("output"), c_hidden * c_hidden, c_z, {nn::Init::final, true}) {
  register_child(layer_norm_input_);
  register_child(left_);
  register_child(right_);
  register_child(output_);
}

Variable OuterProductMean::forward(const Variable& m, const Tensor& msa_mask, int64_t chunk,
                                   const Tensor& into) const {
  const int64_t c_m = layer_norm_input_.scale().numel(), c = c_hidden_;
  FC_CHECK(m.dim() == 3 && m.size(2) == c_m && msa_mask.dim() == 2 && msa_mask.size(0) == m.size(0) &&
               msa_mask.size(1) == m.size(1),
           "OuterProductMean '", path(), "': m ", m.shape().str(), ", msa_mask ", msa_mask.shape().str(),
           " (expected [S, N, ", c_m, "] and [S, N])");
  const int64_t s = m.size(0), n = m.size(1);
  const Tensor mask = msa_mask.to(DType::f32).contiguous();
  const Variable mask3(mask.unsqueeze(-1));                         // [S, N, 1]
  const Variable x = layer_norm_input_.forward(m);                  // [S, N, c_m]
  const Variable a = autograd::mul(left_.forward(x), mask3);        // [S, N, c]
  const Variable b2 = autograd::reshape(autograd::mul(right_.forward(x), mask3), {s, n * c});  // [S, N·c]
  // Normaliser 1 / (1e-3 + Σ_s mask_si mask_sj): a GEMM on the mask's device, the reciprocal on the
  // host (N² values; there is no division kernel). Not differentiable (mask).
  const Variable mv(mask);
  std::vector<float> norm = autograd::matmul(mv, mv, true, false).value().to_vector();  // [N, N]
  for (float& v : norm) v = 1.f / (1e-3f + v);
  const Tensor inv_norm = Tensor::from_vector(norm, {n, n, 1}, DType::f32, m.device());
  return run_chunked(n, chunk, [&](int64_t i0, int64_t len) {
    const Variable a2 = autograd::reshape(autograd::contiguous(autograd::narrow(a, 1, i0, len)), {s, len * c});
    const Variable outer = autograd::reshape(autograd::matmul(a2, b2, true, false), {len, c, n, c});  // [i,c,j,e]
    const Variable flat = autograd::reshape(autograd::contiguous(autograd::permute(outer, {0, 2, 1, 3})),
                                            {len, n, c * c});                                      // [i,j,c·e]
    return autograd::mul(output_.forward(flat), Variable(inv_norm.narrow(0, i0, len)));           // [i,j,c_z]
  }, 0, into);
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
