#include "autograd/engine.h"

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/recompute.h"
#include "core/profile.h"
#include "kernels/elementwise.h"

namespace foldcore::autograd {

namespace {
thread_local GradReadyHook t_grad_ready_hook;
thread_local int t_backward_depth = 0;  // nested backward passes (recompute segments) running
// The leaves the outermost backward has reported final (gradient-ready hook), while it runs.
thread_local const std::unordered_set<const VariableImpl*>* t_reported = nullptr;
}  // namespace

GradReadyHookGuard::GradReadyHookGuard(GradReadyHook hook) : previous_(std::move(t_grad_ready_hook)) {
  t_grad_ready_hook = std::move(hook);
}
GradReadyHookGuard::~GradReadyHookGuard() { t_grad_ready_hook = std::move(previous_); }

void accumulate_into(const Tensor& dst, const Tensor& src) {
  FC_CHECK(dst.shape() == src.shape(), "autograd: gradient of shape ", src.shape().str(),
           " accumulated into one of shape ", dst.shape().str());
  // A 16-bit contribution into an fp32 gradient (contiguous both, as gradients are): one kernel
  // that reads it as it is (the same values as converting it first).
  if (dst.dtype() == DType::f32 && src.dtype() != DType::f32 && dst.is_contiguous() && src.is_contiguous()) {
    ops::add_into(dst, src);
    return;
  }
  const Tensor s = src.dtype() == dst.dtype() ? src : src.to(dst.dtype());
  ops::add(dst, s, dst);
}

bool BackwardCtx::needs_grad(int i) const {
  return i >= 0 && i < static_cast<int>(node_->inputs.size()) && node_->inputs[static_cast<size_t>(i)].active();
}

DType BackwardCtx::grad_dtype(int i, DType offered) const {
  const Edge& e = node_->inputs[static_cast<size_t>(i)];
  if (offered == e.meta.dtype) return offered;
  if (offered == DType::f32 && e.node && e.node->f32_output_grads) return DType::f32;
  return e.meta.dtype;
}

bool BackwardCtx::sole_consumer_of_narrow_output(int i) const {
  const Edge& e = node_->inputs[static_cast<size_t>(i)];
  if (!e.node || !e.node->narrow_output_grads || narrow_consumers_ == nullptr) return false;
  const auto it = narrow_consumers_->find(e.node.get());
  return it != narrow_consumers_->end() && it->second[static_cast<size_t>(e.index)] == 1;
}

Tensor& BackwardCtx::slot_of(int i) {
  FC_CHECK(needs_grad(i), "autograd: '", node_->name, "' wrote a gradient for input ", i,
           " which does not require one");
  const Edge& e = node_->inputs[static_cast<size_t>(i)];
  if (e.leaf) {
    FC_CHECK(t_reported == nullptr || !t_reported->count(e.leaf.get()), "autograd: '", node_->name,
             "' adds to the gradient of '", e.leaf->name, "', which the gradient-ready hook already reported final ",
             "(a recompute segment used it without an autograd function seeing it: leaf_use.h)");
    return e.leaf->grad;
  }
  auto& vec = (*pending_)[e.node.get()];
  if (vec.empty()) {
    vec.resize(e.node->outputs.size());
    if (e.node->packed_output_grads && packed_bufs_ != nullptr) pack_slots(*e.node, vec);
  }
  return vec[static_cast<size_t>(e.index)];
}

// One buffer for all of a node's output gradients (its outputs share a dtype and device), each
// slot a contiguous slice of it, unwritten ("fresh") until a consumer writes it.
void BackwardCtx::pack_slots(const Node& producer, std::vector<Tensor>& vec) {
  const std::vector<TensorMeta>& outs = producer.outputs;
  if (outs.empty()) return;
  int64_t total = 0;
  for (const TensorMeta& m : outs) {
    if (m.dtype != outs[0].dtype || m.device != outs[0].device) return;
    total += m.shape.product();
  }
  const Tensor buf = Tensor::empty({total}, outs[0].dtype, outs[0].device);
  int64_t off = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    const int64_t n = outs[k].shape.product();
    vec[k] = buf.narrow(0, off, n).view(outs[k].shape);
    fresh_->insert(&vec[k]);
    off += n;
  }
  (*packed_bufs_)[&producer] = buf;
}

