// DAP primitives (dist/dap.h) under mpirun -np 2 and 4: every rank regenerates the whole seeded
// tensors, so each result and each gradient is checked against the one-process reference —
// scatter/gather/switch move exact copies (f32 and bf16 compare bit for bit), the reduce-scatter
// of a gather's backward sums P fp32 terms (1e-6 relative). The async forms (gather_async,
// switch_axis_async) give the sync forms' values and gradients bit for bit, and a logging
// communicator shows that their collectives are in flight around the work recorded in between,
// in the forward and in the backward. A bf16 wire rounds the forward values and leaves the fp32
// gradients unrounded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "core/error.h"
#include "dist/dap.h"
#include "dist_test_util.h"

namespace foldcore::testing {
namespace {

namespace dap = dist::dap;
using autograd::Variable;

// The same seeded [4P, 3, 2P] tensor on every rank (rank argument 0 for shared data).
Tensor whole(uint64_t seed, int p, DType dt = DType::f32) {
  const Shape s{4 * p, 3, 2 * p};
  return Tensor::from_vector(rank_values(seed, 0, s.product()), s).to(dt);
}
// Rank r's own seeded tensor of shape s (its downstream weights).
Tensor mine(uint64_t seed, int rank, const Shape& s) { return Tensor::from_vector(rank_values(seed, rank + 1, s.product()), s); }

void expect_equal(const Tensor& got, const Tensor& want, double tol = 0) {
  ASSERT_EQ(got.shape(), want.shape());
  const auto g = got.to(DType::f32).contiguous().to_vector(), w = want.to(DType::f32).contiguous().to_vector();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol * (1 + std::fabs(w[i]))) << "element " << i;
}

TEST(Dap, GatherAndSwitchMoveExactCopies) {
  auto& c = mpi_world();
  const int p = c.size(), r = c.rank();
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor x = whole(11, p, dt);
    for (int axis : {0, 2, -1}) expect_equal(dap::gather_tensor(c, dap::chunk(x, axis, r, p), axis), x);
    // Rows (axis 0) split → columns (axis 2) split, and back.
    const Tensor cols = dap::switch_tensor(c, dap::chunk(x, 0, r, p), 0, 2);
    expect_equal(cols, dap::chunk(x, 2, r, p));
    expect_equal(dap::switch_tensor(c, cols, 2, 0), dap::chunk(x, 0, r, p));
  }
}

// Σ_ranks Σ w_r ⊙ y_r, each rank with its own weights, and the gradient flowing back through
// the primitive must equal the one-process gradient of the same sum.
TEST(Dap, ScatterBackwardIsTheAllGather) {
  auto& c = mpi_world();
  const int p = c.size(), r = c.rank();
  const Tensor x0 = whole(12, p);
  const Variable x(x0, true);
  const Variable y = dap::scatter(c, x, 2);
  expect_equal(y.value(), dap::chunk(x0, 2, r, p));
  const Tensor w = mine(13, r, y.shape());
  autograd::backward({y}, {w});
  // d/dx of Σ_q Σ w_q ⊙ chunk_q(x) = the w_q side by side along axis 2.
  std::vector<Tensor> parts;
  for (int q = 0; q < p; ++q) parts.push_back(mine(13, q, y.shape()));
  for (int q = 0; q < p; ++q) expect_equal(dap::chunk(x.grad(), 2, q, p), parts[static_cast<size_t>(q)]);
}

TEST(Dap, GatherBackwardIsTheReduceScatter) {
  auto& c = mpi_world();
  const int p = c.size(), r = c.rank();
  const Tensor x0 = whole(14, p);
  const Variable xl(dap::chunk(x0, 0, r, p).contiguous(), true);
  const Variable y = dap::gather(c, xl, 0);
  expect_equal(y.value(), x0);
  autograd::backward({y}, {mine(15, r, x0.shape())});
  // Every rank used the whole tensor with its own weights: chunk r's gradient is Σ_q w_q[chunk r].
  Tensor want = Tensor::zeros(xl.shape(), DType::f32);
  std::vector<float> acc(static_cast<size_t>(want.numel()), 0.f);
  for (int q = 0; q < p; ++q) {
    const auto wq = dap::chunk(mine(15, q, x0.shape()), 0, r, p).contiguous().to_vector();
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += wq[i];
  }
  expect_equal(xl.grad(), Tensor::from_vector(acc, xl.shape()), 1e-6);
}

