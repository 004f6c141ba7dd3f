// The CUDA host emulation's own checks (built only with -DFOLDCORE_CUDA=EMULATE, label gpu-emu):
// the execution model (indices, shared memory, barriers, warp operations, atomics, WMMA) against
// naive host math, and the errors it must raise — a barrier or warp operation not reached by
// every thread, a read of shared memory before any write, out-of-bounds accesses.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "core/tensor.h"

namespace foldcore {
namespace {

template <typename T> struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count, T init = T{}) : n(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)), cudaSuccess);
    for (size_t i = 0; i < n; ++i) p[i] = init;  // device memory is host memory here
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> host() const { return std::vector<T>(p, p + n); }
};

// Launch outcome: the error code and the emulator's message.
struct Outcome {
  cudaError_t err;
  std::string message;
};
Outcome last() {
  const cudaError_t e = cudaGetLastError();
  return {e, e == cudaSuccess ? "" : cudaGetErrorString(e)};
}

// ---------------------------------------------------------------- indices
__global__ void index_kernel(int* out) {
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  out[bid * per_block + tid] += static_cast<int>(bid * 1000 + tid);
}

TEST(CudaEmulator, EveryThreadRunsOnceWithItsIndices) {
  const dim3 grid(3, 2, 2), block(5, 4, 3);
  const size_t n = 12 * 60;
  DeviceBuffer<int> out(n, 0);
  launch_kernel<index_kernel>(grid, block, 0, nullptr, out.p);
  ASSERT_EQ(last().err, cudaSuccess);
  const auto h = out.host();
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(h[i], static_cast<int>((i / 60) * 1000 + i % 60)) << i;
}

// ---------------------------------------------------------------- shared memory and barriers
constexpr int kN = 128;

template <bool kSync> __global__ void reverse_kernel(const float* in, float* out) {
  FC_SHARED(float, tile, [kN]);
  const int i = threadIdx.x;
  tile[i] = in[blockIdx.x * kN + i];
  if (kSync) __syncthreads();
  out[blockIdx.x * kN + i] = tile[kN - 1 - i];
}

TEST(CudaEmulator, SharedMemoryWithBarrierIsCorrect) {
  DeviceBuffer<float> in(2 * kN), out(2 * kN, -1.f);
  for (int i = 0; i < 2 * kN; ++i) in.p[i] = static_cast<float>(i);
  launch_kernel<reverse_kernel<true>>(2, kN, 0, nullptr, in.p, out.p);
  ASSERT_EQ(last().err, cudaSuccess);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < kN; ++i) EXPECT_EQ(out.p[b * kN + i], static_cast<float>(b * kN + kN - 1 - i));
}

// Without the barrier some threads read their partner's slot before it is written: the varying
// thread order makes that visible as the NaN pattern instead of hiding it.
TEST(CudaEmulator, MissingBarrierChangesTheResult) {
  DeviceBuffer<float> in(2 * kN), out(2 * kN, -1.f);
  for (int i = 0; i < 2 * kN; ++i) in.p[i] = static_cast<float>(i);
  launch_kernel<reverse_kernel<false>>(2, kN, 0, nullptr, in.p, out.p);
  ASSERT_EQ(last().err, cudaSuccess);
  int nan = 0;
  for (int i = 0; i < 2 * kN; ++i) nan += std::isnan(out.p[i]);
  EXPECT_GT(nan, 0);
  EXPECT_LT(nan, 2 * kN);
}

__global__ void uninitialised_shared_kernel(float* out) {
  FC_SHARED(float, s, [32]);
  out[threadIdx.x] = s[threadIdx.x];
}

TEST(CudaEmulator, SharedMemoryStartsAsNaN) {
  DeviceBuffer<float> out(32, 0.f);
  launch_kernel<uninitialised_shared_kernel>(1, 32, 0, nullptr, out.p);
  ASSERT_EQ(last().err, cudaSuccess);
  for (float v : out.host()) EXPECT_TRUE(std::isnan(v));
}

__global__ void dynamic_shared_kernel(float* out, int n) {
  FC_DYNAMIC_SHARED(float, s, 16);
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = static_cast<float>(i);
  __syncthreads();
  float sum = 0.f;
  for (int i = 0; i < n; ++i) sum += s[i];
  out[threadIdx.x] = sum;
}

