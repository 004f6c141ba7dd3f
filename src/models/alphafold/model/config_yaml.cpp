// YAML ⇄ Af2Config. One visitor lists every field with its dotted key; the reader, the writer and
// the key list all walk it, so a field added to config.h needs one line here and nothing else.
#include "models/alphafold/model/config_yaml.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"

namespace foldcore::af2 {
namespace {

template <typename V> void visit_attention(V& v, const std::string& p, AttentionConfig& a) {
  v(p + ".num_head", a.num_head);
  v(p + ".head_dim", a.head_dim);
  v(p + ".gating", a.gating);
  v(p + ".dropout", a.dropout);
}

template <typename V> void visit_block(V& v, const std::string& p, EvoformerBlockConfig& b) {
  v(p + ".c_m", b.c_m);
  v(p + ".c_z", b.c_z);
  visit_attention(v, p + ".msa_row", b.msa_row);
  visit_attention(v, p + ".msa_column", b.msa_column);
  v(p + ".msa_transition_factor", b.msa_transition_factor);
  v(p + ".opm_channels", b.opm_channels);
  v(p + ".tri_mul_channels", b.tri_mul_channels);
  v(p + ".tri_mul_dropout", b.tri_mul_dropout);
  visit_attention(v, p + ".tri_att", b.tri_att);
  v(p + ".pair_transition_factor", b.pair_transition_factor);
  v(p + ".global_column_attention", b.global_column_attention);
}

// An integer field that also takes the word `auto` (stored as `auto_value`).
struct IntOrAuto {
  int64_t* value;
  int64_t auto_value;
};

template <typename V> void visit_config(V& v, Af2Config& c) {
  v("preset", c.preset);
  v("target_feat_dim", c.target_feat_dim);
  v("msa_feat_dim", c.msa_feat_dim);
  v("c_m", c.c_m);
  v("c_z", c.c_z);
  v("c_s", c.c_s);
  v("c_e", c.c_e);
  v("max_relative_feature", c.max_relative_feature);
  v("recycle_min_bin", c.recycle_min_bin);
  v("recycle_max_bin", c.recycle_max_bin);
  v("recycle_num_bins", c.recycle_num_bins);
  v("num_evoformer_blocks", c.num_evoformer_blocks);
  v("num_extra_msa_blocks", c.num_extra_msa_blocks);
  v("parallel_evoformer", c.evoformer.parallel);
  v("num_recycles", c.num_recycles);
  v("max_msa_clusters", c.max_msa_clusters);
  v("max_extra_msa", c.max_extra_msa);
  v("reduce_msa_clusters_by_max_templates", c.reduce_msa_clusters_by_max_templates);
  v("chunk_size", c.chunk_size);
  v("precision", c.precision);
  v("bf16_training_streams", c.bf16_training_streams);
  v("recompute_blocks", c.recompute_blocks);
  IntOrAuto keep_blocks{&c.recompute_keep_blocks, Af2Config::kKeepBlocksAuto};
  v("recompute_keep_blocks", keep_blocks);
  IntOrAuto keep_extra_blocks{&c.recompute_keep_extra_msa_blocks, Af2Config::kKeepBlocksAuto};
  v("recompute_keep_extra_msa_blocks", keep_extra_blocks);
  visit_block(v, "evoformer", c.evoformer);
  visit_block(v, "extra_msa", c.extra_msa);
  TemplateConfig& t = c.templates;
  v("templates.enabled", t.enabled);
  v("templates.embed_torsion_angles", t.embed_torsion_angles);
  v("templates.max_templates", t.max_templates);
  v("templates.c_t", t.c_t);
  v("templates.num_pair_blocks", t.num_pair_blocks);
  visit_attention(v, "templates.tri_att", t.tri_att);
  v("templates.tri_mul_channels", t.tri_mul_channels);
  v("templates.tri_mul_dropout", t.tri_mul_dropout);
  v("templates.pair_transition_factor", t.pair_transition_factor);
  visit_attention(v, "templates.pointwise_att", t.pointwise_att);
  v("templates.dgram_min_bin", t.dgram_min_bin);
  v("templates.dgram_max_bin", t.dgram_max_bin);
  v("templates.dgram_num_bins", t.dgram_num_bins);
  v("templates.use_template_unit_vector", t.use_template_unit_vector);
  StructureModuleConfig& s = c.structure;
  v("structure.c_s", s.c_s);
  v("structure.c_z", s.c_z);
  v("structure.num_layers", s.num_layers);
  v("structure.num_head", s.num_head);
  v("structure.num_scalar_qk", s.num_scalar_qk);
  v("structure.num_scalar_v", s.num_scalar_v);
  v("structure.num_point_qk", s.num_point_qk);
  v("structure.num_point_v", s.num_point_v);
  v("structure.num_transition_layers", s.num_transition_layers);
  v("structure.position_scale", s.position_scale);
  v("structure.sidechain_channels", s.sidechain_channels);
  v("structure.sidechain_residual_blocks", s.sidechain_residual_blocks);
  v("structure.dropout", s.dropout);
  HeadsConfig& h = c.heads;
  v("heads.distogram_bins", h.distogram_bins);
  v("heads.distogram_first_break", h.distogram_first_break);
  v("heads.distogram_last_break", h.distogram_last_break);
  v("heads.masked_msa_outputs", h.masked_msa_outputs);
  v("heads.lddt_bins", h.lddt_bins);
  v("heads.lddt_channels", h.lddt_channels);
  v("heads.ptm", h.ptm);
  v("heads.pae_bins", h.pae_bins);
  v("heads.pae_max_error_bin", h.pae_max_error_bin);
}

// Collects the keys and the mapping prefixes they imply ("evoformer", "evoformer.msa_row").
struct KeyLister {
  std::vector<std::string> keys;
  std::set<std::string> prefixes;
  template <typename T> void operator()(const std::string& key, T&) {
    keys.push_back(key);
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1))
      prefixes.insert(key.substr(0, dot));
  }
};

