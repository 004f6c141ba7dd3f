#include "models/alphafold/params/af2_export.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "core/error.h"
#include "data_pipeline/formats/npy.h"

namespace foldcore::af2 {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The Evoformer-style stack a key belongs to.
const EvoformerBlockConfig* stack_of(const std::string& key, const Af2Config& c) {
  if (contains(key, "evoformer/extra_msa_stack/")) return &c.extra_msa;
  if (contains(key, "evoformer/evoformer_iteration/")) return &c.evoformer;
  return nullptr;
}

// Heads and head width of the attention module `key` belongs to.
const AttentionConfig& attention_of(const std::string& key, const Af2Config& c) {
  if (contains(key, "template_pair_stack/") && contains(key, "triangle_attention_")) return c.templates.tri_att;
  if (contains(key, "template_embedding/attention//")) return c.templates.pointwise_att;
  const EvoformerBlockConfig* b = stack_of(key, c);
  FC_CHECK(b != nullptr, "export: no attention configuration known for parameter '", key, "'");
  if (contains(key, "msa_row_attention")) return b->msa_row;
  if (contains(key, "msa_column")) return b->msa_column;
  if (contains(key, "triangle_attention_")) return b->tri_att;
  FC_THROW("export: no attention configuration known for parameter '", key, "'");
}

int64_t divide(int64_t a, int64_t b, const std::string& key) {
  FC_CHECK(b > 0 && a % b == 0, "export: parameter '", key, "' has ", a, " elements, not a multiple of ", b);
  return a / b;
}

// The per-block official shape of one key given our (flattened) per-block tensor shape.
std::vector<int64_t> official_block_shape(const std::string& key, const std::vector<int64_t>& ours, const Af2Config& c) {
  int64_t numel = 1;
  for (int64_t v : ours) numel *= v;
  static const char* kSplit[] = {"//query_w", "//key_w", "//value_w", "//gating_w"};
  if (contains(key, "/attention//")) {  // haiku Attention / GlobalAttention modules
    const AttentionConfig& a = attention_of(key, c);
    const int64_t hd = a.num_head * a.head_dim;
    // Global column attention shares one key/value head: [c, d], as ours.
    if (contains(key, "global_attention") && (ends_with(key, "//key_w") || ends_with(key, "//value_w"))) return ours;
    for (const char* s : kSplit)
      if (ends_with(key, s)) return {divide(numel, hd, key), a.num_head, a.head_dim};
    if (ends_with(key, "//gating_b")) return {a.num_head, a.head_dim};
    if (ends_with(key, "//output_w")) return {a.num_head, a.head_dim, divide(numel, hd, key)};
    return ours;
  }
  if (contains(key, "outer_product_mean//output_w")) {
    const EvoformerBlockConfig* b = stack_of(key, c);
    FC_CHECK(b != nullptr, "export: no outer-product-mean configuration known for parameter '", key, "'");
    const int64_t ch = b->opm_channels;
    return {ch, ch, divide(numel, ch * ch, key)};
  }
  return ours;
}

}  // namespace

std::map<std::string, std::vector<int64_t>> af2_official_shapes(const Af2ParamTable& table, const Af2Config& config) {
  std::map<std::string, int64_t> blocks;
  std::map<std::string, std::vector<int64_t>> out;
  for (const Af2ParamEntry& e : table.entries()) {
    const std::string& key = e.key;  // full official key
    out[key] = official_block_shape(key, e.target.shape().vec(), config);
    if (e.stack_index >= 0) blocks[key] = std::max(blocks[key], e.stack_index + 1);
  }
  for (const auto& [key, n] : blocks) out[key].insert(out[key].begin(), n);
  return out;
}

size_t export_af2_params(const Af2ParamTable& table, const Af2Config& config, const std::string& path) {
  const auto shapes = af2_official_shapes(table, config);
  std::map<std::string, Tensor> arrays;
  for (const auto& [key, shape] : shapes) arrays[key] = Tensor::zeros(Shape(shape), DType::f32);
  for (const Af2ParamEntry& e : table.entries()) {
    Tensor& a = arrays.at(e.key);
    Tensor dst = e.stack_index >= 0 ? a.select(0, e.stack_index) : a;
    FC_CHECK(dst.numel() == e.target.numel(), "export: parameter '", e.key, "' ", dst.shape().str(),
             " does not fit the model's ", e.target.shape().str());
    dst.copy_(e.target.to(Device::cpu()).to(DType::f32).contiguous().reshape(dst.shape()));
  }
  std::vector<std::pair<std::string, data::NpyArray>> out;
  for (const auto& [key, t] : arrays) out.emplace_back(key, data::NpyArray::from_tensor(t));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    data::write_npz(tmp, out, /*compress=*/false);
    std::filesystem::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  return out.size();
}

}  // namespace foldcore::af2
