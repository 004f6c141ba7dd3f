// Tensor: a typed, strided view of reference-counted device or host memory.
// Views (view/reshape/permute/transpose/narrow/select/expand) share storage; copies are explicit.
// Strides and offsets are in elements.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace foldcore {

// A block of memory owned through an Allocator; freed back to it when the last Tensor goes.
class Storage {
 public:
  Storage(size_t bytes, Allocator& alloc);
  // Wraps external memory that the Storage does not own (e.g. a slice of a flat buffer owned
  // elsewhere that must outlive every tensor on it).
  Storage(void* external, size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Allocator* alloc_ = nullptr;  // nullptr: not owned
};

class Tensor {
 public:
  Tensor() = default;

  // ---- creation ----
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor empty(const Shape& shape, DType dtype, Allocator& alloc);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  // Host data converted to `dtype`, then moved to `device`. values.size() must equal numel.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor from_vector_i64(const std::vector<int64_t>& values, const Shape& shape,
                                DType dtype = DType::i64, Device device = Device::cpu());
  // A tensor over memory owned elsewhere.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device);

  // ---- metadata ----
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int dim() const { return shape_.size(); }
  int64_t size(int axis) const { return shape_[normalize_axis(axis, dim())]; }
  int64_t stride(int axis) const { return strides_[normalize_axis(axis, dim())]; }
  int64_t numel() const { return shape_.product(); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  int64_t offset() const { return offset_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::string str() const;  // "Tensor[2,3] f32 cpu"

  // ---- data ----
  void* data_ptr() const {
    return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
  }
  template <typename T> T* data() const {
    FC_CHECK(DTypeOf<T>::value == dtype_, "tensor is ", dtype_name(dtype_), ", accessed as ",
             dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(data_ptr());
  }

  // ---- views (share storage) ----
  Tensor view(const Shape& shape) const;     // contiguous only; one extent may be -1
  Tensor reshape(const Shape& shape) const;  // view if contiguous, else a contiguous copy
  Tensor permute(const std::vector<int>& order) const;
  Tensor transpose(int a, int b) const;
  Tensor narrow(int axis, int64_t start, int64_t length) const;
  Tensor select(int axis, int64_t index) const;  // drops `axis`
  Tensor unsqueeze(int axis) const;
  Tensor squeeze(int axis) const;
  Tensor expand(const Shape& shape) const;  // broadcast size-1 axes with stride 0
  Tensor flatten() const { return reshape({numel()}); }

  // ---- copies ----
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(Device device) const;  // same tensor when already there
  Tensor to(DType dtype) const;    // same tensor when already that dtype
  // Copies `src` (same shape, any dtype/strides/device) into this tensor's elements.
  void copy_(const Tensor& src);
  void fill_(double value);
  void zero_() { fill_(0.0); }

  // Host copies for tests and I/O (synchronous).
  std::vector<float> to_vector() const;
  std::vector<int64_t> to_vector_i64() const;
  float item() const;  // numel must be 1

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_;
  Strides strides_;
  DType dtype_ = DType::f32;
};

// Strided copy with dtype conversion, any devices. dst and src must have the same shape.
void copy_tensor(const Tensor& dst, const Tensor& src);

}  // namespace foldcore
