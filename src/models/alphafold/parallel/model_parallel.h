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
#include <optional>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/variable.h"

namespace foldcore::af2 {

using autograd::Variable;

// The wire dtype of the DAP collectives that move values every consumer rounds to the autocast
// dtype anyway (LayerNorm outputs read only by GEMMs, gated projections times a 0/1 mask): the
// autocast dtype (bf16 training and inference send them in bf16), none without autocast.
inline std::optional<DType> dap_wire_dtype() { return autograd::autocast_dtype(); }

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

// An in-place collective in flight (ParallelGroup::all_reduce_sum_async, broadcast_async).
class PendingReduction {
 public:
  virtual ~PendingReduction() = default;
  virtual bool test() = 0;  // non-blocking: true once complete (drives MPI's progress); then call wait()
  virtual void wait() = 0;  // completes it (CUDA: orders the caller's stream after it)
};

// The collectives of one group, as autograd functions (dist/dap.h, dist/bp.h give their
// semantics and backward passes).
class ParallelGroup {
 public:
  virtual ~ParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // DAP (dist/dap.h): chunk r of `size()` along an axis. `wire`: the dtype gather and switch_axis
  // send x in when it is narrower than x's (bf16 under autocast), the result in x's dtype and the
  // backward's dual in the gradient's (dist/dap.h, "The wire dtype"); for values every consumer
  // rounds to it anyway (dap_wire_dtype above).
  virtual Variable scatter(const Variable& x, int axis) const = 0;  // backward: all-gather
  virtual Variable gather(const Variable& x, int axis,              // backward: reduce-scatter
                          std::optional<DType> wire = std::nullopt) const = 0;
  virtual Variable gather_replicated(const Variable& x, int axis) const = 0;  // backward: own chunk
  virtual Variable switch_axis(const Variable& x, int from, int to, std::optional<DType> wire = std::nullopt) const = 0;
  // gather and switch_axis started now and completed by get() (dist/dap.h's async forms, FastFold's
  // duality async operations): the work in between overlaps the communication, in the forward and,
  // mirrored, in the backward. The same results bit for bit. A group made with overlap off runs
  // them to completion at the call.
  virtual PendingVariable gather_async(const Variable& x, int axis, std::optional<DType> wire = std::nullopt) const = 0;
  virtual PendingVariable switch_axis_async(const Variable& x, int from, int to,
                                            std::optional<DType> wire = std::nullopt) const = 0;
  // BP (dist/bp.h).
  virtual std::vector<Variable> exchange(const std::vector<Variable>& local, const std::vector<int>& owner,
                                         const std::vector<Shape>& shapes, bool sum_grads) const = 0;
  virtual std::vector<Variable> sum_grads(const std::vector<Variable>& xs) const = 0;
  // In-place Σ over the group (parameter gradients), now or started now.
  virtual void all_reduce_sum(const Tensor& t) const = 0;
  virtual std::unique_ptr<PendingReduction> all_reduce_sum_async(const Tensor& t) const = 0;
  // Inference (no autograd): rank `root`'s `t` into `t` on every rank, in place, started now. DAP's
  // ring form of a gather: one rank's chunk at a time instead of the whole tensor at once.
  virtual std::unique_ptr<PendingReduction> broadcast_async(const Tensor& t, int root) const = 0;
};

struct ModelParallel {
  std::shared_ptr<const ParallelGroup> dap;  // splits the MSA and pair representations
  std::shared_ptr<const ParallelGroup> bp;   // the Parallel Evoformer's two branches (size 2)
  // Optional: every dap × bp rank of this model replica, on a communicator of its own (dist::
  // ProcessGrid::model()). The split stacks' gradient sums then use it: one sum instead of DAP's
  // then BP's, and off the activations' communicators (a gradient bucket started during the
  // backward never queues ahead of a block's gathers). Null: the sums run over dap, then bp.
  std::shared_ptr<const ParallelGroup> replica;

