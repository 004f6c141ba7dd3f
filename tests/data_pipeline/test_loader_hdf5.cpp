// TrainingLoader on a synthetic feature store: identical batches for 1 and 3 workers, rank shards
// disjoint and covering, a new order every epoch, AlphaFold's weighting, a damaged chain and a
// throwing sample function replaced deterministically and reported, bounded memory over a long
// epoch, and a clean shutdown mid-epoch.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "core/philox.h"
#include "core/timer.h"
#include "data_pipeline/data_test_util.h"
#include "data_pipeline/training/loader.h"
#include "feature_store_test_util.h"
#include "training_chain_test_util.h"

namespace fs = std::filesystem;
using namespace foldcore;
using namespace foldcore::data;

namespace {

constexpr int kChains = 24;
constexpr int64_t kCrop = 16;

// A store of kChains chains named c00..c23 with lengths 8..54.
std::string make_store(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("fc_loader_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "store.h5").string();
  FeatureStoreWriter w(path);
  for (int i = 0; i < kChains; ++i) {
    const std::string n = std::string("c") + (i < 10 ? "0" : "") + std::to_string(i);
    w.add(synthetic_chain(n, 8 + 2 * i, 2 + i % 3, 0, static_cast<uint64_t>(i)));
  }
  w.finish();
  return path;
}

// A fixed-shape sample: a kCrop window of aatype at a key-dependent offset (padded with -1), the
// chain's coordinate sum and the key. Sleeps a key-dependent time so workers finish out of order.
FeatureDict toy_sample(const TrainingChain& c, const SampleKey& k) {
  const uint32_t r = philox_bits(k.seed, static_cast<uint64_t>(k.epoch), static_cast<uint64_t>(k.sample_index));
  std::this_thread::sleep_for(std::chrono::microseconds(r % 2000));
  const int64_t n = c.num_res();
  const int64_t start = n > kCrop ? static_cast<int64_t>(r % static_cast<uint32_t>(n - kCrop + 1)) : 0;
  std::vector<int32_t> crop(kCrop, -1);
  for (int64_t i = 0; i < kCrop && start + i < n; ++i) crop[static_cast<size_t>(i)] = c.aatype[static_cast<size_t>(start + i)];
  float sum = 0;
  for (const float x : c.all_atom_positions) sum += x;
  FeatureDict d;
  d.set("aatype", NpyArray::from_i32(crop, {kCrop}));
  d.set("sum", NpyArray::from_f32({sum}, {1}));
  d.set("name", NpyArray::from_strings({c.name}, {1}));  // strings are not batched
  return d;
}

struct Seen {
  std::vector<SampleKey> keys;
  std::vector<std::string> chains;
  std::vector<std::vector<uint8_t>> bytes;
};

Seen run(const FeatureStoreReader& r, LoaderOptions o, int64_t num_batches, SampleFn fn = toy_sample) {
  TrainingLoader loader(r, std::move(fn), o);
  Seen s;
  for (int64_t b = o.start_batch; b < o.start_batch + num_batches; ++b) {
    const TrainingBatch batch = loader.next();
    EXPECT_EQ(batch.epoch, b / loader.batches_per_epoch());
    EXPECT_EQ(batch.step, b % loader.batches_per_epoch());
    EXPECT_EQ(batch.at("aatype").shape(), (Shape{o.batch_size, kCrop}));
    EXPECT_EQ(batch.features.size(), 2u);
    s.keys.insert(s.keys.end(), batch.keys.begin(), batch.keys.end());
    s.chains.insert(s.chains.end(), batch.chains.begin(), batch.chains.end());
    for (const auto& [name, t] : batch.features) {
      const auto* p = static_cast<const uint8_t*>(t.data_ptr());
      s.bytes.emplace_back(p, p + t.nbytes());
    }
  }
  return s;
}

bool same_keys(const std::vector<SampleKey>& a, const std::vector<SampleKey>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].seed != b[i].seed || a[i].epoch != b[i].epoch || a[i].sample_index != b[i].sample_index) return false;
  return true;
}

TEST(TrainingLoader, SameBatchesForOneAndThreeWorkers) {
  FeatureStoreReader r(make_store("workers"));
  LoaderOptions o;
  o.batch_size = 4;
  o.seed = 11;
  o.workers = 1;
  const Seen one = run(r, o, 15);  // 2.5 epochs of 6 batches
  o.workers = 3;
  const Seen three = run(r, o, 15);
  EXPECT_TRUE(same_keys(one.keys, three.keys));
  EXPECT_EQ(one.chains, three.chains);
  EXPECT_EQ(one.bytes, three.bytes);
  // The batch holds exactly what the sample function gives for that chain and key.
  const FeatureDict d = toy_sample(r.read(one.chains[5]), one.keys[5]);
  EXPECT_EQ(std::memcmp(one.bytes[2].data() + 1 * kCrop * 4, d.at("aatype").data.data(), kCrop * 4), 0);
}