TEST(Dap, SwitchBackwardIsTheInverseSwitch) {
  auto& c = mpi_world();
  const int p = c.size(), r = c.rank();
  const Tensor x0 = whole(16, p);
  const Variable xl(dap::chunk(x0, 0, r, p).contiguous(), true);
  const Variable y = dap::switch_axis(c, xl, 0, 2);
  expect_equal(y.value(), dap::chunk(x0, 2, r, p));
  autograd::backward({y}, {mine(17, r, y.shape())});
  // The whole gradient has rank q's weights in column chunk q; rank r gets its row chunk of it.
  const Shape s = x0.shape();
  std::vector<float> g(static_cast<size_t>(s.product()));
  const int64_t k = s[2] / p;
  for (int q = 0; q < p; ++q) {
    const auto wq = mine(17, q, y.shape()).to_vector();  // [4P, 3, k]
    for (int64_t i = 0; i < s[0]; ++i)
      for (int64_t j = 0; j < s[1]; ++j)
        for (int64_t t = 0; t < k; ++t)
          g[static_cast<size_t>((i * s[1] + j) * s[2] + q * k + t)] = wq[static_cast<size_t>((i * s[1] + j) * k + t)];
  }
  expect_equal(xl.grad(), dap::chunk(Tensor::from_vector(g, s), 0, r, p));
}

// traffic(): what this rank received, by collective and element type, forward and backward.
TEST(Dap, TrafficCountsWhatARankReceives) {
  auto& c = mpi_world();
  const int p = c.size(), r = c.rank();
  const Tensor x = whole(31, p);  // [4P, 3, 2P] f32: 24·P² values
  const double total = static_cast<double>(x.numel()), share = static_cast<double>(p - 1) / p;
  const auto find = [](const std::string& coll, const std::string& dtype) {
    for (const dap::TrafficEntry& e : dap::traffic())
      if (e.collective == coll && e.dtype == dtype) return e;
    return dap::TrafficEntry{coll, dtype, 0, 0};
  };
  dap::reset_traffic();
  EXPECT_TRUE(dap::traffic().empty());
  // A switch of this rank's rows (1/P of x) receives (P − 1)/P of them; its backward the same.
  const Variable rows(dap::chunk(x, 0, r, p).contiguous(), true);
  const Variable cols = dap::switch_axis(c, rows, 0, 2);
  autograd::backward({cols}, {Tensor::full(cols.shape(), 1.0, DType::f32)});
  EXPECT_EQ(find("all_to_all", "f32").calls, 2);
  EXPECT_DOUBLE_EQ(find("all_to_all", "f32").bytes, 2 * total / p * share * 4);
  // A gather of a bf16 chunk receives (P − 1)/P of the whole; an async one counts the same.
  const Tensor xb = dap::chunk(x, 2, r, p).contiguous().to(DType::bf16);
  dap::gather_tensor(c, xb, 2);
  dap::gather_async(c, Variable(xb), 2).wait();
  EXPECT_EQ(find("all_gather", "bf16").calls, 2);
  EXPECT_DOUBLE_EQ(find("all_gather", "bf16").bytes, 2 * total * share * 2);
  // A gather's backward: a reduce-scatter of the whole gradient.
  const Variable part(dap::chunk(x, 0, r, p).contiguous(), true);
  const Variable all = dap::gather(c, part, 0);
  autograd::backward({all}, {Tensor::full(all.shape(), 1.0, DType::f32)});
  EXPECT_EQ(find("reduce_scatter", "f32").calls, 1);
  EXPECT_DOUBLE_EQ(find("reduce_scatter", "f32").bytes, total * share * 4);
  EXPECT_DOUBLE_EQ(find("all_gather", "f32").bytes, total * share * 4);
  dap::reset_traffic();
  EXPECT_TRUE(dap::traffic().empty());
}

