// Argument checks and backend dispatch shared by the pointwise families (elementwise, reduce,
// embedding). Internal to kernels/; every failure names the op and the tensors involved.
#pragma once

#include <string_view>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

namespace foldcore::ops::detail {

inline void check_defined(std::string_view op, std::string_view name, const Tensor& t) {
  FC_CHECK(t.defined(), op, ": ", name, " is undefined");
}

inline void check_float(std::string_view op, std::string_view name, const Tensor& t) {
  check_defined(op, name, t);
  FC_CHECK(is_floating(t.dtype()), op, ": ", name, " must be f32/bf16/f16, got ", t.str());
}

inline void check_contiguous(std::string_view op, std::string_view name, const Tensor& t) {
  FC_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous, got ", t.str(), " strides ",
           t.strides().str());
}

inline void check_index(std::string_view op, std::string_view name, const Tensor& t) {
  check_defined(op, name, t);
  FC_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64, op, ": ", name, " must be i32 or i64, got ",
           t.str());
  check_contiguous(op, name, t);
}

// `b` must match `a` in shape, dtype and device.
inline void check_like(std::string_view op, std::string_view a_name, const Tensor& a, std::string_view b_name,
                       const Tensor& b) {
  check_defined(op, b_name, b);
  FC_CHECK(a.shape() == b.shape(), op, ": ", b_name, " ", b.str(), " must have the shape of ", a_name, " ",
           a.str());
  FC_CHECK(a.dtype() == b.dtype(), op, ": ", b_name, " ", b.str(), " must have the dtype of ", a_name, " ",
           a.str());
  FC_CHECK(a.device() == b.device(), op, ": ", b_name, " ", b.str(), " is on another device than ", a_name,
           " ", a.str());
}

inline void check_same_device(std::string_view op, std::string_view a_name, const Tensor& a,
                              std::string_view b_name, const Tensor& b) {
  FC_CHECK(a.device() == b.device(), op, ": ", a_name, " ", a.str(), " and ", b_name, " ", b.str(),
           " are on different devices");
}

// Three float tensors of one shape, dtype and device, each contiguous (an elementwise backward's
// saved input, dy and dx).
inline void check_grad3(std::string_view op, std::string_view n0, const Tensor& t0, std::string_view n1,
                        const Tensor& t1, std::string_view n2, const Tensor& t2) {
  check_float(op, n0, t0);
  check_contiguous(op, n0, t0);
  check_like(op, n0, t0, n1, t1);
  check_contiguous(op, n1, t1);
  check_like(op, n0, t0, n2, t2);
  check_contiguous(op, n2, t2);
}

// A bias gradient summed over the rows of x [..., C]: contiguous f32 [C] on x's device.
inline void check_bias_grad(std::string_view op, std::string_view name, const Tensor& g, std::string_view x_name,
                            const Tensor& x) {
  check_defined(op, name, g);
  FC_CHECK(x.dim() >= 1, op, ": ", x_name, " must have at least one dim, got ", x.str());
  FC_CHECK(g.dim() == 1 && g.size(0) == x.size(-1) && g.dtype() == DType::f32 && g.is_contiguous(), op, ": ", name,
           " ", g.str(), " must be contiguous f32 [", x.size(-1), "] for ", x_name, " ", x.str());
  check_same_device(op, x_name, x, name, g);
}

}  // namespace foldcore::ops::detail

// FC_POINTWISE_DISPATCH(device, fn(args...)): calls cuda::fn(args...) for a CUDA device (after
// making it current) and cpu::fn(args...) otherwise; a CUDA tensor in a CPU-only build is an Error.
#ifdef FOLDCORE_HAVE_CUDA
#define FC_POINTWISE_DISPATCH(dev, call) \
  do {                                   \
    if ((dev).is_cuda()) {               \
      ::foldcore::set_device(dev);       \
      cuda::call;                        \
    } else {                             \
      cpu::call;                         \
    }                                    \
  } while (0)
#else
#define FC_POINTWISE_DISPATCH(dev, call)                                                           \
  do {                                                                                             \
    if ((dev).is_cuda()) FC_THROW("this build has no CUDA backend; cannot run on ", (dev).str()); \
    cpu::call;                                                                                     \
  } while (0)
#endif
