// Optimizer classes (wiring of state, step count, lr, segments onto the fused kernels), EMA,
// clipping and learning-rate schedules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/random.h"
#include "nn/checkpoint.h"
#include "nn/optimizer.h"
#include "test_util.h"

namespace foldcore {
namespace {

using ops::ParamSegment;

std::vector<ParamSegment> two_segments(int64_t n0, int64_t n1) { return {{0, n0, true}, {n0, n1, false}}; }

TEST(Optimizer, AdamClassMatchesKernelCallsWithStepCountAndLr) {
  Generator gen(1);
  const int64_t n = 3001;
  const auto segs = two_segments(2000, 1001);
  Tensor p = randn({n}, gen), g = Tensor::zeros({n}, DType::f32);
  Tensor q = p.clone(), m = Tensor::zeros({n}, DType::f32), v = Tensor::zeros({n}, DType::f32);
  nn::AdamConfig cfg;
  cfg.weight_decay = 0.1f;
  nn::Adam opt(p, g, segs, cfg);
  EXPECT_EQ(opt.step_count(), 0);
  for (int t = 1; t <= 4; ++t) {
    g.copy_(randn({n}, gen));
    const float lr = 1e-3f * static_cast<float>(t);  // changing lr, as a schedule does
    opt.set_lr(lr);
    opt.step(0.5f);
    ops::AdamArgs a;
    a.lr = lr;
    a.weight_decay = 0.1f;
    a.step = t;
    a.grad_scale = 0.5f;
    ops::adam_step(q, g, m, v, a, segs);
    EXPECT_EQ(opt.step_count(), t);
  }
  // Same kernels on the same inputs: bit-identical.
  FC_EXPECT_CLOSE(p, q, 0, 0);
  FC_EXPECT_CLOSE(opt.state().at("m"), m, 0, 0);
  FC_EXPECT_CLOSE(opt.state().at("v"), v, 0, 0);
  EXPECT_EQ(opt.state().at("step").to_vector_i64(), std::vector<int64_t>{4});
}

// ½‖p − target‖² has gradient p − target; every optimizer must converge on it with a learning
// rate decayed linearly to 0 (constant-lr Adam/LAMB hover at a distance ∝ lr around the optimum).
template <typename Opt, typename Config>
double quadratic_distance_after(int steps, const Config& cfg, const std::vector<ParamSegment>& segs, int64_t n) {
  Generator gen(2);
  Tensor target = randn({n}, gen);
  Tensor p = randn({n}, gen), g = Tensor::zeros({n}, DType::f32);
  Opt opt(p, g, segs, cfg);
  const nn::BertSchedule schedule({cfg.lr, 0.f, 0, steps, 1.f});
  const auto tv = target.to_vector();
  for (int s = 0; s < steps; ++s) {
    opt.set_lr(schedule.lr(opt.step_count()));
    auto pv = p.to_vector();
    for (int64_t i = 0; i < n; ++i) pv[i] -= tv[i];
    g.copy_(Tensor::from_vector(pv, {n}));
    opt.step();
  }
  double d = 0;
  const auto pv = p.to_vector();
  for (int64_t i = 0; i < n; ++i) d = std::max(d, static_cast<double>(std::fabs(pv[i] - tv[i])));
  return d;
}

TEST(Optimizer, AdamAdamWAndLambConvergeOnAQuadratic) {
  const int64_t n = 300;
  const auto segs = two_segments(200, 100);
  nn::AdamConfig adam;
  adam.lr = 0.05f;
  EXPECT_LT(quadratic_distance_after<nn::Adam>(400, adam, segs, n), 0.01);
  adam.decoupled = false;
  EXPECT_LT(quadratic_distance_after<nn::Adam>(400, adam, {}, n), 0.01);
  nn::LambConfig lamb;
  lamb.lr = 0.05f;
  lamb.weight_decay = 0.f;
  EXPECT_LT(quadratic_distance_after<nn::Lamb>(400, lamb, segs, n), 0.01);
}

TEST(Optimizer, LambDecayRespectsSegmentFlags) {
  // Zero gradients: u = wd·p on decayed segments (r = ‖p‖/‖wd·p‖ = 1/wd, so p ← p(1 − lr)) and
  // u = 0 on no-decay segments (unchanged).
  Generator gen(4);
  const int64_t n = 500;
  Tensor p = randn({n}, gen), g = Tensor::zeros({n}, DType::f32);
  const auto p0 = p.to_vector();
  nn::LambConfig cfg;
  cfg.lr = 0.1f;
  cfg.weight_decay = 0.01f;
  nn::Lamb opt(p, g, two_segments(300, 200), cfg);
  opt.step();
  const auto p1 = p.to_vector();
  for (int64_t i = 0; i < n; ++i) {
    if (i < 300) EXPECT_NEAR(p1[i], p0[i] * 0.9f, 1e-6) << i;
    else EXPECT_EQ(p1[i], p0[i]) << i;
  }
}

TEST(Optimizer, AdamFirstStepIsLrTimesSign) {
  const int64_t n = 64;
  std::vector<float> gv(n);
  for (int64_t i = 0; i < n; ++i) gv[i] = (i % 3 ? 1.f : -1.f) * (0.01f + 0.1f * static_cast<float>(i));
  Tensor p = Tensor::zeros({n}, DType::f32), g = Tensor::from_vector(gv, {n});
  nn::AdamConfig cfg;
  cfg.lr = 0.01f;
  nn::Adam opt(p, g, {}, cfg);
  opt.step();
  const auto pv = p.to_vector();
  // |Δ − lr·sign(g)| = lr·eps/(|g|+eps) ≤ 1e-8 for |g| ≥ 0.01, plus ~1e-9 of fp32 rounding.
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(pv[i], gv[i] > 0 ? -0.01f : 0.01f, 2e-8) << i;
}

TEST(Optimizer, ClipGradNorm) {
  Tensor g = Tensor::full({400}, 0.5, DType::f32);  // ‖g‖ = 10
  nn::ClipResult c = nn::clip_grad_norm(g, 2.f);
  EXPECT_NEAR(c.norm, 10.0, 1e-12);
  EXPECT_NEAR(c.scale, 0.2f, 1e-7);
  EXPECT_TRUE(c.finite());
  EXPECT_EQ(nn::clip_grad_norm(g, 20.f).scale, 1.f);
  EXPECT_EQ(g.to_vector()[0], 0.5f);  // gradients are not modified
  Tensor bad = Tensor::full({4}, INFINITY, DType::f32);
  c = nn::clip_grad_norm(bad, 1.f);
  EXPECT_FALSE(c.finite());
  Tensor p = Tensor::zeros({4}, DType::f32);
  nn::Adam opt(p, bad, {});
  EXPECT_THROW(opt.step(c.scale), Error);
  EXPECT_EQ(opt.step_count(), 0);
}

TEST(Optimizer, EmaKnownAnswerWarmupAndSwap) {
  // Constant params: ema_k = p + decay^k (ema_0 − p).
  Tensor p = Tensor::full({10}, 2.0, DType::f32);
  nn::Ema ema(p, {0.9f, false});
  Tensor shadow = ema.shadow();  // shares storage
  shadow.fill_(1.0);
  for (int k = 0; k < 5; ++k) ema.update();
  EXPECT_NEAR(ema.shadow().to_vector()[3], 2.0 - std::pow(0.9, 5), 1e-6);
  EXPECT_EQ(ema.update_count(), 5);
  ema.swap_with_params();
  EXPECT_NEAR(p.to_vector()[0], 2.0 - std::pow(0.9, 5), 1e-6);
  EXPECT_EQ(ema.shadow().to_vector()[0], 2.f);

  nn::Ema warm(p, {0.999f, true});
  EXPECT_NEAR(warm.current_decay(), 0.1f, 1e-7);  // (1+0)/(10+0)
  warm.update();
  EXPECT_NEAR(warm.current_decay(), 2.f / 11.f, 1e-7);
  EXPECT_EQ(warm.state().size(), 2u);
}

TEST(Optimizer, StateAndCheckpointLayoutShareStorage) {
  Tensor p = Tensor::zeros({10}, DType::f32), g = Tensor::full({10}, 1.0, DType::f32);
  nn::Adam opt(p, g, {{0, 6, true}, {6, 4, false}});
  opt.step();
  const auto st = opt.state();
  EXPECT_EQ(st.size(), 3u);
  auto ck = opt.checkpoint_state({"w", "b"}, {Shape{2, 3}, Shape{4}});
  EXPECT_EQ(ck.at("m").at("w").shape(), (Shape{2, 3}));
  ck["v"]["b"].fill_(7.0);
  EXPECT_EQ(st.at("v").to_vector()[9], 7.f);
  ck["step"]["count"].fill_(41.0);  // restoring the step count through the state tensor
  EXPECT_EQ(opt.step_count(), 41);
  EXPECT_THROW(opt.checkpoint_state({"w"}), Error);
  EXPECT_THROW(opt.checkpoint_state({"w", "b"}, {Shape{5}, Shape{4}}), Error);
}

TEST(Optimizer, ResumeFromCheckpointContinuesIdentically) {
  if (!nn::checkpoint_supported()) GTEST_SKIP() << "built without HDF5";
  Generator gen(6);
  const int64_t n = 1234;
  const auto segs = two_segments(1000, 234);
  const Tensor p0 = randn({n}, gen);
  std::vector<Tensor> grads;
  for (int s = 0; s < 5; ++s) grads.push_back(randn({n}, gen));

  Tensor pa = p0.clone(), ga = Tensor::zeros({n}, DType::f32);
  nn::Lamb a(pa, ga, segs);
  for (int s = 0; s < 3; ++s) {
    ga.copy_(grads[s]);
    a.step();
  }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("foldcore_opt_resume_" + std::to_string(::getpid()) + ".h5")).string();
  nn::CheckpointData ck;
  ck.params["flat"] = pa;
  ck.optimizer = a.checkpoint_state({"w", "b"});
  nn::save_checkpoint(path, ck);

