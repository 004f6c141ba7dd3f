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
//   gather_async(x, a)      gather and switch_axis started now and finished by wait(): the work
//   switch_axis_async(…)    between the two overlaps the communication (below)
//
// The wire dtype (gather, switch_axis and their async forms): a `wire` narrower than x's dtype
// (bf16 under autocast, for an fp32 x) sends x rounded to it and returns the result in x's dtype.
// That halves the bytes of an fp32 activation whose every consumer rounds it to bf16 anyway (a
// LayerNorm output read only by autocast GEMMs, a bf16 update times a 0/1 mask), without changing
// what the consumers compute. The backward's dual carries the gradient in its own (x's) dtype, as
// one process's autocast casts keep it. No wire, or one not narrower: sent as it is.
//
// Rank r holds chunk r: elements [r·k, (r+1)·k) of the split axis, k = size / n. A group of one
// rank is the identity (no copy, no communication), so a model written with these calls runs
// unchanged in one process. The gather's dual is a reduce-scatter because each rank uses the whole
// tensor in its own way (e.g. its rows of a triangle update): the gradient of a chunk is the sum of
// every rank's gradient for it. gather_replicated is for the end of a DAP region (e.g. the
// Evoformer's output, read by the structure module on every rank): there each rank's gradient is
// already the whole one, and summing would count it P times.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "core/tensor.h"
#include "dist/communicator.h"

namespace foldcore::dist::dap {

// Chunk `rank` of `n` along `axis` (a view); the axis size must divide by n.
Tensor chunk(const Tensor& x, int axis, int rank, int n);

// The collectives on plain tensors (contiguous results; also used by the backward passes).
// A wire dtype as above: sent in it, returned in x's dtype.
Tensor gather_tensor(Communicator& comm, const Tensor& x, int axis, std::optional<DType> wire = std::nullopt);
Tensor reduce_scatter_tensor(Communicator& comm, const Tensor& x, int axis);
Tensor switch_tensor(Communicator& comm, const Tensor& x, int from, int to, std::optional<DType> wire = std::nullopt);

autograd::Variable scatter(Communicator& comm, const autograd::Variable& x, int axis);
autograd::Variable gather(Communicator& comm, const autograd::Variable& x, int axis,
                          std::optional<DType> wire = std::nullopt);
autograd::Variable gather_replicated(Communicator& comm, const autograd::Variable& x, int axis);
autograd::Variable switch_axis(Communicator& comm, const autograd::Variable& x, int from, int to,
                               std::optional<DType> wire = std::nullopt);

// A gather or axis switch in flight (FastFold's duality async operations). The forward starts the
// collective at gather_async / switch_axis_async and completes it at wait(), so whatever the caller
// computes in between runs while the data moves. Under autograd the two calls are two nodes and the
// backward mirrors them: wait()'s node starts the dual collective (reduce-scatter, or the inverse
// all-to-all) and the start's node completes it; the engine runs nodes in reverse creation order,
// so the backward of the work recorded in between overlaps the dual. Like every collective, each
// rank must start and wait in the same order; a pending operation never waited for is completed
// when the last copy of it is destroyed (its buffers stay alive until then). The results equal
// gather / switch_axis bit for bit: the same collectives on the same buffers.
class AsyncVariable {
 public:
  AsyncVariable() = default;
  explicit AsyncVariable(autograd::Variable ready);  // already complete (a group of one rank)
  // Completes the collective (the first call; later calls return the same Variable).
  autograd::Variable wait();
  bool defined() const { return state_ != nullptr || ready_.defined(); }

  struct State;

 private:
  friend AsyncVariable start_async(Communicator&, const autograd::Variable&, bool, int, int, Tensor);  // dap.cpp
  std::shared_ptr<State> state_;
  autograd::Variable ready_;
};

AsyncVariable gather_async(Communicator& comm, const autograd::Variable& x, int axis,
                           std::optional<DType> wire = std::nullopt);
AsyncVariable switch_axis_async(Communicator& comm, const autograd::Variable& x, int from, int to,
                                std::optional<DType> wire = std::nullopt);

// What this process received in the collectives above (forward and backward) since the last
// reset_traffic(), by collective ("all_to_all", "all_gather", "reduce_scatter") and element type:
// an all-to-all of a [.., P·k, ..] tensor receives (P − 1)/P of it, an all-gather (P − 1)/P of
// the gathered whole, a reduce-scatter (P − 1)/P of its input (a ring's). The bytes the scaling
// model (scripts/scaling_model.py) counts per rank, so a run can check its wire dtypes and volumes.
struct TrafficEntry {
  std::string collective;
  std::string dtype;
  int64_t calls = 0;
  double bytes = 0;
};
void reset_traffic();
std::vector<TrafficEntry> traffic();

}  // namespace foldcore::dist::dap
