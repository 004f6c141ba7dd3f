// Engine, ParamStore, grad mode / no-grad memory, recompute, in-place reuse and autocast.
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "core/allocator.h"
#include "core/random.h"
#include "kernels/gemm.h"
#include "test_util.h"

namespace foldcore::autograd {
namespace {

TEST(AutogradEngine, MultiUseGradientsAccumulate) {
  // y = Σ (x·x + x) + Σ relu(x)  ⇒  dy/dx = 2x + 1 + [x > 0]; x is used four times.
  const Tensor x = Tensor::from_vector({-1.5f, 0.5f, 2.f}, {3});
  Variable v(x, true);
  Variable y = add(mul(v, v), v);
  Variable loss = add(sum(y, {0}), sum(relu(v), {0}));
  backward(loss);
  EXPECT_EQ(v.grad().to_vector(), (std::vector<float>{-2.f, 3.f, 6.f}));
  // A second backward through the same graph is refused: its saved tensors were freed.
  EXPECT_THROW(backward(loss), Error);
  // Leaves accumulate across backward passes.
  Variable loss2 = sum(v, {0});
  backward(loss2);
  EXPECT_EQ(v.grad().to_vector(), (std::vector<float>{-1.f, 4.f, 7.f}));
}

// An error inside a node's backward names the node (the context is made only when it throws).
struct ThrowingFn final : Function {
  void backward(BackwardCtx&) override { FC_THROW("no backward here"); }
};

// take_grads: a root's given gradient (contiguous, the root's dtype) is its gradient itself, so a
// contribution from another root's path is added into it in place (how a recompute segment's
// rerun takes its outputs' gradients without copying them); without it the caller's tensor stays
// as it was. The gradients reaching the leaf are the same either way.
TEST(AutogradEngine, TakenRootGradientsAreUsedInPlace) {
  for (bool take : {false, true}) {
    SCOPED_TRACE(take);
    Variable x(Tensor::from_vector({1.f, 2.f, 3.f}, {3}), true);
    const Variable y = scale(x, 2.f);
    const Variable z = mul(y, y);  // z's backward adds 2y·dz into y's gradient
    const Tensor gy = Tensor::from_vector({1.f, 1.f, 1.f}, {3}), gz = Tensor::from_vector({0.5f, 0.5f, 0.5f}, {3});
    backward({z, y}, {gz, gy}, take);
    EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{6.f, 10.f, 14.f}));  // 2·(1 + 2y·0.5)
    EXPECT_EQ(gy.to_vector(), take ? (std::vector<float>{3.f, 5.f, 7.f}) : (std::vector<float>{1.f, 1.f, 1.f}));
    EXPECT_EQ(gz.to_vector(), (std::vector<float>{0.5f, 0.5f, 0.5f}));  // z's gradient is only read
  }
}

TEST(AutogradEngine, ABackwardErrorNamesTheNode) {
  const Variable x(Tensor::full({2}, 1.0, DType::f32), true);
  const Variable y = record1("probe_op", std::make_unique<ThrowingFn>(), {x}, Tensor::full({2}, 2.0, DType::f32));
  try {
    backward({y}, {Tensor::full({2}, 1.0, DType::f32)});
    FAIL() << "the backward should have thrown";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no backward here"), std::string::npos) << what;
    EXPECT_NE(what.find("in the backward of 'probe_op'"), std::string::npos) << what;
  }
}

TEST(AutogradEngine, SavedTensorsAreFreedByBackward) {
  Allocator& a = default_allocator(Device::cpu());
  Generator g(1);
  Variable w(randn({64, 64}, g), true);
  const Tensor x = randn({128, 64}, g);
  (void)w.value();
  const size_t base = a.stats().current;
  Variable h = Variable(x);
  for (int i = 0; i < 4; ++i) h = gelu(linear(h, w));
  Variable loss = sum(h, {0, 1});
  const size_t with_graph = a.stats().current;
  backward(loss);
  w.set_grad(Tensor());
  h = Variable();
  // The graph is still referenced by `loss`, but every saved activation is gone: what is left is
  // the loss value and x (held by the test).
  EXPECT_GT(with_graph - base, size_t{4} * 128 * 64 * 4 * 2);
  EXPECT_LE(a.stats().current - base, size_t{4096});
}