// A bf16 wire (dap.h, "The wire dtype"): the forward moves x rounded to bf16 and returns fp32 (the
// exact copy of the rounded values), in bf16 bytes; the backward's dual carries the fp32 gradient
// unrounded (its values are not bf16-representable). Sync and async forms alike.
TEST(Dap, Bf16WireRoundsTheForwardAndNotTheGradient) {
  auto& c = mpi_world();
  const int p = c.size(), r = c.rank();
  const Tensor x0 = whole(41, p), rounded = x0.to(DType::bf16).to(DType::f32);
  const auto find = [](const std::string& coll, const std::string& dtype) {
    for (const dap::TrafficEntry& e : dap::traffic())
      if (e.collective == coll && e.dtype == dtype) return e;
    return dap::TrafficEntry{coll, dtype, 0, 0};
  };
  for (bool async : {false, true}) {
    dap::reset_traffic();
    // Switch rows → columns.
    const Variable rows(dap::chunk(x0, 0, r, p).contiguous(), true);
    const Variable cols = async ? dap::switch_axis_async(c, rows, 0, 2, DType::bf16).wait()
                                : dap::switch_axis(c, rows, 0, 2, DType::bf16);
    ASSERT_EQ(cols.dtype(), DType::f32);
    expect_equal(cols.value(), dap::chunk(rounded, 2, r, p));
    autograd::backward({cols}, {mine(42, r, cols.shape())});
    // The unrounded weights of every rank's columns, this rank's rows of them (as the fp32 switch).
    const Variable rows_ref(dap::chunk(x0, 0, r, p).contiguous(), true);
    autograd::backward({dap::switch_axis(c, rows_ref, 0, 2)}, {mine(42, r, cols.shape())});
    expect_equal(rows.grad(), rows_ref.grad());
    EXPECT_EQ(find("all_to_all", "bf16").calls, 1);
    EXPECT_EQ(find("all_to_all", "f32").calls, 3);  // the dual, and the reference's switch and dual
    // Gather along axis 0.
    const Variable part(dap::chunk(x0, 0, r, p).contiguous(), true);
    const Variable all = async ? dap::gather_async(c, part, 0, DType::bf16).wait() : dap::gather(c, part, 0, DType::bf16);
    ASSERT_EQ(all.dtype(), DType::f32);
    expect_equal(all.value(), rounded);
    autograd::backward({all}, {mine(43, r, x0.shape())});
    const Variable part_ref(dap::chunk(x0, 0, r, p).contiguous(), true);
    autograd::backward({dap::gather(c, part_ref, 0)}, {mine(43, r, x0.shape())});
    expect_equal(part.grad(), part_ref.grad());
    EXPECT_EQ(find("all_gather", "bf16").calls, 1);
    EXPECT_EQ(find("reduce_scatter", "f32").calls, 2);
    EXPECT_EQ(find("reduce_scatter", "bf16").calls, 0);
  }
  // A wire not narrower than x (bf16 x, f32 wire): sent as it is.
  dap::reset_traffic();
  const Tensor xb = dap::chunk(x0, 0, r, p).contiguous().to(DType::bf16);
  const Tensor yb = dap::switch_tensor(c, xb, 0, 2, DType::f32);
  EXPECT_EQ(yb.dtype(), DType::bf16);
  expect_equal(yb, dap::chunk(rounded, 2, r, p));
  EXPECT_EQ(find("all_to_all", "bf16").calls, 1);
  EXPECT_EQ(find("all_to_all", "f32").calls, 0);
  dap::reset_traffic();
}

TEST(Dap, GroupOfOneIsTheIdentity) {
  auto& c = mpi_world();
  auto self = c.split(c.rank(), 0, "dap-self");
  ASSERT_EQ(self->size(), 1);
  const Variable x(whole(18, 1), true);
  EXPECT_EQ(dap::gather(*self, x, 0).value().data_ptr(), x.value().data_ptr());
  EXPECT_EQ(dap::scatter(*self, x, 2).value().data_ptr(), x.value().data_ptr());
  EXPECT_EQ(dap::switch_axis(*self, x, 0, 2).value().data_ptr(), x.value().data_ptr());
}

