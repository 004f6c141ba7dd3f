// .npy header parsing/serialisation and host-array <-> Tensor conversion. The .npz container is in
// npy_zip.cpp.
#include "data_pipeline/formats/npy.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>

#include "data_pipeline/formats/text_reader.h"

namespace foldcore::data {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// NumPy itself refuses headers over 10 KB unless told otherwise; anything this large is not a
// header we wrote or NumPy wrote.
constexpr size_t kMaxHeaderLen = size_t{1} << 20;
constexpr size_t kMaxBytesItemsize = size_t{1} << 24;

[[noreturn]] void fail(const std::string& what, const std::string& reason) { throw_parse_error(what, 0, reason); }

// A tiny reader for the Python literal NumPy writes as the header.
class HeaderLexer {
 public:
  HeaderLexer(std::string_view s, const std::string& what) : s_(s), what_(what) {}
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool peek(char c) {
    ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) bad(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string_literal() {
    ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) bad("expected a quoted string");
    const char q = s_[i_++];
    const size_t b = i_;
    while (i_ < s_.size() && s_[i_] != q) ++i_;
    if (i_ >= s_.size()) bad("unterminated string");
    return std::string(s_.substr(b, i_++ - b));
  }
  bool boolean() {
    ws();
    if (s_.substr(i_, 4) == "True") return i_ += 4, true;
    if (s_.substr(i_, 5) == "False") return i_ += 5, false;
    bad("expected True or False");
  }
  std::vector<int64_t> shape_tuple() {
    expect('(');
    std::vector<int64_t> dims;
    while (!peek(')')) {
      ws();
      int64_t v = 0;
      size_t digits = 0;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) bad("shape extent too large");
        v = v * 10 + (s_[i_++] - '0');
        ++digits;
      }
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long suffix
      if (digits == 0) bad("expected a non-negative integer in the shape");
      dims.push_back(v);
      if (dims.size() > 32) bad("more than 32 dimensions");
      if (peek(',')) ++i_;
      else if (!peek(')')) bad("expected ',' or ')' in the shape");
    }
    ++i_;
    return dims;
  }
  [[noreturn]] void bad(const std::string& why) const {
    fail(what_, "bad .npy header (" + why + " at offset " + std::to_string(i_) + "): " + std::string(s_));
  }

 private:
  std::string_view s_;
  const std::string& what_;
  size_t i_ = 0;
};

struct ParsedDescr {
  NpyDType dtype;
  bool big_endian = false;
};

ParsedDescr parse_descr(const std::string& d, const std::string& what) {
  if (d == "bool" || d == "?" || d == "|b1") return {NpyDType::boolean(), false};
  if (d == "O" || (d.size() >= 2 && d[1] == 'O')) fail(what, "object arrays (pickled Python objects) are not supported");
  if (d.size() < 3) fail(what, "unsupported dtype descr '" + d + "'");
  const char order = d[0];
  const char kind = d[1];
  if (order != '<' && order != '>' && order != '|' && order != '=')
    fail(what, "unsupported dtype descr '" + d + "' (byte order)");
  size_t size = 0;
  for (size_t i = 2; i < d.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(d[i])) || size > kMaxBytesItemsize)
      fail(what, "unsupported dtype descr '" + d + "'");
    size = size * 10 + static_cast<size_t>(d[i] - '0');
  }
  bool ok = false;
  switch (kind) {
    case 'f': ok = size == 2 || size == 4 || size == 8; break;
    case 'i':
    case 'u': ok = size == 1 || size == 2 || size == 4 || size == 8; break;
    case 'b': ok = size == 1; break;
    case 'S': ok = size >= 1 && size <= kMaxBytesItemsize; break;
    case 'U': fail(what, "unicode string arrays ('" + d + "') are not supported; use bytes ('S')");
    default: break;
  }
  if (!ok) fail(what, "unsupported dtype descr '" + d + "'");
  return {{kind, size}, order == '>' && size > 1 && kind != 'S'};
}