TEST(CudaEmulator, DynamicSharedMemoryAndItsLimit) {
  DeviceBuffer<float> out(64, 0.f);
  const int n = 1000;
  launch_kernel<dynamic_shared_kernel>(1, 64, n * sizeof(float), nullptr, out.p, n);
  ASSERT_EQ(last().err, cudaSuccess);
  for (float v : out.host()) EXPECT_EQ(v, n * (n - 1) / 2.f);
  // 64 KiB is over the 48 KiB default until the kernel opts in, as on the device.
  const int big = 16384;
  launch_kernel<dynamic_shared_kernel>(1, 64, big * sizeof(float), nullptr, out.p, big);
  const Outcome o = last();
  EXPECT_EQ(o.err, cudaErrorInvalidValue);
  EXPECT_NE(o.message.find("dynamic_shared_kernel"), std::string::npos) << o.message;
  ASSERT_EQ(cudaFuncSetAttribute(&dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(big * sizeof(float))),
            cudaSuccess);
  launch_kernel<dynamic_shared_kernel>(1, 64, big * sizeof(float), nullptr, out.p, big);
  EXPECT_EQ(last().err, cudaSuccess);
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 40) __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaEmulator, BarrierNotReachedByEveryThreadIsAnError) {
  DeviceBuffer<int> out(64, 0);
  launch_kernel<divergent_barrier_kernel>(1, 64, 0, nullptr, out.p);
  const Outcome o = last();
  EXPECT_EQ(o.err, cudaErrorLaunchFailure);
  EXPECT_NE(o.message.find("__syncthreads not reached"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("divergent_barrier_kernel"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("thread ("), std::string::npos) << o.message;
  // The emulator recovers: the next launch runs normally.
  launch_kernel<index_kernel>(1, 1, 0, nullptr, out.p);
  EXPECT_EQ(last().err, cudaSuccess);
}

// ---------------------------------------------------------------- warp operations
__global__ void shuffle_kernel(int* out) {
  const int lane = threadIdx.x % 32;
  int sum = lane;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const int down = __shfl_down_sync(0xffffffffu, lane * 10, 3, 16);
  const int up = __shfl_up_sync(0xffffffffu, lane * 10, 2);
  const int idx = __shfl_sync(0xffffffffu, lane * 10, 37);  // 37 mod 32 = lane 5
  const unsigned ballot = __ballot_sync(0xffffffffu, lane % 3 == 0);
  const int any = __any_sync(0xffffffffu, lane == 31), all = __all_sync(0xffffffffu, lane < 31);
  int* o = out + threadIdx.x * 7;
  o[0] = sum;
  o[1] = down;
  o[2] = up;
  o[3] = idx;
  o[4] = static_cast<int>(ballot);
  o[5] = any;
  o[6] = all;
}

TEST(CudaEmulator, ShufflesAndVotesFollowCuda) {
  DeviceBuffer<int> out(64 * 7, 0);
  launch_kernel<shuffle_kernel>(1, 64, 0, nullptr, out.p);
  ASSERT_EQ(last().err, cudaSuccess);
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l) ballot |= (l % 3 == 0 ? 1u : 0u) << l;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    const int* o = out.p + t * 7;
    EXPECT_EQ(o[0], 31 * 32 / 2);
    EXPECT_EQ(o[1], (lane % 16 + 3 < 16 ? lane + 3 : lane) * 10);  // width 16: no crossing
    EXPECT_EQ(o[2], (lane >= 2 ? lane - 2 : lane) * 10);
    EXPECT_EQ(o[3], 50);
    EXPECT_EQ(static_cast<unsigned>(o[4]), ballot);
    EXPECT_EQ(o[5], 1);
    EXPECT_EQ(o[6], 0);
  }
}

__global__ void early_exit_shuffle_kernel(float* out) {
  if (threadIdx.x == 7) return;
  float v = 1.f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

TEST(CudaEmulator, WarpOperationWithAnExitedLaneIsAnError) {
  DeviceBuffer<float> out(32, 0.f);
  launch_kernel<early_exit_shuffle_kernel>(1, 32, 0, nullptr, out.p);
  const Outcome o = last();
  EXPECT_EQ(o.err, cudaErrorLaunchFailure);
  EXPECT_NE(o.message.find("__shfl_xor_sync not reached by every lane"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("lane 7 has exited"), std::string::npos) << o.message;
}

__global__ void partial_warp_kernel(float* out) {
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.f, 1);
}

TEST(CudaEmulator, FullMaskInAPartialWarpIsAnError) {
  DeviceBuffer<float> out(48, 0.f);
  launch_kernel<partial_warp_kernel>(1, 48, 0, nullptr, out.p);
  const Outcome o = last();
  EXPECT_EQ(o.err, cudaErrorLaunchFailure);
  EXPECT_NE(o.message.find("does not have"), std::string::npos) << o.message;
}

// ---------------------------------------------------------------- atomics
__global__ void histogram_kernel(const int* keys, int n, unsigned* bins) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) atomicAdd(&bins[keys[i]], 1u);
}

