// CUDA vs CPU for kernels/embedding.h, f32 and bf16. Gather and one-hot copy values: exact.
// Backward: both sum fp32 in row order but associate the initial dtable value differently
// ((d + a) + b vs d + (a + b)); with ~176 N(0,1) rows per index the difference is a random walk of
// ~√176 ulps of |dtable| ≲ 15 (≈ 1e-5), worst case 176 ulps (≈ 2e-4): atol 3e-4, rtol 1e-5.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/random.h"
#include "kernels/embedding.h"
#include "test_util.h"

namespace foldcore {
namespace {

const Device kGpu = Device::cuda(0);

TEST(EmbeddingCuda, ForwardAndOneHotMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(301);
  for (DType t : {DType::f32, DType::bf16}) {
    for (DType it : {DType::i32, DType::i64}) {
      Tensor table = randn({23, 301}, gen).to(t);
      Tensor idx = randint({7, 13}, gen, 0, 23, it);
      Tensor c = Tensor::empty({7, 13, 301}, t), g = Tensor::empty({7, 13, 301}, t, kGpu);
      ops::embedding_forward(table, idx, c);
      ops::embedding_forward(table.to(kGpu), idx.to(kGpu), g);
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, 0, 0);
      Tensor oidx = randint({5, 9}, gen, -2, 12, it);  // some outside [0, 10): zero rows
      Tensor oc = Tensor::empty({5, 9, 10}, t), og = Tensor::empty({5, 9, 10}, t, kGpu);
      ops::one_hot(oidx, 10, oc);
      ops::one_hot(oidx.to(kGpu), 10, og);
      FC_EXPECT_CLOSE(og.to(Device::cpu()), oc, 0, 0);
    }
  }
}

TEST(EmbeddingCuda, BackwardMatchesCpuAndIsDeterministic) {
  FC_REQUIRE_CUDA();
  Generator gen(302);
  for (DType t : {DType::f32, DType::bf16}) {
    for (DType it : {DType::i32, DType::i64}) {
      // 3000 rows over 17 indices (~176 rows each), C = 300 spans two column blocks.
      Tensor idx = randint({3000}, gen, 0, 17, it);
      Tensor dout = randn({3000, 300}, gen).to(t);
      Tensor init = randn({17, 300}, gen);
      Tensor c = init.clone(), g = init.to(kGpu), g2 = init.to(kGpu);
      ops::embedding_backward(dout, idx, c);
      ops::embedding_backward(dout.to(kGpu), idx.to(kGpu), g);
      ops::embedding_backward(dout.to(kGpu), idx.to(kGpu), g2);
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, 3e-4, 1e-5);
      // Deterministic: the same inputs twice give bit-identical dtable.
      FC_EXPECT_CLOSE(g2.to(Device::cpu()), g.to(Device::cpu()), 0, 0);
    }
  }
}

TEST(EmbeddingCuda, OutOfRangeIndexIsAnErrorNamingIt) {
  FC_REQUIRE_CUDA();
  Tensor table = Tensor::zeros({4, 8}, DType::f32, kGpu);
  Tensor out = Tensor::empty({5, 8}, DType::f32, kGpu);
  Tensor idx = Tensor::from_vector_i64({0, 2, 9, 1, -3}, {5}, DType::i64, kGpu);
  try {
    ops::embedding_forward(table, idx, out);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    // The smallest bad position is reported.
    EXPECT_NE(std::string(e.what()).find("index 9 at position 2"), std::string::npos) << e.what();
  }
  Tensor dtable = Tensor::zeros({4, 8}, DType::f32, kGpu);
  EXPECT_THROW(ops::embedding_backward(Tensor::full({5, 8}, 1.0, DType::f32, kGpu), idx, dtable), Error);
  // Valid rows were still scattered, the bad ones skipped.
  const auto dv = dtable.to_vector();
  EXPECT_EQ(dv[0], 1.f);
  EXPECT_EQ(dv[3 * 8], 0.f);
}

}  // namespace
}  // namespace foldcore
