// BP primitives (dist/bp.h) under mpirun -np 2 and 4 (groups of two neighbouring ranks): the
// exchange's values, its backward in both modes and sum_grads' backward against the sums computed
// locally from every rank's seeded data (exact: a sum of two fp32 values is the same in any order).
#include <gtest/gtest.h>

#include <vector>

#include "autograd/autograd.h"
#include "core/error.h"
#include "dist/bp.h"
#include "dist_test_util.h"

namespace foldcore::testing {
namespace {

using autograd::Variable;

const Shape kA{3, 4}, kB{5};

Tensor seeded(uint64_t seed, int rank, const Shape& s) {
  return Tensor::from_vector(rank_values(seed, rank, s.product()), s);
}

std::unique_ptr<dist::Communicator> pair_group() {
  auto& w = mpi_world();
  return w.split(w.rank() / 2, w.rank(), "bp");
}

void expect_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  const auto g = got.contiguous().to_vector(), w = want.contiguous().to_vector();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], w[i]) << "element " << i;
}

// Rank 0 of the pair owns a (kA), rank 1 owns b (kB); rank r weights the outputs with its own w_r.
void check_exchange(bool sum_grads) {
  auto c = pair_group();
  const int r = c->rank();
  const Variable a(seeded(1, 0, kA), true), b(seeded(2, 0, kB), true);
  const std::vector<Variable> local{r == 0 ? a : Variable(), r == 1 ? b : Variable()};
  const auto out = dist::bp::exchange(*c, local, {0, 1}, {kA, kB}, sum_grads);
  ASSERT_EQ(out.size(), 2u);
  expect_equal(out[0].value(), a.value());
  expect_equal(out[1].value(), b.value());
  autograd::backward(out, {seeded(10, r, kA), seeded(11, r, kB)});
  const Tensor want_a = sum_grads ? autograd::add(Variable(seeded(10, 0, kA)), Variable(seeded(10, 1, kA))).value()
                                  : seeded(10, 0, kA);
  const Tensor want_b = sum_grads ? autograd::add(Variable(seeded(11, 0, kB)), Variable(seeded(11, 1, kB))).value()
                                  : seeded(11, 1, kB);
  if (r == 0) {
    expect_equal(a.grad(), want_a);
    EXPECT_FALSE(b.grad().defined() && b.grad().to_vector() != std::vector<float>(kB.product(), 0.f));
  } else {
    expect_equal(b.grad(), want_b);
  }
}

TEST(Bp, ExchangeBroadcastsAndSumsGradsToTheOwner) { check_exchange(true); }
TEST(Bp, ExchangeWithoutSumGivesTheOwnerItsOwnGrad) { check_exchange(false); }

TEST(Bp, SumGradsIsIdentityWithSummedBackward) {
  auto c = pair_group();
  const int r = c->rank();
  const Variable x(seeded(3, 0, kA), true);
  const auto y = dist::bp::sum_grads(*c, {x});
  expect_equal(y[0].value(), x.value());
  autograd::backward(y, {seeded(12, r, kA)});
  expect_equal(x.grad(), autograd::add(Variable(seeded(12, 0, kA)), Variable(seeded(12, 1, kA))).value());
}

TEST(Bp, ValuesMustBeDefinedExactlyOnTheirOwner) {
  auto c = pair_group();
  const Variable a(seeded(1, 0, kA));
  // Every rank passes a defined value owned by rank 0: rank 1 is wrong, and says so before any
  // collective (rank 0's broadcast then has no partner: rank 0 does not call it).
  if (c->rank() == 1) {
    EXPECT_THROW(dist::bp::exchange(*c, {a}, {0}, {kA}, true), Error);
  }
  EXPECT_THROW(dist::bp::exchange(*c, {a}, {2}, {kA}, true), Error);  // owner outside the group
}

}  // namespace
}  // namespace foldcore::testing
