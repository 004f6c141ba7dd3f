// The backward pass.
//
// backward(roots, grads): collects the nodes reachable from the roots, runs them in reverse
// creation order (a valid topological order: an op's inputs exist before it runs), sums the
// gradients of multi-use values, accumulates into leaves' `grad` (parameters: the flat fp32
// buffer), and destroys each node's Function (its saved tensors) right after its backward.
// Calling backward twice through the same nodes is an Error (the saved tensors are gone).
// Reentrant: recompute segments run a nested backward from inside a node's backward.
//
// Gradient-ready hook (data-parallel overlap, dist/grad_reducer.h): while a GradReadyHookGuard is
// alive on a thread, the outermost backward() on that thread calls hook(leaf) once for every leaf
// it reaches, as soon as that leaf's gradient is final for this backward: every node of the graph
// with the leaf among its inputs has run its backward (or was skipped, receiving no gradient) and
// the node's deferred accumulations are done, so nothing later in this backward adds to it. The
// engine knows this from the graph it collected: a per-leaf count of the consuming nodes, counted
// down as the nodes run. A recompute node counts as a consumer of every parameter its segment's
// forward handed to an autograd function (recompute_leaves, leaf_use.h): its nested backward (the
// segment's rerun) gives them their gradients, so they are reported once it is over and no other
// node or segment of the graph still uses them — one Evoformer block's parameters right after
// that block's backward. The nested backward itself reports nothing. Leaves the backward never
// reaches are not reported, nor are parameters a segment read without an autograd function (a
// raw inference path): the caller treats what it was not told about as final only after
// backward() returns. A gradient for a leaf already reported is an Error, not a silent miss.
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autograd/variable.h"

namespace foldcore::autograd {

// Handed to Function::backward: the output grads and the destinations of the input grads.
class BackwardCtx {
 public:
  // Grad of output i: contiguous, the output's shape and dtype (zeros if it got none).
  const Tensor& grad_output(int i) const { return grad_outputs_[static_cast<size_t>(i)]; }
  // For a node with packed_output_grads whose outputs share a dtype and device: one 1-D buffer
  // holding every output's gradient, output i at element offset Σ_{j<i} numel_j (grad_output(i) is
  // that slice), so a Function can treat them as one tensor. Undefined otherwise. The engine
  // allocates it when the first of the gradients arrives; a consumer asking for an overwrite
  // target (new_grad) then writes straight into its slice, one handing over its own tensor
  // (put_grad) has it copied there, and a slice nothing wrote is zeroed before the node runs.
  const Tensor& packed_grad_outputs() const { return packed_; }
  // Whether input i needs a gradient (grad mode was on, and it requires grad).
  bool needs_grad(int i) const;
  // A buffer of input i's shape (dtype `dtype`, default the input's) to ACCUMULATE (+=) into:
  // the existing gradient when it has that dtype (a parameter's flat-buffer slice, or the sum
  // so far of a multi-use activation), else a zeroed buffer routed on afterwards.
  Tensor accumulate_grad(int i, std::optional<DType> dtype = std::nullopt);
  // A fresh contiguous uninitialised buffer of input i's shape for kernels that OVERWRITE.
  Tensor new_grad(int i, std::optional<DType> dtype = std::nullopt);
  // Input i's gradient so far, for a kernel that can add its result into it (+=) in one pass, when
  // there is one to add to: in `dtype` (default the input's), contiguous, written by an earlier
  // node (not a packed slice nothing wrote, not handed out as an overwrite target by this node).
  // Undefined otherwise: the caller then asks for new_grad, and the engine sums afterwards.
  Tensor grad_to_add(int i, std::optional<DType> dtype = std::nullopt);
  // The dtype input i's gradient takes when a Function offers one in `offered`: `offered` where it
  // is the input's dtype, or fp32 for a 16-bit input whose producer reads fp32 gradients
  // (Node::f32_output_grads); else the input's dtype (an offered gradient is converted to it).
  // new_grad/put_grad/accumulate_grad route their gradients by it.
  DType grad_dtype(int i, DType offered) const;
  // Whether this node is the only consumer of input i in this backward and input i is an output
  // whose producer prefers its own 16-bit dtype to fp32 from a lone consumer
  // (Node::narrow_output_grads): a consumer that would write an fp32 gradient may write it in the
  // input's dtype instead, rounded once (the GEMM of `linear`).
  bool sole_consumer_of_narrow_output(int i) const;
  // Hands over a computed gradient of input i (input's shape; any float dtype; made contiguous).
  // The ctx takes it over: the caller must not pass the same storage twice.
  void put_grad(int i, const Tensor& g);

 private:
  friend class Engine;
  struct Pending {
    Tensor* slot = nullptr;  // where the input's gradient lives (pending map entry or leaf grad)
    Tensor tmp;              // to be accumulated into *slot after the backward
    DType dtype = DType::f32;  // the dtype of a slot made from tmp (grad_dtype)
  };
  Tensor& slot_of(int i);
  void pack_slots(const Node& producer, std::vector<Tensor>& vec);
  // Whether `s` is a slice of a packed buffer nothing has written yet; claim_fresh also marks it
  // written.
  bool is_fresh(const Tensor& s) const { return fresh_ != nullptr && fresh_->count(&s) != 0; }
  bool claim_fresh(const Tensor& s) { return fresh_ != nullptr && fresh_->erase(&s) != 0; }
  // Whether `s` was handed out by this node as an overwrite target (new_grad, put_grad).
  bool handed_as_new(const Tensor& s) const {
    return std::find(new_slots_.begin(), new_slots_.end(), &s) != new_slots_.end();
  }
  void finish();  // accumulates the deferred temporaries
  std::vector<const Tensor*> new_slots_;
  const Node* node_ = nullptr;
  std::vector<Tensor> grad_outputs_;
  Tensor packed_;
  std::unordered_map<const Node*, std::vector<Tensor>>* pending_ = nullptr;
  std::unordered_map<const Node*, Tensor>* packed_bufs_ = nullptr;  // the engine's packed buffers
  std::unordered_set<const Tensor*>* fresh_ = nullptr;              // their unwritten slices
  // The number of edges of this backward's graph into each output of the nodes that set
  // Node::narrow_output_grads (roots counted too).
  const std::unordered_map<const Node*, std::vector<int>>* narrow_consumers_ = nullptr;
  std::vector<Pending> deferred_;
};

// Backpropagates `grads` (default: ones, for scalar roots) from `roots`.
// take_grads: the caller gives `grads` away (it does not read them after the call): a contiguous
// grad in its non-leaf root's dtype becomes that root's gradient itself, which the backward may add
// into in place, instead of a copy (a recompute segment's rerun takes its outputs' gradients so).
void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads = {}, bool take_grads = false);
inline void backward(const Variable& root) { backward(std::vector<Variable>{root}); }

using GradReadyHook = std::function<void(const VariableImpl& leaf)>;

// Installs `hook` for the backward passes of this thread while alive (restores the previous one).
class GradReadyHookGuard {
 public:
  explicit GradReadyHookGuard(GradReadyHook hook);
  ~GradReadyHookGuard();
  GradReadyHookGuard(const GradReadyHookGuard&) = delete;
  GradReadyHookGuard& operator=(const GradReadyHookGuard&) = delete;

 private:
  GradReadyHook previous_;
};

// dst += src, converting src's dtype (dst, src contiguous, same shape). Used by the engine.
void accumulate_into(const Tensor& dst, const Tensor& src);

}  // namespace foldcore::autograd
