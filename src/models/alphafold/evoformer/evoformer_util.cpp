#include "models/alphafold/evoformer/evoformer_util.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "kernels/elementwise.h"
#include "kernels/env_choice.h"

namespace foldcore::af2 {

Tensor module_param(const nn::Module& m, const std::string& suffix) {
  const std::string want = m.path().empty() ? suffix : m.path() + "/" + suffix;
  for (const auto& [name, v] : m.named_parameters())
    if (name == want) return v.value();
  FC_THROW("module '", m.path(), "' has no parameter '", want, "'");
}

void require_finalized(const autograd::ParamStore* params, const std::string& module_path) {
  FC_CHECK(params != nullptr && params->finalized(), "add_af2_params on '", module_path,
           "': finalize() the ParamStore first (the table binds views of its flat buffer)");
}

void add_linear_af2_params(const nn::Linear& l, Af2ParamTable& t, const std::string& key, int64_t idx) {
  t.add(key + "//weights", l.weight().value(), idx);
  if (l.bias().defined()) t.add(key + "//bias", l.bias().value(), idx);
}

void add_layer_norm_af2_params(const nn::LayerNorm& ln, Af2ParamTable& t, const std::string& key, int64_t idx) {
  t.add(key + "//scale", ln.scale().value(), idx);
  t.add(key + "//offset", ln.offset().value(), idx);
}

void add_attention_af2_params(const nn::Attention& a, Af2ParamTable& t, const std::string& key, int64_t idx) {
  t.add(key + "//query_w", module_param(a, "q/weight"), idx);
  t.add(key + "//key_w", module_param(a, "k/weight"), idx);
  t.add(key + "//value_w", module_param(a, "v/weight"), idx);
  if (a.options().gating) {
    t.add(key + "//gating_w", module_param(a, "gate/weight"), idx);
    t.add(key + "//gating_b", module_param(a, "gate/bias"), idx);
  }
  t.add(key + "//output_w", a.output().weight().value(), idx);
  t.add(key + "//output_b", a.output().bias().value(), idx);
}

void add_global_attention_af2_params(const nn::GlobalAttention& a, Af2ParamTable& t, const std::string& key,
                                     int64_t idx) {
  t.add(key + "//query_w", module_param(a, "q/weight"), idx);
  t.add(key + "//key_w", module_param(a, "k/weight"), idx);
  t.add(key + "//value_w", module_param(a, "v/weight"), idx);
  t.add(key + "//gating_w", module_param(a, "gate/weight"), idx);
  t.add(key + "//gating_b", module_param(a, "gate/bias"), idx);
  t.add(key + "//output_w", module_param(a, "output/weight"), idx);
  t.add(key + "//output_b", module_param(a, "output/bias"), idx);
}

void add_transition_af2_params(const nn::Transition& tr, Af2ParamTable& t, const std::string& key, int64_t idx) {
  t.add(key + "/input_layer_norm//scale", module_param(tr, "input_layer_norm/scale"), idx);
  t.add(key + "/input_layer_norm//offset", module_param(tr, "input_layer_norm/offset"), idx);
  for (const char* l : {"transition1", "transition2"}) {
    t.add(key + "/" + l + "//weights", module_param(tr, std::string(l) + "/weight"), idx);
    t.add(key + "/" + l + "//bias", module_param(tr, std::string(l) + "/bias"), idx);
  }
}

Tensor mask_as(const Tensor& mask, DType dtype) { return mask.dtype() == dtype ? mask : mask.to(dtype); }

Tensor mask_bias(const Tensor& mask) {
  FC_CHECK(mask.defined(), "mask_bias: undefined mask");
  const Tensor m = mask.to(DType::f32).contiguous();
  Tensor out = Tensor::empty(m.shape(), DType::f32, m.device());
  // 1e9·m − 1e9·1: exactly 0 for m = 1 and −1e9 for m = 0, as AlphaFold's 1e9·(m − 1).
  const Tensor one = Tensor::full({1}, 1.0, DType::f32, m.device());
  ops::axpby(1e9f, m, -1e9f, one, out);
  return out;
}

namespace {
struct DerivedMask {
  Tensor src;
  std::string what;
  Tensor value;
};
struct DerivedMasks {
  int depth = 0;
  std::vector<DerivedMask> entries;
};
DerivedMasks& derived_masks() {
  thread_local DerivedMasks m;
  return m;
}
bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage().get() == b.storage().get() && a.offset() == b.offset() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}
}  // namespace

