// The small learnable BERT corpus the data-parallel BERT tests train on (tests/dist and
// tests/apps): 512 training and 64 eval sequences of length 32, in a temporary folder removed at
// the end. Model geometry to match: vocabulary 2000, ≤ 5 predictions, positions 32.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "data_pipeline/bert/bert_corpus.h"

namespace foldcore::testing {

struct BertDpCorpus {
  std::filesystem::path dir;
  explicit BertDpCorpus(const std::string& tag)
      : dir(std::filesystem::temp_directory_path() / ("foldcore_bert_dp_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir);
    data::BertCorpusOptions o;
    o.kind = data::BertCorpusKind::learnable;
    o.seq_len = 32;
    o.max_predictions = 5;
    o.vocab_size = 2000;
    o.seed = 3;
    o.max_sentence_len = 12;
    data::write_bert_corpus((dir / "train").string(), o, 512, 2);
    o.eval = true;
    data::write_bert_corpus((dir / "eval").string(), o, 64, 1);
  }
  ~BertDpCorpus() { std::filesystem::remove_all(dir); }
  BertDpCorpus(const BertDpCorpus&) = delete;
  BertDpCorpus& operator=(const BertDpCorpus&) = delete;
};

}  // namespace foldcore::testing
