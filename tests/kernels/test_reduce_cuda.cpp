// CUDA vs CPU for kernels/reduce.h, f32 and bf16, and run-to-run determinism.
// Tolerance: the CPU sums in double, CUDA in fp32 (trees / row slabs); for N(0,1) data the fp32
// error grows at most like R·2^-24·Σ|x| and in practice far less, so atol = 1e-6·R + 1e-5 with
// rtol 1e-5 (f32 out) or 1e-2 (bf16 out: one rounding of the result, 2^-8, may flip).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/kernel_profile.h"
#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "test_util.h"

namespace foldcore {
namespace {

const Device kGpu = Device::cuda(0);

Shape kept_shape(const Tensor& x, const std::vector<int>& axes) {
  std::vector<bool> red(x.dim(), false);
  for (int a : axes) red[a < 0 ? a + x.dim() : a] = true;
  Shape s;
  for (int a = 0; a < x.dim(); ++a)
    if (!red[a]) s.push_back(x.size(a));
  return s;
}

struct Case {
  Shape shape;
  std::vector<int> axes;
};

// Covers the [R,K] path (with and without splits), the [K,R] path (short rows, long
// rows, split rows, all axes), and the general path.
const std::vector<Case> kCases = {
    {{1000, 37}, {0}},   {{100, 37}, {0}},      {{7, 5, 33}, {0, 1}},   {{37, 200}, {1}},
    {{3, 20000}, {1}},   {{70001}, {0}},        {{5, 300, 7}, {1}},     {{4, 9, 6, 5}, {0, 2}},
    {{11, 3}, {1}},      {{6, 7, 8}, {}},       {{6, 7, 8}, {0, 1, 2}},
    // 12 splits of each of 5 column tiles, combined by the last split of a tile to finish (the
    // emulation runs the blocks in a seeded random order, a new one per launch: the run-to-run
    // check below compares two orders).
    {{3000, 150}, {0}},
};

TEST(ReduceCuda, SumMatchesCpuAllPathsAndIsDeterministic) {
  FC_REQUIRE_CUDA();
  Generator gen(201);
  for (DType t : {DType::f32, DType::bf16}) {
    for (const Case& cs : kCases) {
      Tensor x = randn(cs.shape, gen).to(t);
      Tensor gx = x.to(kGpu);
      int64_t r = 1;
      for (int a : cs.axes) r *= x.size(a);
      const Shape ks = kept_shape(x, cs.axes);
      Tensor c = Tensor::empty(ks, t), g = Tensor::empty(ks, t, kGpu), g2 = Tensor::empty(ks, t, kGpu);
      ops::sum(x, cs.axes, c);
      ops::sum(gx, cs.axes, g);
      ops::sum(gx, cs.axes, g2);
      const double rtol = t == DType::f32 ? 1e-5 : 1e-2;
      FC_EXPECT_CLOSE(g.to(Device::cpu()), c, 1e-6 * r + 1e-5, rtol);
      FC_EXPECT_CLOSE(g2.to(Device::cpu()), g.to(Device::cpu()), 0, 0);  // deterministic
      // accumulate and mean (f32 outputs from t inputs)
      Tensor ca = Tensor::full(ks, 1.0, DType::f32), ga = Tensor::full(ks, 1.0, DType::f32, kGpu);
      ops::sum(x, cs.axes, ca, true);
      ops::sum(gx, cs.axes, ga, true);
      FC_EXPECT_CLOSE(ga.to(Device::cpu()), ca, 1e-6 * r + 1e-5, 1e-5);
      if (r > 0 && !cs.axes.empty()) {
        Tensor cm = Tensor::empty(ks, DType::f32), gm = Tensor::empty(ks, DType::f32, kGpu);
        ops::mean(x, cs.axes, cm);
        ops::mean(gx, cs.axes, gm);
        FC_EXPECT_CLOSE(gm.to(Device::cpu()), cm, 1e-6, 1e-5);
      }
    }
  }
}

// Column sums of a row-major [R, K] (bias gradients) in their 16-byte form against the
// one-element form (ops::set_col_sum_vec) and the CPU: K a multiple of the vector (8 bf16, 4 f32)
// over one and several column tiles, a partial tile (K = 24, 136), R with ragged splits and row
// remainders; a pointer off the 16-byte grid and K = 37 take the one-element form in both
// settings. The kernel profile says which ran. The two forms sum in different fixed orders: equal
// to fp32 rounding (relative 1e-5 of the column's Σ|x|, f32 out; bf16 out one rounding apart).
TEST(ReduceCuda, ColumnSumsVectorFormMatchesElementFormAndCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(204);
  auto run = [](const Tensor& x, bool vec, DType out_dtype, int& vec_calls) {
    ops::set_col_sum_vec(vec);
    kernel_profile::reset();
    kernel_profile::set_enabled(true);
    Tensor out = Tensor::full({x.size(-1)}, 0.5, out_dtype, kGpu);
    ops::sum(x, {0}, out, /*accumulate=*/true);
    synchronize(kGpu);
    kernel_profile::set_enabled(false);
    ops::set_col_sum_vec(true);
    vec_calls = 0;
    for (const auto& row : kernel_profile::collect().kernels)
      vec_calls += row.name.find("col_sum_vec_kernel<") != std::string::npos ? static_cast<int>(row.calls) : 0;
    return out.to(Device::cpu()).to(DType::f32);
  };
  struct ColCase {
    int64_t r, k;
    bool misaligned;
  };
  for (DType t : {DType::bf16, DType::f32}) {
    const int64_t v = t == DType::bf16 ? 8 : 4;
    for (const ColCase& cc : {ColCase{5000, 128, false}, ColCase{1000, 24, false}, ColCase{257, 136, false},
                              ColCase{70, 16 * v, false}, ColCase{3001, 128, true}, ColCase{300, 37, false}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " r " + std::to_string(cc.r) + " k " + std::to_string(cc.k) +
                   (cc.misaligned ? " misaligned" : ""));
      const Tensor base = randn({cc.r * cc.k + 1}, gen).to(t).to(kGpu);
      const Tensor x = base.narrow(0, cc.misaligned ? 1 : 0, cc.r * cc.k).view({cc.r, cc.k});
      for (DType out_dtype : {DType::f32, t}) {
        int vec_calls = 0, elem_vec_calls = 0;
        const Tensor a = run(x, true, out_dtype, vec_calls), b = run(x, false, out_dtype, elem_vec_calls);
        const bool vector_form = !cc.misaligned && cc.k % v == 0;
        EXPECT_EQ(vec_calls, vector_form ? 1 : 0);
        EXPECT_EQ(elem_vec_calls, 0);
        Tensor ref = Tensor::full({cc.k}, 0.5, out_dtype);
        ops::sum(x.to(Device::cpu()), {0}, ref, true);
        const double rtol = out_dtype == DType::f32 ? 1e-5 : 1e-2;
        FC_EXPECT_CLOSE(a, ref.to(DType::f32), 1e-6 * cc.r + 1e-5, rtol);
        FC_EXPECT_CLOSE(a, b, 1e-6 * cc.r + 1e-5, rtol);
      }
    }
  }
}

TEST(ReduceCuda, StridedInputAndSumRows) {
  FC_REQUIRE_CUDA();
  Generator gen(202);
  Tensor base = randn({40, 6, 50}, gen);
  Tensor x = base.permute({2, 0, 1});  // [50,40,6] non-contiguous
  Tensor gx = base.to(kGpu).permute({2, 0, 1});
  Tensor c = Tensor::empty({40}, DType::f32), g = Tensor::empty({40}, DType::f32, kGpu);
  ops::sum(x, {0, 2}, c);
  ops::sum(gx, {0, 2}, g);
  FC_EXPECT_CLOSE(g.to(Device::cpu()), c, 1e-6 * 300 + 1e-5, 1e-5);
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor rows = randn({33, 129, 65}, gen).to(t);
    Tensor cb = Tensor::full({65}, 0.25, DType::f32), gb = Tensor::full({65}, 0.25, DType::f32, kGpu);
    ops::sum_rows_accumulate(rows, cb);
    ops::sum_rows_accumulate(rows.to(kGpu), gb);
    FC_EXPECT_CLOSE(gb.to(Device::cpu()), cb, 1e-6 * 33 * 129 + 1e-5, 1e-5);
  }
}

// The batched column sums (one launch, grid z over the batches: their own partials and counters)
// against one launch per batch, bit for bit: the vector and element forms, one row split and
// several (R = 5000: 20 splits, whose last block per column tile combines them), bf16 and f32.
TEST(ReduceCuda, BatchedColumnSumsEqualOneLaunchPerBatch) {
  FC_REQUIRE_CUDA();
  Generator gen(205);
  struct BatchCase {
    int64_t b, r, k;
  };
  for (DType t : {DType::bf16, DType::f32}) {
    for (const BatchCase& bc : {BatchCase{5, 5000, 128}, BatchCase{2, 100, 32}, BatchCase{3, 700, 37}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " b " + std::to_string(bc.b) + " r " + std::to_string(bc.r) + " k " +
                   std::to_string(bc.k));
      const Tensor x = randn({bc.b, bc.r, bc.k}, gen).to(t).to(kGpu);
      const Tensor start = randn({bc.b, bc.k}, gen).to(kGpu);
      Tensor batched = start.clone(), separate = start.clone();
      kernel_profile::reset();
      kernel_profile::set_enabled(true);
      ops::sum_rows_accumulate_batched(x, batched);
      synchronize(kGpu);
      kernel_profile::set_enabled(false);
      int64_t launches = 0;
      for (const auto& row : kernel_profile::collect().kernels)
        launches += row.name.find("col_sum") != std::string::npos ? row.calls : 0;
      EXPECT_EQ(launches, 1);
      for (int64_t b = 0; b < bc.b; ++b) ops::sum_rows_accumulate(x.select(0, b), separate.select(0, b));
      EXPECT_EQ(batched.to(Device::cpu()).to_vector(), separate.to(Device::cpu()).to_vector());
      Tensor ref = start.to(Device::cpu());
      ops::sum_rows_accumulate_batched(x.to(Device::cpu()), ref);
      FC_EXPECT_CLOSE(batched.to(Device::cpu()), ref, 1e-6 * bc.r + 1e-5, 1e-5);
    }
  }
}

// An activation's backward and its bias gradient in one pass (ops::activation_backward_sum_rows)
// against the two ops it replaces on the device, bit for bit (dx and the accumulated bias
// gradient: the same functor and the same column-sum order), and against the CPU (dx exact for
// relu; gelu's erff/expf within 1e-6 relative; the sums as in the column-sum test above). relu and
// gelu, bf16 and f32; one row split and many (R = 5000), several column tiles; where the one-pass
// form does not apply (C = 37, a pointer off the 16-byte grid, the vector sums switched off) the
// two ops run. The kernel profile says which: one launch, no elementwise map, for the one-pass form.
TEST(ReduceCuda, ActivationBackwardWithBiasGradientEqualsTheTwoOps) {
  FC_REQUIRE_CUDA();
  Generator gen(206);
  struct ActCase {
    int64_t r, k;
    bool misaligned, vec_off;
  };
  for (const ops::Activation act : {ops::Activation::relu, ops::Activation::gelu}) {
    for (DType t : {DType::bf16, DType::f32}) {
      for (const ActCase& ac : {ActCase{5000, 128, false, false}, ActCase{3, 40 * 64, false, false},
                                ActCase{70, 512, false, false}, ActCase{300, 37, false, false},
                                ActCase{257, 128, true, false}, ActCase{100, 64, false, true}}) {
        SCOPED_TRACE(std::string(act == ops::Activation::relu ? "relu " : "gelu ") + std::string(dtype_name(t)) + " r " +
                     std::to_string(ac.r) + " k " + std::to_string(ac.k) + (ac.misaligned ? " misaligned" : "") +
                     (ac.vec_off ? " vector sums off" : ""));
        const int64_t n = ac.r * ac.k, o = ac.misaligned ? 1 : 0;
        // relu saves its output (≥ 0, a quarter of it exactly 0), gelu its pre-activation.
        Tensor in_host = randn({n + 1}, gen);
        if (act == ops::Activation::relu) {
          std::vector<float> v = in_host.to_vector();
          for (size_t i = 0; i < v.size(); ++i) v[i] = i % 4 == 0 ? 0.f : std::fabs(v[i]);
          in_host = Tensor::from_vector(v, {n + 1});
        }
        const Tensor in = in_host.to(t).to(kGpu).narrow(0, o, n).view({ac.r, ac.k});
        const Tensor dy = randn({n + 1}, gen).to(t).to(kGpu).narrow(0, o, n).view({ac.r, ac.k});
        const Tensor start = randn({ac.k}, gen);
        Tensor dx_fused = Tensor::empty({n + 1}, t, kGpu).narrow(0, o, n).view({ac.r, ac.k});
        Tensor db_fused = start.to(kGpu), db_two = start.to(kGpu);
        Tensor dx_two = Tensor::empty({n + 1}, t, kGpu).narrow(0, o, n).view({ac.r, ac.k});  // as dx_fused
        ops::set_col_sum_vec(!ac.vec_off);
        kernel_profile::reset();
        kernel_profile::set_enabled(true);
        ops::activation_backward_sum_rows(act, in, dy, dx_fused, db_fused);
        synchronize(kGpu);
        kernel_profile::set_enabled(false);
        int64_t launches = 0;
        std::string names;
        for (const auto& row : kernel_profile::collect().kernels) {
          // Not the split sums' counters zeroed at their first use on the device (block_counters).
          if (row.name.find("fill_kernel") != std::string::npos) continue;
          launches += row.calls;
          names += row.name + "; ";
        }
        if (act == ops::Activation::relu) {
          ops::relu_backward(in, dy, dx_two);
        } else {
          ops::gelu_backward(in, dy, dx_two);
        }
        ops::sum_rows_accumulate(dx_two, db_two);
        ops::set_col_sum_vec(true);
        const int64_t v = t == DType::bf16 ? 8 : 4;
        const bool one_pass = !ac.misaligned && !ac.vec_off && ac.k % v == 0;
        EXPECT_EQ(launches, one_pass ? 1 : 2) << names;  // the split sums' last block combines them
        EXPECT_EQ(dx_fused.to(Device::cpu()).to_vector(), dx_two.to(Device::cpu()).to_vector());
        EXPECT_EQ(db_fused.to(Device::cpu()).to_vector(), db_two.to(Device::cpu()).to_vector());
        Tensor dx_ref = Tensor::empty({ac.r, ac.k}, t), db_ref = start.clone();
        ops::activation_backward_sum_rows(act, in.to(Device::cpu()), dy.to(Device::cpu()), dx_ref, db_ref);
        FC_EXPECT_CLOSE(dx_fused.to(Device::cpu()).to(DType::f32), dx_ref.to(DType::f32),
                        act == ops::Activation::relu ? 0.0 : 1e-6, act == ops::Activation::relu || t == DType::f32 ? 1e-6 : 8e-3);
        FC_EXPECT_CLOSE(db_fused.to(Device::cpu()), db_ref, 1e-6 * ac.r + 1e-5, 1e-5);
      }
    }
  }
}

TEST(ReduceCuda, SumSquaresAndMaxAbs) {
  FC_REQUIRE_CUDA();
  Generator gen(203);
  for (DType t : {DType::f32, DType::bf16}) {
    for (const Shape& s : std::vector<Shape>{{1}, {1027}, {300, 999}}) {
      Tensor x = randn(s, gen, 0, 2).to(t);
      Tensor gx = x.to(kGpu);
      const double ss = ops::sum_squares(x);
      // fp32 per-thread partials combined in double: relative 1e-5.
      EXPECT_NEAR(ops::sum_squares(gx), ss, 1e-5 * ss);
      EXPECT_EQ(ops::sum_squares(gx), ops::sum_squares(gx));  // deterministic
      EXPECT_EQ(ops::max_abs(gx), ops::max_abs(x));           // max is exact
    }
  }
  Tensor m = randn({64, 33}, gen);
  EXPECT_NEAR(ops::sum_squares(m.to(kGpu).transpose(0, 1)), ops::sum_squares(m), 1e-5 * ops::sum_squares(m));
  std::vector<float> v = m.to_vector();
  v[100] = std::numeric_limits<float>::quiet_NaN();
  Tensor nan = Tensor::from_vector(v, {64, 33}, DType::f32, kGpu);
  EXPECT_TRUE(std::isnan(ops::max_abs(nan)));
  EXPECT_TRUE(std::isnan(ops::sum_squares(nan)));
}

}  // namespace
}  // namespace foldcore
