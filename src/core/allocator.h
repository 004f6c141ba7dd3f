// Allocators. Every byte a Tensor owns comes from an Allocator, which keeps current/peak stats.
//  - CpuAllocator: 64-byte aligned host memory.
//  - CudaCachingAllocator: device memory cached in size-rounded free lists, so steady-state
//    training does no cudaMalloc/cudaFree; empty_cache() returns it to the driver.
//  - ActivationArena (core/arena.h): one reserved block, bump allocation, LIFO reclaim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/device.h"

namespace foldcore {

struct MemStats {
  size_t current = 0;        // bytes handed out and not yet returned
  size_t peak = 0;           // max of `current` since creation / reset_peak()
  size_t reserved = 0;       // bytes held from the system (>= current for caching allocators)
  size_t peak_reserved = 0;  // max of `reserved`
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` (>0) bytes or throws Error. allocate(0) returns nullptr.
  virtual void* allocate(size_t bytes) = 0;
  // Returns memory obtained from allocate(bytes) with the same `bytes`.
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
  virtual MemStats stats() const = 0;
  virtual void reset_peak() = 0;
};

// Thread-safe current/peak bookkeeping shared by the allocators.
class StatsTracker {
 public:
  void on_alloc(size_t bytes);
  void on_free(size_t bytes);
  void on_reserve(size_t bytes);
  void on_release(size_t bytes);
  MemStats get() const;
  void reset_peak();

 private:
  mutable std::mutex mu_;
  MemStats s_;
};

// Large blocks (>= kCacheMin) are kept after a free, up to kCacheCap bytes (oldest returned
// first), and reused for a later request of the same (64-byte rounded) size: repeated pair-sized
// temporaries then skip the page faults and kernel zeroing of freshly mapped memory. Reused
// memory is not zeroed (no allocation ever was). current/peak count requested bytes as before;
// reserved includes the cached blocks.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kCacheMin = size_t{1} << 20;
  static constexpr size_t kCacheCap = size_t{512} << 20;
  CpuAllocator() = default;
  CpuAllocator(const CpuAllocator&) = delete;
  CpuAllocator& operator=(const CpuAllocator&) = delete;
  ~CpuAllocator() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cpu(); }
  MemStats stats() const override { return stats_.get(); }
  void reset_peak() override { stats_.reset_peak(); }
  // Returns the cached blocks to the system.
  void empty_cache();

 private:
  struct Block {
    size_t size;
    void* ptr;
  };
  std::mutex mu_;
  std::vector<Block> cache_;  // oldest first
  size_t cached_bytes_ = 0;
  bool closed_ = false;  // set by the destructor
  StatsTracker stats_;
};

// Caching allocator for one CUDA device. Requests are rounded up to 512 bytes; freed blocks go to
// a size-ordered free list and are reused best-fit when the block is at most 2x the request (or
// within 1 MiB), which bounds internal fragmentation. All frees are assumed stream-ordered on the
// device's current stream: memory freed while another stream still uses it must be synchronised
// by the caller first.
class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device_index) : device_index_(device_index) {}
  ~CudaCachingAllocator() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cuda(device_index_); }
  MemStats stats() const override { return stats_.get(); }
  void reset_peak() override { stats_.reset_peak(); }
  // Returns all cached (free) blocks to the driver.
  void empty_cache();

  static constexpr size_t kRound = 512;
  static size_t round_size(size_t bytes) { return (bytes + kRound - 1) / kRound * kRound; }

 private:
  int device_index_;
  std::mutex mu_;
  std::multimap<size_t, void*> free_blocks_;      // size -> ptr
  std::unordered_map<void*, size_t> block_size_;  // every live or cached block
  StatsTracker stats_;
};

// The process-wide default allocator for a device (the device context).
Allocator& default_allocator(Device d);

}  // namespace foldcore
