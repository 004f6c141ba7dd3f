// autograd::linears on CUDA against the CPU: the strided-batch product with one bias per entry,
// the packed output gradients, the fp32 dx accumulated over the projections and the one-product
// weight gradients of back-to-back weights, in fp32 and under bf16 autocast. Skipped without a
// CUDA device (the host emulation runs it in CI).
#include <gtest/gtest.h>

#include <optional>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "core/random.h"
#include "kernels/gemm.h"
#include "test_util.h"

namespace foldcore::autograd {
namespace {

struct Result {
  std::vector<Tensor> values;  // outputs, then dx, dW_i, db_i (on the host, fp32)
};

// q, k, v, gate of width 8 (no bias but on the gate), then a pair-bias-like projection of width 3:
// two runs; the four weights back to back in one gradient buffer, as the ParamStore lays them out.
// all_biases: the four width-8 projections each with a bias, their gradients back to back too (as
// the triangle multiplication's): that run's bias gradients by one batched column sum.
Result run(Device dev, DType autocast, bool all_biases = false, int64_t w4 = 3) {
  Generator gen(21);
  const int64_t in = 16, rows = 40;
  const Tensor xv = randn({4, 10, in}, gen);
  std::vector<Tensor> wv, bv;
  for (int i = 0; i < 5; ++i) wv.push_back(randn({in, i < 4 ? 8 : w4}, gen));
  bv.push_back(randn({8}, gen));
  bv.push_back(randn({w4}, gen));
  const Variable x(xv.to(dev), true);
  std::vector<Variable> w, b(5);
  for (const Tensor& t : wv) w.emplace_back(t.to(dev), true);
  b[3] = Variable(bv[0].to(dev), true);
  b[4] = Variable(bv[1].to(dev), true);
  Tensor flat = Tensor::zeros({4 * in * 8}, DType::f32, dev);
  for (int i = 0; i < 4; ++i) w[i].set_grad(flat.narrow(0, i * in * 8, in * 8).view({in, 8}));
  Tensor flat_b = Tensor::full({4 * 8}, 0.5, DType::f32, dev);
  if (all_biases) {
    for (int i = 0; i < 3; ++i) b[i] = Variable(randn({8}, gen).to(dev), true);
    for (int i = 0; i < 4; ++i) b[i].set_grad(flat_b.narrow(0, i * 8, 8));
  }
  std::optional<AutocastGuard> ac;
  if (autocast != DType::f32) ac.emplace(autocast);
  const LinearsStats before = linears_stats();
  const int64_t fused_before = ops::gemm_sum_fused_calls();
  const std::vector<Variable> y = linears(x, w, b, {{4, 10, 2, 4}, {4, 10, 2, 4}, {4, 10, 2, 4}, {4, 10, 2, 4}, {4, 10, w4}});
  // Consumers: a gate over v (new_grad for both), q·k elementwise (two inputs), and y4 scaled.
  const Variable gv = sigmoid_gate(y[3], y[2]);
  const Variable qk = mul(y[0], y[1]);
  const Variable loss_parts = concat({reshape(gv, {rows * 8}), reshape(qk, {rows * 8}), reshape(scale(y[4], 3.f), {rows * w4})}, 0);
  Generator wg(22);
  backward({loss_parts}, {randn(loss_parts.shape(), wg).to(loss_parts.dtype()).to(dev)});
  EXPECT_EQ(linears_stats().batched_runs - before.batched_runs, 1);
  // With w4 = 8 the fifth projection joins the run, and its gradients are not in the flat buffers.
  EXPECT_EQ(linears_stats().batched_weight_grads - before.batched_weight_grads, w4 == 8 ? 0 : 1);
  // Under bf16 the input gradient's gemm_sum_nt makes every bias gradient (on CUDA the one
  // kernel's column sums where it runs; else one column sum per bias): no batched column sum.
  const bool sixteen = autocast == DType::bf16;
  EXPECT_EQ(linears_stats().batched_bias_grads - before.batched_bias_grads, all_biases && w4 != 8 && !sixteen ? 1 : 0);
  EXPECT_EQ(linears_stats().bias_grads_with_dx - before.bias_grads_with_dx, sixteen ? 1 : 0);
  // dx = Σ_i dy_i·W_iᵀ as one kernel on CUDA under bf16 (ops::gemm_sum_nt): the width-8 pairs by
  // 16-byte copies, a width-3 one (K ≤ 32, off the 16-byte grid) by element loads.
  EXPECT_EQ(ops::gemm_sum_fused_calls() - fused_before, dev.is_cuda() && autocast == DType::bf16 ? 1 : 0);
  Result r;
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::f32); };
  for (const Variable& v : y) r.values.push_back(host(v.value()));
  r.values.push_back(host(x.grad()));
  for (const Variable& v : w) r.values.push_back(host(v.grad()));
  for (const Variable& v : b)
    if (v.defined()) r.values.push_back(host(v.grad()));
  return r;
}

