// Dims: a small fixed-capacity list of extents or strides (up to kMaxDims).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"

namespace foldcore {

constexpr int kMaxDims = 8;

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }
  explicit Dims(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }
  template <typename It> void assign(It b, It e) {
    n_ = 0;
    for (; b != e; ++b) {
      FC_CHECK(n_ < kMaxDims, "at most ", kMaxDims, " dimensions are supported");
      d_[n_++] = *b;
    }
  }
  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t back() const { return d_[n_ - 1]; }
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + n_; }
  int64_t* begin() { return d_.data(); }
  int64_t* end() { return d_.data() + n_; }
  void push_back(int64_t v) {
    FC_CHECK(n_ < kMaxDims, "at most ", kMaxDims, " dimensions are supported");
    d_[n_++] = v;
  }
  void insert(int pos, int64_t v);
  void erase(int pos);
  int64_t product() const {
    int64_t p = 1;
    for (int i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  bool operator==(const Dims& o) const {
    if (n_ != o.n_) return false;
    for (int i = 0; i < n_; ++i)
      if (d_[i] != o.d_[i]) return false;
    return true;
  }
  std::string str() const;

 private:
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

using Shape = Dims;
using Strides = Dims;

// Row-major (C-contiguous) strides of `shape`, in elements.
Strides contiguous_strides(const Shape& shape);
// Normalises a possibly negative axis against `ndim`; throws Error when out of range.
int normalize_axis(int axis, int ndim);
// NumPy broadcasting of two shapes; throws Error when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Appends the dim (size, stride) to a list of `ndim` dims (up to kMaxDims), row-major: an extent-1
// dim is dropped, and one contiguous with the previous dim (prev stride == size·stride, which
// includes two broadcast dims of stride 0) merges into it. The same offsets for every linear
// index, with fewer dims (the reductions' plans, the CUDA kernels' strided descriptors).
inline void push_merged_dim(int& ndim, int64_t* shape, int64_t* strides, int64_t size, int64_t stride) {
  if (size == 1) return;
  if (ndim > 0 && strides[ndim - 1] == size * stride) {
    shape[ndim - 1] *= size;
    strides[ndim - 1] = stride;
    return;
  }
  shape[ndim] = size;
  strides[ndim] = stride;
  ++ndim;
}

}  // namespace foldcore
