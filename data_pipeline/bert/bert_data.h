// BERT pre-training data in MLPerf Training's HDF5 shard format, read and written as is, and an
// epoch loader that shuffles and shards it over data-parallel ranks and yields BertBatch.
//
// Shard format (MLPerf reference / NVIDIA's BERT: one HDF5 file per shard, N sequence pairs):
//   input_ids            [N, L]  integer  token ids, [CLS] A [SEP] B [SEP] then 0 padding
//   input_mask           [N, L]  integer  1 for real tokens, then 0
//   segment_ids          [N, L]  integer  0 for [CLS] A [SEP], 1 for B [SEP], 0 padding
//   masked_lm_positions  [N, P]  integer  positions of the masked tokens, ascending, then 0 padding
//   masked_lm_ids        [N, P]  integer  original ids at those positions, then 0 padding
//   next_sentence_labels [N]     integer  0 = IsNext, 1 = NotNext
// L = 512 and P = 76 in MLPerf. The integer width differs between versions of the conversion
// scripts (int64 in the first, int32, and int16/int8 in NVIDIA's packed-down files): any HDF5
// integer type is accepted and converted to int32 by HDF5 on read. The writer uses the compact
// layout: int16 for ids and positions (int32 when the vocabulary or L does not fit), int8 for
// the mask, segments and labels.
//
// Masked-LM padding: position 0 is always [CLS], never masked, so MLPerf marks the end of a row's
// predictions by the first position 0 (NVIDIA's loader: `index = first (positions == 0)`);
// masked_lm_weights = 1 before it and 0 from it on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data_pipeline/bert/bert_batch.h"

namespace foldcore::data {

inline constexpr int32_t kBertPadId = 0;
inline constexpr int32_t kBertClsId = 101;
inline constexpr int32_t kBertSepId = 102;
inline constexpr int32_t kBertMaskId = 103;

// N sequence pairs on the host, row-major, int32 (the in-memory form of one shard).
struct BertExamples {
  int64_t num = 0;
  int seq_len = 512;         // L
  int max_predictions = 76;  // P
  std::vector<int32_t> input_ids, input_mask, segment_ids;   // [num * L]
  std::vector<int32_t> masked_lm_positions, masked_lm_ids;   // [num * P]
  std::vector<int32_t> next_sentence_labels;                 // [num]

  // An empty set of `num` rows (all zeros) of the given geometry.
  static BertExamples zeros(int64_t num, int seq_len, int max_predictions);
  // Rows [begin, begin+count) of this set, and appending another set of the same geometry.
  BertExamples slice(int64_t begin, int64_t count) const;
  void append(const BertExamples& other, int64_t row);
  // Real tokens of row i (Σ input_mask) and number of real predictions (the prefix before the
  // first padding position 0).
  int length(int64_t i) const;
  int num_predictions(int64_t i) const;
  // Checks internal consistency (sizes, mask is a prefix, positions ascending within the real
  // tokens, ids in [0, vocab)); throws naming `what` and the row.
  void validate(const std::string& what, int vocab_size = 0) const;
};

// ---------------------------------------------------------------- HDF5 I/O (bert_data_hdf5.cpp)

// True when this build can read and write HDF5 shards.
bool bert_hdf5_supported();
// Number of rows and the geometry of a shard, checking that every dataset is present, integer
// and of a consistent shape (cheap: reads no data). Throws Error naming the file and dataset.
struct BertShardInfo {
  int64_t num = 0;
  int seq_len = 0;
  int max_predictions = 0;
};
BertShardInfo inspect_bert_shard(const std::string& path);
// Reads a whole shard (any integer dtypes). Throws Error naming the file and dataset.
BertExamples read_bert_shard(const std::string& path);
// Writes a shard in MLPerf's layout through `path`.tmp + rename (a failure leaves no file).
void write_bert_shard(const std::string& path, const BertExamples& ex);
// Writes every dataset with one stored type: "int8", "int16", "int32", "int64", "uint16" (the
// widths of other converters' files) or "float32" (a foreign file). For tests of the reader, and
// for consumers that want uniform widths: `omit` leaves that dataset out, `widen` gives it one
// more column (zeros). No validation, no temp file.
struct BertRawShardOptions {
  std::string dtype = "int32";
  std::string omit, widen;
};
void write_bert_shard_raw(const std::string& path, const BertExamples& ex, const BertRawShardOptions& options);

// ---------------------------------------------------------------- files, shuffling, sharding

// The shard files named by `spec`: a directory (its *.hdf5 / *.h5 files), a glob pattern with
// * and ? in the file name part, or one file; sorted by name so every rank sees the same list.
// Throws when nothing matches.
std::vector<std::string> list_bert_shards(const std::string& spec);

// A deterministic 64-bit generator (SplitMix64) for shuffling and data generation: the same
// seed gives the same stream on every platform (std:: distributions do not).
class BertRng {
 public:
  explicit BertRng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < n / 2^64).
  uint64_t below(uint64_t n);
  double uniform();  // [0, 1), 53 bits
 private:
  uint64_t state_;
};
// Mixes several values into one seed (so (seed, epoch, file) streams are independent).
uint64_t bert_mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);
// A Fisher-Yates permutation of 0..n-1 from `rng`.
std::vector<int64_t> bert_permutation(int64_t n, BertRng& rng);

