// AlphaFold2 output heads (suppl. 1.9): distogram (1.9.8), masked MSA (1.9.9), pLDDT (1.9.6,
// Alg. 29), experimentally resolved (1.9.10), predicted aligned error (1.9.7). Each head is a
// standalone module taking the representation it reads; Af2Heads bundles them under AF2's names.
// Confidence numbers from the logits (pLDDT, PAE, pTM) are in confidence.h.
#pragma once

#include <memory>

#include "models/alphafold/heads/confidence.h"
#include "models/alphafold/model/config.h"
#include "models/alphafold/params/param_table.h"
#include "nn/layers.h"

namespace foldcore::af2 {

class ParallelGroup;

using nn::Variable;

// "distogram_head": half = pair·W + b; logits[i,j] = half[i,j] + half[j,i] (symmetric).
// pair [N, N, c_z] → logits [N, N, bins]; bins' lower breaks linspace(first, last, bins − 1).
class DistogramHead : public nn::Module {
 public:
  DistogramHead(nn::Scope scope, int64_t c_z, const HeadsConfig& config);
  Variable forward(const Variable& pair) const;
  // Inference: rows i0 .. i0 + rows − 1 of forward(pair) ([rows, N, bins]), from the pair's rows
  // and columns i0.. (half[i, :] + half[:, i]ᵀ): the same sums, without an [N, N, bins] tensor.
  Tensor forward_rows(const Tensor& pair, int64_t i0, int64_t rows) const;
  // Inference under DAP (pair_rows.h): the logits of this rank's rows [rows, padded N, bins] from
  // its pair rows [rows, padded N, c_z]; the transposed half comes from the other ranks (one
  // all-to-all of the half logits). Padding columns hold the logits of the zero padding.
  Tensor forward_split(const Tensor& rows, const ParallelGroup& g) const;
  int64_t bins() const { return half_logits_.out_features(); }
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  nn::Linear half_logits_;
};

// "masked_msa_head": msa [S, N, c_m] → logits [S, N, 23].
class MaskedMsaHead : public nn::Module {
 public:
  MaskedMsaHead(nn::Scope scope, int64_t c_m, const HeadsConfig& config);
  Variable forward(const Variable& msa) const;
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  nn::Linear logits_;
};

// "predicted_lddt_head" (Alg. 29 lines 1-4): the structure module's final single state
// s [N, c_s] → LN → relu(Linear c) → relu(Linear c) → Linear bins: logits [N, 50].
class PredictedLddtHead : public nn::Module {
 public:
  PredictedLddtHead(nn::Scope scope, int64_t c_s, const HeadsConfig& config);
  Variable forward(const Variable& sm_single) const;
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  nn::LayerNorm input_layer_norm_;
  nn::Linear act_0_, act_1_, logits_;
};

// "experimentally_resolved_head": the Evoformer single s [N, c_s] → atom37 logits [N, 37].
class ExperimentallyResolvedHead : public nn::Module {
 public:
  ExperimentallyResolvedHead(nn::Scope scope, int64_t c_s);
  Variable forward(const Variable& single) const;
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  nn::Linear logits_;
};

// "predicted_aligned_error_head": pair [N, N, c_z] → logits [N, N, 64]; breaks
// linspace(0, max_error_bin, bins − 1).
class PredictedAlignedErrorHead : public nn::Module {
 public:
  PredictedAlignedErrorHead(nn::Scope scope, int64_t c_z, const HeadsConfig& config);
  Variable forward(const Variable& pair) const;
  int64_t bins() const { return logits_.out_features(); }
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  nn::Linear logits_;
};

// What the heads read (AF2's `representations`).
struct HeadInputs {
  Variable msa;        // [S, N, c_m] Evoformer MSA, without the template rows (undefined: no masked-MSA logits)
  Variable pair;       // [N, N, c_z] Evoformer pair
  Variable single;     // [N, c_s] Evoformer single (single_activations)
  Variable sm_single;  // [N, c_s] structure module final state
};

struct HeadOutputs {
  Variable distogram_logits;                // [N, N, 64]
  Variable masked_msa_logits;               // [S, N, 23]
  Variable lddt_logits;                     // [N, 50]
  Variable experimentally_resolved_logits;  // [N, 37]
  Variable tm_logits;                       // [N, N, 64] (undefined without the PAE head)
};

// The pair-sized heads of an inference (Af2Heads::pair_heads_by_rows).
struct PairHeadOutputs {
  Tensor distogram_logits;  // [N, N, bins] on the host (keep_logits), else undefined
  Tensor tm_logits;         // [N, N, pae_bins] on the host (keep_logits, a PAE head), else undefined
  // No keep_logits, a PAE head: PAE and pTM streamed from the blocks (without the probabilities).
  std::shared_ptr<PaeStream> pae;
};

// All heads of a model under their official names (prefix "" → "distogram_head/...").
class Af2Heads : public nn::Module {
 public:
  Af2Heads(nn::Scope scope, const Af2Config& config);
  // pair_heads = false leaves distogram_logits and tm_logits undefined (pair_heads_by_rows).
  HeadOutputs forward(const HeadInputs& in, bool pair_heads = true) const;
  // Inference (no autograd): the distogram and PAE heads over blocks of query rows, so that the
  // pair's device holds one block of [rows, N, bins] logits and its temporaries (about 5 of them),
  // whatever N, instead of two [N, N, 64] logits: blocks of at most block_values = rows·N·bins
  // values (at least one row; N ≤ 512 is one block with the default). keep_logits copies each
  // block into host [N, N, bins] arrays (AlphaFold's result arrays; PAE and pTM are then the
  // caller's, after the pair is gone); otherwise the distogram is skipped (nothing in inference
  // reads it) and the PAE blocks are streamed into `pae` (one softmax per pair, no probabilities).
  static constexpr int64_t kPairHeadBlockValues = int64_t{1} << 24;
  PairHeadOutputs pair_heads_by_rows(const Tensor& pair, bool keep_logits,
                                     int64_t block_values = kPairHeadBlockValues) const;
  // The same under DAP with the pair split (pair_rows.h): `rows` is this rank's rows of the padded
  // pair; each rank computes the logits of its own rows (the distogram's transposed half through
  // one all-to-all of its [rows, N, bins] half logits), and every rank receives every block, so
  // every rank returns what one process does.
  PairHeadOutputs pair_heads_split(const Tensor& rows, int64_t n, const ParallelGroup& g, bool keep_logits,
                                   int64_t block_values = kPairHeadBlockValues) const;
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix = "", int64_t stack_index = -1) const;

  const DistogramHead& distogram() const { return distogram_; }
  const MaskedMsaHead& masked_msa() const { return masked_msa_; }
  const PredictedLddtHead& predicted_lddt() const { return predicted_lddt_; }
  const ExperimentallyResolvedHead& experimentally_resolved() const { return experimentally_resolved_; }
  const PredictedAlignedErrorHead* predicted_aligned_error() const { return pae_.get(); }

 private:
  DistogramHead distogram_;
  MaskedMsaHead masked_msa_;
  PredictedLddtHead predicted_lddt_;
  ExperimentallyResolvedHead experimentally_resolved_;
  std::unique_ptr<PredictedAlignedErrorHead> pae_;  // config.heads.ptm
  double pae_max_error_bin_;
};

}  // namespace foldcore::af2
