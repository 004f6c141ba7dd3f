// The shipped BERT YAML configs load with the intended values; unknown keys are rejected.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "models/bert/bert_config.h"

namespace foldcore::bert {
namespace {

const std::string kDir = std::string(FOLDCORE_SOURCE_DIR) + "/configs/bert/";

TEST(BertConfigYaml, LargeIsBertLargeWithMlperfLamb) {
  const BertConfig c = load_bert_config(kDir + "large.yaml");
  EXPECT_EQ(c.name, "large");
  EXPECT_EQ(c.model.num_layers, 24);
  EXPECT_EQ(c.model.hidden, 1024);
  EXPECT_EQ(c.model.num_heads, 16);
  EXPECT_EQ(c.model.ffn, 4096);
  EXPECT_EQ(c.model.vocab_size, 30522);
  EXPECT_EQ(c.model.max_positions, 512);
  EXPECT_FLOAT_EQ(c.model.ln_eps, 1e-12f);
  EXPECT_FLOAT_EQ(c.train.weight_decay, 0.01f);
  EXPECT_FLOAT_EQ(c.train.beta2, 0.999f);
  EXPECT_EQ(c.train.max_predictions, 76);
  EXPECT_DOUBLE_EQ(c.train.target_mlm_accuracy, 0.72);
}

TEST(BertConfigYaml, TinyCoversTheSyntheticVocabulary) {
  const BertConfig c = load_bert_config(kDir + "tiny.yaml");
  EXPECT_EQ(c.model.num_layers, 2);
  EXPECT_EQ(c.model.hidden, 64);
  EXPECT_GE(c.model.vocab_size, 2000);  // ids 101-103 and the learnable region [1000, 2000)
  EXPECT_LE(c.train.max_seq_length, c.model.max_positions);
}

TEST(BertConfigYaml, RejectsUnknownKeysAndBadValues) {
  const std::string p = ::testing::TempDir() + "bert_bad.yaml";
  auto write = [&](const char* text) { std::ofstream(p) << text; };
  write("model:\n  hiden: 64\n");
  EXPECT_THROW(load_bert_config(p), Error);
  write("train:\n  lr: fast\n");
  EXPECT_THROW(load_bert_config(p), Error);
  write("model:\n  hidden: 30\n  num_heads: 4\n");
  EXPECT_THROW(load_bert_config(p), Error);
  EXPECT_THROW(load_bert_config(p + ".missing"), Error);
  std::remove(p.c_str());
}

}  // namespace
}  // namespace foldcore::bert
