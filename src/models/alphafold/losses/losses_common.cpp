#include "models/alphafold/losses/losses_common.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include <sstream>

#include "core/error.h"
#include "kernels/rigid_math.h"

namespace foldcore::af2::loss_detail {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << (s[i] < 0 ? std::string("*") : std::to_string(s[i]));
  o << "]";
  return o.str();
}

}  // namespace

void check_shape(const Tensor& t, std::string_view what, const std::vector<int64_t>& expected) {
  FC_CHECK(t.defined(), "AlphaFold loss input '", what, "' is missing");
  std::vector<int64_t> got(t.shape().begin(), t.shape().end());
  bool ok = got.size() == expected.size();
  for (size_t i = 0; ok && i < got.size(); ++i) ok = expected[i] < 0 || expected[i] == got[i];
  FC_CHECK(ok, "AlphaFold loss input '", what, "': expected shape ", shape_text(expected), ", got ", shape_text(got));
}

std::vector<double> host_doubles(const Tensor& t, std::string_view what, const std::vector<int64_t>& expected) {
  check_shape(t, what, expected);
  const std::vector<float> f = t.to_vector();
  return {f.begin(), f.end()};
}

std::vector<int64_t> host_ints(const Tensor& t, std::string_view what, const std::vector<int64_t>& expected) {
  check_shape(t, what, expected);
  return t.to_vector_i64();
}

double host_scalar(const Tensor& t, std::string_view what) {
  FC_CHECK(t.defined(), "AlphaFold loss input '", what, "' is missing");
  FC_CHECK(t.numel() == 1, "AlphaFold loss input '", what, "' must hold one value, got ", t.numel());
  return t.to_vector()[0];
}

Tensor to_tensor(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape);
}

double softmax_xent_row(const float* logits, int64_t n, int64_t label, double scale, double* grad) {
  double mx = logits[0];
  for (int64_t k = 1; k < n; ++k) mx = std::max(mx, static_cast<double>(logits[k]));
  // exp(z_k − max) once per element, kept for the gradient's softmax (one exp per element, not two;
  // up to 128 classes on the stack, the heads have 23-64).
  double stack[128];
  std::vector<double> heap;
  double* e = stack;
  if (n > 128) {
    heap.resize(static_cast<size_t>(n));
    e = heap.data();
  }
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) sum += (e[k] = std::exp(logits[k] - mx));
  const double lse = mx + std::log(sum);
  if (scale != 0) {
    const double inv = 1.0 / sum;
    for (int64_t k = 0; k < n; ++k) grad[k] += scale * (e[k] * inv - (k == label ? 1.0 : 0.0));
  }
  return lse - logits[label];
}

Frame frame_from_4x4(const double* m) {
  Frame f;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) f.r[3 * i + j] = m[4 * i + j];
    f.t[i] = m[4 * i + 3];
  }
  return f;
}

std::array<double, 9> quat_to_rot(const double* q) {
  std::array<double, 9> r;
  ops::detail::quat_to_rot_elem(q, r.data());
  return r;
}

std::array<double, 4> quat_to_rot_backward(const double* q, const std::array<double, 9>& g) {
  std::array<double, 4> dq;
  ops::detail::quat_to_rot_backward_elem(q, g.data(), dq.data());
  return dq;
}

std::array<double, 3> to_local(const Frame& f, const double* x) {
  const double d[3] = {x[0] - f.t[0], x[1] - f.t[1], x[2] - f.t[2]};
  std::array<double, 3> out{};
  for (int i = 0; i < 3; ++i) out[i] = f.r[i] * d[0] + f.r[3 + i] * d[1] + f.r[6 + i] * d[2];
  return out;
}

}  // namespace foldcore::af2::loss_detail
