#include "data_pipeline/features/feature_processing_msa.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"

namespace foldcore::data::msa_tf {

uint32_t PhiloxStream::bits() { return philox_bits(seed_, offset_, index_++); }

double PhiloxStream::uniform() { return static_cast<double>(bits()) * (1.0 / 4294967296.0); }

uint64_t PhiloxStream::below(uint64_t n) {
  FC_CHECK(n > 0 && n <= 0xFFFFFFFFull, "PhiloxStream::below: n = ", n, " outside 1..2^32-1");
  return (static_cast<uint64_t>(bits()) * n) >> 32;
}

MsaRows MsaRows::gather(const std::vector<int64_t>& order, size_t begin, size_t end) const {
  MsaRows out;
  out.num_res = num_res;
  const size_t n = static_cast<size_t>(num_res);
  const size_t count = end - begin;
  out.msa.resize(count * n);
  out.deletion.resize(count * n);
  out.mask.resize(count * n);
  for (size_t k = 0; k < count; ++k) {
    const size_t src = static_cast<size_t>(order[begin + k]) * n;
    std::copy_n(msa.begin() + static_cast<ptrdiff_t>(src), n, out.msa.begin() + static_cast<ptrdiff_t>(k * n));
    std::copy_n(deletion.begin() + static_cast<ptrdiff_t>(src), n, out.deletion.begin() + static_cast<ptrdiff_t>(k * n));
    std::copy_n(mask.begin() + static_cast<ptrdiff_t>(src), n, out.mask.begin() + static_cast<ptrdiff_t>(k * n));
  }
  return out;
}

std::vector<float> hhblits_profile(const MsaRows& msa) {
  const int64_t rows = msa.rows(), n = msa.num_res;
  FC_CHECK(rows > 0, "hhblits_profile: empty MSA");
  std::vector<double> counts(static_cast<size_t>(n) * 22, 0.0);
  for (int64_t s = 0; s < rows; ++s)
    for (int64_t i = 0; i < n; ++i) {
      const int32_t tok = msa.msa[static_cast<size_t>(s * n + i)];
      FC_CHECK(tok >= 0 && tok < 22, "hhblits_profile: token ", tok, " outside 0..21 at row ", s, ", column ", i);
      counts[static_cast<size_t>(i * 22 + tok)] += 1.0;
    }
  std::vector<float> out(counts.size());
  for (size_t k = 0; k < counts.size(); ++k) out[k] = static_cast<float>(counts[k] / static_cast<double>(rows));
  return out;
}

SampledMsa sample_msa(const MsaRows& msa, int64_t max_seq, PhiloxStream& rng) {
  const int64_t rows = msa.rows();
  FC_CHECK(rows > 0 && max_seq > 0, "sample_msa: needs at least one row and max_seq > 0 (rows ", rows,
           ", max_seq ", max_seq, ")");
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  // Fisher-Yates over positions 1..rows-1 (the query stays first).
  for (int64_t k = rows - 1; k >= 2; --k) {
    const int64_t j = 1 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(k)));  // j in [1, k]
    std::swap(order[static_cast<size_t>(k)], order[static_cast<size_t>(j)]);
  }
  const size_t num_sel = static_cast<size_t>(std::min(max_seq, rows));
  return SampledMsa{msa.gather(order, 0, num_sel), msa.gather(order, num_sel, order.size())};
}

