// The head losses whose rows run on the device (losses_heads.h: distogram, masked MSA, TM, given
// logits on CUDA) against the same losses on the host, on the OpenFold training fixture's outputs
// and labels (af2_loss_fixture.h), and the whole af2_loss with those logits on the device.
//
// Tolerances. The host computes each row in double; the device in fp32 (ops::softmax_cross_entropy:
// max, Σ exp and log in fp32, with CUDA's fast __expf/__logf, a few ulp each), the rows' sum in
// double on the host again. A row's cross-entropy (≈ log 64 ≈ 4 for a flat distogram row) then
// carries an error of a few fp32 ulps of the log-sum-exp: ≲ 1e-6 relative, and the mean over rows
// no more. Values: 1e-5 relative (10× that). Gradients: softmax(z) − onehot in fp32, each entry
// within a few ulp of 1 scaled by the row's weight: 1e-5 of the largest entry, absolute.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "af2_loss_fixture.h"
#include "models/alphafold/losses/losses_heads.h"
#include "models/alphafold/losses/losses_total.h"

namespace foldcore::af2 {
namespace {

constexpr double kValueTol = 1e-5, kGradTol = 1e-5;

struct Fixture {
  Af2LossOutputs outputs;
  Af2LossBatch batch;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    const auto arrays = train_batch_arrays();
    x.batch = Af2LossBatch::from_arrays(arrays);
    x.outputs = train_fixture_outputs(arrays.at("aatype"));
    return x;
  }();
  return f;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// The device's gradient against the host's: on the device, f32, same shape; max |Δ| ≤ kGradTol ·
// max |host|.
void expect_grad_close(const Tensor& device_grad, const Tensor& host_grad, const char* what) {
  ASSERT_TRUE(device_grad.device().is_cuda()) << what;
  ASSERT_EQ(device_grad.dtype(), DType::f32) << what;
  ASSERT_EQ(device_grad.shape(), host_grad.shape()) << what;
  const std::vector<float> d = device_grad.to(Device::cpu()).to_vector(), h = host_grad.to_vector();
  double scale = 0, diff = 0;
  for (size_t k = 0; k < h.size(); ++k) {
    ASSERT_TRUE(std::isfinite(d[k])) << what << " entry " << k;
    scale = std::max(scale, std::abs(static_cast<double>(h[k])));
    diff = std::max(diff, std::abs(static_cast<double>(d[k]) - h[k]));
  }
  std::printf("%-12s max |grad| %.3e  max |device - host| %.3e\n", what, scale, diff);
  EXPECT_GT(scale, 0) << what;
  EXPECT_LE(diff, kGradTol * scale) << what;
}

// One head's loss on the device against the host: the value, then the gradient.
void expect_same_loss(const LogitsLoss& dev, const LogitsLoss& host, const char* what) {
  std::printf("%-12s host %.9g  device %.9g  rel %.2e\n", what, host.value, dev.value, rel(dev.value, host.value));
  EXPECT_LE(rel(dev.value, host.value), kValueTol) << what;
  expect_grad_close(dev.grad_logits, host.grad_logits, what);
}

TEST(Af2LossesCuda, DistogramMatchesHost) {
  FC_REQUIRE_CUDA();
  const Fixture& f = fixture();
  const LogitsLoss host = distogram_loss(f.outputs.distogram_logits, f.batch.pseudo_beta, f.batch.pseudo_beta_mask);
  const LogitsLoss dev =
      distogram_loss(f.outputs.distogram_logits.to(Device::cuda()), f.batch.pseudo_beta, f.batch.pseudo_beta_mask);
  expect_same_loss(dev, host, "distogram");
}

TEST(Af2LossesCuda, DistogramFromBf16Logits) {
  // bf16 logits (the head's output under autocast) are widened to f32 on the device: the same
  // values as the host's widening of the same bf16 numbers.
  FC_REQUIRE_CUDA();
  const Fixture& f = fixture();
  const Tensor bf = f.outputs.distogram_logits.to(DType::bf16);
  const LogitsLoss host = distogram_loss(bf.to(DType::f32), f.batch.pseudo_beta, f.batch.pseudo_beta_mask);
  const LogitsLoss dev = distogram_loss(bf.to(Device::cuda()), f.batch.pseudo_beta, f.batch.pseudo_beta_mask);
  expect_same_loss(dev, host, "dist bf16");
}

TEST(Af2LossesCuda, MaskedMsaMatchesHost) {
  FC_REQUIRE_CUDA();
  const Fixture& f = fixture();
  const LogitsLoss host = masked_msa_loss(f.outputs.masked_msa_logits, f.batch.true_msa, f.batch.bert_mask);
  const LogitsLoss dev =
      masked_msa_loss(f.outputs.masked_msa_logits.to(Device::cuda()), f.batch.true_msa, f.batch.bert_mask);
  expect_same_loss(dev, host, "masked_msa");
}

TEST(Af2LossesCuda, MaskedMsaRejectsABadLabelOnTheDeviceToo) {
  // A masked position whose true_msa value is outside 0..22 is named, as on the host.
  FC_REQUIRE_CUDA();
  const Fixture& f = fixture();
  Tensor bad = f.batch.true_msa.to(DType::i64).contiguous().clone();
  const std::vector<float> mask = f.batch.bert_mask.to_vector();
  const auto at = std::find_if(mask.begin(), mask.end(), [](float m) { return m != 0; });
  ASSERT_NE(at, mask.end());
  bad.data<int64_t>()[at - mask.begin()] = 23;
  EXPECT_THROW(masked_msa_loss(f.outputs.masked_msa_logits.to(Device::cuda()), bad, f.batch.bert_mask), Error);
}

TEST(Af2LossesCuda, TmMatchesHost) {
  FC_REQUIRE_CUDA();
  const Fixture& f = fixture();
  const Tensor frames = f.outputs.sm_frames.select(0, f.outputs.sm_frames.size(0) - 1).contiguous();
  const double resolution = f.batch.resolution.to_vector()[0];
  const LogitsLoss host =
      tm_loss(f.outputs.tm_logits, frames, f.batch.backbone_rigid_tensor, f.batch.backbone_rigid_mask, resolution);
  const LogitsLoss dev = tm_loss(f.outputs.tm_logits.to(Device::cuda()), frames, f.batch.backbone_rigid_tensor,
                                 f.batch.backbone_rigid_mask, resolution);
  expect_same_loss(dev, host, "tm");
}

TEST(Af2LossesCuda, WholeLossWithDeviceLogits) {
  // af2_loss with the three logits on the device, as the training step hands them over: the same
  // terms and total, and their gradients (weighted and scaled on the device) against the host's.
  FC_REQUIRE_CUDA();
  const Fixture& f = fixture();
  Af2LossConfig config;
  config.weights = LossWeights::finetune(/*ptm=*/true);
  const Af2Loss host = af2_loss(f.outputs, f.batch, config);
  Af2LossOutputs o = f.outputs;
  o.distogram_logits = o.distogram_logits.to(Device::cuda());
  o.masked_msa_logits = o.masked_msa_logits.to(Device::cuda());
  o.tm_logits = o.tm_logits.to(Device::cuda());
  const Af2Loss dev = af2_loss(o, f.batch, config);
  EXPECT_TRUE(dev.skipped.empty());
  for (const auto& [name, value] : host.terms) {
    ASSERT_TRUE(dev.terms.count(name)) << name;
    EXPECT_LE(rel(dev.terms.at(name), value), kValueTol) << name;
  }
  EXPECT_LE(rel(dev.loss, host.loss), kValueTol);
  expect_grad_close(dev.grads.distogram_logits, host.grads.distogram_logits, "total dist");
  expect_grad_close(dev.grads.masked_msa_logits, host.grads.masked_msa_logits, "total msa");
  expect_grad_close(dev.grads.tm_logits, host.grads.tm_logits, "total tm");
}

}  // namespace
}  // namespace foldcore::af2