TEST(Dap, IndivisibleAxisIsAClearError) {
  auto& c = mpi_world();
  const Tensor x = Tensor::zeros({3 * c.size() + 1, 2}, DType::f32);
  try {
    dap::switch_tensor(c, Tensor::zeros({2, 3 * c.size() + 1}, DType::f32), 0, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not divisible by the DAP group size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dap::chunk(x, 0, 0, c.size()), Error);
}

// Σ w ⊙ f(x) with f = the op under test, applied to rank r's chunk of a seeded tensor: returns the
// result and the chunk's gradient.
struct OpResult {
  Tensor value, grad;
};
template <class F>
OpResult run_op(const Tensor& chunk, const Tensor& w, const F& f) {
  const Variable x(chunk.clone(), true);
  const Variable y = f(x);
  autograd::backward({y}, {w.to(y.dtype())});
  return {y.value(), x.grad()};
}

void expect_bits(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  const Tensor g = got.contiguous(), w = want.contiguous();
  ASSERT_EQ(std::memcmp(g.data_ptr(), w.data_ptr(), static_cast<size_t>(g.nbytes())), 0);
}

TEST(Dap, AsyncFormsEqualTheSyncFormsBitForBit) {
  auto& c = mpi_world();
  const int p = c.size(), r = c.rank();
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor x0 = whole(20, p, dt);
    for (int axis : {0, 2}) {
      SCOPED_TRACE("gather axis " + std::to_string(axis));
      const Tensor xc = dap::chunk(x0, axis, r, p).contiguous();
      const Tensor w = mine(21, r, x0.shape());
      const OpResult want = run_op(xc, w, [&](const Variable& x) { return dap::gather(c, x, axis); });
      const OpResult got = run_op(xc, w, [&](const Variable& x) {
        dap::AsyncVariable a = dap::gather_async(c, x, axis);
        return a.wait();
      });
      expect_bits(got.value, want.value);
      expect_bits(got.grad, want.grad);
    }
    {
      SCOPED_TRACE("switch 0 -> 2");
      const Tensor xc = dap::chunk(x0, 0, r, p).contiguous();
      const Tensor w = mine(22, r, dap::chunk(x0, 2, r, p).shape());
      const OpResult want = run_op(xc, w, [&](const Variable& x) { return dap::switch_axis(c, x, 0, 2); });
      const OpResult got = run_op(xc, w, [&](const Variable& x) {
        dap::AsyncVariable a = dap::switch_axis_async(c, x, 0, 2);
        return a.wait();
      });
      expect_bits(got.value, want.value);
      expect_bits(got.grad, want.grad);
    }
  }
}

// Forwards every collective to `inner`, logging "start <op>" at the call and "wait <op>" when its
// handle completes it.
class LoggingComm final : public dist::Communicator {
 public:
  LoggingComm(dist::Communicator& inner, std::vector<std::string>& log) : c_(inner), log_(log) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  Device device() const override { return c_.device(); }
  std::string_view backend() const override { return c_.backend(); }
  const std::string& name() const override { return c_.name(); }
  dist::CommHandle all_reduce_async(const Tensor& t, dist::ReduceOp op) override {
    return wrap("all_reduce", c_.all_reduce_async(t, op));
  }
  dist::CommHandle reduce_scatter_async(const Tensor& in, const Tensor& out, dist::ReduceOp op) override {
    return wrap("reduce_scatter", c_.reduce_scatter_async(in, out, op));
  }
  dist::CommHandle all_gather_async(const Tensor& in, const Tensor& out) override {
    return wrap("all_gather", c_.all_gather_async(in, out));
  }
  dist::CommHandle all_to_all_async(const Tensor& in, const Tensor& out) override {
    return wrap("all_to_all", c_.all_to_all_async(in, out));
  }
  dist::CommHandle broadcast_async(const Tensor& t, int root) override { return wrap("broadcast", c_.broadcast_async(t, root)); }
  dist::CommHandle send_async(const Tensor& t, int peer, int tag) override { return wrap("send", c_.send_async(t, peer, tag)); }
  dist::CommHandle recv_async(const Tensor& t, int peer, int tag) override { return wrap("recv", c_.recv_async(t, peer, tag)); }
  dist::CommHandle barrier_async() override { return wrap("barrier", c_.barrier_async()); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    return c_.split(color, key, name);
  }

 private:
  struct Pending final : dist::PendingOp {
    std::string op;
    dist::CommHandle inner;
    std::vector<std::string>* log;
    void wait() override {
      log->push_back("wait " + op);
      inner.wait();
    }
    bool test() override { return inner.test(); }
  };
  dist::CommHandle wrap(const std::string& op, dist::CommHandle h) {
    log_.push_back("start " + op);
    auto pending = std::make_unique<Pending>();
    pending->op = op;
    pending->inner = std::move(h);
    pending->log = &log_;
    return dist::CommHandle(std::move(pending));
  }
  dist::Communicator& c_;
  std::vector<std::string>& log_;
};

