// Branch parallelism primitives (HelixFold, arXiv 2211.00235; the Parallel Evoformer): the ranks
// of a BP group each compute one branch of a block from the same (replicated) inputs and exchange
// the branch results at the block's end. Two autograd functions:
//
//   exchange(local, owner, shapes, sum_grads)
//       output i = broadcast of local[i] from rank owner[i] (local[i] is defined on that rank
//       only; shapes[i] gives its shape, dtype and device are those of the defined inputs).
//       backward: sum_grads = true: the output grads are all-reduced (Σ over ranks) and the owner
//       takes them as its input's grad: for results whose consumers are themselves split over
//       the ranks (the next block's branches), where each rank holds part of the gradient.
//       sum_grads = false: each owner takes its own output grad, no communication: for results
//       read by computation that every rank repeats in full (the last block's outputs).
//   sum_grads(xs)
//       identity; backward: the grads are all-reduced. At the entry of a branch-parallel region:
//       the replicated values before it then get their whole gradient on every rank.
//
// Both record a graph node whenever grad mode is on, so every rank runs the same collectives in
// the same order in backward (the engine runs nodes in reverse creation order). A group of one
// rank is not allowed (the callers take the single-process path there).
#pragma once

#include <vector>

#include "autograd/variable.h"
#include "dist/communicator.h"

namespace foldcore::dist::bp {

std::vector<autograd::Variable> exchange(Communicator& comm, const std::vector<autograd::Variable>& local,
                                         const std::vector<int>& owner, const std::vector<Shape>& shapes,
                                         bool sum_grads);
std::vector<autograd::Variable> sum_grads(Communicator& comm, const std::vector<autograd::Variable>& xs);

}  // namespace foldcore::dist::bp
