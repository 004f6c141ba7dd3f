// CPU reference for gather/scatter-add/one-hot. The backward runs rows serially (a scatter-add
// has write conflicts), which also makes it deterministic.
#include "kernels/cpu/embedding_cpu.h"

#include <cstring>

#include "core/error.h"

namespace foldcore::ops::cpu {
namespace {

// Index r of idx (i32 or i64, contiguous) as int64.
struct IndexReader {
  const void* p;
  bool is64;
  int64_t operator[](int64_t r) const {
    return is64 ? static_cast<const int64_t*>(p)[r] : static_cast<const int32_t*>(p)[r];
  }
};

IndexReader reader(const Tensor& idx) { return {idx.data_ptr(), idx.dtype() == DType::i64}; }

void check_range(const char* op, int64_t v, int64_t r, int64_t vocab) {
  if (v < 0 || v >= vocab) FC_THROW(op, ": index ", v, " at position ", r, " is outside [0, ", vocab, ")");
}

}  // namespace

void embedding_forward(const Tensor& table, const Tensor& idx, const Tensor& out) {
  const int64_t rows = idx.numel(), vocab = table.size(0), c = table.size(1);
  const IndexReader ix = reader(idx);
  for (int64_t r = 0; r < rows; ++r) check_range("embedding_forward", ix[r], r, vocab);
  const size_t row_bytes = static_cast<size_t>(c) * dtype_size(table.dtype());
  const char* src = static_cast<const char*>(table.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
#pragma omp parallel for if (rows * c > (1 << 16))
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * row_bytes, src + ix[r] * row_bytes, row_bytes);
}

void embedding_backward(const Tensor& dout, const Tensor& idx, const Tensor& dtable) {
  const int64_t rows = idx.numel(), vocab = dtable.size(0), c = dtable.size(1);
  const IndexReader ix = reader(idx);
  for (int64_t r = 0; r < rows; ++r) check_range("embedding_backward", ix[r], r, vocab);
  float* dt = dtable.data<float>();
  dispatch_float(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* d = static_cast<const T*>(dout.data_ptr());
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = dt + ix[r] * c;
      const T* src = d + r * c;
      for (int64_t j = 0; j < c; ++j) dst[j] += static_cast<float>(src[j]);
    }
  });
}

void one_hot(const Tensor& idx, int64_t num_classes, const Tensor& out) {
  const int64_t rows = idx.numel();
  const IndexReader ix = reader(idx);
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t v = ix[r];
      for (int64_t c = 0; c < num_classes; ++c) o[r * num_classes + c] = T(c == v ? 1.f : 0.f);
    }
  });
}

}  // namespace foldcore::ops::cpu
