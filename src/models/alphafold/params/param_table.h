// Loading AlphaFold2's official parameter files (params_<model>.npz) into our modules.
//
// Each AlphaFold module registers, for every one of its parameters, the official key it comes
// from — "alphafold/alphafold_iteration/evoformer/evoformer_iteration/msa_transition/transition1//weights"
// — and, for the stacked per-block arrays (leading axis = block), its block index. Our tensors
// have AlphaFold's C-order layout (Linear weights [in, out]), so an official array maps onto
// its target by reshape alone: query_w [c_m, H, c] → [c_m, H·c], output_w [H, c, c_m] → [H·c, c_m],
// gating_b [H, c] → [H·c]. The loader checks that each array's (per-block) shape has the same
// number of elements as its target, and that every key in the file is claimed exactly once.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace foldcore::af2 {

// The common prefix of every official key.
inline const std::string kAf2Prefix = "alphafold/alphafold_iteration/";

struct Af2ParamEntry {
  std::string key;            // full official key
  int64_t stack_index = -1;   // block index into a stacked array, or -1
  Tensor target;              // our parameter (f32, any device)
};

class Af2ParamTable {
 public:
  // `key` is the official key without kAf2Prefix, e.g. "evoformer/evoformer_iteration/msa_transition/transition1//weights".
  void add(const std::string& key, const Tensor& target, int64_t stack_index = -1);
  const std::vector<Af2ParamEntry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<Af2ParamEntry> entries_;
};

struct Af2LoadOptions {
  // Keys present in the file but claimed by no module: an Error unless allowed (e.g. loading a
  // ptm file into a model without the PAE head).
  bool allow_unused = false;
};

// Copies every entry's array (sliced at stack_index for stacked arrays) into its target.
// Errors (foldcore::Error naming the file and the key): a key missing from the file, a key in
// the file nobody claimed (unless allowed), an element-count mismatch (both shapes given), a
// stack index beyond the array's leading axis, a block of a stacked array claimed twice or not
// at all, a non-float array. Returns the number of arrays read.
size_t load_af2_params(const Af2ParamTable& table, const std::string& npz_path, const Af2LoadOptions& options = {});

}  // namespace foldcore::af2