// A chain of Linear+ReLU layers; returns the CPU allocator's peak bytes above the start.
size_t chain_peak(bool grad, int layers) {
  Allocator& a = default_allocator(Device::cpu());
  Generator g(2);
  std::vector<Variable> ws;
  for (int i = 0; i < layers; ++i) ws.emplace_back(randn({128, 128}, g, 0, 0.08f), true);
  Variable x(randn({256, 128}, g));
  const size_t start = a.stats().current;
  a.reset_peak();
  {
    std::unique_ptr<NoGradGuard> ng;
    if (!grad) ng = std::make_unique<NoGradGuard>();
    Variable h = x;
    for (const Variable& w : ws) h = linear(h, w, {}, ops::Activation::relu);
    Variable loss = sum(h, {0, 1});
  }
  return a.stats().peak - start;
}

TEST(AutogradEngine, NoGradFreesActivationsAsItGoes) {
  const int layers = 8;
  const size_t act = 256 * 128 * 4;
  const size_t peak_grad = chain_peak(true, layers), peak_nograd = chain_peak(false, layers);
  EXPECT_TRUE(grad_enabled());
  // Grad mode keeps every layer's (input, output) pair; no-grad holds at most ~2 activations.
  EXPECT_GE(peak_grad, act * layers);
  EXPECT_LE(peak_nograd, act * 3);
  EXPECT_LT(peak_nograd * 3, peak_grad);
}

TEST(ParamStore, FlatBuffersViewsSegmentsAndAccumulation) {
  ParamStore ps;
  Variable w = ps.add("layer_0/linear/weight", {3, 2}, true, Tensor::full({3, 2}, 0.5, DType::f32));
  Variable b = ps.add("layer_0/linear/bias", {2}, false);
  EXPECT_THROW(ps.add("layer_0/linear/bias", {2}, false), Error);
  EXPECT_THROW((void)w.value(), Error);  // used before finalize
  ps.finalize();
  EXPECT_THROW(ps.add("late", {1}, true), Error);
  EXPECT_EQ(ps.num_elements(), 8);
  EXPECT_EQ(w.value().storage(), ps.values().storage());
  EXPECT_EQ(w.grad().storage(), ps.grads().storage());
  const auto seg = ps.segments();
  ASSERT_EQ(seg.size(), 2u);
  EXPECT_EQ(seg[0].offset, 0);
  EXPECT_EQ(seg[1].offset % ParamStore::kAlignElems, 0);
  EXPECT_FALSE(seg[1].weight_decay);
  EXPECT_EQ(ps.named_values().at("layer_0/linear/weight").to_vector(), std::vector<float>(6, 0.5f));

  const Tensor x = Tensor::from_vector({1, 2, 3, -1, 0, 1}, {2, 3});
  auto step = [&] { backward(sum(linear(Variable(x), w, b), {0, 1})); };
  step();
  const std::vector<float> g1 = ps.grads().to_vector();
  // dW[i, j] = Σ_r x[r, i] (same for every j); db = rows.
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{0, 0, 2, 2, 4, 4}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{2, 2}));
  step();  // a second micro-batch accumulates
  const std::vector<float> g2 = ps.grads().to_vector();
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_EQ(g2[i], 2 * g1[i]);
  ps.zero_grad();
  for (float v : ps.grads().to_vector()) EXPECT_EQ(v, 0.f);
}

