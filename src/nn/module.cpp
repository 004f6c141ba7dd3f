#include "nn/module.h"

namespace foldcore::nn {

Scope Scope::child(std::string_view name) const {
  Scope s = *this;
  s.prefix = path(name);
  return s;
}

std::string Scope::path(std::string_view name) const {
  return prefix.empty() ? std::string(name) : prefix + "/" + std::string(name);
}

Module::Module(Scope scope) : scope_(std::move(scope)) {
  FC_CHECK(scope_.params != nullptr, "Module '", scope_.prefix, "': the Scope has no ParamStore");
}

void Module::train(bool on) {
  training_ = on;
  for (Module* c : children_) c->train(on);
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> out = params_;
  for (const Module* c : children_)
    for (auto& p : c->named_parameters()) out.push_back(std::move(p));
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, v] : named_parameters()) n += scope_.params->finalized() ? v.numel() : 0;
  return n;
}

Variable Module::add_parameter(std::string_view name, const Shape& shape, bool weight_decay, const Tensor& init) {
  const std::string full = scope_.path(name);
  Variable v = scope_.params->add(full, shape, weight_decay, init);
  params_.emplace_back(full, v);
  return v;
}

}  // namespace foldcore::nn
