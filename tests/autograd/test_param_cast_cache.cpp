// autograd::ParamCastScope / cast_param (param_cast_cache.h): inside a scope a parameter's cast is
// made once and handed out again, bit for bit the cast made without the scope; what is not a
// parameter is cast afresh; the outermost scope's end frees the casts. A bf16 linear's output and
// gradients are the same with the scope as without it.
#include <gtest/gtest.h>

#include <optional>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/param_cast_cache.h"
#include "autograd/param_store.h"
#include "core/random.h"
#include "core/tensor.h"
#include "test_util.h"

namespace foldcore::autograd {
namespace {

std::vector<uint16_t> bits(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint16_t*>(c.data_ptr());
  return std::vector<uint16_t>(p, p + c.numel());
}

TEST(ParamCastCache, AParameterIsCastOncePerScope) {
  Generator gen(3);
  const Variable w(randn({8, 5}, gen), /*requires_grad=*/true, "w");
  const Tensor fresh = w.value().to(DType::bf16);
  // Without a scope: a new cast every time.
  EXPECT_NE(cast_param(w, DType::bf16).data_ptr(), cast_param(w, DType::bf16).data_ptr());
  {
    const ParamCastScope scope;
    const Tensor a = cast_param(w, DType::bf16), b = cast_param(w, DType::bf16);
    EXPECT_EQ(a.data_ptr(), b.data_ptr());
    EXPECT_EQ(a.dtype(), DType::bf16);
    EXPECT_EQ(bits(a), bits(fresh));
    EXPECT_EQ(param_cast_stats().made, 1);
    EXPECT_EQ(param_cast_stats().reused, 1);
    // Its own dtype: the tensor itself, nothing made.
    EXPECT_EQ(cast_param(w, DType::f32).data_ptr(), w.value().data_ptr());
    // Not parameters: a leaf without a gradient, and a non-leaf.
    const Variable c(randn({8, 5}, gen));
    EXPECT_NE(cast_param(c, DType::bf16).data_ptr(), cast_param(c, DType::bf16).data_ptr());
    const Variable y = scale(w, 2.f);
    EXPECT_NE(cast_param(y, DType::bf16).data_ptr(), cast_param(y, DType::bf16).data_ptr());
    {
      const ParamCastScope inner;  // nested: the outer scope's casts stay
      EXPECT_EQ(cast_param(w, DType::bf16).data_ptr(), a.data_ptr());
    }
    EXPECT_EQ(cast_param(w, DType::bf16).data_ptr(), a.data_ptr());
    EXPECT_EQ(param_cast_stats().made, 1);
    EXPECT_EQ(param_cast_stats().reused, 3);
  }
  const ParamCastScope again;  // a new outermost scope starts empty
  (void)cast_param(w, DType::bf16);
  EXPECT_EQ(param_cast_stats().made, 1);
  EXPECT_EQ(param_cast_stats().reused, 0);
}

// A view of another shape at the same address is not the cached parameter.
TEST(ParamCastCache, SameAddressOtherShapeIsNotReused) {
  Generator gen(4);
  const Tensor base = randn({4, 6}, gen);
  const Variable w(base, true), w2(base.view({6, 4}), true);
  const ParamCastScope scope;
  const Tensor a = cast_param(w, DType::bf16), b = cast_param(w2, DType::bf16);
  EXPECT_NE(a.data_ptr(), b.data_ptr());
  EXPECT_EQ(b.shape(), Shape({6, 4}));
}

// Two uses of the same weight in one graph under bf16 autocast: the output and every gradient are
// the same bits with the scope as without it.
TEST(ParamCastCache, Bf16LinearIsTheSameWithTheScope) {
  const auto run = [](bool scoped) {
    Generator gen(5);
    const Variable x(randn({6, 8}, gen), true), w(randn({8, 8}, gen), true), b(randn({8}, gen), true);
    std::optional<ParamCastScope> scope;
    if (scoped) scope.emplace();
    Variable y;
    {
      const AutocastGuard bf16(DType::bf16);
      y = linear(linear(x, w, b, ops::Activation::relu), w, b);
    }
    backward(sum(cast(y, DType::f32), {0, 1}));
    return std::vector<Tensor>{y.value(), x.grad(), w.grad(), b.grad()};
  };
  const auto plain = run(false), scoped = run(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(plain[i].dtype(), scoped[i].dtype());
    const auto r = testing::all_close(scoped[i].to(DType::f32), plain[i].to(DType::f32), 0, 0);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// With the flat buffer: one cast of the whole buffer; every parameter's cast, and a stack of
// parameters lying back to back, is a view of it (the same bits as a fresh cast); a stack with a gap
// is made (and cached) as before, and so is a parameter outside the buffer.
TEST(ParamCastCache, FlatBufferIsCastOnceAndViewed) {
  Generator gen(6);
  ParamStore store;
  const Variable w1 = store.add("w1", {16, 4}, true, randn({16, 4}, gen));
  const Variable w2 = store.add("w2", {16, 4}, true, randn({16, 4}, gen));
  const Variable b = store.add("b", {3}, false, randn({3}, gen));  // 3 values, then an alignment gap
  const Variable w3 = store.add("w3", {16, 4}, true, randn({16, 4}, gen));
  store.finalize();
  const ParamCastScope scope(store.values(), DType::bf16);
  EXPECT_EQ(param_cast_stats().made, 1);
  const Tensor flat = cast_param(w1, DType::bf16);
  EXPECT_EQ(bits(flat), bits(w1.value().to(DType::bf16)));
  EXPECT_EQ(bits(cast_param(b, DType::bf16)), bits(b.value().to(DType::bf16)));
  const Tensor adjacent = stack_params({w1, w2}, {16, 4}, DType::bf16, Device::cpu());
  EXPECT_EQ(adjacent.data_ptr(), flat.data_ptr());  // a view, nothing copied
  EXPECT_EQ(adjacent.shape(), Shape({2, 16, 4}));
  EXPECT_EQ(bits(adjacent.select(0, 1)), bits(w2.value().to(DType::bf16)));
  EXPECT_EQ(param_cast_stats().made, 1);
  const Tensor gap = stack_params({w2, w3}, {16, 4}, DType::bf16, Device::cpu());  // b lies between them
  EXPECT_EQ(param_cast_stats().made, 2);
  EXPECT_EQ(bits(gap.select(0, 1)), bits(w3.value().to(DType::bf16)));
  EXPECT_EQ(stack_params({w2, w3}, {16, 4}, DType::bf16, Device::cpu()).data_ptr(), gap.data_ptr());
  // A parameter outside the buffer: cast on its own (once, then handed out again).
  const Variable outside(randn({16, 4}, gen), true);
  const Tensor own = cast_param(outside, DType::bf16);
  EXPECT_EQ(param_cast_stats().made, 3);
  EXPECT_EQ(cast_param(outside, DType::bf16).data_ptr(), own.data_ptr());
  EXPECT_EQ(bits(own), bits(outside.value().to(DType::bf16)));
}

// A stack with zero entries (an attention's biases: none on q, k and v, one on the gate) is kept
// from one scope to the next when nothing else holds it: the next scope's stack of the same kind
// takes it without a zero fill, its zero rows still zeros and its present rows the parameter's new
// values. A stack still held when its scope ends, or one with other missing entries, is not reused.
TEST(ParamCastCache, AStacksZeroRowsAreKeptForTheNextScope) {
  Generator gen(7);
  ParamStore store;
  const Variable gate = store.add("gate", {6}, true, randn({6}, gen));
  const Variable other = store.add("other", {6}, true, randn({6}, gen));
  store.finalize();
  const std::vector<Variable> biases{Variable(), Variable(), gate};
  const std::vector<float> zeros(12, 0.f);
  auto check = [&](const Tensor& stack) {
    const Tensor f = stack.to(DType::f32);
    EXPECT_EQ(f.narrow(0, 0, 2).contiguous().to_vector(), zeros);
    EXPECT_EQ(bits(stack.select(0, 2)), bits(gate.value().to(DType::bf16)));
  };
  const void* first = nullptr;
  {
    const ParamCastScope scope;
    const Tensor s = stack_params(biases, {6}, DType::bf16, Device::cpu());
    first = s.data_ptr();
    check(s);
    EXPECT_EQ(param_cast_stats().zero_rows_reused, 0);
  }
  copy_tensor(gate.value(), randn({6}, gen));  // an optimizer step between the scopes
  Tensor held;
  {
    const ParamCastScope scope;
    held = stack_params(biases, {6}, DType::bf16, Device::cpu());
    EXPECT_EQ(held.data_ptr(), first);
    EXPECT_EQ(param_cast_stats().zero_rows_reused, 1);
    check(held);
    // Other missing entries: a stack of its own, zero-filled.
    const Tensor mixed = stack_params({other, Variable(), gate}, {6}, DType::bf16, Device::cpu());
    EXPECT_NE(mixed.data_ptr(), first);
    EXPECT_EQ(param_cast_stats().zero_rows_reused, 1);
    EXPECT_EQ(mixed.select(0, 1).to(DType::f32).to_vector(), std::vector<float>(6, 0.f));
  }
  {
    const ParamCastScope scope;  // `held` was still held when its scope ended: not pooled
    const Tensor s = stack_params(biases, {6}, DType::bf16, Device::cpu());
    EXPECT_NE(s.data_ptr(), first);
    EXPECT_EQ(param_cast_stats().zero_rows_reused, 0);
    check(s);
  }
}

}  // namespace
}  // namespace foldcore::autograd
