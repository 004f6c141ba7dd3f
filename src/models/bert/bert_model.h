// BERT for pre-training (Devlin et al. 2019; MLPerf Training reference), on the shared
// Transformer core (nn::TransformerEncoderLayer, post-LN):
//
//   embeddings: LN(word[input_ids] + position[position_ids] + segment[segment_ids]) → dropout
//   encoder:    num_layers × post-LN encoder layer (self-attention with qkv bias, GELU FFN)
//   masked LM:  gather the real masked positions → dense(d, d) + GELU → LN → ·word_embeddingᵀ + bias
//   NSP:        gather each sequence's [CLS] → pooler dense(d, d) + tanh → dense(d, 2)
//   loss:       mean CE over the real masked positions + mean CE over the sequences
//
// Attention: unpacked batches use the padding mask bias [B,1,1,L] = 1e9·(mask − 1); packed batches
// flatten the rows into one [1, B·L] stream and attend within each cu_seqlens segment only, so a
// packed batch computes exactly what the unpacked sequences would (tests/models/test_bert_model.cpp).
#pragma once

#include <memory>
#include <vector>

#include "data_pipeline/bert/bert_batch.h"
#include "models/bert/bert_config.h"
#include "nn/transformer.h"

namespace foldcore::bert {

using autograd::Variable;

class BertEmbeddings : public nn::Module {
 public:
  BertEmbeddings(nn::Scope scope, const BertModelConfig& c);
  // input_ids, segment_ids, position_ids: i32 [B, L] → [B, L, hidden]
  Variable forward(const Tensor& input_ids, const Tensor& segment_ids, const Tensor& position_ids) const;
  const Variable& word_embeddings() const { return word_; }

 private:
  Variable word_, position_, segment_;
  nn::LayerNorm ln_;
  nn::Dropout dropout_;
};

struct BertOutputs {
  Variable sequence;      // [B, L, hidden] encoder output
  Variable mlm_logits;    // [N, vocab] at the N real masked positions (row-major over [B, P])
  Variable nsp_logits;    // [S, 2]
  Variable mlm_loss, nsp_loss, loss;  // scalars; loss = mlm_loss + nsp_loss
  Tensor mlm_labels;      // i32 [N] (host)
  Tensor nsp_labels;      // i32 [S] (host)
  int64_t mlm_count = 0;  // N
  int64_t mlm_correct = 0;  // argmax(mlm_logits) == label
  int64_t nsp_correct = 0;
};

class BertForPreTraining : public nn::Module {
 public:
  BertForPreTraining(nn::Scope scope, const BertModelConfig& c);
  // The whole pre-training forward. The batch may live on the host or on the model's device
  // (index tensors are small and are moved as needed). `count_correct`: compute the accuracy
  // counters (a device→host copy of the logits' argmax).
  BertOutputs forward(const BertBatch& batch, bool count_correct = false) const;
  // The encoder alone: [B, L, hidden].
  Variable encode(const BertBatch& batch) const;
  const BertModelConfig& config() const { return c_; }
  // Dense FLOPs of one forward over `tokens` tokens with `predictions` MLM rows and `sequences`
  // NSP rows, attention over sequences of `attn_len` (Σ len² / tokens) — see bert_model.cpp.
  double forward_flops(double tokens, double attn_len, double predictions, double sequences) const;

 private:
  BertModelConfig c_;
  Device device_;
  BertEmbeddings embeddings_;
  std::vector<std::unique_ptr<nn::TransformerEncoderLayer>> layers_;
  nn::Linear transform_;
  nn::LayerNorm transform_ln_;
  Variable decoder_bias_;
  nn::Linear pooler_, nsp_;
};

// Checks the batch against the model's shapes (B, L ≤ max_positions, ids in range…); throws an
// Error naming the offending tensor.
void check_batch(const BertBatch& batch, const BertModelConfig& c);

}  // namespace foldcore::bert
