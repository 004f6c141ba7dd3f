// Reverse-mode autograd over coarse fused ops.
//
// A Variable is a cheap handle (shared_ptr) to a VariableImpl: the value Tensor, the accumulated
// gradient (leaves only), requires_grad, and the graph Node that produced it (+ output index).
// A Node is the graph structure of one recorded op: edges to its inputs and the metadata of its
// outputs; it owns the op's Function (the saved tensors and the backward). After the Node's
// backward ran, the engine destroys its Function, so saved activations are released as early
// as possible while the (tiny) graph structure stays valid until the last output handle goes.
//
// Gradient flow rules (engine.cpp):
//  - grads handed to Function::backward are contiguous, in the output's shape and dtype;
//  - a Function writes input grads through BackwardCtx: accumulate_grad() gives a buffer to
//    ACCUMULATE into (kernels that do +=, e.g. dW, dbias, dgamma: for a parameter this is its
//    slice of the flat fp32 gradient buffer, so nothing is copied), new_grad() a buffer to
//    OVERWRITE, put_grad() hands over a tensor the Function computed;
//  - where an input receives several grads (multi-use) they are summed, converting dtypes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace foldcore::autograd {

struct Node;

struct VariableImpl {
  Tensor value;
  Tensor grad;  // leaves: accumulated gradient (parameters: a view of the flat grad buffer)
  bool requires_grad = false;
  std::shared_ptr<Node> node;  // producer; null for leaves
  int output_index = 0;
  std::string name;  // parameters: their hierarchical name (for messages)
};

class Variable {
 public:
  Variable() = default;
  // A leaf.
  explicit Variable(Tensor value, bool requires_grad = false, std::string name = {});
  explicit Variable(std::shared_ptr<VariableImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr && impl_->value.defined(); }
  const Tensor& value() const;
  const Tensor& grad() const;
  void set_grad(Tensor g) const { impl_->grad = std::move(g); }
  bool requires_grad() const { return impl_ != nullptr && impl_->requires_grad; }
  bool is_leaf() const { return impl_ != nullptr && impl_->node == nullptr; }
  const std::shared_ptr<Node>& node() const { return impl_->node; }
  int output_index() const { return impl_->output_index; }
  const std::string& name() const { return impl_->name; }
  const std::shared_ptr<VariableImpl>& impl() const { return impl_; }

  const Shape& shape() const { return value().shape(); }
  int dim() const { return value().dim(); }
  int64_t size(int axis) const { return value().size(axis); }
  DType dtype() const { return value().dtype(); }
  Device device() const { return value().device(); }
  int64_t numel() const { return value().numel(); }

  // A new leaf sharing this value, without history.
  Variable detach(bool requires_grad = false) const { return Variable(value(), requires_grad); }

 private:
  std::shared_ptr<VariableImpl> impl_;
};

class BackwardCtx;

// The op-specific part of a recorded node: what forward saved, and how to turn output grads into
// input grads by calling the ops' backward kernels.
class Function {
 public:
  virtual ~Function() = default;
  virtual void backward(BackwardCtx& ctx) = 0;
};

struct TensorMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device;
};

// Where the gradient of one input goes: the producing node's output, or a leaf's grad.
struct Edge {
  std::shared_ptr<Node> node;
  int index = 0;
  std::shared_ptr<VariableImpl> leaf;
  TensorMeta meta;  // the input's shape/dtype/device
  bool active() const { return node != nullptr || leaf != nullptr; }
};

struct Node {
  std::string name;  // op name, for messages
  uint64_t seq = 0;  // creation order: every input was created before its consumer
  std::vector<Edge> inputs;
  std::vector<TensorMeta> outputs;
  std::unique_ptr<Function> fn;  // released after backward
  // The outputs' gradients are gathered in one buffer, output after output, each a contiguous slice
  // (engine.h, BackwardCtx::packed_grad_outputs): set by ops that consume them together (linears).
  bool packed_output_grads = false;
  // The Function's backward reads fp32 gradients of its 16-bit outputs as they come (a LayerNorm
  // writing bf16 for GEMMs; views of such an output), so the engine leaves an fp32 gradient of
  // such an output unconverted (BackwardCtx::grad_dtype): set by the ops that can.
  bool f32_output_grads = false;
  // With f32_output_grads: the Function reads a gradient in its outputs' own 16-bit dtype as well
  // and computes in fp32 either way (a LayerNorm of a 16-bit x), so where one consumer alone makes
  // an output's gradient, an fp32 one costs twice the bytes for one rounding less: such a consumer
  // may write it in the output's dtype (BackwardCtx::sole_consumer_of_narrow_output).
  bool narrow_output_grads = false;
};

// True when an op on these inputs must record a graph: grad mode on and some input needs grad.
bool any_requires_grad(const std::vector<Variable>& inputs);

// Wraps `outputs` as Variables. When any_requires_grad(inputs), records a Node owning `fn`
// with edges to the inputs that require grad; otherwise `fn` is dropped and the outputs are
// plain (no-history) Variables. Undefined input Variables are allowed (optional inputs).
// `force`: record whenever grad mode is on (recompute segments, whose parameters are not inputs).
std::vector<Variable> record(std::string_view name, std::unique_ptr<Function> fn,
                             const std::vector<Variable>& inputs, const std::vector<Tensor>& outputs,
                             bool force = false);
inline Variable record1(std::string_view name, std::unique_ptr<Function> fn, const std::vector<Variable>& inputs,
                        const Tensor& output) {
  return record(name, std::move(fn), inputs, {output})[0];
}

}  // namespace foldcore::autograd
