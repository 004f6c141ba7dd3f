// Memory regression of long-sequence inference (docs/benchmarks.md, "AlphaFold2 long
// sequences"): the allocator peak of one chunked prediction, less the parameters and features
// already allocated, in units of one fp32 pair representation (N²·c_z·4 bytes), the unit of
// `bench_predict --memory`. N = 128 at model_1_ptm widths with 1 Evoformer + 1 extra-MSA block
// (the peak does not depend on depth: each block's activations die before the next starts),
// 16 MSA clusters + 16 extra rows, chunk 16, no recycling: about a second per prediction.
//
// At this N the count is not only the pair: the MSA (S·N·c_m = 0.5 pair per fp32 copy at S = 32
// rows incl. templates), the chunks' attention logits (chunk·H·N², 0.5 pair at chunk 16) and the
// template pair (T·N²·c_t) are pair-sized too. The bounds are the measured count plus 0.25 unit
// (2 MiB): one more pair-sized temporary anywhere in the model (1 unit, or 0.5 in bf16) fails.
// The floor (1 unit: the pair stream itself must be counted) keeps the test from passing on a
// broken measurement.
#include <gtest/gtest.h>

#include <random>

#include "autograd/param_store.h"
#include "core/allocator.h"
#include "core/random.h"
#include "models/alphafold/alphafold.h"
#include "models/alphafold/synthetic_target.h"

namespace foldcore::af2 {
namespace {

constexpr int64_t kN = 128;

// Peak allocator bytes of one prediction above what was allocated before it, in fp32 pairs.
double peak_fp32_pairs(const std::string& precision) {
  Af2Config config;
  config.num_evoformer_blocks = 1;
  config.num_extra_msa_blocks = 1;
  config.num_recycles = 0;
  config.chunk_size = 16;
  config.precision = precision;
  validate_af2_config(config);
  autograd::ParamStore params(Device::cpu());
  Generator init(7);
  AlphaFold model(nn::Scope{&params, &init, nullptr, ""}, config);
  model.train(false);
  params.finalize();
  std::mt19937 g(42);
  const Af2Features features = synthetic_target({kN, 32, 0, config.templates.max_templates, 16, 16}, g);
  Allocator& alloc = default_allocator(Device::cpu());
  alloc.reset_peak();
  const size_t base = alloc.stats().current;
  size_t peak = 0;
  {
    const Af2Outputs out = model.predict(features, 0, Device::cpu());
    EXPECT_FALSE(out.empty());
    peak = alloc.stats().peak;
  }
  const double units = static_cast<double>(peak - base) / static_cast<double>(kN * kN * config.c_z * 4);
  std::printf("N = %lld, %s: peak above inputs %.3f fp32 pairs\n", static_cast<long long>(kN), precision.c_str(),
              units);
  return units;
}

TEST(Af2Memory, Fp32PeakInPairUnits) {
  const double units = peak_fp32_pairs("fp32");
  EXPECT_GE(units, 1.0);
  EXPECT_LE(units, 5.13 + 0.25);  // measured 5.13
}

TEST(Af2Memory, Bf16PeakInPairUnits) {
  const double units = peak_fp32_pairs("bf16");
  EXPECT_GE(units, 1.0);
  EXPECT_LE(units, 4.27 + 0.25);  // measured 4.27 (bf16 GEMM outputs; the streams are still fp32)
}

}  // namespace
}  // namespace foldcore::af2
