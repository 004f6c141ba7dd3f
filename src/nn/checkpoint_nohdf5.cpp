// Checkpoint functions in a build without HDF5: each one fails with an Error that says why and
// how to get a build that can (nn/checkpoint_hdf5.cpp is compiled only when HDF5 is found).
#ifndef FOLDCORE_HAVE_HDF5

#include "nn/checkpoint.h"

namespace foldcore::nn {

namespace {
[[noreturn]] void no_hdf5(const char* what, const std::string& path) {
  FC_THROW(what, " '", path, "': this build of foldcore has no HDF5 support (install the HDF5 C library, "
           "e.g. libhdf5-dev, and reconfigure with -DFOLDCORE_HDF5=ON)");
}
}  // namespace

bool checkpoint_supported() { return false; }

void save_checkpoint(const std::string& path, const CheckpointData&) { no_hdf5("cannot save checkpoint", path); }

void load_checkpoint(const std::string& path, CheckpointData&, const LoadOptions&) {
  no_hdf5("cannot load checkpoint", path);
}

std::vector<std::string> remove_checkpoint_leftovers(const std::string&) { return {}; }  // none were written

CheckpointSummary inspect_checkpoint(const std::string& path) { no_hdf5("cannot inspect checkpoint", path); }

}  // namespace foldcore::nn

#endif  // FOLDCORE_HAVE_HDF5
