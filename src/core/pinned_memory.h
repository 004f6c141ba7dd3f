// Page-locked ("pinned") host memory for asynchronous host→device copies. cudaMemcpyAsync from
// pageable memory is staged through a driver buffer and is synchronous w.r.t. the host; from pinned
// memory it is a DMA the host does not wait for, so a data loader can overlap copies with compute.
// In a build without CUDA, or when no device is usable, a PinnedBuffer is ordinary host memory
// (pinned() == false) and the async copy is unavailable.
#pragma once

#include <cstddef>
#include <memory>

#include "core/stream.h"

namespace foldcore {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // pin = false gives ordinary memory (a consumer that never copies to a device).
  explicit PinnedBuffer(size_t bytes, bool pin = true);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return pinned_ ? pinned_ : fallback_.get(); }
  size_t size() const { return bytes_; }
  bool pinned() const { return pinned_ != nullptr; }

 private:
  void* pinned_ = nullptr;                  // cudaHostAlloc'd
  std::unique_ptr<std::byte[]> fallback_;   // when pinning is unavailable
  size_t bytes_ = 0;
};

// Copies `bytes` from host memory `src` (pinned for the copy to be asynchronous) to `dst` on the
// CUDA device of `stream`, ordered on `stream`; returns without waiting. Throws in a build
// without CUDA.
void copy_to_device_async(void* dst, const void* src, size_t bytes, const Stream& stream);

}  // namespace foldcore
