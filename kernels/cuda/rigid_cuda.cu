// CUDA rigid-body geometry (kernels/rigid.h): one thread per residue (or row, or element), each
// running kernels/rigid_math.h's per-residue function, the CPU reference's math. The structure
// module's tensors are small (N residues × 8 frames, × 14 atoms), so these kernels are about
// never leaving the device, not about bandwidth: the backwards keep the CPU's double arithmetic.
#include "kernels/cuda/rigid_cuda.h"

#include <cstdint>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "kernels/rigid_math.h"

namespace foldcore::ops::cuda {
namespace {

using namespace detail;

constexpr int kBlock = 128;

__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// A restype clamped into [0, types) (the caller validated them; a bad one must not read out of bounds).
__device__ __forceinline__ int64_t restype_of(const void* restype, bool i64, int64_t i, int64_t types) {
  int64_t a = i64 ? static_cast<const int64_t*>(restype)[i] : static_cast<const int32_t*>(restype)[i];
  return a < 0 ? 0 : (a >= types ? types - 1 : a);
}

template <int N>
__device__ __forceinline__ void load_double(const float* x, double* y) {
  for (int k = 0; k < N; ++k) y[k] = x[k];
}
template <int N>
__device__ __forceinline__ void store_float(const double* x, float* y) {
  for (int k = 0; k < N; ++k) y[k] = static_cast<float>(x[k]);
}

__global__ void quat_to_rot_kernel(const float* quat, int64_t b, float* rot) {
  const int64_t i = thread_index();
  if (i < b) quat_to_rot_elem(quat + 4 * i, rot + 9 * i);
}

__global__ void quat_to_rot_backward_kernel(const float* quat, const float* drot, int64_t b, float* dquat) {
  const int64_t i = thread_index();
  if (i >= b) return;
  double q[4], g[9], d[4];
  load_double<4>(quat + 4 * i, q);
  load_double<9>(drot + 9 * i, g);
  quat_to_rot_backward_elem(q, g, d);
  store_float<4>(d, dquat + 4 * i);
}

__global__ void pre_compose_kernel(const float* quat, const float* trans, const float* update, int64_t b,
                                   float* quat_out, float* trans_out) {
  const int64_t i = thread_index();
  if (i < b) quat_pre_compose_elem(quat + 4 * i, trans + 3 * i, update + 6 * i, quat_out + 4 * i, trans_out + 3 * i);
}

__global__ void pre_compose_backward_kernel(const float* quat, const float* update, const float* gquat,
                                            const float* gtrans, int64_t b, float* dquat, float* dupdate) {
  const int64_t i = thread_index();
  if (i >= b) return;
  double q[4], u[6], gq[4], gt[3], dq[4], du[6];
  load_double<4>(quat + 4 * i, q);
  load_double<6>(update + 6 * i, u);
  load_double<4>(gquat + 4 * i, gq);
  load_double<3>(gtrans + 3 * i, gt);
  quat_pre_compose_backward_elem(q, u, gq, gt, dq, du);
  if (dquat != nullptr) store_float<4>(dq, dquat + 4 * i);
  if (dupdate != nullptr) store_float<6>(du, dupdate + 6 * i);
}

__global__ void torsion_frames_kernel(const void* restype, bool i64, const float* frames, int64_t types,
                                      const float* rot, const float* trans, const float* angles, int64_t n,
                                      float* out_rot, float* out_trans) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const int64_t a = restype_of(restype, i64, i, types);
  torsion_frames_elem(frames + 128 * a, rot + 9 * i, trans + 3 * i, angles + 14 * i, out_rot + 72 * i,
                      out_trans + 24 * i);
}

__global__ void torsion_frames_backward_kernel(const void* restype, bool i64, const float* frames, int64_t types,
                                               const float* rot, const float* angles, const float* dout_rot,
                                               const float* dout_trans, int64_t n, float* drot, float* dtrans,
                                               float* dangles) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const int64_t a = restype_of(restype, i64, i, types);
  double br[9], ang[14], gr[72], gt[24], d_br[9], d_bt[3], d_ang[14];
  load_double<9>(rot + 9 * i, br);
  load_double<14>(angles + 14 * i, ang);
  load_double<72>(dout_rot + 72 * i, gr);
  load_double<24>(dout_trans + 24 * i, gt);
  torsion_frames_backward_elem(frames + 128 * a, br, ang, gr, gt, d_br, d_bt, d_ang);
  if (drot != nullptr) store_float<9>(d_br, drot + 9 * i);
  if (dtrans != nullptr) store_float<3>(d_bt, dtrans + 3 * i);
  if (dangles != nullptr) store_float<14>(d_ang, dangles + 14 * i);
}

