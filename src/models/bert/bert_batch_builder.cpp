#include "models/bert/bert_batch_builder.h"

#include "core/error.h"

namespace foldcore::bert {
namespace {

Tensor i32(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector_i64(v, s, DType::i32); }

}  // namespace

BertBatch make_packed_batch(const std::vector<std::vector<BertSequence>>& rows, int64_t seq_len,
                            int64_t max_predictions) {
  FC_CHECK(!rows.empty() && seq_len > 0 && max_predictions > 0, "make_packed_batch: ", rows.size(),
           " rows, seq_len ", seq_len, ", max_predictions ", max_predictions);
  const int64_t b = static_cast<int64_t>(rows.size()), n = b * seq_len, np = b * max_predictions;
  std::vector<int64_t> ids(n, 0), seg(n, 0), pos(n, 0), mask(n, 0), mpos(np, 0), mids(np, 0), nsp_pos, nsp_lab,
      cu{0};
  std::vector<float> mw(static_cast<size_t>(np), 0.f);
  BertBatch out;
  for (int64_t r = 0; r < b; ++r) {
    int64_t col = 0, pred = 0;
    for (const BertSequence& s : rows[static_cast<size_t>(r)]) {
      const int64_t len = static_cast<int64_t>(s.tokens.size());
      FC_CHECK(len > 0 && col + len <= seq_len, "make_packed_batch: row ", r, " overflows seq_len ", seq_len);
      FC_CHECK(s.segments.empty() || s.segments.size() == s.tokens.size(), "make_packed_batch: segments size");
      FC_CHECK(s.masked_positions.size() == s.masked_ids.size(), "make_packed_batch: masked positions/ids differ");
      for (int64_t i = 0; i < len; ++i) {
        const size_t k = static_cast<size_t>(r * seq_len + col + i);
        ids[k] = s.tokens[static_cast<size_t>(i)];
        seg[k] = s.segments.empty() ? 0 : s.segments[static_cast<size_t>(i)];
        pos[k] = i;
        mask[k] = 1;
      }
      for (size_t j = 0; j < s.masked_positions.size(); ++j, ++pred) {
        FC_CHECK(pred < max_predictions, "make_packed_batch: row ", r, " has more than ", max_predictions,
                 " masked positions");
        const size_t k = static_cast<size_t>(r * max_predictions + pred);
        mpos[k] = col + s.masked_positions[j];
        mids[k] = s.masked_ids[j];
        mw[k] = 1.f;
      }
      nsp_pos.push_back(r * seq_len + col);
      nsp_lab.push_back(s.nsp_label);
      col += len;
      cu.push_back(r * seq_len + col);
      out.num_real_tokens += len;
    }
    if (col < seq_len) cu.push_back((r + 1) * seq_len);  // the row's padding as its own segment
  }
  out.input_ids = i32(ids, {b, seq_len});
  out.segment_ids = i32(seg, {b, seq_len});
  out.position_ids = i32(pos, {b, seq_len});
  out.input_mask = i32(mask, {b, seq_len});
  out.masked_lm_positions = i32(mpos, {b, max_predictions});
  out.masked_lm_ids = i32(mids, {b, max_predictions});
  out.masked_lm_weights = Tensor::from_vector(mw, {b, max_predictions});
  out.nsp_positions = i32(nsp_pos, {static_cast<int64_t>(nsp_pos.size())});
  out.nsp_labels = i32(nsp_lab, {static_cast<int64_t>(nsp_lab.size())});
  out.cu_seqlens = i32(cu, {static_cast<int64_t>(cu.size())});
  out.packed = true;
  return out;
}

BertBatch make_unpacked_batch(const std::vector<BertSequence>& seqs, int64_t seq_len, int64_t max_predictions) {
  std::vector<std::vector<BertSequence>> rows;
  for (const BertSequence& s : seqs) rows.push_back({s});
  BertBatch b = make_packed_batch(rows, seq_len, max_predictions);
  b.packed = false;
  b.cu_seqlens = Tensor();
  return b;
}

}  // namespace foldcore::bert
