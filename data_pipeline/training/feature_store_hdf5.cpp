// Feature store reader and writer on the HDF5 C API (format and concurrency: feature_store.h).
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

#include "core/error.h"
#include "data_pipeline/training/feature_store.h"
#include "nn/hdf5_util.h"

namespace foldcore::data {

bool feature_store_supported() { return true; }

namespace {

using nn::Hdf5Handle;
using nn::QuietHdf5;

// Target chunk size: large enough that per-chunk overhead is small, small enough that a reader
// thread's inflate buffers stay in cache.
constexpr size_t kChunkBytes = 256 * 1024;
constexpr int kDeflateLevel = 4;  // zlib level: close to level 6's ratio on these arrays, faster
// Bounds on what a (possibly corrupt) file may make us allocate.
constexpr size_t kMaxDatasetBytes = size_t{4} << 30;
constexpr int kMaxRank = 4;

// Every HDF5 call of this file runs under this lock (see feature_store.h).
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

std::string hdf5_reason() {
  const std::vector<std::string> lines = nn::take_hdf5_error_stack();
  return lines.empty() ? "" : " (HDF5: " + lines.back() + ")";
}

enum class Elem { u8, i32, i64, f32, f64 };
size_t elem_size(Elem e) {
  switch (e) {
    case Elem::u8: return 1;
    case Elem::i32: case Elem::f32: return 4;
    case Elem::i64: case Elem::f64: return 8;
  }
  return 0;
}
hid_t native_type(Elem e) {  // call under the lock (the H5T_NATIVE_* macros may initialise HDF5)
  switch (e) {
    case Elem::u8: return H5T_NATIVE_UINT8;
    case Elem::i32: return H5T_NATIVE_INT32;
    case Elem::i64: return H5T_NATIVE_INT64;
    case Elem::f32: return H5T_NATIVE_FLOAT;
    case Elem::f64: return H5T_NATIVE_DOUBLE;
  }
  return -1;
}

size_t product(const std::vector<hsize_t>& dims, size_t from = 0) {
  size_t n = 1;
  for (size_t i = from; i < dims.size(); ++i) n *= static_cast<size_t>(dims[i]);
  return n;
}

// HDF5's shuffle filter: byte j of element i moves to position j * count + i, grouping the bytes
// of equal significance (exponents, high bytes of small ints) so deflate finds the runs.
void shuffle(const uint8_t* in, uint8_t* out, size_t count, size_t esize) {
  for (size_t i = 0; i < count; ++i)
    for (size_t j = 0; j < esize; ++j) out[j * count + i] = in[i * esize + j];
}
void unshuffle(const uint8_t* in, uint8_t* out, size_t count, size_t esize) {
  for (size_t i = 0; i < count; ++i)
    for (size_t j = 0; j < esize; ++j) out[i * esize + j] = in[j * count + i];
}

// One dataset in memory: shape, element type and bytes (row-major).
struct Array {
  std::string name;
  Elem elem = Elem::u8;
  std::vector<hsize_t> dims;
  std::vector<uint8_t> bytes;
};

template <typename T> Array make_array(std::string name, Elem elem, const std::vector<T>& v, std::vector<hsize_t> dims) {
  Array a{std::move(name), elem, std::move(dims), {}};
  a.bytes.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
  return a;
}

// Strings as a NUL-padded u8 [count, width] array (width = longest string, ≥ 1).
Array string_array(std::string name, const std::vector<std::string>& s) {
  size_t w = 1;
  for (const auto& x : s) w = std::max(w, x.size());
  Array a{std::move(name), Elem::u8, {s.size(), w}, std::vector<uint8_t>(s.size() * w, 0)};
  for (size_t i = 0; i < s.size(); ++i) std::memcpy(a.bytes.data() + i * w, s[i].data(), s[i].size());
  return a;
}
std::vector<std::string> strings_of(const Array& a) {
  std::vector<std::string> out;
  const size_t w = a.dims.size() == 2 ? a.dims[1] : 0;
  for (size_t i = 0; w > 0 && i < a.dims[0]; ++i) {
    const char* p = reinterpret_cast<const char*>(a.bytes.data()) + i * w;
    out.emplace_back(p, strnlen(p, w));
  }
  return out;
}

// A dataset ready to write: chunk geometry and the filtered (shuffled + deflated) chunks.
struct EncodedArray {
  Array meta;  // bytes left empty
  hsize_t chunk_rows = 0;  // 0: empty dataset, written contiguous
  std::vector<std::vector<uint8_t>> chunks;
};

EncodedArray encode(const Array& a) {
  EncodedArray e{{a.name, a.elem, a.dims, {}}, 0, {}};
  const size_t es = elem_size(a.elem);
  const size_t row_bytes = product(a.dims, 1) * es;
  const size_t rows = a.dims.empty() ? 0 : static_cast<size_t>(a.dims[0]);
  if (rows == 0 || row_bytes == 0) return e;
  e.chunk_rows = std::max<size_t>(1, std::min<size_t>(rows, kChunkBytes / row_bytes));
  const size_t chunk_bytes = e.chunk_rows * row_bytes;
  std::vector<uint8_t> plain(chunk_bytes), shuffled(chunk_bytes);
  for (size_t r0 = 0; r0 < rows; r0 += e.chunk_rows) {
    // Edge chunks are stored full size (HDF5's convention), zero-padded.
    const size_t n = std::min<size_t>(e.chunk_rows, rows - r0) * row_bytes;
    std::memcpy(plain.data(), a.bytes.data() + r0 * row_bytes, n);
    std::fill(plain.begin() + static_cast<std::ptrdiff_t>(n), plain.end(), uint8_t{0});
    shuffle(plain.data(), shuffled.data(), chunk_bytes / es, es);
    uLongf out_len = compressBound(static_cast<uLong>(chunk_bytes));
    std::vector<uint8_t> out(out_len);
    FC_CHECK(compress2(out.data(), &out_len, shuffled.data(), static_cast<uLong>(chunk_bytes), kDeflateLevel) == Z_OK,
             "feature store: deflate failed for dataset '", a.name, "'");
    out.resize(out_len);
    e.chunks.push_back(std::move(out));
  }
  return e;
}

// The arrays of one chain, in the layout of feature_store.h.
std::vector<Array> chain_arrays(const TrainingChain& c) {
  const hsize_t n = static_cast<hsize_t>(c.num_res()), s = static_cast<hsize_t>(c.msa.depth);
  const hsize_t t = c.templates.size();
  std::vector<Array> a;
  a.push_back(make_array("sequence", Elem::u8, std::vector<uint8_t>(c.sequence.begin(), c.sequence.end()), {c.sequence.size()}));
  a.push_back(make_array("aatype", Elem::i32, c.aatype, {n}));
  a.push_back(make_array("residue_index", Elem::i32, c.residue_index, {n}));
  a.push_back(make_array("all_atom_positions", Elem::f32, c.all_atom_positions, {n, 37, 3}));
  a.push_back(make_array("all_atom_mask", Elem::f32, c.all_atom_mask, {n, 37}));
  a.push_back(make_array("msa", Elem::i32, c.msa.msa, {s, static_cast<hsize_t>(c.msa.num_columns)}));
  a.push_back(make_array("deletion_matrix", Elem::i32, c.msa.deletion_matrix, {s, static_cast<hsize_t>(c.msa.num_columns)}));
  std::vector<float> aat, masks, pos, probs;
  std::vector<std::string> names, seqs;
  for (const TemplateFeatures& tf : c.templates) {
    aat.insert(aat.end(), tf.aatype.begin(), tf.aatype.end());
    masks.insert(masks.end(), tf.masks.begin(), tf.masks.end());
    pos.insert(pos.end(), tf.positions.begin(), tf.positions.end());
    probs.push_back(tf.sum_probs);
    names.push_back(tf.domain_name);
    seqs.push_back(tf.sequence);
  }
  a.push_back(make_array("template_aatype", Elem::f32, aat, {t, n, 22}));
  a.push_back(make_array("template_all_atom_masks", Elem::f32, masks, {t, n, 37}));
  a.push_back(make_array("template_all_atom_positions", Elem::f32, pos, {t, n, 37, 3}));
  a.push_back(make_array("template_sum_probs", Elem::f32, probs, {t}));
  a.push_back(string_array("template_domain_names", names));
  a.push_back(string_array("template_sequence", seqs));
  a.push_back(make_array("release_date", Elem::u8, std::vector<uint8_t>(c.release_date.begin(), c.release_date.end()),
                         {c.release_date.size()}));
  return a;
}

// Writes one encoded dataset under `parent` (call under the lock).
void write_encoded(hid_t parent, const EncodedArray& e, const std::string& where) {
  const Array& m = e.meta;
  const Hdf5Handle space(H5Screate_simple(static_cast<int>(m.dims.size()), m.dims.data(), nullptr), H5Sclose);
  const Hdf5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  FC_CHECK(space.get() >= 0 && dcpl.get() >= 0, where, ": cannot create dataspace for '", m.name, "'", hdf5_reason());
  if (e.chunk_rows > 0) {
    std::vector<hsize_t> chunk = m.dims;
    chunk[0] = e.chunk_rows;
    FC_CHECK(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) >= 0 &&
                 H5Pset_shuffle(dcpl.get()) >= 0 && H5Pset_deflate(dcpl.get(), kDeflateLevel) >= 0,
             where, ": cannot set up chunking for '", m.name, "'", hdf5_reason());
  }
  const Hdf5Handle ds(H5Dcreate2(parent, m.name.c_str(), native_type(m.elem), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                      H5Dclose);
  FC_CHECK(ds.get() >= 0, where, ": cannot create dataset '", m.name, "'", hdf5_reason());
  std::vector<hsize_t> offset(m.dims.size(), 0);
  for (size_t i = 0; i < e.chunks.size(); ++i) {
    offset[0] = i * e.chunk_rows;
    FC_CHECK(H5Dwrite_chunk(ds.get(), H5P_DEFAULT, 0, offset.data(), e.chunks[i].size(), e.chunks[i].data()) >= 0,
             where, ": cannot write dataset '", m.name, "'", hdf5_reason());
  }
}

template <typename T> void write_attribute(hid_t obj, const char* name, hid_t type, T value, const std::string& where) {
  const Hdf5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Hdf5Handle attr(H5Acreate2(obj, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  FC_CHECK(attr.get() >= 0 && H5Awrite(attr.get(), type, &value) >= 0, where, ": cannot write attribute '", name, "'",
           hdf5_reason());
}
template <typename T> T read_attribute(hid_t obj, const char* name, hid_t type, const std::string& where) {
  const Hdf5Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  FC_CHECK(attr.get() >= 0, where, ": missing attribute '", name, "'", hdf5_reason());
  const Hdf5Handle space(H5Aget_space(attr.get()), H5Sclose);
  FC_CHECK(H5Sget_simple_extent_npoints(space.get()) == 1, where, ": attribute '", name, "' is not a scalar");
  T v{};
  FC_CHECK(H5Aread(attr.get(), type, &v) >= 0, where, ": cannot read attribute '", name, "'", hdf5_reason());
  return v;
}

// A dataset as fetched from the file under the lock; decoded (inflated) after releasing it.
struct RawArray {
  Array meta;
  hsize_t chunk_rows = 0;  // > 0: `chunks` hold the stored (filtered) chunks with their filter masks
  std::vector<std::pair<unsigned, std::vector<uint8_t>>> chunks;
};

// Opens `parent/name`, checks element type and rank, and fetches its bytes (under the lock).
RawArray fetch(hid_t parent, const std::string& name, Elem elem, int rank, const std::string& where) {
  RawArray r;
  r.meta.name = name;
  r.meta.elem = elem;
  const Hdf5Handle ds(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), H5Dclose);
  FC_CHECK(ds.get() >= 0, where, ": missing dataset '", name, "'", hdf5_reason());
  const Hdf5Handle type(H5Dget_type(ds.get()), H5Tclose);
  FC_CHECK(type.get() >= 0 && H5Tequal(type.get(), native_type(elem)) > 0, where, ": dataset '", name,
           "' has the wrong element type");
  const Hdf5Handle space(H5Dget_space(ds.get()), H5Sclose);
  const int nd = space.get() >= 0 ? H5Sget_simple_extent_ndims(space.get()) : -1;
  FC_CHECK(nd == rank && nd <= kMaxRank, where, ": dataset '", name, "' has rank ", nd, ", expected ", rank);
  r.meta.dims.resize(static_cast<size_t>(nd));
  H5Sget_simple_extent_dims(space.get(), r.meta.dims.data(), nullptr);
  const size_t es = elem_size(elem);
  const size_t total = product(r.meta.dims);
  FC_CHECK(total <= kMaxDatasetBytes / es, where, ": dataset '", name, "' is implausibly large");
  if (total == 0) return r;
  // The fast path needs our own layout: chunked along axis 0 only, filters [shuffle, deflate].
  const Hdf5Handle dcpl(H5Dget_create_plist(ds.get()), H5Pclose);
  bool ours = H5Pget_layout(dcpl.get()) == H5D_CHUNKED && H5Pget_nfilters(dcpl.get()) == 2;
  std::vector<hsize_t> chunk(static_cast<size_t>(nd));
  if (ours) ours = H5Pget_chunk(dcpl.get(), nd, chunk.data()) == nd;
  for (int i = 1; ours && i < nd; ++i) ours = chunk[static_cast<size_t>(i)] == r.meta.dims[static_cast<size_t>(i)];
  for (unsigned f = 0; ours && f < 2; ++f) {
    unsigned flags = 0;
    size_t nelmts = 0;
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), f, &flags, &nelmts, nullptr, 0, nullptr, nullptr);
    ours = id == (f == 0 ? H5Z_FILTER_SHUFFLE : H5Z_FILTER_DEFLATE);
  }
  if (!ours) {  // any other layout: let HDF5 decode it
    r.meta.bytes.resize(total * es);
    FC_CHECK(H5Dread(ds.get(), native_type(elem), H5S_ALL, H5S_ALL, H5P_DEFAULT, r.meta.bytes.data()) >= 0, where,
             ": cannot read dataset '", name, "'", hdf5_reason());
    return r;
  }
  r.chunk_rows = chunk[0];
  const size_t chunk_bytes = static_cast<size_t>(chunk[0]) * product(r.meta.dims, 1) * es;
  std::vector<hsize_t> offset(static_cast<size_t>(nd), 0);
  for (hsize_t r0 = 0; r0 < r.meta.dims[0]; r0 += chunk[0]) {
    offset[0] = r0;
    hsize_t stored = 0;
    FC_CHECK(H5Dget_chunk_storage_size(ds.get(), offset.data(), &stored) >= 0 && stored > 0, where, ": dataset '", name,
             "' is missing chunk at row ", r0, hdf5_reason());
    // deflate never expands by more than compressBound's margin: a larger size is corruption.
    FC_CHECK(stored <= compressBound(static_cast<uLong>(chunk_bytes)), where, ": dataset '", name, "' chunk at row ", r0,
             " has an implausible stored size ", stored);
    std::vector<uint8_t> buf(stored);
    uint32_t mask = 0;
    FC_CHECK(H5Dread_chunk(ds.get(), H5P_DEFAULT, offset.data(), &mask, buf.data()) >= 0, where, ": cannot read dataset '",
             name, "' chunk at row ", r0, hdf5_reason());
    r.chunks.emplace_back(mask, std::move(buf));
  }
  return r;
}

// Inflates and unshuffles the fetched chunks into meta.bytes (no lock needed).
Array decode(RawArray r, const std::string& where) {
  if (r.chunk_rows == 0) return std::move(r.meta);
  const size_t es = elem_size(r.meta.elem);
  const size_t row_bytes = product(r.meta.dims, 1) * es, rows = static_cast<size_t>(r.meta.dims[0]);
  const size_t chunk_bytes = static_cast<size_t>(r.chunk_rows) * row_bytes;
  r.meta.bytes.resize(rows * row_bytes);
  std::vector<uint8_t> inflated(chunk_bytes), plain(chunk_bytes);
  for (size_t c = 0; c < r.chunks.size(); ++c) {
    const auto& [mask, stored] = r.chunks[c];
    const uint8_t* bytes = stored.data();
    if (!(mask & 2u)) {  // bit i set = filter i of the pipeline was skipped for this chunk
      uLongf len = static_cast<uLongf>(chunk_bytes);
      const int z = uncompress(inflated.data(), &len, stored.data(), static_cast<uLong>(stored.size()));
      FC_CHECK(z == Z_OK && len == chunk_bytes, where, ": dataset '", r.meta.name, "' chunk ", c,
               " is corrupt (inflate: ", z == Z_OK ? "wrong size" : zError(z), ")");
      bytes = inflated.data();
    } else {
      FC_CHECK(stored.size() == chunk_bytes, where, ": dataset '", r.meta.name, "' chunk ", c, " has the wrong size");
    }
    if (!(mask & 1u)) {
      unshuffle(bytes, plain.data(), chunk_bytes / es, es);
      bytes = plain.data();
    }
    const size_t r0 = c * static_cast<size_t>(r.chunk_rows);
    const size_t n = std::min(static_cast<size_t>(r.chunk_rows), rows - r0) * row_bytes;
    std::memcpy(r.meta.bytes.data() + r0 * row_bytes, bytes, n);
  }
  return std::move(r.meta);
}

template <typename T> std::vector<T> values(const Array& a) {
  std::vector<T> v(a.bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), a.bytes.data(), v.size() * sizeof(T));
  return v;
}