// One thread per (residue, point).
__global__ void frames_to_points_kernel(const void* restype, bool i64, const int32_t* group, const float* positions,
                                        const float* mask, int64_t types, int64_t points, const float* rot,
                                        const float* trans, int64_t n, int64_t groups, float* out) {
  const int64_t t = thread_index();
  if (t >= n * points) return;
  const int64_t i = t / points, k = t - i * points;
  const int64_t a = restype_of(restype, i64, i, types);
  float* o = out + 3 * t;
  int64_t g = group[a * points + k];
  if (mask[a * points + k] == 0.f || g < 0 || g >= groups) {
    o[0] = o[1] = o[2] = 0.f;
    return;
  }
  frame_point_elem(rot + (i * groups + g) * 9, trans + (i * groups + g) * 3, positions + (a * points + k) * 3, o);
}

// One thread per residue: its points in order into its (≤ 8) groups, in double.
__global__ void frames_to_points_backward_kernel(const void* restype, bool i64, const int32_t* group,
                                                 const float* positions, const float* mask, int64_t types,
                                                 int64_t points, const float* dout, int64_t n, int64_t groups,
                                                 float* drot, float* dtrans) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const int64_t a = restype_of(restype, i64, i, types);
  double dr[72], dt[24];
  for (int k = 0; k < 72; ++k) dr[k] = 0;
  for (int k = 0; k < 24; ++k) dt[k] = 0;
  for (int64_t k = 0; k < points; ++k) {
    const int64_t g = group[a * points + k];
    if (mask[a * points + k] == 0.f || g < 0 || g >= groups) continue;
    const float* p = positions + (a * points + k) * 3;
    const float* go = dout + (i * points + k) * 3;
    for (int x = 0; x < 3; ++x) {
      for (int y = 0; y < 3; ++y) dr[9 * g + 3 * x + y] += static_cast<double>(go[x]) * p[y];
      dt[3 * g + x] += go[x];
    }
  }
  for (int64_t k = 0; k < 9 * groups; ++k) drot[i * groups * 9 + k] = static_cast<float>(dr[k]);
  for (int64_t k = 0; k < 3 * groups; ++k) dtrans[i * groups * 3 + k] = static_cast<float>(dt[k]);
}

__global__ void l2_normalize_rows_kernel(const float* x, int64_t rows, int64_t c, float eps, float* y, float* norm) {
  const int64_t r = thread_index();
  if (r < rows) norm[r] = l2_normalize_row(x + r * c, c, eps, y + r * c);
}

__global__ void l2_normalize_rows_backward_kernel(const float* y, const float* norm, int64_t rows, int64_t c,
                                                  float eps, const float* dy, float* dx) {
  const int64_t r = thread_index();
  if (r < rows) l2_normalize_row_backward(y + r * c, norm[r], eps, dy + r * c, c, dx + r * c);
}

__global__ void norm_rows_kernel(const float* x, int64_t rows, int64_t c, float eps, float* y) {
  const int64_t r = thread_index();
  if (r < rows) y[r] = norm_row(x + r * c, c, eps);
}

