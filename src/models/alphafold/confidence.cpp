#include "models/alphafold/confidence.h"

#include <algorithm>
#include <cmath>

namespace foldcore::af2 {
namespace {

// The confidence metrics run on the host over N²·B values (N = 2,048: 268 M per pair head), row
// by row in double; rows are independent, so OpenMP splits them without changing a bit.

// Row-wise softmax of a host copy: rows × b values, in double.
std::vector<double> softmax_rows(const std::vector<float>& x, int64_t b) {
  std::vector<double> p(x.size());
  const int64_t rows = static_cast<int64_t>(x.size()) / b;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * b;
    double* pr = p.data() + r * b;
    const double mx = *std::max_element(xr, xr + b);
    double s = 0;
    for (int64_t k = 0; k < b; ++k) s += (pr[k] = std::exp(static_cast<double>(xr[k]) - mx));
    for (int64_t k = 0; k < b; ++k) pr[k] /= s;
  }
  return p;
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

Tensor to_device_f32(const std::vector<double>& v, const Shape& shape, Device device) {
  std::vector<float> f(v.size());
  const int64_t n = static_cast<int64_t>(v.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(v[i]);
  return Tensor::from_vector(f, shape, DType::f32, device);
}

}  // namespace

Tensor softmax_last(const Tensor& logits) {
  check_float(logits, "softmax_last");
  FC_CHECK(logits.dim() >= 1 && logits.size(-1) > 0, "softmax_last: empty last axis in ", logits.shape().str());
  return to_device_f32(softmax_rows(logits.to_vector(), logits.size(-1)), logits.shape(), logits.device());
}

Tensor compute_plddt(const Tensor& logits) {
  check_float(logits, "compute_plddt");
  FC_CHECK(logits.dim() >= 1 && logits.size(-1) > 0, "compute_plddt: empty bin axis in ", logits.shape().str());
  const int64_t b = logits.size(-1);
  const std::vector<double> p = softmax_rows(logits.to_vector(), b);
  const int64_t rows = logits.numel() / b;
  std::vector<double> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double e = 0;
    for (int64_t k = 0; k < b; ++k) e += p[r * b + k] * (static_cast<double>(k) + 0.5) / static_cast<double>(b);
    out[r] = 100.0 * e;
  }
  Shape s = logits.shape();
  s.erase(s.size() - 1);
  return to_device_f32(out, s, logits.device());
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
  const std::vector<double> p = softmax_rows(logits.to_vector(), b);
  std::vector<double> pae(static_cast<size_t>(n * n));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n * n; ++r) {
    double e = 0;
    for (int64_t k = 0; k < b; ++k) e += p[r * b + k] * centers[k];
    pae[r] = e;
  }
  PredictedAlignedError out;
  out.aligned_confidence_probs = to_device_f32(p, logits.shape(), logits.device());
  out.predicted_aligned_error = to_device_f32(pae, {n, n}, logits.device());
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
  const std::vector<double> p = softmax_rows(logits.to_vector(), b);
  std::vector<double> per_alignment(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < n; ++j) {
      double tm = 0;
      for (int64_t k = 0; k < b; ++k) tm += p[(i * n + j) * b + k] * tm_per_bin[k];
      const double pw = static_cast<double>(w[i]) * w[j];
      num += tm * pw;
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
