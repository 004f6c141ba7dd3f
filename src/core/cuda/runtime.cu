// CUDA implementation of core/cuda_backend.h: device queries, raw memory, streams, events,
// copies and fills.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include <map>
#include <mutex>
#include <utility>

#include "core/cuda/block_counters.cuh"
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/vec.cuh"
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

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("the CUDA runtime says: ") + cudaGetErrorString(e);
  }
  return n == 0 ? "the CUDA runtime counts no device" : "";
}

void cuda_set_device(int index) { FC_CUDA_CHECK(cudaSetDevice(index)); }
int cuda_current_device() {
  int d = 0;
  FC_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

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
bool cuda_event_query(void* e) {
  const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
  if (r == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it
    return false;
  }
  FC_CUDA_CHECK(r);
  return true;
}
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
  const cudaMemcpyKind kind = dd.is_cuda() && sd.is_cuda() ? cudaMemcpyDeviceToDevice
                              : dd.is_cuda()                ? cudaMemcpyHostToDevice
                                                            : cudaMemcpyDeviceToHost;
  FC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
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

// A copy's index space after dropping extent-1 dims and merging dims that are contiguous in both
// tensors (a permute of [N, N, C] to [N, N, C] with the channel kept innermost is a copy of N·N
// rows of C): fewer dims, fewer divisions per element. dst strides ds, src strides ss.
struct CopyPlan {
  int ndim = 0;
  int64_t shape[kMaxDims]{}, ds[kMaxDims]{}, ss[kMaxDims]{};
};

CopyPlan plan_copy(const Tensor& dst, const Tensor& src) {
  CopyPlan p;
  for (int a = 0; a < dst.dim(); ++a) {
    if (dst.shape()[a] == 1) continue;
    if (p.ndim > 0) {
      const int b = p.ndim - 1;
      if (p.ds[b] == dst.strides()[a] * dst.shape()[a] && p.ss[b] == src.strides()[a] * dst.shape()[a]) {
        p.shape[b] *= dst.shape()[a];
        p.ds[b] = dst.strides()[a];
        p.ss[b] = src.strides()[a];
        continue;
      }
    }
    p.shape[p.ndim] = dst.shape()[a];
    p.ds[p.ndim] = dst.strides()[a];
    p.ss[p.ndim] = src.strides()[a];
    ++p.ndim;
  }
  return p;
}

// The plan's dims in the kernel's index type (int32 when every index and offset fits: 32-bit
// divisions are several times cheaper than 64-bit ones on the GPU).
template <typename I> struct CopyDesc {
  int ndim;
  I shape[kMaxDims], ds[kMaxDims], ss[kMaxDims];
  // dst and src offsets of linear index `lin` (row-major over shape), one division per dim; the
  // loop unrolls over every possible dim (constant indices: no copy of the descriptor to local
  // memory, as StridedDescT::offset_of)
  __host__ __device__ void offsets(I lin, I& od, I& os) const {
    od = 0;
    os = 0;
    FC_UNROLL
    for (int a = kMaxDims - 1; a >= 0; --a) {
      if (a >= ndim) continue;
      const I q = lin / shape[a];
      const I r = lin - q * shape[a];
      lin = q;
      od += r * ds[a];
      os += r * ss[a];
    }
  }
};

template <typename I> CopyDesc<I> copy_desc(const CopyPlan& p) {
  CopyDesc<I> d{};
  d.ndim = p.ndim;
  for (int a = 0; a < p.ndim; ++a) {
    d.shape[a] = static_cast<I>(p.shape[a]);
    d.ds[a] = static_cast<I>(p.ds[a]);
    d.ss[a] = static_cast<I>(p.ss[a]);
  }
  return d;
}

// Whether the indices and every offset of both tensors fit int32 (strides are never negative here).
bool fits_int32(const CopyPlan& p, int64_t n) {
  int64_t md = 0, ms = 0;
  for (int a = 0; a < p.ndim; ++a) {
    md += (p.shape[a] - 1) * p.ds[a];
    ms += (p.shape[a] - 1) * p.ss[a];
  }
  // n < 2^30 keeps a grid-stride index plus its stride (< 2^30 threads) below 2^31
  return n < (int64_t{1} << 30) && md < INT32_MAX && ms < INT32_MAX;
}

// Both sides contiguous (a dtype conversion): no index arithmetic at all.
template <typename D, typename S>
__global__ void contiguous_convert_kernel(D* __restrict__ dst, const S* __restrict__ src, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = convert<D>(src[i]);
}

// The same, 4 elements per thread as one access per side (16 bytes of fp32, 8 of bf16): n % 4 == 0
// and both pointers aligned to 4 elements (the caller checks).
template <typename D, typename S>
__global__ void contiguous_convert4_kernel(Quad<D>* __restrict__ dst, const Quad<S>* __restrict__ src, int64_t n4) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Quad<S> in = src[i];
    Quad<D> out;
#pragma unroll
    for (int e = 0; e < 4; ++e) out.v[e] = convert<D>(in.v[e]);
    dst[i] = out;
  }
}

