// NumPy .npy arrays and .npz archives (AlphaFold parameter files, feature dicts, our result files).
//
// .npy: magic "\x93NUMPY", version 1.0 (u16 header length), 2.0 or 3.0 (u32), then a Python dict
// literal {'descr': ..., 'fortran_order': ..., 'shape': (...)} padded with spaces and '\n'.
// Supported descr: '<f2' '<f4' '<f8', '|i1' '<i2' '<i4' '<i8', '|u1' '<u2' '<u4' '<u8', '|b1'
// (also the spelling 'bool'), '|S<n>'; '>' (big-endian) numeric types are byte-swapped to host
// order on read. fortran_order=True arrays are transposed into C order on read (the reader always
// returns C order), so callers never see Fortran layout.
//
// .npz: a zip archive of "<name>.npy" entries, stored (method 0) or deflated (method 8), with
// zip64 extensions for entries or archives over 4 GiB. Entries are read through the central
// directory; sizes are validated against the file and CRC-32 is checked.
//
// All errors are foldcore::Error naming the file and entry; no allocation is made from a size that
// has not been checked against the bytes actually present.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace foldcore::data {

struct NpyDType {
  char kind = 'f';     // 'f' float, 'i' signed, 'u' unsigned, 'b' bool, 'S' bytes
  size_t itemsize = 4;
  bool operator==(const NpyDType&) const = default;
  std::string descr() const;  // little-endian descr, e.g. "<f4", "|u1", "|S6"
  static NpyDType f32() { return {'f', 4}; }
  static NpyDType f64() { return {'f', 8}; }
  static NpyDType i32() { return {'i', 4}; }
  static NpyDType i64() { return {'i', 8}; }
  static NpyDType u8() { return {'u', 1}; }
  static NpyDType boolean() { return {'b', 1}; }
  static NpyDType bytes(size_t n) { return {'S', n}; }
};

// A host array: C-order, little-endian element bytes.
struct NpyArray {
  NpyDType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  int64_t numel() const;
  // Typed view of the elements; T must match the dtype (kind and size).
  template <typename T> const T* as() const {
    check_type(sizeof(T), std::is_floating_point_v<T> ? 'f' : (std::is_signed_v<T> ? 'i' : 'u'));
    return reinterpret_cast<const T*>(data.data());
  }
  // Elements of an 'S' array as strings (trailing NULs removed, as NumPy does).
  std::vector<std::string> strings() const;

  // Conversion to a CPU Tensor: f2 -> f16, f4/f8 -> f32, i1/i2/i4/u2 -> i32, i8/u4 -> i64,
  // u8 -> i64 (values above INT64_MAX are an error), u1 and bool -> u8. 'S' arrays are an error.
  Tensor to_tensor() const;
  // From a Tensor (any device): f32 -> <f4, f16 -> <f2, bf16 -> <f4 (NumPy has no bf16),
  // i32 -> <i4, i64 -> <i8, u8 -> |u1.
  static NpyArray from_tensor(const Tensor& t);
  static NpyArray from_f32(const std::vector<float>& v, std::vector<int64_t> shape);
  static NpyArray from_i32(const std::vector<int32_t>& v, std::vector<int64_t> shape);
  static NpyArray from_strings(const std::vector<std::string>& v, std::vector<int64_t> shape);

 private:
  void check_type(size_t size, char kind) const;
};

// A shape as compact text for error messages: "[2,3]", "[]" for a scalar.
std::string npy_shape_str(const std::vector<int64_t>& shape);

// Parses a whole .npy image; `what` names it in errors (e.g. "params.npz:foo.npy").
NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& what);
// Serialises (version 1.0 header, or 2.0 when the header exceeds 64 KiB).
std::vector<uint8_t> serialize_npy(const NpyArray& a);

NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const NpyArray& a);  // atomic

// Random access to the entries of an .npz archive; the file stays open.
class NpzReader {
 public:
  explicit NpzReader(const std::string& path);
  ~NpzReader();
  NpzReader(const NpzReader&) = delete;
  NpzReader& operator=(const NpzReader&) = delete;

  // Array names in archive order (entry names without the ".npy" suffix).
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const;
  NpyArray read(const std::string& name) const;
  // The raw (decompressed, CRC-checked) bytes of an entry by its array name.
  std::vector<uint8_t> read_entry_bytes(const std::string& name) const;
  const std::string& path() const { return path_; }

  struct Entry {
    std::string name;  // zip entry name
    uint16_t method = 0;
    uint16_t flags = 0;
    uint32_t crc = 0;
    uint64_t compressed_size = 0;
    uint64_t uncompressed_size = 0;
    uint64_t local_header_offset = 0;
  };

 private:
  const Entry& entry(const std::string& name) const;
  std::string path_;
  struct File;
  std::unique_ptr<File> file_;
  uint64_t file_size_ = 0;
  std::vector<std::string> names_;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
};

// Every array of an .npz, by name.
std::map<std::string, NpyArray> read_npz(const std::string& path);

// Writes arrays to an .npz (entry "<name>.npy" each), deflated when `compress`, atomically
// (temporary file + rename). Zip64 records are written where sizes or offsets need them.
void write_npz(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& arrays,
               bool compress = true);

}  // namespace foldcore::data
