// Training configuration of `foldcore train` (configs/train/<name>.yaml): which model YAML gives
// the architecture, the training stage (loss weights), the sample transforms (crop, MSA sizes,
// recycling), the optimiser (AlphaFold2 suppl. 1.11.3: Adam β 0.9/0.999, ε 1e-6, linear warm-up
// then ×0.95 decay, per-example clipping at global norm 0.1, EMA 0.999) and the run's cadence.
//
// Every key of every section is required and no other key is allowed, so a typo or a preset
// written for another version fails at once with the file and the key, not hours into a run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data_pipeline/training/training_sample.h"
#include "models/alphafold/model/config.h"
#include "nn/optimizer.h"

namespace foldcore::af2 {

struct TrainOptimConfig {
  nn::AdamConfig adam;                     // lr is the schedule's max_lr
  nn::AlphaFoldScheduleConfig schedule;
  float clip_grad_norm = 0.1f;             // per example, before averaging (≤ 0: no clipping)
  int64_t batch_size = 1;                  // samples per optimiser step (gradient accumulation)
  float ema_decay = 0.999f;
};

struct TrainRunConfig {
  int64_t max_steps = 0;           // optimiser steps attempted (skipped ones included)
  int64_t checkpoint_every = 0;    // steps between checkpoints (the last step always writes one)
  int64_t log_every = 1;           // steps between progress lines (metrics.jsonl has every step)
  int64_t max_nonfinite_in_a_row = 5;  // stop after this many consecutive skipped steps
  uint64_t seed = 0;               // parameter init, dropout and the loader's sample keys
  bool dropout = true;
  int workers = 2;                 // loader threads
};

// Validation on chains of the store (af2_validation.h): lDDT-Cα, GDT-TS and Cα-RMSD of the
// model's prediction against the true structure, before the first step and every `every` steps.
struct TrainValidationConfig {
  std::vector<std::string> chains;  // store chain names ("1abc_A"); empty: no validation
  int64_t every = 0;                // steps between validations (0: none); the last step always runs one
  // true: the validation chains are left out of training (held-out evaluation); false: they are
  // trained on too (an overfitting check, configs/train/overfit.yaml).
  bool held_out = true;
  // true: score the EMA of the weights (what AlphaFold2 evaluates and `export_params --ema`
  // writes); false: the trained weights.
  bool ema = true;
};

struct TrainConfig {
  std::string name;
  std::string path;        // the YAML it came from
  std::string model_path;  // model YAML, resolved against the training YAML's folder
  Af2Config model;
  std::string stage = "initial";  // loss weights: initial | finetune (suppl. Table 4)
  data::TrainingSampleConfig data;
  TrainOptimConfig optim;
  TrainRunConfig run;
  TrainValidationConfig validation;
};

// Reads and validates `path` and the model YAML it names. Errors (foldcore::Error) name the file
// and the offending key: unknown or missing keys, bad values, an unknown stage.
TrainConfig load_train_config(const std::string& path);

// The keys a training YAML must hold, "section.key" (for docs and tests).
std::vector<std::string> train_config_keys();

}  // namespace foldcore::af2