int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& what) {
  // The product of the nonzero extents must fit too, even when another extent is 0: strides
  // (products of trailing extents) are computed from the shape whatever the element count.
  int64_t nonzero = 1;
  bool empty = false;
  for (const int64_t d : shape) {
    if (d < 0 || (d > 0 && nonzero > std::numeric_limits<int64_t>::max() / d)) fail(what, "shape overflows");
    if (d == 0) empty = true;
    else nonzero *= d;
  }
  return empty ? 0 : nonzero;
}

// Reorders Fortran-order element bytes into C order.
std::vector<uint8_t> fortran_to_c(const std::vector<uint8_t>& f, const std::vector<int64_t>& shape, size_t item) {
  std::vector<uint8_t> c(f.size());
  const size_t nd = shape.size();
  std::vector<int64_t> fstride(nd, 1), idx(nd, 0);
  for (size_t k = 1; k < nd; ++k) fstride[k] = fstride[k - 1] * shape[k - 1];
  const int64_t n = static_cast<int64_t>(f.size() / std::max<size_t>(item, 1));
  for (int64_t e = 0; e < n; ++e) {  // e walks C order; idx is its multi-index
    int64_t src = 0;
    for (size_t k = 0; k < nd; ++k) src += idx[k] * fstride[k];
    std::memcpy(&c[static_cast<size_t>(e) * item], &f[static_cast<size_t>(src) * item], item);
    for (size_t k = nd; k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
  return c;
}

template <typename Src, typename Dst> void convert_into(const NpyArray& a, Tensor& t) {
  const Src* s = reinterpret_cast<const Src*>(a.data.data());
  Dst* d = static_cast<Dst*>(t.data_ptr());
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<Dst>(s[i]);
}

}  // namespace

std::string NpyDType::descr() const {
  if (kind == 'S') return "|S" + std::to_string(itemsize);
  if (kind == 'b') return "|b1";
  return std::string(itemsize == 1 ? "|" : "<") + kind + std::to_string(itemsize);
}

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

void NpyArray::check_type(size_t size, char kind) const {
  const bool ok = dtype.itemsize == size && (dtype.kind == kind || (kind == 'u' && dtype.kind == 'b'));
  FC_CHECK(ok, "NpyArray: array of dtype ", dtype.descr(), " accessed as a ", size, "-byte '", kind, "' type");
  FC_CHECK(data.size() == static_cast<size_t>(numel()) * dtype.itemsize, "NpyArray: data size ", data.size(),
           " does not match shape and dtype");
}

std::vector<std::string> NpyArray::strings() const {
  FC_CHECK(dtype.kind == 'S', "NpyArray::strings: dtype is ", dtype.descr(), ", not bytes");
  std::vector<std::string> out;
  const size_t n = static_cast<size_t>(numel());
  FC_CHECK(data.size() == n * dtype.itemsize, "NpyArray::strings: data size does not match shape");
  for (size_t i = 0; i < n; ++i) {
    const char* p = reinterpret_cast<const char*>(data.data()) + i * dtype.itemsize;
    size_t len = dtype.itemsize;
    while (len > 0 && p[len - 1] == '\0') --len;
    out.emplace_back(p, len);
  }
  return out;
}

Tensor NpyArray::to_tensor() const {
  FC_CHECK(dtype.kind != 'S', "NpyArray::to_tensor: bytes arrays (", dtype.descr(), ") have no tensor type");
  FC_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "NpyArray::to_tensor: ", shape.size(),
           " dimensions, at most ", kMaxDims, " supported");
  FC_CHECK(data.size() == static_cast<size_t>(numel()) * dtype.itemsize, "NpyArray::to_tensor: data size ",
           data.size(), " does not match shape and dtype ", dtype.descr());
  const Shape s(shape);
  const char k = dtype.kind;
  const size_t z = dtype.itemsize;
  // A 0-element tensor may have no storage (null data_ptr), and memcpy to null is undefined even
  // for 0 bytes.
  const auto copy_raw = [this](Tensor& t) {
    if (!data.empty()) std::memcpy(t.data_ptr(), data.data(), data.size());
  };
  if (k == 'f' && z == 2) {
    Tensor t = Tensor::empty(s, DType::f16);
    copy_raw(t);
    return t;
  }
  if (k == 'f') {
    Tensor t = Tensor::empty(s, DType::f32);
    if (z == 4) copy_raw(t);
    else convert_into<double, float>(*this, t);
    return t;
  }
  if ((k == 'u' && z == 1) || k == 'b') {
    Tensor t = Tensor::empty(s, DType::u8);
    copy_raw(t);
    if (k == 'b') {  // NumPy bools are 0/1, but normalise any nonzero byte
      auto* p = static_cast<uint8_t*>(t.data_ptr());
      for (int64_t i = 0; i < numel(); ++i) p[i] = p[i] ? 1 : 0;
    }
    return t;
  }
  const bool to_i64 = z == 8 || (k == 'u' && z == 4);
  Tensor t = Tensor::empty(s, to_i64 ? DType::i64 : DType::i32);
  if (k == 'i' && z == 1) convert_into<int8_t, int32_t>(*this, t);
  if (k == 'i' && z == 2) convert_into<int16_t, int32_t>(*this, t);
  if (k == 'i' && (z == 4 || z == 8)) copy_raw(t);
  if (k == 'u' && z == 2) convert_into<uint16_t, int32_t>(*this, t);
  if (k == 'u' && z == 4) convert_into<uint32_t, int64_t>(*this, t);
  if (k == 'u' && z == 8) {
    const auto* src = reinterpret_cast<const uint64_t*>(data.data());
    for (int64_t i = 0; i < numel(); ++i)
      FC_CHECK(src[i] <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
               "NpyArray::to_tensor: uint64 value ", src[i], " does not fit int64");
    convert_into<uint64_t, int64_t>(*this, t);
  }
  return t;
}

