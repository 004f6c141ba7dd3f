// Softmax / cross-entropy dispatcher: validation, then the CPU or CUDA backend.
#include "kernels/softmax.h"

#include "kernels/cpu/softmax_cpu.h"
#ifdef FOLDCORE_HAVE_CUDA
#include "kernels/cuda/softmax_cuda.h"
#endif

namespace foldcore::ops {
namespace {

std::string describe(const Tensor& t) { return t.defined() ? t.str() : std::string("undefined"); }

void check_rows(const char* op, const char* name, const Tensor& t) {
  FC_CHECK(t.defined() && t.dim() >= 1 && is_floating(t.dtype()) && t.is_contiguous() && t.size(-1) > 0, op, ": ",
           name, " ", describe(t), " must be a contiguous floating tensor with a non-empty last dim");
}

void check_like(const char* op, const char* name, const Tensor& t, const Tensor& ref) {
  FC_CHECK(t.defined() && t.shape() == ref.shape() && t.dtype() == ref.dtype() && t.device() == ref.device() &&
               t.is_contiguous(),
           op, ": ", name, " ", describe(t), " must be contiguous and match ", ref.str());
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& y) {
  check_rows("softmax_forward", "x", x);
  check_like("softmax_forward", "y", y, x);
  const int64_t c = x.size(-1), rows = x.numel() / c;
  if (rows == 0) return;
  if (x.device().is_cpu()) {
    cpu::softmax_forward(x, y, rows, c);
  } else {
#ifdef FOLDCORE_HAVE_CUDA
    cuda::softmax_forward(x, y, rows, c);
#else
    FC_THROW("softmax_forward: tensor on ", x.device().str(), " but this build has no CUDA backend");
#endif
  }
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  check_rows("softmax_backward", "y", y);
  check_like("softmax_backward", "dy", dy, y);
  check_like("softmax_backward", "dx", dx, y);
  const int64_t c = y.size(-1), rows = y.numel() / c;
  if (rows == 0) return;
  if (y.device().is_cpu()) {
    cpu::softmax_backward(y, dy, dx, rows, c);
  } else {
#ifdef FOLDCORE_HAVE_CUDA
    cuda::softmax_backward(y, dy, dx, rows, c);
#else
    FC_THROW("softmax_backward: tensor on ", y.device().str(), " but this build has no CUDA backend");
#endif
  }
}

void softmax_cross_entropy(const Tensor& logits, const CrossEntropyArgs& args, const Tensor& loss,
                           const Tensor& dlogits) {
  const char* op = "softmax_cross_entropy";
  check_rows(op, "logits", logits);
  const int64_t c = logits.size(-1), rows = logits.numel() / c;
  const Device dev = logits.device();
  FC_CHECK(args.labels.defined() != args.targets.defined(), op, ": give exactly one of labels (", describe(args.labels),
           ") and targets (", describe(args.targets), ") for logits ", logits.str());
  if (args.labels.defined()) {
    const Tensor& l = args.labels;
    FC_CHECK((l.dtype() == DType::i32 || l.dtype() == DType::i64) && l.numel() == rows && l.is_contiguous() &&
                 l.device() == dev,
             op, ": labels ", l.str(), " must be contiguous i32/i64 with ", rows, " elements for logits ", logits.str());
  } else {
    const Tensor& t = args.targets;
    FC_CHECK(t.shape() == logits.shape() && (t.dtype() == logits.dtype() || t.dtype() == DType::f32) &&
                 t.is_contiguous() && t.device() == dev,
             op, ": targets ", t.str(), " must be contiguous, shaped like logits ", logits.str(),
             ", with the logits' dtype or f32");
  }
  if (args.weights.defined())
    FC_CHECK(args.weights.dtype() == DType::f32 && args.weights.numel() == rows && args.weights.is_contiguous() &&
                 args.weights.device() == dev,
             op, ": weights ", args.weights.str(), " must be contiguous f32 with ", rows, " elements");
  FC_CHECK(loss.defined() && loss.dtype() == DType::f32 && loss.numel() == rows && loss.is_contiguous() &&
               loss.device() == dev,
           op, ": loss ", describe(loss), " must be contiguous f32 with ", rows, " elements for logits ", logits.str());
  if (dlogits.defined()) check_like(op, "dlogits", dlogits, logits);
  if (rows == 0) return;
  if (dev.is_cpu()) {
    cpu::softmax_cross_entropy(logits, args, loss, dlogits, rows, c);
  } else {
#ifdef FOLDCORE_HAVE_CUDA
    cuda::softmax_cross_entropy(logits, args, loss, dlogits, rows, c);
#else
    FC_THROW(op, ": tensor on ", dev.str(), " but this build has no CUDA backend");
#endif
  }
}

}  // namespace foldcore::ops
