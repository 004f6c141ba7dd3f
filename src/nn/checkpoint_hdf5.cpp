// HDF5 checkpoints through the HDF5 C API (layout in nn/checkpoint.h). All HDF5 handles are
// owned by Hdf5Handle (RAII, nn/hdf5_util.h); HDF5's own error printing is silenced while we run and its error stack
// is folded into our Error messages instead.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "nn/checkpoint.h"
#include "nn/hdf5_util.h"

namespace foldcore::nn {

bool checkpoint_supported() { return true; }

namespace {

// ---------------------------------------------------------------- HDF5 plumbing

// The outermost and innermost descriptions of the current HDF5 error stack, then clears it.
std::string hdf5_error_text() {
  const std::vector<std::string> lines = take_hdf5_error_stack();
  if (lines.empty()) return "";
  if (lines.size() == 1) return " (HDF5: " + lines.front() + ")";
  return " (HDF5: " + lines.front() + ": " + lines.back() + ")";
}

template <typename... Args> Hdf5Handle checked(hid_t id, Hdf5Handle::Closer closer, Args&&... what) {
  if (id < 0) FC_THROW(std::forward<Args>(what)..., hdf5_error_text());
  return Hdf5Handle(id, closer);
}
template <typename... Args> void check_status(herr_t s, Args&&... what) {
  if (s < 0) FC_THROW(std::forward<Args>(what)..., hdf5_error_text());
}

// IEEE binary16, built as h5py builds numpy float16 when the library has no native half type.
Hdf5Handle half_type() {
#ifdef H5T_NATIVE_FLOAT16
  return checked(H5Tcopy(H5T_NATIVE_FLOAT16), H5Tclose, "cannot copy the half type");
#else
  Hdf5Handle t = checked(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "cannot copy the float type");
  check_status(H5Tset_fields(t.get(), 15, 10, 5, 0, 10), "cannot build the half type");
  check_status(H5Tset_size(t.get(), 2), "cannot build the half type");
  check_status(H5Tset_ebias(t.get(), 15), "cannot build the half type");
  return t;
#endif
}

// The in-memory (and on-disk) HDF5 type of a dtype, and the "foldcore_dtype" tag it needs.
Hdf5Handle type_of(DType d) {
  switch (d) {
    case DType::f32: return checked(H5Tcopy(H5T_NATIVE_FLOAT), H5Tclose, "H5Tcopy");
    case DType::bf16: return checked(H5Tcopy(H5T_NATIVE_UINT16), H5Tclose, "H5Tcopy");
    case DType::f16: return half_type();
    case DType::i32: return checked(H5Tcopy(H5T_NATIVE_INT32), H5Tclose, "H5Tcopy");
    case DType::i64: return checked(H5Tcopy(H5T_NATIVE_INT64), H5Tclose, "H5Tcopy");
    case DType::u8: return checked(H5Tcopy(H5T_NATIVE_UINT8), H5Tclose, "H5Tcopy");
  }
  FC_THROW("checkpoint: unsupported dtype");
}
const char* dtype_tag(DType d) {
  if (d == DType::bf16) return "bf16";
  if (d == DType::f16) return "f16";
  return nullptr;
}

// ---------------------------------------------------------------- attributes

Hdf5Handle utf8_string_type() {
  Hdf5Handle t = checked(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
  check_status(H5Tset_size(t.get(), H5T_VARIABLE), "H5Tset_size");
  check_status(H5Tset_cset(t.get(), H5T_CSET_UTF8), "H5Tset_cset");
  return t;
}

void write_string_attr(hid_t obj, const char* name, const std::string& value) {
  Hdf5Handle type = utf8_string_type();
  Hdf5Handle space = checked(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate");
  Hdf5Handle attr = checked(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                        "cannot create attribute '", name, "'");
  const char* ptr = value.c_str();
  check_status(H5Awrite(attr.get(), type.get(), &ptr), "cannot write attribute '", name, "'");
}

template <typename T> void write_scalar_attr(hid_t obj, const char* name, hid_t type, T value) {
  Hdf5Handle space = checked(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate");
  Hdf5Handle attr = checked(H5Acreate2(obj, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                        "cannot create attribute '", name, "'");
  check_status(H5Awrite(attr.get(), type, &value), "cannot write attribute '", name, "'");
}

bool has_attr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

// Reads a string attribute stored either as a variable- or a fixed-length string.
std::string read_string_attr(hid_t obj, const char* name) {
  Hdf5Handle attr = checked(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose, "cannot open attribute '", name, "'");
  Hdf5Handle ftype = checked(H5Aget_type(attr.get()), H5Tclose, "H5Aget_type");
  FC_CHECK(H5Tget_class(ftype.get()) == H5T_STRING, "attribute '", name, "' is not a string");
  if (H5Tis_variable_str(ftype.get()) > 0) {
    Hdf5Handle mtype = utf8_string_type();
    char* ptr = nullptr;
    check_status(H5Aread(attr.get(), mtype.get(), &ptr), "cannot read attribute '", name, "'");
    std::string s = ptr ? ptr : "";
    H5free_memory(ptr);
    return s;
  }
  const size_t n = H5Tget_size(ftype.get());
  std::string s(n, '\0');
  check_status(H5Aread(attr.get(), ftype.get(), s.data()), "cannot read attribute '", name, "'");
  return s.substr(0, s.find('\0'));
}

template <typename T> T read_scalar_attr(hid_t obj, const char* name, hid_t type) {
  Hdf5Handle attr = checked(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose, "cannot open attribute '", name, "'");
  T value{};
  check_status(H5Aread(attr.get(), type, &value), "cannot read attribute '", name, "'");
  return value;
}

// ---------------------------------------------------------------- names

// Names become HDF5 paths: non-empty '/'-separated components, none empty, "." or "..".
void check_name(const std::string& name, const char* what, bool allow_slash) {
  FC_CHECK(!name.empty(), "checkpoint: empty ", what, " name");
  size_t start = 0;
  while (true) {
    const size_t end = name.find('/', start);
    const std::string part = name.substr(start, end == std::string::npos ? std::string::npos : end - start);
    FC_CHECK(!part.empty() && part != "." && part != "..", "checkpoint: invalid ", what, " name '", name,
             "' (components must be non-empty and not '.' or '..')");
    if (end == std::string::npos) break;
    FC_CHECK(allow_slash, "checkpoint: ", what, " name '", name, "' must not contain '/'");
    start = end + 1;
  }
}

// ---------------------------------------------------------------- datasets

void write_dataset(hid_t file, hid_t lcpl, const std::string& path, const Tensor& t) {
  FC_CHECK(t.defined(), "checkpoint entry '", path, "': the tensor is undefined");
  const Tensor host = t.to(Device::cpu()).contiguous();
  std::vector<hsize_t> dims(host.shape().begin(), host.shape().end());
  Hdf5Handle space = dims.empty() ? checked(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate")
                              : checked(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                        H5Sclose, "entry '", path, "': cannot create dataspace");
  Hdf5Handle type = type_of(host.dtype());
  Hdf5Handle dset = checked(H5Dcreate2(file, path.c_str(), type.get(), space.get(), lcpl, H5P_DEFAULT, H5P_DEFAULT),
                        H5Dclose, "checkpoint entry '", path, "': cannot create dataset");
  if (host.numel() > 0)
    check_status(H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data_ptr()),
                 "checkpoint entry '", path, "': cannot write ", host.str());
  if (const char* tag = dtype_tag(host.dtype())) write_string_attr(dset.get(), "foldcore_dtype", tag);
}

struct StoredInfo {
  Shape shape;
  DType dtype = DType::f32;
};

// Shape and foldcore dtype of a stored dataset; an unsupported type is an Error naming the entry.
StoredInfo stored_info(hid_t dset, const std::string& path) {
  StoredInfo info;
  Hdf5Handle space = checked(H5Dget_space(dset), H5Sclose, "entry '", path, "': H5Dget_space");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  FC_CHECK(rank >= 0 && rank <= kMaxDims, "checkpoint entry '", path, "': unsupported rank ", rank);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  for (hsize_t d : dims) info.shape.push_back(static_cast<int64_t>(d));

  Hdf5Handle type = checked(H5Dget_type(dset), H5Tclose, "entry '", path, "': H5Dget_type");
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  const std::string tag = has_attr(dset, "foldcore_dtype") ? read_string_attr(dset, "foldcore_dtype") : "";
  if (cls == H5T_FLOAT && size == 4) {
    info.dtype = DType::f32;
  } else if (cls == H5T_FLOAT && size == 2) {
    info.dtype = DType::f16;
  } else if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type.get()) == H5T_SGN_2;
    if (size == 2 && !is_signed && tag == "bf16") info.dtype = DType::bf16;
    else if (size == 2 && !is_signed && tag == "f16") info.dtype = DType::f16;
    else if (size == 1 && !is_signed) info.dtype = DType::u8;
    else if (size == 4 && is_signed) info.dtype = DType::i32;
    else if (size == 8 && is_signed) info.dtype = DType::i64;
    else FC_THROW("checkpoint entry '", path, "': unsupported stored type (", is_signed ? "signed" : "unsigned",
                  " ", size * 8, "-bit integer", tag.empty() ? "" : ", foldcore_dtype=" + tag, ")");
  } else {
    FC_THROW("checkpoint entry '", path, "': unsupported stored type (HDF5 class ", static_cast<int>(cls), ", ",
             size, " bytes)");
  }
  return info;
}

// Reads a dataset whose shape and dtype were already checked against `t` into `t`.
void read_dataset(hid_t file, const std::string& path, const Tensor& t) {
  Hdf5Handle dset = checked(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose, "cannot open entry '", path, "'");
  if (t.numel() == 0) return;
  const bool direct = t.device().is_cpu() && t.is_contiguous();
  const Tensor host = direct ? t : Tensor::empty(t.shape(), t.dtype());
  Hdf5Handle type = type_of(t.dtype());
  check_status(H5Dread(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data_ptr()),
               "cannot read entry '", path, "'");
  if (!direct) copy_tensor(t, host);
}

// Datasets under `group` (relative paths, nested groups walked), or none when it is absent.
std::set<std::string> list_datasets(hid_t file, const char* group) {
  std::set<std::string> out;
  if (H5Lexists(file, group, H5P_DEFAULT) <= 0) return out;
  Hdf5Handle g = checked(H5Gopen2(file, group, H5P_DEFAULT), H5Gclose, "cannot open group '", group, "'");
  check_status(H5Lvisit(
                   g.get(), H5_INDEX_NAME, H5_ITER_INC,
                   [](hid_t gid, const char* name, const H5L_info_t*, void* data) -> herr_t {
                     const hid_t obj = H5Oopen(gid, name, H5P_DEFAULT);
                     if (obj < 0) return -1;
                     if (H5Iget_type(obj) == H5I_DATASET) static_cast<std::set<std::string>*>(data)->insert(name);
                     H5Oclose(obj);
                     return 0;
                   },
                   &out),
               "cannot list group '", group, "'");
  return out;
}

// ---------------------------------------------------------------- files

Hdf5Handle open_for_read(const std::string& path) {
  std::error_code ec;
  FC_CHECK(std::filesystem::is_regular_file(path, ec), "checkpoint '", path, "': no such file");
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) {
    hdf5_error_text();  // clear
    FC_THROW("checkpoint '", path, "': not an HDF5 file (foreign, truncated or corrupt)");
  }
  Hdf5Handle file = checked(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "checkpoint '", path,
                        "': cannot open (truncated or corrupt?)");
  FC_CHECK(has_attr(file.get(), "format_version"), "checkpoint '", path,
           "': not a foldcore checkpoint (no 'format_version' attribute)");
  return file;
}

void read_header(hid_t file, const std::string& path, int& version, int64_t& step, std::string& meta) {
  version = read_scalar_attr<int32_t>(file, "format_version", H5T_NATIVE_INT32);
  FC_CHECK(version >= 1 && version <= kCheckpointFormatVersion, "checkpoint '", path, "': format version ", version,
           " is not supported (this build reads 1..", kCheckpointFormatVersion, ")");
  step = has_attr(file, "step") ? read_scalar_attr<int64_t>(file, "step", H5T_NATIVE_INT64) : 0;
  meta = has_attr(file, "meta") ? read_string_attr(file, "meta") : "";
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) {
    FC_CHECK(directory, "cannot reopen '", path, "' to flush it: ", std::strerror(errno));
    return;  // a directory we cannot open: its entry will still reach disk eventually
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  FC_CHECK(rc == 0 || directory, "cannot flush '", path, "' to disk: ", std::strerror(err));
}

void write_file(const std::string& tmp, const CheckpointData& data) {
  Hdf5Handle file = checked(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose,
                        "cannot create '", tmp, "'");
  Hdf5Handle lcpl = checked(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "H5Pcreate");
  check_status(H5Pset_create_intermediate_group(lcpl.get(), 1), "H5Pset_create_intermediate_group");
  write_scalar_attr<int32_t>(file.get(), "format_version", H5T_NATIVE_INT32, kCheckpointFormatVersion);
  write_scalar_attr<int64_t>(file.get(), "step", H5T_NATIVE_INT64, data.step);
  write_string_attr(file.get(), "meta", data.meta);
  for (const char* g : {"params", "optimizer"})
    checked(H5Gcreate2(file.get(), g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose, "cannot create group ", g);
  for (const auto& [name, t] : data.params) write_dataset(file.get(), lcpl.get(), "params/" + name, t);
  for (const auto& [state, tensors] : data.optimizer)
    for (const auto& [name, t] : tensors)
      write_dataset(file.get(), lcpl.get(), "optimizer/" + state + "/" + name, t);
  check_status(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "cannot flush '", tmp, "'");
  check_status(file.close(), "cannot close '", tmp, "'");
}

// Expected entries vs the file: every problem (missing, extra, wrong shape/dtype) in one Error.
void check_entries(hid_t file, const std::string& prefix, const TensorMap& expected,
                   const std::set<std::string>& present, bool allow_extra, std::vector<std::string>& problems) {
  for (const auto& [name, t] : expected) {
    const std::string path = prefix + name;
    if (!present.count(name)) {
      problems.push_back("missing entry '" + path + "' (expected " + t.shape().str() + " " +
                         std::string(dtype_name(t.dtype())) + ")");
      continue;
    }
    Hdf5Handle dset = checked(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose, "cannot open entry '", path, "'");
    const StoredInfo info = stored_info(dset.get(), path);
    if (!(info.shape == t.shape()) || info.dtype != t.dtype())
      problems.push_back("entry '" + path + "' is " + info.shape.str() + " " + std::string(dtype_name(info.dtype)) +
                         " in the file, expected " + t.shape().str() + " " + std::string(dtype_name(t.dtype())));
  }
  if (allow_extra) return;
  for (const std::string& name : present)
    if (!expected.count(name)) problems.push_back("unexpected entry '" + prefix + name + "' in the file");
}

}  // namespace

namespace {
// save_checkpoint's temporary for `path`: "<path>.tmp.<pid>", this process's (the leftovers of others
// are recognised by the same name).
constexpr const char* kTemporaryInfix = ".tmp.";
std::string own_temporary(const std::string& path) { return path + kTemporaryInfix + std::to_string(::getpid()); }
}  // namespace

std::vector<std::string> remove_checkpoint_leftovers(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const std::string prefix = p.filename().string() + kTemporaryInfix;
  const std::string own = fs::path(own_temporary(path)).filename().string();
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 || name == own) continue;
    if (name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) removed.push_back(it->path().string());
  }
  return removed;
}

void save_checkpoint(const std::string& path, const CheckpointData& data) {
  with_context("while saving checkpoint '" + path + "'", [&] {
    for (const auto& [name, t] : data.params) check_name(name, "parameter", true);
    for (const auto& [state, tensors] : data.optimizer) {
      check_name(state, "optimizer state", false);
      for (const auto& [name, t] : tensors) check_name(name, "optimizer entry", true);
    }
    const QuietHdf5 quiet;
    const std::string tmp = own_temporary(path);
    try {
      write_file(tmp, data);
      fsync_path(tmp, false);
      if (std::rename(tmp.c_str(), path.c_str()) != 0)
        FC_THROW("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno));
    } catch (...) {
      std::remove(tmp.c_str());  // never leave a partial file behind
      throw;
    }
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    fsync_path(parent.empty() ? "." : parent.string(), true);  // make the rename durable
  });
}

void load_checkpoint(const std::string& path, CheckpointData& into, const LoadOptions& options) {
  with_context("while loading checkpoint '" + path + "'", [&] {
    const QuietHdf5 quiet;
    Hdf5Handle file = open_for_read(path);
    int version = 0;
    read_header(file.get(), path, version, into.step, into.meta);

    // Check everything before copying anything, so a mismatch leaves `into` untouched.
    std::vector<std::string> problems;
    check_entries(file.get(), "params/", into.params, list_datasets(file.get(), "params"), options.allow_extra,
                  problems);
    if (!options.params_only) {
      std::map<std::string, std::set<std::string>> states;  // the file's optimizer entries by state
      for (const std::string& p : list_datasets(file.get(), "optimizer")) {
        const size_t slash = p.find('/');
        if (slash == std::string::npos) states[""].insert(p);
        else states[p.substr(0, slash)].insert(p.substr(slash + 1));
      }
      for (const auto& [state, tensors] : into.optimizer)
        check_entries(file.get(), "optimizer/" + state + "/", tensors, states[state], options.allow_extra, problems);
      if (!options.allow_extra)
        for (const auto& [state, names] : states)
          if (!into.optimizer.count(state))
            for (const std::string& name : names)
              problems.push_back("unexpected entry 'optimizer/" + (state.empty() ? "" : state + "/") + name +
                                 "' in the file");
    }
    if (!problems.empty()) {
      std::string msg = "checkpoint '" + path + "' does not match: " + std::to_string(problems.size()) + " problem(s)";
      const size_t shown = std::min<size_t>(problems.size(), 12);
      for (size_t i = 0; i < shown; ++i) msg += "\n  " + problems[i];
      if (shown < problems.size()) msg += "\n  …";
      throw Error(msg);
    }
    for (const auto& [name, t] : into.params) read_dataset(file.get(), "params/" + name, t);
    if (!options.params_only)
      for (const auto& [state, tensors] : into.optimizer)
        for (const auto& [name, t] : tensors) read_dataset(file.get(), "optimizer/" + state + "/" + name, t);
  });
}

CheckpointSummary inspect_checkpoint(const std::string& path) {
  return with_context("while inspecting checkpoint '" + path + "'", [&] {
    const QuietHdf5 quiet;
    Hdf5Handle file = open_for_read(path);
    CheckpointSummary s;
    read_header(file.get(), path, s.format_version, s.step, s.meta);
    for (const char* group : {"params", "optimizer"}) {
      for (const std::string& name : list_datasets(file.get(), group)) {
        const std::string p = std::string(group) + "/" + name;
        Hdf5Handle dset =
            checked(H5Dopen2(file.get(), p.c_str(), H5P_DEFAULT), H5Dclose, "cannot open entry '", p, "'");
        const StoredInfo info = stored_info(dset.get(), p);
        s.entries.push_back({p, info.shape, info.dtype});
      }
    }
    return s;
  });
}

}  // namespace foldcore::nn
