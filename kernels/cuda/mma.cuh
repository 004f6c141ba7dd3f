// One warp's tensor-core tile product, D[16×8] = A[16×16]·B[16×8] + C with bf16 operands and fp32
// accumulation: PTX mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80 and later), for
// kernels that keep their tiles in registers (FlashAttention-style). Every lane of the warp calls
// it with its fragments; lane = 4g + t (g = lane / 4, t = lane % 4). Fragment layout (PTX ISA,
// "Matrix Fragments for mma.m16n8k16"), two bf16 per 32-bit register, the lower index in the low
// half:
//   A: a[i], i = 0..7:  row = g + 8·((i / 2) % 2),  col = 2t + i % 2 + 8·(i / 4)
//   B: b[i], i = 0..3:  row = 2t + i % 2 + 8·(i / 2),  col = g
//   C, D: c[i], i = 0..3:  row = g + 8·(i / 2),  col = 2t + i % 2
// mma_a_row/… give those coordinates, so loads and stores are written once for both backends.
// On the host emulation the product is formed from the fragments gathered over the warp with
// shuffles (every lane reads all 32 lanes' registers) and summed in fp32 in k order; the hardware
// sums the 16 products with its own internal order and width, so results agree to fp32
// rounding, not bit for bit (kernels/warp_mma.h).
#pragma once

#include <cstdint>

#include "core/cuda/cuda_utils.cuh"

namespace foldcore::ops::cuda {

struct MmaFragA {
  uint32_t r[4];
};
struct MmaFragB {
  uint32_t r[2];
};
struct MmaFragC {
  float r[4];
};

__host__ __device__ inline int mma_a_row(int lane, int i) { return lane / 4 + 8 * ((i / 2) % 2); }
__host__ __device__ inline int mma_a_col(int lane, int i) { return 2 * (lane % 4) + i % 2 + 8 * (i / 4); }
__host__ __device__ inline int mma_b_row(int lane, int i) { return 2 * (lane % 4) + i % 2 + 8 * (i / 2); }
__host__ __device__ inline int mma_b_col(int lane, int /*i*/) { return lane / 4; }
__host__ __device__ inline int mma_c_row(int lane, int i) { return lane / 4 + 8 * (i / 2); }
__host__ __device__ inline int mma_c_col(int lane, int i) { return 2 * (lane % 4) + i % 2; }

// Two bf16 bit patterns into one register (lo: the element of lower index).
__device__ __forceinline__ uint32_t mma_pack(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}
__device__ __forceinline__ float mma_bf16_bits_to_f32(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

__device__ __forceinline__ void mma_m16n8k16_bf16(MmaFragC& d, const MmaFragA& a, const MmaFragB& b,
                                                  const MmaFragC& c) {
#if defined(FOLDCORE_CUDA_EMULATE)
  const int lane = static_cast<int>(threadIdx.x % 32);
  float av[16][16], bv[16][8];
  for (int src = 0; src < 32; ++src) {
    for (int q = 0; q < 4; ++q) {
      const uint32_t v = __shfl_sync(0xffffffffu, a.r[q], src);
      for (int h = 0; h < 2; ++h) {
        const int i = 2 * q + h;
        av[mma_a_row(src, i)][mma_a_col(src, i)] = mma_bf16_bits_to_f32((v >> (16 * h)) & 0xffffu);
      }
    }
    for (int q = 0; q < 2; ++q) {
      const uint32_t v = __shfl_sync(0xffffffffu, b.r[q], src);
      for (int h = 0; h < 2; ++h) {
        const int i = 2 * q + h;
        bv[mma_b_row(src, i)][mma_b_col(src, i)] = mma_bf16_bits_to_f32((v >> (16 * h)) & 0xffffu);
      }
    }
  }
  for (int i = 0; i < 4; ++i) {
    const int row = mma_c_row(lane, i), col = mma_c_col(lane, i);
    float s = c.r[i];
    for (int k = 0; k < 16; ++k) s += av[row][k] * bv[k][col];
    d.r[i] = s;
  }
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d.r[0]), "=f"(d.r[1]), "=f"(d.r[2]), "=f"(d.r[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]), "f"(c.r[0]), "f"(c.r[1]),
        "f"(c.r[2]), "f"(c.r[3]));
#endif
}

}  // namespace foldcore::ops::cuda
