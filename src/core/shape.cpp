#include "core/shape.h"

#include <sstream>

namespace foldcore {

void Dims::insert(int pos, int64_t v) {
  FC_CHECK(n_ < kMaxDims, "at most ", kMaxDims, " dimensions are supported");
  FC_CHECK(pos >= 0 && pos <= n_, "insert position ", pos, " out of range for ", n_, " dims");
  for (int i = n_; i > pos; --i) d_[i] = d_[i - 1];
  d_[pos] = v;
  ++n_;
}

void Dims::erase(int pos) {
  FC_CHECK(pos >= 0 && pos < n_, "erase position ", pos, " out of range for ", n_, " dims");
  for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
  --n_;
}

std::string Dims::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < n_; ++i) os << (i ? "," : "") << d_[i];
  os << ']';
  return os.str();
}

Strides contiguous_strides(const Shape& shape) {
  Strides s;
  for (int i = 0; i < shape.size(); ++i) s.push_back(0);
  int64_t acc = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

int normalize_axis(int axis, int ndim) {
  const int a = axis < 0 ? axis + ndim : axis;
  FC_CHECK(a >= 0 && a < ndim, "axis ", axis, " out of range for a ", ndim, "-d tensor");
  return a;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const int n = std::max(a.size(), b.size());
  Shape out;
  for (int i = 0; i < n; ++i) {
    const int ia = i - (n - a.size()), ib = i - (n - b.size());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    FC_CHECK(da == db || da == 1 || db == 1, "shapes ", a.str(), " and ", b.str(), " do not broadcast");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

}  // namespace foldcore