const char* node_kind(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Null: return "no value";
    default: return "a scalar";
  }
}

// Assigns the values found in a flattened document (dotted key → scalar node).
struct Reader {
  const std::string& name;
  const std::map<std::string, YAML::Node>& values;
  std::vector<std::string> missing;

  [[noreturn]] void fail(const std::string& key, const YAML::Node& n, const std::string& why) const {
    FC_THROW(name, ":", n.Mark().line + 1, ": key '", key, "': ", why);
  }
  const YAML::Node* find(const std::string& key) {
    const auto it = values.find(key);
    if (it == values.end()) {
      missing.push_back(key);
      return nullptr;
    }
    if (!it->second.IsScalar()) fail(key, it->second, std::string("expected a scalar, got ") + node_kind(it->second));
    return &it->second;
  }
  // The whole of `s` as an integer, or nothing.
  static std::optional<int64_t> integer(const std::string& s) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
  }
  void operator()(const std::string& key, int64_t& out) {
    const YAML::Node* n = find(key);
    if (n == nullptr) return;
    const std::optional<int64_t> v = integer(n->Scalar());
    if (!v) fail(key, *n, "expected an integer, got '" + n->Scalar() + "'");
    out = *v;
  }
  void operator()(const std::string& key, IntOrAuto& out) {
    const YAML::Node* n = find(key);
    if (n == nullptr) return;
    const std::optional<int64_t> v = integer(n->Scalar());
    if (n->Scalar() == "auto") {
      *out.value = out.auto_value;
    } else if (!v || *v < 0) {
      fail(key, *n, "expected a count >= 0 or auto, got '" + n->Scalar() + "'");
    } else {
      *out.value = *v;
    }
  }
  void operator()(const std::string& key, float& out) {
    const YAML::Node* n = find(key);
    if (n == nullptr) return;
    const std::string& s = n->Scalar();
    float v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) fail(key, *n, "expected a number, got '" + s + "'");
    out = v;
  }
  void operator()(const std::string& key, bool& out) {
    const YAML::Node* n = find(key);
    if (n == nullptr) return;
    const std::string& s = n->Scalar();
    if (s == "true" || s == "True") {
      out = true;
    } else if (s == "false" || s == "False") {
      out = false;
    } else {
      fail(key, *n, "expected true or false, got '" + s + "'");
    }
  }
  void operator()(const std::string& key, std::string& out) {
    const YAML::Node* n = find(key);
    if (n != nullptr) out = n->Scalar();
  }
};

