// BERT data: the host example set, shard listing, epoch shuffling/sharding, batch assembly and
// the loader (the HDF5 reading and writing live in bert_data_hdf5.cpp).
#include "data_pipeline/bert/bert_data.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace foldcore::data {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- BertExamples

BertExamples BertExamples::zeros(int64_t num, int seq_len, int max_predictions) {
  FC_CHECK(num >= 0 && seq_len > 0 && max_predictions > 0, "BertExamples: bad geometry num=", num,
           " seq_len=", seq_len, " max_predictions=", max_predictions);
  BertExamples ex;
  ex.num = num;
  ex.seq_len = seq_len;
  ex.max_predictions = max_predictions;
  const auto nl = static_cast<size_t>(num * seq_len), np = static_cast<size_t>(num * max_predictions);
  ex.input_ids.assign(nl, 0);
  ex.input_mask.assign(nl, 0);
  ex.segment_ids.assign(nl, 0);
  ex.masked_lm_positions.assign(np, 0);
  ex.masked_lm_ids.assign(np, 0);
  ex.next_sentence_labels.assign(static_cast<size_t>(num), 0);
  return ex;
}

BertExamples BertExamples::slice(int64_t begin, int64_t count) const {
  FC_CHECK(begin >= 0 && count >= 0 && begin + count <= num, "BertExamples::slice: rows [", begin, ", ",
           begin + count, ") of ", num);
  BertExamples out = zeros(0, seq_len, max_predictions);
  for (int64_t i = 0; i < count; ++i) out.append(*this, begin + i);
  return out;
}

void BertExamples::append(const BertExamples& o, int64_t row) {
  FC_CHECK(o.seq_len == seq_len && o.max_predictions == max_predictions, "BertExamples::append: geometry L=",
           o.seq_len, " P=", o.max_predictions, " into L=", seq_len, " P=", max_predictions);
  FC_CHECK(row >= 0 && row < o.num, "BertExamples::append: row ", row, " of ", o.num);
  auto take = [](std::vector<int32_t>& dst, const std::vector<int32_t>& src, int64_t r, int w) {
    dst.insert(dst.end(), src.begin() + r * w, src.begin() + (r + 1) * w);
  };
  take(input_ids, o.input_ids, row, seq_len);
  take(input_mask, o.input_mask, row, seq_len);
  take(segment_ids, o.segment_ids, row, seq_len);
  take(masked_lm_positions, o.masked_lm_positions, row, max_predictions);
  take(masked_lm_ids, o.masked_lm_ids, row, max_predictions);
  next_sentence_labels.push_back(o.next_sentence_labels[static_cast<size_t>(row)]);
  ++num;
}

int BertExamples::length(int64_t i) const {
  int n = 0;
  for (int j = 0; j < seq_len; ++j) n += input_mask[static_cast<size_t>(i * seq_len + j)] != 0;
  return n;
}

int BertExamples::num_predictions(int64_t i) const {
  for (int k = 0; k < max_predictions; ++k)
    if (masked_lm_positions[static_cast<size_t>(i * max_predictions + k)] == 0) return k;
  return max_predictions;
}

void BertExamples::validate(const std::string& what, int vocab_size) const {
  const auto nl = static_cast<size_t>(num * seq_len), np = static_cast<size_t>(num * max_predictions);
  FC_CHECK(input_ids.size() == nl && input_mask.size() == nl && segment_ids.size() == nl &&
               masked_lm_positions.size() == np && masked_lm_ids.size() == np &&
               next_sentence_labels.size() == static_cast<size_t>(num),
           what, ": array sizes do not match num=", num, " L=", seq_len, " P=", max_predictions);
  for (int64_t i = 0; i < num; ++i) {
    const int len = length(i);
    for (int j = 0; j < seq_len; ++j) {
      const auto k = static_cast<size_t>(i * seq_len + j);
      FC_CHECK((input_mask[k] != 0) == (j < len), what, ": row ", i, ": input_mask is not a prefix of ones");
      FC_CHECK(segment_ids[k] == 0 || segment_ids[k] == 1, what, ": row ", i, ": segment id ", segment_ids[k]);
      FC_CHECK(vocab_size <= 0 || (input_ids[k] >= 0 && input_ids[k] < vocab_size), what, ": row ", i,
               ": input id ", input_ids[k], " outside [0, ", vocab_size, ")");
    }
    const int np_i = num_predictions(i);
    for (int k = 0; k < max_predictions; ++k) {
      const auto idx = static_cast<size_t>(i * max_predictions + k);
      const int32_t pos = masked_lm_positions[idx];
      if (k >= np_i) {
        FC_CHECK(pos == 0 && masked_lm_ids[idx] == 0, what, ": row ", i, ": masked entry ", k,
                 " after the padding is not 0");
        continue;
      }
      FC_CHECK(pos > 0 && pos < len, what, ": row ", i, ": masked position ", pos, " outside (0, ", len, ")");
      FC_CHECK(k == 0 || pos > masked_lm_positions[idx - 1], what, ": row ", i,
               ": masked positions not ascending");
    }
    const int32_t nsp = next_sentence_labels[static_cast<size_t>(i)];
    FC_CHECK(nsp == 0 || nsp == 1, what, ": row ", i, ": next_sentence_label ", nsp);
  }
}