MaskedMsa make_masked_msa(const MsaRows& sampled, const std::vector<float>& profile, const MaskedMsaConfig& config,
                          PhiloxStream& rng) {
  const int64_t n = sampled.num_res;
  const size_t total = sampled.msa.size();
  FC_CHECK(profile.size() == static_cast<size_t>(n) * 22, "make_masked_msa: profile has ", profile.size(),
           " values, expected N*22 = ", n * 22);
  const double mask_prob = 1.0 - config.profile_prob - config.same_prob - config.uniform_prob;
  FC_CHECK(mask_prob >= -1e-12 && config.profile_prob >= 0 && config.same_prob >= 0 && config.uniform_prob >= 0,
           "make_masked_msa: probabilities must be >= 0 and sum to <= 1 (profile ", config.profile_prob, ", same ",
           config.same_prob, ", uniform ", config.uniform_prob, ")");
  MaskedMsa out;
  out.true_msa = sampled.msa;
  out.msa = sampled.msa;
  out.bert_mask.assign(total, 0.0f);
  std::array<double, kMsaOneHot> probs{};
  for (size_t k = 0; k < total; ++k) {
    // Two draws per position, always, so that a position's randomness does not depend on others.
    const double select = rng.uniform();
    const double pick = rng.uniform();
    if (select >= config.replace_fraction) continue;
    const int32_t tok = sampled.msa[k];
    const size_t res = k % static_cast<size_t>(n);
    double sum = 0.0;
    for (int c = 0; c < kMsaOneHot; ++c) {
      double p = 0.0;
      if (c < 20) p += config.uniform_prob * 0.05;
      if (c < 22) p += config.profile_prob * profile[res * 22 + static_cast<size_t>(c)];
      if (c == tok) p += config.same_prob;
      if (c == kMaskToken) p += std::max(mask_prob, 0.0);
      probs[static_cast<size_t>(c)] = p;
      sum += p;
    }
    // Inverse CDF of the categorical (normalised by the actual sum, which is 1 up to rounding).
    const double target = pick * sum;
    int32_t chosen = kMaskToken;
    double acc = 0.0;
    for (int c = 0; c < kMsaOneHot; ++c) {
      acc += probs[static_cast<size_t>(c)];
      if (target < acc && probs[static_cast<size_t>(c)] > 0) {
        chosen = c;
        break;
      }
    }
    out.msa[k] = chosen;
    out.bert_mask[k] = 1.0f;
  }
  return out;
}

std::vector<int32_t> nearest_neighbor_clusters(const MsaRows& centres, const MsaRows& extra) {
  const int64_t s_rows = centres.rows(), e_rows = extra.rows(), n = centres.num_res;
  FC_CHECK(s_rows > 0, "nearest_neighbor_clusters: no cluster centres");
  FC_CHECK(e_rows == 0 || extra.num_res == n, "nearest_neighbor_clusters: centres have ", n,
           " residues, extra rows ", extra.num_res);
  // Per centre, the token at each residue where it can agree (weight 1 and mask 1), else -1; same
  // for the extra rows with -2, so that a match needs both.
  auto keyed = [](const MsaRows& m, int8_t none) {
    std::vector<int8_t> out(m.msa.size());
    for (size_t k = 0; k < m.msa.size(); ++k) {
      const int32_t tok = m.msa[k];
      out[k] = (tok >= 0 && tok <= 20 && m.mask[k] != 0.0f) ? static_cast<int8_t>(tok) : none;
    }
    return out;
  };
  const std::vector<int8_t> c = keyed(centres, -1), x = keyed(extra, -2);
  std::vector<int32_t> assignment(static_cast<size_t>(e_rows), 0);
  const size_t nn = static_cast<size_t>(n);
  // E·S·N byte comparisons (~2.5e9 per iteration for 10^4 extra rows, 508 centres, 500 residues):
  // the inner loop vectorises; rows are independent, so threads do not change the result.
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < e_rows; ++e) {
    const int8_t* xe = x.data() + static_cast<size_t>(e) * nn;
    int32_t best_s = 0;
    int32_t best = -1;
    for (int64_t s = 0; s < s_rows; ++s) {
      const int8_t* cs = c.data() + static_cast<size_t>(s) * nn;
      int32_t agree = 0;
      for (size_t i = 0; i < nn; ++i) agree += xe[i] == cs[i] ? 1 : 0;
      if (agree > best) {
        best = agree;
        best_s = static_cast<int32_t>(s);
      }
    }
    assignment[static_cast<size_t>(e)] = best_s;
  }
  return assignment;
}

