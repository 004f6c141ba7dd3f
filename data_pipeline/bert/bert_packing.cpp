// BERT sequence packing (see bert_packing.h): best-fit decreasing, packed batches and unpacking.
#include "data_pipeline/bert/bert_packing.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"

namespace foldcore::data {

BertPackPlan pack_bert_sequences(const std::vector<int>& lengths, const std::vector<int>& predictions,
                                 const BertPackingOptions& o) {
  FC_CHECK(o.seq_len > 0 && o.max_per_row >= 1, "pack_bert_sequences: seq_len ", o.seq_len, " max_per_row ",
           o.max_per_row);
  FC_CHECK(predictions.empty() || predictions.size() == lengths.size(), "pack_bert_sequences: ", lengths.size(),
           " lengths but ", predictions.size(), " prediction counts");
  const bool budget = !predictions.empty();
  const auto n = static_cast<int64_t>(lengths.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
  });
  BertPackPlan plan;
  std::vector<int> room, preds;  // per row: free token slots and masked-LM entries used
  // Open rows (fewer than max_per_row sequences) by remaining room; each bucket in row order.
  std::map<int, std::vector<int64_t>> open;
  for (int64_t s : order) {
    const int len = lengths[static_cast<size_t>(s)];
    const int pr = budget ? predictions[static_cast<size_t>(s)] : 0;
    FC_CHECK(len >= 1 && len <= o.seq_len, "pack_bert_sequences: sequence ", s, " has length ", len,
             " (row width ", o.seq_len, ")");
    FC_CHECK(!budget || pr <= o.max_predictions, "pack_bert_sequences: sequence ", s, " has ", pr,
             " predictions, more than the row budget ", o.max_predictions);
    int64_t row = -1;
    for (auto it = open.lower_bound(len); it != open.end() && row < 0;) {
      std::vector<int64_t>& bucket = it->second;
      for (size_t k = 0; k < bucket.size(); ++k) {
        if (budget && preds[static_cast<size_t>(bucket[k])] + pr > o.max_predictions) continue;
        row = bucket[k];
        bucket.erase(bucket.begin() + static_cast<std::ptrdiff_t>(k));
        break;
      }
      it = bucket.empty() ? open.erase(it) : std::next(it);
    }
    if (row < 0) {
      row = static_cast<int64_t>(plan.size());
      plan.emplace_back();
      room.push_back(o.seq_len);
      preds.push_back(0);
    }
    const auto r = static_cast<size_t>(row);
    plan[r].push_back(s);
    room[r] -= len;
    preds[r] += pr;
    if (static_cast<int>(plan[r].size()) < o.max_per_row && room[r] > 0) {
      std::vector<int64_t>& bucket = open[room[r]];
      bucket.insert(std::lower_bound(bucket.begin(), bucket.end(), row), row);  // keep row order: deterministic ties
    }
  }
  return plan;
}

BertPackPlan pack_bert_examples(const BertExamples& ex, const BertPackingOptions& o) {
  FC_CHECK(ex.seq_len <= o.seq_len, "pack_bert_examples: sequences of width ", ex.seq_len, " into rows of ",
           o.seq_len);
  std::vector<int> lengths(static_cast<size_t>(ex.num)), preds(static_cast<size_t>(ex.num));
  for (int64_t i = 0; i < ex.num; ++i) {
    lengths[static_cast<size_t>(i)] = ex.length(i);
    preds[static_cast<size_t>(i)] = ex.num_predictions(i);
  }
  return pack_bert_sequences(lengths, preds, o);
}

double BertPackingStats::efficiency_unpacked() const {
  return sequences ? static_cast<double>(tokens) / (static_cast<double>(sequences) * seq_len) : 0.0;
}
double BertPackingStats::efficiency_packed() const {
  return rows ? static_cast<double>(tokens) / (static_cast<double>(rows) * seq_len) : 0.0;
}
double BertPackingStats::mean_sequences_per_row() const {
  return rows ? static_cast<double>(sequences) / static_cast<double>(rows) : 0.0;
}

BertPackingStats bert_packing_stats(const std::vector<int>& lengths, const BertPackPlan& plan, int seq_len) {
  BertPackingStats s;
  s.seq_len = seq_len;
  s.sequences = static_cast<int64_t>(lengths.size());
  s.rows = static_cast<int64_t>(plan.size());
  for (int len : lengths) s.tokens += len;
  return s;
}

