#include "autograd/param_store.h"

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

void ParamStore::finalize() {
  FC_CHECK(!finalized(), "ParamStore::finalize called twice");
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
