// The MSA transforms of AlphaFold2's monomer input pipeline (alphafold/model/tf/data_transforms.py;
// OpenFold's data/data_transforms.py has the same logic), one function each, on host arrays.
// feature_processing.h composes them per recycling iteration; they are exposed for testing.
//
// Tokens are in AlphaFold restype order: 0..19 amino acids, 20 X, 21 gap, 22 the BERT mask token.
//
// Randomness: a PhiloxStream is one counter-based Philox4x32-10 stream (core/philox.h) addressed by
// (seed, offset); element k of the stream is philox_bits(seed, offset, k). Each transform of each
// recycling iteration draws from its own offset, so the output is a pure function of the seed
// (platform-independent: no std:: distributions are used).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace foldcore::data::msa_tf {

inline constexpr int kGapToken = 21;
inline constexpr int kMaskToken = 22;
inline constexpr int kMsaOneHot = 23;   // one-hot width of MSA tokens incl. the mask token
inline constexpr int kMsaFeatDim = 49;  // 23 + has_deletion + deletion_value + 23 profile + deletion mean

class PhiloxStream {
 public:
  PhiloxStream(uint64_t seed, uint64_t offset) : seed_(seed), offset_(offset) {}
  uint32_t bits();
  // Uniform in [0, 1) with 32 bits of resolution.
  double uniform();
  // Uniform integer in [0, n) by Lemire's multiply-shift (bias below n / 2^32, negligible here).
  uint64_t below(uint64_t n);

 private:
  uint64_t seed_, offset_, index_ = 0;
};

// Rows of an MSA over N residues, row-major [rows, N].
struct MsaRows {
  int64_t num_res = 0;
  std::vector<int32_t> msa;       // tokens
  std::vector<float> deletion;    // deletion_matrix (deletions before the column)
  std::vector<float> mask;        // msa_mask
  int64_t rows() const { return num_res == 0 ? 0 : static_cast<int64_t>(msa.size()) / num_res; }
  // The rows `order[k]`, k in [begin, end).
  MsaRows gather(const std::vector<int64_t>& order, size_t begin, size_t end) const;
};

// AlphaFold's make_hhblits_profile: per residue, the mean over all rows of one_hot(msa, 22).
// Returns [N,22].
std::vector<float> hhblits_profile(const MsaRows& msa);

// sample_msa(max_seq, keep_extra=True): row 0 (the query) first, then rows 1.. in a uniformly random
// order (Fisher-Yates); the first min(max_seq, rows) become the cluster centres, the rest the extra
// MSA (in that shuffled order).
struct SampledMsa {
  MsaRows sampled;
  MsaRows extra;
};
SampledMsa sample_msa(const MsaRows& msa, int64_t max_seq, PhiloxStream& rng);

// make_masked_msa: each position is selected with probability replace_fraction; a selected token is
// redrawn from  uniform_prob·U(20 amino acids) + profile_prob·profile[n] + same_prob·one_hot(token)
// + (1 - the three)·[mask token]  (a 23-way categorical).
struct MaskedMsaConfig {
  double profile_prob = 0.1;
  double same_prob = 0.1;
  double uniform_prob = 0.1;
  double replace_fraction = 0.15;
};
struct MaskedMsa {
  std::vector<int32_t> msa;        // [S,N] the BERT input (replaces the MSA)
  std::vector<float> bert_mask;    // [S,N] 1 where selected
  std::vector<int32_t> true_msa;   // [S,N] the tokens before masking
};
MaskedMsa make_masked_msa(const MsaRows& sampled, const std::vector<float>& profile, const MaskedMsaConfig& config,
                          PhiloxStream& rng);

// nearest_neighbor_clusters(gap_agreement_weight=0): each extra row goes to the centre maximising
// Σ_n mask_e[n] mask_s[n] w[tok] [extra[e,n] == centre[s,n] = tok], w = 1 for tokens 0..20 and 0 for
// gap and mask token; ties go to the lowest centre index (argmax). `centres` are the (masked)
// sampled rows. Returns [E] centre indices.
std::vector<int32_t> nearest_neighbor_clusters(const MsaRows& centres, const MsaRows& extra);

// summarize_clusters: with c = msa_mask + Σ_{e in cluster} extra_mask + 1e-6 per residue,
//   cluster_profile[s,n,:]       = (one_hot(centre) + Σ_e extra_mask·one_hot(extra)) / c   [S,N,23]
//   cluster_deletion_mean[s,n]   = (deletion(centre) + Σ_e extra_mask·deletion(extra)) / c [S,N]
struct ClusterSummary {
  std::vector<float> profile;
  std::vector<float> deletion_mean;
};
ClusterSummary summarize_clusters(const MsaRows& centres, const MsaRows& extra, const std::vector<int32_t>& assignment);

// crop_extra_msa: a uniformly random subset of min(max_extra, rows) extra rows, in random order.
MsaRows crop_extra_msa(const MsaRows& extra, int64_t max_extra, PhiloxStream& rng);

// block_delete_msa (AlphaFold suppl. 1.2.6, Alg. 1 MSABlockDeletion; training only): num_blocks block
// starts ~ U{0..rows-1}, each deleting floor(fraction_per_block · rows) consecutive rows (clipped at
// the end); row 0, the query, is always kept. The kept rows stay in order.
struct BlockDeletionConfig {
  double fraction_per_block = 0.3;
  int num_blocks = 5;
};
MsaRows block_delete_msa(const MsaRows& msa, const BlockDeletionConfig& config, PhiloxStream& rng);

// 2/π · arctan(d / 3): AlphaFold's squashing of deletion counts into [0, 1).
float deletion_value(float d);

// make_msa_feat's msa_feat [S,N,49]: one_hot(msa, 23), clip(deletion, 0, 1), deletion_value(deletion),
// cluster_profile (23), deletion_value(cluster_deletion_mean). `msa` is the BERT-masked MSA.
std::vector<float> make_msa_feat(const MsaRows& centres, const ClusterSummary& clusters);

}  // namespace foldcore::data::msa_tf
