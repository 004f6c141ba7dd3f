// The processed feature batch: reading the shared fixture (recycling axis last, per-iteration
// slices), and clear errors for files that are not processed AlphaFold features.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/model/features.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

namespace fs = std::filesystem;

std::string ref(const std::string& name) { return testing::shared_dir() + "/af2/ref/" + name; }

fs::path temp_dir() {
  const fs::path dir = fs::temp_directory_path() / ("fc_af2_features_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::string error_of(const std::string& path) {
  try {
    Af2Features::read_npz(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Af2Features, ReadsTheReferenceFeaturesWithRecyclingAxisLast) {
  const Af2Features f = Af2Features::read_npz(ref("features.npz"));
  ASSERT_EQ(f.num_iterations(), 2);
  const data::NpzReader raw(ref("features.npz"));
  for (int64_t r = 0; r < 2; ++r) {
    const Af2Batch b = f.iteration(r);
    EXPECT_EQ(b.num_res(), 40);
    EXPECT_EQ(b.num_msa(), 28);
    EXPECT_EQ(b.num_extra_msa(), 64);
    EXPECT_EQ(b.num_templates(), 4);
    EXPECT_EQ(b.msa_feat.shape(), Shape({28, 40, 49}));
    EXPECT_EQ(b.target_feat.shape(), Shape({40, 22}));
    EXPECT_EQ(b.template_all_atom_positions.shape(), Shape({4, 40, 37, 3}));
    EXPECT_EQ(b.template_torsion_angles_sin_cos.shape(), Shape({4, 40, 7, 2}));
    EXPECT_EQ(b.residx_atom37_to_atom14.shape(), Shape({40, 37}));
    EXPECT_EQ(b.aatype.dtype(), DType::i64);
    EXPECT_EQ(b.extra_msa.dtype(), DType::i64);
    EXPECT_EQ(b.msa_feat.dtype(), DType::f32);
    EXPECT_TRUE(b.msa_feat.is_contiguous());
    // Element-by-element against the raw array: feature[..., r].
    const data::NpyArray msa = raw.read("msa_feat");
    const float* src = msa.as<float>();
    const float* got = b.msa_feat.data<float>();
    for (int64_t i = 0; i < b.msa_feat.numel(); i += 97) ASSERT_EQ(got[i], src[i * 2 + r]) << i;
    const data::NpyArray aat = raw.read("extra_msa");
    for (int64_t i = 0; i < b.extra_msa.numel(); ++i) ASSERT_EQ(b.extra_msa.data<int64_t>()[i], aat.as<int64_t>()[i * 2 + r]);
  }
  // MSA sampling differs between iterations (AlphaFold resamples each recycle).
  const Tensor a = f.iteration(0).msa_feat, b = f.iteration(1).msa_feat;
  bool differ = false;
  for (int64_t i = 0; i < a.numel() && !differ; ++i) differ = a.data<float>()[i] != b.data<float>()[i];
  EXPECT_TRUE(differ);
  EXPECT_THROW(f.iteration(2), Error);
}

TEST(Af2Features, ForeignTruncatedAndInconsistentFilesAreClearErrors) {
  const fs::path dir = temp_dir();
  // A parameter file is not a feature file.
  std::string msg = error_of(ref("params.npz"));
  EXPECT_NE(msg.find("required feature 'aatype' is missing"), std::string::npos) << msg;
  // Truncated archive.
  {
    std::ifstream in(ref("features.npz"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(dir / "trunc.npz", std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  msg = error_of((dir / "trunc.npz").string());
  EXPECT_NE(msg.find("trunc.npz"), std::string::npos) << msg;
  // Not a zip at all.
  {
    std::ofstream out(dir / "text.npz");
    out << "hello\n";
  }
  msg = error_of((dir / "text.npz").string());
  EXPECT_NE(msg.find("text.npz"), std::string::npos) << msg;
  // Consistent except for one feature: its residue axis or its recycling axis disagrees.
  auto all = data::read_npz(ref("features.npz"));
  auto write_with = [&](const std::string& name, const std::string& key, data::NpyArray a) {
    std::vector<std::pair<std::string, data::NpyArray>> arrays;
    for (const auto& [k, v] : all) arrays.emplace_back(k, k == key ? a : v);
    data::write_npz((dir / name).string(), arrays, false);
    return error_of((dir / name).string());
  };
  msg = write_with("short_n.npz", "seq_mask", data::NpyArray::from_f32(std::vector<float>(39 * 2, 1.f), {39, 2}));
  EXPECT_NE(msg.find("seq_mask"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(N) is 39"), std::string::npos) << msg;
  msg = write_with("three_iters.npz", "seq_mask", data::NpyArray::from_f32(std::vector<float>(40 * 3, 1.f), {40, 3}));
  EXPECT_NE(msg.find("recycling axis"), std::string::npos) << msg;
  msg = write_with("no_recycle_axis.npz", "target_feat", data::NpyArray::from_f32(std::vector<float>(40 * 22, 0.f), {40, 22}));
  EXPECT_NE(msg.find("target_feat"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected rank 3"), std::string::npos) << msg;
  msg = write_with("atoms.npz", "atom37_atom_exists", data::NpyArray::from_f32(std::vector<float>(40 * 36 * 2, 1.f), {40, 36, 2}));
  EXPECT_NE(msg.find("must be 37"), std::string::npos) << msg;
  // An extra-MSA class outside [0, 23): named with the file (the model's one-hot on a GPU would
  // silently give zeros for it).
  {
    const data::NpyArray em = all.at("extra_msa");
    std::vector<int32_t> v(static_cast<size_t>(em.shape[0] * em.shape[1] * em.shape[2]), 0);
    v[5] = 23;
    msg = write_with("bad_class.npz", "extra_msa", data::NpyArray::from_i32(v, em.shape));
    EXPECT_NE(msg.find("bad_class.npz"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'extra_msa'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("value 23 at flat index 5"), std::string::npos) << msg;
  }
  all.erase("template_mask");
  msg = write_with("partial_templates.npz", "", {});
  EXPECT_NE(msg.find("template features are incomplete"), std::string::npos) << msg;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace foldcore::af2
