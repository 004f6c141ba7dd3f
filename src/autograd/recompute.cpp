#include "autograd/recompute.h"

#include <optional>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/leaf_use.h"

namespace foldcore::autograd {
namespace {

struct RecomputeFn final : Function {
  SegmentFn fn;
  std::vector<Tensor> inputs;  // the saved input values
  std::vector<Generator*> gens;
  std::vector<uint64_t> start_offsets;
  std::optional<DType> autocast;  // the forward's autocast mode, restored for the rerun
  std::vector<std::shared_ptr<VariableImpl>> leaves;  // the trainable leaves the forward used

  void backward(BackwardCtx& ctx) override {
    // Replay the forward's random streams, then put the generators back where they are now.
    std::vector<uint64_t> now;
    for (size_t i = 0; i < gens.size(); ++i) {
      now.push_back(gens[i]->offset());
      gens[i]->set_offset(start_offsets[i]);
    }
    std::vector<Variable> leaves;
    std::vector<Variable> outs;
    {
      EnableGradGuard grad_on;
      const std::optional<DType> prev_autocast = autocast_dtype();
      set_autocast_dtype(autocast);
      struct Restore {
        std::optional<DType> d;
        ~Restore() { set_autocast_dtype(d); }
      } restore{prev_autocast};
      for (size_t i = 0; i < inputs.size(); ++i)
        leaves.emplace_back(inputs[i], ctx.needs_grad(static_cast<int>(i)));
      outs = fn(leaves);
    }
    for (size_t i = 0; i < gens.size(); ++i) gens[i]->set_offset(now[i]);
    std::vector<Variable> roots;
    std::vector<Tensor> grads;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].requires_grad()) continue;
      roots.push_back(outs[i]);
      grads.push_back(ctx.grad_output(static_cast<int>(i)));
    }
    // The outputs' gradients are this node's, read by nothing after it: the rerun's backward takes
    // them as they are (no copies of the segment's output gradients).
    if (!roots.empty()) autograd::backward(roots, grads, /*take_grads=*/true);
    for (size_t i = 0; i < leaves.size(); ++i)
      if (ctx.needs_grad(static_cast<int>(i)) && leaves[i].grad().defined())
        ctx.put_grad(static_cast<int>(i), leaves[i].grad());
  }
};

}  // namespace

std::vector<Variable> recompute(const SegmentFn& fn, const std::vector<Variable>& inputs,
                                const std::vector<Generator*>& generators) {
  if (!grad_enabled()) return fn(inputs);
  auto rf = std::make_unique<RecomputeFn>();
  rf->fn = fn;
  rf->gens = generators;
  rf->autocast = autocast_dtype();
  for (Generator* g : generators) {
    FC_CHECK(g != nullptr, "recompute: null generator");
    rf->start_offsets.push_back(g->offset());
  }
  std::vector<Variable> detached;
  for (const Variable& v : inputs) {
    rf->inputs.push_back(v.value());
    detached.push_back(v.detach());
  }
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    LeafUseCollector used;
    for (const Variable& o : fn(detached)) outs.push_back(o.value());
    rf->leaves = used.leaves();
  }
  return record("recompute", std::move(rf), inputs, outs, /*force=*/true);
}

const std::vector<std::shared_ptr<VariableImpl>>* recompute_leaves(const Function& fn) {
  const auto* rf = dynamic_cast<const RecomputeFn*>(&fn);
  return rf != nullptr ? &rf->leaves : nullptr;
}

}  // namespace foldcore::autograd
