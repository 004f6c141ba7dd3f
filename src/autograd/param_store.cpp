#include "autograd/param_store.h"

#include <algorithm>

namespace foldcore::autograd {

Variable ParamStore::add(const std::string& name, const Shape& shape, bool weight_decay, const Tensor& init) {
  FC_CHECK(!finalized(), "ParamStore::add('", name, "'): the store is already finalized");
  FC_CHECK(!name.empty(), "ParamStore::add: empty parameter name");
  FC_CHECK(index_.count(name) == 0, "ParamStore::add: parameter '", name, "' registered twice");
  if (init.defined())
    FC_CHECK(init.shape() == shape, "ParamStore::add('", name, "'): init of shape ", init.shape().str(),
             " for a parameter of shape ", shape.str());
  Entry e;
  e.var = Variable(Tensor(), /*requires_grad=*/true, name);
  e.shape = shape;
  e.weight_decay = weight_decay;
  e.init = init;
  index_[name] = entries_.size();
  names_.push_back(name);
  entries_.push_back(std::move(e));
  return entries_.back().var;
}

void ParamStore::place_together(const std::vector<Variable>& params) {
  FC_CHECK(!finalized(), "ParamStore::place_together after finalize()");
  std::vector<size_t> group;
  for (const Variable& v : params) {
    FC_CHECK(v.defined() || v.impl() != nullptr, "ParamStore::place_together: an undefined parameter");
    const auto it = index_.find(v.name());
    FC_CHECK(it != index_.end() && entries_[it->second].var.impl() == v.impl(), "ParamStore::place_together: '",
             v.name(), "' is not a parameter of this store");
    for (const auto& g : groups_)
      FC_CHECK(std::find(g.begin(), g.end(), it->second) == g.end(), "ParamStore::place_together: '", v.name(),
               "' is in another group already");
    FC_CHECK(std::find(group.begin(), group.end(), it->second) == group.end(), "ParamStore::place_together: '",
             v.name(), "' twice");
    group.push_back(it->second);
  }
  if (group.size() > 1) groups_.push_back(std::move(group));
}

void ParamStore::finalize() {
  FC_CHECK(!finalized(), "ParamStore::finalize called twice");
  if (!groups_.empty()) {  // the layout order: each group at its first member's place
    std::vector<int> group_of(entries_.size(), -1);
    for (size_t g = 0; g < groups_.size(); ++g)
      for (const size_t i : groups_[g]) group_of[i] = static_cast<int>(g);
    std::vector<bool> placed(entries_.size(), false);
    std::vector<Entry> ordered;
    ordered.reserve(entries_.size());
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (placed[i]) continue;
      const std::vector<size_t> single{i};
      for (const size_t j : group_of[i] >= 0 ? groups_[static_cast<size_t>(group_of[i])] : single) {
        ordered.push_back(std::move(entries_[j]));
        placed[j] = true;
      }
    }
    entries_ = std::move(ordered);
    names_.clear();
    index_.clear();
    for (size_t i = 0; i < entries_.size(); ++i) {
      names_.push_back(entries_[i].var.name());
      index_[names_.back()] = i;
    }
    groups_.clear();
  }
  int64_t total = 0;
  for (Entry& e : entries_) {
    e.offset = total;
    total += (e.shape.product() + kAlignElems - 1) / kAlignElems * kAlignElems;
  }
  values_ = Tensor::zeros({total}, DType::f32, device_);
  grads_ = Tensor::zeros({total}, DType::f32, device_);
  for (Entry& e : entries_) {
    const int64_t n = e.shape.product();
    Tensor v = values_.narrow(0, e.offset, n).view(e.shape);
    if (e.init.defined()) v.copy_(e.init);
    e.init = Tensor();  // the host copy is no longer needed
    e.var.impl()->value = v;
    e.var.impl()->grad = grads_.narrow(0, e.offset, n).view(e.shape);
  }
}

int64_t ParamStore::num_elements() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += e.shape.product();
  return n;
}

const Tensor& ParamStore::values() const {
  FC_CHECK(finalized(), "ParamStore::values() before finalize()");
  return values_;
}

const Tensor& ParamStore::grads() const {
  FC_CHECK(finalized(), "ParamStore::grads() before finalize()");
  return grads_;
}

std::vector<ops::ParamSegment> ParamStore::segments() const {
  std::vector<ops::ParamSegment> s;
  s.reserve(entries_.size());
  for (const Entry& e : entries_) s.push_back({e.offset, e.shape.product(), e.weight_decay});
  return s;
}

const Variable& ParamStore::get(const std::string& name) const {
  auto it = index_.find(name);
  FC_CHECK(it != index_.end(), "ParamStore: no parameter named '", name, "'");
  return entries_[it->second].var;
}

std::map<std::string, Tensor> ParamStore::named_values() const {
  FC_CHECK(finalized(), "ParamStore::named_values() before finalize()");
  std::map<std::string, Tensor> m;
  for (const Entry& e : entries_) m[e.var.name()] = e.var.value();
  return m;
}

std::map<std::string, Tensor> ParamStore::named_grads() const {
  FC_CHECK(finalized(), "ParamStore::named_grads() before finalize()");
  std::map<std::string, Tensor> m;
  for (const Entry& e : entries_) m[e.var.name()] = e.var.grad();
  return m;
}

void ParamStore::zero_grad() {
  Tensor g = grads();
  g.zero_();
}

}  // namespace foldcore::autograd
