#include "models/alphafold/heads/confidence.h"

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

PaeStream::PaeStream(int64_t n, int64_t bins, double max_error_bin, const Tensor& residue_weights, bool keep_probs)
    : n_(n), b_(bins), keep_probs_(keep_probs), centers_(pae_bin_centers(max_error_bin, bins)) {
  FC_CHECK(n >= 1, "PaeStream: N must be >= 1, got ", n);
  w_.assign(static_cast<size_t>(n), 1.f);
  if (residue_weights.defined()) {
    FC_CHECK(residue_weights.numel() == n, "predicted_tm_score: residue_weights ", residue_weights.shape().str(),
             " must have N = ", n, " elements");
    w_ = residue_weights.to(DType::f32).to_vector();
  }
  double w_sum = 0;
  for (float v : w_) w_sum += v;
  // AF2 truncates Σw to an integer and clips at 19 so that d0 stays positive for short chains.
  const double n_clipped = std::max(static_cast<double>(static_cast<int64_t>(w_sum)), 19.0);
  const double d0 = 1.24 * std::cbrt(n_clipped - 15.0) - 1.8;
  tm_per_bin_.resize(static_cast<size_t>(b_));
  for (int64_t k = 0; k < b_; ++k) tm_per_bin_[k] = 1.0 / (1.0 + centers_[k] * centers_[k] / (d0 * d0));
  per_alignment_.assign(static_cast<size_t>(n), 0.0);
  seen_.assign(static_cast<size_t>(n), 0);
  pae_ = Tensor::empty({n, n}, DType::f32, Device::cpu());
  if (keep_probs_) probs_ = Tensor::empty({n, n, b_}, DType::f32, Device::cpu());
}

void PaeStream::add_rows(int64_t i0, const Tensor& logits_rows) {
  check_float(logits_rows, "PaeStream::add_rows");
  FC_CHECK(logits_rows.dim() == 3 && logits_rows.size(1) == n_ && logits_rows.size(2) == b_,
           "PaeStream::add_rows: logits rows ", logits_rows.shape().str(), " must be [rows, ", n_, ", ", b_, "]");
  const int64_t rows = logits_rows.size(0);
  FC_CHECK(i0 >= 0 && i0 + rows <= n_, "PaeStream::add_rows: rows ", i0, "..", i0 + rows, " outside 0..", n_);
  for (int64_t i = i0; i < i0 + rows; ++i) {
    FC_CHECK(!seen_[i], "PaeStream::add_rows: row ", i, " added twice");
    seen_[i] = 1;
  }
  float* pae = pae_.data<float>() + i0 * n_;
  float* po = keep_probs_ ? probs_.data<float>() + i0 * n_ * b_ : nullptr;
  std::vector<double> tm(static_cast<size_t>(rows * n_));  // tm[i, j] of these rows
  const int64_t b = b_;
  for_each_softmax_row(logits_rows, b, [&](int64_t r, const double* p) {
    double e = 0, t = 0;
    for (int64_t k = 0; k < b; ++k) {
      e += p[k] * centers_[k];
      t += p[k] * tm_per_bin_[k];
    }
    if (po != nullptr)
      for (int64_t k = 0; k < b; ++k) po[r * b + k] = static_cast<float>(p[k]);
    pae[r] = static_cast<float>(e);
    tm[r] = t;
  });
  // The per-alignment sums over j in j's order.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    double num = 0, den = 0;
    for (int64_t j = 0; j < n_; ++j) {
      const double pw = static_cast<double>(w_[i]) * w_[j];
      num += tm[r * n_ + j] * pw;
      den += pw;
    }
    per_alignment_[i] = num / (1e-8 + den);
  }
  rows_added_ += rows;
}

PredictedAlignedError PaeStream::result() const {
  FC_CHECK(complete(), "PaeStream: ", rows_added_, " of ", n_, " rows added");
  PredictedAlignedError out;
  out.predicted_aligned_error = pae_;
  out.aligned_confidence_probs = probs_;
  out.max_predicted_aligned_error = static_cast<float>(centers_.back());
  return out;
}

float PaeStream::ptm() const {
  FC_CHECK(complete(), "PaeStream: ", rows_added_, " of ", n_, " rows added");
  double best = -1, best_value = 0;
  for (int64_t i = 0; i < n_; ++i) {
    const double weighted = per_alignment_[i] * w_[i];
    if (i == 0 || weighted > best) {  // first maximum, as argmax
      best = weighted;
      best_value = per_alignment_[i];
    }
  }
  return static_cast<float>(best_value);
}

PredictedAlignedError compute_predicted_aligned_error(const Tensor& logits, double max_error_bin) {
  check_pair_logits(logits, "compute_predicted_aligned_error");
  PaeStream s(logits.size(0), logits.size(2), max_error_bin);
  s.add_rows(0, logits);
  PredictedAlignedError out = s.result();
  out.aligned_confidence_probs = out.aligned_confidence_probs.to(logits.device());
  out.predicted_aligned_error = out.predicted_aligned_error.to(logits.device());
  return out;
}

float predicted_tm_score(const Tensor& logits, const Tensor& residue_weights, double max_error_bin) {
  check_pair_logits(logits, "predicted_tm_score");
  PaeStream s(logits.size(0), logits.size(2), max_error_bin, residue_weights, /*keep_probs=*/false);
  s.add_rows(0, logits);
  return s.ptm();
}

}  // namespace foldcore::af2