// ---------------------------------------------------------------- file lists

namespace {

// fnmatch-style match of `name` against `pattern` with * and ?.
bool glob_match(const char* p, const char* s) {
  if (*p == '\0') return *s == '\0';
  if (*p == '*') return glob_match(p + 1, s) || (*s != '\0' && glob_match(p, s + 1));
  if (*s != '\0' && (*p == '?' || *p == *s)) return glob_match(p + 1, s + 1);
  return false;
}

bool is_shard_name(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".hdf5" || ext == ".h5";
}

}  // namespace

std::vector<std::string> list_bert_shards(const std::string& spec) {
  std::vector<std::string> out;
  const fs::path path(spec);
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file() && is_shard_name(e.path())) out.push_back(e.path().string());
    FC_CHECK(!out.empty(), "BERT data: no *.hdf5 or *.h5 files in directory '", spec, "'");
  } else if (spec.find_first_of("*?") != std::string::npos) {
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    FC_CHECK(dir.string().find_first_of("*?") == std::string::npos, "BERT data: glob '", spec,
             "': wildcards are allowed only in the file name");
    const std::string pattern = path.filename().string();
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && glob_match(pattern.c_str(), e.path().filename().string().c_str()))
        out.push_back(e.path().string());
    FC_CHECK(!out.empty(), "BERT data: no file matches '", spec, "'");
  } else {
    FC_CHECK(fs::is_regular_file(path, ec), "BERT data: '", spec, "' is neither a file, a directory nor a glob");
    out.push_back(spec);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------- randomness

uint64_t BertRng::next() {
  // SplitMix64 (Steele, Lea, Flood 2014): a Weyl sequence through a 64-bit finaliser.
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t BertRng::below(uint64_t n) {
  FC_CHECK(n > 0, "BertRng::below(0)");
  return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
}

double BertRng::uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

uint64_t bert_mix_seed(uint64_t a, uint64_t b, uint64_t c) {
  BertRng r(a ^ 0x6A09E667F3BCC908ull);
  uint64_t h = r.next();
  BertRng r2(h ^ (b * 0xD6E8FEB86659FD93ull));
  h = r2.next();
  BertRng r3(h ^ (c * 0x9E3779B97F4A7C15ull + 0x3C6EF372FE94F82Bull));
  return r3.next();
}

std::vector<int64_t> bert_permutation(int64_t n, BertRng& rng) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(p[static_cast<size_t>(i)], p[rng.below(static_cast<uint64_t>(i + 1))]);
  return p;
}

std::vector<BertSampleRef> bert_epoch_samples(const std::vector<int64_t>& rows_per_file, uint64_t seed,
                                              int64_t epoch, int rank, int world) {
  FC_CHECK(world >= 1 && rank >= 0 && rank < world, "bert_epoch_samples: rank ", rank, " of world ", world);
  FC_CHECK(epoch >= 0, "bert_epoch_samples: epoch ", epoch);
  int64_t total = 0;
  for (int64_t r : rows_per_file) total += r;
  const int64_t per_rank = total / world, begin = rank * per_rank, end = begin + per_rank;
  BertRng file_rng(bert_mix_seed(seed, static_cast<uint64_t>(epoch)));
  const std::vector<int64_t> file_order = bert_permutation(static_cast<int64_t>(rows_per_file.size()), file_rng);
  std::vector<BertSampleRef> out;
  out.reserve(static_cast<size_t>(per_rank));
  int64_t stream = 0;  // global stream index of the current file's first row
  for (int64_t f : file_order) {
    const int64_t rows = rows_per_file[static_cast<size_t>(f)];
    const int64_t lo = std::max(begin, stream), hi = std::min(end, stream + rows);
    if (lo < hi) {  // only files overlapping this rank's block are permuted at all
      BertRng row_rng(bert_mix_seed(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(f) + 1));
      const std::vector<int64_t> perm = bert_permutation(rows, row_rng);
      for (int64_t s = lo; s < hi; ++s)
        out.push_back(BertSampleRef{static_cast<int32_t>(f), perm[static_cast<size_t>(s - stream)]});
    }
    stream += rows;
  }
  return out;
}

// ---------------------------------------------------------------- batches

BertBatch make_bert_batch(const BertExamples& ex, const std::vector<int64_t>& rows) {
  const auto b = static_cast<int64_t>(rows.size());
  const int L = ex.seq_len, P = ex.max_predictions;
  BertBatch batch;
  batch.input_ids = Tensor::empty({b, L}, DType::i32);
  batch.segment_ids = Tensor::empty({b, L}, DType::i32);
  batch.position_ids = Tensor::empty({b, L}, DType::i32);
  batch.input_mask = Tensor::empty({b, L}, DType::i32);
  batch.masked_lm_positions = Tensor::empty({b, P}, DType::i32);
  batch.masked_lm_ids = Tensor::empty({b, P}, DType::i32);
  batch.masked_lm_weights = Tensor::empty({b, P}, DType::f32);
  batch.nsp_positions = Tensor::empty({b}, DType::i32);
  batch.nsp_labels = Tensor::empty({b}, DType::i32);
  int32_t* ids = batch.input_ids.data<int32_t>();
  int32_t* seg = batch.segment_ids.data<int32_t>();
  int32_t* pos = batch.position_ids.data<int32_t>();
  int32_t* mask = batch.input_mask.data<int32_t>();
  int32_t* mpos = batch.masked_lm_positions.data<int32_t>();
  int32_t* mids = batch.masked_lm_ids.data<int32_t>();
  float* mw = batch.masked_lm_weights.data<float>();
  int32_t* nsp_pos = batch.nsp_positions.data<int32_t>();
  int32_t* nsp = batch.nsp_labels.data<int32_t>();
  int64_t real = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t r = rows[static_cast<size_t>(i)];
    FC_CHECK(r >= 0 && r < ex.num, "make_bert_batch: row ", r, " of ", ex.num);
    for (int j = 0; j < L; ++j) {
      const auto src = static_cast<size_t>(r * L + j), dst = static_cast<size_t>(i * L + j);
      ids[dst] = ex.input_ids[src];
      seg[dst] = ex.segment_ids[src];
      mask[dst] = ex.input_mask[src] != 0;
      pos[dst] = j;
      real += mask[dst];
    }
    const int np = ex.num_predictions(r);
    for (int k = 0; k < P; ++k) {
      const auto src = static_cast<size_t>(r * P + k), dst = static_cast<size_t>(i * P + k);
      mpos[dst] = k < np ? ex.masked_lm_positions[src] : 0;
      mids[dst] = k < np ? ex.masked_lm_ids[src] : 0;
      mw[dst] = k < np ? 1.f : 0.f;
    }
    nsp_pos[i] = static_cast<int32_t>(i * L);
    nsp[i] = ex.next_sentence_labels[static_cast<size_t>(r)];
  }
  batch.packed = false;
  batch.num_real_tokens = real;
  return batch;
}

