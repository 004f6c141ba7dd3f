// CUDA implementation of core/cuda_backend.h: device queries, raw memory, streams, events,
// copies and fills.
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda_backend.h"

namespace foldcore {

bool cuda_built() { return true; }

namespace detail {

int cuda_device_count_impl() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver/device" error
    return 0;
  }
  return n;
}

void cuda_set_device(int index) { FC_CUDA_CHECK(cudaSetDevice(index)); }

size_t cuda_total_memory(int index) {
  FC_CUDA_CHECK(cudaSetDevice(index));
  size_t free_bytes = 0, total_bytes = 0;
  FC_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes;
}

size_t cuda_free_memory(int index) {
  FC_CUDA_CHECK(cudaSetDevice(index));
  size_t free_bytes = 0, total_bytes = 0;
  FC_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

void cuda_device_synchronize(int index) {
  FC_CUDA_CHECK(cudaSetDevice(index));
  FC_CUDA_CHECK(cudaDeviceSynchronize());
}

void* cuda_malloc(size_t bytes, int index) {
  FC_CUDA_CHECK(cudaSetDevice(index));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  FC_CUDA_CHECK(e);
  return p;
}

void cuda_free(void* ptr, int index) {
  FC_CUDA_CHECK(cudaSetDevice(index));
  FC_CUDA_CHECK(cudaFree(ptr));
}

void cuda_mark_block(void* ptr, size_t used, size_t block) {
#if defined(FOLDCORE_CUDA_EMULATE)
  ::fc_emu::mark_device_block(ptr, used, block);
#else
  (void)ptr, (void)used, (void)block;
#endif
}

void* cuda_stream_create(int index) {
  FC_CUDA_CHECK(cudaSetDevice(index));
  cudaStream_t s;
  FC_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void cuda_stream_destroy(void* s) { cudaStreamDestroy(static_cast<cudaStream_t>(s)); }
void cuda_stream_synchronize(void* s) { FC_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s))); }

void* cuda_event_create(int index) {
  FC_CUDA_CHECK(cudaSetDevice(index));
  cudaEvent_t e;
  FC_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}
void cuda_event_destroy(void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
void cuda_event_record(void* e, void* s) {
  FC_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(s)));
}
void cuda_event_synchronize(void* e) { FC_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e))); }
void cuda_stream_wait_event(void* s, void* e) {
  FC_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s), static_cast<cudaEvent_t>(e), 0));
}
float cuda_event_elapsed_ms(void* a, void* b) {
  // cudaEventElapsedTime answers cudaErrorNotReady while either event is still pending (seen on an
  // H200: the timed work had been queued, not finished): wait for both first.
  FC_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(a)));
  FC_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(b)));
  float ms = 0;
  FC_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a), static_cast<cudaEvent_t>(b)));
  return ms;
}

void cuda_memcpy(void* dst, Device dd, const void* src, Device sd, size_t bytes) {
  const Device cuda_side = dd.is_cuda() ? dd : sd;
  FC_CUDA_CHECK(cudaSetDevice(cuda_side.index));
  const cudaStream_t s = cuda_stream_of(cuda_side);
  FC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  FC_CUDA_CHECK(cudaStreamSynchronize(s));
}

namespace {

template <typename T> struct DevType { using type = typename CudaType<T>::type; };

template <typename D, typename S> __device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<S, __nv_bfloat16> || std::is_same_v<S, __half>) {
    return convert<D>(to_f32(v));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16> || std::is_same_v<D, __half>) {
    return from_f32<D>(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

template <typename D, typename S>
__global__ void strided_copy_kernel(D* __restrict__ dst, StridedDesc dd, const S* __restrict__ src, StridedDesc sd,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[dd.offset_of(i)] = convert<D>(src[sd.offset_of(i)]);
}

template <typename T> __global__ void fill_kernel(T* dst, StridedDesc dd, T value, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[dd.offset_of(i)] = value;
}

}  // namespace

void cuda_strided_copy(const Tensor& dst, const Tensor& src) {
  FC_CUDA_CHECK(cudaSetDevice(dst.device().index));
  const cudaStream_t s = cuda_stream_of(dst.device());
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    FC_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, s));
    return;
  }
  const int64_t n = dst.numel();
  dispatch_dtype(dst.dtype(), [&](auto d0) {
    using D = typename DevType<decltype(d0)>::type;
    dispatch_dtype(src.dtype(), [&](auto s0) {
      using S = typename DevType<decltype(s0)>::type;
      launch_kernel<strided_copy_kernel<D, S>>(grid_for(n, 256), 256, 0, s, static_cast<D*>(dst.data_ptr()), strided_desc(dst),
                                                                 static_cast<const S*>(src.data_ptr()),
                                                                 strided_desc(src), n);
    });
  });
  FC_CUDA_CHECK_LAUNCH();
}

void cuda_fill(const Tensor& dst, double value) {
  FC_CUDA_CHECK(cudaSetDevice(dst.device().index));
  const cudaStream_t s = cuda_stream_of(dst.device());
  const int64_t n = dst.numel();
  dispatch_dtype(dst.dtype(), [&](auto d0) {
    using H = decltype(d0);
    using D = typename DevType<H>::type;
    H hv;
    if constexpr (std::is_same_v<H, bf16> || std::is_same_v<H, f16>)
      hv = H(static_cast<float>(value));
    else
      hv = static_cast<H>(value);
    D dv;
    static_assert(sizeof(D) == sizeof(H));
    std::memcpy(static_cast<void*>(&dv), &hv, sizeof(D));
    launch_kernel<fill_kernel<D>>(grid_for(n, 256), 256, 0, s, static_cast<D*>(dst.data_ptr()), strided_desc(dst), dv, n);
  });
  FC_CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace foldcore
