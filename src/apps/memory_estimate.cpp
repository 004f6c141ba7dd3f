#include "apps/memory_estimate.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/error.h"


namespace foldcore::apps {

namespace {

constexpr double kFloat = 4;  // activations are fp32 (bf16 autocast keeps fp32 storage for most)

// Multiples of one pair representation [N, N, c_z] alive at the peak. Measured with
// --chunk_size 16: ≈ 4.1 (docs/benchmarks.md); 4.5 leaves a margin. Without chunking the pair
// transition's 4·c_z hidden layer and the triangle projections are whole: ≈ 8.
constexpr double kPairFactorChunked = 4.5;
constexpr double kPairFactorUnchunked = 8.0;
// Multiples of one MSA representation alive in an MSA stack (row/column attention projections,
// 4x transition, outer-product-mean inputs).
constexpr double kMsaFactor = 8.0;
constexpr double kOverheadBytes = 512.0 * 1024 * 1024;  // runtime, allocator slack, small tensors

}  // namespace

MemoryEstimate estimate_predict_memory(const af2::Af2Config& c, int64_t num_res, int64_t msa_rows,
                                       int64_t num_iterations, int64_t num_params) {
  const double n = static_cast<double>(std::max<int64_t>(num_res, 0));
  const double rows = static_cast<double>(std::max<int64_t>(msa_rows, 1));
  const double clusters = std::min(rows, static_cast<double>(c.max_msa_clusters));
  const double extra = std::min(std::max(rows - clusters, 0.0), static_cast<double>(c.max_extra_msa));
  const double iters = static_cast<double>(std::max<int64_t>(num_iterations, 1));

  const double pair = n * n * static_cast<double>(c.c_z) * kFloat;
  // Head outputs of the last iteration: distogram, PAE logits and probabilities (64 bins each).
  const double heads = 3 * n * n * 64 * kFloat;
  const double pair_total = pair * (c.chunk_size > 0 ? kPairFactorChunked : kPairFactorUnchunked) + heads;
  const double msa_total = kMsaFactor * n * kFloat * (clusters * static_cast<double>(c.c_m) + extra * static_cast<double>(c.c_e));
  // msa_feat has 49 channels per cluster row, the extra MSA 3 per row (+ masks), per iteration.
  const double features = iters * n * kFloat * (clusters * 49 + extra * 4);
  const double fixed = static_cast<double>(num_params) * kFloat + kOverheadBytes;

  MemoryEstimate e;
  e.pair_bytes = static_cast<int64_t>(std::min(pair_total, 9e18));
  e.msa_bytes = static_cast<int64_t>(std::min(msa_total, 9e18));
  e.feature_bytes = static_cast<int64_t>(std::min(features, 9e18));
  e.fixed_bytes = static_cast<int64_t>(fixed);
  e.total_bytes = static_cast<int64_t>(std::min(pair_total + msa_total + features + fixed, 9e18));
  return e;
}

int64_t device_memory_limit(Device device) {
  if (device.is_cuda()) return static_cast<int64_t>(cuda_total_memory(device));
  int64_t limit = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(::sysconf(_SC_PAGE_SIZE));
  // A container's cgroup (v2) limit is what the kernel enforces when lower than the RAM.
  std::ifstream cg("/sys/fs/cgroup/memory.max");
  std::string text;
  if (cg >> text && text != "max") {
    try {
      limit = std::min<int64_t>(limit, std::stoll(text));
    } catch (const std::exception&) {
      // not a number: keep the physical size
    }
  }
  return limit;
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double gib = static_cast<double>(bytes) / (1024.0 * 1024 * 1024);
  if (gib >= 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.3g PiB", gib / (1024.0 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", gib);
  return buf;
}

void check_fits_in_memory(const std::string& input, const af2::Af2Config& config, int64_t num_res, int64_t msa_rows,
                          int64_t num_iterations, int64_t num_params, Device device) {
  const MemoryEstimate e = estimate_predict_memory(config, num_res, msa_rows, num_iterations, num_params);
  const int64_t limit = device_memory_limit(device);
  FC_CHECK(e.total_bytes <= limit, input, ": ", num_res, " residues with ", msa_rows,
           " MSA rows need an estimated ", e.total_bytes, " bytes (", format_bytes(e.total_bytes), ") on ",
           device.str(), ", whose limit is ", limit, " bytes (", format_bytes(limit), ")",
           config.chunk_size > 0 ? "" : "; --chunk_size 16 lowers the estimate for long sequences");
}

int64_t max_fitting_length(const af2::Af2Config& config, int64_t msa_rows, int64_t num_iterations, int64_t num_params,
                           Device device) {
  const int64_t limit = device_memory_limit(device);
  auto fits = [&](int64_t n) {
    return estimate_predict_memory(config, n, msa_rows, num_iterations, num_params).total_bytes <= limit;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;
  while (fits(hi) && hi < (int64_t{1} << 40)) hi *= 2;
  while (hi - lo > 1) {  // fits(lo), !fits(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace foldcore::apps
