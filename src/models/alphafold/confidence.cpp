#include "models/alphafold/confidence.h"

#include <algorithm>
#include <cmath>

namespace foldcore::af2 {
namespace {

// The confidence metrics run on the host over N²·B values (N = 2,048: 268 M per pair head). They
// stream: blocks of about kBlockValues logits are copied to a host f32 buffer (from any device and
// float dtype), each row's softmax is taken in double and consumed at once, and only the f32
// results are stored. Memory beyond the results is one block, whatever N (a whole-array double
// softmax and its float copies were 2.5 fp32 pair representations of host memory at the PAE
// head). Rows are independent, so OpenMP splits them without changing a bit.
constexpr int64_t kBlockValues = int64_t{1} << 22;  // 16 MiB of f32 per block

// Row r of a block (b values) → its softmax in pr[0..b), in double.
void softmax_row(const float* xr, int64_t b, double* pr) {
  const double mx = *std::max_element(xr, xr + b);
  double s = 0;
  for (int64_t k = 0; k < b; ++k) s += (pr[k] = std::exp(static_cast<double>(xr[k]) - mx));
  for (int64_t k = 0; k < b; ++k) pr[k] /= s;
}

// Calls f(row, p) for every row of x viewed as [rows, b] (p: the row's softmax, double[b]), in
// blocks of whole rows; rows of a block run in parallel (f must only write that row's results).
template <typename F>
void for_each_softmax_row(const Tensor& x, int64_t b, F&& f) {
  const int64_t rows = x.numel() / b;
  const Tensor flat = x.reshape({rows, b});
  const int64_t block = std::max<int64_t>(1, kBlockValues / b);
  std::vector<float> buf(static_cast<size_t>(std::min(rows, block) * b));
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t len = std::min(block, rows - r0);
    Tensor::wrap(buf.data(), {len, b}, DType::f32, Device::cpu()).copy_(flat.narrow(0, r0, len));
#pragma omp parallel
    {
      std::vector<double> p(static_cast<size_t>(b));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < len; ++r) {
        softmax_row(buf.data() + r * b, b, p.data());
        f(r0 + r, p.data());
      }
    }
  }
}

void check_float(const Tensor& t, const char* op) {
  FC_CHECK(t.defined() && (t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16),
           op, ": logits must be a defined float tensor, got ", t.defined() ? t.str() : std::string("undefined"));
}

void check_pair_logits(const Tensor& logits, const char* op) {
  check_float(logits, op);
  FC_CHECK(logits.dim() == 3 && logits.size(0) == logits.size(1) && logits.size(2) >= 3, op,
           ": logits must be [N, N, B] with B >= 3, got ", logits.shape().str());
}

}  // namespace

Tensor softmax_last(const Tensor& logits) {
  check_float(logits, "softmax_last");
  FC_CHECK(logits.dim() >= 1 && logits.size(-1) > 0, "softmax_last: empty last axis in ", logits.shape().str());
  const int64_t b = logits.size(-1);
  Tensor out = Tensor::empty(logits.shape(), DType::f32, Device::cpu());
  float* o = out.data<float>();
  for_each_softmax_row(logits, b, [&](int64_t r, const double* p) {
    for (int64_t k = 0; k < b; ++k) o[r * b + k] = static_cast<float>(p[k]);
  });
  return out.to(logits.device());
}

Tensor compute_plddt(const Tensor& logits) {
  check_float(logits, "compute_plddt");
  FC_CHECK(logits.dim() >= 1 && logits.size(-1) > 0, "compute_plddt: empty bin axis in ", logits.shape().str());
  const int64_t b = logits.size(-1);
  Shape s = logits.shape();
  s.erase(s.size() - 1);
  Tensor out = Tensor::empty(s, DType::f32, Device::cpu());
  float* o = out.data<float>();
  for_each_softmax_row(logits, b, [&](int64_t r, const double* p) {
    double e = 0;
    for (int64_t k = 0; k < b; ++k) e += p[k] * (static_cast<double>(k) + 0.5) / static_cast<double>(b);
    o[r] = static_cast<float>(100.0 * e);
  });
  return out.to(logits.device());
}

