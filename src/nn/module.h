// Module: the base of the Transformer-core layers. A module is built inside a Scope that injects
// the ParamStore its parameters are registered in (with hierarchical names such as
// "layer_0/attention/q/weight"), the generator used for initialisation, and the generator that
// dropout draws its Philox streams from. No global state: two models can live side by side.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "core/philox.h"

namespace foldcore::nn {

using autograd::Variable;

struct Scope {
  autograd::ParamStore* params = nullptr;
  Generator* init_rng = nullptr;  // parameter initialisation
  Generator* rng = nullptr;       // dropout masks (nullptr: no dropout)
  std::string prefix;             // "" at the root

  Scope child(std::string_view name) const;
  std::string path(std::string_view name) const;  // prefix + "/" + name
};

class Module {
 public:
  explicit Module(Scope scope);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& path() const { return scope_.prefix; }
  // Training mode (dropout active) for this module and its children.
  void train(bool on = true);
  bool training() const { return training_; }
  // This module's and its descendants' parameters, in registration order.
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  int64_t num_parameters() const;

 protected:
  const Scope& scope() const { return scope_; }
  Scope child_scope(std::string_view name) const { return scope_.child(name); }
  // Registers a parameter `<path>/<name>`; `init` is its initial value (undefined: zeros).
  Variable add_parameter(std::string_view name, const Shape& shape, bool weight_decay, const Tensor& init = {});
  // The flat buffer's layout: these parameters back to back (ParamStore::place_together), e.g. the
  // weights of projections that run as one op.
  void place_together(const std::vector<Variable>& params) const {
    if (scope_.params != nullptr) scope_.params->place_together(params);
  }
  // Children are members of the derived class; registering them makes train() and
  // named_parameters() recurse.
  void register_child(Module& child) { children_.push_back(&child); }

 private:
  Scope scope_;
  bool training_ = true;
  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<Module*> children_;
};

}  // namespace foldcore::nn
