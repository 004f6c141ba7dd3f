// Model parallelism inside the AlphaFold2 model: dynamic axial parallelism (DAP, FastFold arXiv
// 2203.00854) in the Evoformer and extra-MSA stacks, and branch parallelism (BP-2, HelixFold
// arXiv 2211.00235) in the Parallel Evoformer. The model sees its process groups only through
// ParallelGroup, so the model code builds without MPI; model_parallel_dist.h wraps a
// dist::Communicator (src/dist, MPI builds only) into one.
//
// Usage (every rank of the group runs the same calls):
//   af2::ModelParallel mp = af2::make_model_parallel(grid.dap(), grid.bp());  // model_parallel_dist.h
//   model.set_model_parallel(mp);
//   … forward (+ backward) as in one process …
//   af2::reduce_model_parallel_grads(model);   // after backward, before the DP reduction/optimizer
//
// A null group or a group of one rank is the single-process path, unchanged (no copies).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "autograd/variable.h"

namespace foldcore::af2 {

using autograd::Variable;

// A collective in flight (ParallelGroup::gather_async / switch_axis_async): get() completes it
// (the first call; later calls return the same Variable).
class PendingVariable {
 public:
  PendingVariable() = default;
  explicit PendingVariable(Variable ready) : ready_(std::move(ready)) {}
  explicit PendingVariable(std::function<Variable()> finish) : finish_(std::move(finish)) {}
  Variable get() {
    if (finish_) {
      ready_ = finish_();
      finish_ = nullptr;
    }
    return ready_;
  }

 private:
  std::function<Variable()> finish_;
  Variable ready_;
};

// The collectives of one group, as autograd functions (dist/dap.h, dist/bp.h give their
// semantics and backward passes).
class ParallelGroup {
 public:
  virtual ~ParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // DAP (dist/dap.h): chunk r of `size()` along an axis.
  virtual Variable scatter(const Variable& x, int axis) const = 0;            // backward: all-gather
  virtual Variable gather(const Variable& x, int axis) const = 0;             // backward: reduce-scatter
  virtual Variable gather_replicated(const Variable& x, int axis) const = 0;  // backward: own chunk
  virtual Variable switch_axis(const Variable& x, int from, int to) const = 0;
  // gather and switch_axis started now and completed by get() (dist/dap.h's async forms, FastFold's
  // duality async operations): the work in between overlaps the communication, in the forward and,
  // mirrored, in the backward. The same results bit for bit. A group made with overlap off runs
  // them to completion at the call.
  virtual PendingVariable gather_async(const Variable& x, int axis) const = 0;
  virtual PendingVariable switch_axis_async(const Variable& x, int from, int to) const = 0;
  // BP (dist/bp.h).
  virtual std::vector<Variable> exchange(const std::vector<Variable>& local, const std::vector<int>& owner,
                                         const std::vector<Shape>& shapes, bool sum_grads) const = 0;
  virtual std::vector<Variable> sum_grads(const std::vector<Variable>& xs) const = 0;
  // In-place Σ over the group (parameter gradients).
  virtual void all_reduce_sum(const Tensor& t) const = 0;
};

struct ModelParallel {
  std::shared_ptr<const ParallelGroup> dap;  // splits the MSA and pair representations
  std::shared_ptr<const ParallelGroup> bp;   // the Parallel Evoformer's two branches (size 2)

  int dap_size() const { return dap ? dap->size() : 1; }
  int bp_size() const { return bp ? bp->size() : 1; }
  bool active() const { return dap_size() > 1 || bp_size() > 1; }
};

class AlphaFold;

// Σ over the DAP group of the gradients of the parameters used by split computation (every block
// of the Evoformer and extra-MSA stacks), and Σ over the BP group of those of the main stack when
// branch parallelism is on. The other parameters (embedders, templates, structure module, heads)
// are computed the same way on every rank of these groups, so their gradients are already whole
// and equal there and are left alone. Call once after backward (and after gradient accumulation
// over micro-batches, or after each: the sum is linear), before the data-parallel reduction.
// No-op when model.model_parallel() is inactive.
void reduce_model_parallel_grads(const AlphaFold& model);

}  // namespace foldcore::af2
