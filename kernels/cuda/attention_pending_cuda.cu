// Temporary: the CUDA attention kernels land in the next commits; until then CUDA tensors give a
// clear Error instead of a link failure.
#include "core/error.h"
#include "kernels/cuda/attention_cuda.h"

namespace foldcore::ops::cuda {
void attention_forward(const AttentionInputs&, const Tensor&, const Tensor&, const Tensor&) {
  FC_THROW("attention_forward: CUDA kernel not implemented yet in this build");
}
void attention_backward(const AttentionInputs&, const Tensor&, const Tensor&, const Tensor&, const AttentionGrads&) {
  FC_THROW("attention_backward: CUDA kernel not implemented yet in this build");
}
void global_attention_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float,
                              const Tensor&, const Tensor&) {
  FC_THROW("global_attention_forward: CUDA kernel not implemented yet in this build");
}
void global_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float,
                               const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor&) {
  FC_THROW("global_attention_backward: CUDA kernel not implemented yet in this build");
}
}  // namespace foldcore::ops::cuda
