// HDF5 C API plumbing shared by the HDF5 readers and writers (nn/checkpoint_hdf5.cpp,
// data_pipeline/bert/bert_data_hdf5.cpp): an RAII handle, a guard that silences HDF5's own error
// printing, and access to HDF5's error stack so callers can fold it into their Error messages.
// Includes <hdf5.h>: include this only from *_hdf5.cpp files (compiled only when HDF5 is found).
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

namespace foldcore::nn {

// Turns off HDF5's automatic error-stack printing to stderr for the guard's lifetime.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The non-empty descriptions on HDF5's current error stack, outermost first; clears the stack.
inline std::vector<std::string> take_hdf5_error_stack() {
  std::vector<std::string> lines;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        if (e->desc && *e->desc) static_cast<std::vector<std::string>*>(out)->push_back(e->desc);
        return 0;
      },
      &lines);
  H5Eclear2(H5E_DEFAULT);
  return lines;
}

// Owns one HDF5 id (file, dataset, dataspace, type, attribute, group) and closes it with the
// matching H5?close. A negative id means "none".
class Hdf5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Hdf5Handle() = default;
  Hdf5Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Hdf5Handle(Hdf5Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  Hdf5Handle& operator=(Hdf5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = -1;
    }
    return *this;
  }
  Hdf5Handle(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(const Hdf5Handle&) = delete;
  ~Hdf5Handle() { reset(); }
  hid_t get() const { return id_; }
  // Closes now, returning HDF5's status (closing a file flushes it: a save must check this).
  herr_t close() {
    const herr_t s = id_ >= 0 ? closer_(id_) : 0;
    id_ = -1;
    return s;
  }

 private:
  void reset() {
    if (id_ >= 0) closer_(id_);
    id_ = -1;
  }
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

}  // namespace foldcore::nn
