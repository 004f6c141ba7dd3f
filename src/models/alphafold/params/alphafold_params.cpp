#include "models/alphafold/params/alphafold_params.h"

#include <map>
#include <vector>

#include "core/error.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/params/param_table.h"

namespace foldcore::af2 {
namespace {

// Shapes of a parameter file's arrays by key (without kAf2Prefix); only headers are needed but
// the reader gives whole arrays, which for one file at a time is fine.
class ParamShapes {
 public:
  explicit ParamShapes(const std::string& path) : path_(path) {
    const data::NpzReader reader(path);
    for (const std::string& name : reader.names()) {
      FC_CHECK(name.rfind(kAf2Prefix, 0) == 0, path, ": array '", name, "' is not an AlphaFold parameter (no '",
               kAf2Prefix, "' prefix)");
      shapes_.emplace(name.substr(kAf2Prefix.size()), reader.read(name).shape);
    }
  }
  bool has(const std::string& key) const { return shapes_.count(key) != 0; }
  // The shape of `key`, which must have `rank` axes.
  const std::vector<int64_t>& shape(const std::string& key, size_t rank) const {
    const auto it = shapes_.find(key);
    FC_CHECK(it != shapes_.end(), path_, ": parameter '", kAf2Prefix, key, "' is missing");
    FC_CHECK(it->second.size() == rank, path_, ": parameter '", kAf2Prefix, key, "' has rank ", it->second.size(),
             ", expected ", rank);
    return it->second;
  }
  // Number of "<base>", "<base>_1", "<base>_2", … keys with the given suffix (haiku's names for
  // repeated layers).
  int64_t count_numbered(const std::string& base, const std::string& suffix) const {
    int64_t n = has(base + suffix) ? 1 : 0;
    while (n > 0 && has(base + "_" + std::to_string(n) + suffix)) ++n;
    return n;
  }
  int64_t divide(int64_t a, int64_t b, const std::string& what) const {
    FC_CHECK(b > 0 && a % b == 0, path_, ": cannot infer ", what, " (", a, " not a multiple of ", b, ")");
    return a / b;
  }

