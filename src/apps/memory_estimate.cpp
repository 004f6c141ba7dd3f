#include "apps/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "models/alphafold/structure/ipa.h"


namespace foldcore::apps {

namespace {

// The measured memory model (docs/benchmarks.md, "AlphaFold2 long sequences"; the header), with
// the chunk-epilogue residual adds and (bf16) bf16 streams. Units of one fp32 pair representation
// above parameters and features. fp32: the trunk holds the pair stream and the triangle
// multiplication's t (2 units) plus O(N) terms; after the trunk the heads hold the pair and the
// distogram logits (2 units). bf16: the trunk holds the bf16 stream and its triangle
// multiplication's bf16 edge (~1 unit; the peaks above inputs at long N: 1.047 at N = 6,573 on the
// CPU, 1.062 at N = 15,616 on an H200, 1.089 at N = 768 with the extra-MSA stack, all falling with
// N: 1.1 covers them); after the trunk the heads (bf16 pair + logits) are the larger part when
// the logits stay on the device (pair_logits_on_device), else the trunk. Constants fitted to the
// allocator peaks of tests/apps/test_memory_estimate (N = 48..128) with the asymptotic units from
// bench_predict --memory, rounded up.
constexpr double kTrunkPairUnitsFp32 = 2.2;
constexpr double kAfterTrunkPairUnitsFp32 = 2.0;
constexpr double kTrunkPairUnitsBf16 = 1.1;
constexpr double kAfterTrunkPairUnitsBf16 = 1.3;
// Chunk temporaries in bytes per chunk row per residue (c·N·k): chunked runs (the chunk's
// attention logits, the pair transition's hidden layer, the fp32 sums of add_into) and unchunked
// runs (c = N; whole updates and module temporaries, fitted separately: one linear model does not
// fit both). Refitted 2026-12-01, when the outer product mean's outer products lost their
// permuted copy (the chunk term had been sized by them: 7,100 / 8,900 fp32, 4,100 / 5,200 bf16):
// fp32 chunked 3,300 (N = 64 at chunk 16 needs 3,190; at N = 128, chunk 32, the MSA stage's outer
// products are the peak, and the 1.2 bound of tests/apps/test_memory_estimate allows 3,320 above it),
// unchunked 4,250 (4,115-4,151 at N = 80 and 96); bf16 chunked 1,800 (the trunk at N = 128,
// chunk 16, needs 700; at chunk 32 the structure module is the peak, under 2,000), unchunked
// 2,900 (2,790-2,795 at N = 80 and 96).
constexpr double kChunkBytesPerRowResidueFp32 = 3300;
constexpr double kUnchunkedBytesPerRowResidueFp32 = 4250;
constexpr double kChunkBytesPerRowResidueBf16 = 1800;
constexpr double kUnchunkedBytesPerRowResidueBf16 = 2900;
// The structure module's stage where invariant point attention takes all query rows at once
// (ipa_inference_row_block: N ≤ 256 at c_z = 128): the pair in the stream's dtype, its
// LayerNorm, IPA's whole [N, N, ·] temporaries, and the O(N) single-representation tensors, in
// pair units plus bytes per residue, beside m. Fitted as a + b/N pair units to the peaks with
// summary arrays at chunk 4 (the trunk below them), less m: fp32 8.43 / 25.59 / 52.91 / 90.29 MiB
// at N = 64 / 128 / 192 / 256 (a = 2.36, b/N = 40,350 bytes per residue through N = 64 and 256),
// bf16 5.58 / 10.14 / 15.88 / 22.82 / 31.01 / 41.16 / 52.72 MiB at N = 64 / 96 / 128 / 160 / 192 /
// 224 / 256 (a = 1.27, 39,800 bytes per residue); a rounded up, one byte count for both. Longer N
// takes blocks of rows, whose temporaries the after-trunk units above include.
constexpr double kStructurePairUnitsFp32 = 2.40;
constexpr double kStructurePairUnitsBf16 = 1.30;
constexpr double kStructureBytesPerResidue = 40960;
// MSA-stream-sized copies beside the pair-bound modules (in the stream's dtype: 2 bytes in bf16):
// the MSA stream m itself (made by row blocks into its own storage, its modules layer-norm it by
// chunks, the heads read its rows without a copy), plus kExtraMsaCopies of the extra stream in the
// extra-MSA stack (fitted with 256 and 512 extra rows at N = 48 and 64, chunk 16).
constexpr double kExtraMsaCopies = 2.3;
// The MSA modules' own peak (a deep MSA's: with S rows, m is S·c_m/(N·c_z) pair units, 8 at
// N = 128 with 512 rows): beside the pair stream and m, the column attention's chunk of c' columns
// over all S rows (its layer-normed rows, q, k, v, gate and output: kMsaColumnCopies · c'·S·c_m in
// the stream's dtype; 3 MiB per column at N = 64 with 512 rows, chunks 8-32, fp32), or the outer
// product mean's projections (2·c_opm channels of every MSA cell, fp32: the mask's product
// promotes them under bf16 autocast), one chunk's outer products, made in the layout the output
// projection reads (c'·N·c_opm² in the stream's dtype; no permuted copy since 2026-12-01), and
// update rows (2 · c'·N·c_z fp32).
constexpr double kMsaColumnCopies = 6.0;
// Recycling: the previous iteration's pair dies after the embeddings (the trunk takes the state
// by value), so it adds no pair units at the peak; what the previous iteration leaves (its
// single representation, positions and per-residue results) adds 1.67 MiB at N = 96 with 2
// recycles (fp32, chunk 16): about 18 KB per residue.
constexpr double kRecycleBytesPerResidue = 20000;
// Runtime outside the tensor allocator (BLAS and OpenMP buffers, malloc slack; CPU RSS minus
// allocator peak measured 250-414 MiB), or the CUDA caching allocator's rounding.
constexpr double kOverheadBytes = 512.0 * 1024 * 1024;
// The template stage's measured pair units over its stated parts (stream + running heads +
// template stream + triangle multiplication t: 2.5 fp32, 1.25 bf16): the N² coefficients of the
// bench_predict --memory fits over N = 256..512 with 4 templates, 2.54 and 1.45 (the rest: the
// heads' log-sum-exp, the triangle attention's pair bias, the pair mask), rounded up.
constexpr double kTemplateStageScaleFp32 = 1.02;
constexpr double kTemplateStageScaleBf16 = 1.16;
// The same for two passes over the templates (TemplatePasses::two: stream + template stream +
// triangle multiplication t + the fp32 scores [N², H, T']: 2.125 fp32, 1.125 bf16 with 4
// templates): the fits' 2.355 and 1.425 over N = 256..512, rounded up.
constexpr double kTemplateTwoPassScaleFp32 = 1.11;
constexpr double kTemplateTwoPassScaleBf16 = 1.27;
// Relative margin on the activations (the test's stated bound).
constexpr double kActivationMargin = 1.05;
// DAP (predict --dap P; models/alphafold/parallel/evoformer_parallel.cpp, pair_rows.h): a rank
// keeps its rows of the pair (1/P of it, "the shard") and of the MSA from the embedding to the
// heads (the pair to the next iteration). Its peak is the largest of, in fp32 pair units
// plus chunk temporaries of c' = min(chunk, ⌈N/P⌉) rows (c' = ⌈N/P⌉ unchunked) plus MSA streams:
//   triangle multiplication  (a + b / P)·pair + k_tm·c'·N, with the MSA streams (the main one's
//     rows, waiting while the extra-MSA stack runs; the extra one's rows: each rank embeds its
//     own rows, 1/P of each stream)
//     chunked (the ring: each rank's chunk of the edge broadcast in turn by pieces of `chunk`
//     rows): the per-rank pieces only (the stream's rows, their LayerNorm, the two local edges,
//     the update: 5/P; the pieces in flight are chunk temporaries), the same in bf16 (the fp32
//     stream's pieces dominate); unchunked: the edge gathered whole (1 unit) too
//   outer product mean       (kDapOpmUnits + kDapOpmUnitsPerRank / P)·pair + 4·c_opm²·cells
//     the stream's rows and the update, and one block's outer products (one fp32 copy, made in
//     the output projection's layout: 4·c_opm² bytes per cell): unchunked [c', N, c, c] (cells
//     c'·N); chunked (the ring) [r, c', c, c] for a piece of c' columns, r = min(⌈N/P⌉, chunk·⌈N/c'⌉) rows
//     (cells r·c', at most the rank's rows by one piece), with the MSA streams (the extra-MSA
//     stack's: its rows, 1/P, and its projections made on them and switched to the columns,
//     kDapOpmProjectionCopies of c_opm/c_e of them, beside the waiting main MSA's rows; the
//     Evoformer's the same of the main)
//   MSA column attention     the shard, the main MSA's rows (1/P) and one piece of c' of the rank's
//     columns over all S rows: gathered, layer-normed and switched there, the attention's
//     temporaries, its update and the switch back (kDapMsaColumnCopies·c'·S·c_m·4)
//   the templates (where one is computed; parallel/template_parallel.cpp): each template's stack
//     runs split by rows like the Evoformer's pair track, one template at a time: the shard, the
//     template's rows (c_t/c_z of a shard) inside the triangle multiplication's per-rank terms at
//     the template's widths (the units above × c_t/c_z, its chunk temporaries × its channels),
//     and the pointwise attention's running heads (one pass) or scores (two passes) on the rank's
//     rows; masked template slots cost nothing
//   the structure module and the heads: the shard, kDapAfterTrunkUnits (the heads' row blocks:
//     the rank's distogram logits and the block in flight, in the heads' dtype) plus kDapAfterTrunkBytesPerResidue·N
//     (the structure module's and the heads' per-residue tensors, a term that falls as 1/N in
//     pair units: 0.97 units at N = 96 to 0.44 at 384 above the shard and logits, DAP-4), and the
//     kept pair logits where they are on the allocator
// Fitted to the allocator peaks of one rank at model_1 widths (1 + 1 blocks, 16 + 16 MSA rows) at
// N = 96..384, P = 2 and 4, chunks 16 and 64 and unchunked (docs/distributed.md, "DAP prediction
// memory"): the units are the large-N limits of the fits (the O(N) terms above over-count a
// little at small N); tests/dist/test_dap_memory_estimate_mpi checks them.
constexpr double kDapRingTriMulUnits = 0.05;
constexpr double kDapRingTriMulUnitsPerRank = 4.9;
// Unchunked, refitted 2026-12-01 when the outer product mean's permuted copy went and the
// triangle multiplication became the unchunked peak (1.8 + 5.2/P before, never the largest term):
// one rank's peak less the chunk and MSA terms, 3.02 units at P = 2 and 2.03-2.04 at P = 4
// (N = 96 and 192), is 1.05 + 3.93/P, rounded up.
constexpr double kDapTriMulUnits = 1.1;
constexpr double kDapTriMulUnitsPerRank = 4.0;
constexpr double kDapTriMulBytesPerRowResidue = 2560;  // t, its LayerNorm, projection, gate: 5·c_tm·4
constexpr double kDapOpmUnits = 0.05;
constexpr double kDapOpmUnitsPerRank = 3.4;
// --precision bf16 under DAP: the streams stay fp32, and the modules' projections come out in
// bf16 under autocast: the triangle multiplication's chunk temporaries and the outer products at
// half the bytes.
constexpr double kDapBf16ChunkScale = 0.5;
constexpr double kDapAfterTrunkUnits = 0.3;
constexpr double kDapAfterTrunkBytesPerResidue = 40960;
constexpr double kDapOpmProjectionCopies = 2.2;
constexpr double kDapMsaColumnCopies = 6.5;

double clamp_bytes(double b) { return std::min(b, 9e18); }

}  // namespace

MemoryEstimate estimate_predict_memory(const af2::Af2Config& c, int64_t num_res, int64_t msa_rows,
                                       int64_t num_iterations, int64_t num_params, int64_t num_templates,
                                       bool logits_on_device, int64_t dap) {
  FC_CHECK(dap >= 1, "memory estimate: --dap ", dap);
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
  // DAP keeps fp32 streams (EmbeddingsAndEvoformer::stream_dtype): the fp32 model.
  const bool bf16 = c.precision == "bf16" && dap == 1, chunked = c.chunk_size > 0 && c.chunk_size < num_res;
  const double k_chunk = bf16 ? (chunked ? kChunkBytesPerRowResidueBf16 : kUnchunkedBytesPerRowResidueBf16)
                              : (chunked ? kChunkBytesPerRowResidueFp32 : kUnchunkedBytesPerRowResidueFp32);
  const double chunk_bytes = k_chunk * chunk * n;
  const double stream_bytes = bf16 ? 2 : 4;
  const double m_stream = n * stream_bytes * msa_rows_m * static_cast<double>(c.c_m);
  const double extra_stream = n * stream_bytes * extra * static_cast<double>(c.c_e);
  const double msa_bytes = m_stream + kExtraMsaCopies * extra_stream;
  // The MSA stage (the constants' comment): one process's, c' = the chunk (N unchunked).
  const double c_opm = static_cast<double>(c.evoformer.opm_channels), c_m = static_cast<double>(c.c_m);
  const auto msa_stage_temps = [&](double cols, double rows_m) {
    const double column = kMsaColumnCopies * cols * rows_m * c_m * stream_bytes;
    const double opm = stream_bytes * c_opm * c_opm * cols * n + 2 * 4 * cols * n * static_cast<double>(c.c_z);
    return std::pair{column, opm};
  };
  const auto [column_temps, opm_temps] = msa_stage_temps(chunk, msa_rows_m);
  double msa_stage_units = stream_bytes / 4;
  double msa_stage_msa = m_stream + std::max(column_temps, 2 * 4 * c_opm * msa_rows_m * n + opm_temps);
  const double after_units = bf16 ? kAfterTrunkPairUnitsBf16 : kAfterTrunkPairUnitsFp32;
  const double recycle = iters > 1 ? kRecycleBytesPerResidue * n : 0.0;
  const double trunk_units = bf16 ? kTrunkPairUnitsBf16 : kTrunkPairUnitsFp32;
  // The template stage, when a template is computed (one at a time: TemplateEmbedder::add_into):
  // the pair stream, one template's pair stream and its triangle multiplication's t, in the
  // stream's dtype, and either the pointwise attention's running heads (one pass, stream dtype) or
  // the fp32 scores of every template (two passes); its chunk temporaries scale with c_t.
  const int64_t used = std::min<int64_t>(num_templates < 0 ? c.templates.max_templates : num_templates,
                                         c.templates.max_templates);
  const bool template_stage = c.templates.enabled && used > 0;
  const bool two_pass = template_stage && used >= 2 && !c.templates.pointwise_att.gating &&
                        af2::template_two_passes_requested(c);
  const double c_z = static_cast<double>(c.c_z), heads = static_cast<double>(c.templates.pointwise_att.num_head);
  const double template_stream_units =
      stream_bytes / 4 * (1.0 + static_cast<double>(c.templates.c_t + c.templates.tri_mul_channels) / c_z);
  // One pass with one template: the running heads appear only once its stack is done (they
  // replace the triangle multiplication's t at the peak instead of adding to it).
  const double heads_units =
      stream_bytes / 4 * heads * static_cast<double>(c.templates.pointwise_att.head_dim) / c_z;
  const double one_pass_units =
      used >= 2 ? template_stream_units + heads_units
                : template_stream_units +
                      std::max(0.0, heads_units - stream_bytes / 4 * static_cast<double>(c.templates.tri_mul_channels) / c_z);
  const double template_units =
      !template_stage ? 0.0
      : two_pass      ? (bf16 ? kTemplateTwoPassScaleBf16 : kTemplateTwoPassScaleFp32) *
                       (template_stream_units + heads * static_cast<double>(used) / c_z)
                      : (bf16 ? kTemplateStageScaleBf16 : kTemplateStageScaleFp32) * one_pass_units;
  const double template_chunk_bytes =
      chunk_bytes * static_cast<double>(c.templates.c_t) / static_cast<double>(c.c_z);
  const double templates_peak = template_stage ? template_units * pair + template_chunk_bytes + m_stream : 0.0;
  // The trunk's peak: its pair units, chunk temporaries and MSA streams (one process's, or one
  // DAP rank's below).
  double trunk_pair_units = trunk_units, trunk_chunk = chunk_bytes, trunk_msa = msa_bytes;
  // One DAP rank's (the constants' comment; read only when dap > 1): P, its chunk rows c', the
  // triangle multiplication's pair units and the chunk temporaries' scale.
  const double p = static_cast<double>(dap), dap_rows = std::ceil(n / p);
  const double c_rows = std::min(c.chunk_size > 0 ? static_cast<double>(c.chunk_size) : dap_rows, dap_rows);
  const double tri_units = c.chunk_size > 0 ? kDapRingTriMulUnits + kDapRingTriMulUnitsPerRank / p
                                            : kDapTriMulUnits + kDapTriMulUnitsPerRank / p;
  const double chunk_scale = c.precision == "bf16" ? kDapBf16ChunkScale : 1.0;
  if (dap > 1) {  // one rank's stacks
    const double opm_units = kDapOpmUnits + kDapOpmUnitsPerRank / p;
    const double tri_chunk = chunk_scale * kDapTriMulBytesPerRowResidue * c_rows * n;
    // Chunked (the ring), the outer products are [r, c, c', c] for a piece of c' columns and row
    // blocks of r = min(⌈N/P⌉, chunk·⌈N / c'⌉) rows; unchunked [c', c, N, c].
    const double opm_cells = c.chunk_size > 0
                                 ? std::min(dap_rows, static_cast<double>(c.chunk_size) * std::ceil(n / c_rows)) * c_rows
                                 : c_rows * n;
    const double opm_chunk = chunk_scale * 4 * c_opm * c_opm * opm_cells;
    // The MSA beside each (a rank holds its rows of the main MSA, 1/P, from the embedding to the
    // heads): the triangle multiplications' see the main MSA's rows (waiting) and the extra one's;
    // the outer product means' see the stream's rows and its projections (c_opm of its channels,
    // on the rows and switched to the columns: kDapOpmProjectionCopies of them), in the extra-MSA
    // stack beside the waiting main MSA's rows.
    const double tri_msa = (m_stream + extra_stream) / p;
    const double opm_msa = std::max(
        m_stream / p + extra_stream * (1 + kDapOpmProjectionCopies * c_opm / static_cast<double>(c.c_e)) / p,
        m_stream * (1 + kDapOpmProjectionCopies * c_opm / c_m) / p);
    const bool tri_largest =
        tri_units * pair + tri_chunk + tri_msa >= opm_units * pair + opm_chunk + opm_msa;
    trunk_pair_units = tri_largest ? tri_units : opm_units;
    trunk_chunk = tri_largest ? tri_chunk : opm_chunk;
    trunk_msa = tri_largest ? tri_msa : opm_msa;
    // The column attention by pieces of c' of the rank's columns over all S rows, beside its rows
    // of m and of the pair.
    msa_stage_units = std::ceil(n / p) * p * std::ceil(n / p) / (n * n);
    msa_stage_msa = m_stream / p + kDapMsaColumnCopies / kMsaColumnCopies * msa_stage_temps(c_rows, msa_rows_m).first;
  }
  const double trunk_pair_bound = trunk_pair_units * pair + recycle + trunk_chunk + trunk_msa;
  const double msa_stage = msa_stage_units * pair + recycle + msa_stage_msa;
  if (msa_stage > trunk_pair_bound) {
    trunk_pair_units = msa_stage_units;
    trunk_chunk = 0.0;
    trunk_msa = msa_stage_msa;
  }
  const double trunk = std::max(trunk_pair_bound, msa_stage);
  // The pair heads' results: two [N, N, bins] arrays in the stream's dtype (distogram and PAE
  // logits), on the allocator only where the device is the host and they are kept. Without them
  // the after-trunk units lose theirs; the heads' block of rows stays in the units, as fitted at
  // N ≤ 512 where one block is all N rows (longer N: at most kPairHeadBlockValues values, less).
  const double logits_pair_units = 2.0 * static_cast<double>(c.heads.distogram_bins) * stream_bytes / (c_z * 4);
  const double logits_units = logits_on_device ? 0.0 : logits_pair_units;
  double after_msa = m_stream;  // the heads read m's rows (no copy); the extra MSA died in its stack
  double after = ((after_units - logits_units) * pair + recycle) + after_msa;
  double after_pair_units = after_units - logits_units;
  if (dap == 1 && num_res > 0 && ipa_inference_row_block(num_res, c.structure) >= num_res) {
    // The structure module with whole IPA rows (the constants' comment).
    const double units = (bf16 ? kStructurePairUnitsBf16 : kStructurePairUnitsFp32) + kStructureBytesPerResidue * n / pair;
    const double structure = units * pair + recycle + after_msa;
    if (structure > after) {
      after = structure;
      after_pair_units = units;
    }
  }
  double stage_templates = templates_peak, stage_template_units = template_units;
  double template_chunk = template_stage ? template_chunk_bytes : 0.0;
  if (dap > 1) {  // the shard outside the stacks (the DAP constants' comment)
    const double shard = n > 0 ? dap_rows * p * dap_rows / (n * n) : 0.0;
    // The kept logits are the heads' output dtype: bf16 under --precision bf16 (fp32 streams or not).
    const double logits_scale = c.precision == "bf16" ? 2.0 / stream_bytes : 1.0;
    after_pair_units = shard + logits_scale * kDapAfterTrunkUnits + (n > 0 ? kDapAfterTrunkBytesPerResidue * n / pair : 0.0) +
                       (logits_on_device ? logits_scale * logits_pair_units : 0.0);
    after_msa = m_stream / p;  // the rank's rows
    after = after_pair_units * pair + after_msa;
    if (template_stage) {
      const double width = static_cast<double>(c.templates.c_t) / c_z;
      // Per cell of the rank's rows: the running heads (H·d channels in the stream's dtype, fp32
      // here) or the fp32 scores of the computed templates (H per template).
      const double attention_units = two_pass ? heads * static_cast<double>(used) / c_z : heads_units;
      stage_template_units = shard * (1.0 + attention_units) + width * tri_units;
      const double tri_channels = static_cast<double>(c.templates.tri_mul_channels) /
                                  static_cast<double>(c.evoformer.tri_mul_channels);
      template_chunk = chunk_scale * tri_channels * kDapTriMulBytesPerRowResidue * c_rows * n;
      stage_templates = stage_template_units * pair + template_chunk + m_stream / p;
    } else {
      stage_template_units = 0.0;
      stage_templates = 0.0;
    }
  }
  const double activations = kActivationMargin * std::max({trunk, after, stage_templates});
  // Processed features per iteration: msa_feat (49 channels) and the cluster masks/targets per
  // cluster row, extra_msa, its deletions and mask per extra row, template positions and masks
  // (37 atoms) per template, all 4 bytes.
  const double features = iters * n * 4 * (clusters * (49 + 4) + extra * 4 + templates * (37 * 4 + 40) + 64);

  MemoryEstimate e;
  e.chunk = c.chunk_size;
  e.activation_bytes = static_cast<int64_t>(clamp_bytes(activations));
  // The breakdown of the largest of the three peaks.
  const double peak = std::max({trunk, after, stage_templates});
  const double peak_units =
      peak == stage_templates ? stage_template_units : peak == trunk ? trunk_pair_units : after_pair_units;
  const double peak_chunk = peak == stage_templates ? template_chunk : peak == trunk ? trunk_chunk : 0.0;
  e.pair_bytes = static_cast<int64_t>(clamp_bytes(
      kActivationMargin * (peak_units * pair + (peak == stage_templates ? 0.0 : recycle))));
  e.chunk_bytes = static_cast<int64_t>(clamp_bytes(kActivationMargin * peak_chunk));
  e.msa_bytes = static_cast<int64_t>(clamp_bytes(kActivationMargin * (peak == stage_templates ? m_stream
                                                                     : peak == trunk ? trunk_msa
                                                                                     : after_msa)));
  e.feature_bytes = static_cast<int64_t>(clamp_bytes(features));
  e.param_bytes = num_params * 4;
  e.overhead_bytes = static_cast<int64_t>(kOverheadBytes);
  e.total_bytes = static_cast<int64_t>(
      clamp_bytes(activations + features + static_cast<double>(e.param_bytes) + kOverheadBytes));
  return e;
}

int64_t needed_after_params(const MemoryEstimate& e) { return e.total_bytes - e.param_bytes; }

std::vector<int64_t> auto_chunk_candidates(int64_t num_res) {
  std::vector<int64_t> out{0};
  int64_t c = 1;
  while (c * 2 < num_res) c *= 2;
  for (; c >= 1; c /= 2)
    if (c < num_res) out.push_back(c);
  return out;
}

int64_t kept_result_bytes(int64_t num_res, int64_t bins, const std::string& result_arrays, int64_t models) {
  const int64_t per_pair = result_arrays == "summary" ? 2 : 2 * bins + 2;
  return models * num_res * num_res * per_pair * 4;
}

void check_host_results_fit(const std::string& input, int64_t num_res, int64_t needed_bytes, int64_t available_bytes,
                            const std::string& result_arrays) {
  if (needed_bytes <= available_bytes) return;
  std::ostringstream msg;
  msg << input << ": the result arrays of " << num_res << " residues (--result_arrays " << result_arrays
      << ") need an estimated " << needed_bytes << " bytes (" << format_bytes(needed_bytes)
      << ") of host memory, but only " << available_bytes << " bytes (" << format_bytes(available_bytes)
      << ") are available there.";
  if (result_arrays != "summary")
    msg << " Try --result_arrays summary (pLDDT, PAE and pTM without the [N, N, 64] logits and probabilities).";
  FC_THROW(msg.str());
}

bool pair_logits_on_device(Device device, const std::string& result_arrays) {
  return !device.is_cuda() && result_arrays != "summary";
}

int64_t choose_chunk_size(const af2::Af2Config& config, int64_t num_res, int64_t msa_rows, int64_t num_iterations,
                          int64_t num_params, int64_t available_bytes, int64_t templates, bool logits_on_device,
                          int64_t dap) {
  af2::Af2Config c = config;
  for (const int64_t chunk : auto_chunk_candidates(num_res)) {
    c.chunk_size = chunk;
    if (needed_after_params(estimate_predict_memory(c, num_res, msa_rows, num_iterations, num_params, templates,
                                                    logits_on_device, dap)) <= available_bytes)
      return chunk;
  }
  return -1;
}

int64_t choose_template_passes(const af2::Af2Config& config, int64_t num_res, int64_t msa_rows, int64_t num_iterations,
                               int64_t num_params, int64_t available_bytes, int64_t templates, bool logits_on_device,
                               int64_t dap) {
  if (config.template_passes != 0) return config.template_passes;
  af2::Af2Config one = config;
  one.template_passes = 1;
  const MemoryEstimate e1 =
      estimate_predict_memory(one, num_res, msa_rows, num_iterations, num_params, templates, logits_on_device, dap);
  const MemoryEstimate e0 =
      estimate_predict_memory(config, num_res, msa_rows, num_iterations, num_params, templates, logits_on_device, dap);
  // The same estimate: two passes would not run (or save nothing the estimate sees).
  if (e1.activation_bytes <= e0.activation_bytes) return 1;
  return needed_after_params(e1) <= available_bytes ? 1 : 2;
}

void check_predict_fits(const std::string& input, const af2::Af2Config& config, int64_t num_res, int64_t msa_rows,
                        int64_t num_iterations, int64_t num_params, int64_t available_bytes, const std::string& device,
                        int64_t templates, bool logits_on_device, int64_t dap) {
  const MemoryEstimate e =
      estimate_predict_memory(config, num_res, msa_rows, num_iterations, num_params, templates, logits_on_device, dap);
  const int64_t needed = needed_after_params(e);
  if (needed <= available_bytes) return;
  std::ostringstream msg;
  msg << input << ": " << num_res << " residues with " << msa_rows << " MSA rows need an estimated "
      << (dap > 1 ? "(per rank of --dap " + std::to_string(dap) + ") " : "") << needed
      << " bytes (" << format_bytes(needed) << ": activations " << format_bytes(e.activation_bytes) << " at --chunk_size "
      << config.chunk_size << " --precision " << config.precision << ", features " << format_bytes(e.feature_bytes)
      << ", runtime " << format_bytes(e.overhead_bytes) << ") on " << device << ", but only " << available_bytes
      << " bytes (" << format_bytes(available_bytes) << ") are available there.";
  // What to try: the chunk that fits at this precision, and bf16.
  std::vector<std::string> tries;
  const int64_t chunk =
      choose_chunk_size(config, num_res, msa_rows, num_iterations, num_params, available_bytes, templates, logits_on_device, dap);
  if (chunk > 0 && chunk != config.chunk_size)
    tries.push_back("--chunk_size " + std::to_string(chunk) + " (or auto)");
  if (config.precision != "bf16") {
    af2::Af2Config b = config;
    b.precision = "bf16";
    const int64_t bchunk =
        choose_chunk_size(b, num_res, msa_rows, num_iterations, num_params, available_bytes, templates, logits_on_device, dap);
    if (bchunk >= 0 && chunk < 0)
      tries.push_back("--precision bf16 --chunk_size " + std::to_string(bchunk));
  }
  if (dap > 1 && chunk < 0) {  // more ranks: the smallest doubling of --dap that fits
    for (int64_t more = dap * 2; more <= 64; more *= 2)
      if (choose_chunk_size(config, num_res, msa_rows, num_iterations, num_params, available_bytes, templates,
                            logits_on_device, more) >= 0) {
        tries.push_back("--dap " + std::to_string(more) + " (mpirun -np " + std::to_string(more) + ")");
        break;
      }
  }
  if (tries.empty()) {
    af2::Af2Config smallest = config;
    smallest.chunk_size = 1;
    msg << " Even --chunk_size 1 needs "
        << format_bytes(needed_after_params(
               estimate_predict_memory(smallest, num_res, msa_rows, num_iterations, num_params, templates, logits_on_device, dap)))
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
                           Device device, bool logits_on_device) {
  const int64_t limit = device_memory_limit(device);
  auto fits = [&](int64_t n) {
    return estimate_predict_memory(config, n, msa_rows, num_iterations, num_params, -1, logits_on_device).total_bytes <=
           limit;
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
