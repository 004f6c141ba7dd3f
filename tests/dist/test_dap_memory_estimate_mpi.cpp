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
#include <random>
#include <string>

#include "apps/memory_estimate.h"
#include "autograd/param_store.h"
#include "core/allocator.h"
#include "core/random.h"
#include "dist_test_util.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/synthetic_target.h"
#include "models/alphafold/parallel/model_parallel_dist.h"

namespace foldcore::apps {
namespace {

using testing::mpi_world;

struct Case {
  int64_t n = 0, chunk = 0, templates = 0;
  std::string precision = "fp32";
};

// This rank's peak above parameters and features, in bytes, and the estimate for the job's P.
std::pair<double, MemoryEstimate> measure(const Case& k) {
  af2::Af2Config c;
  c.num_evoformer_blocks = 1;
  c.num_extra_msa_blocks = 1;
  c.num_recycles = 0;
  c.chunk_size = k.chunk;
  c.precision = k.precision;
  c.max_msa_clusters = 16 + c.templates.max_templates;
  c.max_extra_msa = 16;
  af2::validate_af2_config(c);
  autograd::ParamStore params(Device::cpu());
  Generator init(7);
  af2::AlphaFold model(nn::Scope{&params, &init, nullptr, ""}, c);
  model.train(false);
  params.finalize();
  dist::Communicator& world = mpi_world();
  model.set_model_parallel(af2::make_model_parallel(&world, nullptr));
  std::mt19937 g(42);
  const af2::Af2Features features =
      af2::synthetic_target({k.n, 32, 0, c.templates.max_templates, 16, 16, k.templates}, g);
  Allocator& alloc = default_allocator(Device::cpu());
  alloc.reset_peak();
  const size_t base = alloc.stats().current;
  {
    const af2::Af2Outputs out = model.predict(features, 0, Device::cpu(), {},
                                              {.recycle_states = false, .representations = false, .pair_logits = true});
    EXPECT_FALSE(out.empty());
  }
  const double peak = static_cast<double>(alloc.stats().peak - base);
  return {peak, estimate_predict_memory(c, k.n, 32, 1, params.num_elements(), k.templates, true, world.size())};
}

// `over`: the largest estimate / peak allowed.
void expect_within_margin(const Case& k, double over = 1.25) {
  const auto [peak, e] = measure(k);
  const double est = static_cast<double>(e.activation_bytes), pair = static_cast<double>(k.n * k.n * 128 * 4);
  if (mpi_world().rank() == 0)
    std::printf("DAP-%d N = %lld, chunk %lld, %lld templates, %s: rank 0 peak %.3f fp32 pairs, estimate %.3f (ratio "
                "%.3f)\n",
                mpi_world().size(), static_cast<long long>(k.n), static_cast<long long>(k.chunk),
                static_cast<long long>(k.templates), k.precision.c_str(), peak / pair, est / pair, est / peak);
  EXPECT_GE(est, peak) << "rank " << mpi_world().rank();
  EXPECT_LE(est, over * peak) << "rank " << mpi_world().rank();
}

TEST(DapMemoryEstimate, ChunkedRanksPeaks) {
  expect_within_margin({.n = 128, .chunk = 16});
  expect_within_margin({.n = 130, .chunk = 16});  // N not divisible by P: padded rows
}

// Unchunked: the outer product mean's [N/P, c, N, c] products and their permuted copy are the peak.
TEST(DapMemoryEstimate, UnchunkedRanksPeaks) { expect_within_margin({.n = 96, .chunk = 0}); }

TEST(DapMemoryEstimate, WithTemplatesRanksPeaks) { expect_within_margin({.n = 128, .chunk = 16, .templates = 4}); }

// --precision bf16 under DAP keeps fp32 streams: the fp32 model plus the bf16 copies read after
// the stacks; the stacks' bf16 edges are smaller than the model's, so the bound is 50% here.
TEST(DapMemoryEstimate, Bf16RanksPeaks) { expect_within_margin({.n = 128, .chunk = 16, .precision = "bf16"}, 1.5); }

}  // namespace
}  // namespace foldcore::apps
