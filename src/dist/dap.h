// Dynamic axial parallelism primitives (FastFold, arXiv 2203.00854; DESIGN.md model 9): the
// MSA and pair representations live split along one axis across the ranks of the DAP group, and
// the few points where a module needs another split, or a whole tensor, go through these three
// operations, each an autograd function whose backward is its dual collective:
//
//   scatter(x, axis)        replicated x → this rank's chunk along axis     backward: all-gather
//   gather(x, axis)         chunk → the whole tensor along axis (all-gather) backward: reduce-scatter (Σ)
//   gather_replicated(x, a) the same forward, for a whole tensor that every rank then uses in the
//                           same way (replicated computation)                 backward: own chunk
//   switch_axis(x, a, b)    split along a, whole along b → split along b,     backward: switch_axis(g, b, a)
//                           whole along a (one all-to-all)
//
// Rank r holds chunk r: elements [r·k, (r+1)·k) of the split axis, k = size / n. A group of one
// rank is the identity (no copy, no communication), so a model written with these calls runs
// unchanged in one process. The gather's dual is a reduce-scatter because each rank uses the whole
// tensor in its own way (e.g. its rows of a triangle update): the gradient of a chunk is the sum of
// every rank's gradient for it. gather_replicated is for the end of a DAP region (e.g. the
// Evoformer's output, read by the structure module on every rank): there each rank's gradient is
// already the whole one, and summing would count it P times.
#pragma once

#include "autograd/variable.h"
#include "core/tensor.h"
#include "dist/communicator.h"

namespace foldcore::dist::dap {

// Chunk `rank` of `n` along `axis` (a view); the axis size must divide by n.
Tensor chunk(const Tensor& x, int axis, int rank, int n);

// The collectives on plain tensors (contiguous results; also used by the backward passes).
Tensor gather_tensor(Communicator& comm, const Tensor& x, int axis);
Tensor reduce_scatter_tensor(Communicator& comm, const Tensor& x, int axis);
Tensor switch_tensor(Communicator& comm, const Tensor& x, int from, int to);

autograd::Variable scatter(Communicator& comm, const autograd::Variable& x, int axis);
autograd::Variable gather(Communicator& comm, const autograd::Variable& x, int axis);
autograd::Variable gather_replicated(Communicator& comm, const autograd::Variable& x, int axis);
autograd::Variable switch_axis(Communicator& comm, const autograd::Variable& x, int from, int to);

}  // namespace foldcore::dist::dap