// ---------------------------------------------------------------- loader

BertLoader::BertLoader(std::vector<std::string> files, BertLoaderOptions options)
    : files_(std::move(files)), options_(options) {
  FC_CHECK(!files_.empty(), "BertLoader: no shard files");
  FC_CHECK(options_.batch_size > 0, "BertLoader: batch_size ", options_.batch_size);
  FC_CHECK(options_.world >= 1 && options_.rank >= 0 && options_.rank < options_.world, "BertLoader: rank ",
           options_.rank, " of world ", options_.world);
  for (size_t f = 0; f < files_.size(); ++f) {
    const BertShardInfo info = inspect_bert_shard(files_[f]);
    if (f == 0) {
      geometry_ = info;
    } else {
      FC_CHECK(info.seq_len == geometry_.seq_len && info.max_predictions == geometry_.max_predictions,
               "BERT data: '", files_[f], "' has L=", info.seq_len, " P=", info.max_predictions, " but '", files_[0],
               "' has L=", geometry_.seq_len, " P=", geometry_.max_predictions);
    }
    rows_per_file_.push_back(info.num);
  }
  geometry_.num = 0;
  for (int64_t r : rows_per_file_) geometry_.num += r;
  start_epoch(0);
}

void BertLoader::start_epoch(int64_t epoch) {
  samples_ = bert_epoch_samples(rows_per_file_, options_.seed, epoch, options_.rank, options_.world);
  cursor_ = 0;
}

int64_t BertLoader::samples_per_epoch() const { return static_cast<int64_t>(samples_.size()); }

int64_t BertLoader::batches_per_epoch() const {
  const int64_t n = samples_per_epoch(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

size_t BertLoader::next_batch_rows() const {
  const size_t remaining = samples_.size() - cursor_;
  const auto b = static_cast<size_t>(options_.batch_size);
  if (remaining == 0 || (options_.drop_last && remaining < b)) return 0;
  return std::min(remaining, b);
}

bool BertLoader::skip() {
  const size_t count = next_batch_rows();
  cursor_ += count;
  return count > 0;
}

bool BertLoader::next(BertExamples& rows) {
  const size_t count = next_batch_rows();
  if (count == 0) return false;
  rows = BertExamples::zeros(0, geometry_.seq_len, geometry_.max_predictions);
  for (size_t i = 0; i < count; ++i) {
    const BertSampleRef& s = samples_[cursor_ + i];
    if (s.file != cached_file_) {  // the stream visits each file's rows contiguously
      cache_ = read_bert_shard(files_[static_cast<size_t>(s.file)]);
      cached_file_ = s.file;
    }
    rows.append(cache_, s.row);
  }
  cursor_ += count;
  return true;
}

bool BertLoader::next(BertBatch& batch) {
  BertExamples rows;
  if (!next(rows)) return false;
  std::vector<int64_t> idx(static_cast<size_t>(rows.num));
  for (int64_t i = 0; i < rows.num; ++i) idx[static_cast<size_t>(i)] = i;
  batch = make_bert_batch(rows, idx);
  return true;
}

}  // namespace foldcore::data
