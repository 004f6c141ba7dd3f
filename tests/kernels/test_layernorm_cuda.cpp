// CUDA LayerNorm vs the CPU reference, f32 and bf16. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/kernel_profile.h"
#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "test_util.h"

namespace foldcore {
namespace {

struct Outs {
  Tensor y, mean, rstd, dx, dgamma, dbeta;
};

Outs run(Device dev, const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  Outs o;
  o.y = Tensor::zeros(x.shape(), x.dtype(), dev);
  o.dx = Tensor::zeros(x.shape(), x.dtype(), dev);
  o.mean = Tensor::zeros({rows}, DType::f32, dev);
  o.rstd = Tensor::zeros({rows}, DType::f32, dev);
  o.dgamma = Tensor::full({c}, 0.5, DType::f32, dev);  // accumulation target
  o.dbeta = Tensor::full({c}, -0.5, DType::f32, dev);
  const Tensor xd = x.to(dev), g = gamma.to(dev);
  ops::layernorm_forward(xd, g, beta.to(dev), 1e-5f, o.y, o.mean, o.rstd);
  ops::layernorm_backward(dy.to(dev), xd, g, o.mean, o.rstd, o.dx, o.dgamma, o.dbeta);
  for (Tensor* t : {&o.y, &o.mean, &o.rstd, &o.dx, &o.dgamma, &o.dbeta}) *t = t->to(Device::cpu());
  return o;
}

// Row lengths: warp path (odd, vector-aligned 128/256/1024), block path (odd and aligned > 1024).
// The backward's one-pass form (the parameters' sums in the dx pass) takes rows of up to 4 slots
// of 32 lanes × V elements per lane (16 accumulators per sum and lane): 1 slot (c = 64, 96, 128
// in f32; 128, 256 in bf16), 2 (c = 33 element by element; 512 in bf16), 4 (c = 384 in f32,
// 3 slots used); 4,100 rows make 128 chunks of 33 rows: the last rows (8) in chunk 124, chunks
// 125-127 empty. c = 129 (5 slots element by element), 1,024 and the block path take the
// two-pass form.
const Shape kShapes[] = {{1, 1},    {7, 33},      {3, 5, 128}, {65, 256}, {9, 1024},  {5, 1031},
                         {4, 4096}, {1000, 64},   {4100, 128}, {130, 384}, {300, 512}, {40, 129}, {70, 96}};

void compare(DType dt, double atol, double rtol, uint64_t seed) {
  Generator gen(seed);
  for (const Shape& s : kShapes) {
    const int64_t c = s.back(), rows = s.product() / c;
    Tensor x = randn(s, gen, 0.5f, 2.f, dt), dy = randn(s, gen, 0, 1, dt);
    Tensor gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    const Outs ref = run(Device::cpu(), x, dy, gamma, beta);
    const Outs got = run(Device::cuda(), x, dy, gamma, beta);
    SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)));
    FC_EXPECT_CLOSE(got.y, ref.y, atol, rtol);
    FC_EXPECT_CLOSE(got.dx, ref.dx, atol, rtol);
    FC_EXPECT_CLOSE(got.mean, ref.mean, 1e-5, 1e-5);
    FC_EXPECT_CLOSE(got.rstd, ref.rstd, 1e-5, 1e-4);
    // Column sums over `rows` fp32 terms in different orders.
    FC_EXPECT_CLOSE(got.dgamma, ref.dgamma, 1e-5 * rows + 1e-5, 1e-4);
    FC_EXPECT_CLOSE(got.dbeta, ref.dbeta, 1e-5 * rows + 1e-5, 1e-4);
  }
}

// f32: fp32 statistics on both sides, differing only in summation order (~1e-6 relative).
TEST(LayerNormCuda, MatchesCpuF32) {
  FC_REQUIRE_CUDA();
  compare(DType::f32, 1e-4, 1e-4, 500);
}

// bf16 storage: identical inputs, fp32 math; y/dx rounded to bf16 (2⁻⁸ relative) from fp32
// values that differ by ~1e-6, so at most one ulp apart: 1e-2 relative, 2e-2 absolute for |y| ~ 5.
TEST(LayerNormCuda, MatchesCpuBf16) {
  FC_REQUIRE_CUDA();
  compare(DType::bf16, 2e-2, 1e-2, 501);
}

