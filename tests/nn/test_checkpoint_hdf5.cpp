// HDF5 checkpoints: exact round trips of every dtype and nested names, atomic replacement, and
// clear errors for missing/extra/misshaped entries, truncated and foreign files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/random.h"
#include "nn/checkpoint.h"
#include "test_util.h"

namespace foldcore {
namespace {

namespace fs = std::filesystem;
using nn::CheckpointData;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("foldcore_ckpt_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Names of everything in the directory (to find left-over temporaries).
  std::vector<std::string> listing() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};

// Zeros with the same shapes and dtypes: the "existing tensors" a load fills.
nn::TensorMap zeros_like(const nn::TensorMap& m) {
  nn::TensorMap out;
  for (const auto& [name, t] : m) out[name] = Tensor::zeros(t.shape(), t.dtype());
  return out;
}

void expect_equal_exact(const Tensor& a, const Tensor& b, const std::string& name) {
  ASSERT_EQ(a.shape(), b.shape()) << name;
  ASSERT_EQ(a.dtype(), b.dtype()) << name;
  if (a.dtype() == DType::i64 || a.dtype() == DType::i32 || a.dtype() == DType::u8) {
    EXPECT_EQ(a.to_vector_i64(), b.to_vector_i64()) << name;
    return;
  }
  const auto av = a.to_vector(), bv = b.to_vector();
  for (size_t i = 0; i < av.size(); ++i) {
    if (std::isnan(bv[i])) EXPECT_TRUE(std::isnan(av[i])) << name << "[" << i << "]";
    else EXPECT_EQ(av[i], bv[i]) << name << "[" << i << "]";
  }
}

std::string what_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a foldcore::Error";
  return "";
}

CheckpointData sample_checkpoint() {
  Generator gen(42);
  CheckpointData d;
  d.params["evoformer/block_0/msa_row/q/weight"] = randn({3, 5}, gen);
  d.params["evoformer/block_0/msa_row/q/bias"] = randn({5}, gen);
  d.params["evoformer/block_1/w"] = randn({2, 1, 3}, gen);
  d.params["embed_bf16"] = randn({4, 7}, gen, 0.f, 10.f, DType::bf16);
  std::vector<float> half = {1.f, -2.5f, 65504.f, 6e-8f, std::numeric_limits<float>::infinity(), -0.f};
  d.params["half"] = Tensor::from_vector(half, {2, 3}, DType::f16);
  d.params["ids_i32"] = Tensor::from_vector_i64({-7, 0, 2147483647, 5}, {4}, DType::i32);
  d.params["ids_i64"] = Tensor::from_vector_i64({int64_t(1) << 40, -3, 9}, {3, 1}, DType::i64);
  d.params["mask_u8"] = Tensor::from_vector_i64({0, 1, 255, 7, 8}, {5}, DType::u8);
  d.params["scale"] = Tensor::full({}, 0.125, DType::f32);  // rank 0
  d.params["empty"] = Tensor::zeros({0, 4}, DType::f32);
  d.optimizer["m"]["flat"] = randn({1001}, gen);
  d.optimizer["v"]["flat"] = rand_uniform({1001}, gen);
  d.optimizer["step"]["count"] = Tensor::from_vector_i64({17}, {}, DType::i64);
  d.step = 1234567890123;
  d.meta = R"({"model": "af2", "note": "quotes \" and ünïcødé"})";
  return d;
}

TEST(CheckpointHdf5, RoundTripAllDtypesAndNestedNames) {
  TempDir dir;
  const CheckpointData d = sample_checkpoint();
  const std::string path = dir.file("ckpt.h5");
  nn::save_checkpoint(path, d);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"ckpt.h5"});

  CheckpointData back;
  back.params = zeros_like(d.params);
  for (const auto& [state, t] : d.optimizer) back.optimizer[state] = zeros_like(t);
  // One destination is a non-contiguous view: the load must scatter through its strides.
  Tensor storage = Tensor::zeros({5, 3}, DType::f32);
  back.params["evoformer/block_0/msa_row/q/weight"] = storage.transpose(0, 1);
  nn::load_checkpoint(path, back);

  EXPECT_EQ(back.step, d.step);
  EXPECT_EQ(back.meta, d.meta);
  for (const auto& [name, t] : d.params) expect_equal_exact(back.params.at(name), t, name);
  for (const auto& [state, m] : d.optimizer)
    for (const auto& [name, t] : m) expect_equal_exact(back.optimizer.at(state).at(name), t, state + "/" + name);

  // The layout: nested groups, dtypes recovered from the stored types and tags.
  const nn::CheckpointSummary s = nn::inspect_checkpoint(path);
  EXPECT_EQ(s.format_version, nn::kCheckpointFormatVersion);
  EXPECT_EQ(s.step, d.step);
  std::map<std::string, std::pair<Shape, DType>> entries;
  for (const auto& e : s.entries) entries[e.path] = {e.shape, e.dtype};
  EXPECT_EQ(entries.size(), d.params.size() + 3);
  for (const auto& [name, t] : d.params) {
    ASSERT_TRUE(entries.count("params/" + name)) << name;
    EXPECT_EQ(entries["params/" + name].first, t.shape()) << name;
    EXPECT_EQ(entries["params/" + name].second, t.dtype()) << name;
  }
  EXPECT_TRUE(entries.count("optimizer/m/flat"));
  EXPECT_EQ(entries["optimizer/step/count"].second, DType::i64);
}