template <typename D, typename S, typename I>
__global__ void strided_copy_kernel(D* __restrict__ dst, const S* __restrict__ src, CopyDesc<I> desc, I n) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x) {
    I od, os;
    desc.offsets(i, od, os);
    dst[od] = convert<D>(src[os]);
  }
}

// A copy of runs: the plan's innermost dim has unit stride in both tensors (a permute that keeps the
// channel innermost, [N, N, C] → its transpose in (i, j); a narrowed or broadcast row block). Each
// thread moves V consecutive elements of a run as one access of up to 16 bytes per side and
// decomposes the outer dims once for them, instead of once per element with 2- or 4-byte accesses.
// The caller checks that V divides the run and every outer stride and that both pointers are
// aligned to a V-vector.

template <typename D, typename S, int V, typename I>
__global__ void run_copy_kernel(D* __restrict__ dst, const S* __restrict__ src, CopyDesc<I> rows, I run_vecs,
                                I n_vecs) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n_vecs;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I row = i / run_vecs, k = (i - row * run_vecs) * V;
    I od, os;
    rows.offsets(row, od, os);
    const VecOf<S, V> in = *reinterpret_cast<const VecOf<S, V>*>(src + os + k);
    VecOf<D, V> out;
    for (int e = 0; e < V; ++e) out.v[e] = convert<D>(in.v[e]);
    *reinterpret_cast<VecOf<D, V>*>(dst + od + k) = out;
  }
}

// A transposing copy: dst's unit-stride dim q is strided in src, and src's unit-stride dim is p.
// 32 × 32 tiles of (p, q) go through shared memory, so both the reads (along p) and the
// writes (along q) are coalesced; the other dims (the batch) are decomposed once per tile.
// Block 32 × 8 threads; grid (tiles along q, tiles along p, batch, in slices of 65,535).
constexpr int kTile = 32;
template <typename D, typename S, typename I>
__global__ void transpose_copy_kernel(D* __restrict__ dst, const S* __restrict__ src, CopyDesc<I> batch, I len_p,
                                      I len_q, I ds_p, I ss_q, I z0) {
  FC_SHARED(D, tile, [kTile][kTile + 1]);
  const I q0 = static_cast<I>(blockIdx.x) * kTile, p0 = static_cast<I>(blockIdx.y) * kTile;
  I bd, bs;
  batch.offsets(z0 + static_cast<I>(blockIdx.z), bd, bs);
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int k = ty; k < kTile; k += 8) {  // read: threads along p (src's unit stride)
    const I p = p0 + tx, q = q0 + k;
    if (p < len_p && q < len_q) tile[k][tx] = convert<D>(src[bs + p + q * ss_q]);
  }
  __syncthreads();
  for (int k = ty; k < kTile; k += 8) {  // write: threads along q (dst's unit stride)
    const I q = q0 + tx, p = p0 + k;
    if (p < len_p && q < len_q) dst[bd + q + p * ds_p] = tile[tx][k];
  }
}

// Launches run_copy_kernel with the widest V (16 bytes per access on the wider side, down to 2)
// that the plan and both pointers allow; false when none does (no unit-stride run on both sides,
// or runs of odd length, or odd offsets), and the caller copies element by element.
template <int V, typename D, typename S>
bool run_copy_with(const CopyPlan& p, D* out, const S* in, int64_t n, cudaStream_t s) {
  const int last = p.ndim - 1;
  if (p.shape[last] % V != 0) return false;
  for (int a = 0; a < last; ++a)
    if (p.ds[a] % V != 0 || p.ss[a] % V != 0) return false;
  if (reinterpret_cast<uintptr_t>(out) % (sizeof(D) * V) != 0 || reinterpret_cast<uintptr_t>(in) % (sizeof(S) * V) != 0)
    return false;
  CopyPlan rows;  // the outer dims
  rows.ndim = last;
  for (int a = 0; a < last; ++a) {
    rows.shape[a] = p.shape[a];
    rows.ds[a] = p.ds[a];
    rows.ss[a] = p.ss[a];
  }
  const int64_t n_vecs = n / V;
  launch_kernel<run_copy_kernel<D, S, V, int32_t>>(grid_for(n_vecs, 256), 256, 0, s, out, in, copy_desc<int32_t>(rows),
                                                    static_cast<int32_t>(p.shape[last] / V), static_cast<int32_t>(n_vecs));
  return true;
}

std::atomic<bool> g_copy_runs{true};

