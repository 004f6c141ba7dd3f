// ParamStore: every trainable parameter of a model in ONE flat fp32 buffer, and every parameter
// gradient in a parallel flat buffer ("tensor fusion"; AlphaFold has ~4,600 parameter tensors).
//
//   ParamStore ps(device);
//   Variable w = ps.add("layer_0/attention/q/weight", {c, h*d}, /*weight_decay=*/true, init);
//   ...                                  // every module registers its parameters
//   ps.finalize();                       // allocates the two buffers; each parameter is a view
//
// Registration returns the parameter's Variable at once (modules keep it); its value and grad
// become views of the flat buffers at finalize(). Optimizers step over values()/grads() with
// segments(); checkpoints use named_values(). Parameter-grad kernels accumulate (+=) into the
// views, so gradient accumulation over micro-batches is just "don't zero_grad() in between".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "kernels/optim.h"

namespace foldcore::autograd {

class ParamStore {
 public:
  // Segment starts are aligned to this many elements (64 bytes) for vectorised kernels; the gaps
  // hold zeros with zero gradient, which every optimizer leaves at zero.
  static constexpr int64_t kAlignElems = 16;

  explicit ParamStore(Device device = Device::cpu()) : device_(device) {}
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // Registers a parameter. `init` (host or device, any float dtype, `shape`) is its initial
  // value; undefined means zeros. Names must be unique; not allowed after finalize().
  Variable add(const std::string& name, const Shape& shape, bool weight_decay, const Tensor& init = {});

  // Lays these registered parameters out back to back, in this order, where the first of them
  // (in registration order) would have gone; the others follow it instead of their own places.
  // Projections of one input stacked for one GEMM (autograd::linears) are then views of the flat
  // buffers (and of its bf16 cast), and their weight gradients one product. names() and segments()
  // follow the layout. Before finalize(); a parameter belongs to at most one group.
  void place_together(const std::vector<Variable>& params);

  // Allocates the flat buffers on the device, copies the initial values, zeroes the grads.
  void finalize();
  bool finalized() const { return values_.defined(); }

  Device device() const { return device_; }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  int64_t num_elements() const;  // Σ parameter sizes (without alignment gaps)
  const Tensor& values() const;  // flat f32 [total]
  const Tensor& grads() const;   // flat f32 [total]
  std::vector<ops::ParamSegment> segments() const;

  const std::vector<std::string>& names() const { return names_; }
  const Variable& get(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  std::map<std::string, Tensor> named_values() const;
  std::map<std::string, Tensor> named_grads() const;

  void zero_grad();

 private:
  struct Entry {
    Variable var;
    Shape shape;
    bool weight_decay = true;
    Tensor init;
    int64_t offset = 0;
  };
  Device device_;
  std::vector<Entry> entries_;
  std::vector<std::string> names_;
  std::map<std::string, size_t> index_;
  std::vector<std::vector<size_t>> groups_;  // place_together's, as entry indices
  Tensor values_, grads_;
};

}  // namespace foldcore::autograd
