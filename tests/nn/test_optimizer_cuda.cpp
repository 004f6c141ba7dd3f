// nn::Lamb and nn::Ema on CUDA against the CPU over four steps (the optimizer classes over the
// flat buffers; tests/kernels/test_optim_cuda.cpp checks the kernels themselves). Same tolerance
// reasoning as there: the update arithmetic is the same, FMA contraction only.
#include <gtest/gtest.h>

#include "core/random.h"
#include "nn/optimizer.h"
#include "test_util.h"

namespace foldcore {
namespace {

using ops::ParamSegment;

std::vector<ParamSegment> two_segments(int64_t n0, int64_t n1) { return {{0, n0, true}, {n0, n1, false}}; }

TEST(Optimizer, LambAndEmaOnCudaMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(12);
  const int64_t n = 20000;
  const auto segs = two_segments(15000, 5000);
  Tensor pc = randn({n}, gen), gc = Tensor::zeros({n}, DType::f32);
  Tensor pd = pc.to(Device::cuda()).clone(), gd = Tensor::zeros({n}, DType::f32, Device::cuda());
  nn::Lamb oc(pc, gc, segs), od(pd, gd, segs);
  nn::Ema ec(pc), ed(pd);
  for (int s = 0; s < 4; ++s) {
    const Tensor g = randn({n}, gen);
    gc.copy_(g);
    gd.copy_(g);
    oc.step(0.5f);
    od.step(0.5f);
    ec.update();
    ed.update();
  }
  EXPECT_EQ(od.step_count(), 4);
  FC_EXPECT_CLOSE(pd.to(Device::cpu()), pc, 1e-6, 1e-5);
  FC_EXPECT_CLOSE(ed.shadow().to(Device::cpu()), ec.shadow(), 1e-6, 1e-5);
}

}  // namespace
}  // namespace foldcore
