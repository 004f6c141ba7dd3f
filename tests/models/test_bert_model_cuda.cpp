// BERT on CUDA against the CPU: the tiny configuration (2 layers, hidden 16, 4 heads), unpacked
// and packed batches, fp32, dropout off. The loss, the MLM and NSP logits and the gradient of every
// parameter must agree within summation-order rounding: the same fp32 math with cuBLAS(Lt)/CUDA
// reduction trees against OpenBLAS and the CPU loops (~1e-6 relative per op, a few ops deep), so
// atol 1e-4·max|cpu| + rtol 1e-3 per tensor and 1e-5 relative on the loss. Skipped without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "bert_test_util.h"
#include "test_util.h"

namespace foldcore::bert {
namespace {

struct Run {
  double loss = 0;
  Tensor mlm_logits, nsp_logits;
  std::map<std::string, Tensor> grads;
};

Run run(Device dev, const BertBatch& batch) {
  Model m(tiny_config(), dev);
  autograd::ParamStore& params = m.params;
  params.zero_grad();
  const BertOutputs o = m.bert.forward(batch);
  autograd::backward(o.loss);
  synchronize(dev);
  Run r;
  r.loss = o.loss.value().to(Device::cpu()).to_vector()[0];
  r.mlm_logits = o.mlm_logits.value().to(Device::cpu()).to(DType::f32);
  r.nsp_logits = o.nsp_logits.value().to(Device::cpu()).to(DType::f32);
  for (const auto& [name, g] : params.named_grads()) r.grads[name] = g.to(Device::cpu());
  return r;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

void compare(const BertBatch& batch) {
  const Run cpu = run(Device::cpu(), batch), gpu = run(Device::cuda(), batch);
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * std::fabs(cpu.loss));
  for (const auto& [what, got, ref] : {std::tuple{"mlm_logits", gpu.mlm_logits, cpu.mlm_logits},
                                       std::tuple{"nsp_logits", gpu.nsp_logits, cpu.nsp_logits}}) {
    const auto r = testing::all_close(got, ref, 1e-4 * max_abs(ref), 1e-3);
    EXPECT_TRUE(r.ok) << what << ": " << r.message;
  }
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (const auto& [name, ref] : cpu.grads) {
    const auto r = testing::all_close(gpu.grads.at(name), ref, 1e-4 * max_abs(ref) + 1e-7, 1e-3);
    EXPECT_TRUE(r.ok) << "d" << name << ": " << r.message;
  }
}

TEST(BertModelCuda, UnpackedLossLogitsAndGradientsMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator g(1);
  const int64_t v = tiny_config().vocab_size;
  compare(make_unpacked_batch(
      {random_sequence(14, v, g, 3), random_sequence(10, v, g, 2), random_sequence(16, v, g, 4)}, 16, 4));
}

TEST(BertModelCuda, PackedLossLogitsAndGradientsMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator g(2);
  const int64_t v = tiny_config().vocab_size;
  compare(make_packed_batch({{random_sequence(7, v, g, 2), random_sequence(8, v, g, 2)}, {random_sequence(12, v, g, 3)}},
                            16, 4));
}

}  // namespace
}  // namespace foldcore::bert