// On the device, a 16-bit y for an f32 x equals the device's f32 y converted (bit for bit), the
// backward from a 16-bit dy equals the one from dy converted to f32, and accumulate_dx equals the
// gradient added afterwards; the warp path (c = 128, vectorised, and c = 33) and the block path
// (c = 1,031), each against the same composition on the device.
TEST(LayerNormCuda, SixteenBitOutputAndAccumulatedGradientMatchTheComposition) {
  FC_REQUIRE_CUDA();
  Generator gen(503);
  const Device dev = Device::cuda();
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::f32).to_vector(); };
  for (const Shape& s : {Shape{70, 128}, Shape{7, 33}, Shape{5, 1031}}) {
    for (DType y16 : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(y16)));
      const int64_t c = s.back(), rows = s.product() / c;
      const Tensor x = randn(s, gen, 0.5f, 2.f).to(dev), gamma = randn({c}, gen, 1.f, 0.3f).to(dev);
      const Tensor beta = randn({c}, gen).to(dev);
      Tensor y = Tensor::empty(s, DType::f32, dev), yh = Tensor::empty(s, y16, dev);
      Tensor mean = Tensor::empty({rows}, DType::f32, dev), rstd = Tensor::empty({rows}, DType::f32, dev);
      ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
      ops::layernorm_forward(x, gamma, beta, 1e-5f, yh, mean, rstd);
      EXPECT_EQ(host(yh), host(y.to(y16)));
      const Tensor dyh = randn(s, gen, 0, 1, y16).to(dev), prev = randn(s, gen).to(dev);
      Tensor dx = Tensor::empty(s, DType::f32, dev), dxh = Tensor::empty(s, DType::f32, dev), acc = prev.clone();
      Tensor dg = Tensor::zeros({c}, DType::f32, dev), db = Tensor::zeros({c}, DType::f32, dev);
      Tensor dgh = Tensor::zeros({c}, DType::f32, dev), dbh = Tensor::zeros({c}, DType::f32, dev);
      ops::layernorm_backward(dyh.to(DType::f32), x, gamma, mean, rstd, dx, dg, db);
      ops::layernorm_backward(dyh, x, gamma, mean, rstd, dxh, dgh, dbh);
      EXPECT_EQ(host(dxh), host(dx));
      EXPECT_EQ(host(dgh), host(dg));
      EXPECT_EQ(host(dbh), host(db));
      ops::layernorm_backward(dyh, x, gamma, mean, rstd, acc, dgh, dbh, true);
      Tensor sum = Tensor::empty(s, DType::f32, dev);
      ops::add(prev, dx, sum);
      EXPECT_EQ(host(acc), host(sum));
    }
  }
}

// On the device, the backward of a bf16 x from an fp32 dy (dy read 32 bytes at a time beside 16 of
// x) equals the CPU's, which equals the fp32 backward rounded (the previous file's test): dx within
// one bf16 ulp of values summed in other orders (2^-8 relative), dgamma and dbeta as the f32
// comparison; the one-pass form (c = 128, 256), element by element (c = 33) and the two-pass form
// (c = 1,031).
TEST(LayerNormCuda, Fp32GradientOfABf16InputMatchesCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(504);
  for (const Shape& s : {Shape{70, 128}, Shape{4100, 256}, Shape{7, 33}, Shape{5, 1031}}) {
    SCOPED_TRACE(s.str());
    const int64_t c = s.back(), rows = s.product() / c;
    const Tensor x = randn(s, gen, 0.5f, 2.f, DType::bf16), dy = randn(s, gen);
    const Tensor gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    auto run_on = [&](Device dev) {
      Tensor y = Tensor::empty(s, DType::bf16, dev), mean = Tensor::empty({rows}, DType::f32, dev);
      Tensor rstd = Tensor::empty({rows}, DType::f32, dev), dx = Tensor::empty(s, DType::bf16, dev);
      Tensor dg = Tensor::zeros({c}, DType::f32, dev), db = Tensor::zeros({c}, DType::f32, dev);
      const Tensor xd = x.to(dev), g = gamma.to(dev);
      ops::layernorm_forward(xd, g, beta.to(dev), 1e-5f, y, mean, rstd);
      ops::layernorm_backward(dy.to(dev), xd, g, mean, rstd, dx, dg, db);
      return std::vector<Tensor>{dx.to(Device::cpu()).to(DType::f32), dg.to(Device::cpu()), db.to(Device::cpu())};
    };
    const auto got = run_on(Device::cuda()), ref = run_on(Device::cpu());
    FC_EXPECT_CLOSE(got[0], ref[0], 2e-2, 1e-2);
    FC_EXPECT_CLOSE(got[1], ref[1], 1e-5 * rows + 1e-5, 1e-4);
    FC_EXPECT_CLOSE(got[2], ref[2], 1e-5 * rows + 1e-5, 1e-4);
  }
}

