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
// On the host emulation the product is formed once per warp from all lanes' fragments (one warp
// rendezvous, like a shuffle) and summed in fp32 in k order; the hardware
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

#if defined(FOLDCORE_CUDA_EMULATE)
namespace detail {
struct MmaLaneArgs {
  const MmaFragA* a;
  const MmaFragB* b;
  const MmaFragC* c;
  MmaFragC* d;
};
// Runs once per warp when all 32 lanes have arrived: gathers every lane's fragments and writes
// every lane's result (each lane's c is read before its d is written, so d may alias c).
inline void mma_m16n8k16_all_lanes(void* const* lane_args) {
  float av[16][16], bv[16][8];
  for (int src = 0; src < 32; ++src) {
    const auto* la = static_cast<const MmaLaneArgs*>(lane_args[src]);
    if (!la) ::fc_emu::device_fail("mma.sync: every lane of the warp must take part");
    for (int i = 0; i < 8; ++i)
      av[mma_a_row(src, i)][mma_a_col(src, i)] = mma_bf16_bits_to_f32((la->a->r[i / 2] >> (16 * (i % 2))) & 0xffffu);
    for (int i = 0; i < 4; ++i)
      bv[mma_b_row(src, i)][mma_b_col(src, i)] = mma_bf16_bits_to_f32((la->b->r[i / 2] >> (16 * (i % 2))) & 0xffffu);
  }
  for (int lane = 0; lane < 32; ++lane) {
    const auto* la = static_cast<const MmaLaneArgs*>(lane_args[lane]);
    MmaFragC out;
    for (int i = 0; i < 4; ++i) {
      const int row = mma_c_row(lane, i), col = mma_c_col(lane, i);
      float s = la->c->r[i];
      for (int k = 0; k < 16; ++k) s += av[row][k] * bv[k][col];
      out.r[i] = s;
    }
    *la->d = out;
  }
}
}  // namespace detail
#endif

__device__ __forceinline__ void mma_m16n8k16_bf16(MmaFragC& d, const MmaFragA& a, const MmaFragB& b,
                                                  const MmaFragC& c) {
#if defined(FOLDCORE_CUDA_EMULATE)
  detail::MmaLaneArgs args{&a, &b, &c, &d};
  ::fc_emu::warp_collective(::fc_emu::WarpOp::mma_sync, 0xffffffffu, &detail::mma_m16n8k16_all_lanes, &args);
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
