// Sequence packing for BERT pre-training (MLPerf's packed BERT; Krell et al. 2021, "Efficient
// sequence packing without cross-contamination"): up to kMaxSequencesPerRow sequence pairs share
// one L-token row, attention kept inside each sequence through cu_seqlens, so the padding that
// a Wikipedia-like length distribution leaves in unpacked rows (about half the slots) is mostly
// reclaimed.
//
// Algorithm: best-fit decreasing over the length histogram (the idea of Krell's "shortest-pack-
// first histogram packing"): sequences are taken longest first (ties by index, so the plan is
// deterministic), and each goes to the open row with the least remaining room that still fits it,
// has fewer than kMaxSequencesPerRow sequences and stays within the row's prediction budget; a new
// row is opened when none does. Open rows are kept in a map remaining-room → rows, so a sequence
// costs O(log L).
#pragma once

#include <cstdint>
#include <vector>

#include "data_pipeline/bert/bert_data.h"

namespace foldcore::data {

struct BertPackingOptions {
  int seq_len = 512;               // L, row width
  int max_per_row = kMaxSequencesPerRow;
  // Masked-LM entries per packed row. 15% masking rounds up per sequence, so three sequences
  // can need up to 0.15·L + 1.5 entries (78 for L = 512): the default P + kMaxSequencesPerRow
  // (79 for MLPerf's P = 76) always suffices for BERT-style data.
  int max_predictions = 76 + kMaxSequencesPerRow;
};

// A packing plan: rows of sample indices (each row's sequences in placement order).
using BertPackPlan = std::vector<std::vector<int64_t>>;

// Packs sequences of the given lengths (and prediction counts, same size; may be empty to skip
// the budget). Every index appears in exactly one row.
BertPackPlan pack_bert_sequences(const std::vector<int>& lengths, const std::vector<int>& predictions,
                                 const BertPackingOptions& options);
// Packs the rows of an example set (lengths from input_mask, predictions from the positions).
BertPackPlan pack_bert_examples(const BertExamples& ex, const BertPackingOptions& options);

// Real tokens ÷ token slots, unpacked (one sequence per row) and packed by `plan`.
struct BertPackingStats {
  int64_t sequences = 0, rows = 0, tokens = 0;
  int seq_len = 0;
  double efficiency_unpacked() const;
  double efficiency_packed() const;
  double mean_sequences_per_row() const;
};
BertPackingStats bert_packing_stats(const std::vector<int>& lengths, const BertPackPlan& plan, int seq_len);

// A packed host BertBatch of the plan rows `rows` (B = rows.size()): each row holds its sequences
// back to back with position_ids restarting at 0, segment_ids kept, input_mask 1 on real tokens;
// masked_lm_positions rebased to the row ([B, options.max_predictions], padding 0, weight 0);
// nsp_positions / nsp_labels per sequence (flat row·L + offset of its [CLS]); cu_seqlens over
// the flattened B·L stream with each row's padding tail as its own segment (so it ends at B·L).
BertBatch make_packed_bert_batch(const BertExamples& ex, const BertPackPlan& rows, const BertPackingOptions& options);

// The inverse of make_packed_bert_batch: the sequences of a packed host batch, in row order and
// within a row in placement order, as unpacked rows of width seq_len with max_predictions entries.
BertExamples unpack_bert_batch(const BertBatch& packed, int seq_len, int max_predictions);

}  // namespace foldcore::data
