// AlphaFold2's pair-sized input features, computed on the device that holds the pair (CPU
// reference + CUDA). Both are O(N²) per call and ran on the host before: at N = 2,048 the template
// features alone were four [N, N, 88] fp32 arrays (1.5 GB each) built by one host thread and
// copied to the GPU every recycling iteration.
//
// distogram_one_hot (AF2 dgram_from_positions): positions [T, N, 3] f32 contiguous →
//   out[t, i, j, b] = 1[lower_b < d² < upper_b], d² = |x_{t,row0+i} − x_{t,j}|² in fp32 (the three
//   squares summed left to right, no fused multiply-add), lower_b = linspace(min, max, nb)_b² in
//   fp32, upper_b = lower_{b+1}, upper_{nb−1} = 1e8; out [T, rows, N, nb] f32 contiguous.
//   (A residue's own entry, d² = 0 < lower_0, is all zeros.)
//
// template_pair_features (AF2 single_template_embedding's feature block): rows row0..row0+rows of
// the [N, N, C] features into out [rows, N, C] f32 contiguous (rows = out.size(0); row0 0 and rows
// N: the whole array), C = nb + 1 + 22 + 22 + 3 + 1, per (i, j):
//   [dgram_ij (nb), pb_i·pb_j, one_hot(aatype_j, 22), one_hot(aatype_i, 22), unit_ij (3), bb_i·bb_j]
//   all multiplied by bb_i·bb_j (the backbone mask 2-D), where unit_ij = v / √(1e-6 + |v|²) · bb_i
//   bb_j with v_k = e_k(i) · (CA_j − CA_i), computed in double from the fp32 frames (e1, e2, e3:
//   residue i's backbone frame axes, and CA_i; zeros when `frames` is undefined:
//   use_template_unit_vector off). Inputs: pseudo_beta [N, 3], pseudo_beta_mask [N],
//   backbone_mask [N], frames [N, 12] (e1, e2, e3, CA) f32 contiguous; aatype [N] i32 in [0, 22)
//   (checked by the caller).
// extra_msa_features (AF2's extra_msa_feat, Suppl. 1.2.9 / Table 1): extra_msa [E, N] (i32/i64,
//   residue classes 0..22: 20 amino acids, X, gap, the masked-MSA token), extra_has_deletion and
//   extra_deletion_value [E, N] f32 → out [E, N, 25] f32 contiguous: one_hot(extra_msa, 23) (a class
//   outside [0, 23) gives zeros, as ops::one_hot; callers validate where the values are on the
//   host), then has_deletion, then deletion_value. Built where the features lie: on a GPU without
//   a copy to the host and back (which waited for the device's queue in every recycling iteration).
// CUDA computes the same fp32/double operations in the same order with rounding intrinsics (no
// contraction into FMAs), so both backends give equal bits (tests/kernels/test_af2_features*.cpp).
#pragma once

#include <string_view>

#include "core/tensor.h"

namespace foldcore::ops {

struct DistogramBins {
  float min_bin = 0, max_bin = 0;
  int64_t num_bins = 0;
};

constexpr int64_t kTemplateAatypeClasses = 22;  // 20 amino acids + X + gap
inline int64_t template_pair_feature_dim(int64_t num_bins) { return num_bins + 1 + 2 * kTemplateAatypeClasses + 3 + 1; }

void distogram_one_hot(const Tensor& positions, const DistogramBins& bins, int64_t row0, const Tensor& out);

struct TemplatePairInputs {
  Tensor pseudo_beta, pseudo_beta_mask, aatype, backbone_mask;
  Tensor frames;  // undefined: no unit vectors (zeros)
  DistogramBins bins;
};
void template_pair_features(const TemplatePairInputs& in, const Tensor& out, int64_t row0 = 0);

constexpr int64_t kExtraMsaClasses = 23;                          // 20 amino acids + X + gap + mask token
constexpr int64_t kExtraMsaFeatureDim = kExtraMsaClasses + 2;     // + has_deletion + deletion_value
void extra_msa_features(const Tensor& extra_msa, const Tensor& has_deletion, const Tensor& deletion_value,
                        const Tensor& out);
// The check that goes with it, where the classes are on the host (a CPU tensor, i32/i64, any
// shape): throws "<what>: value V at flat index K is outside [0, 23) (…)" for the first one outside.
void check_extra_msa_classes(const Tensor& extra_msa, std::string_view what);

}  // namespace foldcore::ops