__global__ void norm_rows_backward_kernel(const float* x, const float* y, const float* dy, int64_t rows, int64_t c,
                                          float* dx) {
  const int64_t t = thread_index();
  if (t >= rows * c) return;
  const int64_t r = t / c;
  dx[t] = dy[r] / y[r] * x[t];
}

__global__ void softplus_forward_kernel(const float* x, int64_t n, float* y) {
  const int64_t i = thread_index();
  if (i < n) y[i] = softplus_elem(x[i]);
}

__global__ void softplus_backward_kernel(const float* x, const float* dy, int64_t n, float* dx) {
  const int64_t i = thread_index();
  if (i < n) dx[i] = softplus_grad_elem(x[i], dy[i]);
}

dim3 blocks_for(int64_t n) { return dim3(static_cast<unsigned>((n + kBlock - 1) / kBlock)); }
const float* cf(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.data_ptr()) : nullptr; }
float* mf(const Tensor& t) { return t.defined() ? static_cast<float*>(t.data_ptr()) : nullptr; }
bool is_i64(const Tensor& restype) { return restype.dtype() == DType::i64; }

}  // namespace

void quat_to_rot(const Tensor& quat, const Tensor& rot) {
  const int64_t b = quat.numel() / 4;
  launch_kernel<quat_to_rot_kernel>(blocks_for(b), kBlock, 0, cuda_stream_of(quat.device()), cf(quat), b, mf(rot));
  FC_CUDA_CHECK_LAUNCH();
}

void quat_to_rot_backward(const Tensor& quat, const Tensor& drot, const Tensor& dquat) {
  const int64_t b = quat.numel() / 4;
  launch_kernel<quat_to_rot_backward_kernel>(blocks_for(b), kBlock, 0, cuda_stream_of(quat.device()), cf(quat),
                                             cf(drot), b, mf(dquat));
  FC_CUDA_CHECK_LAUNCH();
}

void quat_pre_compose(const Tensor& quat, const Tensor& trans, const Tensor& update, const Tensor& quat_out,
                      const Tensor& trans_out) {
  const int64_t b = quat.numel() / 4;
  launch_kernel<pre_compose_kernel>(blocks_for(b), kBlock, 0, cuda_stream_of(quat.device()), cf(quat), cf(trans),
                                    cf(update), b, mf(quat_out), mf(trans_out));
  FC_CUDA_CHECK_LAUNCH();
}

void quat_pre_compose_backward(const Tensor& quat, const Tensor& update, const Tensor& dquat_out,
                               const Tensor& dtrans_out, const Tensor& dquat, const Tensor& dupdate) {
  const int64_t b = quat.numel() / 4;
  launch_kernel<pre_compose_backward_kernel>(blocks_for(b), kBlock, 0, cuda_stream_of(quat.device()), cf(quat),
                                             cf(update), cf(dquat_out), cf(dtrans_out), b, mf(dquat), mf(dupdate));
  FC_CUDA_CHECK_LAUNCH();
}

void torsion_frames(const Tensor& restype, const Tensor& frames, const Tensor& rot, const Tensor& trans,
                    const Tensor& angles, const Tensor& out_rot, const Tensor& out_trans) {
  const int64_t n = rot.size(0);
  launch_kernel<torsion_frames_kernel>(blocks_for(n), kBlock, 0, cuda_stream_of(rot.device()), restype.data_ptr(),
                                       is_i64(restype), cf(frames), frames.size(0), cf(rot), cf(trans), cf(angles), n,
                                       mf(out_rot), mf(out_trans));
  FC_CUDA_CHECK_LAUNCH();
}

