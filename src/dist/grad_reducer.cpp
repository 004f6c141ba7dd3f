#include "dist/grad_reducer.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/elementwise.h"

namespace foldcore::dist {

GradReducer::GradReducer(Communicator& comm, Tensor grads, std::vector<ops::ParamSegment> segments,
                         const GradReducerOptions& options)
    : comm_(&comm), grads_(std::move(grads)), segments_(std::move(segments)), options_(options) {
  FC_CHECK(grads_.defined() && grads_.dim() == 1 && grads_.is_contiguous(),
           "GradReducer: the gradient buffer must be a defined contiguous 1-D tensor");
  FC_CHECK(is_floating(grads_.dtype()), "GradReducer: gradients are ", dtype_name(grads_.dtype()));
  FC_CHECK(grads_.device() == comm.device(), "GradReducer: gradients on ", grads_.device().str(),
           ", communicator '", comm.name(), "' on ", comm.device().str());
  FC_CHECK(!segments_.empty(), "GradReducer: no parameter segments");
  FC_CHECK(options_.bucket_bytes >= 0, "GradReducer: bucket_bytes ", options_.bucket_bytes, " < 0");
  int64_t prev_end = 0;
  for (const auto& s : segments_) {
    FC_CHECK(s.size > 0 && s.offset >= prev_end, "GradReducer: segments must be non-empty, ascending and disjoint "
             "(segment at ", s.offset, " of size ", s.size, " after end ", prev_end, ")");
    prev_end = s.offset + s.size;
  }
  total_ = prev_end;
  FC_CHECK(total_ <= grads_.numel(), "GradReducer: segments end at ", total_, " past the buffer's ", grads_.numel());

  // Group from the last segment backwards: the order backward completes them.
  const int64_t elem = static_cast<int64_t>(dtype_size(grads_.dtype()));
  segment_bucket_.assign(segments_.size(), -1);
  segment_ready_.assign(segments_.size(), false);
  for (size_t i = segments_.size(); i-- > 0;) {
    if (buckets_.empty() || (buckets_.back().end - buckets_.back().begin) * elem >= options_.bucket_bytes) {
      Bucket b;
      b.end = segments_[i].offset + segments_[i].size;
      buckets_.push_back(std::move(b));
    }
    Bucket& b = buckets_.back();
    b.begin = segments_[i].offset;
    ++b.segments;
    segment_bucket_[i] = static_cast<int>(buckets_.size()) - 1;
  }
  for (auto& b : buckets_) b.pending = b.segments;
}

std::vector<std::pair<int64_t, int64_t>> GradReducer::bucket_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& b : buckets_) out.emplace_back(b.begin, b.end);
  return out;
}

void GradReducer::launch(Bucket& b) {
  b.launched = true;
  ++launched_;
  if (comm_->size() == 1) return;  // nothing to exchange
  b.handle = comm_->all_reduce_async(grads_.narrow(0, b.begin, b.end - b.begin));
}

void GradReducer::mark_ready(int64_t offset, int64_t length) {
  // The first segment starting at `offset`, then consecutive segments until the range is covered.
  auto it = std::lower_bound(segments_.begin(), segments_.end(), offset,
                             [](const ops::ParamSegment& s, int64_t o) { return s.offset < o; });
  FC_CHECK(it != segments_.end() && it->offset == offset && length > 0,
           "GradReducer::mark_ready(", offset, ", ", length, "): no parameter segment starts at ", offset);
  const int64_t end = offset + length;
  for (size_t i = static_cast<size_t>(it - segments_.begin()); i < segments_.size() && segments_[i].offset < end; ++i) {
    const auto& s = segments_[i];
    FC_CHECK(s.offset + s.size <= end, "GradReducer::mark_ready(", offset, ", ", length, "): the range cuts the ",
             "segment [", s.offset, ", ", s.offset + s.size, ")");
    FC_CHECK(!segment_ready_[i], "GradReducer::mark_ready: the segment at ", s.offset,
             " was already marked ready this step (call finish() between steps)");
    segment_ready_[i] = true;
    --buckets_[static_cast<size_t>(segment_bucket_[i])].pending;
  }
  // Buckets go out strictly in index order, so every rank issues the same sequence of collectives
  // whatever order its parameters were marked in (MPI and NCCL match collectives by order).
  while (launched_ < num_buckets() && buckets_[static_cast<size_t>(launched_)].pending == 0)
    launch(buckets_[static_cast<size_t>(launched_)]);
  poll();
}

void GradReducer::poll() {
  for (auto& b : buckets_)
    if (b.launched) b.handle.test();
}

void GradReducer::finish() {
  while (launched_ < num_buckets()) launch(buckets_[static_cast<size_t>(launched_)]);
  const float inv = 1.f / static_cast<float>(comm_->size());
  for (auto& b : buckets_) {
    b.handle.wait();
    if (options_.average && comm_->size() > 1) {
      const Tensor v = grads_.narrow(0, b.begin, b.end - b.begin);
      ops::scale(v, inv, v);
    }
    b.launched = false;
    b.pending = b.segments;
  }
  std::fill(segment_ready_.begin(), segment_ready_.end(), false);
  launched_ = 0;
}

}  // namespace foldcore::dist