// Two residual layers x ← x + dropout(W2·gelu(W1·LN(x))); with or without recompute segments.
struct TinyModel {
  ParamStore ps;
  std::vector<Variable> p;
  explicit TinyModel(int layers) {
    Generator g(3);
    for (int l = 0; l < layers; ++l) {
      std::string n = std::to_string(l);
      n.insert(n.begin(), 'l');  // (not "l" + to_string: GCC 12 -Wrestrict false positive)
      p.push_back(ps.add(n + "/ln/g", {16}, false, Tensor::full({16}, 1.0, DType::f32)));
      p.push_back(ps.add(n + "/ln/b", {16}, false));
      p.push_back(ps.add(n + "/w1", {16, 64}, true, randn({16, 64}, g, 0, 0.25f)));
      p.push_back(ps.add(n + "/b1", {64}, false, randn({64}, g, 0, 0.1f)));
      p.push_back(ps.add(n + "/w2", {64, 16}, true, randn({64, 16}, g, 0, 0.125f)));
      p.push_back(ps.add(n + "/b2", {16}, false));
    }
    ps.finalize();
  }
  Variable layer(const Variable& x, int l, Generator* rng) const {
    const Variable* q = &p[static_cast<size_t>(6 * l)];
    Variable h = linear(layer_norm(x, q[0], q[1]), q[2], q[3], ops::Activation::gelu);
    h = linear(h, q[4]);
    return bias_dropout_residual(h, q[5], x, DropoutSpec{0.2f, rng, {}});
  }
  // Loss and peak activation bytes.
  // bf16: the forward under bf16 autocast (the backward outside it, as the trainers run it).
  std::pair<float, size_t> run(const Tensor& x, bool use_recompute, bool bf16 = false) {
    Allocator& a = default_allocator(Device::cpu());
    Generator rng(11);
    ps.zero_grad();
    const size_t start = a.stats().current;
    a.reset_peak();
    Variable h(x);
    std::optional<AutocastGuard> autocast;
    if (bf16) autocast.emplace(DType::bf16);
    for (int l = 0; l < static_cast<int>(p.size() / 6); ++l) {
      if (use_recompute) {
        h = recompute([&, l](const std::vector<Variable>& in) { return std::vector<Variable>{layer(in[0], l, &rng)}; },
                      {h}, {&rng})[0];
      } else {
        h = layer(h, l, &rng);
      }
    }
    Variable loss = mean(mul(h, h), {0, 1});
    autocast.reset();
    backward(loss);
    return {loss.value().item(), a.stats().peak - start};
  }
};

// place_together: a group is laid out back to back, in its order, where its first member was
// registered; names() and segments() follow the layout; the values are each parameter's own.
TEST(ParamStore, PlaceTogetherLaysAGroupOutBackToBack) {
  ParamStore ps;
  const Variable a = ps.add("a", {16}, true, Tensor::full({16}, 1.0, DType::f32));
  const Variable w1 = ps.add("w1", {4, 8}, true, Tensor::full({4, 8}, 2.0, DType::f32));
  const Variable b1 = ps.add("b1", {16}, false, Tensor::full({16}, 3.0, DType::f32));
  const Variable w2 = ps.add("w2", {4, 8}, true, Tensor::full({4, 8}, 4.0, DType::f32));
  const Variable b2 = ps.add("b2", {16}, false, Tensor::full({16}, 5.0, DType::f32));
  ps.place_together({w2, w1});  // the group's order, not the registration order
  ps.place_together({b1, b2});
  EXPECT_THROW(ps.place_together({w1, a}), Error);  // w1 is in a group already
  ps.finalize();
  EXPECT_THROW(ps.place_together({a, b1}), Error);  // after finalize
  EXPECT_EQ(ps.names(), (std::vector<std::string>{"a", "w2", "w1", "b1", "b2"}));
  const auto seg = ps.segments();
  for (size_t i = 1; i < seg.size(); ++i) EXPECT_GT(seg[i].offset, seg[i - 1].offset);
  EXPECT_EQ(static_cast<const char*>(w1.value().data_ptr()),
            static_cast<const char*>(w2.value().data_ptr()) + 32 * sizeof(float));
  EXPECT_EQ(static_cast<const char*>(b2.value().data_ptr()),
            static_cast<const char*>(b1.value().data_ptr()) + 16 * sizeof(float));
  EXPECT_EQ(w1.value().to_vector(), std::vector<float>(32, 2.f));
  EXPECT_EQ(w2.value().to_vector(), std::vector<float>(32, 4.f));
  EXPECT_EQ(ps.get("b2").value().to_vector(), std::vector<float>(16, 5.f));
}

