// Peak-memory estimate of one AlphaFold inference, checked before anything large is allocated:
// a sequence that cannot fit is refused with a message instead of ending in std::bad_alloc (or a
// CUDA out-of-memory error) minutes later. `predict` checks every target; `serve` derives its
// default --max_length from the same estimate.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"
#include "models/alphafold/config.h"

namespace foldcore::apps {

struct MemoryEstimate {
  int64_t total_bytes = 0;
  int64_t pair_bytes = 0;      // the pair-representation-sized activations and outputs
  int64_t msa_bytes = 0;       // MSA and extra-MSA stacks
  int64_t feature_bytes = 0;   // processed features, all recycling iterations
  int64_t fixed_bytes = 0;     // parameters and runtime overhead
};

// Estimate for `num_res` residues and `msa_rows` alignment rows (1 in single-sequence mode) with
// `num_params` fp32 parameters.
MemoryEstimate estimate_predict_memory(const af2::Af2Config& config, int64_t num_res, int64_t msa_rows,
                                       int64_t num_iterations, int64_t num_params);

// Memory the device can give one process: CPU: physical memory, or the cgroup limit when lower;
// CUDA: the device's total memory.
int64_t device_memory_limit(Device device);

// Throws foldcore::Error naming `input`, its length, the estimated bytes and the device's limit
// when the estimate exceeds the limit.
void check_fits_in_memory(const std::string& input, const af2::Af2Config& config, int64_t num_res, int64_t msa_rows,
                          int64_t num_iterations, int64_t num_params, Device device);

// The longest sequence whose estimate fits the device's limit (at least 1 when anything fits, 0
// when not even one residue does).
int64_t max_fitting_length(const af2::Af2Config& config, int64_t msa_rows, int64_t num_iterations, int64_t num_params,
                           Device device);

// "12.3 GiB"-style text for messages.
std::string format_bytes(int64_t bytes);

}  // namespace foldcore::apps
