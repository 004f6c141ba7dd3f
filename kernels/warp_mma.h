// One warp-level tensor-core tile product as an op, so that the fragment layout the register-tiled
// CUDA kernels rely on (kernels/cuda/mma.cuh: mma.m16n8k16, bf16 operands, fp32 accumulate) is
// checked against the CPU on every backend, the host emulation included:
//   d[16, 8] = a[16, 16] · b[16, 8] + c[16, 8]
// a, b bf16; c, d f32; all contiguous, on one device. CPU: the products in fp32 (exact for bf16
// operands) summed in k order after c. CUDA: one warp loads its fragments through the layout
// functions of mma.cuh, runs the instruction and stores D the same way; the tensor core's own
// summation order and width differ from the CPU's, so the results agree within fp32 rounding of
// the sum (tests/kernels/test_warp_mma_cuda.cpp).
#pragma once

#include "core/tensor.h"

namespace foldcore::ops {

void warp_mma_m16n8k16(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d);

}  // namespace foldcore::ops
