#include "models/alphafold/evoformer/msa_attention.h"

#include "autograd/grad_mode.h"

namespace foldcore::af2 {
namespace {

nn::AttentionOptions af2_attention(int64_t c, const AttentionConfig& a) {
  nn::AttentionOptions o = nn::AttentionOptions::alphafold(c, c, a.num_head, a.head_dim, c);
  o.gating = a.gating;
  return o;
}

void check_msa(const char* what, const Variable& m, int64_t c_m, const Tensor& mask) {
  FC_CHECK(m.dim() == 3 && m.size(-1) == c_m && mask.dim() == 2 && mask.size(0) == m.size(0) &&
               mask.size(1) == m.size(1),
           what, ": m ", m.shape().str(), ", msa_mask ", mask.shape().str(), " (expected [S, N, ", c_m,
           "] and [S, N])");
}

}  // namespace

MsaRowAttentionWithPairBias::MsaRowAttentionWithPairBias(nn::Scope scope, int64_t c_m, int64_t c_z,
                                                         const AttentionConfig& att)
    : Module(std::move(scope)),
      query_norm_(child_scope("query_norm"), c_m),
      feat_2d_norm_(child_scope("feat_2d_norm"), c_z),
      // AF2 initialises feat_2d_weights with N(0, 1/c_z); lecun (truncated normal, same std) is close.
      feat_2d_(child_scope("feat_2d_weights"), c_z, att.num_head, {nn::Init::lecun, false}),
      attention_(child_scope("attention"), af2_attention(c_m, att)) {
  register_child(query_norm_);
  register_child(feat_2d_norm_);
  register_child(feat_2d_);
  register_child(attention_);
}

Variable MsaRowAttentionWithPairBias::forward(const Variable& m, const Variable& z, const Tensor& msa_mask,
                                              int64_t chunk, const Tensor& into) const {
  check_msa("MsaRowAttentionWithPairBias", m, query_norm_.scale().numel(), msa_mask);
  FC_CHECK(z.dim() == 3 && z.size(0) == m.size(1) && z.size(1) == m.size(1) &&
               z.size(2) == feat_2d_norm_.scale().numel(),
           "MsaRowAttentionWithPairBias: z ", z.shape().str(), " for m ", m.shape().str());
  // Chunked inference: LN(z) per row chunk for the bias (no pair-sized LN(z), which under bf16
  // autocast also had a bf16 copy for its GEMM: the block's peak at long N).
  const int64_t n = z.size(0);
  // Unchunked, LN(z), its projection and the [H, N, N] layout in one op: no pair-sized LN(z), no
  // [N, N, H] product to transpose (and in the backward no transposes, no conversion of the
  // attention's fp32 bias gradient, no LN(z) read again).
  const Variable bias = chunk <= 0 || chunk >= n || autograd::grad_enabled()
                            ? autograd::unsqueeze(feat_2d_norm_.forward_project_heads(z, feat_2d_.weight()), 0)  // [1, H, N, N]
                            : Variable(pair_bias_chunked(
                                  feat_2d_,
                                  [&](int64_t s, int64_t len) {
                                    return feat_2d_norm_.forward_for_gemm(autograd::narrow(z, 0, s, len));
                                  },
                                  n, chunk));
  return row_attention(attention_, m, bias, msa_mask, chunk, into, &query_norm_);  // [S, N, c_m]
}

void MsaRowAttentionWithPairBias::add_af2_params(Af2ParamTable& t, const std::string& key, int64_t idx) const {
  require_finalized(scope().params, path());
  add_layer_norm_af2_params(query_norm_, t, key + "/query_norm", idx);
  add_layer_norm_af2_params(feat_2d_norm_, t, key + "/feat_2d_norm", idx);
  t.add(key + "//feat_2d_weights", feat_2d_.weight().value(), idx);  // [c_z, H]
  add_attention_af2_params(attention_, t, key + "/attention", idx);
}

MsaColumnAttention::MsaColumnAttention(nn::Scope scope, int64_t c_m, const AttentionConfig& att)
    : Module(std::move(scope)),
      query_norm_(child_scope("query_norm"), c_m),
      attention_(child_scope("attention"), af2_attention(c_m, att)) {
  register_child(query_norm_);
  register_child(attention_);
}

Variable MsaColumnAttention::forward(const Variable& m, const Tensor& msa_mask, int64_t chunk,
                                     const Tensor& into) const {
  return forward_impl(m, msa_mask, chunk, into, &query_norm_);
}

Variable MsaColumnAttention::forward_normalized(const Variable& x, const Tensor& msa_mask, int64_t chunk) const {
  return forward_impl(x, msa_mask, chunk, Tensor(), nullptr);
}

Variable MsaColumnAttention::forward_impl(const Variable& m, const Tensor& msa_mask, int64_t chunk,
                                          const Tensor& into, const nn::LayerNorm* norm) const {
  check_msa("MsaColumnAttention", m, query_norm_.scale().numel(), msa_mask);
  // Unchunked, m is normalised as it lies (LN acts on each (s, i) vector alone) and the attention
  // runs along its first axis on the projections as they lie (column_attention: no transposed
  // copies), mask [N, S].
  if (chunk <= 0 || chunk >= m.size(1) || autograd::grad_enabled()) {
    const Variable o = column_attention(attention_, norm != nullptr ? norm->forward_for_gemm(m) : m, Variable(),
                                        transposed_mask(msa_mask));  // [S, N, c_m]
    if (!into.defined()) return o;
    add_into(into, o.value());
    return Variable(into);
  }
  // Chunked inference: columns become rows, [N, S, c_m] (a view; each column chunk layer-normed as
  // it is read), mask [N, S]; `into` (m's stream): the column chunks are added into its columns
  // (strided slices).
  const Variable x = autograd::transpose(m, 0, 1);
  const Variable o = row_attention(attention_, x, Variable(), transposed_mask(msa_mask), chunk,
                                   into.defined() ? into.transpose(0, 1) : Tensor(), norm);
  return into.defined() ? Variable(into) : autograd::transpose(o, 0, 1);  // [S, N, c_m] (a view)
}

void MsaColumnAttention::add_af2_params(Af2ParamTable& t, const std::string& key, int64_t idx) const {
  require_finalized(scope().params, path());
  add_layer_norm_af2_params(query_norm_, t, key + "/query_norm", idx);
  add_attention_af2_params(attention_, t, key + "/attention", idx);
}

MsaColumnGlobalAttention::MsaColumnGlobalAttention(nn::Scope scope, int64_t c_m, const AttentionConfig& att)
    : Module(std::move(scope)),
      query_norm_(child_scope("query_norm"), c_m),
      attention_(child_scope("attention"), c_m, att.num_head, att.head_dim, c_m) {
  FC_CHECK(att.gating, "MsaColumnGlobalAttention '", path(), "': AlphaFold's global attention is always gated");
  register_child(query_norm_);
  register_child(attention_);
}

Variable MsaColumnGlobalAttention::forward(const Variable& m, const Tensor& msa_mask, int64_t chunk,
                                           const Tensor& into) const {
  return forward_impl(m, msa_mask, chunk, into, &query_norm_);
}

Variable MsaColumnGlobalAttention::forward_normalized(const Variable& x, const Tensor& msa_mask,
                                                      int64_t chunk) const {
  return forward_impl(x, msa_mask, chunk, Tensor(), nullptr);
}

Variable MsaColumnGlobalAttention::forward_impl(const Variable& m, const Tensor& msa_mask, int64_t chunk,
                                                const Tensor& into, const nn::LayerNorm* norm) const {
  check_msa("MsaColumnGlobalAttention", m, query_norm_.scale().numel(), msa_mask);
  const Variable mt = autograd::transpose(m, 0, 1);             // [N, S, c_m] (a view)
  const Tensor mask_t = transposed_mask(msa_mask);  // [N, S]
  const Variable o = run_chunked(mt.size(0), chunk, [&](int64_t s, int64_t len) {
    // Each column chunk layer-normed as it is read (no whole LN of the extra MSA beside it).
    const Variable cols = autograd::narrow(mt, 0, s, len);
    return attention_.forward(norm != nullptr ? norm->forward(cols) : autograd::contiguous(cols), mask_t.narrow(0, s, len));
  }, 0, into.defined() ? into.transpose(0, 1) : Tensor());
  return into.defined() ? Variable(into) : autograd::transpose(o, 0, 1);  // [S, N, c_m]
}

void MsaColumnGlobalAttention::add_af2_params(Af2ParamTable& t, const std::string& key, int64_t idx) const {
  require_finalized(scope().params, path());
  add_layer_norm_af2_params(query_norm_, t, key + "/query_norm", idx);
  add_global_attention_af2_params(attention_, t, key + "/attention", idx);
}

}  // namespace foldcore::af2
