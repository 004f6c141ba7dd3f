// load_bert_config with yaml-cpp (compiled only when yaml-cpp is found).
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>

#include "core/error.h"
#include "models/bert/bert_config.h"

namespace foldcore::bert {
namespace {

using Setter = std::function<void(const YAML::Node&)>;

template <typename T> Setter set(T& field) {
  return [&field](const YAML::Node& n) { field = n.as<T>(); };
}

void apply(const YAML::Node& section, const std::map<std::string, Setter>& fields, const std::string& path,
           const std::string& name) {
  if (!section) return;
  FC_CHECK(section.IsMap(), "bert config ", path, ": '", name, "' must be a mapping");
  for (const auto& kv : section) {
    const std::string key = kv.first.as<std::string>();
    const auto it = fields.find(key);
    FC_CHECK(it != fields.end(), "bert config ", path, ": unknown key '", name, ".", key, "'");
    try {
      it->second(kv.second);
    } catch (const YAML::Exception& e) {
      FC_THROW("bert config ", path, ": bad value for '", name, ".", key, "': ", e.what());
    }
  }
}

}  // namespace

BertConfig load_bert_config(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    FC_THROW("bert config ", path, ": ", e.what());
  }
  BertConfig c;
  FC_CHECK(root.IsMap(), "bert config ", path, ": the document must be a mapping");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    FC_CHECK(key == "name" || key == "model" || key == "train", "bert config ", path, ": unknown section '", key,
             "' (expected name, model, train)");
  }
  if (root["name"]) c.name = root["name"].as<std::string>();
  BertModelConfig& m = c.model;
  apply(root["model"],
        {{"vocab_size", set(m.vocab_size)}, {"hidden", set(m.hidden)}, {"num_layers", set(m.num_layers)},
         {"num_heads", set(m.num_heads)}, {"ffn", set(m.ffn)}, {"max_positions", set(m.max_positions)},
         {"type_vocab_size", set(m.type_vocab_size)}, {"ln_eps", set(m.ln_eps)}, {"dropout", set(m.dropout)},
         {"init_std", set(m.init_std)}},
        path, "model");
  BertTrainConfig& t = c.train;
  apply(root["train"],
        {{"lr", set(t.lr)}, {"end_lr", set(t.end_lr)}, {"warmup_steps", set(t.warmup_steps)},
         {"total_steps", set(t.total_steps)}, {"decay_power", set(t.decay_power)}, {"beta1", set(t.beta1)},
         {"beta2", set(t.beta2)}, {"eps", set(t.eps)}, {"weight_decay", set(t.weight_decay)},
         {"max_grad_norm", set(t.max_grad_norm)}, {"batch_size", set(t.batch_size)},
         {"grad_accumulation", set(t.grad_accumulation)}, {"max_seq_length", set(t.max_seq_length)},
         {"max_predictions", set(t.max_predictions)}, {"eval_every_samples", set(t.eval_every_samples)},
         {"eval_samples", set(t.eval_samples)}, {"target_mlm_accuracy", set(t.target_mlm_accuracy)},
         {"seed", set(t.seed)}},
        path, "train");
  FC_CHECK(m.hidden > 0 && m.num_heads > 0 && m.hidden % m.num_heads == 0, "bert config ", path, ": hidden ",
           m.hidden, " must be a positive multiple of num_heads ", m.num_heads);
  FC_CHECK(t.max_seq_length <= m.max_positions, "bert config ", path, ": max_seq_length ", t.max_seq_length,
           " exceeds max_positions ", m.max_positions);
  return c;
}

}  // namespace foldcore::bert
