// Shared by the BERT model tests (CPU and CUDA): the tiny configuration, a model holder with fixed
// seeds, and random sequence pairs.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/autograd.h"
#include "core/random.h"
#include "models/bert/bert_batch_builder.h"
#include "models/bert/bert_model.h"

namespace foldcore::bert {

inline BertModelConfig tiny_config() {
  BertModelConfig c;
  c.vocab_size = 40;
  c.hidden = 16;
  c.num_layers = 2;
  c.num_heads = 4;
  c.ffn = 32;
  c.max_positions = 24;
  c.dropout = 0.1f;
  return c;
}

struct Model {
  Generator init{7}, drop{8};
  autograd::ParamStore params;
  BertForPreTraining bert;
  explicit Model(const BertModelConfig& c, Device device = Device::cpu())
      : params(device), bert(nn::Scope{&params, &init, &drop, ""}, c) {
    params.finalize();
    bert.train(false);  // deterministic: no dropout
  }
};

// A random sequence pair [CLS] a… [SEP] b… [SEP] (ids 1, 2; mask id 3) of length len with a few
// masked positions.
inline BertSequence random_sequence(int64_t len, int64_t vocab, Generator& g, int num_masked) {
  const std::vector<int64_t> r = randint({len + 2 * num_masked + 1}, g, 5, vocab).to_vector_i64();
  BertSequence s;
  const int64_t split = len / 2;
  for (int64_t i = 0; i < len; ++i) {
    const bool sep = i == split || i == len - 1;
    s.tokens.push_back(i == 0 ? 1 : sep ? 2 : static_cast<int32_t>(r[static_cast<size_t>(i)]));
    s.segments.push_back(i > split ? 1 : 0);
  }
  for (int j = 0; j < num_masked; ++j) {
    const int32_t p = static_cast<int32_t>(1 + j * 2);  // distinct, inside the first segment
    s.masked_positions.push_back(p);
    s.masked_ids.push_back(s.tokens[static_cast<size_t>(p)]);
    s.tokens[static_cast<size_t>(p)] = 3;
  }
  s.nsp_label = static_cast<int32_t>(r.back() % 2);
  return s;
}

}  // namespace foldcore::bert
