// Views, reductions, concat, embedding and one-hot.
// View Functions share x's storage in forward; their backward writes the output grad into a
// (zeroed where the view does not cover x) gradient of x's shape.
#include <algorithm>

#include "autograd/function_util.h"
#include "autograd/functions.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/reduce.h"

namespace foldcore::autograd {
namespace {

struct ReshapeFn final : Function {
  Shape in_shape;
  // The output grad is contiguous and owned by this backward: hand it over as a view (in its own
  // dtype: an fp32 gradient of a 16-bit view goes on as it is where the view passes it, below).
  void backward(BackwardCtx& ctx) override { ctx.put_grad(0, ctx.grad_output(0).view(in_shape)); }
};

struct PermuteFn final : Function {
  std::vector<int> order;
  void backward(BackwardCtx& ctx) override {
    const Tensor& g = ctx.grad_output(0);
    ctx.new_grad(0, ctx.grad_dtype(0, g.dtype())).permute(order).copy_(g);
  }
};

// A view of x passes an fp32 gradient of its 16-bit output on to x unconverted where x's producer
// reads one (Node::f32_output_grads): the node does too.
Variable pass_f32_grads(Variable out, const Variable& x) {
  if (out.node() && x.node() && x.node()->f32_output_grads && x.dtype() != DType::f32)
    out.node()->f32_output_grads = true;
  return out;
}

struct NarrowFn final : Function {
  int axis = 0;
  int64_t start = 0, length = 0;
  void backward(BackwardCtx& ctx) override {
    Tensor dx = ctx.new_grad(0);
    dx.zero_();
    dx.narrow(axis, start, length).copy_(ctx.grad_output(0));
  }
};

struct SumFn final : Function {
  Shape in_shape;
  std::vector<int> axes;
  float factor = 1.f;  // 1/n for mean
  void backward(BackwardCtx& ctx) override {
    // Re-insert the reduced axes as size 1, broadcast to x's shape.
    Shape s;
    int k = 0;
    const Tensor& g = ctx.grad_output(0);
    for (int i = 0; i < in_shape.size(); ++i) {
      if (std::find(axes.begin(), axes.end(), i) != axes.end()) {
        s.push_back(1);
      } else {
        s.push_back(g.size(k++));
      }
    }
    Tensor dx = ctx.new_grad(0);
    dx.copy_(g.view(s).expand(in_shape));
    if (factor != 1.f) ops::scale(dx, factor, dx);
  }
};

struct ConcatFn final : Function {
  int axis = 0;
  std::vector<int64_t> sizes;
  void backward(BackwardCtx& ctx) override {
    int64_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (ctx.needs_grad(static_cast<int>(i)))
        ctx.new_grad(static_cast<int>(i)).copy_(ctx.grad_output(0).narrow(axis, off, sizes[i]));
      off += sizes[i];
    }
  }
};

struct EmbeddingFn final : Function {
  Tensor idx;
  void backward(BackwardCtx& ctx) override {
    ops::embedding_backward(ctx.grad_output(0), idx, ctx.accumulate_grad(0, DType::f32));
  }
};

std::vector<int> normalized_axes(const std::vector<int>& axes, int ndim) {
  std::vector<int> out;
  for (int a : axes) out.push_back(normalize_axis(a, ndim));
  std::sort(out.begin(), out.end());
  FC_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "sum/mean: repeated axis");
  return out;
}

Variable reduce(const Variable& x, const std::vector<int>& axes0, bool is_mean) {
  const std::vector<int> axes = normalized_axes(axes0, x.dim());
  Shape out_shape;
  int64_t n = 1;
  for (int i = 0; i < x.dim(); ++i) {
    if (std::find(axes.begin(), axes.end(), i) != axes.end()) {
      n *= x.size(i);
    } else {
      out_shape.push_back(x.size(i));
    }
  }
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  if (is_mean) {
    ops::mean(x.value(), axes, out);
  } else {
    ops::sum(x.value(), axes, out);
  }
  auto fn = std::make_unique<SumFn>();
  fn->in_shape = x.shape();
  fn->axes = axes;
  fn->factor = is_mean ? static_cast<float>(1.0 / static_cast<double>(n)) : 1.f;
  return record1(is_mean ? "mean" : "sum", std::move(fn), {x}, out);
}

}  // namespace

