// Checkpoints: named tensors (parameters and optimizer state) in one HDF5 file, readable with
// h5py. Layout:
//   /params/<name>               one dataset per parameter; '/' in a name makes nested groups
//                                ("evoformer/block_0/msa_row/q/weight")
//   /optimizer/<state>/<name>    optimizer state ("m", "v", …) by the same names
//   root attributes              "format_version" (i32), "step" (i64), "meta" (JSON string)
// Datasets keep shape and dtype: f32, i32, i64, u8 natively; f16 as an IEEE binary16 float type
// (h5py reads float16); bf16 as uint16 with the attribute "foldcore_dtype" = "bf16" (f16 also
// carries "foldcore_dtype" = "f16"). CUDA tensors are copied to the host first.
//
// Saving writes "<path>.tmp.<pid>", flushes it to disk and rename(2)s it over `path`, so a failure
// leaves no partial file and any previous checkpoint intact. Loading copies into existing tensors
// (any device, any strides) after checking names, shapes and dtypes; every mismatch is an Error
// naming the file, the entry and both shapes/dtypes.
//
// Needs a build with HDF5 (FOLDCORE_HAVE_HDF5); without it every function throws a clear Error.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace foldcore::nn {

constexpr int kCheckpointFormatVersion = 1;

using TensorMap = std::map<std::string, Tensor>;

struct CheckpointData {
  TensorMap params;
  std::map<std::string, TensorMap> optimizer;  // state name ("m", "v") → tensors by parameter name
  int64_t step = 0;
  std::string meta = "{}";  // free-form JSON (config, git hash, data position…)
};

// True when this build can read and write checkpoints.
bool checkpoint_supported();

void save_checkpoint(const std::string& path, const CheckpointData& data);

// save_checkpoint writes "<path>.tmp.<pid>" and renames it to `path`; a writer killed during the
// write (SIGKILL, a node lost) leaves that temporary behind, as large as a checkpoint. Removes
// every such file beside `path` but this process's own and returns their paths. For the one
// writer of a run folder, when it starts.
std::vector<std::string> remove_checkpoint_leftovers(const std::string& path);

struct LoadOptions {
  bool allow_extra = false;  // entries in the file that `into` does not name are ignored
  bool params_only = false;  // skip /optimizer entirely (e.g. inference from a training checkpoint)
};
// Fills the tensors of `into` (which must already have the right shapes and dtypes) and sets
// into.step and into.meta from the file.
void load_checkpoint(const std::string& path, CheckpointData& into, const LoadOptions& options = {});

// What a checkpoint holds, without loading data: one entry per dataset.
struct CheckpointEntry {
  std::string path;  // "params/<name>" or "optimizer/<state>/<name>"
  Shape shape;
  DType dtype = DType::f32;
};
struct CheckpointSummary {
  int format_version = 0;
  int64_t step = 0;
  std::string meta;
  std::vector<CheckpointEntry> entries;  // sorted by path
};
CheckpointSummary inspect_checkpoint(const std::string& path);

}  // namespace foldcore::nn
