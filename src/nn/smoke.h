// The Transformer-core smoke training: a small post-LN encoder learns to output the reversed
// token sequence (each position must attend to its mirror position). Used by `foldcore smoke`
// and tests/nn/test_smoke_training.cpp: the loss must fall by at least 10x.
#pragma once

#include <cstdint>
#include <functional>

#include "core/device.h"
#include "core/dtype.h"

namespace foldcore::nn {

struct SmokeConfig {
  int steps = 150;
  uint64_t seed = 0;
  Device device = Device::cpu();
  DType precision = DType::f32;  // bf16: autocast GEMMs/attention, fp32 master weights
  int log_every = 25;
  int batch = 32, seq = 12, vocab = 12;
  int d_model = 32, heads = 4, d_ff = 64, layers = 2;
  float lr = 3e-3f, dropout = 0.f;
};

struct SmokeLog {
  int step = 0;  // 1-based
  float loss = 0;
  double ms_per_step = 0;  // mean over the steps since the previous log
};

struct SmokeResult {
  float initial_loss = 0;  // step 1
  float final_loss = 0;    // mean over the last min(10, steps) steps
  double ratio = 0;        // initial / final
  size_t peak_bytes = 0;   // peak of the device's default allocator during training
  int64_t num_parameters = 0;
  double seconds = 0;
};

SmokeResult run_smoke_training(const SmokeConfig& config, const std::function<void(const SmokeLog&)>& on_log = {});

}  // namespace foldcore::nn
