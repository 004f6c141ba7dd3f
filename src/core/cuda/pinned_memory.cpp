// CUDA side of core/pinned_memory.h: page-locked allocations and the async host→device copy.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/error.h"

namespace foldcore::detail {

void* cuda_host_alloc(size_t bytes) {
  void* p = nullptr;
  // Portable: the buffer is pinned for every device, not only the current one.
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();  // clear the error: the caller falls back to pageable memory
    return nullptr;
  }
  return p;
}

void cuda_host_free(void* ptr) { cudaFreeHost(ptr); }

void cuda_memcpy_to_device_async(void* dst, const void* src, size_t bytes, int device, void* stream) {
  const cudaError_t set = cudaSetDevice(device);
  FC_CHECK(set == cudaSuccess, "copy_to_device_async: cudaSetDevice(", device, "): ", cudaGetErrorString(set));
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream));
  FC_CHECK(e == cudaSuccess, "copy_to_device_async: cudaMemcpyAsync of ", bytes, " bytes: ", cudaGetErrorString(e));
}

}  // namespace foldcore::detail
