// Stubs for a build without the CUDA backend: every CUDA request is a clear error.
#include "core/cuda_backend.h"
#include "core/error.h"

namespace foldcore {

bool cuda_built() { return false; }

namespace detail {
namespace {
[[noreturn]] void no_cuda() { FC_THROW("this build of foldcore has no CUDA backend (configure with -DFOLDCORE_CUDA=ON)"); }
}  // namespace
int cuda_device_count_impl() { return 0; }
std::string cuda_unavailable_reason() { return "this build has no CUDA backend"; }
void cuda_set_device(int) { no_cuda(); }
int cuda_current_device() { no_cuda(); }
void cuda_device_synchronize(int) { no_cuda(); }
size_t cuda_total_memory(int) { no_cuda(); }
size_t cuda_free_memory(int) { no_cuda(); }
void* cuda_malloc(size_t, int) { no_cuda(); }
void cuda_free(void*, int) { no_cuda(); }
void cuda_mark_block(void*, size_t, size_t) {}
void* cuda_stream_create(int) { no_cuda(); }
void cuda_stream_destroy(void*) {}
void cuda_stream_synchronize(void*) { no_cuda(); }
void* cuda_event_create(int) { no_cuda(); }
void cuda_event_destroy(void*) {}
void cuda_event_record(void*, void*) { no_cuda(); }
void cuda_event_synchronize(void*) { no_cuda(); }
bool cuda_event_query(void*) { no_cuda(); }
void cuda_stream_wait_event(void*, void*) { no_cuda(); }
float cuda_event_elapsed_ms(void*, void*) { no_cuda(); }
void cuda_memcpy(void*, Device, const void*, Device, size_t) { no_cuda(); }
void cuda_set_copy_runs(bool) {}
void cuda_strided_copy(const Tensor&, const Tensor&) { no_cuda(); }
void cuda_fill(const Tensor&, double) { no_cuda(); }
}  // namespace detail
}  // namespace foldcore
