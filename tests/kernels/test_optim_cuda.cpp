// CUDA optimizer kernels against the CPU reference after several steps.
//
// Only f32: the optimizer buffers are fp32 master weights and moments by contract (16-bit
// buffers are rejected by the op on every device; checked below), so there is no bf16 variant.
//
// Tolerances: both backends evaluate the same fp32 expressions (kernels/optim_math.h) with IEEE
// division and sqrt (no fast-math); they differ only where nvcc contracts a·b + c into an FMA,
// i.e. by ~1 ulp per contracted operation. With O(1) parameters and lr ≤ 1e-2 that gives
// p: atol 1e-6, rtol 1e-5 after 6 steps (a few ulp of |p| ≤ 5); m: absolute error ≈ 1 ulp of
// the O(1) terms per step, 6 steps → atol 5e-7; v: positive terms, rtol 1e-5. LAMB's norms are
// accumulated in double on both sides, so the trust ratios agree to ~1e-7 relative and the same
// bounds hold. The global norm sums exact double squares in a different order: rtol 1e-12.
#include <gtest/gtest.h>

#include <cmath>

#include "core/random.h"
#include "kernels/optim.h"
#include "test_util.h"

namespace foldcore {
namespace {

using ops::ParamSegment;

// Many segments: a large multi-chunk one, many small ones of random sizes and flags, empty ones
// and gaps, so the chunk table, the per-segment warps and the padding rules are all exercised.
std::vector<ParamSegment> many_segments(int64_t& n, Generator& gen) {
  std::vector<ParamSegment> segs;
  const auto sizes = randint({600}, gen, 0, 700).to_vector_i64();
  const auto flags = randint({600}, gen, 0, 2).to_vector_i64();
  int64_t off = 0;
  segs.push_back({off, 3 * ops::SegmentTable::kChunk + 123, true});
  off += segs.back().size + 5;  // a gap
  for (size_t i = 0; i < sizes.size(); ++i) {
    segs.push_back({off, sizes[i], flags[i] != 0});
    off += sizes[i] + (i % 7 == 0 ? 3 : 0);
  }
  n = off + 11;
  return segs;
}

struct State {
  Tensor p, m, v;
  State to(Device d) const { return {p.to(d).clone(), m.to(d).clone(), v.to(d).clone()}; }
};

void expect_state_close(const State& gpu, const State& cpu) {
  FC_EXPECT_CLOSE(gpu.p.to(Device::cpu()), cpu.p, 1e-6, 1e-5);
  FC_EXPECT_CLOSE(gpu.m.to(Device::cpu()), cpu.m, 5e-7, 1e-5);
  FC_EXPECT_CLOSE(gpu.v.to(Device::cpu()), cpu.v, 1e-10, 1e-5);
}

TEST(OptimCuda, AdamAndAdamWMatchCpuOverSteps) {
  FC_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  for (bool decoupled : {true, false}) {
    for (bool with_segments : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "decoupled=" << decoupled << " segments=" << with_segments);
      Generator gen(17);
      int64_t n = 0;
      auto segs = many_segments(n, gen);
      if (!with_segments) segs.clear();
      State cpu{randn({n}, gen), Tensor::zeros({n}, DType::f32), Tensor::zeros({n}, DType::f32)};
      State dev = cpu.to(gpu);
      const ops::SegmentTable table_cpu(segs, n, Device::cpu()), table_gpu(segs, n, gpu);
      ops::AdamArgs a;
      a.lr = 1e-2f;
      a.weight_decay = 0.05f;
      a.decoupled = decoupled;
      a.bias_correction = decoupled;  // both settings covered across the cases
      a.grad_scale = 0.7f;
      for (int step = 1; step <= 6; ++step) {
        a.step = step;
        const Tensor g = randn({n}, gen);
        ops::adam_step(cpu.p, g, cpu.m, cpu.v, a, table_cpu);
        ops::adam_step(dev.p, g.to(gpu), dev.m, dev.v, a, table_gpu);
      }
      expect_state_close(dev, cpu);
    }
  }
}

TEST(OptimCuda, LambMatchesCpuOverStepsAndIsDeterministic) {
  FC_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  for (bool bias_correction : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "bias_correction=" << bias_correction);
    Generator gen(23);
    int64_t n = 0;
    const auto segs = many_segments(n, gen);
    State cpu{randn({n}, gen), Tensor::zeros({n}, DType::f32), Tensor::zeros({n}, DType::f32)};
    cpu.p.narrow(0, segs[3].offset, segs[3].size).zero_();  // a zero tensor: ratio falls back to 1
    State dev = cpu.to(gpu);
    const ops::SegmentTable table_cpu(segs, n, Device::cpu()), table_gpu(segs, n, gpu);
    ops::LambArgs a;
    a.lr = 5e-3f;
    a.weight_decay = 0.01f;
    a.bias_correction = bias_correction;
    a.grad_scale = 0.5f;
    std::vector<Tensor> grads;
    for (int step = 1; step <= 6; ++step) {
      a.step = step;
      grads.push_back(randn({n}, gen));
      ops::lamb_step(cpu.p, grads.back(), cpu.m, cpu.v, a, table_cpu);
      ops::lamb_step(dev.p, grads.back().to(gpu), dev.m, dev.v, a, table_gpu);
    }
    expect_state_close(dev, cpu);

    // Run-to-run determinism: replaying the same steps from the same start is bit-identical.
    State again{randn({n}, gen), Tensor::zeros({n}, DType::f32), Tensor::zeros({n}, DType::f32)};
    State first = again.to(gpu), second = again.to(gpu);
    for (int step = 1; step <= 3; ++step) {
      a.step = step;
      const Tensor g = grads[step - 1].to(gpu);
      ops::lamb_step(first.p, g, first.m, first.v, a, table_gpu);
      ops::lamb_step(second.p, g, second.m, second.v, a, table_gpu);
    }
    FC_EXPECT_CLOSE(first.p.to(Device::cpu()), second.p.to(Device::cpu()), 0, 0);
  }
}

