#include "autograd/param_cast_cache.h"

#include <map>
#include <string>
#include <tuple>

namespace foldcore::autograd {
namespace {

struct Key {
  const void* data;
  DType to;
  int64_t numel;
  bool operator<(const Key& o) const { return std::tie(data, to, numel) < std::tie(o.data, o.to, o.numel); }
};
struct Entry {
  Tensor source;  // kept alive: its memory is not reused while the entry exists
  Tensor cast;
};

struct StackKey {
  std::vector<const void*> data;  // null for an undefined entry
  DType to;
  std::vector<int64_t> shape;
  bool operator<(const StackKey& o) const { return std::tie(data, to, shape) < std::tie(o.data, o.to, o.shape); }
};
struct StackEntry {
  std::vector<Tensor> sources;  // kept alive, as Entry::source
  Tensor stack;
};

// A stack whose missing entries are zeros, kept from one scope to the next: its shape ([n,
// shape…]), dtype, device and which entries are missing.
struct ZeroedKey {
  std::vector<int64_t> full;
  DType to;
  std::string device;
  std::vector<bool> missing;
  bool operator<(const ZeroedKey& o) const {
    return std::tie(full, to, device, missing) < std::tie(o.full, o.to, o.device, o.missing);
  }
};

thread_local int t_depth = 0;
thread_local std::map<ZeroedKey, std::vector<Tensor>> t_zeroed;
thread_local std::map<Key, Entry> t_casts;
thread_local std::map<StackKey, StackEntry> t_stacks;
thread_local ParamCastStats t_stats;
// The flat buffer cast as a whole (ParamCastScope(flat, to)): its source and the cast.
thread_local Tensor t_flat_source, t_flat_cast;

// t's elements in the flat cast when t is a contiguous view of the flat source and `to` its dtype.
Tensor flat_view(const Tensor& t, DType to, const Shape& shape) {
  if (!t_flat_cast.defined() || t_flat_cast.dtype() != to || t.storage() != t_flat_source.storage() ||
      !t.is_contiguous() || t.dtype() != t_flat_source.dtype())
    return Tensor();
  const int64_t at = t.offset() - t_flat_source.offset();
  if (at < 0 || at + shape.product() > t_flat_source.numel()) return Tensor();
  return t_flat_cast.narrow(0, at, shape.product()).view(shape);
}

}  // namespace

ParamCastScope::ParamCastScope() {
  if (t_depth++ == 0) t_stats = {};
}

ParamCastScope::ParamCastScope(const Tensor& flat, DType to) : ParamCastScope() {
  if (!flat.defined() || flat.dtype() == to || t_flat_cast.defined()) return;
  FC_CHECK(flat.dim() == 1 && flat.is_contiguous(), "ParamCastScope: the flat buffer ", flat.str(),
           " must be 1-D and contiguous");
  t_flat_source = flat;
  t_flat_cast = flat.to(to);  // one kernel for every parameter
  ++t_stats.made;
}

ParamCastScope::~ParamCastScope() {
  if (--t_depth == 0) {
    t_casts.clear();
    // Stacks with zero entries that nothing else holds go to the pool (their zeros stay).
    for (auto& [key, entry] : t_stacks) {
      if (entry.sources.size() == key.data.size() || entry.stack.storage().use_count() != 1) continue;
      std::vector<bool> missing;
      for (const void* d : key.data) missing.push_back(d == nullptr);
      t_zeroed[ZeroedKey{entry.stack.shape().vec(), key.to, entry.stack.device().str(), std::move(missing)}].push_back(
          std::move(entry.stack));
    }
    t_stacks.clear();
    t_flat_source = Tensor();
    t_flat_cast = Tensor();
  }
}

Tensor cast_param(const Variable& v, DType to) {
  const Tensor& t = v.value();
  if (t.dtype() == to) return t;
  if (t_depth == 0 || !v.is_leaf() || !v.requires_grad()) return t.to(to);
  if (Tensor f = flat_view(t, to, t.shape()); f.defined()) {
    ++t_stats.reused;
    return f;
  }
  const Key key{t.data_ptr(), to, t.numel()};
  auto it = t_casts.find(key);
  if (it != t_casts.end() && it->second.source.shape() == t.shape() && it->second.source.strides() == t.strides()) {
    ++t_stats.reused;
    return it->second.cast;
  }
  Tensor cast = t.to(to);
  ++t_stats.made;
  t_casts.insert_or_assign(key, Entry{t, cast});
  return cast;
}

Tensor stack_params(const std::vector<Variable>& vs, const Shape& shape, DType to, Device device) {
  Shape full = shape;
  full.insert(0, static_cast<int64_t>(vs.size()));
  bool cacheable = t_depth > 0;
  StackKey key{{}, to, shape.vec()};
  std::vector<Tensor> sources;
  for (const Variable& v : vs) {
    if (!v.defined()) {
      key.data.push_back(nullptr);
      continue;
    }
    FC_CHECK(v.shape() == shape && v.device() == device, "stack_params: ", v.value().str(), " among ", shape.str(),
             " on ", device.str());
    cacheable = cacheable && v.is_leaf() && v.requires_grad();
    key.data.push_back(v.value().data_ptr());
    sources.push_back(v.value());
  }
  // Parameters back to back in the flat buffer (no gap, none missing): a view of its cast.
  if (cacheable && sources.size() == vs.size()) {
    const int64_t per = shape.product();
    bool adjacent = true;
    for (size_t i = 1; adjacent && i < sources.size(); ++i)
      adjacent = sources[i].storage() == sources[0].storage() && sources[i].is_contiguous() &&
                 sources[i].offset() == sources[0].offset() + static_cast<int64_t>(i) * per;
    if (adjacent) {
      if (Tensor f = flat_view(sources[0], to, full); f.defined()) {
        ++t_stats.reused;
        return f;
      }
    }
  }
  if (cacheable) {
    const auto it = t_stacks.find(key);
    bool same = it != t_stacks.end() && it->second.sources.size() == sources.size();
    for (size_t i = 0; same && i < sources.size(); ++i)
      same = it->second.sources[i].strides() == sources[i].strides();
    if (same) {
      ++t_stats.reused;
      return it->second.stack;
    }
  }
  Tensor stack;
  if (sources.size() < vs.size()) {  // zeros for the missing entries: a pooled stack's, or one fill
    std::vector<bool> missing;
    for (const Variable& v : vs) missing.push_back(!v.defined());
    const auto pooled = t_zeroed.find(ZeroedKey{full.vec(), to, device.str(), std::move(missing)});
    if (cacheable && pooled != t_zeroed.end() && !pooled->second.empty()) {
      stack = std::move(pooled->second.back());
      pooled->second.pop_back();
      ++t_stats.zero_rows_reused;
    } else {
      stack = Tensor::empty(full, to, device);
      stack.zero_();
    }
  } else {
    stack = Tensor::empty(full, to, device);
  }
  for (size_t i = 0; i < vs.size(); ++i) {
    if (!vs[i].defined()) continue;
    // From the flat buffer's cast when there is one (a copy, no conversion), else the parameter.
    const Tensor flat = flat_view(vs[i].value(), to, shape);
    stack.select(0, static_cast<int64_t>(i)).copy_(flat.defined() ? flat : vs[i].value());
  }
  if (cacheable) {
    ++t_stats.made;
    t_stacks.insert_or_assign(key, StackEntry{std::move(sources), stack});
  }
  return stack;
}

ParamCastStats param_cast_stats() { return t_stats; }

}  // namespace foldcore::autograd
