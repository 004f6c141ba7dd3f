// CUDA backend of the GEMM family (kernels/gemm.h): cuBLASLt, and gemm_sum_nt's mma.sync kernel.
#pragma once

#include "core/device.h"
#include "kernels/gemm_problem.h"

namespace foldcore::ops::cuda {

void gemm(const GemmProblem& p, Device dev);
GemmPlanStats plan_stats();
// ops::gemm_sum_nt's one-kernel form (kernels/cuda/gemm_sum_cuda.cu); the dispatcher has checked its
// conditions (bf16; pairs 16-byte aligned with K_i % 8 == 0, or K_i <= 32; N even; out aligned to two
// elements; 2 to 8 pairs).
void gemm_sum_nt(const GemmSumProblem& p, Device dev);

}  // namespace foldcore::ops::cuda
