// MLPerf BERT HDF5 shards: writer/reader round trip, foreign integer widths, file lists, epoch
// shuffling and rank sharding, the loader, and clear errors on corrupt or foreign files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "data_pipeline/bert/bert_corpus.h"
#include "data_pipeline/bert/bert_data.h"

namespace foldcore::data {
namespace {

namespace fs = std::filesystem;

class BertDataHdf5 : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fc_bert_data_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static BertCorpusOptions options() {
    BertCorpusOptions o;
    o.kind = BertCorpusKind::learnable;
    o.seq_len = 64;
    o.max_predictions = 10;
    o.seed = 3;
    return o;
  }
  fs::path dir_;
};

void write_raw(const std::string& file, const BertExamples& ex, const std::string& dtype,
               const std::string& omit = "", const std::string& widen = "") {
  write_bert_shard_raw(file, ex, BertRawShardOptions{dtype, omit, widen});
}

void expect_same(const BertExamples& a, const BertExamples& b) {
  ASSERT_EQ(a.num, b.num);
  ASSERT_EQ(a.seq_len, b.seq_len);
  ASSERT_EQ(a.max_predictions, b.max_predictions);
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.input_mask, b.input_mask);
  EXPECT_EQ(a.segment_ids, b.segment_ids);
  EXPECT_EQ(a.masked_lm_positions, b.masked_lm_positions);
  EXPECT_EQ(a.masked_lm_ids, b.masked_lm_ids);
  EXPECT_EQ(a.next_sentence_labels, b.next_sentence_labels);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(BertDataHdf5, WriterRoundTripAndForeignIntegerTypes) {
  const BertExamples ex = generate_bert_examples(options(), 40, 0);
  write_bert_shard(path("a.hdf5"), ex);
  expect_same(read_bert_shard(path("a.hdf5")), ex);
  const BertShardInfo info = inspect_bert_shard(path("a.hdf5"));
  EXPECT_EQ(info.num, 40);
  EXPECT_EQ(info.seq_len, 64);
  EXPECT_EQ(info.max_predictions, 10);
  EXPECT_FALSE(fs::exists(path("a.hdf5.tmp." + std::to_string(::getpid()))));
  // The other converters' widths: int64 (first MLPerf scripts), int32, int16, unsigned.
  for (const char* type : {"int64", "int32", "int16", "uint16"}) {
    write_raw(path("raw.h5"), ex, type);
    expect_same(read_bert_shard(path("raw.h5")), ex);
  }
}

TEST_F(BertDataHdf5, CorruptAndForeignFilesGiveClearErrors) {
  const BertExamples ex = generate_bert_examples(options(), 8, 0);
  std::ofstream(path("text.hdf5")) << "this is not an HDF5 file\n";
  EXPECT_NE(error_of([&] { read_bert_shard(path("text.hdf5")); }).find("not an HDF5 file"), std::string::npos);
  EXPECT_NE(error_of([&] { read_bert_shard(path("absent.hdf5")); }).find("no such file"), std::string::npos);

  write_raw(path("missing.h5"), ex, "int32", "masked_lm_ids");
  std::string e = error_of([&] { read_bert_shard(path("missing.h5")); });
  EXPECT_NE(e.find("missing.h5"), std::string::npos) << e;
  EXPECT_NE(e.find("'masked_lm_ids' is missing"), std::string::npos) << e;

  write_raw(path("shape.h5"), ex, "int32", "", "segment_ids");
  e = error_of([&] { inspect_bert_shard(path("shape.h5")); });
  EXPECT_NE(e.find("'segment_ids' has shape [8, 65]"), std::string::npos) << e;

  write_raw(path("float.h5"), ex, "float32");
  e = error_of([&] { read_bert_shard(path("float.h5")); });
  EXPECT_NE(e.find("'input_ids' is not an integer array"), std::string::npos) << e;

  // Truncated: the first half of a valid file.
  write_bert_shard(path("whole.hdf5"), ex);
  const auto size = fs::file_size(path("whole.hdf5"));
  fs::copy_file(path("whole.hdf5"), path("cut.hdf5"));
  fs::resize_file(path("cut.hdf5"), size / 2);
  e = error_of([&] { read_bert_shard(path("cut.hdf5")); });
  EXPECT_NE(e.find("cut.hdf5"), std::string::npos) << e;
  EXPECT_NE(e, "(no error)");

  // Contents that break the format (mask not a prefix).
  BertExamples bad = ex;
  bad.input_mask[1] = 0;
  write_raw(path("content.h5"), bad, "int32");
  e = error_of([&] { read_bert_shard(path("content.h5")); });
  EXPECT_NE(e.find("input_mask is not a prefix"), std::string::npos) << e;
  EXPECT_THROW(write_bert_shard(path("never.hdf5"), bad), Error);
  EXPECT_FALSE(fs::exists(path("never.hdf5")));
}

TEST_F(BertDataHdf5, ShardListing) {
  const std::vector<std::string> files = write_bert_corpus(dir_.string(), options(), 30, 3);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(fs::path(files[1]).filename(), "part-00001-of-00003.hdf5");
  std::ofstream(path("notes.txt")) << "ignored";
  EXPECT_EQ(list_bert_shards(dir_.string()), files);
  EXPECT_EQ(list_bert_shards(path("part-0000?-of-*.hdf5")), files);
  EXPECT_EQ(list_bert_shards(files[2]), std::vector<std::string>{files[2]});
  EXPECT_THROW(list_bert_shards(path("eval-*.hdf5")), Error);
  int64_t rows = 0;
  for (const auto& f : files) rows += inspect_bert_shard(f).num;
  EXPECT_EQ(rows, 30);
}

TEST_F(BertDataHdf5, EpochShardingIsDisjointCompleteAndSeeded) {
  const std::vector<int64_t> rows = {7, 13, 5, 11};  // T = 36
  for (int world : {1, 2, 3, 5}) {
    std::set<std::pair<int32_t, int64_t>> all;
    for (int r = 0; r < world; ++r) {
      const auto s = bert_epoch_samples(rows, 42, 1, r, world);
      EXPECT_EQ(static_cast<int64_t>(s.size()), 36 / world);
      for (const auto& ref : s) EXPECT_TRUE(all.insert({ref.file, ref.row}).second) << "duplicate across ranks";
    }
    EXPECT_EQ(static_cast<int64_t>(all.size()), 36 / world * world);  // all but the T mod world remainder
  }
  auto flat = [](const std::vector<BertSampleRef>& s) {
    std::vector<int64_t> v;
    for (const auto& r : s) v.push_back(r.file * 1000 + r.row);
    return v;
  };
  EXPECT_EQ(flat(bert_epoch_samples(rows, 42, 3, 0, 1)), flat(bert_epoch_samples(rows, 42, 3, 0, 1)));
  EXPECT_NE(flat(bert_epoch_samples(rows, 42, 3, 0, 1)), flat(bert_epoch_samples(rows, 42, 4, 0, 1)));
  EXPECT_NE(flat(bert_epoch_samples(rows, 42, 3, 0, 1)), flat(bert_epoch_samples(rows, 43, 3, 0, 1)));
  EXPECT_THROW(bert_epoch_samples(rows, 42, 0, 2, 2), Error);
}

TEST_F(BertDataHdf5, LoaderYieldsEveryRankSampleOnce) {
  const std::vector<std::string> files = write_bert_corpus(dir_.string(), options(), 50, 4);
  BertExamples all = BertExamples::zeros(0, 64, 10);
  for (const auto& f : files) {
    const BertExamples ex = read_bert_shard(f);
    for (int64_t i = 0; i < ex.num; ++i) all.append(ex, i);
  }
  std::multiset<std::vector<int32_t>> seen;
  for (int rank = 0; rank < 2; ++rank) {
    BertLoaderOptions lo;
    lo.batch_size = 4;
    lo.seed = 9;
    lo.rank = rank;
    lo.world = 2;
    lo.drop_last = false;
    BertLoader loader(list_bert_shards(dir_.string()), lo);
    EXPECT_EQ(loader.samples_per_epoch(), 25);
    EXPECT_EQ(loader.batches_per_epoch(), 7);  // 6 full + 1 of 1 row
    loader.start_epoch(2);
    BertBatch b;
    int64_t batches = 0, rows = 0;
    while (loader.next(b)) {
      ++batches;
      const int64_t n = b.input_ids.size(0);
      rows += n;
      ASSERT_EQ(b.input_ids.shape(), Shape({n, 64}));
      ASSERT_FALSE(b.packed);
      const int32_t* ids = b.input_ids.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) {
        seen.insert(std::vector<int32_t>(ids + i * 64, ids + (i + 1) * 64));
        EXPECT_EQ(b.nsp_positions.data<int32_t>()[i], i * 64);
        EXPECT_EQ(b.position_ids.data<int32_t>()[i * 64 + 5], 5);
      }
      // masked_lm_weights: 1 exactly on the real predictions (positions before the first 0).
      const int32_t* mp = b.masked_lm_positions.data<int32_t>();
      const float* mw = b.masked_lm_weights.data<float>();
      for (int64_t k = 0; k < n * 10; ++k) EXPECT_EQ(mw[k], mp[k] != 0 ? 1.f : 0.f);
    }
    EXPECT_EQ(batches, 7);
    EXPECT_EQ(rows, 25);
  }
  std::multiset<std::vector<int32_t>> want;
  for (int64_t i = 0; i < all.num; ++i) want.insert(std::vector<int32_t>(all.input_ids.begin() + i * 64,
                                                                          all.input_ids.begin() + (i + 1) * 64));
  EXPECT_EQ(seen, want);  // 50 samples over 2 ranks: no remainder, every sample exactly once