template <typename D, typename S> bool run_copy(const CopyPlan& p, D* out, const S* in, int64_t n, cudaStream_t s) {
  if (!g_copy_runs.load(std::memory_order_relaxed)) return false;
  if (p.ndim < 2 || p.ds[p.ndim - 1] != 1 || p.ss[p.ndim - 1] != 1) return false;
  constexpr size_t wide = sizeof(D) > sizeof(S) ? sizeof(D) : sizeof(S);
  if constexpr (wide <= 1) {
    if (run_copy_with<16>(p, out, in, n, s)) return true;
  }
  if constexpr (wide <= 2) {
    if (run_copy_with<8>(p, out, in, n, s)) return true;
  }
  if constexpr (wide <= 4) {
    if (run_copy_with<4>(p, out, in, n, s)) return true;
  }
  return run_copy_with<2>(p, out, in, n, s);
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
    ::foldcore::detail::count_launch();
    const kernel_profile::detail::Scope timed("memcpy (device to device)", s);
    FC_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, s));
    return;
  }
  const int64_t n = dst.numel();
  if (n == 0) return;
  const CopyPlan plan = plan_copy(dst, src);
  // The transposing case: dst's unit-stride dim q is another dim than src's unit-stride dim p,
  // both long enough to fill tiles. Either side may be the permuted one: a gather into a
  // contiguous dst (contiguous() of a permuted view) or a scatter of a contiguous src into a
  // permuted view (a permute's backward).
  int q_dim = -1, p_dim = -1;
  for (int a = 0; a < plan.ndim; ++a)
    if (plan.ds[a] == 1 && plan.shape[a] >= 8) q_dim = a;
  for (int a = 0; a < plan.ndim && q_dim >= 0; ++a)
    if (a != q_dim && plan.ss[a] == 1 && plan.shape[a] >= 8) p_dim = a;
  const bool small = fits_int32(plan, n);
  dispatch_dtype(dst.dtype(), [&](auto d0) {
    using D = typename DevType<decltype(d0)>::type;
    dispatch_dtype(src.dtype(), [&](auto s0) {
      using S = typename DevType<decltype(s0)>::type;
      D* out = static_cast<D*>(dst.data_ptr());
      const S* in = static_cast<const S*>(src.data_ptr());
      if (plan.ndim == 0 || (plan.ndim == 1 && plan.ds[0] == 1 && plan.ss[0] == 1)) {
        if (n % 4 == 0 && reinterpret_cast<uintptr_t>(out) % (4 * sizeof(D)) == 0 &&
            reinterpret_cast<uintptr_t>(in) % (4 * sizeof(S)) == 0)
          launch_kernel<contiguous_convert4_kernel<D, S>>(grid_for(n / 4, 256), 256, 0, s, reinterpret_cast<Quad<D>*>(out),
                                                          reinterpret_cast<const Quad<S>*>(in), n / 4);
        else
          launch_kernel<contiguous_convert_kernel<D, S>>(grid_for(n, 256), 256, 0, s, out, in, n);
      } else if (p_dim >= 0 && small) {
        CopyPlan batch;  // the dims other than p and q, in order
        int64_t batches = 1;
        for (int a = 0; a < plan.ndim; ++a) {
          if (a == p_dim || a == q_dim) continue;
          batch.shape[batch.ndim] = plan.shape[a];
          batch.ds[batch.ndim] = plan.ds[a];
          batch.ss[batch.ndim] = plan.ss[a];
          ++batch.ndim;
          batches *= plan.shape[a];
        }
        const auto tiles = [](int64_t len) { return static_cast<unsigned>((len + kTile - 1) / kTile); };
        for (int64_t z0 = 0; z0 < batches; z0 += 65535) {
          const dim3 grid(tiles(plan.shape[q_dim]), tiles(plan.shape[p_dim]), static_cast<unsigned>(std::min<int64_t>(65535, batches - z0)));
          launch_kernel<transpose_copy_kernel<D, S, int32_t>>(grid, dim3(kTile, 8), 0, s, out, in, copy_desc<int32_t>(batch),
                                                               static_cast<int32_t>(plan.shape[p_dim]), static_cast<int32_t>(plan.shape[q_dim]),
                                                               static_cast<int32_t>(plan.ds[p_dim]), static_cast<int32_t>(plan.ss[q_dim]),
                                                               static_cast<int32_t>(z0));
          FC_CUDA_CHECK_LAUNCH();
        }
      } else if (small && run_copy(plan, out, in, n, s)) {
        // launched: runs of V elements
      } else if (small) {
        launch_kernel<strided_copy_kernel<D, S, int32_t>>(grid_for(n, 256), 256, 0, s, out, in, copy_desc<int32_t>(plan),
                                                           static_cast<int32_t>(n));
      } else {
        launch_kernel<strided_copy_kernel<D, S, int64_t>>(grid_for(n, 256), 256, 0, s, out, in, copy_desc<int64_t>(plan), n);
      }
    });
  });
  FC_CUDA_CHECK_LAUNCH();
}

void cuda_set_copy_runs(bool on) { g_copy_runs.store(on); }

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

unsigned* block_counters(Device device, int64_t groups) {
  static std::mutex mutex;
  // (device, stream) → zeroed counters; never destroyed (no device frees after the runtime is gone).
  static auto* pools = new std::map<std::pair<int, void*>, Tensor>();
  const cudaStream_t stream = cuda_stream_of(device);
  const std::lock_guard<std::mutex> lock(mutex);
  Tensor& pool = (*pools)[{device.index, static_cast<void*>(stream)}];
  if (!pool.defined() || pool.numel() < groups) {
    // Stream-ordered: the old buffer's last kernels ran before anything reuses its memory.
    pool = Tensor::zeros({std::max<int64_t>(groups, 1024)}, DType::i32, device);
  }
  return static_cast<unsigned*>(pool.data_ptr());
}

}  // namespace foldcore
