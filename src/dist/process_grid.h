// ProcessGrid: the world's ranks arranged as dp × dap × bp, with one sub-communicator per axis.
//
// Rank order (bp fastest, dp slowest):   rank = (dp_index · dap + dap_index) · bp + bp_index
// so the two branch-parallel partners are neighbours and a DAP group is a contiguous block of
// dap·bp ranks: with ranks filled node by node (mpirun's default --map-by slot/core), BP and DAP
// traffic (per-block all_to_all/all_gather/broadcast) stays inside a node and only the DP gradient
// all-reduce (once per step, overlapped with backward) crosses nodes.
//
//   dp()   the dp ranks that share (dap_index, bp_index): gradient all-reduce
//   dap()  the dap ranks that share (dp_index, bp_index): axis switches of Dynamic Axial Parallelism
//   bp()   the bp ranks that share (dp_index, dap_index): branch placement
//   model() the dap × bp ranks that share dp_index (one model replica): the model-parallel gradient
//          sums, on a communicator of their own so they never queue with the activations'
//          collectives on dap() and bp()
// Each sub-communicator ranks its members by their index on that axis.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace foldcore::dist {

struct GridShape {
  int dp = 1, dap = 1, bp = 1;
  int size() const { return dp * dap * bp; }
};

struct GridCoords {
  int dp = 0, dap = 0, bp = 0;
  bool operator==(const GridCoords&) const = default;
};

// Pure index maths, usable without communicators.
int grid_rank(const GridShape& shape, const GridCoords& c);
GridCoords grid_coords(const GridShape& shape, int rank);

class ProcessGrid {
 public:
  // Collective over `world` (every rank calls it with the same shape). world.size() must equal
  // shape.size(); axes of size 1 still get a (single-rank) communicator.
  ProcessGrid(Communicator& world, const GridShape& shape);

  const GridShape& shape() const { return shape_; }
  const GridCoords& coords() const { return coords_; }
  Communicator& world() const { return *world_; }
  Communicator& dp() const { return *dp_; }
  Communicator& dap() const { return *dap_; }
  Communicator& bp() const { return *bp_; }
  Communicator& model() const { return *model_; }

 private:
  Communicator* world_;
  GridShape shape_;
  GridCoords coords_;
  std::unique_ptr<Communicator> dp_, dap_, bp_, model_;
};

}  // namespace foldcore::dist