ClusterSummary summarize_clusters(const MsaRows& centres, const MsaRows& extra, const std::vector<int32_t>& assignment) {
  const int64_t s_rows = centres.rows(), n = centres.num_res;
  FC_CHECK(static_cast<int64_t>(assignment.size()) == extra.rows(), "summarize_clusters: ", assignment.size(),
           " assignments for ", extra.rows(), " extra rows");
  const size_t nn = static_cast<size_t>(n);
  const size_t cells = static_cast<size_t>(s_rows) * nn;
  std::vector<double> count(cells, 0.0), del(cells, 0.0), prof(cells * kMsaOneHot, 0.0);
  auto add_row = [&](size_t dst_row, const MsaRows& src, size_t src_row, bool weighted) {
    for (size_t i = 0; i < nn; ++i) {
      const size_t k = src_row * nn + i;
      const double w = weighted ? src.mask[k] : 1.0;
      const size_t cell = dst_row * nn + i;
      const int32_t tok = src.msa[k];
      FC_CHECK(tok >= 0 && tok < kMsaOneHot, "summarize_clusters: token ", tok, " outside 0..22");
      prof[cell * kMsaOneHot + static_cast<size_t>(tok)] += w;
      del[cell] += w * src.deletion[k];
    }
  };
  // The centre itself: one-hot and deletion unweighted, its msa_mask in the count (AlphaFold).
  for (size_t s = 0; s < static_cast<size_t>(s_rows); ++s) {
    add_row(s, centres, s, false);
    for (size_t i = 0; i < nn; ++i) count[s * nn + i] += centres.mask[s * nn + i];
  }
  for (size_t e = 0; e < assignment.size(); ++e) {
    const int32_t s = assignment[e];
    FC_CHECK(s >= 0 && s < s_rows, "summarize_clusters: assignment ", s, " outside 0..", s_rows - 1);
    add_row(static_cast<size_t>(s), extra, e, true);
    for (size_t i = 0; i < nn; ++i) count[static_cast<size_t>(s) * nn + i] += extra.mask[e * nn + i];
  }
  ClusterSummary out;
  out.profile.resize(cells * kMsaOneHot);
  out.deletion_mean.resize(cells);
  for (size_t cell = 0; cell < cells; ++cell) {
    const double c = count[cell] + 1e-6;
    for (size_t t = 0; t < kMsaOneHot; ++t)
      out.profile[cell * kMsaOneHot + t] = static_cast<float>(prof[cell * kMsaOneHot + t] / c);
    out.deletion_mean[cell] = static_cast<float>(del[cell] / c);
  }
  return out;
}

MsaRows crop_extra_msa(const MsaRows& extra, int64_t max_extra, PhiloxStream& rng) {
  const int64_t rows = extra.rows();
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t k = rows - 1; k >= 1; --k) {
    const int64_t j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(k + 1)));  // j in [0, k]
    std::swap(order[static_cast<size_t>(k)], order[static_cast<size_t>(j)]);
  }
  const size_t keep = static_cast<size_t>(std::max<int64_t>(0, std::min(max_extra, rows)));
  MsaRows out = extra.gather(order, 0, keep);
  out.num_res = extra.num_res;
  return out;
}

MsaRows block_delete_msa(const MsaRows& msa, const BlockDeletionConfig& config, PhiloxStream& rng) {
  const int64_t rows = msa.rows();
  FC_CHECK(config.fraction_per_block >= 0 && config.fraction_per_block <= 1 && config.num_blocks >= 0,
           "block_delete_msa: fraction_per_block ", config.fraction_per_block, " / num_blocks ", config.num_blocks,
           " out of range");
  std::vector<char> deleted(static_cast<size_t>(rows), 0);
  const int64_t block = static_cast<int64_t>(static_cast<double>(rows) * config.fraction_per_block);
  for (int b = 0; b < config.num_blocks && rows > 0; ++b) {
    const int64_t start = static_cast<int64_t>(rng.below(static_cast<uint64_t>(rows)));
    for (int64_t k = start; k < std::min(rows, start + block); ++k) deleted[static_cast<size_t>(k)] = 1;
  }
  std::vector<int64_t> kept;
  for (int64_t k = 0; k < rows; ++k)
    if (k == 0 || !deleted[static_cast<size_t>(k)]) kept.push_back(k);  // the query always stays
  MsaRows out = msa.gather(kept, 0, kept.size());
  out.num_res = msa.num_res;
  return out;
}

float deletion_value(float d) {
  return static_cast<float>(std::atan(static_cast<double>(d) / 3.0) * (2.0 / std::numbers::pi));
}

std::vector<float> make_msa_feat(const MsaRows& centres, const ClusterSummary& clusters) {
  const size_t cells = centres.msa.size();
  FC_CHECK(clusters.deletion_mean.size() == cells && clusters.profile.size() == cells * kMsaOneHot,
           "make_msa_feat: cluster summary does not match the MSA (", cells, " cells)");
  std::vector<float> out(cells * kMsaFeatDim, 0.0f);
  for (size_t k = 0; k < cells; ++k) {
    float* f = out.data() + k * kMsaFeatDim;
    const int32_t tok = centres.msa[k];
    FC_CHECK(tok >= 0 && tok < kMsaOneHot, "make_msa_feat: token ", tok, " outside 0..22");
    f[tok] = 1.0f;
    const float d = centres.deletion[k];
    f[23] = std::clamp(d, 0.0f, 1.0f);
    f[24] = deletion_value(d);
    std::copy_n(clusters.profile.data() + k * kMsaOneHot, kMsaOneHot, f + 25);
    f[48] = deletion_value(clusters.deletion_mean[k]);
  }
  return out;
}

}  // namespace foldcore::data::msa_tf
