// Feature store in a build without HDF5: opening or creating a store fails with an Error that
// says why (feature_store_hdf5.cpp is compiled only when HDF5 is found).
#ifndef FOLDCORE_HAVE_HDF5

#include "core/error.h"
#include "data_pipeline/training/feature_store.h"

namespace foldcore::data {

namespace {
[[noreturn]] void no_hdf5(const std::string& path) {
  FC_THROW("feature store '", path, "': this build of foldcore has no HDF5 support (install the HDF5 C library, "
           "e.g. libhdf5-dev, and reconfigure with -DFOLDCORE_HDF5=ON)");
}
}  // namespace

bool feature_store_supported() { return false; }

// The constructors throw, so no object exists and the other members are never reached; they are
// defined only to satisfy the linker.
struct FeatureStoreWriter::Impl {};
FeatureStoreWriter::FeatureStoreWriter(const std::string& path) { no_hdf5(path); }
FeatureStoreWriter::~FeatureStoreWriter() = default;
void FeatureStoreWriter::add(const TrainingChain&) { no_hdf5(""); }
int64_t FeatureStoreWriter::size() const { return 0; }
void FeatureStoreWriter::finish() { no_hdf5(""); }

struct FeatureStoreReader::Impl {
  std::string path;
  std::vector<FeatureStoreEntry> entries;
};
FeatureStoreReader::FeatureStoreReader(const std::string& path) { no_hdf5(path); }
FeatureStoreReader::~FeatureStoreReader() = default;
const std::string& FeatureStoreReader::path() const { return impl_->path; }
const std::vector<FeatureStoreEntry>& FeatureStoreReader::entries() const { return impl_->entries; }
TrainingChain FeatureStoreReader::read(int64_t) const { no_hdf5(impl_->path); }

}  // namespace foldcore::data

#endif  // FOLDCORE_HAVE_HDF5
