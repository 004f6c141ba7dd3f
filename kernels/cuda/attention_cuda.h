// CUDA implementations of kernels/attention.h (inputs already validated by the dispatcher).
#pragma once

#include "kernels/attention.h"

namespace foldcore::ops::cuda {

void attention_forward(const AttentionInputs& in, const Tensor& o, const Tensor& lse, const Tensor& a);
void attention_backward(const AttentionInputs& in, const Tensor& a_or_o, const Tensor& lse, const Tensor& d_o,
                        const AttentionGrads& grads);
void global_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                              const Tensor& g, float scale, const Tensor& o, const Tensor& a);
void global_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                               const Tensor& g, float scale, const Tensor& a, const Tensor& d_o, const Tensor& dq,
                               const Tensor& dk, const Tensor& dv, const Tensor& dg);
void attention_combine(const Tensor& a, const Tensor& lse, const Tensor& a_part, const Tensor& lse_part);

}  // namespace foldcore::ops::cuda
