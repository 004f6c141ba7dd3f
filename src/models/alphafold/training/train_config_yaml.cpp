// load_train_config with yaml-cpp (compiled only when yaml-cpp is found).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "core/error.h"
#include "models/alphafold/model/config_yaml.h"
#include "models/alphafold/losses/losses_total.h"
#include "models/alphafold/training/train_config.h"

namespace foldcore::af2 {
namespace {

using Setter = std::function<void(const YAML::Node&)>;
using Section = std::vector<std::pair<std::string, Setter>>;

template <typename T> Setter set(T& field) {
  return [&field](const YAML::Node& n) { field = n.as<T>(); };
}

// The sections and keys of a training YAML, bound to the fields of `c`. One table serves parsing,
// the missing/unknown-key checks and train_config_keys(), so they cannot drift apart.
std::vector<std::pair<std::string, Section>> sections(TrainConfig& c) {
  data::TrainingSampleConfig& d = c.data;
  TrainOptimConfig& o = c.optim;
  TrainRunConfig& r = c.run;
  TrainValidationConfig& v = c.validation;
  return {
      {"data",
       {{"crop_size", set(d.crop_size)}, {"spatial_crop_probability", set(d.spatial_crop_probability)},
        {"max_msa_clusters", set(d.max_msa_clusters)}, {"max_extra_msa", set(d.max_extra_msa)},
        {"max_templates", set(d.max_templates)}, {"use_templates", set(d.use_templates)},
        {"max_recycles", set(d.max_recycles)}, {"clamped_fape_probability", set(d.clamped_fape_probability)},
        {"block_delete_msa", set(d.block_delete_msa)}}},
      {"optim",
       {{"lr", set(o.schedule.max_lr)}, {"beta1", set(o.adam.beta1)}, {"beta2", set(o.adam.beta2)},
        {"eps", set(o.adam.eps)}, {"warmup_steps", set(o.schedule.warmup_steps)},
        {"decay_start", set(o.schedule.decay_start)}, {"decay_every", set(o.schedule.decay_every)},
        {"decay_factor", set(o.schedule.decay_factor)}, {"clip_grad_norm", set(o.clip_grad_norm)},
        {"batch_size", set(o.batch_size)}, {"ema_decay", set(o.ema_decay)}}},
      {"run",
       {{"max_steps", set(r.max_steps)}, {"checkpoint_every", set(r.checkpoint_every)},
        {"log_every", set(r.log_every)}, {"max_nonfinite_in_a_row", set(r.max_nonfinite_in_a_row)},
        {"seed", set(r.seed)}, {"dropout", set(r.dropout)}, {"workers", set(r.workers)}}},
      {"validation", {{"chains", set(v.chains)}, {"every", set(v.every)}, {"held_out", set(v.held_out)}, {"ema", set(v.ema)}}},
  };
}

const std::vector<std::string>& top_keys() {
  static const std::vector<std::string> keys = {"name", "model", "stage", "data", "optim", "run", "validation"};
  return keys;
}

}  // namespace

std::vector<std::string> train_config_keys() {
  TrainConfig scratch;
  std::vector<std::string> out;
  for (const std::string& k : top_keys())
    if (k == "name" || k == "model" || k == "stage") out.push_back(k);
  for (const auto& [section, fields] : sections(scratch))
    for (const auto& [key, setter] : fields) out.push_back(section + "." + key);
  return out;
}

TrainConfig load_train_config(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    FC_THROW("train config ", path, ": ", e.what());
  }
  FC_CHECK(root.IsMap(), "train config ", path, ": the document must be a mapping");
  const std::set<std::string> allowed(top_keys().begin(), top_keys().end());
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    FC_CHECK(allowed.count(key), "train config ", path, ": unknown key '", key,
             "' (expected name, model, stage, data, optim, run, validation)");
  }
  for (const std::string& key : top_keys())
    FC_CHECK(root[key], "train config ", path, ": missing key '", key, "'");

  TrainConfig c;
  c.path = path;
  c.data = data::TrainingSampleConfig{};
  c.data.spatial_crop = false;
  try {
    c.name = root["name"].as<std::string>();
    c.stage = root["stage"].as<std::string>();
    c.model_path = root["model"].as<std::string>();
  } catch (const YAML::Exception& e) {
    FC_THROW("train config ", path, ": name, model and stage must be strings: ", e.what());
  }
  (void)LossWeights::stage(c.stage, false);  // throws on an unknown stage
  for (auto& [section, fields] : sections(c)) {
    const YAML::Node node = root[section];
    FC_CHECK(node.IsMap(), "train config ", path, ": '", section, "' must be a mapping");
    std::set<std::string> seen;
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == key; });
      FC_CHECK(it != fields.end(), "train config ", path, ": unknown key '", section, ".", key, "'");
      try {
        it->second(kv.second);
      } catch (const YAML::Exception& e) {
        FC_THROW("train config ", path, ": bad value for '", section, ".", key, "': ", e.what());
      }
      seen.insert(key);
    }
    for (const auto& [key, setter] : fields)
      FC_CHECK(seen.count(key), "train config ", path, ": missing key '", section, ".", key, "'");
  }
  c.optim.adam.lr = c.optim.schedule.max_lr;
  c.optim.adam.weight_decay = 0.f;

  // The model YAML: relative paths are taken from the training YAML's folder, so a run does not
  // depend on the working directory.
  std::filesystem::path model(c.model_path);
  if (model.is_relative()) model = std::filesystem::path(path).parent_path() / model;
  c.model_path = model.lexically_normal().string();
  FC_CHECK(std::filesystem::exists(c.model_path), "train config ", path, ": model YAML '", c.model_path,
           "' (key 'model') does not exist");
  std::vector<std::string> missing;
  c.model = load_af2_config(c.model_path, &missing);
  FC_CHECK(missing.empty(), "model config ", c.model_path, ": missing key '", missing.empty() ? "" : missing.front(),
           "' (named by train config ", path, ")");

  const auto positive = [&](int64_t v, const char* key) {
    FC_CHECK(v > 0, "train config ", path, ": '", key, "' must be positive (got ", v, ")");
  };
  positive(c.optim.batch_size, "optim.batch_size");
  positive(c.run.max_steps, "run.max_steps");
  positive(c.run.checkpoint_every, "run.checkpoint_every");
  positive(c.run.log_every, "run.log_every");
  positive(c.run.max_nonfinite_in_a_row, "run.max_nonfinite_in_a_row");
  positive(c.run.workers, "run.workers");
  positive(c.optim.schedule.warmup_steps, "optim.warmup_steps");
  positive(c.optim.schedule.decay_every, "optim.decay_every");
  FC_CHECK(c.validation.every >= 0, "train config ", path, ": 'validation.every' must be ≥ 0 (got ",
           c.validation.every, ")");
  FC_CHECK(c.validation.every == 0 || !c.validation.chains.empty(), "train config ", path,
           ": 'validation.every' is ", c.validation.every, " but 'validation.chains' is empty");
  FC_CHECK(c.optim.ema_decay >= 0.f && c.optim.ema_decay < 1.f, "train config ", path,
           ": 'optim.ema_decay' must be in [0, 1) (got ", c.optim.ema_decay, ")");
  try {
    c.data.validate();
  } catch (const Error& e) {
    FC_THROW("train config ", path, ": section 'data': ", e.what());
  }
  return c;
}

}  // namespace foldcore::af2