TEST(CheckpointHdf5, CudaTensorsAreCopiedThroughTheHost) {
  FC_REQUIRE_CUDA();
  TempDir dir;
  Generator gen(3);
  CheckpointData d;
  d.params["w"] = randn({17, 3}, gen, 0.f, 1.f, DType::f32, Device::cuda());
  d.params["h"] = randn({9}, gen, 0.f, 1.f, DType::bf16, Device::cuda());
  nn::save_checkpoint(dir.file("c.h5"), d);
  CheckpointData back;
  back.params["w"] = Tensor::zeros({17, 3}, DType::f32, Device::cuda());
  back.params["h"] = Tensor::zeros({9}, DType::bf16, Device::cuda());
  nn::load_checkpoint(dir.file("c.h5"), back);
  for (const auto& [name, t] : d.params) expect_equal_exact(back.params.at(name), t, name);
}

TEST(CheckpointHdf5, FailedSaveLeavesPreviousCheckpointAndNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  CheckpointData first;
  first.params["a"] = Tensor::full({3}, 1.0, DType::f32);
  first.params["b"] = Tensor::full({2}, 2.0, DType::f32);
  first.step = 1;
  nn::save_checkpoint(path, first);

  // Fails half way: "a" and "b" are written to the temporary before the undefined "zzz".
  CheckpointData broken;
  broken.params["a"] = Tensor::full({3}, 5.0, DType::f32);
  broken.params["b"] = Tensor::full({2}, 6.0, DType::f32);
  broken.params["zzz"] = Tensor();
  broken.step = 2;
  const std::string msg = what_of([&] { nn::save_checkpoint(path, broken); });
  EXPECT_NE(msg.find("params/zzz"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"ckpt.h5"});

  CheckpointData back;
  back.params = zeros_like(first.params);
  nn::load_checkpoint(path, back);
  EXPECT_EQ(back.step, 1);
  expect_equal_exact(back.params["a"], first.params["a"], "a");

  // Fails at the rename (the target is a directory): the finished temporary is removed.
  fs::create_directory(dir.file("is_a_dir"));
  EXPECT_THROW(nn::save_checkpoint(dir.file("is_a_dir"), first), Error);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"ckpt.h5", "is_a_dir"}));

  // Fails at creation (no such directory), naming the path.
  const std::string nowhere = dir.file("missing_dir/ckpt.h5");
  const std::string msg2 = what_of([&] { nn::save_checkpoint(nowhere, first); });
  EXPECT_NE(msg2.find(nowhere), std::string::npos) << msg2;

  // A good save replaces the old checkpoint.
  broken.params.erase("zzz");
  nn::save_checkpoint(path, broken);
  nn::load_checkpoint(path, back);
  EXPECT_EQ(back.step, 2);
  expect_equal_exact(back.params["a"], broken.params["a"], "a");
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"ckpt.h5", "is_a_dir"}));
}

