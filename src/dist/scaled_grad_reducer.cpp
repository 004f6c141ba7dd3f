#include "dist/scaled_grad_reducer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/elementwise.h"

namespace foldcore::dist {

ScaledGradReducer::ScaledGradReducer(Communicator& comm, Tensor buffer, std::vector<ops::ParamSegment> segments,
                                     int64_t bucket_bytes)
    : comm_(&comm), buffer_(std::move(buffer)), segments_(std::move(segments)) {
  FC_CHECK(buffer_.defined() && buffer_.dim() == 1 && buffer_.is_contiguous() && buffer_.dtype() == DType::f32,
           "ScaledGradReducer: the buffer must be a defined contiguous 1-D f32 tensor");
  FC_CHECK(buffer_.device() == comm.device(), "ScaledGradReducer: buffer on ", buffer_.device().str(),
           ", communicator '", comm.name(), "' on ", comm.device().str());
  FC_CHECK(!segments_.empty(), "ScaledGradReducer: no segments");
  FC_CHECK(bucket_bytes >= 0, "ScaledGradReducer: bucket_bytes ", bucket_bytes, " < 0");
  int64_t prev_end = 0;
  for (const auto& s : segments_) {
    FC_CHECK(s.size > 0 && s.offset >= prev_end, "ScaledGradReducer: segments must be non-empty, ascending and "
             "disjoint (segment at ", s.offset, " of size ", s.size, " after end ", prev_end, ")");
    prev_end = s.offset + s.size;
  }
  total_ = prev_end;
  FC_CHECK(total_ <= buffer_.numel(), "ScaledGradReducer: segments end at ", total_, " past the buffer's ",
           buffer_.numel());
  // Grouped from the last segment backwards, as GradReducer.
  segment_bucket_.assign(segments_.size(), -1);
  segment_ready_.assign(segments_.size(), false);
  for (size_t i = segments_.size(); i-- > 0;) {
    if (buckets_.empty() || (buckets_.back().end - buckets_.back().begin) * 4 >= bucket_bytes) {
      Bucket b;
      b.end = segments_[i].offset + segments_[i].size;
      buckets_.push_back(std::move(b));
    }
    Bucket& b = buckets_.back();
    b.begin = segments_[i].offset;
    ++b.segments;
    segment_bucket_[i] = static_cast<int>(buckets_.size()) - 1;
  }
  const int64_t p = comm.size();
  for (auto& b : buckets_) {
    b.pending = b.segments;
    b.chunk = (b.end - b.begin + p - 1) / p;
    if (p > 1) {
      b.send = Tensor::zeros(Shape{p * b.chunk}, DType::f32, buffer_.device());
      b.recv = Tensor::zeros(Shape{p * b.chunk}, DType::f32, buffer_.device());
    }
  }
}

std::vector<std::pair<int64_t, int64_t>> ScaledGradReducer::bucket_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& b : buckets_) out.emplace_back(b.begin, b.end);
  return out;
}

void ScaledGradReducer::add_base(const Tensor& base) {
  FC_CHECK(!has_base_ && launched_ == 0, "ScaledGradReducer::add_base: once per step, before the buckets go out");
  FC_CHECK(base.dim() == 1 && base.numel() == buffer_.numel() && base.dtype() == DType::f32 &&
               base.device() == buffer_.device(),
           "ScaledGradReducer::add_base: the base must be f32 [", buffer_.numel(), "] on ", buffer_.device().str());
  has_base_ = true;
  const int64_t p = comm_->size();
  for (auto& b : buckets_) {
    const int64_t len = b.end - b.begin;
    if (p == 1) {
      b.base_recv = base.narrow(0, b.begin, len).contiguous().clone();
      continue;
    }
    if (!b.base_send.defined()) {
      b.base_send = Tensor::zeros(Shape{p * b.chunk}, DType::f32, buffer_.device());
      b.base_recv = Tensor::zeros(Shape{b.chunk}, DType::f32, buffer_.device());
    }
    b.base_send.narrow(0, 0, len).copy_(base.narrow(0, b.begin, len));
    b.base_handle = comm_->reduce_scatter_async(b.base_send, b.base_recv);
  }
}

void ScaledGradReducer::launch(Bucket& b) {
  ++launched_;
  if (comm_->size() == 1) return;
  b.send.narrow(0, 0, b.end - b.begin).copy_(buffer_.narrow(0, b.begin, b.end - b.begin));
  b.handle = comm_->all_to_all_async(b.send, b.recv);
}