TEST(OptimCuda, GlobalGradNormMatchesCpuAndIsDeterministic) {
  FC_REQUIRE_CUDA();
  Generator gen(31);
  for (int64_t n : {1, 255, 4097, 1000003, 9000001}) {
    const Tensor g = randn({n}, gen);
    const Tensor d = g.to(Device::cuda());
    const double cpu = ops::global_grad_norm(g), dev = ops::global_grad_norm(d);
    EXPECT_NEAR(dev, cpu, 1e-12 * cpu) << "n=" << n;
    EXPECT_EQ(ops::global_grad_norm(d), dev) << "n=" << n;  // bitwise reproducible
  }
}

TEST(OptimCuda, EmaMatchesCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(37);
  const int64_t n = 100003;
  Tensor e = randn({n}, gen);
  Tensor ed = e.to(Device::cuda()).clone();
  for (int k = 0; k < 4; ++k) {
    const Tensor p = randn({n}, gen);
    ops::ema_update(e, p, 0.99f);
    ops::ema_update(ed, p.to(Device::cuda()), 0.99f);
  }
  // Values O(1): one FMA contraction per update, ≤ 1 ulp each.
  FC_EXPECT_CLOSE(ed.to(Device::cpu()), e, 1e-6, 1e-6);
}

TEST(OptimCuda, RejectsMixedDevicesAndSixteenBitBuffers) {
  FC_REQUIRE_CUDA();
  const int64_t n = 64;
  const Device gpu = Device::cuda();
  Tensor p = Tensor::zeros({n}, DType::f32, gpu), g = Tensor::zeros({n}, DType::f32, gpu);
  Tensor m = Tensor::zeros({n}, DType::f32, gpu), v = Tensor::zeros({n}, DType::f32, gpu);
  EXPECT_THROW(ops::adam_step(p, Tensor::zeros({n}, DType::f32), m, v, {}), Error);
  EXPECT_THROW(ops::adam_step(p, g, Tensor::zeros({n}, DType::bf16, gpu), v, {}), Error);
  const ops::SegmentTable cpu_table({{0, n, true}}, n, Device::cpu());
  EXPECT_THROW(ops::lamb_step(p, g, m, v, {}, cpu_table), Error);
}

}  // namespace
}  // namespace foldcore