// Which form of the backward ran: the one-pass kernel (and its chunk sum) where the row fits, the
// dx kernel and ln_param_kernel otherwise; so the shapes above test both.
TEST(LayerNormCuda, BackwardFormFollowsTheRowLength) {
  FC_REQUIRE_CUDA();
  Generator gen(504);
  auto kernels_for = [&](const Shape& s, DType dt) {
    Tensor x = randn(s, gen, 0.5f, 2.f, dt), dy = randn(s, gen, 0, 1, dt);
    Tensor gamma = randn({s.back()}, gen, 1.f, 0.3f), beta = randn({s.back()}, gen);
    kernel_profile::reset();
    kernel_profile::set_enabled(true);
    run(Device::cuda(), x, dy, gamma, beta);
    kernel_profile::set_enabled(false);
    std::string names;
    for (const auto& row : kernel_profile::collect().kernels) names += row.name + "\n";
    return names;
  };
  for (const auto& [s, dt, one_pass] : {std::tuple{Shape{300, 128}, DType::f32, true},
                                        std::tuple{Shape{30, 384}, DType::f32, true},
                                        std::tuple{Shape{30, 512}, DType::bf16, true},
                                        std::tuple{Shape{30, 33}, DType::f32, true},
                                        std::tuple{Shape{30, 129}, DType::f32, false},
                                        std::tuple{Shape{9, 1024}, DType::f32, false},
                                        std::tuple{Shape{3, 1031}, DType::f32, false}}) {
    SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)));
    const std::string names = kernels_for(s, dt);
    EXPECT_EQ(names.find("ln_backward_fused_kernel") != std::string::npos, one_pass) << names;
    EXPECT_EQ(names.find("ln_param_finalize_kernel") != std::string::npos, one_pass) << names;
    EXPECT_EQ(names.find("ln_param_kernel") != std::string::npos, !one_pass) << names;
    EXPECT_EQ(names.find("ln_backward_dx_kernel") != std::string::npos, !one_pass) << names;
  }
}

// The two-pass form, chosen where the one-pass form would run: the same dx bit for bit (the same
// per-row math in the same order), and the parameters' sums to fp32 rounding (other orders).
TEST(LayerNormCuda, TwoPassFormMatchesOnePass) {
  FC_REQUIRE_CUDA();
  Generator gen(505);
  for (const auto& [s, dt] : {std::pair{Shape{4100, 128}, DType::f32}, std::pair{Shape{130, 384}, DType::f32},
                              std::pair{Shape{300, 512}, DType::bf16}}) {
    SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)));
    Tensor x = randn(s, gen, 0.5f, 2.f, dt), dy = randn(s, gen, 0, 1, dt);
    Tensor gamma = randn({s.back()}, gen, 1.f, 0.3f), beta = randn({s.back()}, gen);
    const Outs one = run(Device::cuda(), x, dy, gamma, beta);
    ops::set_layernorm_backward_one_pass(false);
    kernel_profile::reset();
    kernel_profile::set_enabled(true);
    const Outs two = run(Device::cuda(), x, dy, gamma, beta);
    kernel_profile::set_enabled(false);
    ops::set_layernorm_backward_one_pass(true);
    std::string names;  // the two-pass form did run
    for (const auto& row : kernel_profile::collect().kernels) names += row.name + "\n";
    EXPECT_EQ(names.find("ln_backward_fused_kernel"), std::string::npos) << names;
    EXPECT_NE(names.find("ln_param_kernel"), std::string::npos) << names;
    EXPECT_EQ(one.dx.to(DType::f32).to_vector(), two.dx.to(DType::f32).to_vector());
    const double rows = static_cast<double>(s.product() / s.back());
    FC_EXPECT_CLOSE(one.dgamma, two.dgamma, 1e-5 * rows, 1e-4);
    FC_EXPECT_CLOSE(one.dbeta, two.dbeta, 1e-5 * rows, 1e-4);
  }
}

