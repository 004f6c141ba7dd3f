// Feature store: round trip of every TrainingChain field, the index and its filters, AlphaFold's
// sampling weights, atomic writes, compatibility with HDF5's own decoder, concurrent readers, and
// damaged files (a corrupted chunk, a truncated file) reported with the store and chain named.
#include <gtest/gtest.h>
#include <hdf5/serial/hdf5.h>

#include "feature_store_test_util.h"

#include <filesystem>
#include <fstream>
#include <thread>

#include "data_pipeline/data_test_util.h"
#include "data_pipeline/training/feature_store.h"
#include "training_chain_test_util.h"

namespace fs = std::filesystem;
using namespace foldcore;
using namespace foldcore::data;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fc_store_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Five chains: short and long, with and without templates, one MSA big enough for several chunks.
std::vector<TrainingChain> sample_chains() {
  std::vector<TrainingChain> v;
  v.push_back(synthetic_chain("1abc_A", 40, 3, 0, 1));
  v.push_back(synthetic_chain("1abc_B", 300, 400, 2, 2));  // msa 480 KB > one 256 KiB chunk
  v.push_back(synthetic_chain("2xyz_A", 600, 1, 1, 3));
  v.push_back(synthetic_chain("3def_C", 128, 16, 0, 4));
  v.push_back(synthetic_chain("4ghi_A", 7, 2, 3, 5));
  v[3].resolution = 0.0;  // NMR: no resolution
  v[4].is_distillation = true;
  v[4].release_date = "";
  return v;
}

std::string write_store(const fs::path& dir, const std::vector<TrainingChain>& chains) {
  const std::string path = (dir / "store.h5").string();
  FeatureStoreWriter w(path);
  for (const auto& c : chains) w.add(c);
  EXPECT_EQ(w.size(), static_cast<int64_t>(chains.size()));
  w.finish();
  return path;
}

TEST(FeatureStore, RoundTripOfEveryField) {
  const fs::path dir = temp_dir("roundtrip");
  const auto chains = sample_chains();
  const std::string path = write_store(dir, chains);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  FeatureStoreReader r(path);
  ASSERT_EQ(r.size(), 5);
  for (size_t i = 0; i < chains.size(); ++i) {
    const FeatureStoreEntry& e = r.entries()[i];
    EXPECT_EQ(e.name, chains[i].name);
    EXPECT_EQ(e.num_res, chains[i].num_res());
    EXPECT_EQ(e.msa_depth, chains[i].msa.depth);
    EXPECT_EQ(e.num_templates, static_cast<int64_t>(chains[i].templates.size()));
    EXPECT_EQ(e.resolution, chains[i].resolution);
    EXPECT_EQ(e.release_date, chains[i].release_date);
    EXPECT_EQ(e.is_distillation, chains[i].is_distillation);
    // bytes = the arrays' uncompressed size: 4-byte values except the u8 strings.
    const int64_t n = e.num_res, s = e.msa_depth, t = e.num_templates;
    EXPECT_GT(e.bytes, 4 * (2 * n + 148 * n + 2 * s * n + t * n * 170));
    EXPECT_TRUE(same_chain(r.read(static_cast<int64_t>(i)), chains[i])) << chains[i].name;
  }
  EXPECT_TRUE(same_chain(r.read("2xyz_A"), chains[2]));
  EXPECT_NE(error_of([&] { r.read("nope_A"); }).find("no chain 'nope_A'"), std::string::npos);
  EXPECT_NE(error_of([&] { r.read(5); }).find("out of range"), std::string::npos);
}

