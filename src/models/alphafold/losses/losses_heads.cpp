#include "models/alphafold/losses/losses_heads.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data_pipeline/structure/residue_constants.h"
#include "kernels/softmax.h"
#include "models/alphafold/losses/losses_common.h"

namespace foldcore::af2 {
namespace {

// Number of squared lower breaks the value exceeds (OpenFold: sum(d² > b²)), in float as OpenFold
// compares them.
int64_t bin_of(float sq, const std::vector<float>& sq_breaks) {
  int64_t k = 0;
  for (float b : sq_breaks) k += sq > b ? 1 : 0;
  return k;
}

std::vector<float> squared(std::vector<float> v) {
  for (float& x : v) x = x * x;
  return v;
}

// Rows of softmax cross-entropy whose logits lie on a CUDA device: the labels and weights are made
// on the host (small: one per row), the rows computed there by ops::softmax_cross_entropy (fp32,
// the value and the gradient in one pass), and only the per-row losses come back, summed here in
// double in row order over the rows of non-zero weight (the host path's rows). Instead of the
// logits to the host and their gradient back (16.8 MB each way for a distogram at crop 256) and
// N²·64 exps on the host's cores while the device idles.
//   value = norm·Σ_r w_r CE_r,  gradient (f32, on the logits' device) = norm·w_r·(softmax(z_r) − onehot(label_r)).
// The kernel's fp32 row math against the host's double: the values agree to ~1e-6 relative.
LogitsLoss xent_rows_on_device(const Tensor& logits, const std::vector<int64_t>& labels,
                               const std::vector<float>& weights, double norm) {
  const Device dev = logits.device();
  const int64_t rows = static_cast<int64_t>(weights.size());
  FC_CHECK(rows > 0 && logits.numel() % rows == 0 && static_cast<int64_t>(labels.size()) == rows,
           "AlphaFold loss: ", rows, " rows for logits ", logits.shape().str());
  const Tensor x = logits.to(DType::f32).contiguous();
  ops::CrossEntropyArgs args;
  args.labels = Tensor::from_vector_i64(labels, {rows}, DType::i32, dev);
  args.weights = Tensor::from_vector(weights, {rows}, DType::f32, dev);
  args.dscale = static_cast<float>(norm);
  const Tensor loss = Tensor::empty({rows}, DType::f32, dev);
  const Tensor grad = Tensor::empty(x.shape(), DType::f32, dev);
  ops::softmax_cross_entropy(x, args, loss, grad);
  const std::vector<float> l = loss.to_vector();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r)
    if (weights[static_cast<size_t>(r)] != 0) total += l[static_cast<size_t>(r)];
  return {norm * total, grad};
}

// Pairwise cross-entropy over an [N, N, bins] logits tensor with pair mask m_i m_j, normalised as
//   scale·Σ_ij m_ij CE_ij / (ε + scale·Σ_ij m_ij)   (scale 1 for the distogram, 0.5 for TM).
// Logits on the host: double precision there; on a CUDA device: xent_rows_on_device.
LogitsLoss pair_xent(const Tensor& logits_t, const std::vector<int64_t>& bins, const std::vector<double>& mask,
                     int64_t n, int64_t nb, double eps, double scale) {
  double msum = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) msum += mask[i] * mask[j];
  const double denom = eps + scale * msum;
  if (!logits_t.device().is_cpu()) {
    std::vector<float> w(static_cast<size_t>(n * n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) w[static_cast<size_t>(i * n + j)] = static_cast<float>(mask[i] * mask[j]);
    return xent_rows_on_device(logits_t, bins, w, scale / denom);
  }
  const std::vector<float> logits = logits_t.to_vector();
  std::vector<double> grad(logits.size(), 0.0), row_total(static_cast<size_t>(n), 0.0);
  // Rows i in parallel (N² rows of `nb` logits: the step's largest loss term at crop 256), each
  // with its own partial sum; the partials are added in row order, so the total does not depend
  // on the thread count.
  [[maybe_unused]] const bool parallel = n * n * nb >= (int64_t{1} << 16);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < n; ++i) {
    double t = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double m = mask[i] * mask[j];
      if (m == 0) continue;
      const int64_t ij = i * n + j;
      const double s = scale * m / denom;
      t += m * loss_detail::softmax_xent_row(&logits[nb * ij], nb, bins[ij], s, &grad[nb * ij]);
    }
    row_total[static_cast<size_t>(i)] = t;
  }
  double total = 0;
  for (double t : row_total) total += t;
  return {scale * total / denom, loss_detail::to_tensor(grad, {n, n, nb})};
}

}  // namespace

