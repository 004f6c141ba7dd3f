#include "apps/memory_estimate.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"


namespace foldcore::apps {

namespace {

// The measured memory model (docs/benchmarks.md, "AlphaFold2 long sequences"; the header). Units
// of one fp32 pair representation above parameters and features, from bench_predict --memory's
// least-squares fits (chunk 16): fp32 2.02 (N = 256..512: the pair stream + one whole update in
// an Evoformer block); bf16 2.02 too (N = 128..256), since the structure module's LN(z) is stored
// in bf16 (before: 2.83, after the trunk). Rounded up by 0.05 unit; bf16's after-trunk part is
// not measured separately and taken as the whole peak's units (an upper bound).
constexpr double kTrunkPairUnits = 2.07;
constexpr double kAfterTrunkPairUnitsBf16 = 2.07;
// fp32's fitted peak is in the trunk, so its after-trunk units are below 2.07 and never decide
// (not measured separately).
constexpr double kAfterTrunkPairUnitsFp32 = 1.5;
// Chunk temporaries in bytes per chunk row per residue, from the unchunked peaks less the pair
// units and the MSA term (fp32 19.8 and 19.4 units above inputs at N = 96 and 192, bf16 12.3 and
// 11.9): c_eff·N·k with c_eff = N. The whole formula is then 0-9% above the chunked runs (chunk 8
// and 32 at N = 96 and 192; docs/benchmarks.md, "Preflight").
constexpr double kChunkBytesPerRowResidueFp32 = 8704;
constexpr double kChunkBytesPerRowResidueBf16 = 4790;
// MSA-stream-sized copies at the trunk's peak: in the Evoformer kMsaCopies of the MSA stream m
// (the stream, its LayerNorm, an update); in the extra-MSA stack m (held for the Evoformer) plus
// kExtraMsaCopies of the extra stream (the stream, its LayerNorm, an update and the outer product
// mean's and global attention's projections, which at c_e = 64 are as wide as the stream itself):
// 4.15 measured with 512 extra rows at N = 64 (tests/apps/test_memory_estimate), rounded up.
constexpr double kMsaCopies = 3.0;
constexpr double kExtraMsaCopies = 4.4;
// With recycling (num_iterations > 1, predict's default), the previous iteration's pair stays
// alive through the next iteration's trunk: measured +1.44 fp32 pairs at N = 96 (chunk 16, 2
// recycles, recycled states not kept: test_memory_estimate), rounded up. Asymptotically the
// previous pair alone is 1 unit, so at long N this over-estimates by up to 0.5 unit (not measured).
constexpr double kRecyclePairUnits = 1.5;
// Runtime outside the tensor allocator (BLAS and OpenMP buffers, malloc slack; CPU RSS minus
// allocator peak measured 250-414 MiB), or the CUDA caching allocator's rounding.
constexpr double kOverheadBytes = 512.0 * 1024 * 1024;
// Relative margin on the activations (the test's stated bound).
constexpr double kActivationMargin = 1.05;

double clamp_bytes(double b) { return std::min(b, 9e18); }

}  // namespace

MemoryEstimate estimate_predict_memory(const af2::Af2Config& c, int64_t num_res, int64_t msa_rows,
                                       int64_t num_iterations, int64_t num_params) {
  const double n = static_cast<double>(std::max<int64_t>(num_res, 0));
  const double rows = static_cast<double>(std::max<int64_t>(msa_rows, 1));
  const double templates = c.templates.enabled ? static_cast<double>(c.templates.max_templates) : 0.0;
  const double max_clusters = std::max(
      1.0, static_cast<double>(c.max_msa_clusters) - (c.reduce_msa_clusters_by_max_templates ? templates : 0.0));
  const double clusters = std::min(rows, max_clusters);
  const double extra = std::min(std::max(rows - clusters, 0.0), static_cast<double>(c.max_extra_msa));
  const double iters = static_cast<double>(std::max<int64_t>(num_iterations, 1));
  // The MSA stream has the template torsion rows too.
  const double msa_rows_m = clusters + (c.templates.enabled && c.templates.embed_torsion_angles ? templates : 0.0);

  const double pair = n * n * static_cast<double>(c.c_z) * 4;
  const double chunk = c.chunk_size > 0 ? std::min(static_cast<double>(c.chunk_size), n) : n;
  const bool bf16 = c.precision == "bf16";
  const double chunk_bytes = (bf16 ? kChunkBytesPerRowResidueBf16 : kChunkBytesPerRowResidueFp32) * chunk * n;
  const double m_stream = n * 4 * msa_rows_m * static_cast<double>(c.c_m);
  const double extra_stream = n * 4 * extra * static_cast<double>(c.c_e);
  const double msa_bytes = std::max(kMsaCopies * m_stream, m_stream + kExtraMsaCopies * extra_stream);
  const double after_units = bf16 ? kAfterTrunkPairUnitsBf16 : kAfterTrunkPairUnitsFp32;
  const double recycle = iters > 1 ? kRecyclePairUnits * pair : 0.0;
  const double trunk = (kTrunkPairUnits * pair + recycle) + chunk_bytes + msa_bytes;
  const double after = (after_units * pair + recycle) + msa_bytes;
  const double activations = kActivationMargin * std::max(trunk, after);
  // Processed features per iteration: msa_feat (49 channels) and the cluster masks/targets per
  // cluster row, extra_msa, its deletions and mask per extra row, template positions and masks
  // (37 atoms) per template, all 4 bytes.
  const double features = iters * n * 4 * (clusters * (49 + 4) + extra * 4 + templates * (37 * 4 + 40) + 64);

  MemoryEstimate e;
  e.chunk = c.chunk_size;
  e.activation_bytes = static_cast<int64_t>(clamp_bytes(activations));
  e.pair_bytes = static_cast<int64_t>(
      clamp_bytes(kActivationMargin * ((trunk >= after ? kTrunkPairUnits : after_units) * pair + recycle)));
  e.chunk_bytes = trunk >= after ? static_cast<int64_t>(clamp_bytes(kActivationMargin * chunk_bytes)) : 0;
  e.msa_bytes = static_cast<int64_t>(clamp_bytes(kActivationMargin * msa_bytes));
  e.feature_bytes = static_cast<int64_t>(clamp_bytes(features));
  e.param_bytes = num_params * 4;
  e.overhead_bytes = static_cast<int64_t>(kOverheadBytes);
  e.total_bytes = static_cast<int64_t>(
      clamp_bytes(activations + features + static_cast<double>(e.param_bytes) + kOverheadBytes));
  return e;
}

int64_t needed_after_params(const MemoryEstimate& e) { return e.total_bytes - e.param_bytes; }

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

namespace {

// A "Key:   123 kB" line of /proc/meminfo, in bytes; -1 when absent.
int64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kb = 0;
  std::string unit;
  while (in >> name >> kb) {
    std::getline(in, unit);
    if (name == key + ":") return kb * 1024;
  }
  return -1;
}

// A cgroup v2 file holding one number ("max" or missing: -1).
int64_t cgroup_value(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return -1;
  }
}