TEST(CudaEmulator, AtomicsAcrossBlocks) {
  const int n = 5000;
  DeviceBuffer<int> keys(n);
  DeviceBuffer<unsigned> bins(7, 0u);
  std::vector<unsigned> want(7, 0);
  for (int i = 0; i < n; ++i) {
    keys.p[i] = (i * 31) % 7;
    ++want[keys.p[i]];
  }
  launch_kernel<histogram_kernel>(9, 96, 0, nullptr, keys.p, n, bins.p);
  ASSERT_EQ(last().err, cudaSuccess);
  EXPECT_EQ(bins.host(), want);
}

// ---------------------------------------------------------------- WMMA
__global__ void wmma_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c) {
  namespace wmma = nvcuda::wmma;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  for (int e = 0; e < fc.num_elements; ++e) fc.x[e] *= 2.f;  // elementwise: any mapping
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

TEST(CudaEmulator, WmmaMatchesNaiveProduct) {
  DeviceBuffer<__nv_bfloat16> a(256), b(256);
  DeviceBuffer<float> c(256);
  for (int i = 0; i < 256; ++i) {
    a.p[i] = __nv_bfloat16(static_cast<float>((i * 7) % 13) / 8.f - 0.5f);
    b.p[i] = __nv_bfloat16(static_cast<float>((i * 5) % 11) / 4.f - 1.f);
    c.p[i] = static_cast<float>(i % 5);
  }
  std::vector<float> want(256);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      double acc = c.p[m * 16 + n];
      for (int k = 0; k < 16; ++k) acc += static_cast<float>(a.p[m * 16 + k]) * static_cast<float>(b.p[n * 16 + k]);
      want[m * 16 + n] = static_cast<float>(2 * acc);
    }
  launch_kernel<wmma_kernel>(1, 32, 0, nullptr, a.p, b.p, c.p);
  ASSERT_EQ(last().err, cudaSuccess);
  for (int i = 0; i < 256; ++i) EXPECT_NEAR(c.p[i], want[i], 1e-4) << i;
  // A pointer that is not 256-bit aligned is refused, as the hardware requires.
  launch_kernel<wmma_kernel>(1, 32, 0, nullptr, a.p + 8, b.p, c.p);
  const Outcome o = last();
  EXPECT_EQ(o.err, cudaErrorLaunchFailure);
  EXPECT_NE(o.message.find("256-bit aligned"), std::string::npos) << o.message;
}

// ---------------------------------------------------------------- launch configuration
TEST(CudaEmulator, InvalidLaunchConfigurationIsAnError) {
  DeviceBuffer<int> out(1, 0);
  launch_kernel<index_kernel>(1, 2048, 0, nullptr, out.p);
  const Outcome o = last();
  EXPECT_EQ(o.err, cudaErrorInvalidConfiguration);
  EXPECT_NE(o.message.find("index_kernel"), std::string::npos) << o.message;
}

// ---------------------------------------------------------------- out of bounds (AddressSanitizer)
#if defined(__SANITIZE_ADDRESS__)
__global__ void write_at_kernel(float* p, int i) { p[i] = 1.f; }

TEST(CudaEmulatorDeathTest, WriteOutsideATensorFaults) {
  // 10 floats from the caching allocator live in a larger block: the tail is poisoned.
  Tensor t = Tensor::zeros({10}, DType::f32, Device::cuda(0));
  launch_kernel<write_at_kernel>(1, 1, 0, nullptr, t.data<float>(), 9);
  EXPECT_EQ(last().err, cudaSuccess);
  EXPECT_DEATH(launch_kernel<write_at_kernel>(1, 1, 0, nullptr, t.data<float>(), 10), "AddressSanitizer");
}

__global__ void shared_overrun_kernel(int n) {
  FC_DYNAMIC_SHARED(float, s, 16);
  s[n] = 1.f;
}

TEST(CudaEmulatorDeathTest, DynamicSharedOverrunFaults) {
  EXPECT_DEATH(launch_kernel<shared_overrun_kernel>(1, 1, 64 * sizeof(float), nullptr, 64), "AddressSanitizer");
}
#endif

}  // namespace
}  // namespace foldcore