std::vector<float> linspace_f32(double start, double end, int64_t steps) {
  FC_CHECK(steps >= 2, "linspace needs at least 2 steps, got ", steps);
  const float s = static_cast<float>(start), e = static_cast<float>(end);
  const float step = (e - s) / static_cast<float>(steps - 1);
  std::vector<float> out(steps);
  const int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; ++i)
    out[i] = i < half ? s + step * static_cast<float>(i) : e - step * static_cast<float>(steps - i - 1);
  return out;
}

LogitsLoss distogram_loss(const Tensor& logits, const Tensor& pseudo_beta, const Tensor& pseudo_beta_mask,
                          const DistogramLossConfig& config) {
  loss_detail::check_shape(logits, "distogram logits", {-1, -1, config.num_bins});
  const int64_t n = logits.size(0), nb = config.num_bins;
  loss_detail::check_shape(logits, "distogram logits", {n, n, nb});
  loss_detail::check_shape(pseudo_beta, "pseudo_beta", {n, 3});
  const std::vector<float> x = pseudo_beta.to_vector();
  const auto mask = loss_detail::host_doubles(pseudo_beta_mask, "pseudo_beta_mask", {n});
  const auto breaks = squared(linspace_f32(config.min_bin, config.max_bin, nb - 1));
  std::vector<int64_t> bins(n * n);
#pragma omp parallel for schedule(static) if (n >= 128)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float d2 = 0;
      for (int k = 0; k < 3; ++k) d2 += (x[3 * i + k] - x[3 * j + k]) * (x[3 * i + k] - x[3 * j + k]);
      bins[i * n + j] = bin_of(d2, breaks);
    }
  return pair_xent(logits, bins, mask, n, nb, config.eps, 1.0);
}

LogitsLoss masked_msa_loss(const Tensor& logits, const Tensor& true_msa, const Tensor& bert_mask, double eps) {
  loss_detail::check_shape(logits, "masked_msa logits", {-1, -1, 23});
  const int64_t s = logits.size(0), n = logits.size(1), nc = 23;
  const auto labels = loss_detail::host_ints(true_msa, "true_msa", {s, n});
  const auto mask = loss_detail::host_doubles(bert_mask, "bert_mask", {s, n});
  double msum = 0;
  for (double m : mask) msum += m;
  const double denom = eps + 0.5 * msum;
  // The label of every masked position, checked once for both paths (0 where unmasked: unread).
  std::vector<int64_t> rows_labels(labels.size(), 0);
  for (int64_t r = 0; r < s * n; ++r) {
    if (mask[r] == 0) continue;
    FC_CHECK(labels[r] >= 0 && labels[r] < nc, "true_msa value ", labels[r], " outside 0..22");
    rows_labels[r] = labels[r];
  }
  if (!logits.device().is_cpu())
    return xent_rows_on_device(logits, rows_labels, std::vector<float>(mask.begin(), mask.end()), 0.5 / denom);
  const std::vector<float> z = logits.to_vector();
  std::vector<double> grad(z.size(), 0.0);
  double total = 0;
  for (int64_t r = 0; r < s * n; ++r) {
    if (mask[r] == 0) continue;
    total += mask[r] * loss_detail::softmax_xent_row(&z[nc * r], nc, rows_labels[r], 0.5 * mask[r] / denom,
                                                     &grad[nc * r]);
  }
  return {0.5 * total / denom, loss_detail::to_tensor(grad, {s, n, nc})};
}

