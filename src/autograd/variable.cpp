#include "autograd/variable.h"

#include <atomic>

#include "autograd/grad_mode.h"
#include "autograd/leaf_use.h"

namespace foldcore::autograd {

Variable::Variable(Tensor value, bool requires_grad, std::string name) : impl_(std::make_shared<VariableImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
  impl_->name = std::move(name);
}

const Tensor& Variable::value() const {
  FC_CHECK(impl_ != nullptr, "autograd: use of an undefined Variable");
  FC_CHECK(impl_->value.defined(), "autograd: Variable '", impl_->name,
           "' has no value (a parameter used before ParamStore::finalize()?)");
  return impl_->value;
}

const Tensor& Variable::grad() const {
  FC_CHECK(impl_ != nullptr, "autograd: grad() of an undefined Variable");
  return impl_->grad;
}

namespace {
thread_local LeafUseCollector* t_collector = nullptr;
}  // namespace

LeafUseCollector::LeafUseCollector() : outer_(t_collector) { t_collector = this; }

LeafUseCollector::~LeafUseCollector() {
  t_collector = outer_;
  if (outer_ != nullptr)
    for (const auto& l : leaves_)
      if (outer_->seen_.insert(l.get()).second) outer_->leaves_.push_back(l);
}

void LeafUseCollector::note(const Variable& v) {
  if (v.requires_grad() && v.is_leaf() && seen_.insert(v.impl().get()).second) leaves_.push_back(v.impl());
}

void note_leaf_uses(const std::vector<Variable>& inputs) {
  if (t_collector == nullptr) return;
  for (const Variable& v : inputs) t_collector->note(v);
}

bool any_requires_grad(const std::vector<Variable>& inputs) {
  note_leaf_uses(inputs);
  if (!grad_enabled()) return false;
  for (const Variable& v : inputs)
    if (v.requires_grad()) return true;
  return false;
}

namespace {
std::atomic<uint64_t> g_next_seq{1};
}  // namespace

std::vector<Variable> record(std::string_view name, std::unique_ptr<Function> fn, const std::vector<Variable>& inputs,
                             const std::vector<Tensor>& outputs, bool force) {
  if (force) note_leaf_uses(inputs);  // (otherwise any_requires_grad notes them)
  std::vector<Variable> out;
  out.reserve(outputs.size());
  if (!(force ? grad_enabled() : any_requires_grad(inputs))) {
    for (const Tensor& t : outputs) out.emplace_back(t);
    return out;
  }
  auto node = std::make_shared<Node>();
  node->name = std::string(name);
  node->seq = g_next_seq.fetch_add(1);
  node->fn = std::move(fn);
  for (const Variable& v : inputs) {
    Edge e;
    if (v.requires_grad()) {
      e.meta = TensorMeta{v.shape(), v.dtype(), v.device()};
      if (v.is_leaf()) {
        e.leaf = v.impl();
      } else {
        e.node = v.node();
        e.index = v.output_index();
      }
    }
    node->inputs.push_back(std::move(e));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    node->outputs.push_back(TensorMeta{t.shape(), t.dtype(), t.device()});
    auto impl = std::make_shared<VariableImpl>();
    impl->value = t;
    impl->requires_grad = true;
    impl->node = node;
    impl->output_index = static_cast<int>(i);
    out.emplace_back(std::move(impl));
  }
  return out;
}

}  // namespace foldcore::autograd
