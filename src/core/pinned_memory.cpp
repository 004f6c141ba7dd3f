// PinnedBuffer and the async host→device copy; the CUDA calls are in core/cuda/pinned_memory.cpp.
#include "core/pinned_memory.h"

#include <utility>

#include "core/device.h"
#include "core/error.h"

namespace foldcore {

#if defined(FOLDCORE_HAVE_CUDA)
namespace detail {
// nullptr when page-locked memory cannot be had (no device, limit reached).
void* cuda_host_alloc(size_t bytes);
void cuda_host_free(void* ptr);
void cuda_memcpy_to_device_async(void* dst, const void* src, size_t bytes, int device, void* stream);
}  // namespace detail
#endif

PinnedBuffer::PinnedBuffer(size_t bytes, bool pin) : bytes_(bytes) {
#if defined(FOLDCORE_HAVE_CUDA)
  if (pin && bytes > 0 && cuda_available()) pinned_ = detail::cuda_host_alloc(bytes);
#else
  (void)pin;
#endif
  if (!pinned_) fallback_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
}

PinnedBuffer::~PinnedBuffer() {
#if defined(FOLDCORE_HAVE_CUDA)
  if (pinned_) detail::cuda_host_free(pinned_);
#endif
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : pinned_(std::exchange(o.pinned_, nullptr)), fallback_(std::move(o.fallback_)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    PinnedBuffer old(std::move(*this));
    pinned_ = std::exchange(o.pinned_, nullptr);
    fallback_ = std::move(o.fallback_);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void copy_to_device_async(void* dst, const void* src, size_t bytes, const Stream& stream) {
  FC_CHECK(stream.device().is_cuda(), "copy_to_device_async: the stream must be on a CUDA device");
#if defined(FOLDCORE_HAVE_CUDA)
  if (bytes > 0) detail::cuda_memcpy_to_device_async(dst, src, bytes, stream.device().index, stream.native());
#else
  (void)dst;
  (void)src;
  (void)bytes;
  FC_THROW("copy_to_device_async: this build of foldcore has no CUDA backend");
#endif
}

}  // namespace foldcore