TEST(LayerNormCuda, ParameterGradientsAreDeterministic) {
  FC_REQUIRE_CUDA();
  Generator gen(502);
  Tensor x = randn({4096, 128}, gen), dy = randn({4096, 128}, gen);
  Tensor gamma = randn({128}, gen), beta = randn({128}, gen);
  const Outs a = run(Device::cuda(), x, dy, gamma, beta);
  const Outs b = run(Device::cuda(), x, dy, gamma, beta);
  EXPECT_EQ(a.dgamma.to_vector(), b.dgamma.to_vector());
  EXPECT_EQ(a.dbeta.to_vector(), b.dbeta.to_vector());
}

// run_on(device) → tensors, on the device (with the names of the kernels it launched) and on the
// CPU, every tensor returned as host f32.
struct DeviceAndCpu {
  std::vector<Tensor> got, ref;
  std::string kernels;
};
template <typename F> DeviceAndCpu on_device_and_cpu(F&& run_on) {
  DeviceAndCpu r;
  kernel_profile::reset();
  kernel_profile::set_enabled(true);
  r.got = run_on(Device::cuda());
  kernel_profile::set_enabled(false);
  r.ref = run_on(Device::cpu());
  for (const auto& row : kernel_profile::collect().kernels) r.kernels += row.name + "\n";
  for (std::vector<Tensor>* v : {&r.got, &r.ref})
    for (Tensor& t : *v) t = t.to(Device::cpu()).to(DType::f32);
  return r;
}

