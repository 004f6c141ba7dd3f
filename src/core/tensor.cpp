#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include "core/cuda_backend.h"
#include "core/host_waits.h"

namespace foldcore {

// ---------------- Storage ----------------

Storage::Storage(size_t bytes, Allocator& alloc)
    : data_(alloc.allocate(bytes)), bytes_(bytes), device_(alloc.device()), alloc_(&alloc) {}

Storage::Storage(void* external, size_t bytes, Device device)
    : data_(external), bytes_(bytes), device_(device), alloc_(nullptr) {}

Storage::~Storage() {
  if (alloc_ != nullptr) alloc_->deallocate(data_, bytes_);
}

// ---------------- creation ----------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return empty(shape, dtype, default_allocator(device));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator& alloc) {
  for (int64_t d : shape) FC_CHECK(d >= 0, "negative extent in shape ", shape.str());
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(shape.product()) * dtype_size(dtype), alloc);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, DType dtype, Device device) {
  FC_CHECK(static_cast<int64_t>(values.size()) == shape.product(), "from_vector: ", values.size(),
           " values for shape ", shape.str());
  Tensor host = wrap(const_cast<float*>(values.data()), shape, DType::f32, Device::cpu());
  Tensor out = empty(shape, dtype, device);
  out.copy_(host);
  return out;
}

Tensor Tensor::from_vector_i64(const std::vector<int64_t>& values, const Shape& shape, DType dtype,
                               Device device) {
  FC_CHECK(static_cast<int64_t>(values.size()) == shape.product(), "from_vector_i64: ", values.size(),
           " values for shape ", shape.str());
  Tensor host = wrap(const_cast<int64_t*>(values.data()), shape, DType::i64, Device::cpu());
  Tensor out = empty(shape, dtype, device);
  out.copy_(host);
  return out;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, static_cast<size_t>(shape.product()) * dtype_size(dtype), device);
  return t;
}

// ---------------- metadata ----------------

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << "Tensor" << shape_.str() << ' ' << dtype_name(dtype_) << ' ' << device().str();
  return os.str();
}

// ---------------- views ----------------

Tensor Tensor::view(const Shape& shape) const {
  FC_CHECK(is_contiguous(), "view of a non-contiguous ", str(), "; use reshape()");
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      FC_CHECK(infer < 0, "view: more than one -1 in ", shape.str());
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    FC_CHECK(known > 0 && numel() % known == 0, "view: cannot infer -1 in ", shape.str(), " for ", str());
    s[infer] = numel() / known;
  }
  FC_CHECK(s.product() == numel(), "view: shape ", s.str(), " does not match ", str());
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  return is_contiguous() ? view(shape) : contiguous().view(shape);
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  FC_CHECK(static_cast<int>(order.size()) == dim(), "permute: ", order.size(), " axes for ", str());
  Tensor t = *this;
  std::vector<bool> seen(dim(), false);
  for (int i = 0; i < dim(); ++i) {
    const int a = normalize_axis(order[i], dim());
    FC_CHECK(!seen[a], "permute: axis ", a, " repeated");
    seen[a] = true;
    t.shape_[i] = shape_[a];
    t.strides_[i] = strides_[a];
  }
  return t;
}

Tensor Tensor::transpose(int a, int b) const {
  std::vector<int> order(dim());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[normalize_axis(a, dim())], order[normalize_axis(b, dim())]);
  return permute(order);
}

Tensor Tensor::narrow(int axis, int64_t start, int64_t length) const {
  const int a = normalize_axis(axis, dim());
  FC_CHECK(start >= 0 && length >= 0 && start + length <= shape_[a], "narrow(", axis, ", ", start, ", ",
           length, ") out of range for ", str());
  Tensor t = *this;
  t.offset_ += start * strides_[a];
  t.shape_[a] = length;
  return t;
}

Tensor Tensor::select(int axis, int64_t index) const {
  const int a = normalize_axis(axis, dim());
  const int64_t i = index < 0 ? index + shape_[a] : index;
  FC_CHECK(i >= 0 && i < shape_[a], "select index ", index, " out of range for ", str());
  Tensor t = *this;
  t.offset_ += i * strides_[a];
  t.shape_.erase(a);
  t.strides_.erase(a);
  return t;
}

Tensor Tensor::unsqueeze(int axis) const {
  const int a = normalize_axis(axis, dim() + 1);
  Tensor t = *this;
  const int64_t st = a < dim() ? strides_[a] * shape_[a] : 1;
  t.shape_.insert(a, 1);
  t.strides_.insert(a, st);
  return t;
}

Tensor Tensor::squeeze(int axis) const {
  const int a = normalize_axis(axis, dim());
  FC_CHECK(shape_[a] == 1, "squeeze of axis ", axis, " with extent ", shape_[a]);
  Tensor t = *this;
  t.shape_.erase(a);
  t.strides_.erase(a);
  return t;
}

