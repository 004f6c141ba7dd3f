// LayerNorm dispatcher: shape/dtype/device validation, then the CPU or CUDA backend.
#include "kernels/layernorm.h"

#include "kernels/cpu/layernorm_cpu.h"
#ifdef FOLDCORE_HAVE_CUDA
#include "kernels/cuda/layernorm_cuda.h"
#endif

namespace foldcore::ops {
namespace {

struct RowsC {
  int64_t rows, c;
};

RowsC check_common(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd) {
  FC_CHECK(x.defined() && gamma.defined() && mean.defined() && rstd.defined(), op, ": x, gamma, mean, rstd must be defined");
  FC_CHECK(x.dim() >= 1 && is_floating(x.dtype()) && x.is_contiguous(), op, ": x ", x.str(),
           " must be a contiguous floating tensor");
  const int64_t c = x.size(-1);
  const int64_t rows = c == 0 ? 0 : x.numel() / c;
  FC_CHECK(c > 0, op, ": x ", x.str(), " has an empty last dim");
  FC_CHECK(gamma.dim() == 1 && gamma.size(0) == c && gamma.dtype() == DType::f32 && gamma.is_contiguous(), op,
           ": gamma ", gamma.str(), " must be contiguous f32 [", c, "] for x ", x.str());
  for (const Tensor* s : {&mean, &rstd})
    FC_CHECK(s->numel() == rows && s->dtype() == DType::f32 && s->is_contiguous(), op, ": mean/rstd ", s->str(),
             " must be contiguous f32 with ", rows, " elements for x ", x.str());
  for (const Tensor* t : {&gamma, &mean, &rstd})
    FC_CHECK(t->device() == x.device(), op, ": ", t->str(), " is not on x's device ", x.device().str());
  return {rows, c};
}

void check_like(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  FC_CHECK(t.defined() && t.shape() == x.shape() && t.dtype() == x.dtype() && t.device() == x.device() &&
               t.is_contiguous(),
           op, ": ", name, " ", (t.defined() ? t.str() : std::string("undefined")), " must be contiguous and match x ",
           x.str());
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  const auto [rows, c] = check_common("layernorm_forward", x, gamma, mean, rstd);
  FC_CHECK(beta.defined() && beta.shape() == gamma.shape() && beta.dtype() == DType::f32 && beta.is_contiguous() &&
               beta.device() == x.device(),
           "layernorm_forward: beta ", (beta.defined() ? beta.str() : std::string("undefined")),
           " must match gamma ", gamma.str());
  check_like("layernorm_forward", "y", y, x);
  if (rows == 0) return;
  if (x.device().is_cpu()) {
    cpu::layernorm_forward(x, gamma, beta, eps, y, mean, rstd, rows, c);
  } else {
#ifdef FOLDCORE_HAVE_CUDA
    cuda::layernorm_forward(x, gamma, beta, eps, y, mean, rstd, rows, c);
#else
    FC_THROW("layernorm_forward: tensor on ", x.device().str(), " but this build has no CUDA backend");
#endif
  }
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  const auto [rows, c] = check_common("layernorm_backward", x, gamma, mean, rstd);
  check_like("layernorm_backward", "dy", dy, x);
  check_like("layernorm_backward", "dx", dx, x);
  for (const Tensor* g : {&dgamma, &dbeta})
    FC_CHECK(g->defined() && g->shape() == gamma.shape() && g->dtype() == DType::f32 && g->is_contiguous() &&
                 g->device() == x.device(),
             "layernorm_backward: dgamma/dbeta ", (g->defined() ? g->str() : std::string("undefined")),
             " must be contiguous f32 like gamma ", gamma.str());
  if (rows == 0) return;
  if (x.device().is_cpu()) {
    cpu::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, rows, c);
  } else {
#ifdef FOLDCORE_HAVE_CUDA
    cuda::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, rows, c);
#else
    FC_THROW("layernorm_backward: tensor on ", x.device().str(), " but this build has no CUDA backend");
#endif
  }
}

}  // namespace foldcore::ops