BertBatch make_packed_bert_batch(const BertExamples& ex, const BertPackPlan& rows, const BertPackingOptions& o) {
  const auto B = static_cast<int64_t>(rows.size());
  const int L = o.seq_len, P = o.max_predictions;
  FC_CHECK(ex.seq_len <= L, "make_packed_bert_batch: sequences of width ", ex.seq_len, " into rows of ", L);
  std::vector<int32_t> ids(static_cast<size_t>(B * L), 0), seg(ids.size(), 0), pos(ids.size(), 0), mask(ids.size(), 0);
  std::vector<int32_t> mpos(static_cast<size_t>(B * P), 0), mids(mpos.size(), 0);
  std::vector<float> mw(mpos.size(), 0.f);
  std::vector<int32_t> nsp_pos, nsp, cu{0};
  int64_t real = 0;
  for (int64_t r = 0; r < B; ++r) {
    const std::vector<int64_t>& seqs = rows[static_cast<size_t>(r)];
    FC_CHECK(!seqs.empty() && static_cast<int>(seqs.size()) <= o.max_per_row, "make_packed_bert_batch: row ", r,
             " has ", seqs.size(), " sequences (1 to ", o.max_per_row, " allowed)");
    int off = 0, np = 0;
    for (int64_t s : seqs) {
      FC_CHECK(s >= 0 && s < ex.num, "make_packed_bert_batch: sequence ", s, " of ", ex.num);
      const int len = ex.length(s), pr = ex.num_predictions(s);
      FC_CHECK(off + len <= L, "make_packed_bert_batch: row ", r, " overflows ", L, " tokens");
      FC_CHECK(np + pr <= P, "make_packed_bert_batch: row ", r, " needs more than ", P, " masked-LM entries");
      for (int j = 0; j < len; ++j) {
        const auto src = static_cast<size_t>(s * ex.seq_len + j), dst = static_cast<size_t>(r * L + off + j);
        ids[dst] = ex.input_ids[src];
        seg[dst] = ex.segment_ids[src];
        pos[dst] = j;  // positions restart per sequence
        mask[dst] = 1;
      }
      for (int k = 0; k < pr; ++k) {
        const auto src = static_cast<size_t>(s * ex.max_predictions + k), dst = static_cast<size_t>(r * P + np + k);
        mpos[dst] = ex.masked_lm_positions[src] + off;
        mids[dst] = ex.masked_lm_ids[src];
        mw[dst] = 1.f;
      }
      nsp_pos.push_back(static_cast<int32_t>(r * L + off));
      nsp.push_back(ex.next_sentence_labels[static_cast<size_t>(s)]);
      off += len;
      np += pr;
      real += len;
      cu.push_back(static_cast<int32_t>(r * L + off));
    }
    if (off < L) cu.push_back(static_cast<int32_t>((r + 1) * L));  // the padding tail: its own segment
  }
  auto tensor = [](const std::vector<int32_t>& v, Shape shape) {
    Tensor t = Tensor::empty(shape, DType::i32);
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  };
  BertBatch b;
  b.input_ids = tensor(ids, {B, L});
  b.segment_ids = tensor(seg, {B, L});
  b.position_ids = tensor(pos, {B, L});
  b.input_mask = tensor(mask, {B, L});
  b.masked_lm_positions = tensor(mpos, {B, P});
  b.masked_lm_ids = tensor(mids, {B, P});
  b.masked_lm_weights = Tensor::empty({B, P}, DType::f32);
  std::copy(mw.begin(), mw.end(), b.masked_lm_weights.data<float>());
  b.nsp_positions = tensor(nsp_pos, {static_cast<int64_t>(nsp_pos.size())});
  b.nsp_labels = tensor(nsp, {static_cast<int64_t>(nsp.size())});
  b.cu_seqlens = tensor(cu, {static_cast<int64_t>(cu.size())});
  b.packed = true;
  b.num_real_tokens = real;
  return b;
}

BertExamples unpack_bert_batch(const BertBatch& packed, int seq_len, int max_predictions) {
  FC_CHECK(packed.packed && packed.cu_seqlens.defined(), "unpack_bert_batch: not a packed batch");
  const int64_t B = packed.input_ids.size(0), L = packed.input_ids.size(1), P = packed.masked_lm_positions.size(1);
  const int32_t* ids = packed.input_ids.data<int32_t>();
  const int32_t* seg = packed.segment_ids.data<int32_t>();
  const int32_t* mpos = packed.masked_lm_positions.data<int32_t>();
  const int32_t* mids = packed.masked_lm_ids.data<int32_t>();
  const float* mw = packed.masked_lm_weights.data<float>();
  const int32_t* cu = packed.cu_seqlens.data<int32_t>();
  const int32_t* nsp_pos = packed.nsp_positions.data<int32_t>();
  const int32_t* nsp = packed.nsp_labels.data<int32_t>();
  const int64_t S = packed.nsp_positions.numel(), segments = packed.cu_seqlens.numel() - 1;
  FC_CHECK(cu[0] == 0 && cu[segments] == B * L, "unpack_bert_batch: cu_seqlens must span [0, B·L]");
  BertExamples out = BertExamples::zeros(S, seq_len, max_predictions);
  int64_t seq = 0;
  for (int64_t g = 0; g < segments; ++g) {
    const int64_t start = cu[g], len = cu[g + 1] - cu[g];
    if (seq >= S || nsp_pos[seq] != start) continue;  // a padding tail
    const int64_t row = start / L, off = start % L;
    FC_CHECK(off + len <= L && len <= seq_len, "unpack_bert_batch: segment ", g, " crosses a row or is too long");
    for (int64_t j = 0; j < len; ++j) {
      const auto dst = static_cast<size_t>(seq * seq_len + j);
      out.input_ids[dst] = ids[start + j];
      out.segment_ids[dst] = seg[start + j];
      out.input_mask[dst] = 1;
    }
    int k = 0;
    for (int64_t e = 0; e < P; ++e) {
      const int32_t p = mpos[row * P + e];
      if (mw[row * P + e] == 0.f || p < off || p >= off + len) continue;
      FC_CHECK(k < max_predictions, "unpack_bert_batch: sequence ", seq, " has more than ", max_predictions,
               " predictions");
      out.masked_lm_positions[static_cast<size_t>(seq * max_predictions + k)] = static_cast<int32_t>(p - off);
      out.masked_lm_ids[static_cast<size_t>(seq * max_predictions + k)] = mids[row * P + e];
      ++k;
    }
    out.next_sentence_labels[static_cast<size_t>(seq)] = nsp[seq];
    ++seq;
  }
  FC_CHECK(seq == S, "unpack_bert_batch: found ", seq, " of ", S, " sequences at their nsp_positions");
  return out;
}

}  // namespace foldcore::data
