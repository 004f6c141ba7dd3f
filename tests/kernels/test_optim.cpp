// CPU optimizer kernels against a naive double-precision implementation (per element for Adam,
// per tensor for LAMB), over several steps, plus known answers.
//
// Tolerances: the kernels run in fp32, the reference in double. Parameters are O(1), lr ≤ 1e-2
// and the Adam/LAMB directions are O(1) with fp32 relative error of a few 1e-7, so after 6 steps
// the parameter error is dominated by the fp32 rounding of p itself (ulp(1) ≈ 1.2e-7 per step):
// atol 2e-6, rtol 1e-5. v is a sum of positive terms: rtol 1e-5. m is a sum of signed terms that
// may cancel to near zero, so its error is absolute: ~1 ulp of the O(1) terms (6e-8) per step,
// 6 steps: atol 5e-7.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/random.h"
#include "kernels/optim.h"
#include "test_util.h"

namespace foldcore {
namespace {

using ops::ParamSegment;

struct RefState {
  std::vector<double> p, m, v;
};

std::vector<double> to_double(const Tensor& t) {
  const auto f = t.to_vector();
  return {f.begin(), f.end()};
}
Tensor to_tensor(const std::vector<double>& d) {
  std::vector<float> f(d.begin(), d.end());
  return Tensor::from_vector(f, {static_cast<int64_t>(f.size())});
}

// Element i's weight-decay flag, or -1 when it lies in no segment (padding, never touched).
std::vector<int> decay_flags(int64_t n, const std::vector<ParamSegment>& segs) {
  std::vector<int> flag(static_cast<size_t>(n), segs.empty() ? 1 : -1);
  for (const auto& s : segs)
    for (int64_t i = s.offset; i < s.offset + s.size; ++i) flag[i] = s.weight_decay ? 1 : 0;
  return flag;
}

void ref_adam(RefState& st, const std::vector<float>& grad, const ops::AdamArgs& a,
              const std::vector<ParamSegment>& segs) {
  const auto flag = decay_flags(static_cast<int64_t>(st.p.size()), segs);
  const double b1 = a.beta1, b2 = a.beta2, t = static_cast<double>(a.step);
  const double bc1 = a.bias_correction ? 1 - std::pow(b1, t) : 1.0;
  const double bc2 = a.bias_correction ? 1 - std::pow(b2, t) : 1.0;
  for (size_t i = 0; i < st.p.size(); ++i) {
    if (flag[i] < 0) continue;
    const double wd = flag[i] ? a.weight_decay : 0.0;
    double g = static_cast<double>(grad[i]) * a.grad_scale;
    if (!a.decoupled) g += wd * st.p[i];
    st.m[i] = b1 * st.m[i] + (1 - b1) * g;
    st.v[i] = b2 * st.v[i] + (1 - b2) * g * g;
    const double dir = (st.m[i] / bc1) / (std::sqrt(st.v[i] / bc2) + a.eps);
    st.p[i] -= a.lr * (dir + (a.decoupled ? wd * st.p[i] : 0.0));
  }
}

void ref_lamb(RefState& st, const std::vector<float>& grad, const ops::LambArgs& a,
              const std::vector<ParamSegment>& segs) {
  const double b1 = a.beta1, b2 = a.beta2, t = static_cast<double>(a.step);
  const double bc1 = a.bias_correction ? 1 - std::pow(b1, t) : 1.0;
  const double bc2 = a.bias_correction ? 1 - std::pow(b2, t) : 1.0;
  for (const auto& s : segs) {
    const double wd = s.weight_decay ? a.weight_decay : 0.0;
    std::vector<double> u(static_cast<size_t>(s.size));
    double pn = 0, un = 0;
    for (int64_t j = 0; j < s.size; ++j) {
      const size_t i = static_cast<size_t>(s.offset + j);
      const double g = static_cast<double>(grad[i]) * a.grad_scale;
      st.m[i] = b1 * st.m[i] + (1 - b1) * g;
      st.v[i] = b2 * st.v[i] + (1 - b2) * g * g;
      u[j] = (st.m[i] / bc1) / (std::sqrt(st.v[i] / bc2) + a.eps) + wd * st.p[i];
      pn += st.p[i] * st.p[i];
      un += u[j] * u[j];
    }
    const double r = (pn > 0 && un > 0) ? std::sqrt(pn) / std::sqrt(un) : 1.0;
    for (int64_t j = 0; j < s.size; ++j) st.p[s.offset + j] -= a.lr * r * u[j];
  }
}

// A layout like a small model: a multi-chunk weight, odd sizes, a zero-initialised no-decay bias,
// an empty tensor, and gaps (alignment padding) that must stay untouched.
std::vector<ParamSegment> mixed_segments() {
  return {{0, 9001, true}, {9001, 37, false}, {9040, 0, true}, {9040, 1234, true}, {10300, 513, false},
          {10813, 4096, true}, {14912, 3, false}};
}
constexpr int64_t kN = 14920;

struct Buffers {
  Tensor p, g, m, v;
};
Buffers make_buffers(int64_t n, Generator& gen, const std::vector<ParamSegment>& zero_segments = {}) {
  Buffers b{randn({n}, gen), Tensor::zeros({n}, DType::f32), Tensor::zeros({n}, DType::f32),
            Tensor::zeros({n}, DType::f32)};
  for (const auto& s : zero_segments) b.p.narrow(0, s.offset, s.size).zero_();
  return b;
}

void expect_state(const Buffers& b, const RefState& st) {
  FC_EXPECT_CLOSE(b.p, to_tensor(st.p), 2e-6, 1e-5);
  FC_EXPECT_CLOSE(b.m, to_tensor(st.m), 5e-7, 1e-5);
  FC_EXPECT_CLOSE(b.v, to_tensor(st.v), 1e-10, 1e-5);
}

struct AdamCase {
  bool decoupled, bias_correction, with_segments;
  float grad_scale;
};

TEST(OptimCpu, AdamAndAdamWMatchNaiveOverSteps) {
  const AdamCase cases[] = {{true, true, true, 1.f},    {false, true, true, 1.f},  {true, false, true, 1.f},
                            {false, false, true, 0.37f}, {true, true, false, 0.5f}, {false, true, false, 1.f}};
  for (const AdamCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "decoupled=" << c.decoupled << " bias_correction=" << c.bias_correction
                                      << " segments=" << c.with_segments << " grad_scale=" << c.grad_scale);
    Generator gen(7);
    const auto segs = c.with_segments ? mixed_segments() : std::vector<ParamSegment>{};
    Buffers b = make_buffers(kN, gen);
    const std::vector<float> p0 = b.p.to_vector();
    RefState st{to_double(b.p), std::vector<double>(kN, 0.0), std::vector<double>(kN, 0.0)};
    ops::AdamArgs a;
    a.lr = 1e-2f;
    a.weight_decay = 0.05f;
    a.decoupled = c.decoupled;
    a.bias_correction = c.bias_correction;
    a.grad_scale = c.grad_scale;
    const ops::SegmentTable table(segs, kN, Device::cpu());
    for (int step = 1; step <= 6; ++step) {
      a.step = step;
      b.g = randn({kN}, gen);
      ref_adam(st, b.g.to_vector(), a, segs);
      // Alternate the two entry points: they must agree.
      if (step % 2) ops::adam_step(b.p, b.g, b.m, b.v, a, segs);
      else ops::adam_step(b.p, b.g, b.m, b.v, a, table);
    }
    expect_state(b, st);
    // Padding outside every segment is bit-for-bit untouched.
    const auto flag = decay_flags(kN, segs);
    const auto p = b.p.to_vector();
    for (int64_t i = 0; i < kN; ++i)
      if (flag[i] < 0) {
        EXPECT_EQ(p[i], p0[i]) << "padding element " << i << " changed";
      }
  }
}

TEST(OptimCpu, AdamFirstStepMovesByLrTimesSign) {
  // Step 1 with bias correction: m̂ = g, v̂ = g², so Δp = −lr·g/(|g|+eps) ≈ −lr·sign(g).
  Generator gen(11);
  const int64_t n = 2049;
  Tensor p = rand_uniform({n}, gen, -1.f, 1.f);
  Tensor g = randn({n}, gen);
  auto gv = g.to_vector();
  for (auto& x : gv) x = (x >= 0 ? 1.f : -1.f) * (1e-3f + std::fabs(x));  // |g| ≥ 1e-3: eps/|g| ≤ 1e-5
  g = Tensor::from_vector(gv, {n});
  for (bool decoupled : {true, false}) {
    Tensor q = p.clone(), m = Tensor::zeros({n}, DType::f32), v = Tensor::zeros({n}, DType::f32);
    ops::AdamArgs a;
    a.lr = 1e-3f;
    a.weight_decay = decoupled ? 0.1f : 0.f;  // AdamW adds −lr·wd·p; L2 Adam keeps the pure sign step
    a.decoupled = decoupled;
    ops::adam_step(q, g, m, v, a);
    const auto pv = p.to_vector(), qv = q.to_vector();
    for (int64_t i = 0; i < n; ++i) {
      const float expect = pv[i] - a.lr * (gv[i] > 0 ? 1.f : -1.f) - a.lr * a.weight_decay * pv[i];
      // two fp32 roundings of |p| ≤ 1 (ulp 1.2e-7) plus lr·eps/|g| ≤ 1e-8
      EXPECT_NEAR(qv[i], expect, 3e-7) << "element " << i;
    }
  }
}

TEST(OptimCpu, ClippingThroughGradScaleEqualsPrescaledGradients) {
  Generator gen(3);
  const int64_t n = 5000;
  Buffers b = make_buffers(n, gen);
  b.g = randn({n}, gen, 0.f, 3.f);
  const double norm = ops::global_grad_norm(b.g);
  const float s = ops::clip_scale(norm, 1.f);
  ASSERT_LT(s, 1.f);
  Buffers c{b.p.clone(), b.g.clone(), b.m.clone(), b.v.clone()};
  auto gs = c.g.to_vector();
  for (auto& x : gs) x *= s;
  c.g = Tensor::from_vector(gs, {n});
  ops::AdamArgs a;
  a.grad_scale = s;
  ops::adam_step(b.p, b.g, b.m, b.v, a);
  a.grad_scale = 1.f;
  ops::adam_step(c.p, c.g, c.m, c.v, a);
  // grad·scale is the same fp32 product in both: identical results.
  FC_EXPECT_CLOSE(b.p, c.p, 0, 0);
  FC_EXPECT_CLOSE(b.v, c.v, 0, 0);
  // The clipped gradients have norm max_norm (up to the 1e-6 guard).
  EXPECT_NEAR(ops::global_grad_norm(c.g), 1.0, 1e-5);
}

struct LambCase {
  bool bias_correction;
  float grad_scale, weight_decay;
};

TEST(OptimCpu, LambMatchesNaivePerTensorOverSteps) {
  const LambCase cases[] = {{true, 1.f, 0.01f}, {false, 1.f, 0.01f}, {true, 0.25f, 0.1f}, {false, 2.f, 0.f}};
  const auto segs = mixed_segments();
  for (const LambCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "bias_correction=" << c.bias_correction << " grad_scale=" << c.grad_scale
                                      << " wd=" << c.weight_decay);
    Generator gen(5);
    // The no-decay bias starts at zero: its trust ratio must fall back to 1 on the first step.
    Buffers b = make_buffers(kN, gen, {segs[1]});
    const std::vector<float> p0 = b.p.to_vector();
    RefState st{to_double(b.p), std::vector<double>(kN, 0.0), std::vector<double>(kN, 0.0)};
    ops::LambArgs a;
    a.lr = 5e-3f;
    a.weight_decay = c.weight_decay;
    a.bias_correction = c.bias_correction;
    a.grad_scale = c.grad_scale;
    for (int step = 1; step <= 6; ++step) {
      a.step = step;
      b.g = randn({kN}, gen);
      ref_lamb(st, b.g.to_vector(), a, segs);
      ops::lamb_step(b.p, b.g, b.m, b.v, a, segs);
    }
    expect_state(b, st);
    const auto flag = decay_flags(kN, segs);
    const auto p = b.p.to_vector();
    for (int64_t i = 0; i < kN; ++i)
      if (flag[i] < 0) {
        EXPECT_EQ(p[i], p0[i]) << "padding element " << i << " changed";
      }
  }
}

