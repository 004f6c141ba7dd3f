#include "kernels/cpu/warp_mma_cpu.h"

namespace foldcore::ops::cpu {

void warp_mma_m16n8k16(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d) {
  const Tensor af = a.to(DType::f32), bf = b.to(DType::f32);
  const float* av = af.data<float>();
  const float* bv = bf.data<float>();
  const float* cv = c.data<float>();
  float* dv = d.data<float>();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float s = cv[i * 8 + j];
      for (int k = 0; k < 16; ++k) s += av[i * 16 + k] * bv[k * 8 + j];
      dv[i * 8 + j] = s;
    }
}

}  // namespace foldcore::ops::cpu
