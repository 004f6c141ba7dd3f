// kernels/warp_mma.h on CUDA: one warp, fragments loaded and stored through mma.cuh's layout.
#include "kernels/cuda/warp_mma_cuda.h"

#include "core/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"

namespace foldcore::ops::cuda {
namespace {

__global__ void warp_mma_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d) {
  const int lane = static_cast<int>(threadIdx.x);
  MmaFragA fa;
  MmaFragB fb;
  MmaFragC fc, fd;
  for (int q = 0; q < 4; ++q)
    fa.r[q] = mma_pack(a[mma_a_row(lane, 2 * q) * 16 + mma_a_col(lane, 2 * q)],
                       a[mma_a_row(lane, 2 * q + 1) * 16 + mma_a_col(lane, 2 * q + 1)]);
  for (int q = 0; q < 2; ++q)
    fb.r[q] = mma_pack(b[mma_b_row(lane, 2 * q) * 8 + mma_b_col(lane, 2 * q)],
                       b[mma_b_row(lane, 2 * q + 1) * 8 + mma_b_col(lane, 2 * q + 1)]);
  for (int i = 0; i < 4; ++i) fc.r[i] = c[mma_c_row(lane, i) * 8 + mma_c_col(lane, i)];
  mma_m16n8k16_bf16(fd, fa, fb, fc);
  for (int i = 0; i < 4; ++i) d[mma_c_row(lane, i) * 8 + mma_c_col(lane, i)] = fd.r[i];
}

}  // namespace

void warp_mma_m16n8k16(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d) {
  launch_kernel<warp_mma_kernel>(dim3(1), dim3(32), 0, cuda_stream_of(d.device()),
                                 static_cast<const uint16_t*>(a.data_ptr()), static_cast<const uint16_t*>(b.data_ptr()),
                                 c.data<float>(), d.data<float>());
  FC_CUDA_CHECK_LAUNCH();
}

}  // namespace foldcore::ops::cuda
