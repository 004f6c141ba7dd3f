// BERT shard I/O in a build without HDF5: each function fails with an Error that says why
// (bert_data_hdf5.cpp is compiled only when HDF5 is found).
#ifndef FOLDCORE_HAVE_HDF5

#include "core/error.h"
#include "data_pipeline/bert/bert_data.h"

namespace foldcore::data {

namespace {
[[noreturn]] void no_hdf5(const std::string& path) {
  FC_THROW("BERT shard '", path, "': this build of foldcore has no HDF5 support (install the HDF5 C library, "
           "e.g. libhdf5-dev, and reconfigure with -DFOLDCORE_HDF5=ON)");
}
}  // namespace

bool bert_hdf5_supported() { return false; }
BertShardInfo inspect_bert_shard(const std::string& path) { no_hdf5(path); }
BertExamples read_bert_shard(const std::string& path) { no_hdf5(path); }
void write_bert_shard(const std::string& path, const BertExamples&) { no_hdf5(path); }
void write_bert_shard_raw(const std::string& path, const BertExamples&, const BertRawShardOptions&) { no_hdf5(path); }

}  // namespace foldcore::data

#endif  // FOLDCORE_HAVE_HDF5