  Tensor pb = Tensor::zeros({n}, DType::f32), gb = Tensor::zeros({n}, DType::f32);
  nn::Lamb b(pb, gb, segs);
  nn::CheckpointData into;
  into.params["flat"] = pb;
  into.optimizer = b.checkpoint_state({"w", "b"});
  nn::load_checkpoint(path, into);
  std::filesystem::remove(path);
  EXPECT_EQ(b.step_count(), 3);
  for (int s = 3; s < 5; ++s) {
    ga.copy_(grads[s]);
    gb.copy_(grads[s]);
    a.step();
    b.step();
  }
  FC_EXPECT_CLOSE(pb, pa, 0, 0);
}

TEST(Schedule, AlphaFold) {
  nn::AlphaFoldSchedule s;  // 0 → 1e-3 over 1000 steps, ×0.95 every 50k after 50k
  EXPECT_EQ(s.lr(0), 0.f);
  EXPECT_NEAR(s.lr(500), 5e-4f, 1e-10);
  EXPECT_NEAR(s.lr(999), 9.99e-4f, 1e-10);
  EXPECT_EQ(s.lr(1000), 1e-3f);
  EXPECT_EQ(s.lr(50000), 1e-3f);
  EXPECT_NEAR(s.lr(50001), 0.95e-3f, 1e-10);
  EXPECT_NEAR(s.lr(99999), 0.95e-3f, 1e-10);
  EXPECT_NEAR(s.lr(100000), 0.95 * 0.95e-3, 1e-10);
  EXPECT_THROW(nn::AlphaFoldSchedule({0.f, 1e-3f, 1000, 10, 50000, 0.95f}), Error);  // decay before warmup ends
}

TEST(Schedule, BertWarmupThenPolynomialDecay) {
  nn::BertSchedule lin({4e-4f, 0.f, 100, 1000, 1.f});
  EXPECT_EQ(lin.lr(0), 0.f);
  EXPECT_NEAR(lin.lr(50), 2e-4f, 1e-10);
  EXPECT_NEAR(lin.lr(100), 4e-4 * 0.9, 1e-10);  // the reference decays on the global step
  EXPECT_NEAR(lin.lr(550), 4e-4 * 0.45, 1e-10);
  EXPECT_EQ(lin.lr(1000), 0.f);
  EXPECT_EQ(lin.lr(5000), 0.f);
  nn::BertSchedule sq({1e-3f, 1e-5f, 0, 400, 0.5f});
  EXPECT_NEAR(sq.lr(300), (1e-3 - 1e-5) * std::sqrt(0.25) + 1e-5, 1e-9);
  EXPECT_NEAR(sq.lr(400), 1e-5f, 1e-12);
  EXPECT_THROW(nn::BertSchedule({1e-3f, 0.f, 0, 0, 1.f}), Error);
}

TEST(Optimizer, BadConstructionGivesClearErrors) {
  Tensor p = Tensor::zeros({10}, DType::f32);
  EXPECT_THROW(nn::Adam(p, Tensor::zeros({11}, DType::f32), {}), Error);
  EXPECT_THROW(nn::Adam(p, Tensor::zeros({10}, DType::bf16), {}), Error);
  EXPECT_THROW(nn::Lamb(p, Tensor::zeros({10}, DType::f32), {}), Error);
  EXPECT_THROW(nn::Adam(p, Tensor::zeros({10}, DType::f32), {{5, 6, true}}), Error);
  nn::Adam ok(p, Tensor::zeros({10}, DType::f32), {});
  EXPECT_THROW(ok.set_lr(-1.f), Error);
  EXPECT_THROW(ok.set_lr(NAN), Error);
}

}  // namespace
}  // namespace foldcore