TEST(FeatureStore, IndexFiltersAndSamplingWeights) {
  const fs::path dir = temp_dir("filter");
  const auto chains = sample_chains();
  FeatureStoreReader r(write_store(dir, chains));
  FeatureStoreFilter f;
  EXPECT_EQ(r.select(f), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  f.min_length = 40;
  f.max_length = 300;
  EXPECT_EQ(r.select(f), (std::vector<int64_t>{0, 1, 3}));
  f = {};
  f.include_distillation = false;
  EXPECT_EQ(r.select(f), (std::vector<int64_t>{0, 1, 2, 3}));
  f = {};
  f.max_resolution = chains[0].resolution;
  std::vector<int64_t> want;
  for (size_t i = 0; i < chains.size(); ++i)
    if (chains[i].resolution <= chains[0].resolution) want.push_back(static_cast<int64_t>(i));
  EXPECT_EQ(r.select(f), want);  // includes the NMR chain (unknown resolution kept by default)
  f.keep_unknown_resolution = false;
  want.erase(std::remove(want.begin(), want.end(), 3), want.end());
  EXPECT_EQ(r.select(f), want);
  f = {};
  f.max_release_date = chains[0].release_date;
  for (int64_t i : r.select(f)) {
    EXPECT_FALSE(r.entries()[static_cast<size_t>(i)].release_date.empty());
    EXPECT_LE(r.entries()[static_cast<size_t>(i)].release_date, chains[0].release_date);
  }
  // AF2: max(min(N,512),256)/512 ÷ cluster size.
  EXPECT_DOUBLE_EQ(af2_chain_sampling_weight(40), 0.5);
  EXPECT_DOUBLE_EQ(af2_chain_sampling_weight(300), 300.0 / 512.0);
  EXPECT_DOUBLE_EQ(af2_chain_sampling_weight(600), 1.0);
  EXPECT_DOUBLE_EQ(af2_chain_sampling_weight(600, 4), 0.25);
  const auto w = r.sampling_weights({0, 1, 2}, {{"1abc_B", 3}});
  EXPECT_EQ(w, (std::vector<double>{0.5, 300.0 / 512.0 / 3.0, 1.0}));
  EXPECT_FALSE(error_of([] { af2_chain_sampling_weight(0); }).empty());
}

TEST(FeatureStore, WritesAreAtomic) {
  const fs::path dir = temp_dir("atomic");
  const std::string path = (dir / "store.h5").string();
  {
    FeatureStoreWriter w(path);
    w.add(synthetic_chain("1abc_A", 10, 1, 0, 1));
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    EXPECT_NE(error_of([&] { w.add(synthetic_chain("1abc_A", 12, 1, 0, 2)); }).find("duplicate"), std::string::npos);
    TrainingChain bad = synthetic_chain("1abc_B", 10, 1, 0, 3);
    bad.aatype[2] = 25;
    EXPECT_NE(error_of([&] { w.add(bad); }).find("aatype"), std::string::npos);
    EXPECT_NE(error_of([&] { w.add(synthetic_chain("a/b", 10, 1, 0, 3)); }).find("'/'"), std::string::npos);
  }  // destroyed without finish(): nothing left behind
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // A failed writer never touches an existing complete store.
  const std::string good = write_store(dir, {synthetic_chain("1abc_A", 10, 1, 0, 1)});
  { FeatureStoreWriter w(good); w.add(synthetic_chain("1abc_B", 10, 1, 0, 2)); }
  FeatureStoreReader r(good);
  EXPECT_EQ(r.size(), 1);
  EXPECT_EQ(r.entries()[0].name, "1abc_A");
}

// The chunks written by our own shuffle + deflate must be what HDF5's filters decode.
TEST(FeatureStore, HdfLibraryDecodesOurChunks) {
  const fs::path dir = temp_dir("compat");
  const auto chains = sample_chains();
  const std::string path = write_store(dir, chains);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t ds = H5Dopen2(f, "/chains/1abc_B/msa", H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  std::vector<int32_t> msa(chains[1].msa.msa.size());
  ASSERT_GE(H5Dread(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, msa.data()), 0);
  EXPECT_EQ(msa, chains[1].msa.msa);
  const hid_t ds2 = H5Dopen2(f, "/chains/2xyz_A/all_atom_positions", H5P_DEFAULT);
  std::vector<float> pos(chains[2].all_atom_positions.size());
  ASSERT_GE(H5Dread(ds2, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, pos.data()), 0);
  EXPECT_EQ(pos, chains[2].all_atom_positions);
  H5Dclose(ds2);
  H5Dclose(ds);
  H5Fclose(f);
}

TEST(FeatureStore, ConcurrentReadsFromFourThreads) {
  const fs::path dir = temp_dir("threads");
  const auto chains = sample_chains();
  FeatureStoreReader r(write_store(dir, chains));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 6; ++rep)
        for (size_t i = 0; i < chains.size(); ++i) {
          const size_t k = (i + static_cast<size_t>(t)) % chains.size();  // threads on different chains
          if (!same_chain(r.read(static_cast<int64_t>(k)), chains[k])) ++mismatches[static_cast<size_t>(t)];
        }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0, 0}));
}

TEST(FeatureStore, CorruptChunkIsReportedWithStoreAndChain) {
  const fs::path dir = temp_dir("corrupt");
  const auto chains = sample_chains();
  const std::string path = write_store(dir, chains);
  corrupt_chunk(path, "/chains/1abc_B/all_atom_positions");
  FeatureStoreReader r(path);
  const std::string err = error_of([&] { r.read("1abc_B"); });
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("1abc_B"), std::string::npos) << err;
  EXPECT_NE(err.find("all_atom_positions"), std::string::npos) << err;
  for (size_t i : {0u, 2u, 3u, 4u}) EXPECT_TRUE(same_chain(r.read(static_cast<int64_t>(i)), chains[i]));
}

TEST(FeatureStore, TruncatedMissingAndForeignFilesAreErrors) {
  const fs::path dir = temp_dir("trunc");
  const std::string path = write_store(dir, sample_chains());
  const std::string cut = (dir / "cut.h5").string();
  fs::copy_file(path, cut);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  std::string err = error_of([&] { FeatureStoreReader r(cut); });
  EXPECT_NE(err.find(cut), std::string::npos) << err;
  err = error_of([&] { FeatureStoreReader r((dir / "absent.h5").string()); });
  EXPECT_NE(err.find("no such file"), std::string::npos) << err;
  std::ofstream((dir / "text.h5").string()) << "not hdf5\n";
  err = error_of([&] { FeatureStoreReader r((dir / "text.h5").string()); });
  EXPECT_NE(err.find("not an HDF5 file"), std::string::npos) << err;
}

}  // namespace
