// Peak-memory estimate of one AlphaFold inference, checked before anything large is allocated:
// a sequence that cannot fit is refused with a message instead of ending in std::bad_alloc (or a
// CUDA out-of-memory error) minutes later. `predict` checks every target against the memory the
// device has available (and, with --chunk_size auto, picks the largest chunk that fits); `serve`
// derives its default --max_length from the same estimate against the device's total memory.
//
// The estimate is the measured memory model of docs/benchmarks.md ("AlphaFold2 long sequences"),
// in units of one fp32 pair representation P = N²·c_z·4 bytes, plus the terms the benchmark's
// fits put in O(N):
//   activations(N, chunk) = max(trunk, after_trunk)
//     trunk       = (u_trunk + r)·P + k_chunk·c·N + msa
//     after_trunk = (u_after − l)·P + msa
//     l           = 0 when the pair heads' logits stay on the device (the CPU with
//                   --result_arrays full, where the device is the host), else their units
//                   (2·bins·bytes / (c_z·4): 1 fp32, 0.5 bf16): with --result_arrays summary they
//                   are not kept, and on a GPU their copies are host memory
//     r           = u_recycle with recycling (the previous iteration's pair), else 0
//     msa         = max(k_m·M, M + k_e·E)   (M, E: the MSA and extra-MSA stream bytes)
// with c = the chunk (N when unchunked): the chunk's temporaries (the outer product mean's
// [c, N, c_opm²] outer products, the pair transition's [c, N, 4·c_z] hidden layer, the triangle
// modules' chunk rows) are c·N·k_chunk bytes, so the unchunked model is the same formula at c = N.
// u_trunk, u_after, u_recycle, k_chunk, k_m and k_e are measured allocator peaks (bench_predict --memory,
// test_memory_estimate's deep-MSA case); the activations get a 5% margin on top;
// tests/apps/test_memory_estimate checks the estimate against the allocator's measured peak at
// several N, chunks and both precisions. Parameters and features are counted exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/memory_info.h"
#include "models/alphafold/model/config.h"

namespace foldcore::apps {

struct MemoryEstimate {
  int64_t total_bytes = 0;       // everything below: the process's footprint on the device
  int64_t activation_bytes = 0;  // the peak of predict above parameters and features
  int64_t pair_bytes = 0;        // of which pair-representation-sized (u·P)
  int64_t chunk_bytes = 0;       // of which chunk-sized temporaries (k_chunk·c·N)
  int64_t msa_bytes = 0;         // of which MSA-stream-sized
  int64_t feature_bytes = 0;     // processed features, all recycling iterations
  int64_t param_bytes = 0;       // fp32 parameters
  int64_t overhead_bytes = 0;    // runtime, BLAS buffers, allocator slack (a fixed margin)
  int64_t chunk = 0;             // the chunk the estimate is for (0: none)
};

// Estimate for `num_res` residues and `msa_rows` raw alignment rows (1 in single-sequence mode),
// `num_iterations` = recycles + 1 feature samples and `num_params` fp32 parameters, at the
// config's chunk_size and precision; `templates` found templates (the model uses at most
// max_templates; < 0: as many as it can use).
// `logits_on_device`: whether the pair heads' [N, N, bins] results are held on the device
// (pair_logits_on_device; true is the larger estimate).
// `dap` > 1: the peak of one rank of `predict --dap` (dynamic axial parallelism over `dap` ranks):
// the stages before and after the Evoformer stacks run whole on every rank, with fp32 streams
// (DAP keeps them in fp32 under --precision bf16 too, so the fp32 model is used), and the stacks'
// peak is one rank's (below, "DAP").
MemoryEstimate estimate_predict_memory(const af2::Af2Config& config, int64_t num_res, int64_t msa_rows,
                                       int64_t num_iterations, int64_t num_params, int64_t templates = -1,
                                       bool logits_on_device = true, int64_t dap = 1);

// Whether a prediction on `device` with `--result_arrays` `result_arrays` (full|summary) holds the
// pair heads' logits on the device: only the CPU (the host is its device) with full arrays.
bool pair_logits_on_device(Device device, const std::string& result_arrays);

// Throws foldcore::Error naming `input`, its length, the estimated bytes and the device's limit
// when the estimate (parameters included) exceeds the device's total memory.
void check_fits_in_memory(const std::string& input, const af2::Af2Config& config, int64_t num_res, int64_t msa_rows,
                          int64_t num_iterations, int64_t num_params, Device device);

// The preflight of `predict`, run after the models are loaded (their parameters are resident) and
// before the processed features and activations exist: needs feature + activation + overhead
// bytes within `available_bytes`. Throws foldcore::Error naming `input`, its length, what is
// needed vs available, and what to try (a --chunk_size that fits, --precision bf16) otherwise.
void check_predict_fits(const std::string& input, const af2::Af2Config& config, int64_t num_res, int64_t msa_rows,
                        int64_t num_iterations, int64_t num_params, int64_t available_bytes, const std::string& device,
                        int64_t templates = -1, bool logits_on_device = true, int64_t dap = 1);

// Bytes the result arrays of `models` predictions of `num_res` residues hold until the target is
// written (fp32, in host memory): N²·(2·bins + 2) floats per model with --result_arrays full (the
// distogram logits, the aligned-confidence probabilities, PAE and its logits' reduction), N²·2 with
// summary.
int64_t kept_result_bytes(int64_t num_res, int64_t bins, const std::string& result_arrays, int64_t models);

// The host side of a GPU run's preflight (the device estimate leaves the result arrays out: they
// are host memory): throws foldcore::Error naming `input`, its length, the bytes its results need
// and the host's available bytes, suggesting --result_arrays summary where that is not already
// the setting.
void check_host_results_fit(const std::string& input, int64_t num_res, int64_t needed_bytes, int64_t available_bytes,
                            const std::string& result_arrays);

// Bytes a prediction still needs once the parameters are resident (the preflight's "needed").
int64_t needed_after_params(const MemoryEstimate& e);

// The chunks `--chunk_size auto` tries, largest first: 0 (no chunking, as large as N), then
// powers of two from the largest below N down to 1.
std::vector<int64_t> auto_chunk_candidates(int64_t num_res);

// --chunk_size auto: the largest candidate chunk whose needed_after_params fits `available_bytes`;
// -1 when not even chunk 1 fits.
int64_t choose_chunk_size(const af2::Af2Config& config, int64_t num_res, int64_t msa_rows, int64_t num_iterations,
                          int64_t num_params, int64_t available_bytes, int64_t templates = -1,
                          bool logits_on_device = true, int64_t dap = 1);

// --template_passes auto for one target at config's chunk: 1 where config runs one pass anyway
// (unchunked, or fewer than two templates) or where one pass fits `available_bytes`, else 2 (the
// template stage's least memory; its second pass of the template stacks costs time). A config
// whose template_passes is already 1 or 2 gets that.
int64_t choose_template_passes(const af2::Af2Config& config, int64_t num_res, int64_t msa_rows, int64_t num_iterations,
                               int64_t num_params, int64_t available_bytes, int64_t templates = -1,
                               bool logits_on_device = true, int64_t dap = 1);

// The longest sequence whose estimate fits the device's limit (at least 1 when anything fits, 0
// when not even one residue does).
int64_t max_fitting_length(const af2::Af2Config& config, int64_t msa_rows, int64_t num_iterations, int64_t num_params,
                           Device device, bool logits_on_device = true);

// "12.3 GiB"-style text for messages.
std::string format_bytes(int64_t bytes);

}  // namespace foldcore::apps
