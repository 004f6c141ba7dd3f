// Shared plumbing of the AlphaFold2 losses (losses_*.h): input checking, host copies, the
// softmax cross-entropy row with its gradient, the rigid-frame helpers the FAPE/TM losses share.
//
// Convention of every loss in losses_*.h: the inputs are Tensors on any device and of any float
// (or, for labels, integer) dtype; the loss is computed on the host in double precision and
// returned as a double; each gradient is an f32 CPU Tensor shaped like the model output it belongs
// to. Labels get no gradient. Wrong shapes throw foldcore::Error naming the argument.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace foldcore::af2::loss_detail {

// Throws foldcore::Error "<what>: expected shape [..] got [..]" unless t is defined and its shape
// matches `expected` (-1 matches any extent).
void check_shape(const Tensor& t, std::string_view what, const std::vector<int64_t>& expected);
// Host copies (shape checked first).
std::vector<double> host_doubles(const Tensor& t, std::string_view what, const std::vector<int64_t>& expected);
std::vector<int64_t> host_ints(const Tensor& t, std::string_view what, const std::vector<int64_t>& expected);
// A scalar (numel 1) label such as resolution or use_clamped_fape.
double host_scalar(const Tensor& t, std::string_view what);
// f32 CPU tensor from doubles.
Tensor to_tensor(const std::vector<double>& v, const Shape& shape);

// −log softmax(logits)[label] of one row of n logits; adds scale·(softmax − onehot(label)) to
// grad[0..n) (d/dlogits of scale·loss). log-sum-exp with the max subtracted.
double softmax_xent_row(const float* logits, int64_t n, int64_t label, double scale, double* grad);

// A rigid transform x ↦ R x + t in double precision.
struct Frame {
  std::array<double, 9> r{};  // row-major R[i][j]; columns are the frame axes
  std::array<double, 3> t{};
};
// From a 4x4 homogeneous matrix [R t; 0 1] (row-major, 16 values).
Frame frame_from_4x4(const double* m);
// AlphaFold/OpenFold quat_to_rot of (w, x, y, z) without normalisation (the quadratic form
// R = Σ_ij q_i q_j M_ij; a unit quaternion gives a rotation):
//   [[w²+x²−y²−z², 2(xy−wz), 2(xz+wy)], [2(xy+wz), w²−x²+y²−z², 2(yz−wx)],
//    [2(xz−wy), 2(yz+wx), w²−x²−y²+z²]]
// in double: kernels/rigid_math.h's per-residue expressions, which the geometry ops share.
std::array<double, 9> quat_to_rot(const double* q);
// Chain rule through quat_to_rot: dL/dq [4] from dL/dR [9] (row-major).
std::array<double, 4> quat_to_rot_backward(const double* q, const std::array<double, 9>& grad_r);
// Rᵀ(x − t): the point x in the frame's local coordinates.
std::array<double, 3> to_local(const Frame& f, const double* x);

}  // namespace foldcore::af2::loss_detail
