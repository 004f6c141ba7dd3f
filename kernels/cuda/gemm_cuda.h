// CUDA backend of the GEMM family (kernels/gemm.h): cuBLASLt.
#pragma once

#include "core/device.h"
#include "kernels/gemm_problem.h"

namespace foldcore::ops::cuda {

void gemm(const GemmProblem& p, Device dev);
GemmPlanStats plan_stats();

}  // namespace foldcore::ops::cuda