DerivedMaskScope::DerivedMaskScope() { ++derived_masks().depth; }
DerivedMaskScope::~DerivedMaskScope() {
  DerivedMasks& m = derived_masks();
  if (--m.depth == 0) m.entries.clear();
}

Tensor derived_mask(const Tensor& src, const std::string& what, const std::function<Tensor()>& make) {
  DerivedMasks& m = derived_masks();
  if (m.depth == 0 || !src.defined()) return make();
  for (const DerivedMask& e : m.entries)
    if (e.what == what && same_view(e.src, src)) return e.value;
  Tensor value = make();
  if (m.entries.size() < kMaxDerivedMasks) m.entries.push_back({src, what, value});
  return value;
}

size_t derived_mask_count() { return derived_masks().entries.size(); }

Tensor transposed_mask(const Tensor& mask) {
  return derived_mask(mask, "transposed", [&] { return mask.transpose(0, 1).contiguous(); });
}

Tensor mask_in(const Tensor& mask, DType dtype) {
  if (mask.dtype() == dtype) return mask;
  return derived_mask(mask, std::string("as ") + std::string(dtype_name(dtype)), [&] { return mask_as(mask, dtype); });
}

void add_into(const Tensor& dst, const Tensor& y) {
  FC_CHECK(dst.shape() == y.shape() && dst.device() == y.device(), "add_into: stream slice ", dst.shape().str(),
           " vs update ", y.shape().str());
  if (dst.dtype() == y.dtype() && dst.is_contiguous()) {
    ops::add(dst, y, dst);  // y may be strided; out aliases a (each element read before written)
    return;
  }
  if (dst.is_contiguous() && (dst.dtype() == DType::f32 || y.dtype() == DType::f32)) {
    // One of them fp32, the other 16-bit: the mixed residual kernel sums in fp32 and rounds once.
    ops::bias_dropout_residual_forward(y.contiguous(), Tensor(), dst, ops::DropoutArgs{}, dst);
    return;
  }
  Tensor acc = Tensor::empty(dst.shape(), DType::f32, dst.device());
  acc.copy_(dst);
  ops::add(acc, y.to(DType::f32), acc);
  copy_tensor(dst, acc);
}

namespace {
// Whether stream_residual adds by add_into: a 16-bit inference stream and a 16-bit update of the
// other 16-bit dtype (an fp32 update keeps a 16-bit stream's dtype in bias_dropout_residual too).
bool adds_into_stream(const Variable& x, const Variable& update) {
  return !autograd::grad_enabled() && x.dtype() != DType::f32 && update.dtype() != x.dtype() &&
         update.dtype() != DType::f32;
}
}  // namespace

Variable stream_residual(const Variable& x, const Variable& update, const autograd::DropoutSpec& d, bool in_place) {
  if (adds_into_stream(x, update)) {
    FC_CHECK(d.p == 0.f || d.gen == nullptr, "residual add: dropout on a ", dtype_name(x.dtype()), " stream");
    Variable out = x;
    add_into(own_stream(out, in_place), update.value());
    return out;
  }
  return autograd::bias_dropout_residual(update, Variable(), x, d, in_place && !autograd::grad_enabled());
}

namespace {
std::atomic<bool>& residual_norm_choice() {
  static std::atomic<bool> on{ops::detail::choice_from_env("FOLDCORE_RESIDUAL_LN", {"fused", "apart"}) == 0};
  return on;
}
}  // namespace

void set_residual_norm_fused(bool on) { residual_norm_choice().store(on); }
bool residual_norm_fused() { return residual_norm_choice().load(); }

std::pair<Variable, Variable> stream_residual_norm(const Variable& x, const Variable& update,
                                                   const autograd::DropoutSpec& d, bool in_place,
                                                   const nn::LayerNorm& norm) {
  if (adds_into_stream(x, update)) return {stream_residual(x, update, d, in_place), Variable()};
  return norm.residual_forward_for_gemm(update, x, d, in_place && !autograd::grad_enabled());
}