Tensor Tensor::expand(const Shape& shape) const {
  FC_CHECK(shape.size() >= dim(), "expand: ", shape.str(), " has fewer dims than ", str());
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = Strides();
  const int lead = shape.size() - dim();
  for (int i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      t.strides_.push_back(0);
      continue;
    }
    const int64_t src = shape_[i - lead];
    FC_CHECK(src == shape[i] || src == 1, "expand: cannot expand ", str(), " to ", shape.str());
    t.strides_.push_back(src == shape[i] ? strides_[i - lead] : 0);
  }
  return t;
}

// ---------------- copies ----------------

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device d) const {
  if (device() == d) return *this;
  Tensor out = empty(shape_, dtype_, d);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype_) return *this;
  Tensor out = empty(shape_, dt, device());
  out.copy_(*this);
  return out;
}

void Tensor::copy_(const Tensor& src) { copy_tensor(*this, src); }

namespace {

template <typename T> double to_double(T v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}
template <typename T> T from_double(double v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// Calls body(dst_offset, src_offset, n_inner, dst_inner_stride, src_inner_stride) for each run
// along the last axis.
template <typename Body> void for_each_row(const Shape& shape, const Strides& ds, const Strides& ss, Body body) {
  const int nd = shape.size();
  if (nd == 0) {
    body(0, 0, 1, 1, 1);
    return;
  }
  if (shape.product() == 0) return;
  const int64_t inner = shape[nd - 1];
  int64_t idx[kMaxDims] = {0};
  int64_t doff = 0, soff = 0;
  while (true) {
    body(doff, soff, inner, ds[nd - 1], ss[nd - 1]);
    int a = nd - 2;
    for (; a >= 0; --a) {
      ++idx[a];
      doff += ds[a];
      soff += ss[a];
      if (idx[a] < shape[a]) break;
      doff -= ds[a] * shape[a];
      soff -= ss[a] * shape[a];
      idx[a] = 0;
    }
    if (a < 0) return;
  }
}

// Same-dtype copy where one axis p (not the last) has unit stride in `src` and the last axis
// has unit stride in `dst`: a batch of 2-D transposes (permute copies such as [N, N, c] <->
// [c, N, N]). The element-wise row walk reads `src` with a large stride and touches a new cache
// line per element; copying 32×32 tiles reads and writes whole lines. The tiles of large
// tensors are spread over OpenMP threads (independent destinations). Returns false when the
// pattern does not apply (the generic walk below handles it).
void cpu_generic_strided_copy(const Tensor& dst, const Tensor& src);

template <typename T> bool cpu_transpose_copy(const Tensor& dst, const Tensor& src) {
  const Shape& shape = dst.shape();
  const Strides &ds = dst.strides(), &ss = src.strides();
  const int nd = shape.size();
  if (nd < 2 || ds[nd - 1] != 1 || ss[nd - 1] == 1) return false;
  int p = -1;
  for (int a = nd - 2; a >= 0; --a)
    if (ss[a] == 1 && shape[a] > 1) {
      p = a;
      break;
    }
  if (p < 0) return false;
  constexpr int64_t kTile = 32;
  const int64_t rows = shape[p], cols = shape[nd - 1];  // dst: rows stride ds[p], cols stride 1
  if (rows < kTile / 2 || cols < kTile / 2) return false;  // thin: the row walk is as good
  // The remaining axes, flattened: each index gives one base offset pair.
  int outer_axes[kMaxDims];
  int n_outer = 0;
  int64_t n_outer_items = 1;
  for (int a = 0; a < nd - 1; ++a)
    if (a != p) {
      outer_axes[n_outer++] = a;
      n_outer_items *= shape[a];
    }
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const int64_t n_tasks = n_outer_items * row_tiles * col_tiles;
  T* dp = static_cast<T*>(dst.data_ptr());
  const T* sp = static_cast<const T*>(src.data_ptr());
  const int64_t dsr = ds[p], ssc = ss[nd - 1];
  // Parallel only when the copy is large enough to pay for the fork/join (≈ 1 MiB); unused in
  // builds without OpenMP (the fuzz build), where the pragma is ignored.
  [[maybe_unused]] const bool parallel = dst.numel() * static_cast<int64_t>(sizeof(T)) >= (int64_t{1} << 20);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t task = 0; task < n_tasks; ++task) {
    const int64_t ct = task % col_tiles, rt = (task / col_tiles) % row_tiles;
    int64_t rest = task / (col_tiles * row_tiles), doff = 0, soff = 0;
    for (int k = n_outer - 1; k >= 0; --k) {
      const int a = outer_axes[k];
      const int64_t i = rest % shape[a];
      rest /= shape[a];
      doff += i * ds[a];
      soff += i * ss[a];
    }
    const int64_t r0 = rt * kTile, r1 = std::min(rows, r0 + kTile);
    const int64_t c0 = ct * kTile, c1 = std::min(cols, c0 + kTile);
    for (int64_t r = r0; r < r1; ++r) {
      T* drow = dp + doff + r * dsr;
      const T* scol = sp + soff + r;
      for (int64_t c = c0; c < c1; ++c) drow[c] = scol[c * ssc];
    }
  }
  return true;
}

void cpu_strided_copy(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype()) {
    const bool done = dispatch_dtype(dst.dtype(), [&](auto z) { return cpu_transpose_copy<decltype(z)>(dst, src); });
    if (done) return;
  }
  cpu_generic_strided_copy(dst, src);
}