Variable reshape(const Variable& x, const Shape& shape) {
  auto fn = std::make_unique<ReshapeFn>();
  fn->in_shape = x.shape();
  return pass_f32_grads(record1("reshape", std::move(fn), {x}, x.value().reshape(shape)), x);
}

Variable permute(const Variable& x, const std::vector<int>& order) {
  auto fn = std::make_unique<PermuteFn>();
  for (int a : order) fn->order.push_back(normalize_axis(a, x.dim()));
  return pass_f32_grads(record1("permute", std::move(fn), {x}, x.value().permute(order)), x);
}

Variable transpose(const Variable& x, int a, int b) {
  std::vector<int> order(static_cast<size_t>(x.dim()));
  for (int i = 0; i < x.dim(); ++i) order[static_cast<size_t>(i)] = i;
  std::swap(order[static_cast<size_t>(normalize_axis(a, x.dim()))], order[static_cast<size_t>(normalize_axis(b, x.dim()))]);
  return permute(x, order);
}

Variable narrow(const Variable& x, int axis, int64_t start, int64_t length) {
  // The whole axis is x itself (as contiguous() of a contiguous x): no node, so the backward adds
  // x's gradient in place instead of scattering it into a zero tensor of x's shape first.
  if (start == 0 && length == x.size(normalize_axis(axis, x.dim()))) return x;
  auto fn = std::make_unique<NarrowFn>();
  fn->axis = normalize_axis(axis, x.dim());
  fn->start = start;
  fn->length = length;
  return record1("narrow", std::move(fn), {x}, x.value().narrow(axis, start, length));
}

Variable unsqueeze(const Variable& x, int axis) {
  auto fn = std::make_unique<ReshapeFn>();
  fn->in_shape = x.shape();
  return pass_f32_grads(record1("unsqueeze", std::move(fn), {x}, x.value().unsqueeze(axis)), x);
}

Variable contiguous(const Variable& x) {
  if (x.value().is_contiguous()) return x;
  auto fn = std::make_unique<ReshapeFn>();
  fn->in_shape = x.shape();
  return pass_f32_grads(record1("contiguous", std::move(fn), {x}, x.value().contiguous()), x);
}

Variable sum(const Variable& x, const std::vector<int>& axes) { return reduce(x, axes, false); }
Variable mean(const Variable& x, const std::vector<int>& axes) { return reduce(x, axes, true); }

Variable concat(const std::vector<Variable>& xs, int axis) {
  FC_CHECK(!xs.empty(), "concat: no inputs");
  const int ax = normalize_axis(axis, xs[0].dim());
  Shape s = xs[0].shape();
  s[ax] = 0;
  auto fn = std::make_unique<ConcatFn>();
  fn->axis = ax;
  for (const Variable& x : xs) {
    bool same = x.dim() == s.size() && x.dtype() == xs[0].dtype();
    for (int i = 0; same && i < s.size(); ++i) same = i == ax || x.size(i) == s[i];
    FC_CHECK(same, "concat: ", x.shape().str(), " ", dtype_name(x.dtype()), " and ", xs[0].shape().str(), " ",
             dtype_name(xs[0].dtype()), " differ off axis ", ax);
    s[ax] += x.size(ax);
    fn->sizes.push_back(x.size(ax));
  }
  Tensor out = Tensor::empty(s, xs[0].dtype(), xs[0].device());
  int64_t off = 0;
  for (const Variable& x : xs) {
    out.narrow(ax, off, x.size(ax)).copy_(x.value());
    off += x.size(ax);
  }
  return record1("concat", std::move(fn), xs, out);
}

Variable embedding(const Variable& table, const Tensor& idx) {
  FC_CHECK(table.dim() == 2, "embedding: table ", table.shape().str(), " must be [V, C]");
  Shape s = idx.shape();
  s.push_back(table.size(1));
  Tensor out = Tensor::empty(s, table.dtype(), table.device());
  ops::embedding_forward(table.value(), idx, out);
  auto fn = std::make_unique<EmbeddingFn>();
  fn->idx = idx;
  return record1("embedding", std::move(fn), {table}, out);
}

Tensor one_hot(const Tensor& idx, int64_t num_classes, DType dtype) {
  Shape s = idx.shape();
  s.push_back(num_classes);
  Tensor out = Tensor::empty(s, dtype, idx.device());
  ops::one_hot(idx, num_classes, out);
  return out;
}

}  // namespace foldcore::autograd
