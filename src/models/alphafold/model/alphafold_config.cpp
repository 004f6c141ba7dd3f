// Consistency checks of an Af2Config (whatever its source: defaults, YAML, parameter file).
#include "core/error.h"
#include "models/alphafold/model/config.h"

namespace foldcore::af2 {
namespace {

void check_positive(int64_t v, const char* name) { FC_CHECK(v > 0, "config: ", name, " must be > 0, got ", v); }

void check_rate(float p, const char* name) {
  FC_CHECK(p >= 0.f && p < 1.f, "config: ", name, " must be in [0, 1), got ", p);
}

void check_attention(const AttentionConfig& a, const char* name) {
  FC_CHECK(a.num_head > 0 && a.head_dim > 0, "config: ", name, ".num_head and .head_dim must be > 0, got ",
           a.num_head, " and ", a.head_dim);
  check_rate(a.dropout, name);
}

void check_block(const EvoformerBlockConfig& b, const char* name) {
  check_positive(b.c_m, name);
  check_positive(b.c_z, name);
  check_attention(b.msa_row, name);
  check_attention(b.msa_column, name);
  check_attention(b.tri_att, name);
  check_positive(b.msa_transition_factor, name);
  check_positive(b.opm_channels, name);
  check_positive(b.tri_mul_channels, name);
  check_positive(b.pair_transition_factor, name);
  check_rate(b.tri_mul_dropout, name);
}

}  // namespace

Af2Config tiny_af2_config() {
  Af2Config c;
  c.preset = "tiny";
  c.c_m = 16, c.c_z = 8, c.c_s = 16, c.c_e = 8;
  c.num_evoformer_blocks = 1;
  c.num_extra_msa_blocks = 1;
  c.num_recycles = 1;
  c.max_msa_clusters = 8;
  c.max_extra_msa = 8;
  // c_m, c_z, row / column attention, transition factor, outer product mean c, triangle
  // multiplication c and dropout, triangle attention, pair transition factor, global columns.
  c.evoformer = {16, 8, {2, 8, true, 0.15f}, {2, 8, true, 0.f}, 2, 4, 8, 0.25f, {2, 4, true, 0.25f}, 2, false};
  c.extra_msa = {8, 8, {2, 4, true, 0.15f}, {2, 4, true, 0.f}, 2, 4, 8, 0.25f, {2, 4, true, 0.25f}, 2, true};
  TemplateConfig& t = c.templates;
  t.c_t = 8;
  t.num_pair_blocks = 1;
  t.tri_att = {2, 4, true, 0.25f};
  t.tri_mul_channels = 8;
  t.pair_transition_factor = 2;
  t.pointwise_att = {2, 4, false, 0.f};
  StructureModuleConfig& s = c.structure;
  s.c_s = 16, s.c_z = 8;
  s.num_layers = 2;
  s.num_head = 2;
  s.num_scalar_qk = 4, s.num_scalar_v = 4;
  s.num_point_qk = 2, s.num_point_v = 2;
  s.num_transition_layers = 1;
  s.sidechain_channels = 8;
  s.sidechain_residual_blocks = 1;
  c.heads.lddt_channels = 8;
  validate_af2_config(c);
  return c;
}

bool template_two_passes_requested(const Af2Config& c) {
  return c.template_passes == 2 || (c.template_passes == 0 && c.chunk_size > 0);
}

void validate_af2_config(const Af2Config& c) {
  for (auto [v, n] : {std::pair{c.target_feat_dim, "target_feat_dim"}, {c.msa_feat_dim, "msa_feat_dim"},
                      {c.c_m, "c_m"}, {c.c_z, "c_z"}, {c.c_s, "c_s"}, {c.c_e, "c_e"},
                      {c.max_relative_feature, "max_relative_feature"}, {c.recycle_num_bins, "recycle_num_bins"},
                      {c.num_evoformer_blocks, "num_evoformer_blocks"}, {c.max_msa_clusters, "max_msa_clusters"}})
    check_positive(v, n);
  FC_CHECK(c.num_extra_msa_blocks >= 0, "config: num_extra_msa_blocks must be >= 0");
  FC_CHECK(c.num_recycles >= 0, "config: num_recycles must be >= 0, got ", c.num_recycles);
  FC_CHECK(c.max_extra_msa >= 0, "config: max_extra_msa must be >= 0");
  FC_CHECK(c.chunk_size >= 0, "config: chunk_size must be >= 0 (0: no chunking), got ", c.chunk_size);
  FC_CHECK(c.template_passes >= 0 && c.template_passes <= 2,
           "config: template_passes must be 1, 2 or 0 (auto), got ", c.template_passes);
  FC_CHECK(c.recompute_blocks >= 0, "config: recompute_blocks must be >= 0 (0: no recomputation), got ",
           c.recompute_blocks);
  FC_CHECK(c.recompute_keep_blocks >= 0 || c.recompute_keep_blocks == Af2Config::kKeepBlocksAuto,
           "config: recompute_keep_blocks must be >= 0 (0: every Evoformer block recomputed) or auto, got ",
           c.recompute_keep_blocks);
  FC_CHECK(c.recompute_keep_extra_msa_blocks >= 0 || c.recompute_keep_extra_msa_blocks == Af2Config::kKeepBlocksAuto,
           "config: recompute_keep_extra_msa_blocks must be >= 0 (0: every extra-MSA block recomputed) or auto, got ",
           c.recompute_keep_extra_msa_blocks);
  FC_CHECK(c.recycle_max_bin > c.recycle_min_bin, "config: recycle_max_bin must exceed recycle_min_bin");
  FC_CHECK(c.precision == "fp32" || c.precision == "bf16", "config: precision must be fp32 or bf16, got '",
           c.precision, "'");
  check_block(c.evoformer, "evoformer");
  check_block(c.extra_msa, "extra_msa");
  FC_CHECK(c.evoformer.c_m == c.c_m && c.evoformer.c_z == c.c_z, "config: evoformer.c_m/c_z (", c.evoformer.c_m,
           "/", c.evoformer.c_z, ") must equal c_m/c_z (", c.c_m, "/", c.c_z, ")");
  FC_CHECK(c.extra_msa.c_m == c.c_e && c.extra_msa.c_z == c.c_z, "config: extra_msa.c_m/c_z (", c.extra_msa.c_m,
           "/", c.extra_msa.c_z, ") must equal c_e/c_z (", c.c_e, "/", c.c_z, ")");
  FC_CHECK(!c.evoformer.global_column_attention, "config: evoformer.global_column_attention must be false");
  FC_CHECK(c.extra_msa.global_column_attention, "config: extra_msa.global_column_attention must be true");
  const TemplateConfig& t = c.templates;
  if (t.enabled) {
    check_positive(t.max_templates, "templates.max_templates");
    check_positive(t.c_t, "templates.c_t");
    check_positive(t.num_pair_blocks, "templates.num_pair_blocks");
    check_attention(t.tri_att, "templates.tri_att");
    check_attention(t.pointwise_att, "templates.pointwise_att");
    check_positive(t.tri_mul_channels, "templates.tri_mul_channels");
    check_rate(t.tri_mul_dropout, "templates.tri_mul_dropout");
    check_positive(t.pair_transition_factor, "templates.pair_transition_factor");
    check_positive(t.dgram_num_bins, "templates.dgram_num_bins");
    FC_CHECK(t.dgram_max_bin > t.dgram_min_bin, "config: templates.dgram_max_bin must exceed dgram_min_bin");
  }
  const StructureModuleConfig& s = c.structure;
  FC_CHECK(s.c_s == c.c_s && s.c_z == c.c_z, "config: structure.c_s/c_z (", s.c_s, "/", s.c_z,
           ") must equal c_s/c_z (", c.c_s, "/", c.c_z, ")");
  for (auto [v, n] : {std::pair{s.num_layers, "structure.num_layers"}, {s.num_head, "structure.num_head"},
                      {s.num_scalar_qk, "structure.num_scalar_qk"}, {s.num_scalar_v, "structure.num_scalar_v"},
                      {s.num_point_qk, "structure.num_point_qk"}, {s.num_point_v, "structure.num_point_v"},
                      {s.num_transition_layers, "structure.num_transition_layers"},
                      {s.sidechain_channels, "structure.sidechain_channels"},
                      {s.sidechain_residual_blocks, "structure.sidechain_residual_blocks"}})
    check_positive(v, n);
  FC_CHECK(s.position_scale > 0.f, "config: structure.position_scale must be > 0");
  check_rate(s.dropout, "structure.dropout");
  const HeadsConfig& h = c.heads;
  for (auto [v, n] : {std::pair{h.distogram_bins, "heads.distogram_bins"},
                      {h.masked_msa_outputs, "heads.masked_msa_outputs"}, {h.lddt_bins, "heads.lddt_bins"},
                      {h.lddt_channels, "heads.lddt_channels"}, {h.pae_bins, "heads.pae_bins"}})
    check_positive(v, n);
  FC_CHECK(h.distogram_last_break > h.distogram_first_break,
           "config: heads.distogram_last_break must exceed distogram_first_break");
}

}  // namespace foldcore::af2