TEST(Recompute, SameGradientsLessMemory) {
  TinyModel m(2);
  Generator g(4);
  const Tensor x = randn({512, 16}, g);
  const auto [loss_plain, peak_plain] = m.run(x, false);
  const std::vector<float> g_plain = m.ps.grads().to_vector();
  const auto [loss_rc, peak_rc] = m.run(x, true);
  const std::vector<float> g_rc = m.ps.grads().to_vector();
  EXPECT_EQ(loss_plain, loss_rc);
  double max_diff = 0, max_g = 0;
  for (size_t i = 0; i < g_plain.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::abs(g_plain[i] - g_rc[i])));
    max_g = std::max(max_g, static_cast<double>(std::abs(g_plain[i])));
  }
  // Same kernels on the same data in the same order: identical up to (here, exactly) 1e-6.
  EXPECT_LE(max_diff, 1e-6);
  EXPECT_GT(max_g, 1e-3);  // the check is not vacuous
  EXPECT_LT(peak_rc, peak_plain * 3 / 4) << peak_rc << " vs " << peak_plain;
}

// The recomputed segment reruns under the autocast mode of its forward, although the backward runs
// outside the AutocastGuard: bf16 with and without recompute give the same gradients, which differ
// from fp32's by bf16 rounding (so a rerun in fp32 would fail the first check).
TEST(Recompute, RerunsUnderTheForwardsAutocast) {
  TinyModel m(2);
  Generator g(4);
  const Tensor x = randn({512, 16}, g);
  m.run(x, false, /*bf16=*/false);
  const std::vector<float> g_fp32 = m.ps.grads().to_vector();
  m.run(x, false, true);
  const std::vector<float> g_plain = m.ps.grads().to_vector();
  m.run(x, true, true);
  const std::vector<float> g_rc = m.ps.grads().to_vector();
  double max_diff = 0, max_bf16 = 0, max_g = 0;
  for (size_t i = 0; i < g_plain.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::abs(g_plain[i] - g_rc[i])));
    max_bf16 = std::max(max_bf16, static_cast<double>(std::abs(g_plain[i] - g_fp32[i])));
    max_g = std::max(max_g, static_cast<double>(std::abs(g_plain[i])));
  }
  EXPECT_LE(max_diff, 1e-6 * max_g);
  EXPECT_GT(max_bf16, 1e-4 * max_g);  // bf16 did change the gradients: the first check can fail
}

TEST(InPlace, ResidualUpdateReusesStorageOnlyWhenSafe) {
  Generator g(5);
  const Tensor a = randn({4, 8}, g), b = randn({4, 8}, g), hx = randn({4, 8}, g), bias = randn({8}, g);
  auto run = [&](bool in_place, bool saved_residual, Tensor* out_storage_same) {
    Variable av(a, true), bv(b, true), h(hx, true), bb(bias, true);
    // add() saves nothing, so x's storage is referenced only by x; sigmoid() saves its output.
    Variable x = saved_residual ? sigmoid(add(av, bv)) : add(av, bv);
    const void* x_ptr = x.value().data_ptr();
    Generator rng(6);
    Variable y = bias_dropout_residual(h, bb, x, DropoutSpec{0.25f, &rng, {}}, in_place);
    *out_storage_same = Tensor::full({1}, y.value().data_ptr() == x_ptr ? 1.0 : 0.0, DType::f32);
    x = Variable();
    backward({mul(y, y)}, {Tensor::full({4, 8}, 1.0, DType::f32)});
    return std::vector<Tensor>{av.grad(), bv.grad(), h.grad(), bb.grad()};
  };
  for (bool saved : {false, true}) {
    Tensor same_ref, same_ip;
    const auto ref = run(false, saved, &same_ref);
    const auto ip = run(true, saved, &same_ip);
    EXPECT_EQ(same_ref.item(), 0.f);
    EXPECT_EQ(same_ip.item(), saved ? 0.f : 1.f) << "saved residual: " << saved;
    for (size_t i = 0; i < ref.size(); ++i) FC_EXPECT_CLOSE(ip[i], ref[i], 0, 0);
  }
  // No-grad (inference): always in place.
  NoGradGuard ng;
  Variable x(randn({4, 8}, g));
  const void* p = x.value().data_ptr();
  Variable y = bias_dropout_residual(Variable(hx), Variable(bias), x, {}, true);
  EXPECT_EQ(y.value().data_ptr(), p);
}

