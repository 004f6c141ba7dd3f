// The output heads' parity helpers, shared by tests/models/test_af2_heads.cpp (CPU) and
// test_af2_heads_cuda.cpp (the same parity on a GPU).
#pragma once

#include <cstdio>
#include <string>

#include "data_pipeline/npy.h"
#include "models/af2_test_util.h"
#include "test_util.h"

namespace foldcore::af2::heads_test {

// An array of the reference outputs (../shared/af2/ref/outputs.npz).
inline Tensor ref(const std::string& name) {
  static const data::NpzReader npz(testing::shared_dir() + "/af2/ref/outputs.npz");
  return npz.read(name).to_tensor();
}

// Parity tolerance: each head is one to three fp32 GEMMs over K ≤ 384 (plus one LayerNorm), whose
// rounding differs from the reference only by summation order: |err| ≲ √K·2⁻²⁴·Σ|x·w| ≈ 1e-6 of
// the output scale. atol = 1e-5·max|ref| + rtol 1e-4 leaves a 10× margin and is far below what
// a wrong convention (a missing transpose, ReLU, LayerNorm eps, bias) produces.
inline void expect_parity(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  FC_EXPECT_CLOSE(got, want, 1e-5 * max_abs(want), 1e-4);
  const auto r = testing::all_close(got, want, 0, 0);
  std::printf("max|diff| %.3g, max|ref| %.3g\n", r.max_abs, max_abs(want));
}

}  // namespace foldcore::af2::heads_test