// An identity op that logs its forward and its backward.
struct LoggedIdentityFn final : autograd::Function {
  std::vector<std::string>* log;
  void backward(autograd::BackwardCtx& ctx) override {
    log->push_back("work backward");
    ctx.put_grad(0, ctx.grad_output(0));
  }
};
Variable logged_work(const Variable& v, std::vector<std::string>& log) {
  log.push_back("work forward");
  auto fn = std::make_unique<LoggedIdentityFn>();
  fn->log = &log;
  return autograd::record1("logged_work", std::move(fn), {v}, v.value().clone());
}

// The work between start and wait runs while the collective is in flight, forward and backward
// (the dual is started by the wait's backward node and completed by the start's), for a gather
// and a switch in flight at the same time, completed in the other order.
TEST(Dap, AsyncCollectivesAreInFlightAroundTheWorkInBetween) {
  auto& world = mpi_world();
  std::vector<std::string> log;
  LoggingComm c(world, log);
  const int p = c.size(), r = c.rank();
  const Tensor x0 = whole(23, p);
  const Variable x(dap::chunk(x0, 0, r, p).contiguous(), true), y(mine(24, r, x.shape()), true);
  dap::AsyncVariable g = dap::gather_async(c, x, 0);
  dap::AsyncVariable s = dap::switch_axis_async(c, x, 0, 2);
  const Variable work = logged_work(y, log);
  const Variable sw = s.wait(), ga = g.wait();
  EXPECT_EQ(log, (std::vector<std::string>{"start all_gather", "start all_to_all", "work forward", "wait all_to_all",
                                           "wait all_gather"}));
  log.clear();
  // loss = Σ w1 ⊙ gather(x) + Σ w2 ⊙ switch(x) + Σ w3 ⊙ work(y)
  autograd::backward({ga, sw, work}, {mine(25, r, ga.shape()), mine(26, r, sw.shape()), mine(27, r, work.shape())});
  // Reverse creation order: the waits' nodes (gather's last: created last) start the duals, the
  // work's backward runs, then the starts' nodes complete them (the switch's first).
  EXPECT_EQ(log, (std::vector<std::string>{"start reduce_scatter", "start all_to_all", "work backward",
                                           "wait all_to_all", "wait reduce_scatter"}));
  // And the gradient is the sync forms'.
  const OpResult want_g = run_op(x.value(), mine(25, r, ga.shape()), [&](const Variable& v) { return dap::gather(world, v, 0); });
  const OpResult want_s = run_op(x.value(), mine(26, r, sw.shape()), [&](const Variable& v) { return dap::switch_axis(world, v, 0, 2); });
  std::vector<float> want = want_g.grad.to_vector();
  const std::vector<float> ws = want_s.grad.to_vector();
  for (size_t i = 0; i < want.size(); ++i) want[i] += ws[i];
  expect_equal(x.grad(), Tensor::from_vector(want, x.shape()), 1e-6);
}

// Without autograd (inference, or an input without grad) the async forms record nothing, and a
// group of one rank returns the input itself.
TEST(Dap, AsyncFormsWithoutGradAndInAGroupOfOne) {
  auto& c = mpi_world();
  const int p = c.size(), r = c.rank();
  const Tensor x0 = whole(28, p);
  {
    autograd::NoGradGuard ng;
    const Variable x(dap::chunk(x0, 0, r, p).contiguous(), true);
    dap::AsyncVariable a = dap::gather_async(c, x, 0);
    const Variable y = a.wait();
    EXPECT_FALSE(y.requires_grad());
    expect_equal(y.value(), x0);
    EXPECT_EQ(a.wait().value().data_ptr(), y.value().data_ptr());  // a second wait: the same result
  }
  auto self = c.split(c.rank(), 0, "dap-self");
  const Variable x(whole(29, 1), true);
  EXPECT_EQ(dap::gather_async(*self, x, 0).wait().value().data_ptr(), x.value().data_ptr());
  EXPECT_EQ(dap::switch_axis_async(*self, x, 0, 2).wait().value().data_ptr(), x.value().data_ptr());
}

}  // namespace
}  // namespace foldcore::testing