// A loader started at batch k (a resumed run) delivers exactly batches k, k+1, … of one started
// at 0, across an epoch boundary, with their epoch and step numbers.
TEST(TrainingLoader, StartBatchContinuesTheSequence) {
  FeatureStoreReader r(make_store("start"));
  LoaderOptions o;
  o.batch_size = 4;
  o.seed = 5;
  o.workers = 2;
  const Seen all = run(r, o, 9);  // 6 batches per epoch
  o.start_batch = 4;
  const Seen tail = run(r, o, 5);  // checks each batch's epoch and step too
  const size_t first = 4 * static_cast<size_t>(o.batch_size);
  EXPECT_TRUE(same_keys(tail.keys, std::vector<SampleKey>(all.keys.begin() + first, all.keys.end())));
  EXPECT_EQ(tail.chains, std::vector<std::string>(all.chains.begin() + first, all.chains.end()));
  EXPECT_EQ(tail.bytes, decltype(all.bytes)(all.bytes.begin() + 4 * 2, all.bytes.end()));  // 2 features a batch
}

TEST(TrainingLoader, RankShardsAreDisjointAndCoverTheEpoch) {
  FeatureStoreReader r(make_store("ranks"));
  LoaderOptions o;
  o.batch_size = 2;
  o.world_size = 3;
  o.seed = 5;
  std::set<int64_t> indices;
  std::multiset<std::string> chains;
  for (int rank = 0; rank < 3; ++rank) {
    o.rank = rank;
    const Seen s = run(r, o, 4);  // 24 / 3 ranks / 2 = 4 batches per epoch
    for (const SampleKey& k : s.keys) {
      EXPECT_EQ(k.epoch, 0);
      EXPECT_EQ(k.sample_index % 3, rank);
      EXPECT_TRUE(indices.insert(k.sample_index).second) << "sample " << k.sample_index << " on two ranks";
    }
    chains.insert(s.chains.begin(), s.chains.end());
  }
  EXPECT_EQ(indices.size(), 24u);
  EXPECT_EQ(*indices.rbegin(), 23);
  EXPECT_EQ(chains.size(), 24u);
  EXPECT_EQ(std::set<std::string>(chains.begin(), chains.end()).size(), 24u);  // every chain once
}

TEST(TrainingLoader, EveryEpochHasANewOrderAndSeedsMatter) {
  FeatureStoreReader r(make_store("epochs"));
  LoaderOptions o;
  o.seed = 3;
  TrainingLoader a(r, toy_sample, o);
  const auto e0 = a.epoch_order(0), e1 = a.epoch_order(1);
  EXPECT_NE(e0, e1);
  for (const auto& e : {e0, e1}) EXPECT_EQ(std::set<int64_t>(e.begin(), e.end()).size(), static_cast<size_t>(kChains));
  o.seed = 4;
  TrainingLoader b(r, toy_sample, o);
  EXPECT_NE(b.epoch_order(0), e0);
  o.seed = 3;
  o.epoch_length = 60;  // longer than the store: consecutive permutations
  TrainingLoader c(r, toy_sample, o);
  const auto long_order = c.epoch_order(0);
  ASSERT_EQ(long_order.size(), 60u);
  EXPECT_EQ(std::vector<int64_t>(long_order.begin(), long_order.begin() + kChains), e0);
  EXPECT_EQ(std::set<int64_t>(long_order.begin() + kChains, long_order.begin() + 2 * kChains).size(),
            static_cast<size_t>(kChains));
}

TEST(TrainingLoader, WeightedDrawsFollowAlphaFoldWeights) {
  FeatureStoreReader r(make_store("weights"));
  // Two candidates: c00 (8 residues, weight 0.5) and c23 (54, 0.5) with cluster size 2 → 0.25.
  LoaderOptions o;
  o.weighted = true;
  o.indices = {0, 23};
  o.cluster_sizes = {{"c23", 2}};
  o.epoch_length = 6000;
  TrainingLoader l(r, toy_sample, o);
  const auto order = l.epoch_order(0);
  const auto n0 = std::count(order.begin(), order.end(), 0);
  // Expected share 2/3 = 4000; binomial sd = sqrt(6000·2/3·1/3) ≈ 37, so ±150 is a 4-sd bound.
  EXPECT_NEAR(static_cast<double>(n0), 4000.0, 150.0);
  EXPECT_EQ(n0 + std::count(order.begin(), order.end(), 23), 6000);
}

