// CUDA runtime stand-ins for the host emulation: one device whose memory is host memory, streams
// and events that run everything synchronously, the last-error protocol of the runtime API.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "core/cuda/emu/cuda_emu.h"
#include "core/cuda/emu/emu_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define FC_EMU_POISON(p, n) __asan_poison_memory_region((p), (n))
#define FC_EMU_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define FC_EMU_POISON(p, n) ((void)(p), (void)(n))
#define FC_EMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#if defined(__SANITIZE_ADDRESS__)
// The emulated device keeps process-lifetime state (cuBLASLt handles, the caching allocator's
// blocks) that is torn down in no particular order at exit; the emulation checks accesses, not
// leaks, so LeakSanitizer is off by default (ASAN_OPTIONS still overrides it).
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
#endif

struct fc_emu_stream {
  unsigned flags = 0;
};
struct fc_emu_event {
  std::chrono::steady_clock::time_point t{};
  bool recorded = false;
};

namespace fc_emu {
namespace {

// Trivially destructible, so the runtime keeps working while statics are torn down at exit
// (the caching allocator frees its blocks from its destructor).
thread_local cudaError_t t_last = cudaSuccess;
thread_local char t_message[2048];

constexpr size_t kAlign = 256;  // cudaMalloc's alignment guarantee

// Emulated device memory: FOLDCORE_EMU_DEVICE_MEMORY_MB (default 8192) so that running out
// takes the caching allocator's out-of-memory path rather than the host's.
size_t device_capacity() {
  static const size_t cap = [] {
    const char* e = std::getenv("FOLDCORE_EMU_DEVICE_MEMORY_MB");
    return (e ? std::strtoull(e, nullptr, 10) : 8192ull) << 20;
  }();
  return cap;
}

std::mutex g_mem_mutex;
std::unordered_map<void*, size_t>& allocations() {
  static auto* m = new std::unordered_map<void*, size_t>;  // immortal: see t_message
  return *m;
}
size_t g_in_use = 0;
int t_device = 0;

cudaError_t fail(cudaError_t e, const std::string& message) {
  set_error(e, message);
  return e;
}

}  // namespace

void set_error(cudaError_t e, const std::string& message) {
  t_last = e;
  const size_t n = std::min(message.size(), sizeof(t_message) - 1);
  std::memcpy(t_message, message.data(), n);
  t_message[n] = '\0';
}

void mark_device_block(void* p, size_t used, size_t block) {
  char* c = static_cast<char*>(p);
  FC_EMU_UNPOISON(c, used);
  if (block > used) FC_EMU_POISON(c + used, block - used);
}

}  // namespace fc_emu

using fc_emu::fail;

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): the emulation has one device");
  fc_emu::t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = fc_emu::t_device;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> l(fc_emu::g_mem_mutex);
  *total_bytes = fc_emu::device_capacity();
  *free_bytes = *total_bytes - fc_emu::g_in_use;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  std::lock_guard<std::mutex> l(fc_emu::g_mem_mutex);
  if (fc_emu::g_in_use + bytes > fc_emu::device_capacity())
    return fail(cudaErrorMemoryAllocation, "cudaMalloc: out of (emulated) device memory");
  // Exactly `bytes`, so AddressSanitizer sees the end of the allocation.
  void* q = ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t{fc_emu::kAlign}, std::nothrow);
  if (!q) return fail(cudaErrorMemoryAllocation, "cudaMalloc: host allocation failed");
  fc_emu::allocations()[q] = bytes;
  fc_emu::g_in_use += bytes;
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> l(fc_emu::g_mem_mutex);
  auto it = fc_emu::allocations().find(p);
  if (it == fc_emu::allocations().end()) return fail(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
  FC_EMU_UNPOISON(p, it->second);
  fc_emu::g_in_use -= it->second;
  fc_emu::allocations().erase(it);
  ::operator delete(p, std::align_val_t{fc_emu::kAlign});
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  void* q = ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t{fc_emu::kAlign}, std::nothrow);
  if (!q) return fail(cudaErrorMemoryAllocation, "cudaHostAlloc failed");
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (p) ::operator delete(p, std::align_val_t{fc_emu::kAlign});
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes && (!dst || !src)) return fail(cudaErrorInvalidValue, "cudaMemcpy with a null pointer");
  if (kind == cudaMemcpyDeviceToDevice && fc_emu::skip_device_work()) return cudaSuccess;
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
  if (bytes && !dst) return fail(cudaErrorInvalidValue, "cudaMemsetAsync with a null pointer");
  if (fc_emu::skip_device_work()) return cudaSuccess;
  if (bytes) std::memset(dst, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new fc_emu_stream{flags};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) {
  return e ? cudaSuccess : fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: null event");
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new fc_emu_event;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: null event");
  e->t = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {  // work is synchronous here: a recorded event is complete
  return e ? cudaSuccess : fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: null event");
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return e ? cudaSuccess : fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: null event");
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a || !b || !a->recorded || !b->recorded)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event not recorded");
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = fc_emu::t_last;
  fc_emu::t_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return fc_emu::t_last; }

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    default: break;
  }
  if (fc_emu::t_message[0] != '\0') return fc_emu::t_message;
  switch (e) {
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "unknown error";
  }
}
