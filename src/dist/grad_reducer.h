// GradReducer: data-parallel gradient averaging over the flat gradient buffer (autograd::ParamStore
// ::grads()), in buckets launched as soon as they are complete, so communication overlaps the rest
// of the backward pass (llm.c zero.cuh; PyTorch DDP's reducer).
//
//   dist::GradReducer reducer(dp_comm, ps.grads(), ps.segments(), {.bucket_bytes = 25 << 20});
//   per step:  ps.zero_grad(); forward/backward of the local micro-batches …
//              reducer.mark_ready(offset, length)   // as parameters' gradients become final
//              reducer.finish();                     // the grads are now the mean over the ranks
//              optimizer.step();
//
// Buckets are whole parameter segments, grouped from the END of the buffer (backward produces the
// last-registered parameters' gradients first) until a bucket holds ≥ bucket_bytes; each is one
// contiguous range of the buffer (alignment gaps inside it are zeros on every rank, so summing
// them is harmless). A bucket's async all-reduce (sum) is launched once all its segments and all
// earlier buckets' are marked (strict bucket order: every rank issues the same collectives in the
// same order, whatever order it marks in); finish() launches the rest (parameters never marked, e.g. unused this step), waits for all and
// divides by the number of ranks. With one rank nothing is communicated.
//
// Equivalence: the mean over k ranks of each rank's accumulated gradient equals one process
// accumulating all k ranks' micro-batches and dividing by k, up to fp32 summation order
// (tests/dist/test_grad_reducer_mpi.cpp).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"
#include "kernels/optim.h"

namespace foldcore::dist {

struct GradReducerOptions {
  int64_t bucket_bytes = 25 << 20;  // PyTorch DDP's default; 0: one bucket per segment
  bool average = true;              // divide the sum by the number of ranks
};

class GradReducer {
 public:
  // grads: flat f32 (or bf16) contiguous buffer on comm's device; segments: ascending, disjoint
  // parameter ranges in it (ParamStore::segments()).
  GradReducer(Communicator& comm, Tensor grads, std::vector<ops::ParamSegment> segments,
              const GradReducerOptions& options = {});

  // The gradients of the segments exactly covering elements [offset, offset + length) are final
  // for this step. Marking a segment twice in a step, or a range that does not consist of whole
  // segments, is an Error.
  void mark_ready(int64_t offset, int64_t length);
  void mark_all_ready() { mark_ready(0, total_); }
  // Drives the progress of launched buckets (MPI progresses non-blocking collectives only inside
  // MPI calls): call it now and then from a long backward.
  void poll();
  // Launches the unlaunched buckets, waits for every bucket, averages; ready for the next step.
  void finish();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  int64_t buckets_launched() const { return launched_; }  // in the current step (a prefix)
  // [begin, end) element ranges of the buckets, in launch order (end of the buffer first).
  std::vector<std::pair<int64_t, int64_t>> bucket_ranges() const;

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;   // element range of the buffer
    int pending = 0;              // segments not yet marked this step
    int segments = 0;
    bool launched = false;
    CommHandle handle;
  };
  void launch(Bucket& b);

  Communicator* comm_;
  Tensor grads_;
  std::vector<ops::ParamSegment> segments_;
  std::vector<int> segment_bucket_;   // bucket index of each segment
  std::vector<bool> segment_ready_;
  std::vector<Bucket> buckets_;
  int64_t total_ = 0;                 // end of the last segment
  int64_t launched_ = 0;
  GradReducerOptions options_;
};

}  // namespace foldcore::dist
