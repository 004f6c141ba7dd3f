// Host-side random tensor fills from the Philox generator (used for initialisation and tests).
#pragma once

#include "core/philox.h"
#include "core/tensor.h"

namespace foldcore {

// Fills with N(mean, std^2) (Box-Muller on Philox uniforms), drawing from a fresh gen offset.
Tensor randn(const Shape& shape, Generator& gen, float mean = 0.f, float std = 1.f, DType dtype = DType::f32,
             Device device = Device::cpu());
// Fills with U[lo, hi).
Tensor rand_uniform(const Shape& shape, Generator& gen, float lo = 0.f, float hi = 1.f, DType dtype = DType::f32,
                    Device device = Device::cpu());
// Truncated normal on [-2 std, 2 std] (AlphaFold's "lecun"/"relu" initialisers rescale std).
Tensor trunc_normal(const Shape& shape, Generator& gen, float std, DType dtype = DType::f32,
                    Device device = Device::cpu());
// Integers uniform in [lo, hi).
Tensor randint(const Shape& shape, Generator& gen, int64_t lo, int64_t hi, DType dtype = DType::i64,
               Device device = Device::cpu());

}  // namespace foldcore