void ScaledGradReducer::mark_ready(int64_t offset, int64_t length) {
  auto it = std::lower_bound(segments_.begin(), segments_.end(), offset,
                             [](const ops::ParamSegment& s, int64_t o) { return s.offset < o; });
  FC_CHECK(it != segments_.end() && it->offset == offset && length > 0, "ScaledGradReducer::mark_ready(", offset,
           ", ", length, "): no segment starts at ", offset);
  const int64_t end = offset + length;
  for (size_t i = static_cast<size_t>(it - segments_.begin()); i < segments_.size() && segments_[i].offset < end; ++i) {
    const auto& s = segments_[i];
    FC_CHECK(s.offset + s.size <= end, "ScaledGradReducer::mark_ready(", offset, ", ", length, "): the range cuts ",
             "the segment [", s.offset, ", ", s.offset + s.size, ")");
    FC_CHECK(!segment_ready_[i], "ScaledGradReducer::mark_ready: the segment at ", s.offset,
             " was already marked ready this step");
    segment_ready_[i] = true;
    --buckets_[static_cast<size_t>(segment_bucket_[i])].pending;
  }
  while (launched_ < num_buckets() && buckets_[static_cast<size_t>(launched_)].pending == 0)
    launch(buckets_[static_cast<size_t>(launched_)]);
  poll();
}

void ScaledGradReducer::poll() {
  for (int64_t i = 0; i < launched_; ++i) buckets_[static_cast<size_t>(i)].handle.test();
  if (has_base_)
    for (auto& b : buckets_) b.base_handle.test();
}

void ScaledGradReducer::finish(double scale) {
  while (launched_ < num_buckets()) launch(buckets_[static_cast<size_t>(launched_)]);
  const int64_t p = comm_->size();
  const int me = comm_->rank();
  // Every rank's scale, as the bits of a double (exact), in rank order.
  std::vector<double> scales(static_cast<size_t>(p), scale);
  if (p > 1) {
    int64_t bits = 0;
    std::memcpy(&bits, &scale, sizeof bits);
    const Tensor in = Tensor::from_vector_i64({bits}, {1}, DType::i64, comm_->device());
    const Tensor out = Tensor::zeros({p}, DType::i64, comm_->device());
    comm_->all_gather(in, out);
    const std::vector<int64_t> all = out.to(Device::cpu()).to_vector_i64();
    for (int64_t j = 0; j < p; ++j) std::memcpy(&scales[static_cast<size_t>(j)], &all[static_cast<size_t>(j)], sizeof(double));
  }
  std::vector<CommHandle> gathers;
  for (auto& b : buckets_) {
    const int64_t len = b.end - b.begin;
    if (p == 1) {
      const Tensor v = buffer_.narrow(0, b.begin, len);
      ops::scale(v, static_cast<float>(scale), v);
      if (has_base_) ops::add(v, b.base_recv, v);
      continue;
    }
    b.handle.wait();
    if (has_base_) b.base_handle.wait();
    // This rank's chunk: Σ_j scale_j · (rank j's chunk me) + Σ_j base_j (the reduce-scatter's).
    const Tensor mine = b.send.narrow(0, me * b.chunk, b.chunk);  // send is free again: reuse it
    ops::scale(b.recv.narrow(0, 0, b.chunk), static_cast<float>(scales[0]), mine);
    Tensor term = Tensor::empty(Shape{b.chunk}, DType::f32, buffer_.device());
    for (int64_t j = 1; j < p; ++j) {
      ops::scale(b.recv.narrow(0, j * b.chunk, b.chunk), static_cast<float>(scales[static_cast<size_t>(j)]), term);
      ops::add(mine, term, mine);
    }
    if (has_base_) ops::add(mine, b.base_recv, mine);
    gathers.push_back(comm_->all_gather_async(mine, b.recv));
  }
  if (p > 1) {
    size_t k = 0;
    for (auto& b : buckets_) {
      gathers[k++].wait();
      buffer_.narrow(0, b.begin, b.end - b.begin).copy_(b.recv.narrow(0, 0, b.end - b.begin));
    }
  }
  for (auto& b : buckets_) b.pending = b.segments;
  std::fill(segment_ready_.begin(), segment_ready_.end(), false);
  launched_ = 0;
  has_base_ = false;
}

}  // namespace foldcore::dist
