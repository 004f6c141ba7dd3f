// DAP primitives (dap.h): layout moves around the communicator's flat collectives.
//
// The collectives exchange P equal contiguous blocks (communicator.h), so each op first brings
// the blocks it sends to the front: the split axis of size P·k is viewed as [P, k] and the P axis
// permuted to dimension 0. Received blocks come back in rank order at dimension 0 and are moved to
// the axis they index.
#include "dist/dap.h"

#include <memory>
#include <numeric>
#include <vector>

#include "autograd/engine.h"
#include "core/error.h"

namespace foldcore::dist::dap {
namespace {

std::vector<TrafficEntry>& traffic_log() {
  static std::vector<TrafficEntry> log;
  return log;
}

// This rank receives (P − 1)/P of `t` (see dap.h's traffic()).
void count(const char* collective, const Tensor& t, int p) {
  if (p <= 1) return;
  const std::string dtype(dtype_name(t.dtype()));
  const double bytes = static_cast<double>(t.numel()) * static_cast<double>(dtype_size(t.dtype())) *
                       static_cast<double>(p - 1) / static_cast<double>(p);
  for (TrafficEntry& e : traffic_log())
    if (e.collective == collective && e.dtype == dtype) {
      ++e.calls;
      e.bytes += bytes;
      return;
    }
  traffic_log().push_back({collective, dtype, 1, bytes});
}

int norm_axis(int axis, int dim, const char* op) {
  const int a = axis < 0 ? axis + dim : axis;
  FC_CHECK(a >= 0 && a < dim, "dap::", op, ": axis ", axis, " out of range for a ", dim, "-d tensor");
  return a;
}

void check_divisible(const Tensor& x, int axis, int n, const char* op) {
  FC_CHECK(x.size(axis) % n == 0, "dap::", op, ": axis ", axis, " has size ", x.size(axis),
           ", not divisible by the DAP group size ", n);
}

// x with `axis` (size P·k) split into [P, k] and P moved to the front, contiguous, in `dtype` (the
// wire's; x's by default): P send blocks.
Tensor blocks_to_front(const Tensor& x, int axis, int p, std::optional<DType> dtype = std::nullopt) {
  Shape s;
  for (int i = 0; i < x.dim(); ++i) {
    if (i == axis) {
      s.push_back(p);
      s.push_back(x.size(i) / p);
    } else {
      s.push_back(x.size(i));
    }
  }
  std::vector<int> order{axis};
  for (int i = 0; i < x.dim() + 1; ++i)
    if (i != axis) order.push_back(i);
  const Tensor blocks = x.reshape(s).permute(order);
  if (!dtype || *dtype == x.dtype()) return blocks.contiguous();
  Tensor out = Tensor::empty(blocks.shape(), *dtype, x.device());
  out.copy_(blocks);  // the cast and the permutation in one copy
  return out;
}

// The inverse: `b` is [P, shape with `axis` of size k] (block j from rank j); the result has the
// blocks concatenated along `axis` (size P·k), contiguous, in `dtype` (b's by default).
Tensor blocks_from_front(const Tensor& b, int axis, std::optional<DType> dtype = std::nullopt) {
  const int dim = b.dim() - 1;
  std::vector<int> order;
  for (int i = 1; i <= dim; ++i) {
    if (i - 1 == axis) order.push_back(0);
    order.push_back(i);
  }
  Shape s;
  for (int i = 0; i < dim; ++i) s.push_back(i == axis ? b.size(0) * b.size(i + 1) : b.size(i + 1));
  const Tensor moved = b.permute(order);
  if (!dtype || *dtype == b.dtype()) return moved.contiguous().view(s);
  Tensor out = Tensor::empty(moved.shape(), *dtype, b.device());
  out.copy_(moved);  // back to the sender's dtype in the same copy
  return out.view(s);
}

// The dtype x travels in: `wire` when it is narrower than x's (dap.h), else x's own.
DType wire_dtype(const Tensor& x, std::optional<DType> wire) {
  return wire && dtype_size(*wire) < dtype_size(x.dtype()) ? *wire : x.dtype();
}

Shape with_axis(const Shape& s, int axis, int64_t size) {
  Shape r = s;
  r[axis] = size;
  return r;
}

struct ScatterFn final : autograd::Function {
  Communicator* comm;
  int axis;
  void backward(autograd::BackwardCtx& ctx) override { ctx.put_grad(0, gather_tensor(*comm, ctx.grad_output(0), axis)); }
};

struct GatherFn final : autograd::Function {
  Communicator* comm;
  int axis;
  void backward(autograd::BackwardCtx& ctx) override {
    ctx.put_grad(0, reduce_scatter_tensor(*comm, ctx.grad_output(0), axis));
  }
};

struct GatherReplicatedFn final : autograd::Function {
  int axis, rank, size;
  void backward(autograd::BackwardCtx& ctx) override {
    ctx.put_grad(0, chunk(ctx.grad_output(0), axis, rank, size).contiguous());
  }
};

struct SwitchFn final : autograd::Function {
  Communicator* comm;
  int from, to;
  void backward(autograd::BackwardCtx& ctx) override {
    ctx.put_grad(0, switch_tensor(*comm, ctx.grad_output(0), to, from));
  }
};

// The backward half of an async gather or switch: the dual collective, started by the wait node's
// backward (AsyncFinishFn) and completed by the start node's (AsyncStartFn).
struct AsyncDual {
  Communicator* comm = nullptr;
  bool is_switch = false;
  int axis = 0;  // gather: the gathered axis; switch: `from`
  int to = 0;    // switch only
  Tensor send, recv;
  CommHandle handle;  // declared after its buffers: destroyed (completed) before them
};

Tensor flat(const Tensor& t) { return t.view({t.numel()}); }

struct AsyncStartFn final : autograd::Function {
  std::shared_ptr<AsyncDual> dual;
  void backward(autograd::BackwardCtx& ctx) override {
    AsyncDual& d = *dual;
    d.handle.wait();
    // Gather: the reduce-scatter's output is x's gradient; switch: blocks back along `to`.
    ctx.put_grad(0, d.is_switch ? blocks_from_front(d.recv, d.to) : d.recv);
    d.send = Tensor();
    d.recv = Tensor();
  }
};

struct AsyncFinishFn final : autograd::Function {
  std::shared_ptr<AsyncDual> dual;
  void backward(autograd::BackwardCtx& ctx) override {
    AsyncDual& d = *dual;
    const Tensor& g = ctx.grad_output(0);
    const int p = d.comm->size();
    d.send = blocks_to_front(g, d.axis, p);  // [P, the start's input shape (switch: `to` split)]
    if (d.is_switch) {
      d.recv = Tensor::empty(d.send.shape(), d.send.dtype(), d.send.device());
      count("all_to_all", d.send, p);
      d.handle = d.comm->all_to_all_async(flat(d.send), flat(d.recv));
    } else {
      d.recv = Tensor::empty(with_axis(g.shape(), d.axis, g.size(d.axis) / p), g.dtype(), g.device());
      count("reduce_scatter", d.send, p);
      d.handle = d.comm->reduce_scatter_async(flat(d.send), flat(d.recv));
    }
    // The start node's output (the forward's receive buffer) has the send blocks' shape; its
    // "gradient" only carries the dual's send buffer to it, untouched until the dual completes.
    ctx.put_grad(0, d.send);
  }
};

}  // namespace

struct AsyncVariable::State {
  bool is_switch = false;
  DType dtype = DType::f32;  // x's: the result's (the send and receive buffers may be the wire's)
  int axis = 0;  // gather: the gathered axis; switch: `from`
  Tensor send, recv;
  CommHandle handle;              // after its buffers: completed before they are freed
  autograd::Variable token;       // the start node's output, under autograd
  std::shared_ptr<AsyncDual> dual;
  autograd::Variable result;      // once waited
};

AsyncVariable::AsyncVariable(autograd::Variable ready) : ready_(std::move(ready)) {}

autograd::Variable AsyncVariable::wait() {
  if (!state_) return ready_;
  State& s = *state_;
  if (s.result.defined()) return s.result;
  s.handle.wait();
  const Tensor out = blocks_from_front(s.recv, s.axis, s.dtype);
  if (s.token.defined()) {
    auto fn = std::make_unique<AsyncFinishFn>();
    fn->dual = s.dual;
    s.result = autograd::record1(s.is_switch ? "dap_switch_axis_wait" : "dap_gather_wait", std::move(fn), {s.token}, out);
  } else {
    s.result = autograd::Variable(out);
  }
  s.token = autograd::Variable();
  s.dual.reset();
  s.send = Tensor();
  s.recv = Tensor();
  return s.result;
}

// Starts `send` → `recv` (all-gather or all-to-all) and, under autograd, records the start node.
AsyncVariable start_async(Communicator& comm, const autograd::Variable& x, bool is_switch, int axis, int to,
                          Tensor send) {
  auto s = std::make_shared<AsyncVariable::State>();
  s->is_switch = is_switch;
  s->dtype = x.dtype();
  s->axis = axis;
  s->send = std::move(send);
  if (is_switch) {
    s->recv = Tensor::empty(s->send.shape(), s->send.dtype(), s->send.device());
    count("all_to_all", s->send, comm.size());
    s->handle = comm.all_to_all_async(flat(s->send), flat(s->recv));
  } else {
    Shape bs{comm.size()};
    for (int64_t d : s->send.shape()) bs.push_back(d);
    s->recv = Tensor::empty(bs, s->send.dtype(), s->send.device());
    count("all_gather", s->recv, comm.size());
    s->handle = comm.all_gather_async(flat(s->send), flat(s->recv));
  }
  if (autograd::any_requires_grad({x})) {
    auto dual = std::make_shared<AsyncDual>();
    dual->comm = &comm;
    dual->is_switch = is_switch;
    dual->axis = axis;
    dual->to = to;
    auto fn = std::make_unique<AsyncStartFn>();
    fn->dual = dual;
    s->dual = std::move(dual);
    // The token stands for the receive buffer in x's dtype (the dual's send buffer, its gradient,
    // has that dtype; the buffer itself may be the wire's): a broadcast element, no storage.
    const Tensor token = Tensor::empty({1}, x.dtype(), x.device()).expand(s->recv.shape());
    s->token = autograd::record1(is_switch ? "dap_switch_axis_start" : "dap_gather_start", std::move(fn), {x}, token);
  }
  AsyncVariable a;
  a.state_ = std::move(s);
  return a;
}

Tensor chunk(const Tensor& x, int axis, int rank, int n) {
  axis = norm_axis(axis, x.dim(), "chunk");
  check_divisible(x, axis, n, "chunk");
  const int64_t k = x.size(axis) / n;
  return x.narrow(axis, rank * k, k);
}

Tensor gather_tensor(Communicator& comm, const Tensor& x, int axis, std::optional<DType> wire) {
  axis = norm_axis(axis, x.dim(), "gather");
  const int p = comm.size();
  if (p == 1) return x.contiguous();
  const Tensor in = x.contiguous().to(wire_dtype(x, wire));
  Shape bs{p};
  for (int64_t d : in.shape()) bs.push_back(d);
  Tensor out = Tensor::empty(bs, in.dtype(), in.device());
  count("all_gather", out, p);
  comm.all_gather(in.view({in.numel()}), out.view({out.numel()}));
  return blocks_from_front(out, axis, x.dtype());
}

Tensor reduce_scatter_tensor(Communicator& comm, const Tensor& x, int axis) {
  axis = norm_axis(axis, x.dim(), "reduce_scatter");
  const int p = comm.size();
  if (p == 1) return x.contiguous();
  check_divisible(x, axis, p, "reduce_scatter");
  const Tensor in = blocks_to_front(x, axis, p);
  Tensor out = Tensor::empty(with_axis(x.shape(), axis, x.size(axis) / p), x.dtype(), x.device());
  count("reduce_scatter", in, p);
  comm.reduce_scatter(in.view({in.numel()}), out.view({out.numel()}));
  return out;
}

Tensor switch_tensor(Communicator& comm, const Tensor& x, int from, int to, std::optional<DType> wire) {
  from = norm_axis(from, x.dim(), "switch_axis");
  to = norm_axis(to, x.dim(), "switch_axis");
  FC_CHECK(from != to, "dap::switch_axis: the two axes are the same (", from, ")");
  const int p = comm.size();
  if (p == 1) return x.contiguous();
  check_divisible(x, to, p, "switch_axis");
  // Block j: my rows, the j-th chunk of the `to` axis, for rank j. Block i received: rank i's rows
  // (chunk i of `from`) of my `to` chunk.
  const Tensor in = blocks_to_front(x, to, p, wire_dtype(x, wire));
  Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
  count("all_to_all", in, p);
  comm.all_to_all(in.view({in.numel()}), out.view({out.numel()}));
  return blocks_from_front(out, from, x.dtype());
}

void reset_traffic() { traffic_log().clear(); }

std::vector<TrafficEntry> traffic() { return traffic_log(); }

autograd::Variable scatter(Communicator& comm, const autograd::Variable& x, int axis) {
  axis = norm_axis(axis, x.dim(), "scatter");
  if (comm.size() == 1) return x;
  auto fn = std::make_unique<ScatterFn>();
  fn->comm = &comm;
  fn->axis = axis;
  // A copy, not a view: the chunk must not keep the whole tensor's storage alive (the point of
  // splitting is that no rank holds the whole activation).
  return autograd::record1("dap_scatter", std::move(fn), {x}, chunk(x.value(), axis, comm.rank(), comm.size()).clone());
}

autograd::Variable gather(Communicator& comm, const autograd::Variable& x, int axis, std::optional<DType> wire) {
  axis = norm_axis(axis, x.dim(), "gather");
  if (comm.size() == 1) return x;
  auto fn = std::make_unique<GatherFn>();
  fn->comm = &comm;
  fn->axis = axis;
  return autograd::record1("dap_gather", std::move(fn), {x}, gather_tensor(comm, x.value(), axis, wire));
}

autograd::Variable gather_replicated(Communicator& comm, const autograd::Variable& x, int axis) {
  axis = norm_axis(axis, x.dim(), "gather_replicated");
  if (comm.size() == 1) return x;
  auto fn = std::make_unique<GatherReplicatedFn>();
  fn->axis = axis;
  fn->rank = comm.rank();
  fn->size = comm.size();
  return autograd::record1("dap_gather_replicated", std::move(fn), {x}, gather_tensor(comm, x.value(), axis));
}

autograd::Variable switch_axis(Communicator& comm, const autograd::Variable& x, int from, int to,
                               std::optional<DType> wire) {
  from = norm_axis(from, x.dim(), "switch_axis");
  to = norm_axis(to, x.dim(), "switch_axis");
  if (comm.size() == 1) return x;
  auto fn = std::make_unique<SwitchFn>();
  fn->comm = &comm;
  fn->from = from;
  fn->to = to;
  return autograd::record1("dap_switch_axis", std::move(fn), {x}, switch_tensor(comm, x.value(), from, to, wire));
}

AsyncVariable gather_async(Communicator& comm, const autograd::Variable& x, int axis, std::optional<DType> wire) {
  axis = norm_axis(axis, x.dim(), "gather");
  if (comm.size() == 1) return AsyncVariable(x);
  return start_async(comm, x, false, axis, 0, x.value().contiguous().to(wire_dtype(x.value(), wire)));
}

AsyncVariable switch_axis_async(Communicator& comm, const autograd::Variable& x, int from, int to,
                                std::optional<DType> wire) {
  from = norm_axis(from, x.dim(), "switch_axis");
  to = norm_axis(to, x.dim(), "switch_axis");
  FC_CHECK(from != to, "dap::switch_axis: the two axes are the same (", from, ")");
  if (comm.size() == 1) return AsyncVariable(x);
  check_divisible(x.value(), to, comm.size(), "switch_axis");
  return start_async(comm, x, true, from, to, blocks_to_front(x.value(), to, comm.size(), wire_dtype(x.value(), wire)));
}

}  // namespace foldcore::dist::dap