// The channel-major op (x [C, rows...] read and dx written through shared-memory tiles of 32 rows)
// against the CPU (the row-major op on x's transpose), with the kernels that ran named: the tiled
// ones for C ≤ 128, the transposed copy and the row kernels beyond. Shapes: one channel; a partial
// last tile (33, 100 rows); 1,250 tiles (40,000 rows: two tiles per block, 625 blocks); C = 129.
// Dtypes: f32; bf16; an f32 x with a bf16 y (and a bf16 dy); a bf16 x with an f32 dy (the GEMMs'
// gradient). Tolerances as MatchesCpuF32 / MatchesCpuBf16 (the same math, other summation orders);
// accumulate_dx adds the rounded gradient to dx's contents (the CPU's composition, within the same
// tolerance). A second run gives the same parameter gradients bit for bit.
TEST(LayerNormCuda, ChannelMajorMatchesCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(506);
  struct Case {
    Shape s;
    DType x, y, dy;
  };
  const Case cases[] = {{{1, 5}, DType::f32, DType::f32, DType::f32},
                        {{7, 33}, DType::f32, DType::f32, DType::f32},
                        {{128, 4, 25}, DType::f32, DType::f32, DType::f32},
                        {{128, 4, 25}, DType::bf16, DType::bf16, DType::bf16},
                        {{16, 40000}, DType::f32, DType::f32, DType::f32},
                        {{32, 100}, DType::f32, DType::bf16, DType::bf16},
                        {{128, 70}, DType::bf16, DType::bf16, DType::f32},
                        {{129, 40}, DType::f32, DType::f32, DType::f32},
                        {{129, 40}, DType::bf16, DType::bf16, DType::f32}};
  for (const Case& k : cases) {
    const bool bf16 = k.x == DType::bf16 || k.y == DType::bf16;
    SCOPED_TRACE(k.s.str() + " x " + std::string(dtype_name(k.x)) + " y " + std::string(dtype_name(k.y)) + " dy " +
                 std::string(dtype_name(k.dy)));
    const int64_t c = k.s[0], rows = k.s.product() / c;
    std::vector<int64_t> last(k.s.begin() + 1, k.s.end());
    last.push_back(c);
    const Shape ys(last);
    const Tensor x = randn(k.s, gen, 0.5f, 2.f, k.x), dy = randn(ys, gen, 0, 1, k.dy), prev = randn(k.s, gen, 0, 1, k.x);
    const Tensor gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    auto run_on = [&](Device dev) {
      Tensor y = Tensor::empty(ys, k.y, dev), mean = Tensor::empty({rows}, DType::f32, dev);
      Tensor rstd = Tensor::empty({rows}, DType::f32, dev), dx = Tensor::empty(k.s, k.x, dev), acc = prev.to(dev);
      Tensor dg = Tensor::full({c}, 0.5, DType::f32, dev), db = Tensor::full({c}, -0.5, DType::f32, dev);
      const Tensor xd = x.to(dev), g = gamma.to(dev), dyd = dy.to(dev);
      ops::layernorm_channel_major_forward(xd, g, beta.to(dev), 1e-5f, y, mean, rstd);
      ops::layernorm_channel_major_backward(dyd, xd, g, mean, rstd, dx, dg, db);
      Tensor dg2 = Tensor::full({c}, 0.5, DType::f32, dev), db2 = Tensor::full({c}, -0.5, DType::f32, dev);
      ops::layernorm_channel_major_backward(dyd, xd, g, mean, rstd, acc, dg2, db2, true);
      return std::vector<Tensor>{y, mean, rstd, dx, dg, db, acc, dg2, db2};
    };
    const DeviceAndCpu r = on_device_and_cpu(run_on);
    const auto& got = r.got;
    const auto& ref = r.ref;
    const std::string& names = r.kernels;
    const bool tiled = c <= 128;
    EXPECT_EQ(names.find("ln_cm_forward_kernel") != std::string::npos, tiled) << names;
    EXPECT_EQ(names.find("ln_cm_backward_kernel") != std::string::npos, tiled) << names;
    EXPECT_EQ(names.find("ln_forward_kernel") != std::string::npos, !tiled) << names;
    const double atol = bf16 ? 2e-2 : 1e-4, rtol = bf16 ? 1e-2 : 1e-4;
    FC_EXPECT_CLOSE(got[0], ref[0], atol, rtol);            // y
    FC_EXPECT_CLOSE(got[1], ref[1], 1e-5, 1e-5);            // mean
    FC_EXPECT_CLOSE(got[2], ref[2], 1e-5, 1e-4);            // rstd
    FC_EXPECT_CLOSE(got[3], ref[3], atol, rtol);            // dx
    for (int i : {4, 5, 7, 8}) FC_EXPECT_CLOSE(got[i], ref[i], 1e-5 * rows + 1e-5, 1e-4);  // dγ, dβ
    FC_EXPECT_CLOSE(got[6], ref[6], 2 * atol, rtol);        // prev + dx, rounded twice in bf16
    EXPECT_EQ(got[4].to_vector(), got[7].to_vector());      // the same sums, the same bits
    EXPECT_EQ(got[5].to_vector(), got[8].to_vector());
  }
}

