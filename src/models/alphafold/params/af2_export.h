// Writing a model's parameters as an official AlphaFold2 parameter file (params_<model>.npz):
// every key under kAf2Prefix, stacked per-block arrays (block on axis 0), and AlphaFold's own
// array shapes where ours are flattened views of them — attention projections [c, H, d],
// output_w [H, d, c], gating_b [H, d], outer-product-mean output_w [c, c, c_z]. The inverse of
// load_af2_params, so `foldcore predict` / `run_features` (which infer the architecture from these
// shapes) use trained weights directly.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/alphafold/model/config.h"
#include "models/alphafold/params/param_table.h"

namespace foldcore::af2 {

// Official shape of every key of `table` (full keys, with kAf2Prefix) for a model built from
// `config`. Throws foldcore::Error for an attention key of a module this file does not know.
std::map<std::string, std::vector<int64_t>> af2_official_shapes(const Af2ParamTable& table, const Af2Config& config);

// Writes the table's current values to `path` (.npz, f32, official keys and shapes), through a
// temporary name renamed into place. Returns the number of arrays written.
size_t export_af2_params(const Af2ParamTable& table, const Af2Config& config, const std::string& path);

}  // namespace foldcore::af2
