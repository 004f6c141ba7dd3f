// The architecture read from a parameter file's array shapes (run_features without --config).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/params/alphafold_params.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

std::string ref(const std::string& name) { return testing::shared_dir() + "/af2/ref/" + name; }

TEST(Af2ModelParams, InfersTheArchitectureOfTheReferenceParams) {
  const Af2Config c = infer_af2_config(ref("params.npz"));
  EXPECT_EQ(c.num_evoformer_blocks, 2);
  EXPECT_EQ(c.num_extra_msa_blocks, 1);
  EXPECT_EQ(c.templates.num_pair_blocks, 2);
  EXPECT_TRUE(c.templates.enabled);
  EXPECT_TRUE(c.templates.embed_torsion_angles);
  EXPECT_TRUE(c.heads.ptm);
  EXPECT_EQ(c.c_m, 256);
  EXPECT_EQ(c.c_z, 128);
  EXPECT_EQ(c.c_s, 384);
  EXPECT_EQ(c.c_e, 64);
  // Everything but the depths and the preset name is model_1_ptm's.
  Af2Config expect;
  expect.preset = c.preset;
  expect.num_evoformer_blocks = 2;
  expect.num_extra_msa_blocks = 1;
  EXPECT_EQ(c.evoformer.msa_row.num_head, expect.evoformer.msa_row.num_head);
  EXPECT_EQ(c.extra_msa.msa_column.head_dim, expect.extra_msa.msa_column.head_dim);
  EXPECT_EQ(c.templates.pointwise_att.head_dim, expect.templates.pointwise_att.head_dim);
  EXPECT_EQ(c.templates.tri_att.head_dim, expect.templates.tri_att.head_dim);
  EXPECT_EQ(c.structure.num_point_v, expect.structure.num_point_v);
  EXPECT_EQ(c.structure.num_scalar_v, expect.structure.num_scalar_v);
  EXPECT_EQ(c.structure.num_transition_layers, expect.structure.num_transition_layers);
  EXPECT_EQ(c.structure.sidechain_residual_blocks, expect.structure.sidechain_residual_blocks);
  EXPECT_EQ(c.heads.lddt_channels, expect.heads.lddt_channels);
}

TEST(Af2ModelParams, ForeignOrIncompleteFilesAreErrors) {
  try {
    infer_af2_config(ref("features.npz"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not an AlphaFold parameter"), std::string::npos) << e.what();
  }
  // The reference parameters without the extra-MSA stack's transition.
  const std::string path = ::testing::TempDir() + "/fc_params_missing.npz";
  std::vector<std::pair<std::string, data::NpyArray>> arrays;
  for (auto& [name, a] : data::read_npz(ref("params.npz")))
    if (name.find("extra_msa_stack/msa_transition/transition1//weights") == std::string::npos) arrays.emplace_back(name, a);
  data::write_npz(path, arrays, false);
  try {
    infer_af2_config(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("extra_msa_stack/msa_transition/transition1//weights' is missing"),
              std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace foldcore::af2
