// CUDA implementations of kernels/elementwise.h (arguments validated by the dispatcher;
// launched on cuda_stream_of(device), never synchronising).
#pragma once

#include "core/tensor.h"
#include "kernels/dropout_mask.h"
#include "kernels/elementwise.h"

namespace foldcore::ops::cuda {

// out = alpha·a + beta·b + gamma·a·b covers add (1,1,0), mul (0,0,1) and axpby (α,β,0).
// a, out contiguous; b has a's shape with any strides (broadcast = stride 0). One dtype, or mul's
// mixed ones (b f32; a 16-bit and out f32, or a f32 and out 16-bit).
void binary(float alpha, const Tensor& a, float beta, const Tensor& b, float gamma, const Tensor& out);
// dst (f32, contiguous) += src (bf16 or f16, contiguous): add's formula on src's values read as they are.
void add_into_f32(const Tensor& dst, const Tensor& src);
void scale(const Tensor& x, float s, const Tensor& out);
void reciprocal_shift(const Tensor& x, float eps, const Tensor& out);

void relu_forward(const Tensor& x, const Tensor& y);
void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);
void gelu_forward(const Tensor& x, const Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);
void sigmoid_forward(const Tensor& x, const Tensor& y);
void sigmoid_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);
void sigmoid_gate_forward(const Tensor& g, const Tensor& x, const Tensor& out);
void masked_gate_channel_major_forward(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& out);
void masked_gate_channel_major_backward(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& dout,
                                        const Tensor& dg, const Tensor& dp);
void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dout, const Tensor& dg,
                           const Tensor& dx);

void bias_dropout_residual_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, float p,
                                   uint64_t seed, uint64_t offset, const DropoutMaskDesc& mask,
                                   const Tensor& out);
// dx only; the dispatcher adds Σ_rows dx into dbias.
void dropout_backward(const Tensor& dout, float p, uint64_t seed, uint64_t offset, const DropoutMaskDesc& mask,
                      const Tensor& dx);

}  // namespace foldcore::ops::cuda