Tensor own_stream(Variable& v, bool own) {
  const Tensor& t = v.value();
  if (own && t.storage().use_count() == 1 && t.is_contiguous() && t.offset() == 0 &&
      t.nbytes() == t.storage()->bytes())
    return t;
  Tensor copy = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy.copy_(t);
  v = Variable(copy);
  return copy;
}

Variable run_chunked(int64_t n, int64_t chunk, const std::function<Variable(int64_t, int64_t)>& f, int out_axis,
                     const Tensor& into) {
  FC_CHECK(!into.defined() || !autograd::grad_enabled(), "run_chunked: accumulating into a stream needs no-grad mode");
  if (chunk <= 0 || chunk >= n || autograd::grad_enabled()) {
    const Variable y = f(0, n);
    if (!into.defined()) return y;
    add_into(into, y.value());
    return Variable(into);
  }
  if (into.defined()) {
    FC_CHECK(into.size(out_axis) == n, "run_chunked: stream ", into.shape().str(), " for ", n, " along axis ",
             out_axis);
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t len = std::min(chunk, n - s);
      add_into(into.narrow(out_axis, s, len), f(s, len).value());
    }
    return Variable(into);
  }
  Tensor out;
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t len = std::min(chunk, n - s);
    const Variable y = f(s, len);
    FC_CHECK(y.size(out_axis) == len, "run_chunked: a chunk of ", len, " gave ", y.shape().str(), " (axis ",
             out_axis, ")");
    if (!out.defined()) {
      Shape shape = y.shape();
      shape[normalize_axis(out_axis, y.dim())] = n;
      out = Tensor::empty(shape, y.dtype(), y.device());
    }
    out.narrow(out_axis, s, len).copy_(y.value());
  }
  return Variable(out);
}

namespace {

// The key mask bias 1e9·(mask − 1) of mask [B, L] as [B, 1, 1, L], in the attention's operand
// dtype (made once per DerivedMaskScope: no cast per call, the same values).
Tensor key_mask_bias(const Tensor& mask) {
  const DType bias_dtype = autograd::autocast_dtype().value_or(DType::f32);
  return derived_mask(mask, std::string("key bias ") + std::string(dtype_name(bias_dtype)), [&] {
           return mask_as(mask_bias(mask), bias_dtype);
         }).view({mask.size(0), 1, 1, mask.size(1)});
}

// The shapes row_attention (x [B, L, c], mask [B, L]) and column_attention (x [L, B, c], mask
// [B, L]) take.
void check_rows(const nn::Attention& att, const Variable& x, const Tensor& mask) {
  FC_CHECK(x.dim() == 3 && mask.dim() == 2 && mask.size(0) == x.size(0) && mask.size(1) == x.size(1),
           "row_attention '", att.path(), "': x ", x.shape().str(), ", mask ", mask.shape().str(),
           " (expected [B, L, c] and [B, L])");
}
void check_columns(const nn::Attention& att, const Variable& x, const Tensor& mask) {
  FC_CHECK(x.dim() == 3 && mask.dim() == 2 && mask.size(0) == x.size(1) && mask.size(1) == x.size(0),
           "column_attention '", att.path(), "': x ", x.shape().str(), ", mask ", mask.shape().str(),
           " (expected [L, B, c] and [B, L])");
}

}  // namespace

Variable row_attention(const nn::Attention& att, const Variable& x, const Variable& pair_bias, const Tensor& mask,
                       int64_t chunk, const Tensor& into, const nn::LayerNorm* norm) {
  if (!pair_bias.defined()) return row_attention(att, x, std::function<Variable()>(), mask, chunk, into, norm);
  return row_attention(att, x, [&pair_bias] { return pair_bias; }, mask, chunk, into, norm);
}

Variable row_attention(const nn::Attention& att, const Variable& x, const std::function<Variable()>& pair_bias,
                       const Tensor& mask, int64_t chunk, const Tensor& into, const nn::LayerNorm* norm) {
  check_rows(att, x, mask);
  const int64_t b = x.size(0);
  const Tensor mb = key_mask_bias(mask);  // [B, 1, 1, L]
  Variable bias;  // made once, by the first chunk
  const std::function<Variable()> late = [&] {
    if (!bias.defined()) bias = pair_bias();
    return bias;
  };
  return run_chunked(b, chunk, [&](int64_t s, int64_t len) {
    const Variable xs = norm != nullptr ? norm->forward_for_gemm(autograd::narrow(x, 0, s, len))
                                        : autograd::narrow(x, 0, s, len);  // [len, L, c]
    const std::vector<Variable> biases{Variable(mb.narrow(0, s, len))};
    return pair_bias ? att.forward(xs, xs, biases, late) : att.forward(xs, xs, biases);
  }, 0, into);
}

