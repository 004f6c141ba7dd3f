#include "core/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/cuda_backend.h"
#include "core/error.h"

namespace foldcore {

void StatsTracker::on_alloc(size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  s_.current += bytes;
  s_.peak = std::max(s_.peak, s_.current);
  ++s_.num_allocs;
}
void StatsTracker::on_free(size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  s_.current -= bytes;
  ++s_.num_frees;
}
void StatsTracker::on_reserve(size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  s_.reserved += bytes;
  s_.peak_reserved = std::max(s_.peak_reserved, s_.reserved);
}
void StatsTracker::on_release(size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  s_.reserved -= bytes;
}
MemStats StatsTracker::get() const {
  std::lock_guard<std::mutex> l(mu_);
  return s_;
}
void StatsTracker::reset_peak() {
  std::lock_guard<std::mutex> l(mu_);
  s_.peak = s_.current;
  s_.peak_reserved = s_.reserved;
}

namespace {
size_t round_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }
}  // namespace

CpuAllocator::~CpuAllocator() {
  empty_cache();
  // The default allocator is a function-local static: a static tensor built before it was first
  // used may still be freed after this; such late frees go straight back to the system.
  closed_ = true;
}

void* CpuAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t rounded = round_up(bytes, kAlignment);
  if (rounded >= kCacheMin) {
    std::lock_guard<std::mutex> l(mu_);
    // The newest cached block of exactly this size (deallocate() gets the requested size back,
    // so a block must go out at the size it will come back with).
    size_t best = cache_.size();
    for (size_t i = cache_.size(); i-- > 0;)
      if (cache_[i].size == rounded) {
        best = i;
        break;
      }
    if (best < cache_.size()) {
      void* p = cache_[best].ptr;
      cached_bytes_ -= cache_[best].size;
      cache_.erase(cache_.begin() + static_cast<std::ptrdiff_t>(best));
      stats_.on_alloc(bytes);
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {  // out of memory: give the cache back and retry once
    empty_cache();
    p = std::aligned_alloc(kAlignment, rounded);
  }
  if (p == nullptr)
    throw OutOfMemoryError(detail::concat("host allocation of ", bytes, " bytes failed (current ",
                                          stats_.get().current, " bytes)"));
  stats_.on_alloc(bytes);
  stats_.on_reserve(rounded);
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t rounded = round_up(bytes, kAlignment);
  if (closed_) {
    std::free(ptr);
    return;
  }
  stats_.on_free(bytes);
  if (rounded >= kCacheMin && rounded <= kCacheCap) {
    std::lock_guard<std::mutex> l(mu_);
    // Make room by returning the oldest blocks: sizes from an earlier phase (another sequence
    // length) leave the cache as the current phase's sizes come in.
    size_t drop = 0, freed = 0;
    while (drop < cache_.size() && cached_bytes_ - freed + rounded > kCacheCap) {
      std::free(cache_[drop].ptr);
      stats_.on_release(cache_[drop].size);
      freed += cache_[drop].size;
      ++drop;
    }
    cache_.erase(cache_.begin(), cache_.begin() + static_cast<std::ptrdiff_t>(drop));
    cached_bytes_ -= freed;
    cache_.push_back({rounded, ptr});
    cached_bytes_ += rounded;
    return;
  }
  std::free(ptr);
  stats_.on_release(rounded);
}

void CpuAllocator::empty_cache() {
  std::lock_guard<std::mutex> l(mu_);
  for (const Block& b : cache_) {
    std::free(b.ptr);
    stats_.on_release(b.size);
  }
  cache_.clear();
  cached_bytes_ = 0;
}

Allocator& default_allocator(Device d) {
  static CpuAllocator cpu;
  if (d.is_cpu()) return cpu;
  FC_CHECK(cuda_built(), "device ", d.str(), " requested but this build has no CUDA backend");
  static std::mutex mu;
  static std::vector<std::unique_ptr<CudaCachingAllocator>> per_device;
  std::lock_guard<std::mutex> l(mu);
  FC_CHECK(d.index >= 0 && d.index < 64, "bad CUDA device index ", d.index);
  if (per_device.size() <= static_cast<size_t>(d.index)) per_device.resize(d.index + 1);
  auto& slot = per_device[d.index];
  if (!slot) slot = std::make_unique<CudaCachingAllocator>(d.index);
  return *slot;
}

}  // namespace foldcore

// ---------------- CudaCachingAllocator ----------------
// (Plain C++: the CUDA calls go through core/cuda_backend.h.)

namespace foldcore {

CudaCachingAllocator::~CudaCachingAllocator() {
  // Blocks still handed out at exit belong to static tensors; the driver reclaims them.
  try {
    empty_cache();
  } catch (...) {
  }
}

void* CudaCachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> l(mu_);
  auto it = free_blocks_.lower_bound(size);
  if (it != free_blocks_.end() && (it->first <= 2 * size || it->first - size <= (1u << 20))) {
    void* p = it->second;
    stats_.on_alloc(it->first);
    detail::cuda_mark_block(p, bytes, it->first);
    free_blocks_.erase(it);
    return p;
  }
  void* p = detail::cuda_malloc(size, device_index_);
  if (p == nullptr) {  // out of memory: give the cache back and retry once
    for (auto& [sz, ptr] : free_blocks_) {
      detail::cuda_free(ptr, device_index_);
      block_size_.erase(ptr);
      stats_.on_release(sz);
    }
    free_blocks_.clear();
    p = detail::cuda_malloc(size, device_index_);
  }
  if (p == nullptr) {
    const MemStats s = stats_.get();
    throw OutOfMemoryError(detail::concat("CUDA out of memory on cuda:", device_index_, ": requested ", size,
                                          " bytes with ", s.current, " bytes in use and ", s.reserved, " reserved"));
  }
  block_size_[p] = size;
  stats_.on_reserve(size);
  stats_.on_alloc(size);
  detail::cuda_mark_block(p, bytes, size);
  return p;
}

void CudaCachingAllocator::deallocate(void* ptr, size_t /*bytes*/) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> l(mu_);
  auto it = block_size_.find(ptr);
  FC_CHECK(it != block_size_.end(), "CUDA allocator: free of a pointer it does not own");
  stats_.on_free(it->second);
  detail::cuda_mark_block(ptr, 0, it->second);  // a stale pointer into a cached block faults
  free_blocks_.emplace(it->second, ptr);
}

void CudaCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [sz, ptr] : free_blocks_) {
    detail::cuda_free(ptr, device_index_);
    block_size_.erase(ptr);
    stats_.on_release(sz);
  }
  free_blocks_.clear();
}

}  // namespace foldcore