// Blocks the device's allocator holds but has not handed out (reusable without the system).
int64_t allocator_cached(Device device) {
  const MemStats s = default_allocator(device).stats();
  return s.reserved > s.current ? static_cast<int64_t>(s.reserved - s.current) : 0;
}

}  // namespace

int64_t device_memory_available(Device device) {
  if (device.is_cuda()) return static_cast<int64_t>(cuda_free_memory(device)) + allocator_cached(device);
  int64_t avail = meminfo_bytes("MemAvailable");
  if (avail < 0) avail = static_cast<int64_t>(::sysconf(_SC_AVPHYS_PAGES)) * static_cast<int64_t>(::sysconf(_SC_PAGE_SIZE));
  const int64_t cg_max = cgroup_value("/sys/fs/cgroup/memory.max");
  const int64_t cg_used = cgroup_value("/sys/fs/cgroup/memory.current");
  if (cg_max > 0 && cg_used >= 0) avail = std::min(avail, std::max<int64_t>(cg_max - cg_used, 0));
  return avail + allocator_cached(device);
}

std::vector<int64_t> auto_chunk_candidates(int64_t num_res) {
  std::vector<int64_t> out{0};
  int64_t c = 1;
  while (c * 2 < num_res) c *= 2;
  for (; c >= 1; c /= 2)
    if (c < num_res) out.push_back(c);
  return out;
}

int64_t choose_chunk_size(const af2::Af2Config& config, int64_t num_res, int64_t msa_rows, int64_t num_iterations,
                          int64_t num_params, int64_t available_bytes) {
  af2::Af2Config c = config;
  for (const int64_t chunk : auto_chunk_candidates(num_res)) {
    c.chunk_size = chunk;
    if (needed_after_params(estimate_predict_memory(c, num_res, msa_rows, num_iterations, num_params)) <=
        available_bytes)
      return chunk;
  }
  return -1;
}

void check_predict_fits(const std::string& input, const af2::Af2Config& config, int64_t num_res, int64_t msa_rows,
                        int64_t num_iterations, int64_t num_params, int64_t available_bytes, const std::string& device) {
  const MemoryEstimate e = estimate_predict_memory(config, num_res, msa_rows, num_iterations, num_params);
  const int64_t needed = needed_after_params(e);
  if (needed <= available_bytes) return;
  std::ostringstream msg;
  msg << input << ": " << num_res << " residues with " << msa_rows << " MSA rows need an estimated " << needed
      << " bytes (" << format_bytes(needed) << ": activations " << format_bytes(e.activation_bytes) << " at --chunk_size "
      << config.chunk_size << " --precision " << config.precision << ", features " << format_bytes(e.feature_bytes)
      << ", runtime " << format_bytes(e.overhead_bytes) << ") on " << device << ", but only " << available_bytes
      << " bytes (" << format_bytes(available_bytes) << ") are available there.";
  // What to try: the chunk that fits at this precision, and bf16.
  std::vector<std::string> tries;
  const int64_t chunk = choose_chunk_size(config, num_res, msa_rows, num_iterations, num_params, available_bytes);
  if (chunk > 0 && chunk != config.chunk_size)
    tries.push_back("--chunk_size " + std::to_string(chunk) + " (or auto)");
  if (config.precision != "bf16") {
    af2::Af2Config b = config;
    b.precision = "bf16";
    const int64_t bchunk = choose_chunk_size(b, num_res, msa_rows, num_iterations, num_params, available_bytes);
    if (bchunk >= 0 && chunk < 0)
      tries.push_back("--precision bf16 --chunk_size " + std::to_string(bchunk));
  }
  if (tries.empty()) {
    af2::Af2Config smallest = config;
    smallest.chunk_size = 1;
    msg << " Even --chunk_size 1 needs "
        << format_bytes(needed_after_params(estimate_predict_memory(smallest, num_res, msa_rows, num_iterations, num_params)))
        << "; use a device with more memory, fewer MSA rows or a shorter sequence.";
  } else {
    msg << " Try ";
    for (size_t i = 0; i < tries.size(); ++i) msg << (i ? ", or " : "") << tries[i];
    msg << ".";
  }
  FC_THROW(msg.str());
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