Tensor BackwardCtx::accumulate_grad(int i, std::optional<DType> dtype) {
  const TensorMeta& m = node_->inputs[static_cast<size_t>(i)].meta;
  const DType dt = dtype.value_or(m.dtype);
  Tensor& s = slot_of(i);
  if (!s.defined() && grad_dtype(i, dt) == dt) {
    s = Tensor::zeros(m.shape, dt, m.device);
  } else if (s.defined() && s.dtype() == dt && claim_fresh(s)) {
    s.zero_();  // a packed slice: zeroed in place, then accumulated into as any gradient
  }
  // Direct accumulation into the existing gradient, unless it was handed out in this same
  // backward as an overwrite target (the kernel order would then decide the result). Else a
  // zeroed temporary, added afterwards, or, as the first contribution in another dtype than the
  // slot takes, converted once into the slot (no zeroed slot to add it to).
  if (s.defined() && s.dtype() == dt && s.is_contiguous() && !handed_as_new(s)) return s;
  Tensor tmp = Tensor::zeros(m.shape, dt, m.device);
  deferred_.push_back({&s, tmp, grad_dtype(i, dt)});
  return tmp;
}

Tensor BackwardCtx::new_grad(int i, std::optional<DType> dtype) {
  const TensorMeta& m = node_->inputs[static_cast<size_t>(i)].meta;
  const DType dt = dtype.value_or(m.dtype);
  Tensor& s = slot_of(i);
  if (!s.defined() && dt == grad_dtype(i, dt)) {
    s = Tensor::empty(m.shape, dt, m.device);
    new_slots_.push_back(&s);
    return s;
  }
  if (dt == m.dtype && is_fresh(s)) {  // a packed slice nothing wrote yet: the kernel writes it there
    claim_fresh(s);
    new_slots_.push_back(&s);
    return s;
  }
  Tensor tmp = Tensor::empty(m.shape, dt, m.device);
  deferred_.push_back({&s, tmp, grad_dtype(i, dt)});
  return tmp;
}

Tensor BackwardCtx::grad_to_add(int i, std::optional<DType> dtype) {
  if (!needs_grad(i)) return Tensor();
  const TensorMeta& m = node_->inputs[static_cast<size_t>(i)].meta;
  Tensor& s = slot_of(i);
  if (!s.defined() || s.dtype() != dtype.value_or(m.dtype) || !s.is_contiguous() || is_fresh(s) || handed_as_new(s))
    return Tensor();
  return s;
}

void BackwardCtx::put_grad(int i, const Tensor& g) {
  const TensorMeta& m = node_->inputs[static_cast<size_t>(i)].meta;
  FC_CHECK(g.shape() == m.shape, "autograd: '", node_->name, "' produced a gradient of shape ", g.shape().str(),
           " for input ", i, " of shape ", m.shape.str());
  const Tensor c = g.contiguous();
  Tensor& s = slot_of(i);
  if (!s.defined() && c.dtype() == grad_dtype(i, c.dtype())) {
    s = c;
    new_slots_.push_back(&s);  // not to be accumulated into by a later request of this node
    return;
  }
  if (claim_fresh(s)) {  // a packed slice nothing wrote yet: copied (and converted) into place
    s.copy_(c);
    new_slots_.push_back(&s);
    return;
  }
  deferred_.push_back({&s, c, grad_dtype(i, c.dtype())});
}

void BackwardCtx::finish() {
  for (Pending& p : deferred_) {
    if (!p.slot->defined()) {
      *p.slot = p.tmp.dtype() == p.dtype ? p.tmp : p.tmp.to(p.dtype);
    } else if (claim_fresh(*p.slot)) {
      p.slot->copy_(p.tmp);
    } else {
      accumulate_into(*p.slot, p.tmp);
    }
  }
  deferred_.clear();
  new_slots_.clear();
}