TEST(OptimCpu, LambFirstStepKnownAnswer) {
  // wd = 0, step 1 with bias correction: u = g/(|g|+eps) ≈ sign(g), ‖u‖ = √n,
  // so p −= lr·(‖p‖/√n)·sign(g); a zero segment gets ratio 1: p = −lr·sign(g).
  Generator gen(9);
  const int64_t n0 = 6000, n1 = 77;
  Tensor p = randn({n0 + n1}, gen);
  p.narrow(0, n0, n1).zero_();
  auto gv = randn({n0 + n1}, gen).to_vector();
  for (auto& x : gv) x = (x >= 0 ? 1.f : -1.f) * (1e-2f + std::fabs(x));
  Tensor g = Tensor::from_vector(gv, {n0 + n1});
  Tensor m = Tensor::zeros({n0 + n1}, DType::f32), v = Tensor::zeros({n0 + n1}, DType::f32);
  const auto pv = p.to_vector();
  double pn = 0;
  for (int64_t i = 0; i < n0; ++i) pn += static_cast<double>(pv[i]) * pv[i];
  const double r = std::sqrt(pn) / std::sqrt(static_cast<double>(n0));
  ops::LambArgs a;
  a.lr = 1e-2f;
  a.weight_decay = 0.f;
  ops::lamb_step(p, g, m, v, a, {{0, n0, true}, {n0, n1, false}});
  const auto qv = p.to_vector();
  for (int64_t i = 0; i < n0 + n1; ++i) {
    const double sign = gv[i] > 0 ? 1.0 : -1.0;
    const double expect = i < n0 ? pv[i] - a.lr * r * sign : -a.lr * sign;
    EXPECT_NEAR(qv[i], expect, 1e-6) << "element " << i;  // ulp of |p| ≤ ~4 plus eps/|g| terms
  }
}

