// The preflight's memory estimate for one rank of `predict --dap P` (apps/memory_estimate.h, its
// `dap` argument) against the allocator peak each rank measures in a real DAP prediction, with P
// the number of ranks of the job (ctest runs it with 2 and 4).
//
// As tests/apps/test_memory_estimate: model_1_ptm widths with 1 Evoformer + 1 extra-MSA block (a
// block's activations die before the next one starts), no recycling, a synthetic target with 16 +
// 16 MSA rows, fp32; measured is the peak above parameters and features. Stated margin: the
// estimate is never below any rank's peak (the preflight must not let through what then runs out
// of memory) and at most 25% above it: looser than the one-process 15%, because the DAP model's
// O(N) terms over-count at these small N (its pair units are the large-N limits of the fits:
// docs/distributed.md, "DAP prediction memory"). Before this estimate existed the preflight used
// the one-process one, which at chunk 16 was up to 2.5x below a DAP-2 rank's peak (before the
// chunked DAP modules; docs/distributed.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "apps/memory_probe.h"
#include "dist_test_util.h"
#include "models/alphafold/parallel/model_parallel_dist.h"

namespace foldcore::apps {
namespace {

using testing::mpi_world;

struct Case {
  int64_t n = 0, chunk = 0, templates = 0, clusters = 16, extra = 16;
  std::string precision = "fp32";
};

// This rank's peak above parameters and features, and the estimate for the job's P.
MemoryProbeResult measure(const Case& k) {
  dist::Communicator& world = mpi_world();
  return measure_predict_memory(
      {.n_res = k.n, .chunk = k.chunk, .clusters = k.clusters, .extra = k.extra, .templates = k.templates, .precision = k.precision},
      af2::make_model_parallel(&world, nullptr));
}

// `over`: the largest estimate / peak allowed.
void expect_within_margin(const Case& k, double over = 1.25) {
  const MemoryProbeResult m = measure(k);
  const double peak = m.activation_bytes, est = static_cast<double>(m.estimate.activation_bytes);
  const double pair = m.pair_unit_bytes;
  if (mpi_world().rank() == 0)
    std::printf("DAP-%d N = %lld, chunk %lld, %lld templates, %lld + %lld MSA rows, %s: rank 0 peak %.3f fp32 "
                "pairs, estimate %.3f (ratio %.3f)\n",
                mpi_world().size(), static_cast<long long>(k.n), static_cast<long long>(k.chunk),
                static_cast<long long>(k.templates), static_cast<long long>(k.clusters),
                static_cast<long long>(k.extra), k.precision.c_str(), peak / pair,
                est / pair, est / peak);
  EXPECT_GE(est, peak) << "rank " << mpi_world().rank();
  EXPECT_LE(est, over * peak) << "rank " << mpi_world().rank();
}

TEST(DapMemoryEstimate, ChunkedRanksPeaks) {
  expect_within_margin({.n = 128, .chunk = 16});
  expect_within_margin({.n = 130, .chunk = 16});  // N not divisible by P: padded rows
}

// Unchunked: the triangle multiplication with its gathered edge is the peak (the outer product
// mean's [N/P, N, c, c] products were, with their permuted copy, until 2026-12-01).
TEST(DapMemoryEstimate, UnchunkedRanksPeaks) { expect_within_margin({.n = 96, .chunk = 0}); }

// A deep extra MSA (512 rows: its [E, N, c_e] stream is 2 fp32 pair units at N = 128), which each
// rank embeds and runs by its own rows only.
TEST(DapMemoryEstimate, DeepExtraMsaRanksPeaks) { expect_within_margin({.n = 128, .chunk = 16, .extra = 512}); }

// 512 rows of the main MSA (8 fp32 pair units at N = 128), which each rank embeds, runs and hands
// to the heads by its own rows only; the column attention's chunk of columns over all rows is the
// peak.
TEST(DapMemoryEstimate, DeepMainMsaRanksPeaks) { expect_within_margin({.n = 128, .chunk = 16, .clusters = 508}); }

TEST(DapMemoryEstimate, WithTemplatesRanksPeaks) { expect_within_margin({.n = 128, .chunk = 16, .templates = 4}); }

// --precision bf16 under DAP keeps fp32 streams; the projections (the ring's edges and chunks, the
// outer products) come out in bf16 under autocast, which the bf16 DAP constants model.
TEST(DapMemoryEstimate, Bf16RanksPeaks) { expect_within_margin({.n = 128, .chunk = 16, .precision = "bf16"}); }

}  // namespace
}  // namespace foldcore::apps