// LayerNorm and a head-major projection on the device (one kernel each way for C ≤ 128, H ≤ 8;
// the composition beyond) against the CPU (the composition), with the kernels that ran named.
// Shapes: C < 32 and odd; a partial last tile; H = 1; 9,000 rows (282 tiles: two per block);
// C = 129 and H = 9 (composed). Dtypes: f32; w in bf16 (an f32 x) from a bf16 and an f32 dout; a
// bf16 x and w. Tolerances as ChannelMajorMatchesCpu, out within one bf16 ulp; dw sums `rows` terms
// in other orders; accumulate_dx as there. A second run gives the same parameter gradients bit for bit.
TEST(LayerNormCuda, ProjectHeadsMatchesCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(507);
  struct Case {
    Shape s;
    int64_t heads;
    DType x, w, dout;
  };
  const Case cases[] = {{{7, 5}, 3, DType::f32, DType::f32, DType::f32},
                        {{33, 128}, 8, DType::f32, DType::f32, DType::f32},
                        {{4, 25, 96}, 1, DType::f32, DType::f32, DType::f32},
                        {{9000, 128}, 8, DType::f32, DType::bf16, DType::bf16},
                        {{70, 128}, 8, DType::f32, DType::bf16, DType::f32},
                        {{70, 64}, 4, DType::bf16, DType::bf16, DType::f32},
                        {{10, 129}, 4, DType::f32, DType::f32, DType::f32},
                        {{10, 64}, 9, DType::bf16, DType::bf16, DType::bf16}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.s.str() + " heads " + std::to_string(k.heads) + " x " + std::string(dtype_name(k.x)) + " w " +
                 std::string(dtype_name(k.w)) + " dout " + std::string(dtype_name(k.dout)));
    const int64_t c = k.s.back(), rows = k.s.product() / c;
    std::vector<int64_t> hd{k.heads};
    for (int d = 0; d + 1 < k.s.size(); ++d) hd.push_back(k.s[d]);
    const Shape hs(hd);
    const Tensor x = randn(k.s, gen, 0.5f, 2.f, k.x), prev = randn(k.s, gen, 0, 1, k.x);
    const Tensor gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    const Tensor w = randn({c, k.heads}, gen, 0.f, 0.3f).to(k.w), dout = randn(hs, gen, 0, 1, k.dout);
    auto run_on = [&](Device dev) {
      Tensor out = Tensor::empty(hs, k.w, dev), mean = Tensor::empty({rows}, DType::f32, dev);
      Tensor rstd = Tensor::empty({rows}, DType::f32, dev), dx = Tensor::empty(k.s, k.x, dev), acc = prev.to(dev);
      Tensor dg = Tensor::full({c}, 0.5, DType::f32, dev), db = Tensor::full({c}, -0.5, DType::f32, dev);
      Tensor dw = Tensor::full({c, k.heads}, 0.25, DType::f32, dev);
      Tensor dg2 = Tensor::full({c}, 0.5, DType::f32, dev), db2 = Tensor::full({c}, -0.5, DType::f32, dev);
      Tensor dw2 = Tensor::full({c, k.heads}, 0.25, DType::f32, dev);
      const Tensor xd = x.to(dev), g = gamma.to(dev), b = beta.to(dev), wd = w.to(dev), dd = dout.to(dev);
      ops::layernorm_project_heads_forward(xd, g, b, 1e-5f, wd, out, mean, rstd);
      ops::layernorm_project_heads_backward(dd, xd, g, b, 1e-5f, mean, rstd, wd, dx, dg, db, dw);
      ops::layernorm_project_heads_backward(dd, xd, g, b, 1e-5f, mean, rstd, wd, acc, dg2, db2, dw2, true);
      return std::vector<Tensor>{out, mean, rstd, dx, dg, db, dw, acc, dg2, db2, dw2};
    };
    const DeviceAndCpu r = on_device_and_cpu(run_on);
    const auto& got = r.got;
    const auto& ref = r.ref;
    const std::string& names = r.kernels;
    const bool fused = c <= 128 && k.heads <= 8;
    EXPECT_EQ(names.find("ln_project_forward_kernel") != std::string::npos, fused) << names;
    EXPECT_EQ(names.find("ln_project_backward_kernel") != std::string::npos, fused) << names;
    const bool bf16 = k.x == DType::bf16 || k.w == DType::bf16;
    const double atol = bf16 ? 2e-2 : 1e-4, rtol = bf16 ? 1e-2 : 1e-4;
    FC_EXPECT_CLOSE(got[0], ref[0], atol, rtol);  // out
    FC_EXPECT_CLOSE(got[1], ref[1], 1e-5, 1e-5);  // mean
    FC_EXPECT_CLOSE(got[2], ref[2], 1e-5, 1e-4);  // rstd
    FC_EXPECT_CLOSE(got[3], ref[3], atol, rtol);  // dx
    for (int i : {4, 5, 6, 8, 9, 10}) FC_EXPECT_CLOSE(got[i], ref[i], 1e-5 * rows + 1e-5, 1e-4);  // dγ, dβ, dw
    FC_EXPECT_CLOSE(got[7], ref[7], 2 * atol, rtol);                                            // prev + dx
    for (int i : {4, 5, 6}) EXPECT_EQ(got[i].to_vector(), got[i + 4].to_vector());             // the same sums
  }
}

}  // namespace
}  // namespace foldcore