TEST(OptimCpu, GlobalGradNormAndClipScale) {
  Generator gen(1);
  for (int64_t n : {1, 4095, 4096, 4097, 30011}) {
    Tensor g = randn({n}, gen);
    double ref = 0;
    for (float x : g.to_vector()) ref += static_cast<double>(x) * x;
    EXPECT_NEAR(ops::global_grad_norm(g), std::sqrt(ref), 1e-9 * std::sqrt(ref)) << "n=" << n;
  }
  EXPECT_NEAR(ops::global_grad_norm(Tensor::full({10000}, 0.5, DType::f32)), 50.0, 1e-12);
  EXPECT_EQ(ops::global_grad_norm(Tensor::zeros({0}, DType::f32)), 0.0);

  EXPECT_NEAR(ops::clip_scale(4.0, 1.f), 0.25, 1e-7);
  EXPECT_EQ(ops::clip_scale(0.5, 1.f), 1.f);
  EXPECT_EQ(ops::clip_scale(100.0, 0.f), 1.f);  // clipping off
  EXPECT_TRUE(std::isnan(ops::clip_scale(std::nan(""), 1.f)));
  EXPECT_TRUE(std::isnan(ops::clip_scale(INFINITY, 1.f)));
}

TEST(OptimCpu, EmaMatchesNaiveOverSteps) {
  Generator gen(21);
  const int64_t n = 7777;
  Tensor ema = randn({n}, gen);
  std::vector<double> ref = to_double(ema);
  const float decay = 0.999f;
  for (int step = 0; step < 5; ++step) {
    Tensor p = randn({n}, gen);
    const auto pv = p.to_vector();
    for (int64_t i = 0; i < n; ++i) ref[i] = decay * ref[i] + (1.0 - decay) * pv[i];
    ops::ema_update(ema, p, decay);
  }
  FC_EXPECT_CLOSE(ema, to_tensor(ref), 1e-6, 1e-6);
  // decay = 0 copies the parameters exactly.
  Tensor p = randn({n}, gen);
  ops::ema_update(ema, p, 0.f);
  FC_EXPECT_CLOSE(ema, p, 0, 0);
}

