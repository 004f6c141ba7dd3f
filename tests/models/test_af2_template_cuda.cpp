// The input, recycling and template embeddings on a GPU against the reference activations:
// parameters, features and activations on cuda:0 (the pair-sized features built there too,
// kernels/af2_features.h); f32 GEMMs without TF32, so the CPU tolerance holds
// (af2_template_parity.h).
#include <gtest/gtest.h>

#include "models/af2_template_parity.h"

namespace foldcore::af2 {
namespace {

TEST(Af2Template, ParityOnCuda) {
  FC_REQUIRE_CUDA();
  template_test::run_parity(Device::cuda());
}

}  // namespace
}  // namespace foldcore::af2
