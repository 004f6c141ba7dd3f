// Leaf-use collection: which trainable leaves (parameters) a piece of code hands to autograd
// functions, whether grad mode is on or off. autograd::recompute runs its segment's forward under
// a collector, so the outermost backward knows, before any segment reruns, which parameters each
// segment will give gradients to (engine.h: the gradient-ready hook reports a segment's parameters
// as soon as no later node or segment uses them).
//
// While a LeafUseCollector lives on this thread, every leaf Variable that requires grad and is an
// input of an autograd function (any_requires_grad, record) is noted once. Code that reads a
// parameter's value() directly (a raw-GEMM inference path) is not seen: the engine then never
// reports that parameter early, and refuses (an Error) a gradient for a leaf it already reported.
// Collectors nest: an inner one's leaves are also the enclosing one's.
#pragma once

#include <memory>
#include <unordered_set>
#include <vector>

#include "autograd/variable.h"

namespace foldcore::autograd {

class LeafUseCollector {
 public:
  LeafUseCollector();
  ~LeafUseCollector();
  LeafUseCollector(const LeafUseCollector&) = delete;
  LeafUseCollector& operator=(const LeafUseCollector&) = delete;

  // The leaves noted so far, in first-use order.
  const std::vector<std::shared_ptr<VariableImpl>>& leaves() const { return leaves_; }
  void note(const Variable& v);

 private:
  LeafUseCollector* outer_;
  std::unordered_set<const VariableImpl*> seen_;
  std::vector<std::shared_ptr<VariableImpl>> leaves_;
};

// Notes the inputs' trainable leaves in this thread's active collector (none: nothing to do).
void note_leaf_uses(const std::vector<Variable>& inputs);

}  // namespace foldcore::autograd