std::vector<double> lddt_ca(const std::vector<double>& pred_ca, const std::vector<double>& true_ca,
                            const std::vector<double>& ca_mask, double cutoff, double eps) {
  const size_t n = ca_mask.size();
  std::vector<double> out(n);
  auto dist = [eps](const std::vector<double>& p, size_t i, size_t j) {
    double s = 0;
    for (int k = 0; k < 3; ++k) s += (p[3 * i + k] - p[3 * j + k]) * (p[3 * i + k] - p[3 * j + k]);
    return std::sqrt(eps + s);
  };
  for (size_t i = 0; i < n; ++i) {
    double num = 0, den = 0;
    for (size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      const double dt = dist(true_ca, i, j);
      const double m = (dt < cutoff ? 1.0 : 0.0) * ca_mask[i] * ca_mask[j];
      if (m == 0) continue;
      const double l1 = std::abs(dt - dist(pred_ca, i, j));
      num += m * 0.25 * ((l1 < 0.5) + (l1 < 1.0) + (l1 < 2.0) + (l1 < 4.0));
      den += m;
    }
    out[i] = (eps + num) / (eps + den);
  }
  return out;
}

LogitsLoss plddt_loss(const Tensor& logits, const Tensor& final_atom_positions, const Tensor& all_atom_positions,
                      const Tensor& all_atom_mask, double resolution, const PlddtLossConfig& config) {
  loss_detail::check_shape(logits, "lddt logits", {-1, config.num_bins});
  const int64_t n = logits.size(0), nb = config.num_bins;
  const auto pred = loss_detail::host_doubles(final_atom_positions, "final_atom_positions", {n, 37, 3});
  const auto truth = loss_detail::host_doubles(all_atom_positions, "all_atom_positions", {n, 37, 3});
  const auto mask37 = loss_detail::host_doubles(all_atom_mask, "all_atom_mask", {n, 37});
  const int ca = data::rc::atom_order("CA");
  std::vector<double> pca(3 * n), tca(3 * n), mca(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 3; ++k) {
      pca[3 * i + k] = pred[(37 * i + ca) * 3 + k];
      tca[3 * i + k] = truth[(37 * i + ca) * 3 + k];
    }
    mca[i] = mask37[37 * i + ca];
  }
  std::vector<double> grad(n * nb, 0.0);
  if (!config.filter.accepts(resolution)) return {0.0, loss_detail::to_tensor(grad, {n, nb})};
  const auto score = lddt_ca(pca, tca, mca, config.cutoff, config.eps);
  double msum = 0;
  for (double m : mca) msum += m;
  const double denom = config.eps + msum;
  const std::vector<float> z = logits.to_vector();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (mca[i] == 0) continue;
    const double sc = std::max(score[i], 0.0);
    const int64_t bin = std::min(static_cast<int64_t>(std::floor(sc * nb)), nb - 1);
    total += mca[i] * loss_detail::softmax_xent_row(&z[nb * i], nb, bin, mca[i] / denom, &grad[nb * i]);
  }
  return {total / denom, loss_detail::to_tensor(grad, {n, nb})};
}

LogitsLoss experimentally_resolved_loss(const Tensor& logits, const Tensor& atom37_atom_exists,
                                        const Tensor& all_atom_mask, double resolution,
                                        const ExperimentallyResolvedLossConfig& config) {
  loss_detail::check_shape(logits, "experimentally_resolved logits", {-1, 37});
  const int64_t n = logits.size(0);
  const auto exists = loss_detail::host_doubles(atom37_atom_exists, "atom37_atom_exists", {n, 37});
  const auto label = loss_detail::host_doubles(all_atom_mask, "all_atom_mask", {n, 37});
  std::vector<double> grad(n * 37, 0.0);
  if (!config.filter.accepts(resolution)) return {0.0, loss_detail::to_tensor(grad, {n, 37})};
  const std::vector<float> z = logits.to_vector();
  double esum = 0;
  for (double e : exists) esum += e;
  const double denom = config.eps + esum;
  double total = 0;
  for (int64_t k = 0; k < n * 37; ++k) {
    if (exists[k] == 0) continue;
    // log σ(z) = −softplus(−z), log σ(−z) = −softplus(z); softplus(u) = max(u,0) + log1p(e^−|u|).
    const double zz = z[k];
    const double sp_neg = std::max(-zz, 0.0) + std::log1p(std::exp(-std::abs(zz)));  // −log σ(z)
    const double sp_pos = sp_neg + zz;                                                 // −log σ(−z)
    total += exists[k] * (label[k] * sp_neg + (1 - label[k]) * sp_pos);
    const double sig = 1.0 / (1.0 + std::exp(-zz));
    grad[k] = exists[k] * (sig - label[k]) / denom;
  }
  return {total / denom, loss_detail::to_tensor(grad, {n, 37})};
}