void torsion_frames_backward(const Tensor& restype, const Tensor& frames, const Tensor& rot, const Tensor& angles,
                             const Tensor& dout_rot, const Tensor& dout_trans, const Tensor& drot,
                             const Tensor& dtrans, const Tensor& dangles) {
  const int64_t n = rot.size(0);
  launch_kernel<torsion_frames_backward_kernel>(blocks_for(n), kBlock, 0, cuda_stream_of(rot.device()),
                                                restype.data_ptr(), is_i64(restype), cf(frames), frames.size(0),
                                                cf(rot), cf(angles), cf(dout_rot), cf(dout_trans), n, mf(drot),
                                                mf(dtrans), mf(dangles));
  FC_CUDA_CHECK_LAUNCH();
}

void frames_to_points(const Tensor& restype, const Tensor& group, const Tensor& positions, const Tensor& mask,
                      const Tensor& rot, const Tensor& trans, const Tensor& out) {
  const int64_t n = rot.size(0), points = group.size(1);
  launch_kernel<frames_to_points_kernel>(blocks_for(n * points), kBlock, 0, cuda_stream_of(rot.device()),
                                         restype.data_ptr(), is_i64(restype),
                                         static_cast<const int32_t*>(group.data_ptr()), cf(positions), cf(mask),
                                         group.size(0), points, cf(rot), cf(trans), n, rot.size(1), mf(out));
  FC_CUDA_CHECK_LAUNCH();
}

void frames_to_points_backward(const Tensor& restype, const Tensor& group, const Tensor& positions,
                               const Tensor& mask, const Tensor& dout, const Tensor& drot, const Tensor& dtrans) {
  const int64_t n = drot.size(0);
  launch_kernel<frames_to_points_backward_kernel>(blocks_for(n), kBlock, 0, cuda_stream_of(drot.device()),
                                                  restype.data_ptr(), is_i64(restype),
                                                  static_cast<const int32_t*>(group.data_ptr()), cf(positions),
                                                  cf(mask), group.size(0), group.size(1), cf(dout), n, drot.size(1),
                                                  mf(drot), mf(dtrans));
  FC_CUDA_CHECK_LAUNCH();
}

void l2_normalize_rows(const Tensor& x, float eps, const Tensor& y, const Tensor& norm) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  launch_kernel<l2_normalize_rows_kernel>(blocks_for(rows), kBlock, 0, cuda_stream_of(x.device()), cf(x), rows, c,
                                          eps, mf(y), mf(norm));
  FC_CUDA_CHECK_LAUNCH();
}

void l2_normalize_rows_backward(const Tensor& y, const Tensor& norm, float eps, const Tensor& dy, const Tensor& dx) {
  const int64_t c = y.size(-1), rows = y.numel() / c;
  launch_kernel<l2_normalize_rows_backward_kernel>(blocks_for(rows), kBlock, 0, cuda_stream_of(y.device()), cf(y),
                                                   cf(norm), rows, c, eps, cf(dy), mf(dx));
  FC_CUDA_CHECK_LAUNCH();
}

void norm_rows(const Tensor& x, float eps, const Tensor& y) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  launch_kernel<norm_rows_kernel>(blocks_for(rows), kBlock, 0, cuda_stream_of(x.device()), cf(x), rows, c, eps,
                                  mf(y));
  FC_CUDA_CHECK_LAUNCH();
}

void norm_rows_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  launch_kernel<norm_rows_backward_kernel>(blocks_for(rows * c), kBlock, 0, cuda_stream_of(x.device()), cf(x), cf(y),
                                           cf(dy), rows, c, mf(dx));
  FC_CUDA_CHECK_LAUNCH();
}

void softplus_forward(const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  launch_kernel<softplus_forward_kernel>(blocks_for(n), kBlock, 0, cuda_stream_of(x.device()), cf(x), n, mf(y));
  FC_CUDA_CHECK_LAUNCH();
}

void softplus_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t n = x.numel();
  launch_kernel<softplus_backward_kernel>(blocks_for(n), kBlock, 0, cuda_stream_of(x.device()), cf(x), cf(dy), n,
                                          mf(dx));
  FC_CUDA_CHECK_LAUNCH();
}

}  // namespace foldcore::ops::cuda
