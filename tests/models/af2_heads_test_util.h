// The output heads' parity helpers, shared by tests/models/test_af2_heads.cpp (CPU) and
// test_af2_heads_cuda.cpp (the same parity on a GPU).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/heads/confidence.h"
#include "models/alphafold/heads/heads.h"
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

// The heads at model_1_ptm widths with the reference weights, in eval mode, on e's device.
inline std::unique_ptr<Af2Heads> reference_heads(Env& e, const Af2Config& cfg) {
  auto heads = std::make_unique<Af2Heads>(e.scope(), cfg);
  heads->train(false);
  e.ps.finalize();
  Af2ParamTable table;
  heads->add_af2_params(table);
  load_af2_params(table, testing::shared_dir() + "/af2/ref/params.npz", {.allow_unused = true});
  return heads;
}

// Af2Heads::pair_heads_by_rows on `device` (the reference weights and pair, N = 40) against the
// whole-array heads on the same device: with the logits kept, the host arrays equal forward's
// logits within `tol`·max|logit| (a GEMM over a block's rows may take another kernel than over all
// N² rows, on the CPU too: OpenBLAS measured 3.5e-7 of max at N = 40; K = 128 fp32 rounding bounds
// it by about √K·2⁻²⁴ ≈ 7e-7), and PAE and pTM from them equal the whole-array functions (1e-4 Å,
// 1e-6); without, the stream's PAE and pTM equal them and no logits are kept.
// Blocks of 1 row, 3 rows, 7 rows (N not a multiple) and the default (one block). Then the
// allocator peak of the streamed heads at 2 rows per block stays within the pair-sized results
// (PAE, N² f32, where the device is the host) and 8 block-sized temporaries, where the whole-array
// heads hold at least two [N, N, 64] logits.
inline void check_pair_heads_by_rows(Device device, double tol) {
  Env e(device);
  Af2Config cfg;
  const std::unique_ptr<Af2Heads> heads_ptr = reference_heads(e, cfg);
  const Af2Heads& heads = *heads_ptr;
  autograd::NoGradGuard no_grad;
  const Tensor pair = ref("pair").to(device);
  const int64_t n = pair.size(0), bins = cfg.heads.pae_bins;
  ASSERT_EQ(cfg.heads.distogram_bins, bins);
  HeadInputs in;
  in.msa = Variable(ref("msa").to(device));
  in.pair = Variable(pair);
  in.single = Variable(ref("single").to(device));
  in.sm_single = Variable(ref("sm_single").to(device));
  const HeadOutputs whole = heads.forward(in);
  const Tensor dgram = whole.distogram_logits.value().to(Device::cpu());
  const Tensor tm = whole.tm_logits.value().to(Device::cpu());
  const PredictedAlignedError pae = compute_predicted_aligned_error(tm, cfg.heads.pae_max_error_bin);
  const float ptm = predicted_tm_score(tm, {}, cfg.heads.pae_max_error_bin);
  EXPECT_FALSE(heads.forward(in, false).distogram_logits.defined());
  for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{7}, n}) {
    SCOPED_TRACE("rows per block " + std::to_string(rows));
    const int64_t block = rows == n ? Af2Heads::kPairHeadBlockValues : rows * n * bins;
    const PairHeadOutputs kept = heads.pair_heads_by_rows(pair, true, block);
    ASSERT_TRUE(kept.distogram_logits.defined() && kept.tm_logits.defined());
    EXPECT_TRUE(kept.distogram_logits.device().is_cpu());
    EXPECT_FALSE(kept.pae);
    FC_EXPECT_CLOSE(kept.distogram_logits, dgram, tol * max_abs(dgram), 0);
    FC_EXPECT_CLOSE(kept.tm_logits, tm, tol * max_abs(tm), 0);
    const PairHeadOutputs streamed = heads.pair_heads_by_rows(pair, false, block);
    EXPECT_FALSE(streamed.distogram_logits.defined() || streamed.tm_logits.defined());
    ASSERT_TRUE(streamed.pae && streamed.pae->complete());
    const PredictedAlignedError s = streamed.pae->result();
    EXPECT_FALSE(s.aligned_confidence_probs.defined());
    // Logits within tol·max (≈ 2.4e-5 here) move a softmax by at most 2·2.4e-5 in each probability:
    // PAE (centres ≤ 31.75 Å) by < 2e-3 Å worst case, far less in practice (1e-4), pTM by < 1e-6.
    FC_EXPECT_CLOSE(s.predicted_aligned_error, pae.predicted_aligned_error, 1e-4, 0);
    EXPECT_NEAR(streamed.pae->ptm(), ptm, 1e-6);
  }
  Allocator& alloc = default_allocator(device);
  alloc.reset_peak();
  size_t base = alloc.stats().current;
  { const HeadOutputs again = heads.forward(in); }
  const size_t whole_peak = alloc.stats().peak - base;
  alloc.reset_peak();
  base = alloc.stats().current;
  const int64_t rows = 2;
  { const PairHeadOutputs streamed = heads.pair_heads_by_rows(pair, false, rows * n * bins); }
  const size_t streamed_peak = alloc.stats().peak - base;
  const size_t block_bytes = static_cast<size_t>(rows * n * cfg.c_z * 4);
  const size_t bound = (device.is_cpu() ? static_cast<size_t>(n * n * 4) : 0) + 8 * block_bytes;
  std::printf("pair heads at N = %lld: whole %zu bytes, by 2-row blocks %zu (bound %zu)\n",
              static_cast<long long>(n), whole_peak, streamed_peak, bound);
  EXPECT_GE(whole_peak, static_cast<size_t>(2 * n * n * bins * 4));
  EXPECT_LE(streamed_peak, bound);
}

}  // namespace foldcore::af2::heads_test
