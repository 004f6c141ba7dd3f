// BP primitives (bp.h).
#include "dist/bp.h"

#include <memory>

#include "autograd/engine.h"
#include "core/error.h"

namespace foldcore::dist::bp {
namespace {

struct ExchangeFn final : autograd::Function {
  Communicator* comm;
  std::vector<int> owner;
  bool sum = true;
  void backward(autograd::BackwardCtx& ctx) override {
    for (size_t i = 0; i < owner.size(); ++i) {
      Tensor g = ctx.grad_output(static_cast<int>(i)).contiguous();
      if (sum) {
        g = g.clone();  // the all-reduce is in place; the grad_output stays the engine's
        comm->all_reduce(g);
      }
      if (owner[i] == comm->rank() && ctx.needs_grad(static_cast<int>(i))) ctx.put_grad(static_cast<int>(i), g);
    }
  }
};

struct SumGradsFn final : autograd::Function {
  Communicator* comm;
  void backward(autograd::BackwardCtx& ctx) override {
    for (size_t i = 0; i < n; ++i) {
      Tensor g = ctx.grad_output(static_cast<int>(i)).clone();
      comm->all_reduce(g);
      if (ctx.needs_grad(static_cast<int>(i))) ctx.put_grad(static_cast<int>(i), g);
    }
  }
  size_t n = 0;
};

}  // namespace

std::vector<autograd::Variable> exchange(Communicator& comm, const std::vector<autograd::Variable>& local,
                                         const std::vector<int>& owner, const std::vector<Shape>& shapes,
                                         bool sum_grads) {
  FC_CHECK(comm.size() > 1, "bp::exchange: the '", comm.name(), "' group has one rank");
  FC_CHECK(local.size() == owner.size() && local.size() == shapes.size(), "bp::exchange: ", local.size(),
           " values, ", owner.size(), " owners, ", shapes.size(), " shapes");
  DType dtype = DType::f32;
  for (const auto& v : local)
    if (v.defined()) dtype = v.dtype();
  // Every argument is checked before the first collective, so a bad call fails on its own.
  for (size_t i = 0; i < local.size(); ++i) {
    FC_CHECK(owner[i] >= 0 && owner[i] < comm.size(), "bp::exchange: owner ", owner[i], " of value ", i,
             " is not a rank of '", comm.name(), "'");
    const bool mine = owner[i] == comm.rank();
    FC_CHECK(mine == local[i].defined(), "bp::exchange: value ", i, " must be defined exactly on its owner (rank ",
             owner[i], "); rank ", comm.rank(), (mine ? " lacks it" : " has one"));
    FC_CHECK(!mine || local[i].shape() == shapes[i], "bp::exchange: value ", i, " is ", local[i].shape().str(),
             ", expected ", shapes[i].str());
  }
  std::vector<Tensor> outs;
  for (size_t i = 0; i < local.size(); ++i) {
    const bool mine = owner[i] == comm.rank();
    Tensor t = mine ? local[i].value().contiguous().clone() : Tensor::empty(shapes[i], dtype, comm.device());
    comm.broadcast(t, owner[i]);
    outs.push_back(std::move(t));
  }
  auto fn = std::make_unique<ExchangeFn>();
  fn->comm = &comm;
  fn->owner = owner;
  fn->sum = sum_grads;
  return autograd::record("bp_exchange", std::move(fn), local, outs, /*force=*/true);
}

std::vector<autograd::Variable> sum_grads(Communicator& comm, const std::vector<autograd::Variable>& xs) {
  FC_CHECK(comm.size() > 1, "bp::sum_grads: the '", comm.name(), "' group has one rank");
  std::vector<Tensor> outs;
  for (const auto& x : xs) outs.push_back(x.value());
  auto fn = std::make_unique<SumGradsFn>();
  fn->comm = &comm;
  fn->n = xs.size();
  return autograd::record("bp_sum_grads", std::move(fn), xs, outs, /*force=*/true);
}

}  // namespace foldcore::dist::bp
