// Loading official-format AlphaFold2 parameters: the reference params.npz (model_1_ptm layout,
// 2 Evoformer blocks) through the key table, and every error the loader promises.
#include <gtest/gtest.h>

#include "data_pipeline/formats/npy.h"
#include "models/alphafold/params/param_table.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

std::string params_path() { return testing::shared_dir() + "/af2/ref/params.npz"; }
const std::string kLn = "evoformer/evoformer_iteration/msa_transition/input_layer_norm//scale";     // (2, 256)
const std::string kQ = "evoformer/evoformer_iteration/msa_row_attention_with_pair_bias/attention//query_w";  // (2,256,8,32)
const std::string kDist = "distogram_head/half_logits//weights";  // (128, 64)

TEST(Af2ParamTable, LoadsStackedBlocksAndReshapes) {
  Tensor b0 = Tensor::zeros({256}, DType::f32), b1 = Tensor::zeros({256}, DType::f32);
  Tensor q1 = Tensor::zeros({256, 256}, DType::f32), dist = Tensor::zeros({128, 64}, DType::f32);
  Af2ParamTable t;
  t.add(kLn, b0, 0);
  t.add(kLn, b1, 1);
  t.add(kQ, Tensor::zeros({256, 256}, DType::f32), 0);
  t.add(kQ, q1, 1);
  t.add(kDist, dist);
  EXPECT_EQ(load_af2_params(t, params_path(), {.allow_unused = true}), 3u);

  // Compare against the raw arrays.
  data::NpzReader npz(params_path());
  const auto ln = npz.read(kAf2Prefix + kLn).to_tensor().to_vector();
  EXPECT_EQ(b0.to_vector(), std::vector<float>(ln.begin(), ln.begin() + 256));
  EXPECT_EQ(b1.to_vector(), std::vector<float>(ln.begin() + 256, ln.end()));
  const auto q = npz.read(kAf2Prefix + kQ).to_tensor().to_vector();
  EXPECT_EQ(q1.to_vector(), std::vector<float>(q.begin() + 256 * 256, q.end()));  // [c_m,H,c] → [c_m,H·c]
  EXPECT_EQ(dist.to_vector(), npz.read(kAf2Prefix + kDist).to_tensor().to_vector());
}

void expect_error(const Af2ParamTable& t, const std::string& needle, Af2LoadOptions o = {.allow_unused = true}) {
  try {
    load_af2_params(t, params_path(), o);
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("params.npz"), std::string::npos) << e.what();
  }
}

TEST(Af2ParamTable, ClearErrors) {
  {
    Af2ParamTable t;
    t.add("evoformer/no_such_module//weights", Tensor::zeros({4}, DType::f32));
    expect_error(t, "'alphafold/alphafold_iteration/evoformer/no_such_module//weights' is missing");
  }
  {
    Af2ParamTable t;
    t.add(kDist, Tensor::zeros({64, 64}, DType::f32));
    expect_error(t, "has shape (128, 64) but the model expects [64,64]");
  }
  {
    Af2ParamTable t;  // only one of the two stacked blocks claimed
    t.add(kLn, Tensor::zeros({256}, DType::f32), 0);
    expect_error(t, "stacks 2 blocks but the model has 1");
  }
  {
    Af2ParamTable t;
    t.add(kLn, Tensor::zeros({256}, DType::f32), 0);
    t.add(kLn, Tensor::zeros({256}, DType::f32), 0);
    expect_error(t, "claimed twice");
  }
  {
    Af2ParamTable t;  // unused keys are an error by default
    t.add(kDist, Tensor::zeros({128, 64}, DType::f32));
    expect_error(t, "which this model does not use", {});
  }
  Af2ParamTable t;
  t.add(kDist, Tensor::zeros({128, 64}, DType::f32));
  EXPECT_THROW(load_af2_params(t, testing::shared_dir() + "/data/query73/query.fasta"), Error);  // not a zip
}

}  // namespace
}  // namespace foldcore::af2
