// Internal: the CUDA runtime entry points core needs. Implemented in core/cuda/runtime.cu when
// the CUDA backend is built and by throwing stubs in core/no_cuda.cpp otherwise, so the rest of
// core is plain C++ that compiles without the CUDA headers.
#pragma once

#include <cstddef>
#include <string>

#include "core/device.h"

namespace foldcore {
class Tensor;
namespace detail {
int cuda_device_count_impl();
// Why the CUDA runtime reports no device (cudaGetDeviceCount's error, or that it counted none).
std::string cuda_unavailable_reason();
void cuda_set_device(int index);
// The calling thread's current device (cudaGetDevice).
int cuda_current_device();
void cuda_device_synchronize(int index);
// Total memory of the device in bytes (cudaMemGetInfo).
size_t cuda_total_memory(int index);
// Memory the driver can still hand out on the device, in bytes (cudaMemGetInfo).
size_t cuda_free_memory(int index);
// nullptr when the device is out of memory; throws Error for other failures.
void* cuda_malloc(size_t bytes, int index);
void cuda_free(void* ptr, int index);
// Tells the host emulation's AddressSanitizer which bytes of a cached block are in use (the first
// `used` of `block`); a no-op on a real device.
void cuda_mark_block(void* ptr, size_t used, size_t block);
void* cuda_stream_create(int index);
void cuda_stream_destroy(void* stream);
void cuda_stream_synchronize(void* stream);
void* cuda_event_create(int index);
void cuda_event_destroy(void* event);
void cuda_event_record(void* event, void* stream);
void cuda_event_synchronize(void* event);
// Whether the event has completed (no wait).
bool cuda_event_query(void* event);
void cuda_stream_wait_event(void* stream, void* event);
float cuda_event_elapsed_ms(void* start, void* end);
// Copies `bytes` between any two devices, ordered on the current stream of the CUDA side and
// synchronous w.r.t. the host.
void cuda_memcpy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
// Elementwise strided copy with dtype conversion, both tensors on the same CUDA device.
void cuda_strided_copy(const Tensor& dst, const Tensor& src);
// Whether cuda_strided_copy copies unit-stride runs by vectors (default on); off: element by
// element, as before the run path (bench_copy times both side by side). Not thread-local.
void cuda_set_copy_runs(bool on);
void cuda_fill(const Tensor& dst, double value);
}  // namespace detail
}  // namespace foldcore
