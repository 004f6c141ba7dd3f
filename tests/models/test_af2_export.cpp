// export_af2_params against a real AlphaFold2 parameter file (../shared/af2/ref/params.npz,
// model_1_ptm layout with 2 Evoformer blocks): a model built from the file's inferred
// architecture and loaded from it must write back exactly the file — every key, every official
// shape (attention [c, H, d] / [H, d, c], gating_b [H, d], outer-product-mean [c, c, c_z],
// global attention's shared key/value [c, d]) and every value bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "autograd/param_store.h"
#include "core/philox.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/params/af2_export.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/params/alphafold_params.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

TEST(Af2Export, WritesBackTheOfficialFileExactly) {
  const std::string ref = testing::shared_dir() + "/af2/ref/params.npz";
  const Af2Config config = infer_af2_config(ref);
  autograd::ParamStore params;
  Generator init_rng(0);
  AlphaFold model(nn::Scope{&params, &init_rng, nullptr, ""}, config);
  params.finalize();
  Af2ParamTable table;
  model.add_af2_params(table);
  load_af2_params(table, ref);

  const std::string out =
      (std::filesystem::temp_directory_path() / ("fc_export_" + std::to_string(::getpid()) + ".npz")).string();
  const size_t written = export_af2_params(table, config, out);
  std::map<std::string, data::NpyArray> want, got;
  for (auto& [name, a] : data::read_npz(ref)) want.emplace(name, std::move(a));
  for (auto& [name, a] : data::read_npz(out)) got.emplace(name, std::move(a));
  std::filesystem::remove(out);
  EXPECT_EQ(written, want.size());
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    const auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    EXPECT_EQ(it->second.shape, w.shape) << name;
    const Tensor a = it->second.to_tensor().to(DType::f32), b = w.to_tensor().to(DType::f32);
    ASSERT_EQ(a.numel(), b.numel()) << name;
    EXPECT_EQ(std::memcmp(a.data<float>(), b.data<float>(), sizeof(float) * static_cast<size_t>(a.numel())), 0)
        << name;
  }
}

}  // namespace
}  // namespace foldcore::af2
