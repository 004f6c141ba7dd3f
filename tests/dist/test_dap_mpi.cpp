// DAP primitives (dist/dap.h) under mpirun -np 2 and 4: every rank regenerates the whole seeded
// tensors, so each result and each gradient is checked against the one-process reference —
// scatter/gather/switch move exact copies (f32 and bf16 compare bit for bit), the reduce-scatter
// of a gather's backward sums P fp32 terms (1e-6 relative).
#include <gtest/gtest.h>

#include <cmath>
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

}  // namespace
}  // namespace foldcore::testing