TEST(Autocast, Bf16LossWithinToleranceAndMasterGradsFp32) {
  ParamStore ps;
  Generator g(7);
  Variable w1 = ps.add("w1", {32, 64}, true, randn({32, 64}, g, 0, 0.18f));
  Variable b1 = ps.add("b1", {64}, false, randn({64}, g, 0, 0.1f));
  Variable w2 = ps.add("w2", {64, 10}, true, randn({64, 10}, g, 0, 0.12f));
  Variable gam = ps.add("ln/g", {64}, false, Tensor::full({64}, 1.0, DType::f32));
  Variable bet = ps.add("ln/b", {64}, false);
  ps.finalize();
  const Tensor x = randn({48, 32}, g);
  CrossEntropyOptions ce;
  ce.labels = randint({48}, g, 0, 10);
  auto run = [&](bool bf16) {
    ps.zero_grad();
    std::unique_ptr<AutocastGuard> ac;
    if (bf16) ac = std::make_unique<AutocastGuard>(DType::bf16);
    Variable h = linear(Variable(x), w1, b1, ops::Activation::gelu);
    if (bf16) {
      EXPECT_EQ(h.dtype(), DType::bf16);
    }
    h = layer_norm(h, gam, bet);
    Variable loss = softmax_cross_entropy(linear(h, w2), ce);
    EXPECT_EQ(loss.dtype(), DType::f32);
    backward(loss);
    return std::make_pair(loss.value().item(), ps.grads().to_vector());
  };
  const auto [l32, g32] = run(false);
  const auto [l16, g16] = run(true);
  EXPECT_EQ(ps.grads().dtype(), DType::f32);
  // bf16 has an 8-bit mantissa (relative rounding 2^-9 ≈ 2e-3 per operand); over two GEMMs of
  // depth 32/64 the loss moves by well under 1 %.
  EXPECT_NEAR(l16, l32, 1e-2 * std::abs(l32));
  double num = 0, den = 0;
  for (size_t i = 0; i < g32.size(); ++i) {
    num += (g16[i] - g32[i]) * (g16[i] - g32[i]);
    den += g32[i] * g32[i];
  }
  EXPECT_LT(std::sqrt(num / den), 5e-2);  // relative L2 error of the master gradients
  EXPECT_GT(den, 0);
}

// Records the gradient-ready reports: their order, and each leaf's gradient when reported.
struct ReportLog {
  std::vector<std::string> order;
  std::map<std::string, std::vector<float>> at_report;
  GradReadyHook hook() {
    return [this](const VariableImpl& leaf) {
      order.push_back(leaf.name);
      at_report[leaf.name] = leaf.grad.to_vector();
    };
  }
  // Every reported gradient is the final one (nothing was added after its report).
  void expect_reports_final(const ParamStore& ps) const {
    for (const auto& [name, grad] : at_report) EXPECT_EQ(grad, ps.get(name).grad().to_vector()) << name;
  }
};

// The gradient-ready hook reports each reached leaf once, when nothing later in the backward adds
// to its gradient: a parameter used at the start and at the end of the graph is reported only
// after its first use's backward; the last layer's parameters come before the first layer's; a
// parameter inside a recompute segment right after the segment's (nested) backward; an unused
// parameter never. The gradient seen at report time must equal the final one.
TEST(AutogradEngine, GradReadyHookReportsEachLeafOnceWhenFinal) {
  ParamStore ps;
  Generator g(3);
  const Variable w1 = ps.add("w1", {8, 8}, true, randn({8, 8}, g));
  const Variable w2 = ps.add("w2", {8, 8}, true, randn({8, 8}, g));
  const Variable w3 = ps.add("w3", {8, 8}, true, randn({8, 8}, g));
  const Variable w4 = ps.add("w4", {8, 8}, true, randn({8, 8}, g));  // inside a recompute segment
  const Variable unused = ps.add("unused", {4}, true);
  ps.finalize();
  const Tensor x = randn({5, 8}, g);

  ReportLog log;
  std::vector<std::string>& order = log.order;
  {
    GradReadyHookGuard guard(log.hook());
    Variable h = gelu(linear(Variable(x), w1));  // w1's first use
    h = recompute([&](const std::vector<Variable>& in) { return std::vector<Variable>{gelu(linear(in[0], w4))}; },
                  {h})[0];
    h = gelu(linear(h, w2));
    h = linear(h, w3);
    h = linear(h, w1);  // w1 again, at the end
    backward(sum(h, {0, 1}));
  }
  // Each reported once; w3 (last layer) before w2, w4 (inside the segment) right after the
  // segment's backward, w1 last; `unused` never.
  ASSERT_EQ(order, (std::vector<std::string>{"w3", "w2", "w4", "w1"}));
  log.expect_reports_final(ps);
  // w1's gradient has both uses: the report came after the first layer's backward.
  EXPECT_NE(ps.get("w1").grad().to_vector(), std::vector<float>(64, 0.f));

  // Without a guard nothing is reported (the guard restored the empty hook).
  order.clear();
  ps.zero_grad();
  backward(sum(linear(Variable(x), w1), {0, 1}));
  EXPECT_TRUE(order.empty());
  (void)unused;
}

