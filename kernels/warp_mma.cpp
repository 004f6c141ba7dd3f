// Validation and backend dispatch for kernels/warp_mma.h.
#include "kernels/warp_mma.h"

#include "kernels/cpu/warp_mma_cpu.h"
#include "kernels/cuda/warp_mma_cuda.h"
#include "kernels/pointwise_checks.h"

namespace foldcore::ops {

void warp_mma_m16n8k16(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d) {
  constexpr std::string_view op = "warp_mma_m16n8k16";
  auto check = [&](std::string_view name, const Tensor& t, DType dt, const Shape& shape) {
    detail::check_defined(op, name, t);
    detail::check_contiguous(op, name, t);
    FC_CHECK(t.dtype() == dt && t.shape() == shape, op, ": ", name, " ", t.str(), " must be ", dtype_name(dt), " ",
             shape.str());
    detail::check_same_device(op, "a", a, name, t);
  };
  check("a", a, DType::bf16, {16, 16});
  check("b", b, DType::bf16, {16, 8});
  check("c", c, DType::f32, {16, 8});
  check("d", d, DType::f32, {16, 8});
  FC_POINTWISE_DISPATCH(d.device(), warp_mma_m16n8k16(a, b, c, d));
}

}  // namespace foldcore::ops