 private:
  std::string path_;
  std::map<std::string, std::vector<int64_t>> shapes_;
};

// Attention dims from a stacked query_w [B, c, H, d] (or unstacked [c, H, d]).
void infer_attention(const ParamShapes& p, const std::string& key, bool stacked, AttentionConfig& a) {
  const auto& s = p.shape(key + "/attention//query_w", stacked ? 4 : 3);
  a.num_head = s[s.size() - 2];
  a.head_dim = s[s.size() - 1];
  a.gating = p.has(key + "/attention//gating_w");
}

// Depth and dims of an Evoformer-style stack whose per-block keys start with `pre`.
int64_t infer_block(const ParamShapes& p, const std::string& pre, const std::string& column_key,
                    EvoformerBlockConfig& b) {
  const auto& tr = p.shape(pre + "msa_transition/transition1//weights", 3);
  b.c_m = tr[1];
  b.msa_transition_factor = p.divide(tr[2], tr[1], pre + "msa transition factor");
  infer_attention(p, pre + "msa_row_attention_with_pair_bias", true, b.msa_row);
  infer_attention(p, pre + column_key, true, b.msa_column);
  b.opm_channels = p.shape(pre + "outer_product_mean/left_projection//weights", 3)[2];
  const auto& tm = p.shape(pre + "triangle_multiplication_outgoing/left_projection//weights", 3);
  b.c_z = tm[1];
  b.tri_mul_channels = tm[2];
  infer_attention(p, pre + "triangle_attention_starting_node", true, b.tri_att);
  const auto& pt = p.shape(pre + "pair_transition/transition1//weights", 3);
  b.pair_transition_factor = p.divide(pt[2], pt[1], pre + "pair transition factor");
  return tr[0];
}

}  // namespace

Af2Config infer_af2_config(const std::string& params_path, const Af2Config& base) {
  const ParamShapes p(params_path);
  Af2Config c = base;
  c.preset = "inferred:" + params_path;
  const auto& msa = p.shape("evoformer/preprocess_msa//weights", 2);
  c.msa_feat_dim = msa[0];
  c.c_m = msa[1];
  c.target_feat_dim = p.shape("evoformer/preprocess_1d//weights", 2)[0];
  const auto& rel = p.shape("evoformer/pair_activiations//weights", 2);
  c.c_z = rel[1];
  c.max_relative_feature = (rel[0] - 1) / 2;
  c.recycle_num_bins = p.shape("evoformer/prev_pos_linear//weights", 2)[0];
  c.c_s = p.shape("evoformer/single_activations//weights", 2)[1];
  c.c_e = p.shape("evoformer/extra_msa_activations//weights", 2)[1];

  c.num_evoformer_blocks =
      infer_block(p, "evoformer/evoformer_iteration/", "msa_column_attention", c.evoformer);
  c.num_extra_msa_blocks =
      infer_block(p, "evoformer/extra_msa_stack/", "msa_column_global_attention", c.extra_msa);
  c.extra_msa.global_column_attention = true;
  c.evoformer.global_column_attention = false;

  TemplateConfig& t = c.templates;
  const std::string te = "evoformer/template_embedding/";
  t.enabled = p.has(te + "single_template_embedding/embedding2d//weights");
  t.embed_torsion_angles = p.has("evoformer/template_single_embedding//weights");
  if (t.enabled) {
    t.c_t = p.shape(te + "single_template_embedding/embedding2d//weights", 2)[1];
    const std::string ps = te + "single_template_embedding/template_pair_stack/__layer_stack_no_state/";
    const auto& tr = p.shape(ps + "pair_transition/transition1//weights", 3);
    t.num_pair_blocks = tr[0];
    t.pair_transition_factor = p.divide(tr[2], tr[1], "template pair transition factor");
    t.tri_mul_channels = p.shape(ps + "triangle_multiplication_outgoing/left_projection//weights", 3)[2];
    infer_attention(p, ps + "triangle_attention_starting_node", true, t.tri_att);
    const auto& q = p.shape(te + "attention//query_w", 3);
    t.pointwise_att.num_head = q[1];
    t.pointwise_att.head_dim = q[2];
    t.pointwise_att.gating = p.has(te + "attention//gating_w");
  }

  StructureModuleConfig& s = c.structure;
  const std::string fi = "structure_module/fold_iteration/";
  s.c_s = p.shape("structure_module/initial_projection//weights", 2)[1];
  s.c_z = p.shape("structure_module/pair_layer_norm//scale", 1)[0];
  s.num_head = p.shape(fi + "invariant_point_attention//trainable_point_weights", 1)[0];
  const std::string ipa = fi + "invariant_point_attention/";
  s.num_scalar_qk = p.divide(p.shape(ipa + "q_scalar//weights", 2)[1], s.num_head, "IPA num_scalar_qk");
  s.num_scalar_v =
      p.divide(p.shape(ipa + "kv_scalar//weights", 2)[1], s.num_head, "IPA num_scalar_v") - s.num_scalar_qk;
  s.num_point_qk = p.divide(p.shape(ipa + "q_point_local//weights", 2)[1], 3 * s.num_head, "IPA num_point_qk");
  s.num_point_v = p.divide(p.shape(ipa + "kv_point_local//weights", 2)[1], 3 * s.num_head, "IPA num_point_v") -
                  s.num_point_qk;
  s.num_transition_layers = p.count_numbered(fi + "transition", "//weights");
  s.sidechain_channels = p.shape(fi + "rigid_sidechain/input_projection//weights", 2)[1];
  s.sidechain_residual_blocks = p.count_numbered(fi + "rigid_sidechain/resblock1", "//weights");

  HeadsConfig& h = c.heads;
  h.distogram_bins = p.shape("distogram_head/half_logits//weights", 2)[1];
  h.masked_msa_outputs = p.shape("masked_msa_head/logits//weights", 2)[1];
  const auto& lddt = p.shape("predicted_lddt_head/logits//weights", 2);
  h.lddt_channels = lddt[0];
  h.lddt_bins = lddt[1];
  h.ptm = p.has("predicted_aligned_error_head/logits//weights");
  if (h.ptm) h.pae_bins = p.shape("predicted_aligned_error_head/logits//weights", 2)[1];
  with_context(params_path + ": inferred an inconsistent architecture", [&] { validate_af2_config(c); });
  return c;
}

}  // namespace foldcore::af2