TEST(OptimCpu, BadInputsGiveClearErrors) {
  const int64_t n = 100;
  Tensor p = Tensor::zeros({n}, DType::f32), g = Tensor::zeros({n}, DType::f32);
  Tensor m = Tensor::zeros({n}, DType::f32), v = Tensor::zeros({n}, DType::f32);
  ops::AdamArgs a;
  EXPECT_THROW(ops::adam_step(p, Tensor::zeros({n + 1}, DType::f32), m, v, a), Error);
  EXPECT_THROW(ops::adam_step(p, g, Tensor::zeros({n}, DType::bf16), v, a), Error);
  EXPECT_THROW(ops::adam_step(p.view({10, 10}), g.view({10, 10}), m.view({10, 10}), v.view({10, 10}), a), Error);
  EXPECT_THROW(ops::adam_step(p, g, m, v, a, {{0, 60, true}, {50, 10, true}}), Error);  // overlap
  EXPECT_THROW(ops::adam_step(p, g, m, v, a, {{90, 20, true}}), Error);                 // out of range
  a.step = 0;
  EXPECT_THROW(ops::adam_step(p, g, m, v, a), Error);
  ops::LambArgs l;
  EXPECT_THROW(ops::lamb_step(p, g, m, v, l, std::vector<ParamSegment>{}), Error);
  const ops::SegmentTable other({{0, 10, true}}, n + 5, Device::cpu());
  EXPECT_THROW(ops::lamb_step(p, g, m, v, l, other), Error);
  EXPECT_THROW(ops::ema_update(p, g, 1.5f), Error);
  try {
    ops::adam_step(p, Tensor::zeros({n + 1}, DType::f32), m, v, ops::AdamArgs{});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adam_step: grads has 101 elements, params has 100"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace foldcore