LogitsLoss tm_loss(const Tensor& logits, const Tensor& final_frames, const Tensor& backbone_rigid_tensor,
                   const Tensor& backbone_rigid_mask, double resolution, const TmLossConfig& config) {
  loss_detail::check_shape(logits, "tm logits", {-1, -1, config.num_bins});
  const int64_t n = logits.size(0), nb = config.num_bins;
  loss_detail::check_shape(logits, "tm logits", {n, n, nb});
  FC_CHECK(final_frames.defined(), "AlphaFold loss input 'final frames' is missing");
  const bool quat = final_frames.dim() == 2;  // [N, 7], else [N, 4, 4]
  const auto fr = loss_detail::host_doubles(final_frames, "final frames",
                                            quat ? std::vector<int64_t>{n, 7} : std::vector<int64_t>{n, 4, 4});
  const auto gt4 = loss_detail::host_doubles(backbone_rigid_tensor, "backbone_rigid_tensor", {n, 4, 4});
  const auto mask = loss_detail::host_doubles(backbone_rigid_mask, "backbone_rigid_mask", {n});
  if (!config.filter.accepts(resolution)) return {0.0, loss_detail::to_tensor(std::vector<double>(n * n * nb, 0.0), {n, n, nb})};
  // Frames in float as OpenFold holds them: R (row-major) and t.
  struct F32Frame {
    float r[9], t[3];
  };
  std::vector<F32Frame> pred(n), truth(n);
  for (int64_t i = 0; i < n; ++i) {
    loss_detail::Frame p;
    if (quat) {
      p.r = loss_detail::quat_to_rot(&fr[7 * i]);
      for (int k = 0; k < 3; ++k) p.t[k] = fr[7 * i + 4 + k];
    } else {
      p = loss_detail::frame_from_4x4(&fr[16 * i]);
    }
    const auto g = loss_detail::frame_from_4x4(&gt4[16 * i]);
    for (int k = 0; k < 9; ++k) {
      pred[i].r[k] = static_cast<float>(p.r[k]);
      truth[i].r[k] = static_cast<float>(g.r[k]);
    }
    for (int k = 0; k < 3; ++k) {
      pred[i].t[k] = static_cast<float>(p.t[k]);
      truth[i].t[k] = static_cast<float>(g.t[k]);
    }
  }
  // T_i⁻¹ x_j = Rᵢᵀ x_j − Rᵢᵀ t_i (OpenFold: invert, then apply).
  auto local = [](const F32Frame& f, const float* x, int k) {
    const float rx = f.r[k] * x[0] + f.r[3 + k] * x[1] + f.r[6 + k] * x[2];
    const float rt = f.r[k] * f.t[0] + f.r[3 + k] * f.t[1] + f.r[6 + k] * f.t[2];
    return rx + (-rt);
  };
  const auto breaks = squared(linspace_f32(0.0, config.max_bin, nb - 1));
  std::vector<int64_t> bins(n * n);
#pragma omp parallel for schedule(static) if (n >= 128)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float sq = 0;
      for (int k = 0; k < 3; ++k) {
        const float d = local(pred[i], pred[j].t, k) - local(truth[i], truth[j].t, k);
        sq += d * d;
      }
      bins[i * n + j] = bin_of(sq, breaks);
    }
  return pair_xent(logits, bins, mask, n, nb, config.eps, 0.5);
}

}  // namespace foldcore::af2
