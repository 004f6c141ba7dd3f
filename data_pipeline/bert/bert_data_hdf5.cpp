// MLPerf BERT HDF5 shards through the HDF5 C API (format in bert_data.h). Handles are RAII;
// HDF5's own error printing is silenced and its error stack folded into our Error messages, each
// naming the file and the dataset.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data_pipeline/bert/bert_data.h"
#include "nn/hdf5_util.h"

namespace foldcore::data {

bool bert_hdf5_supported() { return true; }

namespace {

using nn::Hdf5Handle;
using nn::QuietHdf5;

// The innermost description on HDF5's error stack (the most specific reason), then clears it.
std::string hdf5_reason() {
  const std::vector<std::string> lines = nn::take_hdf5_error_stack();
  return lines.empty() ? "" : " (HDF5: " + lines.back() + ")";
}

template <typename... Args> hid_t check_id(hid_t id, Args&&... what) {
  if (id < 0) FC_THROW(std::forward<Args>(what)..., hdf5_reason());
  return id;
}
template <typename... Args> void check_ok(herr_t s, Args&&... what) {
  if (s < 0) FC_THROW(std::forward<Args>(what)..., hdf5_reason());
}

// The dataset names and their rank / second extent (0 = L, 1 = P) in the MLPerf layout.
struct DatasetSpec {
  const char* name;
  int rank;
  int width;  // 0: L, 1: P, -1: none
};
constexpr DatasetSpec kDatasets[] = {
    {"input_ids", 2, 0},           {"input_mask", 2, 0},    {"segment_ids", 2, 0},
    {"masked_lm_positions", 2, 1}, {"masked_lm_ids", 2, 1}, {"next_sentence_labels", 1, -1},
};

Hdf5Handle open_shard(const std::string& path) {
  std::error_code ec;
  FC_CHECK(std::filesystem::is_regular_file(path, ec), "BERT shard '", path, "': no such file");
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  FC_CHECK(is_h5 > 0, "BERT shard '", path, "': not an HDF5 file", hdf5_reason());
  return Hdf5Handle(check_id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "BERT shard '", path,
                           "': cannot open (truncated or corrupt?)"),
                  H5Fclose);
}

// Opens dataset `spec` and checks it is an integer array of the expected rank; returns its dims.
std::vector<hsize_t> dataset_dims(hid_t file, const std::string& path, const DatasetSpec& spec, hid_t* out_id) {
  const htri_t exists = H5Lexists(file, spec.name, H5P_DEFAULT);
  FC_CHECK(exists > 0, "BERT shard '", path, "': dataset '", spec.name, "' is missing", hdf5_reason());
  *out_id = check_id(H5Dopen2(file, spec.name, H5P_DEFAULT), "BERT shard '", path, "': cannot open dataset '",
                     spec.name, "'");
  Hdf5Handle type(check_id(H5Dget_type(*out_id), "BERT shard '", path, "': dataset '", spec.name, "': no type"),
                  H5Tclose);
  FC_CHECK(H5Tget_class(type.get()) == H5T_INTEGER, "BERT shard '", path, "': dataset '", spec.name,
           "' is not an integer array");
  Hdf5Handle space(check_id(H5Dget_space(*out_id), "BERT shard '", path, "': dataset '", spec.name, "': no dataspace"),
                   H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  FC_CHECK(rank == spec.rank, "BERT shard '", path, "': dataset '", spec.name, "' has rank ", rank, ", expected ",
           spec.rank);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  check_ok(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "BERT shard '", path, "': dataset '",
           spec.name, "': cannot read its shape");
  return dims;
}

// Checks shapes across datasets: every dataset has N rows, the [N, L] ones the same L, the
// [N, P] ones the same P. Leaves the open dataset ids in `ids` (caller closes).
BertShardInfo check_layout(hid_t file, const std::string& path, std::vector<Hdf5Handle>& ids) {
  BertShardInfo info;
  int64_t width[2] = {-1, -1};
  for (size_t d = 0; d < std::size(kDatasets); ++d) {
    const DatasetSpec& spec = kDatasets[d];
    hid_t id = -1;
    std::vector<hsize_t> dims;
    try {
      dims = dataset_dims(file, path, spec, &id);
    } catch (...) {
      if (id >= 0) H5Dclose(id);
      throw;
    }
    ids.emplace_back(id, H5Dclose);
    const auto n = static_cast<int64_t>(dims[0]);
    if (d == 0) info.num = n;
    FC_CHECK(n == info.num, "BERT shard '", path, "': dataset '", spec.name, "' has ", n, " rows but 'input_ids' has ",
             info.num);
    if (spec.width >= 0) {
      const auto w = static_cast<int64_t>(dims[1]);
      int64_t& expect = width[spec.width];
      if (expect < 0) expect = w;
      FC_CHECK(w == expect && w > 0, "BERT shard '", path, "': dataset '", spec.name, "' has shape [", n, ", ", w,
               "], expected [", n, ", ", expect, "] like the other ", spec.width == 0 ? "[N, L]" : "[N, P]",
               " datasets");
    }
  }
  info.seq_len = static_cast<int>(width[0]);
  info.max_predictions = static_cast<int>(width[1]);
  return info;
}

void read_dataset(hid_t id, const std::string& path, const char* name, std::vector<int32_t>& out, size_t count) {
  out.assign(count, 0);
  if (count == 0) return;
  // HDF5 converts any stored integer width/sign to native int32 (values from MLPerf files fit).
  check_ok(H5Dread(id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), "BERT shard '", path,
           "': cannot read dataset '", name, "' (truncated or corrupt?)");
}

void write_dataset(hid_t file, const std::string& path, const char* name, const std::vector<int32_t>& data,
                   std::vector<hsize_t> dims, hid_t file_type) {
  Hdf5Handle space(check_id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple"),
                   H5Sclose);
  Hdf5Handle ds(check_id(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         "BERT shard '", path, "': cannot create dataset '", name, "'"),
                H5Dclose);
  if (!data.empty())
    check_ok(H5Dwrite(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), "BERT shard '", path,
             "': cannot write dataset '", name, "'");
}

}  // namespace

BertShardInfo inspect_bert_shard(const std::string& path) {
  QuietHdf5 quiet;
  Hdf5Handle file = open_shard(path);
  std::vector<Hdf5Handle> ids;
  return check_layout(file.get(), path, ids);
}

BertExamples read_bert_shard(const std::string& path) {
  QuietHdf5 quiet;
  Hdf5Handle file = open_shard(path);
  std::vector<Hdf5Handle> ids;
  const BertShardInfo info = check_layout(file.get(), path, ids);
  BertExamples ex;
  ex.num = info.num;
  ex.seq_len = info.seq_len;
  ex.max_predictions = info.max_predictions;
  const auto nl = static_cast<size_t>(ex.num * ex.seq_len), np = static_cast<size_t>(ex.num * ex.max_predictions);
  std::vector<int32_t>* dst[] = {&ex.input_ids,           &ex.input_mask,    &ex.segment_ids,
                                 &ex.masked_lm_positions, &ex.masked_lm_ids, &ex.next_sentence_labels};
  const size_t counts[] = {nl, nl, nl, np, np, static_cast<size_t>(ex.num)};
  for (size_t d = 0; d < std::size(kDatasets); ++d)
    read_dataset(ids[d].get(), path, kDatasets[d].name, *dst[d], counts[d]);
  ex.validate("BERT shard '" + path + "'");
  return ex;
}

void write_bert_shard(const std::string& path, const BertExamples& ex) {
  ex.validate("write_bert_shard '" + path + "'");
  QuietHdf5 quiet;
  int32_t max_id = 0;
  for (int32_t v : ex.input_ids) max_id = std::max(max_id, v);
  // MLPerf/NVIDIA's compact widths: int16 ids and positions when they fit, int8 flags.
  const bool ids16 = max_id <= INT16_MAX && ex.seq_len <= INT16_MAX;
  const hid_t id_type = ids16 ? H5T_STD_I16LE : H5T_STD_I32LE;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    {
      Hdf5Handle file(check_id(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                               "BERT shard: cannot create '", tmp, "'"),
                      H5Fclose);
      const auto n = static_cast<hsize_t>(ex.num), L = static_cast<hsize_t>(ex.seq_len),
                 P = static_cast<hsize_t>(ex.max_predictions);
      write_dataset(file.get(), tmp, "input_ids", ex.input_ids, {n, L}, id_type);
      write_dataset(file.get(), tmp, "input_mask", ex.input_mask, {n, L}, H5T_STD_I8LE);
      write_dataset(file.get(), tmp, "segment_ids", ex.segment_ids, {n, L}, H5T_STD_I8LE);
      write_dataset(file.get(), tmp, "masked_lm_positions", ex.masked_lm_positions, {n, P}, id_type);
      write_dataset(file.get(), tmp, "masked_lm_ids", ex.masked_lm_ids, {n, P}, id_type);
      write_dataset(file.get(), tmp, "next_sentence_labels", ex.next_sentence_labels, {n}, H5T_STD_I8LE);
      check_ok(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "BERT shard: cannot flush '", tmp, "'");
      check_ok(file.close(), "BERT shard: cannot close '", tmp, "'");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      FC_THROW("BERT shard: cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());  // never leave a partial file behind
    throw;
  }
}

void write_bert_shard_raw(const std::string& path, const BertExamples& ex, const BertRawShardOptions& o) {
  QuietHdf5 quiet;
  hid_t type = -1;
  if (o.dtype == "int8") type = H5T_STD_I8LE;
  else if (o.dtype == "int16") type = H5T_STD_I16LE;
  else if (o.dtype == "int32") type = H5T_STD_I32LE;
  else if (o.dtype == "int64") type = H5T_STD_I64LE;
  else if (o.dtype == "uint16") type = H5T_STD_U16LE;
  else if (o.dtype == "float32") type = H5T_IEEE_F32LE;
  else FC_THROW("write_bert_shard_raw: unknown dtype '", o.dtype, "'");
  Hdf5Handle file(check_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                           "BERT shard: cannot create '", path, "'"),
                  H5Fclose);
  const std::vector<int32_t>* src[] = {&ex.input_ids,           &ex.input_mask,    &ex.segment_ids,
                                       &ex.masked_lm_positions, &ex.masked_lm_ids, &ex.next_sentence_labels};
  for (size_t d = 0; d < std::size(kDatasets); ++d) {
    const DatasetSpec& spec = kDatasets[d];
    if (o.omit == spec.name) continue;
    std::vector<hsize_t> dims = {static_cast<hsize_t>(ex.num)};
    if (spec.width >= 0) dims.push_back(static_cast<hsize_t>(spec.width == 0 ? ex.seq_len : ex.max_predictions));
    std::vector<int32_t> data = *src[d];
    if (o.widen == spec.name) {  // one more zero column (or row, for the 1-D labels)
      const hsize_t w = dims.back();
      std::vector<int32_t> wide;
      const hsize_t rows = dims.size() == 2 ? dims[0] : 1;
      for (hsize_t r = 0; r < rows; ++r) {
        wide.insert(wide.end(), data.begin() + static_cast<std::ptrdiff_t>(r * w),
                    data.begin() + static_cast<std::ptrdiff_t>((r + 1) * w));
        wide.push_back(0);
      }
      data = std::move(wide);
      dims.back() += 1;
    }
    write_dataset(file.get(), path, spec.name, data, dims, type);
  }
  check_ok(file.close(), "BERT shard: cannot close '", path, "'");
}

}  // namespace foldcore::data
