// AlphaFold2 YAML presets: every preset loads completely and carries AF2's per-model settings;
// the writer and reader agree; malformed configs fail with the file and key named.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "models/alphafold/model/config_yaml.h"

namespace foldcore::af2 {
namespace {

std::string preset_path(const std::string& name) { return std::string(FOLDCORE_SOURCE_DIR) + "/configs/model/" + name + ".yaml"; }

// The error message of parse_af2_config(text), or "" when it parses.
std::string parse_error(const std::string& text) {
  try {
    parse_af2_config(text, "bad.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Af2ConfigYaml, EveryPresetLoadsCompletelyWithAf2Settings) {
  for (int i = 1; i <= 5; ++i) {
    for (bool ptm : {false, true}) {
      const std::string name = "model_" + std::to_string(i) + (ptm ? "_ptm" : "");
      SCOPED_TRACE(name);
      std::vector<std::string> missing;
      const Af2Config c = load_af2_config(preset_path(name), &missing);
      EXPECT_TRUE(missing.empty()) << "first missing key: " << (missing.empty() ? "" : missing[0]);
      EXPECT_EQ(c.preset, name);
      // CONFIG_DIFFS: templates (with torsion angles) only for models 1 and 2; extra MSA 5120 for
      // models 1, 3, 4, the base 1024 for 2 and 5; the PAE head only in the _ptm models.
      const bool templates = i <= 2;
      EXPECT_EQ(c.templates.enabled, templates);
      EXPECT_EQ(c.templates.embed_torsion_angles, templates);
      EXPECT_EQ(c.reduce_msa_clusters_by_max_templates, templates);
      EXPECT_EQ(c.max_extra_msa, (i == 2 || i == 5) ? 1024 : 5120);
      EXPECT_EQ(c.heads.ptm, ptm);
      EXPECT_EQ(c.num_recycles, 3);
      EXPECT_EQ(c.num_evoformer_blocks, 48);
      EXPECT_EQ(c.num_extra_msa_blocks, 4);
      EXPECT_EQ(c.templates.num_pair_blocks, 2);
      EXPECT_EQ(c.structure.num_layers, 8);
      EXPECT_EQ(c.c_m, 256);
      EXPECT_EQ(c.c_z, 128);
      EXPECT_EQ(c.c_s, 384);
      EXPECT_EQ(c.c_e, 64);
      EXPECT_EQ(c.evoformer.msa_row.num_head * c.evoformer.msa_row.head_dim, 256);
      EXPECT_EQ(c.extra_msa.msa_column.num_head * c.extra_msa.msa_column.head_dim, 64);
      EXPECT_TRUE(c.extra_msa.global_column_attention);
      EXPECT_EQ(c.precision, "fp32");
      // Training recomputes one block per segment and keeps as many as the device holds.
      EXPECT_EQ(c.recompute_blocks, 1);
      EXPECT_EQ(c.recompute_keep_blocks, Af2Config::kKeepBlocksAuto);
      EXPECT_EQ(c.recompute_keep_extra_msa_blocks, Af2Config::kKeepBlocksAuto);
    }
  }
}

TEST(Af2ConfigYaml, Model1PtmPresetEqualsTheBuiltInDefaults) {
  // config.h's defaults are model_1_ptm; the preset file must say exactly the same (chunk_size
  // aside: the preset chunks as AF2's subbatch_size 4, the struct default does not chunk; and
  // recompute_blocks: the preset trains with AlphaFold2's one block per recomputation segment,
  // the struct default does not recompute; and the kept blocks of both stacks: auto in the preset).
  Af2Config file = load_af2_config(preset_path("model_1_ptm"));
  EXPECT_EQ(file.chunk_size, 4);
  EXPECT_EQ(file.recompute_blocks, 1);
  EXPECT_EQ(file.recompute_keep_blocks, Af2Config::kKeepBlocksAuto);
  EXPECT_EQ(file.recompute_keep_extra_msa_blocks, Af2Config::kKeepBlocksAuto);
  file.chunk_size = 0;
  file.recompute_blocks = 0;
  file.recompute_keep_blocks = 0;
  file.recompute_keep_extra_msa_blocks = 0;
  EXPECT_EQ(af2_config_to_yaml(file), af2_config_to_yaml(Af2Config{}));
}

TEST(Af2ConfigYaml, TinyPresetIsSmallAndComplete) {
  std::vector<std::string> missing;
  const Af2Config c = load_af2_config(preset_path("tiny"), &missing);
  EXPECT_TRUE(missing.empty());
  EXPECT_EQ(c.c_m, 16);
  EXPECT_EQ(c.c_z, 8);
  EXPECT_EQ(c.c_s, 16);
  EXPECT_EQ(c.num_evoformer_blocks, 1);
  EXPECT_EQ(c.num_extra_msa_blocks, 1);
  EXPECT_EQ(c.templates.num_pair_blocks, 1);
  EXPECT_TRUE(c.templates.enabled);
  EXPECT_TRUE(c.heads.ptm);
}

TEST(Af2ConfigYaml, WriterAndReaderRoundTrip) {
  Af2Config c;
  c.c_m = 32;
  c.evoformer.c_m = 32;
  c.evoformer.msa_row = {4, 8, false, 0.125f};
  c.templates.dgram_min_bin = 1.1f;  // not exactly representable: the writer must round-trip it
  c.precision = "bf16";
  c.heads.ptm = false;
  c.recompute_keep_blocks = Af2Config::kKeepBlocksAuto;
  c.recompute_keep_extra_msa_blocks = 3;
  const std::string text = af2_config_to_yaml(c);
  EXPECT_NE(text.find("recompute_keep_blocks: auto\n"), std::string::npos);
  EXPECT_NE(text.find("recompute_keep_extra_msa_blocks: 3\n"), std::string::npos);
  std::vector<std::string> missing;
  const Af2Config back = parse_af2_config(text, "roundtrip.yaml", &missing);
  EXPECT_TRUE(missing.empty());
  EXPECT_EQ(af2_config_to_yaml(back), text);
  EXPECT_EQ(back.templates.dgram_min_bin, 1.1f);
  EXPECT_EQ(back.evoformer.msa_row.num_head, 4);
  EXPECT_FALSE(back.evoformer.msa_row.gating);
  EXPECT_EQ(back.recompute_keep_blocks, Af2Config::kKeepBlocksAuto);
  EXPECT_EQ(back.recompute_keep_extra_msa_blocks, 3);
  EXPECT_EQ(parse_af2_config("recompute_keep_blocks: 12\n", "k.yaml").recompute_keep_blocks, 12);
  EXPECT_EQ(parse_af2_config("recompute_keep_extra_msa_blocks: auto\n", "k.yaml").recompute_keep_extra_msa_blocks,
            Af2Config::kKeepBlocksAuto);
}

TEST(Af2ConfigYaml, PartialConfigKeepsDefaultsAndReportsMissingKeys) {
  std::vector<std::string> missing;
  const Af2Config c = parse_af2_config("num_recycles: 1\nevoformer:\n  msa_row:\n    dropout: 0.0\n", "p.yaml", &missing);
  EXPECT_EQ(c.num_recycles, 1);
  EXPECT_EQ(c.evoformer.msa_row.dropout, 0.f);
  EXPECT_EQ(c.evoformer.msa_row.num_head, 8);
  EXPECT_EQ(missing.size(), af2_config_keys().size() - 2);
}

TEST(Af2ConfigYaml, BadConfigsNameFileAndKey) {
  struct Case {
    const char* text;
    std::vector<const char*> expect;  // substrings of the message
  };
  const std::vector<Case> cases = {
      {"c_m: 256\nbogus: 1\n", {"bad.yaml:2", "unknown key 'bogus'"}},
      {"evoformer:\n  msa_row:\n    num_heads: 8\n", {"bad.yaml:3", "unknown key 'evoformer.msa_row.num_heads'"}},
      {"c_m: wide\n", {"bad.yaml:1", "key 'c_m'", "expected an integer", "'wide'"}},
      {"c_m: 256.5\n", {"key 'c_m'", "expected an integer"}},
      {"recycle_min_bin: near\n", {"key 'recycle_min_bin'", "expected a number"}},
      {"heads:\n  ptm: maybe\n", {"bad.yaml:2", "key 'heads.ptm'", "expected true or false"}},
      {"c_m: [1, 2]\n", {"key 'c_m'", "expected a scalar", "a sequence"}},
      {"evoformer: 3\n", {"key 'evoformer'", "expected a mapping"}},
      {"c_m:\n", {"key 'c_m'", "no value"}},
      {"c_m: [1, 2\n", {"bad.yaml", "malformed YAML"}},
      {"- 1\n- 2\n", {"bad.yaml", "expected a mapping"}},
      {"c_m: 128\n", {"bad.yaml", "inconsistent", "evoformer.c_m"}},
      {"precision: fp8\n", {"bad.yaml", "precision must be fp32 or bf16"}},
      {"recompute_keep_blocks: -1\n", {"bad.yaml:1", "key 'recompute_keep_blocks'", "a count >= 0 or auto", "'-1'"}},
      {"recompute_keep_blocks: most\n", {"key 'recompute_keep_blocks'", "a count >= 0 or auto", "'most'"}},
      {"recompute_keep_extra_msa_blocks: -2\n",
       {"key 'recompute_keep_extra_msa_blocks'", "a count >= 0 or auto", "'-2'"}},
      {"evoformer:\n  tri_att: {num_head: 0}\n", {"bad.yaml", "evoformer", "num_head"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string msg = parse_error(c.text);
    ASSERT_FALSE(msg.empty()) << "parsed without an error";
    for (const char* part : c.expect) EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

TEST(Af2ConfigYaml, MissingFileIsAnError) {
  try {
    load_af2_config("/nonexistent/model_9.yaml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model_9.yaml"), std::string::npos);
  }
}

}  // namespace
}  // namespace foldcore::af2
