// One BERT pre-training batch on the host or device, packed or not. Produced by the data layer
// (data_pipeline/bert/bert_data.h: MLPerf HDF5 shards, packing) and consumed by the model
// (src/models/bert/), so it lives in the data layer. Shapes: B rows of L = max_seq_length tokens, P = max_predictions_per_seq.
//
// Unpacked (MLPerf's format): one sequence pair per row; position_ids = 0..L-1; segment_ids 0/1;
// input_mask 1 for real tokens; next_sentence_labels [B].
// Packed: up to kMaxSequencesPerRow sequence pairs per row; position_ids restart at 0 for each
// sequence; cu_seqlens lists the boundaries in the flattened [B·L] token stream (B·L tokens with
// padding segments allowed at row ends); attention stays within a sequence; next-sentence
// labels are per packed sequence (nsp_labels [num_sequences]) with nsp_positions (flat index of
// each sequence's [CLS] token in the B·L stream).
#pragma once

#include "core/tensor.h"

namespace foldcore {

inline constexpr int kMaxSequencesPerRow = 3;

struct BertBatch {
  Tensor input_ids;             // i32 [B, L]
  Tensor segment_ids;           // i32 [B, L]
  Tensor position_ids;          // i32 [B, L]
  Tensor input_mask;            // i32 [B, L] (1 = real token)
  Tensor masked_lm_positions;   // i32 [B, P] (position within the row; padding entries 0)
  Tensor masked_lm_ids;         // i32 [B, P]
  Tensor masked_lm_weights;     // f32 [B, P] (1 = real prediction, 0 = padding)
  Tensor nsp_positions;         // i32 [S]: flat index (row·L + col) of each sequence's [CLS]
  Tensor nsp_labels;            // i32 [S]: 0 = IsNext, 1 = NotNext (MLPerf's convention)
  Tensor cu_seqlens;            // i32 [S_total + 1] over the B·L stream when packed; undefined otherwise
  bool packed = false;
  int64_t num_real_tokens = 0;  // Σ input_mask
};

}  // namespace foldcore