  // drop_last: only full batches; same epoch → same batches.
  BertLoaderOptions lo;
  lo.batch_size = 4;
  lo.seed = 9;
  BertLoader a(files, lo), b(files, lo);
  EXPECT_EQ(a.batches_per_epoch(), 12);
  a.start_epoch(5);
  b.start_epoch(5);
  BertExamples ra, rb;
  int64_t n = 0;
  while (a.next(ra)) {
    ASSERT_TRUE(b.next(rb));
    EXPECT_EQ(ra.num, 4);
    EXPECT_EQ(ra.input_ids, rb.input_ids);
    ++n;
  }
  EXPECT_EQ(n, 12);

  // skip(): moves past a batch without reading it; what follows is what next() would give after
  // that batch. A loader that skips every other batch (as a data-parallel rank skips the other's)
  // delivers exactly the batches 1, 3, 5, … of one that reads them all; the epoch still ends
  // after 12 (drop_last: the 2 remaining rows are no batch).
  BertLoader c(files, lo);
  a.start_epoch(6);
  c.start_epoch(6);
  int64_t k = 0, skipped = 0;
  while (a.next(ra)) {
    if (k++ % 2 == 0) {
      ASSERT_TRUE(c.skip());
      ++skipped;
      continue;
    }
    ASSERT_TRUE(c.next(rb));
    EXPECT_EQ(ra.input_ids, rb.input_ids) << "batch " << k - 1;
  }
  EXPECT_EQ(skipped, 6);
  EXPECT_FALSE(c.skip());
  EXPECT_FALSE(c.next(rb));
}

}  // namespace
}  // namespace foldcore::data