void compare(DType autocast, double atol, double rtol, bool all_biases = false, int64_t w4 = 3) {
  const Result cpu = run(Device::cpu(), autocast, all_biases, w4), gpu = run(Device::cuda(), autocast, all_biases, w4);
  ASSERT_EQ(cpu.values.size(), gpu.values.size());
  for (size_t i = 0; i < cpu.values.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i));
    FC_EXPECT_CLOSE(gpu.values[i], cpu.values[i], atol, rtol);
  }
}

// fp32: both sides sum K = 16 (forward) or ≤ 40 (gradients) fp32 products in some order: 1e-4.
TEST(LinearsCuda, MatchesCpuF32) {
  FC_REQUIRE_CUDA();
  compare(DType::f32, 1e-4, 1e-4);
}

// bf16: the same bf16 operands, fp32 sums, outputs rounded to bf16 on both sides (one ulp, 2⁻⁸,
// apart where the sums round differently); the gradients go through the bf16 outputs' consumers.
TEST(LinearsCuda, MatchesCpuBf16) {
  FC_REQUIRE_CUDA();
  compare(DType::bf16, 3e-2, 3e-2);
}

// A bias on each projection of the width-8 run, their gradients back to back: one batched column
// sum on both sides (fp32 sums of ≤ 40 terms: 1e-4; bf16 as above).
TEST(LinearsCuda, BackToBackBiasGradientsMatchCpu) {
  FC_REQUIRE_CUDA();
  compare(DType::f32, 1e-4, 1e-4, true);
  compare(DType::bf16, 3e-2, 3e-2, true);
}


// Every projection 8 wide: under bf16 the input gradient is the one gemm_sum_nt kernel (all five
// products summed in fp32 registers, rounded once; the CPU rounds after each product: fp32
// rounding, far inside the bf16 tolerance); in fp32 one cuBLASLt product per projection.
TEST(LinearsCuda, InputGradientOfARunInOneKernelMatchesCpu) {
  FC_REQUIRE_CUDA();
  compare(DType::f32, 1e-4, 1e-4, true, 8);
  compare(DType::bf16, 3e-2, 3e-2, true, 8);
}

// The lone consumer of a LayerNorm output of a bf16 x (autograd::linears, every width 8): its
// input gradient is written in bf16 by the one gemm_sum_nt kernel (the fp32 register sum rounded
// once), and every gradient equals, bit for bit, that of the graph with an exact op between (scale
// by 1: the kernel's fp32 out, converted by the engine). Against the CPU, the bf16 tolerance above.
TEST(LinearsCuda, LoneConsumerOfABf16LayerNormGetsItsInputGradientInBf16) {
  FC_REQUIRE_CUDA();
  Generator gen(23);
  const int64_t in = 16;
  const Tensor xv = randn({4, 10, in}, gen, 0.5f, 2.f), gv = randn({in}, gen, 1.f, 0.3f), bv = randn({in}, gen);
  std::vector<Tensor> wv;
  for (int i = 0; i < 4; ++i) wv.push_back(randn({in, 8}, gen));
  const Tensor dy = randn({4, 4, 10, 8}, gen);
  const AutocastGuard ac(DType::bf16);
  auto run = [&](Device dev, bool between) {
    Variable x(xv.to(DType::bf16).to(dev), true), gamma(gv.to(dev), true), beta(bv.to(dev), true);
    std::vector<Variable> w;
    for (const Tensor& t : wv) w.emplace_back(t.to(dev), true);
    const Variable y = layer_norm(x, gamma, beta, 1e-5f, DType::bf16);
    const int64_t fused_before = ops::gemm_sum_fused_calls();
    const std::vector<Variable> p = linears(between ? scale(y, 1.f) : y, w);
    std::vector<Tensor> d;
    for (int i = 0; i < 4; ++i) d.push_back(dy.select(0, i).to(DType::bf16).to(dev));
    backward(p, d);
    EXPECT_EQ(ops::gemm_sum_fused_calls() - fused_before, dev.is_cuda() ? 1 : 0);
    std::vector<Tensor> r{x.grad(), gamma.grad(), beta.grad()};
    for (const Variable& v : w) r.push_back(v.grad());
    for (Tensor& t : r) t = t.to(Device::cpu()).to(DType::f32);
    return r;
  };
  const std::vector<Tensor> lone = run(Device::cuda(), false), between = run(Device::cuda(), true);
  const std::vector<Tensor> cpu = run(Device::cpu(), false);
  ASSERT_EQ(lone.size(), between.size());
  for (size_t i = 0; i < lone.size(); ++i) {
    SCOPED_TRACE("gradient " + std::to_string(i));
    EXPECT_EQ(lone[i].to_vector(), between[i].to_vector());
    FC_EXPECT_CLOSE(lone[i], cpu[i], 3e-2, 3e-2);
  }
}

}  // namespace
}  // namespace foldcore::autograd