class Engine {
 public:
  void run(const std::vector<Variable>& roots, const std::vector<Tensor>& grads, bool take_grads) {
    FC_CHECK(grads.empty() || grads.size() == roots.size(), "autograd::backward: ", grads.size(), " grads for ",
             roots.size(), " roots");
    std::vector<std::shared_ptr<Node>> nodes;
    std::unordered_set<const Node*> seen;
    std::vector<std::shared_ptr<Node>> stack;
    for (size_t r = 0; r < roots.size(); ++r) {
      const Variable& root = roots[r];
      FC_CHECK(root.requires_grad(), "autograd::backward: root ", r, " does not require grad");
      Tensor g = grads.empty() ? Tensor() : grads[r];
      if (!g.defined()) {
        FC_CHECK(root.numel() == 1, "autograd::backward: root ", r, " of shape ", root.shape().str(),
                 " is not a scalar; pass its gradient");
        g = Tensor::full(root.shape(), 1.0, root.dtype(), root.device());
      }
      FC_CHECK(g.shape() == root.shape(), "autograd::backward: grad ", g.shape().str(), " for root ",
               root.shape().str());
      if (root.is_leaf()) {
        Tensor& lg = root.impl()->grad;
        if (!lg.defined()) {
          lg = g.to(root.dtype()).clone();
        } else {
          accumulate_into(lg, g.contiguous());
        }
        continue;
      }
      auto& vec = pending_[root.node().get()];
      if (vec.empty()) vec.resize(root.node()->outputs.size());
      Tensor& slot = vec[static_cast<size_t>(root.output_index())];
      if (!slot.defined()) {
        const bool own = take_grads && !grads.empty() && g.dtype() == root.dtype() && g.is_contiguous();
        slot = own ? g : g.to(root.dtype()).clone();
      } else {
        accumulate_into(slot, g.contiguous());
      }
      if (seen.insert(root.node().get()).second) stack.push_back(root.node());
    }
    while (!stack.empty()) {
      std::shared_ptr<Node> n = std::move(stack.back());
      stack.pop_back();
      for (const Edge& e : n->inputs)
        if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node);
      nodes.push_back(std::move(n));
    }
    std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a->seq > b->seq; });
    // The consumers of every output whose producer prefers a lone consumer's gradient in its own
    // dtype (Node::narrow_output_grads); a root is one too.
    std::unordered_map<const Node*, std::vector<int>> narrow_consumers;
    const auto count_use = [&](const Node* producer, int index) {
      std::vector<int>& c = narrow_consumers[producer];
      if (c.empty()) c.resize(producer->outputs.size(), 0);
      ++c[static_cast<size_t>(index)];
    };
    for (const std::shared_ptr<Node>& n : nodes)
      for (const Edge& e : n->inputs)
        if (e.node && e.node->narrow_output_grads) count_use(e.node.get(), e.index);
    for (const Variable& root : roots)
      if (!root.is_leaf() && root.node()->narrow_output_grads) count_use(root.node().get(), root.output_index());

    // Gradient-ready reporting (outermost backward only, see engine.h): how many nodes of this
    // graph still have to run for each leaf they take as input — a recompute node counting for
    // each leaf its segment used (its nested backward gives them their gradients) — and a leaf is
    // reported when its count reaches zero. Leaf roots no node consumes are final already.
    struct DepthGuard {
      int depth;
      DepthGuard() : depth(t_backward_depth++) {}
      ~DepthGuard() { --t_backward_depth; }
    } depth_guard;
    const bool report = depth_guard.depth == 0 && static_cast<bool>(t_grad_ready_hook);
    std::unordered_map<const VariableImpl*, int> consumers;
    std::unordered_map<const Node*, std::vector<const VariableImpl*>> segment_leaves;
    std::unordered_set<const VariableImpl*> reported;
    struct ReportedGuard {
      const std::unordered_set<const VariableImpl*>* previous = t_reported;
      ~ReportedGuard() { t_reported = previous; }
    } reported_guard;
    const auto report_leaf = [&](const VariableImpl& leaf) {
      reported.insert(&leaf);
      t_grad_ready_hook(leaf);
    };
    if (report) {
      t_reported = &reported;
      for (const std::shared_ptr<Node>& n : nodes) {
        for (const Edge& e : n->inputs)
          if (e.leaf) ++consumers[e.leaf.get()];
        if (n->fn == nullptr) continue;
        if (const auto* leaves = recompute_leaves(*n->fn)) {
          std::vector<const VariableImpl*>& mine = segment_leaves[n.get()];
          for (const auto& l : *leaves) {
            ++consumers[l.get()];
            mine.push_back(l.get());
          }
        }
      }
      for (const Variable& root : roots)
        if (root.is_leaf() && !consumers.count(root.impl().get())) {
          consumers[root.impl().get()] = 0;
          report_leaf(*root.impl());
        }
    }
    auto consumed = [&](const Node& n) {
      if (!report) return;
      for (const Edge& e : n.inputs)
        if (e.leaf && --consumers[e.leaf.get()] == 0) report_leaf(*e.leaf);
      const auto it = segment_leaves.find(&n);
      if (it == segment_leaves.end()) return;
      for (const VariableImpl* l : it->second)
        if (--consumers[l] == 0) report_leaf(*l);
    };

    // Functions record nothing while running their backward (a recompute segment re-enables
    // grad mode itself for its nested forward).
    NoGradGuard no_grad;
    for (const std::shared_ptr<Node>& n : nodes) {
      auto it = pending_.find(n.get());
      if (it == pending_.end()) {
        n->fn.reset();  // not on a path that received a gradient
        consumed(*n);
        continue;
      }
      FC_CHECK(n->fn != nullptr, "autograd: backward through '", n->name,
               "' a second time: its saved tensors were freed after the first backward");
      BackwardCtx ctx;
      ctx.node_ = n.get();
      ctx.pending_ = &pending_;
      ctx.packed_bufs_ = &packed_bufs_;
      ctx.fresh_ = &fresh_;
      ctx.narrow_consumers_ = &narrow_consumers;
      if (const auto pb = packed_bufs_.find(n.get()); pb != packed_bufs_.end()) {
        for (Tensor& g : it->second)
          if (fresh_.erase(&g) != 0) g.zero_();  // a packed slice no consumer wrote
        ctx.packed_ = std::move(pb->second);
        packed_bufs_.erase(pb);
      }
      ctx.grad_outputs_ = std::move(it->second);
      pending_.erase(it);
      ctx.grad_outputs_.resize(n->outputs.size());
      for (size_t i = 0; i < n->outputs.size(); ++i) {
        const TensorMeta& m = n->outputs[i];
        Tensor& g = ctx.grad_outputs_[i];
        if (!g.defined()) {
          g = Tensor::zeros(m.shape, m.dtype, m.device);
        } else if (g.dtype() != m.dtype && !(n->f32_output_grads && g.dtype() == DType::f32)) {
          g = g.to(m.dtype);
        }
      }
      // FOLDCORE_PROFILE: each node's backward is a stage named by its op, under the caller's
      // stage ("backward/linear"; a recompute segment's nodes under "…/recompute").
      std::optional<profile::Scope> op_stage;
      if (profile::enabled()) op_stage.emplace(n->name.c_str(), n->outputs.empty() ? Device::cpu() : n->outputs[0].device);
      try {
        n->fn->backward(ctx);
      } catch (Error& e) {  // the node's name, made only when there is an error to name it in
        e.add_context("in the backward of '" + n->name + "'");
        throw;
      }
      op_stage.reset();
      ctx.finish();
      n->fn.reset();  // frees the saved tensors now
      consumed(*n);
    }
  }

 private:
  std::unordered_map<const Node*, std::vector<Tensor>> pending_;
  std::unordered_map<const Node*, Tensor> packed_bufs_;  // packed_output_grads nodes' gradient buffers
  std::unordered_set<const Tensor*> fresh_;              // their slices nothing has written yet
};

void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads, bool take_grads) {
  Engine engine;
  engine.run(roots, grads, take_grads);
}

}  // namespace foldcore::autograd
