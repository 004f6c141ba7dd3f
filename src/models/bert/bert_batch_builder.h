// Builds BertBatch tensors from explicit sequence pairs, unpacked (one per row) or packed (several
// per row). For tests, benchmarks and tools; the production data path is data_pipeline/bert_data.
#pragma once

#include <cstdint>
#include <vector>

#include "data_pipeline/bert/bert_batch.h"

namespace foldcore::bert {

struct BertSequence {
  std::vector<int32_t> tokens;    // [CLS] A [SEP] B [SEP], already masked
  std::vector<int32_t> segments;  // 0/1 per token (empty: all 0)
  std::vector<int32_t> masked_positions;  // positions within the sequence
  std::vector<int32_t> masked_ids;        // the original tokens there
  int32_t nsp_label = 0;
};

// One sequence per row, padded to seq_len; up to max_predictions masked positions per row.
BertBatch make_unpacked_batch(const std::vector<BertSequence>& seqs, int64_t seq_len, int64_t max_predictions);
// rows[r] lists the sequences packed into row r (their total length ≤ seq_len); cu_seqlens gets one
// padding segment at the end of every row that is not full.
BertBatch make_packed_batch(const std::vector<std::vector<BertSequence>>& rows, int64_t seq_len,
                            int64_t max_predictions);

}  // namespace foldcore::bert