Variable row_attention(const nn::Attention& att, const Variable& x, const nn::Attention::InputBias& input_bias,
                       const Tensor& mask, const Tensor& into) {
  check_rows(att, x, mask);
  return run_chunked(x.size(0), 0, [&](int64_t, int64_t) {
    return att.forward(x, {Variable(key_mask_bias(mask))}, input_bias);
  }, 0, into);
}

Variable column_attention(const nn::Attention& att, const Variable& x, const nn::Attention::InputBias& input_bias,
                          const Tensor& mask) {
  check_columns(att, x, mask);
  return att.forward_seq_major(x, {Variable(key_mask_bias(mask))}, input_bias);
}

Variable column_attention(const nn::Attention& att, const Variable& x, const Variable& pair_bias, const Tensor& mask) {
  check_columns(att, x, mask);
  const std::vector<Variable> biases{Variable(key_mask_bias(mask))};
  if (!pair_bias.defined()) return att.forward_seq_major(x, biases);
  return att.forward_seq_major(x, biases, [&pair_bias] { return pair_bias; });
}

Variable pair_bias(const nn::Linear& feat_2d, const Variable& z_ln, bool swapped) {
  FC_CHECK(z_ln.dim() == 3 && z_ln.size(0) == z_ln.size(1), "pair_bias '", feat_2d.path(), "': z ",
           z_ln.shape().str(), " (expected [L, L, c_z])");
  return pair_bias_layout(feat_2d.forward(z_ln), swapped);
}

Variable pair_bias_layout(const Variable& b, bool swapped) {
  FC_CHECK(b.dim() == 3 && b.size(0) == b.size(1), "pair_bias_layout: projection ", b.shape().str(),
           " (expected [L, L, H])");
  return autograd::unsqueeze(autograd::contiguous(autograd::permute(b, swapped ? std::vector<int>{2, 1, 0}
                                                                              : std::vector<int>{2, 0, 1})),
                             0);  // [1, H, L, L]
}

Tensor pair_bias_chunked(const nn::Linear& feat_2d, const std::function<Variable(int64_t, int64_t)>& z_ln_rows,
                         int64_t n, int64_t chunk) {
  FC_CHECK(chunk > 0, "pair_bias_chunked '", feat_2d.path(), "': chunk ", chunk);
  Tensor bias;  // [1, H, N, N]
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t len = std::min(chunk, n - s);
    const Tensor b = feat_2d.forward(z_ln_rows(s, len)).value();  // [len, N, H]
    if (!bias.defined()) bias = Tensor::empty({1, b.size(2), n, n}, b.dtype(), b.device());
    bias.select(0, 0).narrow(1, s, len).copy_(b.permute({2, 0, 1}));
  }
  return bias;
}

void check_normalised_input(const std::string& module, const Variable& normed, const Variable& x, int64_t chunk,
                            int64_t rows) {
  if (!normed.defined()) return;
  FC_CHECK(normed.shape() == x.shape(), module, ": normalised input ", normed.shape().str(), " for ", x.shape().str());
  FC_CHECK(autograd::grad_enabled() || chunk <= 0 || chunk >= rows, module, ": a normalised input is taken unchunked only (chunk ",
           chunk, " of ", rows, " rows)");
}

Variable transition_forward(const nn::Transition& tr, const Variable& x, int64_t chunk, const Tensor& into,
                            const Variable& normed) {
  check_normalised_input("transition_forward '" + tr.path() + "'", normed, x, chunk, x.size(0));
  if (normed.defined()) {
    return run_chunked(x.size(0), 0, [&](int64_t, int64_t) { return tr.forward_normalized(normed); }, 0, into);
  }
  return run_chunked(x.size(0), chunk, [&](int64_t s, int64_t len) {
    return tr.forward(autograd::narrow(x, 0, s, len));
  }, 0, into);
}

}  // namespace foldcore::af2