std::vector<double> pae_bin_centers(double max_error_bin, int64_t num_bins) {
  FC_CHECK(num_bins >= 3 && max_error_bin > 0, "pae_bin_centers: need num_bins >= 3 and max_error_bin > 0, got ",
           num_bins, ", ", max_error_bin);
  const int64_t nb = num_bins - 1;  // number of breaks
  const double step = max_error_bin / static_cast<double>(nb - 1);
  std::vector<double> c(static_cast<size_t>(num_bins));
  for (int64_t k = 0; k < nb; ++k) c[k] = static_cast<double>(k) * step + step / 2;
  c[nb] = c[nb - 1] + step;
  return c;
}

PredictedAlignedError compute_predicted_aligned_error(const Tensor& logits, double max_error_bin) {
  check_pair_logits(logits, "compute_predicted_aligned_error");
  const int64_t n = logits.size(0), b = logits.size(2);
  const std::vector<double> centers = pae_bin_centers(max_error_bin, b);
  Tensor probs = Tensor::empty(logits.shape(), DType::f32, Device::cpu());
  Tensor pae = Tensor::empty({n, n}, DType::f32, Device::cpu());
  float* po = probs.data<float>();
  float* e_out = pae.data<float>();
  for_each_softmax_row(logits, b, [&](int64_t r, const double* p) {
    double e = 0;
    for (int64_t k = 0; k < b; ++k) {
      e += p[k] * centers[k];
      po[r * b + k] = static_cast<float>(p[k]);
    }
    e_out[r] = static_cast<float>(e);
  });
  PredictedAlignedError out;
  out.aligned_confidence_probs = probs.to(logits.device());
  out.predicted_aligned_error = pae.to(logits.device());
  out.max_predicted_aligned_error = static_cast<float>(centers.back());
  return out;
}

float predicted_tm_score(const Tensor& logits, const Tensor& residue_weights, double max_error_bin) {
  check_pair_logits(logits, "predicted_tm_score");
  const int64_t n = logits.size(0), b = logits.size(2);
  std::vector<float> w(static_cast<size_t>(n), 1.f);
  if (residue_weights.defined()) {
    FC_CHECK(residue_weights.numel() == n, "predicted_tm_score: residue_weights ", residue_weights.shape().str(),
             " must have N = ", n, " elements (logits ", logits.shape().str(), ")");
    w = residue_weights.to(DType::f32).to_vector();
  }
  double w_sum = 0;
  for (float v : w) w_sum += v;
  // AF2 truncates Σw to an integer and clips at 19 so that d0 stays positive for short chains.
  const double n_clipped = std::max(static_cast<double>(static_cast<int64_t>(w_sum)), 19.0);
  const double d0 = 1.24 * std::cbrt(n_clipped - 15.0) - 1.8;
  const std::vector<double> centers = pae_bin_centers(max_error_bin, b);
  std::vector<double> tm_per_bin(static_cast<size_t>(b));
  for (int64_t k = 0; k < b; ++k) tm_per_bin[k] = 1.0 / (1.0 + centers[k] * centers[k] / (d0 * d0));
  // tm[i, j] per (i, j) row of the logits, then the per-alignment sums over j in j's order.
  std::vector<double> tm(static_cast<size_t>(n * n));
  for_each_softmax_row(logits, b, [&](int64_t r, const double* p) {
    double t = 0;
    for (int64_t k = 0; k < b; ++k) t += p[k] * tm_per_bin[k];
    tm[r] = t;
  });
  std::vector<double> per_alignment(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double pw = static_cast<double>(w[i]) * w[j];
      num += tm[i * n + j] * pw;
      den += pw;
    }
    per_alignment[i] = num / (1e-8 + den);
  }
  double best = -1, best_value = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double weighted = per_alignment[i] * w[i];
    if (i == 0 || weighted > best) {  // first maximum, as argmax
      best = weighted;
      best_value = per_alignment[i];
    }
  }
  return static_cast<float>(best_value);
}

}  // namespace foldcore::af2
