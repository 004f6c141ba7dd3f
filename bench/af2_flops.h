// Analytic matrix-product FLOP counts of AlphaFold2 (bench_predict, bench_train): 2·m·n·k for
// every matrix product of the model — linear layers, attention logits and weighted sums, the
// triangle-multiplication contractions, the outer-product mean — per module from the config's
// widths and the actual S (MSA rows), E (extra rows), T (templates computed), N (residues).
// Elementwise work (LayerNorm, softmax, gating, activations) is not counted, so rates derived from
// these counts are lower bounds on the work done.
#pragma once

#include "models/alphafold/model/config.h"

namespace foldcore::bench {

// Matrix-product FLOPs of one Evoformer-style block on an [S, N] MSA and [N, N] pair.
inline double block_flops(const af2::EvoformerBlockConfig& c, double S, double N) {
  const double cm = static_cast<double>(c.c_m), cz = static_cast<double>(c.c_z);
  auto att = [](const af2::AttentionConfig& a) { return static_cast<double>(a.num_head * a.head_dim); };
  const double hr = att(c.msa_row), hc = att(c.msa_column), ht = att(c.tri_att);
  double f = 0;
  // MSA row attention with pair bias: q, k, v, gate and output projections; bias from z; QKᵀ, AV.
  f += 2 * S * N * cm * hr * 5 + 2 * N * N * cz * c.msa_row.num_head + 2 * 2 * S * N * N * hr;
  if (c.global_column_attention) {
    // Global column attention: q, gate, out at full size; k and v single-head; logits/AV per head over S.
    const double d = static_cast<double>(c.msa_column.head_dim);
    f += 2 * S * N * cm * hc * 3 + 2 * 2 * S * N * cm * d + 2 * 2 * N * S * hc;
  } else {
    f += 2 * S * N * cm * hc * 5 + 2 * 2 * N * S * S * hc;
  }
  f += 2 * 2 * S * N * cm * cm * c.msa_transition_factor;  // MSA transition
  const double co = static_cast<double>(c.opm_channels);
  f += 2 * 2 * S * N * cm * co + 2 * N * N * S * co * co + 2 * N * N * co * co * cz;  // outer product mean
  const double cmul = static_cast<double>(c.tri_mul_channels);
  // Triangle multiplications (outgoing, incoming): a/b projections + gates, output gate, the
  // k-contraction, output projection.
  f += 2 * (4 * 2 * N * N * cz * cmul + 2 * N * N * cz * cz + 2 * N * N * N * cmul + 2 * N * N * cmul * cz);
  // Triangle attentions (starting, ending node): q, k, v, gate, out; bias; logits and AV over N.
  f += 2 * (2 * N * N * cz * ht * 5 + 2 * N * N * cz * c.tri_att.num_head + 2 * 2 * N * N * N * ht);
  f += 2 * 2 * N * N * cz * cz * c.pair_transition_factor;  // pair transition
  return f;
}

// One recycling iteration of the model.
inline double af2_flops(const af2::Af2Config& c, double S, double E, double T, double N) {
  double f = 0;
  // Embedders: target/msa feature linears, relpos, recycling (dgram + LayerNorms), extra-MSA linear.
  f += 2 * N * c.target_feat_dim * (c.c_m + 2 * c.c_z) + 2 * S * N * c.msa_feat_dim * c.c_m;
  f += 2 * N * N * (2 * c.max_relative_feature + 1) * c.c_z + 2 * N * N * c.recycle_num_bins * c.c_z;
  f += 2 * E * N * 25 * c.c_e;
  // Template stack (per template: pair embedding linear, pair blocks, pointwise attention).
  const auto& t = c.templates;
  if (t.enabled) {
    const double ct = static_cast<double>(t.c_t), cmul = static_cast<double>(t.tri_mul_channels);
    const double ht = static_cast<double>(t.tri_att.num_head * t.tri_att.head_dim);
    const double per_block = 2 * (4 * 2 * N * N * ct * cmul + 2 * N * N * ct * ct + 2 * N * N * N * cmul +
                                  2 * N * N * cmul * ct) +
                             2 * (2 * N * N * ct * ht * 5 + 2 * 2 * N * N * N * ht) +
                             2 * 2 * N * N * ct * ct * t.pair_transition_factor;
    const double hp = static_cast<double>(t.pointwise_att.num_head * t.pointwise_att.head_dim);
    f += T * (2 * N * N * 88 * ct + t.num_pair_blocks * per_block) + 2 * N * N * (c.c_z * hp * 2 + ct * hp * 2) +
         2 * 2 * N * N * T * hp;
    if (t.embed_torsion_angles) f += 2 * T * N * (57 * c.c_m + c.c_m * c.c_m);
  }
  f += c.num_extra_msa_blocks * block_flops(c.extra_msa, E, N);
  f += c.num_evoformer_blocks * block_flops(c.evoformer, S + (t.enabled && t.embed_torsion_angles ? T : 0), N);
  // Single projection, structure module (IPA layers: projections, logits/AV incl. pair terms,
  // transitions), heads (distogram, pLDDT, PAE, masked MSA, experimentally resolved).
  const auto& s = c.structure;
  const double cs = static_cast<double>(c.c_s), H = static_cast<double>(s.num_head);
  const double qk = s.num_scalar_qk + 3.0 * s.num_point_qk, v = s.num_scalar_v + 3.0 * s.num_point_v;
  const double ipa = 2 * N * cs * H * (2 * qk + v + s.num_scalar_qk) + 2 * N * N * c.c_z * H +
                     2 * N * N * H * qk + 2 * N * N * H * (v + c.c_z) + 2 * N * H * (v + 3 * s.num_point_v + c.c_z) * cs;
  f += 2 * N * c.c_m * cs + s.num_layers * (ipa + 2 * N * cs * cs * s.num_transition_layers);
  f += 2 * N * N * c.c_z * (c.heads.distogram_bins + (c.heads.ptm ? c.heads.pae_bins : 0)) +
       2 * S * N * c.c_m * c.heads.masked_msa_outputs + 2 * N * cs * c.heads.lddt_channels * 2;
  return f;
}

}  // namespace foldcore::bench
