// The input, recycling and template embeddings on a GPU against the reference activations:
// parameters, features and activations on cuda:0 (the pair-sized features built there too,
// kernels/af2_features.h); f32 GEMMs without TF32, so the CPU tolerance holds
// (af2_template_parity.h).
#include <gtest/gtest.h>

#include "core/random.h"
#include "models/af2_template_parity.h"

namespace foldcore::af2 {
namespace {

TEST(Af2Template, ParityOnCuda) {
  FC_REQUIRE_CUDA();
  template_test::run_parity(Device::cuda(), false);
}

// Inference's in-place template embedding on the GPU, one and two passes over the templates
// (scores by strided copies, the softmax over the template slots, the weighted value projections
// added into z by chunks), against the same on the CPU with the same parameters, at small widths.
// Tolerance: fp32 on both, different summation orders in GEMMs and attention: 1e-5.
TEST(Af2Template, AddIntoOnCudaMatchesCpu) {
  FC_REQUIRE_CUDA();
  const TemplateConfig cfg = small_templates(1);
  const int64_t n = 9, c_z = 6;
  Generator g(5);
  const TemplateInputs in = random_template_inputs(n, {1, 1, 0.5f}, g, 5, 21);
  const Tensor z = randn({n, n, c_z}, g);
  const Tensor pm = Tensor::full({n, n}, 1.0, DType::f32);
  autograd::NoGradGuard ng;
  for (const TemplatePasses passes : {TemplatePasses::one, TemplatePasses::two}) {
    Tensor out[2];
    for (int d = 0; d < 2; ++d) {
      const Device dev = d == 0 ? Device::cpu() : Device::cuda();
      Env e(dev);
      TemplateEmbedder emb(e.scope("te"), c_z, cfg);
      e.ps.finalize();
      e.randomize(8);  // the same values on both devices (one generator sequence)
      TemplateInputs on = in;
      on.aatype = in.aatype.to(dev);
      on.all_atom_positions = in.all_atom_positions.to(dev);
      on.all_atom_mask = in.all_atom_mask.to(dev);
      on.template_mask = in.template_mask.to(dev);
      Tensor zi = z.clone().to(dev);  // a copy on the CPU too (to() returns the same tensor there)
      emb.add_into(Variable(zi), on, pm.to(dev), 4, zi, passes);
      out[d] = zi.to(Device::cpu());
    }
    FC_EXPECT_CLOSE(out[1], out[0], 1e-5, 1e-5);
    EXPECT_GT(testing::all_close(out[0], z, 0, 0).max_abs, 1e-3);  // the templates changed z
  }
}

}  // namespace
}  // namespace foldcore::af2
