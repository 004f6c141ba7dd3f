// The output heads on a GPU against the reference (OpenFold fp32 on the reference weights), from
// the reference representations: parameters and inputs on cuda:0, tolerances of the CPU parity
// (af2_heads_test_util.h), and the confidence functions on device logits.
#include <gtest/gtest.h>

#include "autograd/grad_mode.h"
#include "models/af2_heads_test_util.h"
#include "models/alphafold/heads/confidence.h"
#include "models/alphafold/heads/heads.h"

namespace foldcore::af2 {
namespace {

using heads_test::expect_parity;
using heads_test::ref;

TEST(Af2Heads, ParityOnCuda) {
  // The same heads with parameters and inputs on the GPU. f32 GEMMs there run without TF32
  // (gemm_cuda.cu), so only the summation order differs from the CPU: the CPU tolerance holds.
  FC_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  Env e(gpu);
  const std::unique_ptr<Af2Heads> heads = heads_test::reference_heads(e, Af2Config{});
  autograd::NoGradGuard no_grad;
  HeadInputs in;
  in.msa = Variable(ref("msa").to(gpu));
  in.pair = Variable(ref("pair").to(gpu));
  in.single = Variable(ref("single").to(gpu));
  in.sm_single = Variable(ref("sm_single").to(gpu));
  const HeadOutputs out = heads->forward(in);
  ASSERT_TRUE(out.distogram_logits.device().is_cuda());
  expect_parity(out.distogram_logits.value().to(Device::cpu()), ref("distogram_logits"));
  expect_parity(out.masked_msa_logits.value().to(Device::cpu()), ref("masked_msa_logits"));
  expect_parity(out.lddt_logits.value().to(Device::cpu()), ref("lddt_logits"));
  expect_parity(out.experimentally_resolved_logits.value().to(Device::cpu()), ref("experimentally_resolved_logits"));
  expect_parity(out.tm_logits.value().to(Device::cpu()), ref("tm_logits"));
  // Confidence functions accept device logits and answer on the device.
  const Tensor plddt = compute_plddt(out.lddt_logits.value());
  EXPECT_TRUE(plddt.device().is_cuda());
  FC_EXPECT_CLOSE(plddt.to(Device::cpu()), ref("plddt"), 1e-3, 0);
  EXPECT_NEAR(predicted_tm_score(out.tm_logits.value()), ref("ptm_score").item(), 1e-5);
}

// The pair-sized heads by blocks of rows on the GPU (1e-6 of max|logit|, as on the CPU: a GEMM over
// fewer rows may take another cuBLAS algorithm; f32 without TF32, K = 128).
TEST(Af2Heads, PairHeadsByRowsOnCuda) {
  FC_REQUIRE_CUDA();
  heads_test::check_pair_heads_by_rows(Device::cuda(), 1e-6);
}

}  // namespace
}  // namespace foldcore::af2