// Recompute segments: a parameter used by one segment is reported right after that segment's
// backward; one shared by two segments (AlphaFold's template pair stack runs the same blocks once
// per template) only after both; one used by a segment and by a later outer op after both. Each
// reported gradient is the final one.
TEST(AutogradEngine, GradReadyHookReportsSegmentParametersWhenNoLaterUseRemains) {
  ParamStore ps;
  Generator g(4);
  const Variable a = ps.add("a", {8, 8}, true, randn({8, 8}, g));       // segment 1 only
  const Variable b = ps.add("b", {8, 8}, true, randn({8, 8}, g));       // segment 2 only
  const Variable s = ps.add("shared", {8, 8}, true, randn({8, 8}, g));  // segments 1 and 2
  const Variable o = ps.add("outer", {8, 8}, true, randn({8, 8}, g));   // segment 2 and the head
  ps.finalize();
  const Tensor x = randn({5, 8}, g);
  ReportLog log;
  std::vector<std::string>& order = log.order;
  {
    GradReadyHookGuard guard(log.hook());
    Variable h(x);
    h = recompute([&](const std::vector<Variable>& in) { return std::vector<Variable>{gelu(linear(gelu(linear(in[0], a)), s))}; },
                  {h})[0];
    h = recompute([&](const std::vector<Variable>& in) {
          return std::vector<Variable>{gelu(linear(gelu(linear(gelu(linear(in[0], b)), s)), o))};
        },
                  {h})[0];
    h = linear(h, o);
    backward(sum(h, {0, 1}));
  }
  // Backward: the head (outer still used by segment 2), segment 2 (b final; outer final now;
  // shared still used by segment 1), segment 1 (a and shared final).
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(order.begin(), order.begin() + 2), (std::vector<std::string>{"b", "outer"}));
  EXPECT_EQ(std::set<std::string>(order.begin() + 2, order.end()), (std::set<std::string>{"a", "shared"}));
  log.expect_reports_final(ps);
  for (const char* name : {"a", "b", "shared", "outer"})
    EXPECT_NE(ps.get(name).grad().to_vector(), std::vector<float>(64, 0.f)) << name;
}

// A segment that reads a parameter without an autograd function (as a raw inference path would)
// hides it from the collector: if the hook reported it before that segment's rerun gives it a
// gradient, the backward stops with an Error instead of leaving a reducer with a stale sum.
TEST(AutogradEngine, GradReadyHookRefusesAGradientAfterTheReport) {
  ParamStore ps;
  Generator g(5);
  const Variable w = ps.add("w", {8, 8}, true, randn({8, 8}, g));
  ps.finalize();
  const Tensor x = randn({5, 8}, g);
  GradReadyHookGuard guard([](const VariableImpl&) {});
  Variable h(x);
  // The segment's forward uses w only in grad mode (its rerun): the collector never sees it.
  h = recompute([&](const std::vector<Variable>& in) {
        return std::vector<Variable>{grad_enabled() ? linear(in[0], w) : Variable(ops::matmul(in[0].value(), w.value()))};
      },
                {h})[0];
  h = linear(h, w);  // the head: w's only known consumer, run first in the backward
  try {
    backward(sum(h, {0, 1}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already reported final"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace foldcore::autograd