TEST(CheckpointHdf5, MissingExtraAndMisshapedEntriesAreNamed) {
  TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  CheckpointData d;
  d.params["enc/a"] = Tensor::full({2, 3}, 1.0, DType::f32);
  d.params["enc/b"] = Tensor::full({4}, 2.0, DType::f32);
  d.optimizer["m"]["enc/a"] = Tensor::full({2, 3}, 3.0, DType::f32);
  nn::save_checkpoint(path, d);

  {  // missing
    CheckpointData into;
    into.params = zeros_like(d.params);
    into.params["enc/c"] = Tensor::zeros({7}, DType::f32);
    into.optimizer["m"] = zeros_like(d.optimizer["m"]);
    const std::string msg = what_of([&] { nn::load_checkpoint(path, into); });
    EXPECT_NE(msg.find("missing entry 'params/enc/c'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    // Nothing was copied: the check runs before any data is read.
    EXPECT_EQ(into.params["enc/a"].to_vector(), std::vector<float>(6, 0.f));
  }
  {  // extra (params and a whole optimizer state), then allowed
    CheckpointData into;
    into.params["enc/a"] = Tensor::zeros({2, 3}, DType::f32);
    const std::string msg = what_of([&] { nn::load_checkpoint(path, into); });
    EXPECT_NE(msg.find("unexpected entry 'params/enc/b'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected entry 'optimizer/m/enc/a'"), std::string::npos) << msg;
    nn::load_checkpoint(path, into, {.allow_extra = true});
    EXPECT_EQ(into.params["enc/a"].to_vector(), std::vector<float>(6, 1.f));
  }
  {  // params_only ignores the optimizer group
    CheckpointData into;
    into.params = zeros_like(d.params);
    into.optimizer["v"]["enc/a"] = Tensor::zeros({2, 3}, DType::f32);  // would be missing
    nn::load_checkpoint(path, into, {.params_only = true});
    EXPECT_EQ(into.params["enc/b"].to_vector(), std::vector<float>(4, 2.f));
    EXPECT_EQ(into.optimizer["v"]["enc/a"].to_vector(), std::vector<float>(6, 0.f));
  }
  {  // wrong shape and wrong dtype: entry and both shapes/dtypes named
    CheckpointData into;
    into.params["enc/a"] = Tensor::zeros({3, 2}, DType::f32);
    into.params["enc/b"] = Tensor::zeros({4}, DType::bf16);
    into.optimizer["m"] = zeros_like(d.optimizer["m"]);
    const std::string msg = what_of([&] { nn::load_checkpoint(path, into); });
    EXPECT_NE(msg.find("entry 'params/enc/a' is [2,3] f32 in the file, expected [3,2] f32"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("entry 'params/enc/b' is [4] f32 in the file, expected [4] bf16"), std::string::npos) << msg;
  }
}

TEST(CheckpointHdf5, TruncatedAndForeignFilesGiveClearErrorsAndNoHdf5Noise) {
  TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  Generator gen(8);
  CheckpointData d;
  d.params["w"] = randn({50000}, gen);
  nn::save_checkpoint(path, d);
  const auto full = fs::file_size(path);

  CheckpointData into;
  into.params = zeros_like(d.params);
  for (uintmax_t size : {full / 2, uintmax_t{100}, uintmax_t{0}}) {
    const std::string cut = dir.file("cut_" + std::to_string(size) + ".h5");
    fs::copy_file(path, cut);
    fs::resize_file(cut, size);
    ::testing::internal::CaptureStderr();
    const std::string msg = what_of([&] { nn::load_checkpoint(cut, into); });
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(msg.find(cut), std::string::npos) << msg;
    EXPECT_EQ(err, "") << "HDF5 printed to stderr";
  }

  const std::string junk = dir.file("junk.h5");
  {
    std::ofstream f(junk, std::ios::binary);
    for (int i = 0; i < 4096; ++i) f.put(static_cast<char>((i * 131 + 7) & 0xff));
  }
  ::testing::internal::CaptureStderr();
  std::string msg = what_of([&] { nn::load_checkpoint(junk, into); });
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_NE(msg.find(junk), std::string::npos) << msg;
  EXPECT_NE(msg.find("not an HDF5 file"), std::string::npos) << msg;

  msg = what_of([&] { nn::load_checkpoint(dir.file("absent.h5"), into); });
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
}

TEST(CheckpointHdf5, InvalidNamesAreRejectedBeforeWriting) {
  TempDir dir;
  for (const std::string bad : {"", "/a", "a/", "a//b", "a/../b", "./a"}) {
    CheckpointData d;
    d.params[bad] = Tensor::zeros({1}, DType::f32);
    EXPECT_THROW(nn::save_checkpoint(dir.file("x.h5"), d), Error) << "'" << bad << "'";
  }
  CheckpointData d;
  d.optimizer["m/x"]["a"] = Tensor::zeros({1}, DType::f32);
  EXPECT_THROW(nn::save_checkpoint(dir.file("x.h5"), d), Error);
  EXPECT_TRUE(dir.listing().empty());
}

}  // namespace
}  // namespace foldcore
