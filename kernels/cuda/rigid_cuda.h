// CUDA kernels of kernels/rigid.h (arguments validated by kernels/rigid.cpp): one thread per
// residue or row, through kernels/rigid_math.h, on the device's stream.
#pragma once

#include "kernels/rigid.h"

namespace foldcore::ops::cuda {

void quat_to_rot(const Tensor& quat, const Tensor& rot);
void quat_to_rot_backward(const Tensor& quat, const Tensor& drot, const Tensor& dquat);
void quat_pre_compose(const Tensor& quat, const Tensor& trans, const Tensor& update, const Tensor& quat_out,
                      const Tensor& trans_out);
void quat_pre_compose_backward(const Tensor& quat, const Tensor& update, const Tensor& dquat_out,
                               const Tensor& dtrans_out, const Tensor& dquat, const Tensor& dupdate);
void torsion_frames(const Tensor& restype, const Tensor& frames, const Tensor& rot, const Tensor& trans,
                    const Tensor& angles, const Tensor& out_rot, const Tensor& out_trans);
void torsion_frames_backward(const Tensor& restype, const Tensor& frames, const Tensor& rot, const Tensor& angles,
                             const Tensor& dout_rot, const Tensor& dout_trans, const Tensor& drot,
                             const Tensor& dtrans, const Tensor& dangles);
void frames_to_points(const Tensor& restype, const Tensor& group, const Tensor& positions, const Tensor& mask,
                      const Tensor& rot, const Tensor& trans, const Tensor& out);
void frames_to_points_backward(const Tensor& restype, const Tensor& group, const Tensor& positions,
                               const Tensor& mask, const Tensor& dout, const Tensor& drot, const Tensor& dtrans);
void l2_normalize_rows(const Tensor& x, float eps, const Tensor& y, const Tensor& norm);
void l2_normalize_rows_backward(const Tensor& y, const Tensor& norm, float eps, const Tensor& dy, const Tensor& dx);
void norm_rows(const Tensor& x, float eps, const Tensor& y);
void norm_rows_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx);
void softplus_forward(const Tensor& x, const Tensor& y);
void softplus_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

}  // namespace foldcore::ops::cuda
