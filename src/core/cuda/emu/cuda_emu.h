// CUDA host emulation: the one header of stand-ins for the CUDA toolkit.
//
// With -DFOLDCORE_CUDA=EMULATE the project's .cu files are compiled as ordinary C++ with this
// header in place of the toolkit's (the headers in emu/include/ — cuda_runtime.h, mma.h, cublasLt.h,
// cub/cub.cuh, … — each include only this file). Kernels run on the CPU under CUDA's execution
// model (emu/scheduler.cpp): every thread of a block is a fiber; blocks run one after another;
// inside a block the fibers run in a seeded order that changes at every barrier, so a missing
// __syncthreads changes the result instead of hiding. Barriers and warp operations are
// rendezvous points the scheduler checks: one not reached by every thread it names is an error
// naming the kernel and the thread. Shared memory is filled with 0xFF bytes (NaN in every float
// format) for each block, so a read before write shows.
//
// What it does not model: the memory model and races between threads that the barrier order
// hides, timing, and tensor-core numerics beyond "exact products, fp32 accumulation in k order".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/half.h"

#ifndef FOLDCORE_CUDA_EMULATE
#define FOLDCORE_CUDA_EMULATE 1
#endif

// ------------------------------------------------------------------ qualifiers
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __constant__ static
// Static shared memory is declared with FC_SHARED (core/cuda/cuda_utils.cuh), which refills it
// with the NaN pattern at the start of every block; a bare __shared__ would skip that, so it does
// not compile here.
#define __shared__ static_assert(false, "declare shared memory with FC_SHARED / FC_DYNAMIC_SHARED (core/cuda/cuda_utils.cuh)");
#define CUDART_INF_F INFINITY

using std::isinf;
using std::isnan;

// ------------------------------------------------------------------ vector index types
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

namespace fc_emu {
// The built-in variables of the emulated thread that is running now.
struct Builtins {
  uint3 thread_idx{0, 0, 0};
  uint3 block_idx{0, 0, 0};
  dim3 block_dim, grid_dim;
};
extern thread_local Builtins* tls_builtins;
}  // namespace fc_emu

#define threadIdx (::fc_emu::tls_builtins->thread_idx)
#define blockIdx (::fc_emu::tls_builtins->block_idx)
#define blockDim (::fc_emu::tls_builtins->block_dim)
#define gridDim (::fc_emu::tls_builtins->grid_dim)
constexpr int warpSize = 32;

// ------------------------------------------------------------------ 16-bit float device types
struct __nv_bfloat16 {
  uint16_t __x = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(foldcore::bf16::from_float(f)) {}
  __nv_bfloat16(double f) : __nv_bfloat16(static_cast<float>(f)) {}
  __nv_bfloat16(int v) : __nv_bfloat16(static_cast<float>(v)) {}
  operator float() const { return foldcore::bf16::to_float(__x); }
};
struct __half {
  uint16_t __x = 0;
  __half() = default;
  __half(float f) : __x(foldcore::f16::from_float(f)) {}
  __half(double f) : __half(static_cast<float>(f)) {}
  __half(int v) : __half(static_cast<float>(v)) {}
  operator float() const { return foldcore::f16::to_float(__x); }
};
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return static_cast<float>(h); }
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }

// ------------------------------------------------------------------ fast-math intrinsics
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.f / x; }
// Rounded arithmetic without contraction (the host compiles ISO C++: no FMA formed either way).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
// CUDA's global min/max overloads for device code.
template <typename A, typename B> std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <typename A, typename B> std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }

// ------------------------------------------------------------------ barriers and warp operations
namespace fc_emu {
enum class WarpOp : uint8_t { sync, shfl, shfl_xor, shfl_up, shfl_down, ballot, any, all, wmma_load, wmma_store, wmma_mma, mma_sync };
const char* warp_op_name(WarpOp op);
// Block barrier: returns when every thread of the block has reached it.
void syncthreads();
// Warp rendezvous of the lanes in `mask`: every named lane must reach a warp operation of the
// same kind and mask. Returns this lane's result: for shuffles the value of the source lane (or
// the own value where CUDA keeps it), for votes the ballot/any/all result.
uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width);
// Warp-collective operation: when all lanes of `mask` have arrived, fn(lane_args) runs once with
// each participating lane's `arg` (nullptr for lanes outside the mask).
void warp_collective(WarpOp op, unsigned mask, void (*fn)(void* const* lane_args), void* arg);
// Static shared variable `p` of `bytes`: filled with the NaN pattern when the first thread of a
// block reaches its declaration (every thread passes it before using the variable).
void fresh_shared(void* p, size_t bytes);
// Stops the running kernel with an error naming the kernel, block and thread.
[[noreturn]] void device_fail(const char* what);
int lane_id();

template <typename T> uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp operations move values of up to 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T> T from_bits(uint64_t b) {
  T v;
  std::memcpy(static_cast<void*>(&v), &b, sizeof(T));
  return v;
}
}  // namespace fc_emu

inline void __syncthreads() { ::fc_emu::syncthreads(); }
// Blocks run one after another on the host: their writes are visible to every later block.
inline void __threadfence() {}
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::fc_emu::warp_exchange(::fc_emu::WarpOp::sync, mask, 0, 0, 32); }
template <typename T> T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return fc_emu::from_bits<T>(fc_emu::warp_exchange(fc_emu::WarpOp::shfl, mask, fc_emu::to_bits(v), src, width));
}
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return fc_emu::from_bits<T>(fc_emu::warp_exchange(fc_emu::WarpOp::shfl_xor, mask, fc_emu::to_bits(v), lane_mask, width));
}
template <typename T> T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return fc_emu::from_bits<T>(
      fc_emu::warp_exchange(fc_emu::WarpOp::shfl_up, mask, fc_emu::to_bits(v), static_cast<int>(delta), width));
}
template <typename T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return fc_emu::from_bits<T>(
      fc_emu::warp_exchange(fc_emu::WarpOp::shfl_down, mask, fc_emu::to_bits(v), static_cast<int>(delta), width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return static_cast<unsigned>(fc_emu::warp_exchange(fc_emu::WarpOp::ballot, mask, pred != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int pred) {
  return static_cast<int>(fc_emu::warp_exchange(fc_emu::WarpOp::any, mask, pred != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int pred) {
  return static_cast<int>(fc_emu::warp_exchange(fc_emu::WarpOp::all, mask, pred != 0, 0, 32));
}

// ------------------------------------------------------------------ atomics
// Blocks run one at a time and the threads of a block are fibers of one OS thread, so a plain
// read-modify-write is atomic here.
template <typename T> T atomicAdd(T* a, T v) { return std::exchange(*a, static_cast<T>(*a + v)); }
template <typename T> T atomicSub(T* a, T v) { return std::exchange(*a, static_cast<T>(*a - v)); }
template <typename T> T atomicMax(T* a, T v) { return std::exchange(*a, *a < v ? v : *a); }
template <typename T> T atomicMin(T* a, T v) { return std::exchange(*a, v < *a ? v : *a); }
template <typename T> T atomicExch(T* a, T v) { return std::exchange(*a, v); }
template <typename T> T atomicCAS(T* a, T compare, T v) { return std::exchange(*a, *a == compare ? v : *a); }

#include "core/cuda/emu/emu_wmma.h"
#include "core/cuda/emu/emu_runtime.h"