NpyArray NpyArray::from_tensor(const Tensor& t) {
  FC_CHECK(t.defined(), "NpyArray::from_tensor: undefined tensor");
  Tensor h = t.to(Device::cpu());
  if (h.dtype() == DType::bf16) h = h.to(DType::f32);
  h = h.contiguous();
  NpyArray a;
  switch (h.dtype()) {
    case DType::f32: a.dtype = NpyDType::f32(); break;
    case DType::f16: a.dtype = {'f', 2}; break;
    case DType::i32: a.dtype = NpyDType::i32(); break;
    case DType::i64: a.dtype = NpyDType::i64(); break;
    case DType::u8: a.dtype = NpyDType::u8(); break;
    case DType::bf16: break;  // converted above
  }
  a.shape = h.shape().vec();
  a.data.resize(h.nbytes());
  if (!a.data.empty()) std::memcpy(a.data.data(), h.data_ptr(), a.data.size());
  return a;
}

NpyArray NpyArray::from_f32(const std::vector<float>& v, std::vector<int64_t> shape) {
  NpyArray a{NpyDType::f32(), std::move(shape), {}};
  FC_CHECK(static_cast<size_t>(a.numel()) == v.size(), "NpyArray::from_f32: ", v.size(), " values for shape of ",
           a.numel());
  a.data.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}

NpyArray NpyArray::from_i32(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  NpyArray a{NpyDType::i32(), std::move(shape), {}};
  FC_CHECK(static_cast<size_t>(a.numel()) == v.size(), "NpyArray::from_i32: ", v.size(), " values for shape of ",
           a.numel());
  a.data.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}

NpyArray NpyArray::from_strings(const std::vector<std::string>& v, std::vector<int64_t> shape) {
  size_t width = 1;
  for (const auto& s : v) width = std::max(width, s.size());
  NpyArray a{NpyDType::bytes(width), std::move(shape), {}};
  FC_CHECK(static_cast<size_t>(a.numel()) == v.size(), "NpyArray::from_strings: ", v.size(),
           " strings for shape of ", a.numel());
  a.data.assign(v.size() * width, 0);
  for (size_t i = 0; i < v.size(); ++i) std::memcpy(a.data.data() + i * width, v[i].data(), v[i].size());
  return a;
}