// Flattens mappings into dotted keys, rejecting keys that are neither fields nor prefixes.
void flatten(const YAML::Node& map, const std::string& prefix, const KeyLister& known, const std::string& name,
             std::map<std::string, YAML::Node>& out) {
  const std::set<std::string> fields(known.keys.begin(), known.keys.end());
  for (const auto& kv : map) {
    FC_CHECK(kv.first.IsScalar(), name, ":", kv.first.Mark().line + 1, ": a key must be a plain name");
    const std::string key = prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
    if (fields.count(key) != 0) {
      FC_CHECK(out.count(key) == 0, name, ":", kv.first.Mark().line + 1, ": key '", key, "' given twice");
      out.emplace(key, kv.second);
    } else if (known.prefixes.count(key) != 0) {
      FC_CHECK(kv.second.IsMap(), name, ":", kv.second.Mark().line + 1, ": key '", key, "': expected a mapping, got ",
               node_kind(kv.second));
      flatten(kv.second, key, known, name, out);
    } else {
      FC_THROW(name, ":", kv.first.Mark().line + 1, ": unknown key '", key, "'");
    }
  }
}

KeyLister list_keys() {
  KeyLister lister;
  Af2Config scratch;
  visit_config(lister, scratch);
  return lister;
}

std::string format_float(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Emits nested YAML from the visitor's dotted keys (fields of one mapping are contiguous).
struct Writer {
  std::ostringstream os;
  std::vector<std::string> open;  // currently open mapping path
  void key(const std::string& dotted) {
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
      const size_t dot = dotted.find('.', start);
      parts.push_back(dotted.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    open.resize(common);
    for (size_t i = common; i + 1 < parts.size(); ++i) {
      os << std::string(2 * i, ' ') << parts[i] << ":\n";
      open.push_back(parts[i]);
    }
    os << std::string(2 * (parts.size() - 1), ' ') << parts.back() << ": ";
  }
  void operator()(const std::string& k, int64_t& v) { key(k); os << v << "\n"; }
  void operator()(const std::string& k, IntOrAuto& v) {
    key(k);
    if (*v.value == v.auto_value) os << "auto\n";
    else os << *v.value << "\n";
  }
  void operator()(const std::string& k, float& v) { key(k); os << format_float(v) << "\n"; }
  void operator()(const std::string& k, bool& v) { key(k); os << (v ? "true" : "false") << "\n"; }
  void operator()(const std::string& k, std::string& v) { key(k); os << v << "\n"; }
};

}  // namespace

std::vector<std::string> af2_config_keys() { return list_keys().keys; }

Af2Config parse_af2_config(const std::string& yaml_text, const std::string& name,
                           std::vector<std::string>* missing_keys) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    FC_THROW(name, ":", e.mark.line + 1, ": malformed YAML: ", e.msg);
  }
  FC_CHECK(root.IsMap(), name, ": expected a mapping of config keys at the top level, got ", node_kind(root));
  const KeyLister known = list_keys();
  std::map<std::string, YAML::Node> values;
  flatten(root, "", known, name, values);
  Af2Config config;
  Reader reader{name, values, {}};
  visit_config(reader, config);
  with_context(name + ": inconsistent config", [&] { validate_af2_config(config); });
  if (missing_keys != nullptr) *missing_keys = std::move(reader.missing);
  return config;
}

Af2Config load_af2_config(const std::string& path, std::vector<std::string>* missing_keys) {
  std::ifstream in(path, std::ios::binary);
  FC_CHECK(in.good(), "cannot open model config ", path);
  std::ostringstream text;
  text << in.rdbuf();
  FC_CHECK(!in.bad(), "cannot read model config ", path);
  return parse_af2_config(text.str(), path, missing_keys);
}

std::string af2_config_to_yaml(const Af2Config& config) {
  Af2Config copy = config;
  Writer writer;
  visit_config(writer, copy);
  return writer.os.str();
}

}  // namespace foldcore::af2
