// Shared test helpers: device skips, tensor comparison, finite-difference gradient checks.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/device.h"
#include "core/tensor.h"

namespace foldcore::testing {

// Skips the calling test cleanly when no CUDA device is usable (or CUDA is not built).
#define FC_REQUIRE_CUDA()                                                   \
  do {                                                                      \
    if (!::foldcore::cuda_available()) GTEST_SKIP() << "no CUDA device";    \
  } while (0)

struct CloseResult {
  bool ok = true;
  double max_abs = 0;    // max |a - b|
  double max_rel = 0;    // max |a - b| / max(|b|, tiny)
  int64_t worst = -1;    // flat index of the worst violation of atol + rtol*|b|
  std::string message;
};

// Elementwise |a - b| <= atol + rtol * |b| (b is the reference); NaN anywhere fails.
CloseResult all_close(const Tensor& a, const Tensor& b, double atol, double rtol);

#define FC_EXPECT_CLOSE(a, b, atol, rtol)                                        \
  do {                                                                           \
    const auto fc_r_ = ::foldcore::testing::all_close((a), (b), (atol), (rtol)); \
    EXPECT_TRUE(fc_r_.ok) << fc_r_.message;                                      \
  } while (0)

// Central-difference check of an analytic gradient. `x` is an f32 CPU tensor that `loss` reads;
// its elements are perturbed in place (and restored). `grad` is dloss/dx computed analytically.
// Up to `max_points` coordinates (spread over the tensor, seeded) are checked with
// |fd - grad| <= atol + rtol * |fd|.
void check_gradient(const std::function<double()>& loss, Tensor x, const Tensor& grad, double eps, double atol,
                    double rtol, int max_points = 48, uint64_t seed = 1234);

// sum(out * w) in double: the scalar a gradient test backpropagates (dloss/dout = w).
double weighted_sum(const Tensor& out, const Tensor& w);

// The triangle update's masked gated edge (ops::masked_gate_channel_major_*) computed the long
// way on g's device: sigmoid_gate, the mask multiply, the permute to [C, N1, N2] and, from dout
// [C, N1, N2], their backwards (`fused` false), or by the fused ops (`fused` true).
struct MaskedGateResult {
  Tensor out, dg, dp;
};
MaskedGateResult masked_gate_channel_major(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& dout,
                                           bool fused);

// Path of the shared data folder (../shared next to the repository), from FOLDCORE_SHARED_DIR
// or derived from the source tree.
std::string shared_dir();

}  // namespace foldcore::testing
