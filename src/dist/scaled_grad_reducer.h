// ScaledGradReducer: Σ over the ranks of s_r · x_r + b_r, where each rank's scale s_r is known only
// after its x_r has gone out. Data-parallel AlphaFold training needs it: an example's gradient g is
// clipped by min(1, max_norm / ‖g‖), a factor known only when its backward is over, yet the bytes
// of g should travel during that backward (af2_trainer.h). A sum all-reduce cannot do it (the
// ranks' unscaled values would be mixed before their factors are known), so each bucket travels
// unsummed and the sum is taken by its receiver:
//
//   during the backward, per bucket (in order, as with GradReducer): all_to_all of the bucket cut
//       into P chunks: rank k receives every rank's chunk k, unscaled;
//   finish(s): the ranks' scales are all-gathered (tiny); rank k forms
//       chunk_k = Σ_j s_j · x_j[chunk k] + Σ_j b_j[chunk k] and all-gathers the chunks back.
//
// Bytes per rank: (P−1)/P · N for the all-to-all plus (P−1)/P · N for the all-gather — those of a
// ring all-reduce (reduce-scatter + all-gather), with the first half overlapping the backward. The
// optional base b (a rank's earlier examples, already clipped) goes out as a reduce-scatter per
// bucket when add_base() is called, before the backward of the last example: another (P−1)/P · N,
// overlapping that example's forward and backward. The chunk sums run in rank order on the one
// rank that owns the chunk, and the all-gather copies them: every rank gets the same bits.
//
//   dist::ScaledGradReducer r(dp_comm, buffer, ps.segments(), 25 << 20);
//   per step:  [r.add_base(base);]  … r.mark_ready(offset, length) as segments of `buffer` become final …
//              r.finish(scale);     // buffer = Σ_r scale_r · buffer_r + base_r on every rank
//
// Buckets are whole segments grouped from the end of the buffer as in GradReducer and launched
// strictly in order. With one rank: buffer = scale · buffer + base, no communication.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"
#include "kernels/optim.h"

namespace foldcore::dist {

class ScaledGradReducer {
 public:
  // buffer: flat f32 contiguous on comm's device; segments: ascending, disjoint ranges in it.
  ScaledGradReducer(Communicator& comm, Tensor buffer, std::vector<ops::ParamSegment> segments,
                    int64_t bucket_bytes = 25 << 20);

  // This step's base (buffer's shape, f32, comm's device), launched now; its contents may change
  // after the call returns (it is copied). At most once per step, before any mark_ready.
  void add_base(const Tensor& base);
  // As GradReducer::mark_ready: the segments exactly covering [offset, offset + length) are final.
  void mark_ready(int64_t offset, int64_t length);
  void poll();
  // Launches the rest, then buffer ← Σ_r scale_r · buffer_r + base_r (base 0 without add_base).
  void finish(double scale);

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  int64_t buckets_launched() const { return launched_; }
  std::vector<std::pair<int64_t, int64_t>> bucket_ranges() const;

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  // element range of the buffer
    int64_t chunk = 0;           // ⌈(end − begin) / P⌉
    int pending = 0, segments = 0;
    Tensor send, recv;            // [P·chunk] (the bucket, zero-padded) and what the ranks sent
    Tensor base_send, base_recv;  // [P·chunk] and [chunk] (this rank's chunk of Σ base)
    CommHandle handle, base_handle;
  };
  void launch(Bucket& b);

  Communicator* comm_;
  Tensor buffer_;
  std::vector<ops::ParamSegment> segments_;
  std::vector<int> segment_bucket_;
  std::vector<bool> segment_ready_;
  std::vector<Bucket> buckets_;
  int64_t total_ = 0;
  int64_t launched_ = 0;
  bool has_base_ = false;
};

}  // namespace foldcore::dist