void cpu_generic_strided_copy(const Tensor& dst, const Tensor& src) {
  dispatch_dtype(dst.dtype(), [&](auto d0) {
    using D = decltype(d0);
    dispatch_dtype(src.dtype(), [&](auto s0) {
      using S = decltype(s0);
      D* dp = static_cast<D*>(dst.data_ptr());
      const S* sp = static_cast<const S*>(src.data_ptr());
      for_each_row(dst.shape(), dst.strides(), src.strides(),
                   [&](int64_t doff, int64_t soff, int64_t n, int64_t dst_st, int64_t src_st) {
                     if constexpr (std::is_same_v<D, S>) {
                       if (dst_st == 1 && src_st == 1) {
                         std::memcpy(dp + doff, sp + soff, n * sizeof(D));
                         return;
                       }
                     }
                     if constexpr (std::is_same_v<D, S>) {
                       for (int64_t i = 0; i < n; ++i) dp[doff + i * dst_st] = sp[soff + i * src_st];
                     } else {
                       for (int64_t i = 0; i < n; ++i)
                         dp[doff + i * dst_st] = from_double<D>(to_double(sp[soff + i * src_st]));
                     }
                   });
    });
  });
}

}  // namespace

void copy_tensor(const Tensor& dst, const Tensor& src) {
  FC_CHECK(dst.defined() && src.defined(), "copy of an undefined tensor");
  FC_CHECK(dst.shape() == src.shape(), "copy: shape ", src.shape().str(), " into ", dst.shape().str());
  if (dst.numel() == 0) return;
  const Device dd = dst.device(), sd = src.device();
  if (dd.is_cpu() && sd.is_cpu()) {
    cpu_strided_copy(dst, src);
    return;
  }
  if (dd == sd) {
    detail::cuda_strided_copy(dst, src);
    return;
  }
  // Across devices: move a contiguous image of `src`, then convert/scatter on the destination.
  // A small host → device image is queued without a wait (host_waits.h); everything else waits,
  // and is counted.
  const Tensor s = src.contiguous();
  const auto move = [&](void* to) {
    const size_t bytes = static_cast<size_t>(s.nbytes());
    if (sd.is_cpu() && detail::staged_copy_to_device(to, dd, s.data_ptr(), bytes)) return;
    const detail::CountedWait wait(dd.is_cpu() ? detail::WaitKind::copy_to_host : detail::WaitKind::sync_copy_to_device, bytes);
    detail::cuda_memcpy(to, dd, s.data_ptr(), sd, bytes);
  };
  if (dst.is_contiguous() && dst.dtype() == s.dtype()) {
    move(dst.data_ptr());
    return;
  }
  Tensor staged = Tensor::empty(s.shape(), s.dtype(), dd);
  move(staged.data_ptr());
  copy_tensor(dst, staged);
}

void Tensor::fill_(double value) {
  if (numel() == 0) return;
  if (device().is_cuda()) {
    detail::cuda_fill(*this, value);
    return;
  }
  dispatch_dtype(dtype_, [&](auto z) {
    using T = decltype(z);
    const T v = from_double<T>(value);
    T* p = static_cast<T*>(data_ptr());
    for_each_row(shape_, strides_, strides_, [&](int64_t off, int64_t, int64_t n, int64_t st, int64_t) {
      for (int64_t i = 0; i < n; ++i) p[off + i * st] = v;
    });
  });
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  Tensor host = wrap(out.data(), shape_, DType::f32, Device::cpu());
  host.copy_(*this);
  return out;
}

std::vector<int64_t> Tensor::to_vector_i64() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  Tensor host = wrap(out.data(), shape_, DType::i64, Device::cpu());
  host.copy_(*this);
  return out;
}

float Tensor::item() const {
  FC_CHECK(numel() == 1, "item() of ", str());
  return to_vector()[0];
}

}  // namespace foldcore
