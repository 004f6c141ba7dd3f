#include "dist/process_grid.h"

#include "core/error.h"

namespace foldcore::dist {

int grid_rank(const GridShape& s, const GridCoords& c) {
  FC_CHECK(c.dp >= 0 && c.dp < s.dp && c.dap >= 0 && c.dap < s.dap && c.bp >= 0 && c.bp < s.bp,
           "grid coordinates (dp ", c.dp, ", dap ", c.dap, ", bp ", c.bp, ") are outside the grid ", s.dp, "×",
           s.dap, "×", s.bp);
  return (c.dp * s.dap + c.dap) * s.bp + c.bp;
}

GridCoords grid_coords(const GridShape& s, int rank) {
  FC_CHECK(rank >= 0 && rank < s.size(), "rank ", rank, " is outside the grid ", s.dp, "×", s.dap, "×", s.bp);
  GridCoords c;
  c.bp = rank % s.bp;
  c.dap = (rank / s.bp) % s.dap;
  c.dp = rank / (s.bp * s.dap);
  return c;
}

ProcessGrid::ProcessGrid(Communicator& world, const GridShape& shape) : world_(&world), shape_(shape) {
  FC_CHECK(shape.dp >= 1 && shape.dap >= 1 && shape.bp >= 1, "process grid ", shape.dp, "×", shape.dap, "×",
           shape.bp, ": every axis needs at least 1 rank");
  FC_CHECK(shape.size() == world.size(), "process grid dp ", shape.dp, " × dap ", shape.dap, " × bp ", shape.bp,
           " = ", shape.size(), " ranks, but communicator '", world.name(), "' has ", world.size());
  coords_ = grid_coords(shape, world.rank());
  const GridCoords& c = coords_;
  // Color: the coordinates the members share (as one number); key: the position along the axis.
  dp_ = world.split(c.dap * shape.bp + c.bp, c.dp, "dp");
  dap_ = world.split(c.dp * shape.bp + c.bp, c.dap, "dap");
  bp_ = world.split(c.dp * shape.dap + c.dap, c.bp, "bp");
  // The model replica (every dap × bp rank of this dp index), ranked as in the world.
  model_ = world.split(c.dp, c.dap * shape.bp + c.bp, "model");
}

}  // namespace foldcore::dist
