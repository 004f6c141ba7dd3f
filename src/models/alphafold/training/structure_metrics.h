// Structure-quality metrics of a predicted Cα trace against the true one (CPU, double precision):
// lDDT-Cα, GDT-TS and Cα-RMSD after optimal superposition. Used by the trainer's validation
// (af2_validation.h) and usable on any pair of equally long coordinate lists.
//
// Inputs: predicted and reference positions [N] (Å) and a mask [N] (1 = the residue's reference
// Cα is observed). Masked-out residues take no part in any metric.
//
// lDDT-Cα (AlphaFold's definition, alphafold/model/lddt.py; Mariani et al. 2013 without the
// stereochemistry checks): the scored pairs are (i, j), i ≠ j, both observed, whose REFERENCE
// distance is below the inclusion radius (15 Å). A pair scores 1/4 for each threshold
// t ∈ {0.5, 1, 2, 4} Å with |d_ref(i,j) − d_pred(i,j)| < t. Global lDDT = (ε + Σ scores) /
// (ε + number of scored pairs) over all pairs; per-residue lDDT of i the same over the pairs of
// row i, ε = 1e-10 (AlphaFold's formula: a residue or structure without any scored pair gets 1).
// Scale 0..1. Invariant to any rigid motion of either structure; needs no superposition.
//
// Cα-RMSD: sqrt(mean over observed residues of |R·x_i + t − y_i|²) for the optimal rotation R and
// translation t (Kabsch; the rotation is found with Horn's quaternion method, which always gives
// a proper rotation, det R = +1). Å.
//
// GDT-TS (Zemla 2003): the mean over the cutoffs d ∈ {1, 2, 4, 8} Å of the largest fraction of the
// observed residues whose Cα lies within d of its reference after a superposition, each cutoff
// maximised over superpositions on its own. Scale 0..1 (multiply by 100 for the CASP scale). The
// maximum over all superpositions is searched as LGA / TM-score do: seeds are every contiguous
// window of observed residues of length 4, 8, 16, … (and all observed residues), at every start
// position (stride 1 up to length 8, then length/4); from a seed set S the search superposes on S,
// counts the residues within d, and replaces S by those residues, until S no longer changes, falls
// below 3 residues, or 20 iterations. The result is the best count seen: a lower bound of the true
// maximum that is exact whenever the optimum is reached from one of the seeds (always for a
// rigid-moved copy: the all-residue seed finds every residue at distance 0).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace foldcore::af2 {

using Vec3d = std::array<double, 3>;

struct LddtResult {
  double global = 0;                // 0..1
  std::vector<double> per_residue;  // [N], AlphaFold's per-residue score (1 where no pair scores)
  int64_t scored_pairs = 0;         // ordered pairs (i, j) within the inclusion radius
};

struct LddtOptions {
  double inclusion_radius = 15.0;                              // Å, on the reference
  std::array<double, 4> thresholds = {0.5, 1.0, 2.0, 4.0};     // Å
};

LddtResult lddt_ca(const std::vector<Vec3d>& predicted, const std::vector<Vec3d>& reference,
                   const std::vector<float>& mask, const LddtOptions& options = {});

// The rigid motion y ≈ R·x + t minimising Σ w_i |R·x_i + t − y_i|² (w = mask), R row-major.
struct Superposition {
  std::array<double, 9> rotation{1, 0, 0, 0, 1, 0, 0, 0, 1};
  Vec3d translation{0, 0, 0};
  Vec3d apply(const Vec3d& x) const;
};
// Needs at least one residue with weight > 0 (throws foldcore::Error otherwise).
Superposition kabsch(const std::vector<Vec3d>& moving, const std::vector<Vec3d>& target,
                     const std::vector<float>& weights);

// Cα-RMSD after the optimal superposition of `predicted` onto `reference` (Å).
double rmsd_ca(const std::vector<Vec3d>& predicted, const std::vector<Vec3d>& reference,
               const std::vector<float>& mask);

struct GdtResult {
  double gdt_ts = 0;                  // 0..1, mean of the four fractions
  std::array<double, 4> fractions{};  // best fraction within 1, 2, 4, 8 Å
};
GdtResult gdt_ts(const std::vector<Vec3d>& predicted, const std::vector<Vec3d>& reference,
                 const std::vector<float>& mask);

// All three at once (what validation reports per chain).
struct StructureMetrics {
  double lddt_ca = 0;   // 0..1
  double gdt_ts = 0;    // 0..1
  double rmsd_ca = 0;   // Å
  int64_t residues = 0; // observed residues scored
};
StructureMetrics structure_metrics(const std::vector<Vec3d>& predicted, const std::vector<Vec3d>& reference,
                                   const std::vector<float>& mask);

}  // namespace foldcore::af2
