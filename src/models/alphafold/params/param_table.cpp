#include "models/alphafold/params/param_table.h"

#include <map>
#include <set>

#include "data_pipeline/formats/npy.h"

namespace foldcore::af2 {

void Af2ParamTable::add(const std::string& key, const Tensor& target, int64_t stack_index) {
  FC_CHECK(target.defined(), "AlphaFold parameter table: undefined target for key '", key, "'");
  FC_CHECK(target.dtype() == DType::f32, "AlphaFold parameter table: target of '", key, "' is ",
           dtype_name(target.dtype()), ", expected f32 master weights");
  entries_.push_back({kAf2Prefix + key, stack_index, target});
}

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}
}  // namespace

size_t load_af2_params(const Af2ParamTable& table, const std::string& npz_path, const Af2LoadOptions& options) {
  return with_context("loading AlphaFold parameters from " + npz_path, [&]() -> size_t {
    data::NpzReader npz(npz_path);
    // Group the entries by key so every array is read (and decompressed) once.
    std::map<std::string, std::vector<const Af2ParamEntry*>> by_key;
    for (const Af2ParamEntry& e : table.entries()) by_key[e.key].push_back(&e);
    for (const auto& [key, users] : by_key)
      FC_CHECK(npz.contains(key), "parameter '", key, "' is missing from the file");
    if (!options.allow_unused) {
      for (const std::string& name : npz.names())
        FC_CHECK(by_key.count(name), "the file has parameter '", name, "', which this model does not use");
    }
    for (const auto& [key, users] : by_key) {
      const data::NpyArray arr = npz.read(key);
      FC_CHECK(arr.dtype.kind == 'f', "parameter '", key, "' has dtype ", arr.dtype.descr(), ", expected float");
      const bool stacked = users.front()->stack_index >= 0;
      std::set<int64_t> seen;
      for (const Af2ParamEntry* e : users) {
        FC_CHECK((e->stack_index >= 0) == stacked, "parameter '", key,
                 "' is claimed both as a stacked and as a single array");
        FC_CHECK(!stacked || seen.insert(e->stack_index).second, "block ", e->stack_index, " of parameter '", key,
                 "' is claimed twice");
      }
      FC_CHECK(stacked || users.size() == 1, "parameter '", key, "' is claimed ", users.size(), " times");
      Tensor full = arr.to_tensor();  // f32 (f64 converted), C order, CPU
      if (full.dtype() != DType::f32) full = full.to(DType::f32);
      if (stacked) {
        FC_CHECK(!arr.shape.empty(), "stacked parameter '", key, "' is a scalar");
        FC_CHECK(static_cast<int64_t>(seen.size()) == arr.shape[0], "parameter '", key, "' stacks ", arr.shape[0],
                 " blocks but the model has ", seen.size(), " (shape ", shape_str(arr.shape), ")");
      }
      for (const Af2ParamEntry* e : users) {
        Tensor src = full;
        std::vector<int64_t> src_shape = arr.shape;
        if (stacked) {
          FC_CHECK(e->stack_index < arr.shape[0], "block ", e->stack_index, " of parameter '", key,
                   "' is beyond its ", arr.shape[0], " blocks");
          src = full.select(0, e->stack_index);
          src_shape.erase(src_shape.begin());
        }
        FC_CHECK(src.numel() == e->target.numel(), "parameter '", key, "' has shape ", shape_str(arr.shape),
                 stacked ? " (per block " + shape_str(src_shape) + ")" : std::string(), " but the model expects ",
                 e->target.shape().str());
        copy_tensor(e->target, src.reshape(e->target.shape()));
      }
    }
    return by_key.size();
  });
}

}  // namespace foldcore::af2