TEST(TrainingLoader, DamagedChainAndThrowingSampleAreReplacedAndReported) {
  const std::string path = make_store("damaged");
  corrupt_chunk(path, "/chains/c07/all_atom_positions");
  FeatureStoreReader r(path);
  auto fn = [](const TrainingChain& c, const SampleKey& k) {
    if (c.name == "c11") throw Error("synthetic failure for c11");
    return toy_sample(c, k);
  };
  LoaderOptions o;
  o.batch_size = 3;
  o.seed = 2;
  TrainingLoader loader(r, fn, o);
  const auto order = loader.epoch_order(0);
  Seen s;
  for (int b = 0; b < 8; ++b) {
    const TrainingBatch batch = loader.next();
    s.chains.insert(s.chains.end(), batch.chains.begin(), batch.chains.end());
    s.keys.insert(s.keys.end(), batch.keys.begin(), batch.keys.end());
  }
  for (size_t g = 0; g < s.chains.size(); ++g) {
    EXPECT_NE(s.chains[g], "c07");
    EXPECT_NE(s.chains[g], "c11");
    EXPECT_EQ(s.keys[g].sample_index, static_cast<int64_t>(g));
    // Replacement = the first working chain at positions g, g+1, ...
    size_t k = g;
    while (r.entries()[static_cast<size_t>(order[k % order.size()])].name == "c07" ||
           r.entries()[static_cast<size_t>(order[k % order.size()])].name == "c11")
      ++k;
    EXPECT_EQ(s.chains[g], r.entries()[static_cast<size_t>(order[k % order.size()])].name);
  }
  const LoaderStats st = loader.stats();
  EXPECT_GE(st.skipped, 2);
  ASSERT_EQ(st.skip_reasons.size(), 2u);
  std::string reasons = st.skip_reasons[0] + "\n" + st.skip_reasons[1];
  EXPECT_NE(reasons.find("c07: feature store '" + path + "', chain 'c07'"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("synthetic failure for c11"), std::string::npos) << reasons;
  // Same result with another worker count.
  o.workers = 3;
  const Seen again = run(r, o, 8, fn);
  EXPECT_EQ(again.chains, s.chains);
}

TEST(TrainingLoader, EveryCandidateFailingIsAnError) {
  FeatureStoreReader r(make_store("allbad"));
  LoaderOptions o;
  TrainingLoader l(r, [](const TrainingChain&, const SampleKey&) -> FeatureDict { throw Error("nope"); }, o);
  EXPECT_NE(error_of([&] { l.next(); }).find("every candidate chain of epoch 0 failed"), std::string::npos);
}

TEST(TrainingLoader, MemoryIsBoundedOverALongEpoch) {
  FeatureStoreReader r(make_store("bounded"));
  LoaderOptions o;
  o.workers = 3;
  o.queue_depth = 2;
  o.epoch_length = 100000;
  auto fast = [](const TrainingChain& c, const SampleKey& k) {
    FeatureDict d;
    d.set("x", NpyArray::from_i32({static_cast<int32_t>(c.num_res()), static_cast<int32_t>(k.sample_index)}, {2}));
    return d;
  };
  TrainingLoader l(r, fast, o);
  for (int b = 0; b < 400; ++b) EXPECT_EQ(l.next().at("x").data<int32_t>()[1], b);
  const LoaderStats st = l.stats();
  EXPECT_EQ(st.samples, 400);
  EXPECT_LE(st.peak_pending_samples, (o.queue_depth + 1) * o.batch_size);
  EXPECT_LE(st.batch_buffers, o.queue_depth + 2);
  EXPECT_GT(st.samples_per_second, 0.0);
}

TEST(TrainingLoader, StopsCleanlyMidEpoch) {
  FeatureStoreReader r(make_store("shutdown"));
  auto slow = [](const TrainingChain& c, const SampleKey& k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return toy_sample(c, k);
  };
  LoaderOptions o;
  o.workers = 2;
  WallTimer t;
  {
    TrainingLoader l(r, slow, o);
    (void)l.next();
  }
  { TrainingLoader l(r, slow, o); }  // destroyed before any batch was taken
  EXPECT_LT(t.seconds(), 5.0);
}

TEST(TrainingLoader, BadOptionsAreErrors) {
  FeatureStoreReader r(make_store("options"));
  LoaderOptions o;
  o.rank = 2;
  o.world_size = 2;
  EXPECT_NE(error_of([&] { TrainingLoader l(r, toy_sample, o); }).find("rank 2 out of range"), std::string::npos);
  o = {};
  o.batch_size = 25;
  EXPECT_NE(error_of([&] { TrainingLoader l(r, toy_sample, o); }).find("no full batch"), std::string::npos);
  o = {};
  o.indices = {99};
  EXPECT_NE(error_of([&] { TrainingLoader l(r, toy_sample, o); }).find("out of range"), std::string::npos);
}

}  // namespace