// One (file, row) reference in the global sample stream of an epoch.
struct BertSampleRef {
  int32_t file = 0;
  int64_t row = 0;
};

// The samples of rank `rank` of `world` in epoch `epoch`:
//  1. the file order is permuted with seed mix(seed, epoch); the rows inside each file are
//     permuted with seed mix(seed, epoch, file): the concatenation is the epoch's global stream
//     of T = Σ rows samples;
//  2. every rank gets n = floor(T / world) samples (the last T mod world samples of the stream are
//     skipped this epoch, so all ranks take the same number of steps; a different epoch skips
//     different samples), rank r the contiguous block [r·n, (r+1)·n): disjoint across ranks,
//     their union is the stream less the remainder, and a rank reads only about 1/world of the
//     files.
std::vector<BertSampleRef> bert_epoch_samples(const std::vector<int64_t>& rows_per_file, uint64_t seed,
                                              int64_t epoch, int rank, int world);

// Batch b of the unpacked form: rows `rows` of `ex` gathered into a BertBatch on the host
// (position_ids 0..L-1, nsp_positions = row·L, masked_lm_weights from the first-zero rule).
BertBatch make_bert_batch(const BertExamples& ex, const std::vector<int64_t>& rows);

// ---------------------------------------------------------------- loader

struct BertLoaderOptions {
  int batch_size = 32;   // B, rows per batch (sequences per batch when packing)
  uint64_t seed = 0;
  int rank = 0, world = 1;
  // Remainder: a rank's last n mod B samples form a smaller batch when false; are skipped (and
  // come back in another epoch's order) when true, so every step has exactly B rows.
  bool drop_last = true;
};

// Iterates one rank's batches, epoch by epoch. Holds the rank's samples of one file at a time
// (the stream visits files one after another), so memory is one shard plus one batch.
class BertLoader {
 public:
  BertLoader(std::vector<std::string> files, BertLoaderOptions options);
  // Starts epoch `epoch` (any order; the same epoch always gives the same batches).
  void start_epoch(int64_t epoch);
  // The next batch of the current epoch as unpacked rows; false at the end of the epoch.
  bool next(BertExamples& rows);
  bool next(BertBatch& batch);
  // Moves past the next batch without reading it (what next() would deliver is not loaded):
  // false at the end of the epoch. A data-parallel rank skips the other ranks' batches this way.
  bool skip();
  int64_t samples_per_epoch() const;  // this rank's, before drop_last
  int64_t batches_per_epoch() const;
  const std::vector<std::string>& files() const { return files_; }
  const BertShardInfo& geometry() const { return geometry_; }

 private:
  size_t next_batch_rows() const;  // rows of the next batch (0: the epoch is over)

  std::vector<std::string> files_;
  BertLoaderOptions options_;
  std::vector<int64_t> rows_per_file_;
  BertShardInfo geometry_;
  std::vector<BertSampleRef> samples_;
  size_t cursor_ = 0;
  int32_t cached_file_ = -1;
  BertExamples cache_;
};

}  // namespace foldcore::data
