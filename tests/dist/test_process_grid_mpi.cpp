// The process grid under mpirun: every dp × dap × bp factorisation of the world (with -np 4 that
// includes the 2 × 2 grids), each axis communicator holding exactly the expected world ranks in
// axis order, and collectives on the sub-communicators not mixing groups.
#include <gtest/gtest.h>

#include "dist/process_grid.h"
#include "dist_test_util.h"

namespace foldcore::testing {
namespace {

std::vector<dist::GridShape> factorisations(int n) {
  std::vector<dist::GridShape> out;
  for (int dp = 1; dp <= n; ++dp)
    for (int dap = 1; dap * dp <= n; ++dap)
      if (n % (dp * dap) == 0) out.push_back({dp, dap, n / (dp * dap)});
  return out;
}

// World ranks of the members of this rank's group along `axis` (0 dp, 1 dap, 2 bp), in axis order.
std::vector<float> expected_members(const dist::GridShape& s, dist::GridCoords c, int axis) {
  std::vector<float> out;
  const int extent = axis == 0 ? s.dp : axis == 1 ? s.dap : s.bp;
  for (int i = 0; i < extent; ++i) {
    (axis == 0 ? c.dp : axis == 1 ? c.dap : c.bp) = i;
    out.push_back(static_cast<float>(dist::grid_rank(s, c)));
  }
  return out;
}

TEST(ProcessGrid, IndexMathsRoundTrips) {
  const dist::GridShape s{3, 2, 2};
  for (int r = 0; r < s.size(); ++r) EXPECT_EQ(dist::grid_rank(s, dist::grid_coords(s, r)), r);
  EXPECT_EQ(dist::grid_rank(s, {1, 0, 1}), 5);  // (1·2 + 0)·2 + 1: bp fastest
  EXPECT_EQ(dist::grid_rank(s, {0, 1, 0}), 2);
  EXPECT_THROW(dist::grid_coords(s, 12), Error);
  EXPECT_THROW(dist::grid_rank(s, {0, 2, 0}), Error);
}

TEST(ProcessGrid, AxisCommunicatorsHoldTheRightRanks) {
  auto& world = mpi_world();
  for (const dist::GridShape& s : factorisations(world.size())) {
    dist::ProcessGrid grid(world, s);
    EXPECT_EQ(grid.coords(), dist::grid_coords(s, world.rank()));
    dist::Communicator* axes[3] = {&grid.dp(), &grid.dap(), &grid.bp()};
    const int extents[3] = {s.dp, s.dap, s.bp};
    const int coords[3] = {grid.coords().dp, grid.coords().dap, grid.coords().bp};
    for (int a = 0; a < 3; ++a) {
      SCOPED_TRACE(::testing::Message() << "grid " << s.dp << "x" << s.dap << "x" << s.bp << " axis " << a);
      ASSERT_EQ(axes[a]->size(), extents[a]);
      EXPECT_EQ(axes[a]->rank(), coords[a]);
      // Gather the members' world ranks over the axis communicator.
      Tensor mine = Tensor::full({1}, world.rank(), DType::f32);
      Tensor all = Tensor::empty({extents[a]}, DType::f32);
      axes[a]->all_gather(mine, all);
      const auto want = expected_members(s, grid.coords(), a);
      EXPECT_EQ(all.to_vector(), want);
      // A sum over the group is the sum of exactly those members.
      Tensor x = Tensor::full({3}, world.rank() + 1, DType::f32);
      axes[a]->all_reduce_async(x).wait();
      float sum = 0;
      for (float r : want) sum += r + 1;
      EXPECT_EQ(x.to_vector(), std::vector<float>(3, sum));
    }
  }
}

TEST(ProcessGrid, ModelCommunicatorHoldsTheReplicasRanksInWorldOrder) {
  auto& world = mpi_world();
  for (const dist::GridShape& s : factorisations(world.size())) {
    SCOPED_TRACE(::testing::Message() << "grid " << s.dp << "x" << s.dap << "x" << s.bp);
    dist::ProcessGrid grid(world, s);
    dist::Communicator& model = grid.model();
    const int n = s.dap * s.bp;
    ASSERT_EQ(model.size(), n);
    EXPECT_EQ(model.rank(), grid.coords().dap * s.bp + grid.coords().bp);
    Tensor mine = Tensor::full({1}, world.rank(), DType::f32);
    Tensor all = Tensor::empty({n}, DType::f32);
    model.all_gather(mine, all);
    std::vector<float> want;  // the world ranks of this dp index, a contiguous block
    for (int r = grid.coords().dp * n; r < (grid.coords().dp + 1) * n; ++r) want.push_back(static_cast<float>(r));
    EXPECT_EQ(all.to_vector(), want);
  }
}

TEST(ProcessGrid, ShapeMustMatchTheWorld) {
  auto& world = mpi_world();
  EXPECT_THROW(dist::ProcessGrid(world, {world.size() + 1, 1, 1}), Error);
  EXPECT_THROW(dist::ProcessGrid(world, {0, 1, world.size()}), Error);
}

}  // namespace
}  // namespace foldcore::testing
