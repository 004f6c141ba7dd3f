#include "autograd/param_cast_cache.h"

#include <map>
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

thread_local int t_depth = 0;
thread_local std::map<Key, Entry> t_casts;
thread_local ParamCastStats t_stats;

}  // namespace

ParamCastScope::ParamCastScope() {
  if (t_depth++ == 0) t_stats = {};
}

ParamCastScope::~ParamCastScope() {
  if (--t_depth == 0) t_casts.clear();
}

Tensor cast_param(const Variable& v, DType to) {
  const Tensor& t = v.value();
  if (t.dtype() == to) return t;
  if (t_depth == 0 || !v.is_leaf() || !v.requires_grad()) return t.to(to);
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

ParamCastStats param_cast_stats() { return t_stats; }

}  // namespace foldcore::autograd
