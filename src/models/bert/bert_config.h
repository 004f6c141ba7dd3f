// BERT pre-training configuration (MLPerf Training "language/bert"): the model shape and the
// optimisation hyperparameters. Defaults are BERT-Large with MLPerf's reference LAMB settings;
// configs/bert/*.yaml override them (load_bert_config, compiled only with yaml-cpp).
#pragma once

#include <cstdint>
#include <string>

namespace foldcore::bert {

struct BertModelConfig {
  int64_t vocab_size = 30522;
  int64_t hidden = 1024;
  int64_t num_layers = 24;
  int64_t num_heads = 16;  // head_dim = hidden / num_heads (64)
  int64_t ffn = 4096;      // GELU
  int64_t max_positions = 512;
  int64_t type_vocab_size = 2;
  float ln_eps = 1e-12f;
  float dropout = 0.1f;  // hidden dropout (embeddings, after attention and FFN)
  float init_std = 0.02f;
};

struct BertTrainConfig {
  // LAMB (MLPerf reference: opt_lamb_beta_1 0.9, beta_2 0.999, weight_decay_rate 0.01).
  float lr = 4e-4f, end_lr = 0.f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1000;  // the polynomial decay horizon (MLPerf: max_steps)
  float decay_power = 1.f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f;
  float weight_decay = 0.01f;  // not applied to biases and LayerNorm parameters
  float max_grad_norm = 1.f;   // ≤ 0: no clipping
  int64_t batch_size = 32;     // rows per micro-batch
  int64_t grad_accumulation = 1;
  int64_t max_seq_length = 512;
  int64_t max_predictions = 76;
  int64_t eval_every_samples = 0;  // 0: evaluate only at the end
  int64_t eval_samples = 0;        // 0: the whole eval set
  double target_mlm_accuracy = 0.72;  // MLPerf's quality target
  uint64_t seed = 42;
};

struct BertConfig {
  std::string name = "large";
  BertModelConfig model;
  BertTrainConfig train;
};

// Reads a YAML file with optional sections `model:` and `train:` whose keys are the field names
// above; unknown keys are an Error (typos must not silently fall back to defaults).
BertConfig load_bert_config(const std::string& path);

}  // namespace foldcore::bert
