// CUDA fused optimizer kernels (kernels/optim.h). Inputs validated by the dispatcher: f32,
// contiguous, 1-D, same length, on one CUDA device; the table is on that device.
#pragma once

#include "kernels/optim.h"

namespace foldcore::ops::cuda {

void adam_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const AdamArgs& a,
               const SegmentTable& segments);
void lamb_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const LambArgs& a,
               const SegmentTable& segments);
double global_grad_norm(const Tensor& grads);
void ema_update(const Tensor& ema, const Tensor& params, float decay);

}  // namespace foldcore::ops::cuda
