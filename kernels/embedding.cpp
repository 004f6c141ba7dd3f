// Validation and backend dispatch for kernels/embedding.h.
#include "kernels/embedding.h"

#include "kernels/cpu/embedding_cpu.h"
#include "kernels/cuda/embedding_cuda.h"
#include "kernels/pointwise_checks.h"

namespace foldcore::ops {

namespace {

// out/dout must be [idx.shape..., C].
void check_rows(std::string_view op, const Tensor& idx, std::string_view name, const Tensor& t, int64_t c) {
  bool ok = t.dim() == idx.dim() + 1 && t.size(-1) == c;
  for (int a = 0; ok && a < idx.dim(); ++a) ok = t.size(a) == idx.size(a);
  FC_CHECK(ok, op, ": ", name, " ", t.str(), " must have shape idx.shape + [", c, "] for idx ", idx.str());
}

void check_table(std::string_view op, std::string_view name, const Tensor& t) {
  detail::check_float(op, name, t);
  detail::check_contiguous(op, name, t);
  FC_CHECK(t.dim() == 2, op, ": ", name, " must be [V, C], got ", t.str());
}

}  // namespace

void embedding_forward(const Tensor& table, const Tensor& idx, const Tensor& out) {
  constexpr std::string_view op = "embedding_forward";
  check_table(op, "table", table);
  detail::check_index(op, "idx", idx);
  detail::check_float(op, "out", out);
  detail::check_contiguous(op, "out", out);
  check_rows(op, idx, "out", out, table.size(1));
  FC_CHECK(out.dtype() == table.dtype(), op, ": out ", out.str(), " must have the dtype of table ", table.str());
  detail::check_same_device(op, "table", table, "idx", idx);
  detail::check_same_device(op, "table", table, "out", out);
  if (out.numel() == 0) return;
  FC_CHECK(table.size(0) > 0, op, ": empty table ", table.str());
  FC_POINTWISE_DISPATCH(table.device(), embedding_forward(table, idx, out));
}

void embedding_backward(const Tensor& dout, const Tensor& idx, const Tensor& dtable) {
  constexpr std::string_view op = "embedding_backward";
  check_table(op, "dtable", dtable);
  FC_CHECK(dtable.dtype() == DType::f32, op, ": dtable must be f32, got ", dtable.str());
  detail::check_index(op, "idx", idx);
  detail::check_float(op, "dout", dout);
  detail::check_contiguous(op, "dout", dout);
  check_rows(op, idx, "dout", dout, dtable.size(1));
  detail::check_same_device(op, "dtable", dtable, "idx", idx);
  detail::check_same_device(op, "dtable", dtable, "dout", dout);
  if (dout.numel() == 0) return;
  FC_CHECK(dtable.size(0) > 0, op, ": empty dtable ", dtable.str());
  FC_POINTWISE_DISPATCH(dtable.device(), embedding_backward(dout, idx, dtable));
}

void one_hot(const Tensor& idx, int64_t num_classes, const Tensor& out) {
  constexpr std::string_view op = "one_hot";
  FC_CHECK(num_classes >= 0, op, ": num_classes ", num_classes, " is negative");
  detail::check_index(op, "idx", idx);
  detail::check_float(op, "out", out);
  detail::check_contiguous(op, "out", out);
  check_rows(op, idx, "out", out, num_classes);
  detail::check_same_device(op, "idx", idx, "out", out);
  if (out.numel() == 0) return;
  FC_POINTWISE_DISPATCH(out.device(), one_hot(idx, num_classes, out));
}

}  // namespace foldcore::ops
