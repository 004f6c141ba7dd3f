// Small helpers shared by the AlphaFold module implementations (embedders, template stack,
// heads): shapes for error messages, parameter-path joining and host copies of feature tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "core/tensor.h"

namespace foldcore::af2 {

// The shape as text for error messages, or "undefined".
inline std::string shape_of(const Tensor& t) { return t.defined() ? t.shape().str() : std::string("undefined"); }
inline std::string shape_of(const autograd::Variable& v) {
  return v.defined() ? v.shape().str() : std::string("undefined");
}

// "<prefix>/<name>", or just name at the root.
inline std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}

// Host copies of a (feature) tensor on any device, converted to i64 / f32.
inline std::vector<int64_t> host_ints(const Tensor& t) { return t.to(Device::cpu()).to(DType::i64).to_vector_i64(); }
inline std::vector<float> host_floats(const Tensor& t) { return t.to(Device::cpu()).to(DType::f32).to_vector(); }

}  // namespace foldcore::af2