std::string npy_shape_str(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& what) {
  if (size < kMagicLen + 4 || std::memcmp(bytes, kMagic, kMagicLen) != 0)
    fail(what, size < kMagicLen + 4 ? "truncated .npy data (" + std::to_string(size) + " bytes)"
                                    : "not a .npy array (bad magic)");
  const uint8_t major = bytes[6];
  size_t header_len = 0, pos = 0;
  if (major == 1) {
    header_len = bytes[8] | (size_t{bytes[9]} << 8);
    pos = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) fail(what, "truncated .npy header");
    header_len = bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    pos = 12;
  } else {
    fail(what, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(bytes[7]));
  }
  if (header_len > kMaxHeaderLen) fail(what, "absurd .npy header length " + std::to_string(header_len));
  if (header_len > size - pos)
    fail(what, "truncated .npy data: header of " + std::to_string(header_len) + " bytes, " +
                   std::to_string(size - pos) + " available");
  const std::string_view header(reinterpret_cast<const char*>(bytes + pos), header_len);
  pos += header_len;

  HeaderLexer lx(header, what);
  std::string descr;
  bool fortran = false, have_descr = false, have_order = false, have_shape = false;
  std::vector<int64_t> shape;
  lx.expect('{');
  while (!lx.peek('}')) {
    const std::string key = lx.string_literal();
    lx.expect(':');
    if (key == "descr") descr = lx.string_literal(), have_descr = true;
    else if (key == "fortran_order") fortran = lx.boolean(), have_order = true;
    else if (key == "shape") shape = lx.shape_tuple(), have_shape = true;
    else lx.bad("unknown key '" + key + "'");
    if (lx.peek(',')) lx.expect(',');
    else if (!lx.peek('}')) lx.bad("expected ',' or '}'");
  }
  if (!have_descr || !have_order || !have_shape) lx.bad("missing descr, fortran_order or shape");

  const ParsedDescr pd = parse_descr(descr, what);
  const int64_t n = checked_numel(shape, what);
  const size_t item = pd.dtype.itemsize;
  if (n > 0 && static_cast<uint64_t>(n) > std::numeric_limits<uint64_t>::max() / item) fail(what, "shape overflows");
  const uint64_t need = static_cast<uint64_t>(n) * item;
  if (need != size - pos) {
    std::string shp;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i) shp += ',';
      shp += std::to_string(shape[i]);
    }
    fail(what, (need > size - pos ? "truncated .npy data: shape (" : "size mismatch: shape (") + shp + ") of " +
                   descr + " needs " + std::to_string(need) + " data bytes, found " + std::to_string(size - pos));
  }
  NpyArray a{pd.dtype, shape, std::vector<uint8_t>(bytes + pos, bytes + size)};
  if (pd.big_endian) {
    for (size_t e = 0; e < a.data.size(); e += item) std::reverse(a.data.begin() + e, a.data.begin() + e + item);
  }
  if (fortran && shape.size() > 1) a.data = fortran_to_c(a.data, shape, item);
  return a;
}

std::vector<uint8_t> serialize_npy(const NpyArray& a) {
  FC_CHECK(a.data.size() == static_cast<size_t>(a.numel()) * a.dtype.itemsize, "serialize_npy: data size ",
           a.data.size(), " does not match shape and dtype ", a.dtype.descr());
  std::string dict = "{'descr': '" + a.dtype.descr() + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < a.shape.size(); ++i) {
    if (i) dict += ", ";
    dict += std::to_string(a.shape[i]);
  }
  if (a.shape.size() == 1) dict += ',';  // Python's one-element tuple
  dict += "), }";
  // Pad with spaces so the data starts at a multiple of 64 bytes; the header ends with '\n'.
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::vector<uint8_t> out;
  out.reserve(total + a.data.size());
  for (size_t i = 0; i < kMagicLen; ++i) out.push_back(static_cast<uint8_t>(kMagic[i]));
  out.push_back(v2 ? 2 : 1);
  out.push_back(0);
  const size_t hl = dict.size();
  out.push_back(static_cast<uint8_t>(hl & 0xff));
  out.push_back(static_cast<uint8_t>((hl >> 8) & 0xff));
  if (v2) {
    out.push_back(static_cast<uint8_t>((hl >> 16) & 0xff));
    out.push_back(static_cast<uint8_t>((hl >> 24) & 0xff));
  }
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

NpyArray read_npy(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_npy(bytes.data(), bytes.size(), path);
}

void write_npy(const std::string& path, const NpyArray& a) {
  const std::vector<uint8_t> bytes = serialize_npy(a);
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace foldcore::data
