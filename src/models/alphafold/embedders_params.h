// Registering nn layers under their official AlphaFold2 keys (shared by the embedders, the
// template embedder and the heads). A key is "<module path>//<name>": Linear → weights, bias;
// LayerNorm → scale, offset; attention → query_w, key_w, value_w, gating_w, gating_b, output_w,
// output_b. Our Linear weights are [in, out] like AF2's, so the loader maps arrays by reshape.
// Call after the ParamStore is finalized: the registered targets are the parameters' views of
// the flat buffer.
#pragma once

#include <string>

#include "models/alphafold/param_table.h"
#include "nn/attention.h"

namespace foldcore::af2::embedders_detail {

inline const Tensor& param_value(const nn::Variable& v, const std::string& key) {
  FC_CHECK(v.defined(), "add_af2_params('", key, "'): parameter has no value (finalize the ParamStore first)");
  return v.value();
}

inline void add_linear(Af2ParamTable& t, const std::string& key, const nn::Linear& l, int64_t stack_index = -1) {
  t.add(key + "//weights", param_value(l.weight(), key), stack_index);
  if (l.bias().defined()) t.add(key + "//bias", param_value(l.bias(), key), stack_index);
}

inline void add_layer_norm(Af2ParamTable& t, const std::string& key, const nn::LayerNorm& ln,
                           int64_t stack_index = -1) {
  t.add(key + "//scale", param_value(ln.scale(), key), stack_index);
  t.add(key + "//offset", param_value(ln.offset(), key), stack_index);
}

// nn::Attention's children are q, k, v, (gate), output; official names per child parameter.
inline void add_attention(Af2ParamTable& t, const std::string& key, const nn::Attention& a,
                          int64_t stack_index = -1) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"/q/weight", "query_w"},   {"/k/weight", "key_w"},     {"/v/weight", "value_w"},
      {"/gate/weight", "gating_w"}, {"/gate/bias", "gating_b"}, {"/output/weight", "output_w"},
      {"/output/bias", "output_b"}, {"/q/bias", "query_b"},   {"/k/bias", "key_b"},
      {"/v/bias", "value_b"}};
  for (const auto& [name, var] : a.named_parameters()) {
    bool found = false;
    for (const auto& [suffix, official] : kNames) {
      if (name == (a.path().empty() ? std::string(suffix + 1) : a.path() + suffix)) {
        t.add(key + "//" + official, param_value(var, key), stack_index);
        found = true;
        break;
      }
    }
    FC_CHECK(found, "add_af2_params('", key, "'): attention parameter '", name, "' has no official name");
  }
}

}  // namespace foldcore::af2::embedders_detail