  int dap_size() const { return dap ? dap->size() : 1; }
  int bp_size() const { return bp ? bp->size() : 1; }
  bool active() const { return dap_size() > 1 || bp_size() > 1; }
};

class AlphaFold;

// Σ over the DAP group of the gradients of the parameters used by split computation (every block
// of the Evoformer and extra-MSA stacks, and the template embedding: its stacks and pointwise
// attention run on each rank's rows), and Σ over the BP group of those of the main stack when
// branch parallelism is on. The other parameters (embedders, structure module, heads) are
// computed the same way on every rank of these groups, so their gradients are already whole and
// equal there and are left alone. Call once after backward (and after gradient accumulation
// over micro-batches, or after each: the sum is linear), before the data-parallel reduction.
// No-op when model.model_parallel() is inactive. With ModelParallel::replica the main stack's sum
// under BP is one sum over the replica, and a DAP-only stack's sum (bp 1) runs over the replica,
// which then holds the DAP group's ranks.
void reduce_model_parallel_grads(const AlphaFold& model);

// One contiguous range of the flat gradient buffer holding whole parameters of one split stack,
// and the groups its Σ runs over, in order (model_parallel_grads.cpp).
struct ModelParallelGradRange {
  Tensor flat;
  std::vector<const ParallelGroup*> groups;
  std::vector<const autograd::VariableImpl*> leaves;  // its parameters
  // Its sum may start during the backward: one sum, and on the replica's communicator unless every
  // rank of the group reports the same parameters at the same points of the backward (DAP: the
  // same graph on every rank; BP: each rank reports only its own branch's).
  bool early = false;
};

// reduce_model_parallel_grads overlapped with the backward: the split stacks' gradients are cut
// into buckets (whole parameters, contiguous in the flat gradient buffer, ≥ bucket_bytes each but
// the last of a run; grouped from the end of the buffer, the order the backward finishes them),
// and a bucket's Σ over its group starts as soon as the autograd engine's gradient-ready hook has
// reported all its parameters (and all earlier buckets have started: every rank starts the same
// sums in the same order). finish() starts the rest, completes every sum, and leaves the
// gradients exactly as reduce_model_parallel_grads would (the same sums, in buckets; with two
// ranks bit for bit, as a sum of two is the same in any order).
//
//   af2::ModelParallelGradReducer mpr(model);
//   per backward:  mpr.begin(on_final);
//                  { autograd::GradReadyHookGuard g([&](const auto& leaf) { mpr.on_ready(leaf); });
//                    backward … }
//                  mpr.finish();   // instead of reduce_model_parallel_grads(model)
//
// on_final(leaf) is called once per parameter whose gradient is final on this rank: at once for
// parameters outside the split stacks (already whole), after its bucket's sum for the others, the
// rest in finish(). A data-parallel reduction can start its buckets from it (af2_trainer.cpp).
// Under BP a rank runs one branch: the other branch's parameters (zero gradients here) count as
// reported from the start (EvoformerStack::other_branch_parameters), so the two ranks' buckets
// complete; their sums start at different points of the two backwards, which only the replica's
// communicator (used by nothing else) allows. Without ModelParallel::replica a BP stack's buckets
// (over bp, or over dap then bp) therefore wait for finish(), and so do the ones after them.
class ModelParallelGradReducer {
 public:
  using FinalFn = std::function<void(const autograd::VariableImpl& leaf)>;
  explicit ModelParallelGradReducer(const AlphaFold& model, int64_t bucket_bytes = int64_t{25} << 20);
  ~ModelParallelGradReducer();
  ModelParallelGradReducer(const ModelParallelGradReducer&) = delete;
  ModelParallelGradReducer& operator=(const ModelParallelGradReducer&) = delete;

  bool active() const { return !buckets_.empty(); }  // false: nothing to sum (one process)
  void begin(FinalFn on_final = {});
  void on_ready(const autograd::VariableImpl& leaf);  // the GradReadyHook
  void finish();
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Buckets whose sum had started before finish() in the last backward.
  int64_t started_before_finish() const { return started_before_finish_; }

 private:
  struct Bucket : ModelParallelGradRange {
    int64_t pending = 0;                      // parameters not yet reported this backward
    std::unique_ptr<PendingReduction> handle;  // the sum in flight (one group)
  };
  size_t find(const autograd::VariableImpl& leaf) const;  // its index_ position, or index_.size()
  void launch_ready();
  void poll(bool block);
  void complete(Bucket& b);

  std::vector<Bucket> buckets_;
  std::vector<std::pair<const autograd::VariableImpl*, size_t>> index_;  // leaf → bucket, sorted by leaf
  std::vector<bool> reported_;                                          // per index_ entry
  std::vector<size_t> other_branch_;  // index_ positions of the parameters of the branch BP runs elsewhere
  size_t next_ = 0;                                                     // next bucket to start
  int64_t started_before_finish_ = 0;
  FinalFn on_final_;
};

}  // namespace foldcore::af2
