// ParallelGroup over dist::Communicator (model_parallel_dist.h).
#include "models/alphafold/parallel/model_parallel_dist.h"

#include "core/error.h"
#include "dist/bp.h"
#include "dist/dap.h"

namespace foldcore::af2 {
namespace {

class CommGroup final : public ParallelGroup {
 public:
  CommGroup(dist::Communicator& c, bool overlap) : c_(c), overlap_(overlap) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  Variable scatter(const Variable& x, int axis) const override { return dist::dap::scatter(c_, x, axis); }
  Variable gather(const Variable& x, int axis, std::optional<DType> wire) const override {
    return dist::dap::gather(c_, x, axis, wire);
  }
  Variable gather_replicated(const Variable& x, int axis) const override {
    return dist::dap::gather_replicated(c_, x, axis);
  }
  Variable switch_axis(const Variable& x, int from, int to, std::optional<DType> wire) const override {
    return dist::dap::switch_axis(c_, x, from, to, wire);
  }
  PendingVariable gather_async(const Variable& x, int axis, std::optional<DType> wire) const override {
    if (!overlap_) return PendingVariable(gather(x, axis, wire));
    return PendingVariable([a = dist::dap::gather_async(c_, x, axis, wire)]() mutable { return a.wait(); });
  }
  PendingVariable switch_axis_async(const Variable& x, int from, int to, std::optional<DType> wire) const override {
    if (!overlap_) return PendingVariable(switch_axis(x, from, to, wire));
    return PendingVariable([a = dist::dap::switch_axis_async(c_, x, from, to, wire)]() mutable { return a.wait(); });
  }
  std::vector<Variable> exchange(const std::vector<Variable>& local, const std::vector<int>& owner,
                                 const std::vector<Shape>& shapes, bool sum_grads) const override {
    return dist::bp::exchange(c_, local, owner, shapes, sum_grads);
  }
  std::vector<Variable> sum_grads(const std::vector<Variable>& xs) const override {
    return dist::bp::sum_grads(c_, xs);
  }
  void all_reduce_sum(const Tensor& t) const override { c_.all_reduce(t); }
  std::unique_ptr<PendingReduction> all_reduce_sum_async(const Tensor& t) const override {
    return std::make_unique<Pending>(c_.all_reduce_async(t));
  }
  std::unique_ptr<PendingReduction> broadcast_async(const Tensor& t, int root) const override {
    return std::make_unique<Pending>(c_.broadcast_async(t, root));
  }

 private:
  struct Pending final : PendingReduction {
    explicit Pending(dist::CommHandle h) : handle(std::move(h)) {}
    bool test() override { return handle.test(); }
    void wait() override { handle.wait(); }
    dist::CommHandle handle;
  };

  dist::Communicator& c_;
  bool overlap_;
};

}  // namespace

std::shared_ptr<const ParallelGroup> make_parallel_group(dist::Communicator* comm, bool overlap) {
  if (comm == nullptr) return nullptr;
  return std::make_shared<CommGroup>(*comm, overlap);
}

ModelParallel make_model_parallel(dist::Communicator* dap, dist::Communicator* bp, bool overlap,
                                  dist::Communicator* replica) {
  ModelParallel mp{make_parallel_group(dap, overlap), make_parallel_group(bp, overlap),
                   make_parallel_group(replica, overlap)};
  FC_CHECK(mp.bp_size() <= 2, "model parallelism: BP ", mp.bp_size(),
           ": the Parallel Evoformer has two branches (BP 1 or 2)");
  return mp;
}

}  // namespace foldcore::af2