void expect_dims(const Array& a, const std::vector<hsize_t>& want, const std::string& where) {
  FC_CHECK(a.dims == want, where, ": dataset '", a.name, "' has an inconsistent shape");
}

// Chain datasets and their element type / rank, in the order the reader fetches them.
struct ChainDataset {
  const char* name;
  Elem elem;
  int rank;
};
constexpr ChainDataset kChainDatasets[] = {
    {"sequence", Elem::u8, 1},           {"aatype", Elem::i32, 1},
    {"residue_index", Elem::i32, 1},     {"all_atom_positions", Elem::f32, 3},
    {"all_atom_mask", Elem::f32, 2},     {"msa", Elem::i32, 2},
    {"deletion_matrix", Elem::i32, 2},   {"template_aatype", Elem::f32, 3},
    {"template_all_atom_masks", Elem::f32, 3}, {"template_all_atom_positions", Elem::f32, 4},
    {"template_sum_probs", Elem::f32, 1}, {"template_domain_names", Elem::u8, 2},
    {"template_sequence", Elem::u8, 2},  {"release_date", Elem::u8, 1},
};

// Rebuilds the chain from its decoded arrays, checking every shape against N, S and T.
TrainingChain chain_from_arrays(const std::vector<Array>& a, const std::string& where) {
  TrainingChain c;
  const hsize_t n = a[1].dims[0];
  const hsize_t s = a[5].dims[0], t = a[7].dims[0];
  expect_dims(a[0], {n}, where);
  expect_dims(a[2], {n}, where);
  expect_dims(a[3], {n, 37, 3}, where);
  expect_dims(a[4], {n, 37}, where);
  expect_dims(a[5], {s, n}, where);
  expect_dims(a[6], {s, n}, where);
  expect_dims(a[7], {t, n, 22}, where);
  expect_dims(a[8], {t, n, 37}, where);
  expect_dims(a[9], {t, n, 37, 3}, where);
  expect_dims(a[10], {t}, where);
  FC_CHECK(a[11].dims[0] == t && a[12].dims[0] == t && (t == 0 || a[12].dims[1] == n), where,
           ": template string datasets have an inconsistent shape");
  c.sequence.assign(a[0].bytes.begin(), a[0].bytes.end());
  c.aatype = values<int32_t>(a[1]);
  c.residue_index = values<int32_t>(a[2]);
  c.all_atom_positions = values<float>(a[3]);
  c.all_atom_mask = values<float>(a[4]);
  c.msa.depth = static_cast<int64_t>(s);
  c.msa.num_columns = static_cast<int64_t>(n);
  c.msa.msa = values<int32_t>(a[5]);
  c.msa.deletion_matrix = values<int32_t>(a[6]);
  const auto aat = values<float>(a[7]), masks = values<float>(a[8]), pos = values<float>(a[9]);
  const auto probs = values<float>(a[10]);
  const auto names = strings_of(a[11]), seqs = strings_of(a[12]);
  for (size_t i = 0; i < t; ++i) {
    TemplateFeatures tf;
    tf.domain_name = names[i];
    tf.sequence = seqs[i];
    tf.aatype.assign(aat.begin() + static_cast<std::ptrdiff_t>(i * n * 22), aat.begin() + static_cast<std::ptrdiff_t>((i + 1) * n * 22));
    tf.masks.assign(masks.begin() + static_cast<std::ptrdiff_t>(i * n * 37), masks.begin() + static_cast<std::ptrdiff_t>((i + 1) * n * 37));
    tf.positions.assign(pos.begin() + static_cast<std::ptrdiff_t>(i * n * 111), pos.begin() + static_cast<std::ptrdiff_t>((i + 1) * n * 111));
    tf.sum_probs = probs[i];
    c.templates.push_back(std::move(tf));
  }
  c.release_date.assign(a[13].bytes.begin(), a[13].bytes.end());
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writer

struct FeatureStoreWriter::Impl {
  std::string path, tmp;
  Hdf5Handle file, chains;
  std::vector<FeatureStoreEntry> index;
  std::set<std::string> names;
  bool finished = false;
};

FeatureStoreWriter::FeatureStoreWriter(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->tmp = path + ".tmp";
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietHdf5 quiet;
  impl_->file = Hdf5Handle(H5Fcreate(impl_->tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  FC_CHECK(impl_->file.get() >= 0, "feature store '", path, "': cannot create '", impl_->tmp, "'", hdf5_reason());
  impl_->chains = Hdf5Handle(H5Gcreate2(impl_->file.get(), "chains", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  FC_CHECK(impl_->chains.get() >= 0, "feature store '", path, "': cannot create /chains", hdf5_reason());
}

FeatureStoreWriter::~FeatureStoreWriter() {
  if (impl_->finished) return;
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    QuietHdf5 quiet;
    impl_->chains.close();
    impl_->file.close();
  }
  std::error_code ec;
  std::filesystem::remove(impl_->tmp, ec);
}

void FeatureStoreWriter::add(const TrainingChain& chain) {
  const std::string where = "feature store '" + impl_->path + "', chain '" + chain.name + "'";
  FC_CHECK(!chain.name.empty() && chain.name.find('/') == std::string::npos && chain.name != "." && chain.name != "..",
           where, ": the name must be non-empty and contain no '/'");
  chain.validate();
  // Encode outside the lock: compression is the expensive part and runs in parallel.
  FeatureStoreEntry entry{chain.name, chain.num_res(), chain.resolution, chain.release_date, chain.msa.depth,
                          static_cast<int64_t>(chain.templates.size()), 0, chain.is_distillation};
  std::vector<EncodedArray> encoded;
  for (const Array& a : chain_arrays(chain)) {
    entry.bytes += static_cast<int64_t>(a.bytes.size());
    encoded.push_back(encode(a));
  }
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  FC_CHECK(!impl_->finished, where, ": the store is already finished");
  FC_CHECK(impl_->names.insert(chain.name).second, where, ": duplicate chain name");
  QuietHdf5 quiet;
  const Hdf5Handle g(H5Gcreate2(impl_->chains.get(), chain.name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  FC_CHECK(g.get() >= 0, where, ": cannot create group", hdf5_reason());
  for (const EncodedArray& e : encoded) write_encoded(g.get(), e, where);
  write_attribute<double>(g.get(), "resolution", H5T_NATIVE_DOUBLE, chain.resolution, where);
  write_attribute<int32_t>(g.get(), "is_distillation", H5T_NATIVE_INT32, chain.is_distillation ? 1 : 0, where);
  impl_->index.push_back(entry);
}

int64_t FeatureStoreWriter::size() const {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  return static_cast<int64_t>(impl_->index.size());
}

void FeatureStoreWriter::finish() {
  const std::string where = "feature store '" + impl_->path + "'";
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    FC_CHECK(!impl_->finished, where, ": finish() called twice");
    QuietHdf5 quiet;
    const auto& ix = impl_->index;
    const hsize_t c = ix.size();
    std::vector<std::string> names, dates;
    std::vector<int64_t> num_res, depth, ntempl, bytes;
    std::vector<double> res;
    std::vector<int32_t> distill;
    for (const auto& e : ix) {
      names.push_back(e.name);
      dates.push_back(e.release_date);
      num_res.push_back(e.num_res);
      depth.push_back(e.msa_depth);
      ntempl.push_back(e.num_templates);
      bytes.push_back(e.bytes);
      res.push_back(e.resolution);
      distill.push_back(e.is_distillation ? 1 : 0);
    }
    const Hdf5Handle g(H5Gcreate2(impl_->file.get(), "index", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    FC_CHECK(g.get() >= 0, where, ": cannot create /index", hdf5_reason());
    for (const Array& a : {string_array("name", names), string_array("release_date", dates),
                           make_array("num_res", Elem::i64, num_res, {c}), make_array("msa_depth", Elem::i64, depth, {c}),
                           make_array("num_templates", Elem::i64, ntempl, {c}), make_array("bytes", Elem::i64, bytes, {c}),
                           make_array("resolution", Elem::f64, res, {c}), make_array("is_distillation", Elem::i32, distill, {c})})
      write_encoded(g.get(), encode(a), where);
    write_attribute<int32_t>(impl_->file.get(), "format_version", H5T_NATIVE_INT32, kFeatureStoreFormatVersion, where);
    impl_->chains.close();
    FC_CHECK(impl_->file.close() >= 0, where, ": cannot close '", impl_->tmp, "'", hdf5_reason());
  }
  std::error_code ec;
  std::filesystem::rename(impl_->tmp, impl_->path, ec);
  FC_CHECK(!ec, where, ": cannot rename '", impl_->tmp, "': ", ec.message());
  impl_->finished = true;
}

// ---------------------------------------------------------------------------------------------
// Reader

struct FeatureStoreReader::Impl {
  std::string path;
  Hdf5Handle file, chains;
  std::vector<FeatureStoreEntry> entries;
};

FeatureStoreReader::FeatureStoreReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  const std::string where = "feature store '" + path + "'";
  std::error_code ec;
  FC_CHECK(std::filesystem::is_regular_file(path, ec), where, ": no such file");
  std::vector<Array> ix;
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    QuietHdf5 quiet;
    FC_CHECK(H5Fis_hdf5(path.c_str()) > 0, where, ": not an HDF5 file", hdf5_reason());
    impl_->file = Hdf5Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    FC_CHECK(impl_->file.get() >= 0, where, ": cannot open (truncated or corrupt?)", hdf5_reason());
    const int version = read_attribute<int32_t>(impl_->file.get(), "format_version", H5T_NATIVE_INT32, where);
    FC_CHECK(version == kFeatureStoreFormatVersion, where, ": format version ", version, ", this build reads version ",
             kFeatureStoreFormatVersion);
    impl_->chains = Hdf5Handle(H5Gopen2(impl_->file.get(), "chains", H5P_DEFAULT), H5Gclose);
    FC_CHECK(impl_->chains.get() >= 0, where, ": missing /chains", hdf5_reason());
    const Hdf5Handle g(H5Gopen2(impl_->file.get(), "index", H5P_DEFAULT), H5Gclose);
    FC_CHECK(g.get() >= 0, where, ": missing /index", hdf5_reason());
    const std::string iw = where + " /index";
    ix.push_back(decode(fetch(g.get(), "name", Elem::u8, 2, iw), iw));
    ix.push_back(decode(fetch(g.get(), "release_date", Elem::u8, 2, iw), iw));
    for (const char* n : {"num_res", "msa_depth", "num_templates", "bytes"}) ix.push_back(decode(fetch(g.get(), n, Elem::i64, 1, iw), iw));
    ix.push_back(decode(fetch(g.get(), "resolution", Elem::f64, 1, iw), iw));
    ix.push_back(decode(fetch(g.get(), "is_distillation", Elem::i32, 1, iw), iw));
  }
  const size_t c = ix[0].dims[0];
  for (size_t i = 1; i < ix.size(); ++i)
    FC_CHECK(ix[i].dims[0] == c, where, ": index column '", ix[i].name, "' has ", ix[i].dims[0], " rows, expected ", c);
  const auto names = strings_of(ix[0]), dates = strings_of(ix[1]);
  const auto num_res = values<int64_t>(ix[2]), depth = values<int64_t>(ix[3]), nt = values<int64_t>(ix[4]),
             bytes = values<int64_t>(ix[5]);
  const auto res = values<double>(ix[6]);
  const auto distill = values<int32_t>(ix[7]);
  std::set<std::string> seen;
  for (size_t i = 0; i < c; ++i) {
    FC_CHECK(seen.insert(names[i]).second && num_res[i] > 0, where, ": bad index row ", i, " ('", names[i], "')");
    impl_->entries.push_back({names[i], num_res[i], res[i], dates[i], depth[i], nt[i], bytes[i], distill[i] != 0});
  }
}

FeatureStoreReader::~FeatureStoreReader() {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  impl_->chains.close();
  impl_->file.close();
}

const std::string& FeatureStoreReader::path() const { return impl_->path; }
const std::vector<FeatureStoreEntry>& FeatureStoreReader::entries() const { return impl_->entries; }

TrainingChain FeatureStoreReader::read(int64_t index) const {
  FC_CHECK(index >= 0 && index < size(), "feature store '", impl_->path, "': chain index ", index, " out of range (",
           size(), " chains)");
  const FeatureStoreEntry& entry = impl_->entries[static_cast<size_t>(index)];
  const std::string where = "feature store '" + impl_->path + "', chain '" + entry.name + "'";
  std::vector<RawArray> raw;
  double resolution = 0;
  int32_t distill = 0;
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    QuietHdf5 quiet;
    const Hdf5Handle g(H5Gopen2(impl_->chains.get(), entry.name.c_str(), H5P_DEFAULT), H5Gclose);
    FC_CHECK(g.get() >= 0, where, ": cannot open group", hdf5_reason());
    for (const ChainDataset& d : kChainDatasets) raw.push_back(fetch(g.get(), d.name, d.elem, d.rank, where));
    resolution = read_attribute<double>(g.get(), "resolution", H5T_NATIVE_DOUBLE, where);
    distill = read_attribute<int32_t>(g.get(), "is_distillation", H5T_NATIVE_INT32, where);
  }
  std::vector<Array> arrays;
  for (RawArray& r : raw) arrays.push_back(decode(std::move(r), where));
  TrainingChain c = chain_from_arrays(arrays, where);
  c.name = entry.name;
  c.resolution = resolution;
  c.is_distillation = distill != 0;
  FC_CHECK(c.num_res() == entry.num_res && c.msa.depth == entry.msa_depth &&
               static_cast<int64_t>(c.templates.size()) == entry.num_templates && c.resolution == entry.resolution &&
               c.release_date == entry.release_date && c.is_distillation == entry.is_distillation,
           where, ": the chain does not match its index row");
  try {
    c.validate();
  } catch (const Error& e) {
    FC_THROW(where, ": invalid chain: ", e.what());
  }
  return c;
}

}  // namespace foldcore::data
