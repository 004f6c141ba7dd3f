// The model-parallel gradient sums (model_parallel.h): reduce_model_parallel_grads after the
// backward, and ModelParallelGradReducer, the same sums started during it.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "autograd/param_store.h"
#include "core/error.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/evoformer/evoformer.h"
#include "models/alphafold/evoformer/template.h"
#include "models/alphafold/parallel/model_parallel.h"

namespace foldcore::af2 {
namespace {

constexpr int kTestsPerPoll = 16;  // test() calls per in-flight bucket and poll (ModelParallelGradReducer::poll)

using GradRange = ModelParallelGradRange;

// The groups a stack's gradients are summed over: DAP (every rank's gradients are its chunk's
// part), and for a branch-parallel stack BP as well (each rank's are its branch's): Σ over all
// dap × bp ranks of the replica. With the replica group that is one sum over it; a DAP-only stack
// uses the replica too when it holds exactly the DAP group (bp 1).
std::vector<const ParallelGroup*> stack_groups(const ModelParallel& mp, const EvoformerStack& stack) {
  const bool bp = stack.branch_parallel();
  const ParallelGroup* replica = mp.replica.get();
  std::vector<const ParallelGroup*> groups;
  if (bp) {
    if (replica && replica->size() == mp.dap_size() * mp.bp_size()) return {replica};
    if (mp.dap_size() > 1) groups.push_back(mp.dap.get());
    groups.push_back(mp.bp.get());
    return groups;
  }
  if (mp.dap_size() == 1) return {};
  if (replica && replica->size() == mp.dap_size()) return {replica};
  return {mp.dap.get()};
}

// The modules whose gradients are partial sums: each with the groups its sum runs over and
// whether that sum may start during the backward (GradRange::early).
struct SplitPart {
  const nn::Module* module;
  std::vector<const ParallelGroup*> groups;
  bool early;
};
std::vector<SplitPart> split_parts(const AlphaFold& model) {
  const ModelParallel& mp = model.model_parallel();
  std::vector<SplitPart> out;
  for (const EvoformerStack* stack : model.trunk().stacks()) {
    std::vector<const ParallelGroup*> groups = stack_groups(mp, *stack);
    if (groups.empty()) continue;
    const bool early = groups.size() == 1 && (groups.front() == mp.replica.get() || !stack->branch_parallel());
    out.push_back({stack, std::move(groups), early});
  }
  // The template embedding runs split over DAP only (TemplateEmbedder::forward_dap): the same
  // graph on every rank of the DAP group, whose BP partners run the same rows.
  if (const TemplateEmbedder* t = model.trunk().template_embedder(); t != nullptr && mp.dap_size() > 1) {
    const ParallelGroup* g =
        mp.replica && mp.replica->size() == mp.dap_size() ? mp.replica.get() : mp.dap.get();
    out.push_back({t, {g}, true});
  }
  return out;
}

// The split parts' gradients as ranges of whole parameters, from the END of the buffer (the order
// the backward finishes them). A range is a run of adjacent parameter views (alignment gaps hold
// zeros on every rank), cut once it holds ≥ max_bytes (0: runs are not cut).
std::vector<GradRange> grad_ranges(const AlphaFold& model, int64_t max_bytes) {
  const ModelParallel& mp = model.model_parallel();
  std::vector<GradRange> out;
  if (!mp.active()) return out;
  for (const SplitPart& part : split_parts(model)) {
    const std::vector<const ParallelGroup*>& groups = part.groups;
    const bool early = part.early;
    const auto params = part.module->named_parameters();
    size_t i = 0;
    while (i < params.size()) {
      const Tensor& first = params[i].second.grad();
      FC_CHECK(first.defined(), "model-parallel gradients: parameter '", params[i].first, "' has no gradient");
      int64_t begin = first.offset(), end = begin + first.numel();
      GradRange r;
      r.groups = groups;
      r.early = early;
      r.leaves.push_back(params[i].second.impl().get());
      size_t j = i + 1;
      for (; j < params.size(); ++j) {
        if (max_bytes > 0 && (end - begin) * static_cast<int64_t>(dtype_size(first.dtype())) >= max_bytes) break;
        const Tensor& gj = params[j].second.grad();
        if (!gj.defined() || gj.storage() != first.storage() || gj.offset() < end ||
            gj.offset() - end >= autograd::ParamStore::kAlignElems)
          break;
        end = gj.offset() + gj.numel();
        r.leaves.push_back(params[j].second.impl().get());
      }
      r.flat = Tensor::wrap(first.data_ptr(), {end - begin}, first.dtype(), first.device());
      out.push_back(std::move(r));
      i = j;
    }
  }
  const auto address = [](const GradRange& r) { return reinterpret_cast<std::uintptr_t>(r.flat.data_ptr()); };
  std::sort(out.begin(), out.end(), [&](const GradRange& a, const GradRange& b) { return address(a) > address(b); });
  return out;
}

}  // namespace

void reduce_model_parallel_grads(const AlphaFold& model) {
  for (const GradRange& r : grad_ranges(model, 0))
    for (const ParallelGroup* g : r.groups) g->all_reduce_sum(r.flat);
}

// ---------------------------------------------------------------- ModelParallelGradReducer

ModelParallelGradReducer::ModelParallelGradReducer(const AlphaFold& model, int64_t bucket_bytes) {
  FC_CHECK(bucket_bytes >= 0, "model-parallel gradient buckets of ", bucket_bytes, " bytes");
  // One bucket per parameter at bucket_bytes 0 (the smallest ranges); grad_ranges's 0 means uncut.
  for (GradRange& r : grad_ranges(model, std::max<int64_t>(bucket_bytes, 1))) {
    Bucket b;
    static_cast<GradRange&>(b) = std::move(r);
    buckets_.push_back(std::move(b));
  }
  for (size_t k = 0; k < buckets_.size(); ++k)
    for (const autograd::VariableImpl* leaf : buckets_[k].leaves) index_.emplace_back(leaf, k);
  std::sort(index_.begin(), index_.end());
  for (size_t i = 1; i < index_.size(); ++i)
    FC_CHECK(index_[i].first != index_[i - 1].first, "model-parallel gradients: a parameter is in two split parts");
  reported_.assign(index_.size(), false);
  // BP: the other branch's parameters are never reported here (their gradients stay zero).
  for (const EvoformerStack* stack : model.trunk().stacks())
    for (const Variable& v : stack->other_branch_parameters()) {
      const size_t i = find(*v.impl());
      FC_CHECK(i < index_.size(), "model-parallel gradients: a branch parameter is not in a split stack");
      other_branch_.push_back(i);
    }
}

size_t ModelParallelGradReducer::find(const autograd::VariableImpl& leaf) const {
  const auto it = std::lower_bound(index_.begin(), index_.end(), std::make_pair(&leaf, size_t{0}),
                                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return it != index_.end() && it->first == &leaf ? static_cast<size_t>(it - index_.begin()) : index_.size();
}

ModelParallelGradReducer::~ModelParallelGradReducer() {
  // Never leave a sum in flight on buffers that outlive it: complete them (no callbacks).
  for (Bucket& b : buckets_)
    if (b.handle) b.handle->wait();
}

void ModelParallelGradReducer::begin(FinalFn on_final) {
  for (Bucket& b : buckets_) {
    FC_CHECK(!b.handle, "ModelParallelGradReducer::begin: the previous backward's sums were not finished");
    b.pending = static_cast<int64_t>(b.leaves.size());
  }
  std::fill(reported_.begin(), reported_.end(), false);
  for (size_t i : other_branch_) {  // final from the start; their buckets start at the first report
    reported_[i] = true;
    --buckets_[index_[i].second].pending;
  }
  next_ = 0;
  started_before_finish_ = 0;
  on_final_ = std::move(on_final);
}

void ModelParallelGradReducer::on_ready(const autograd::VariableImpl& leaf) {
  const size_t i = find(leaf);
  if (i == index_.size()) {
    if (on_final_) on_final_(leaf);  // outside the split stacks: already whole
    return;
  }
  if (!reported_[i]) {
    reported_[i] = true;
    --buckets_[index_[i].second].pending;
  }
  launch_ready();
  started_before_finish_ = static_cast<int64_t>(next_);
  poll(/*block=*/false);
}

// Starts the next buckets, strictly in order, while each is complete. A bucket that may not start
// early (GradRange::early) waits for finish(), and so do the ones after it: a second sum would start
// whenever the first completed, and a BP rank reports only its branch, both at points of the
// backward that differ between ranks, on a communicator the backward's own collectives use.
void ModelParallelGradReducer::launch_ready() {
  while (next_ < buckets_.size() && buckets_[next_].pending == 0 && buckets_[next_].early) {
    Bucket& b = buckets_[next_++];
    b.handle = b.groups.front()->all_reduce_sum_async(b.flat);
  }
}

void ModelParallelGradReducer::complete(Bucket& b) {
  b.handle->wait();
  b.handle.reset();
  if (on_final_)
    for (const autograd::VariableImpl* leaf : b.leaves) on_final_(*leaf);
}

void ModelParallelGradReducer::poll(bool block) {
  for (size_t k = 0; k < next_; ++k) {
    Bucket& b = buckets_[k];
    if (!b.handle) continue;
    // Open MPI advances a non-blocking collective's rounds only in some of its progress calls: one
    // test per poll left every BP sum unfinished until finish() (tests: 16 make them all complete
    // during the backward; a test is an event query on NCCL, a few µs on MPI).
    bool done = block;
    for (int t = 0; t < kTestsPerPoll && !done; ++t) done = b.handle->test();
    if (done) complete(b);
  }
}

void ModelParallelGradReducer::finish() {
  for (; next_ < buckets_.size(); ++next_) {
    Bucket& b = buckets_[next_];
    if (b.groups.size() == 1) {
      b.handle = b.groups.front()->all_reduce_sum_async(b.flat);
    } else {
      for (const ParallelGroup* g : b.groups) g->all_reduce_sum(b.flat);
      if (on_final_)
        for (const autograd::VariableImpl* leaf : b.leaves) on_final_(*leaf);
    }
  }
  poll(/*block=*/true);
}

}  // namespace foldcore::af2
