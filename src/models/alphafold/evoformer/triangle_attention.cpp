#include "models/alphafold/evoformer/triangle_attention.h"

#include <algorithm>

#include "autograd/grad_mode.h"

namespace foldcore::af2 {

TriangleAttention::TriangleAttention(nn::Scope scope, int64_t c_z, const AttentionConfig& att, bool starting)
    : Module(std::move(scope)),
      starting_(starting),
      query_norm_(child_scope("query_norm"), c_z),
      feat_2d_(child_scope("feat_2d_weights"), c_z, att.num_head, {nn::Init::lecun, false}),
      attention_(child_scope("attention"), [&] {
        nn::AttentionOptions o = nn::AttentionOptions::alphafold(c_z, c_z, att.num_head, att.head_dim, c_z);
        o.gating = att.gating;
        return o;
      }()) {
  register_child(query_norm_);
  register_child(feat_2d_);
  register_child(attention_);
}

Variable TriangleAttention::forward(const Variable& z, const Tensor& pair_mask, int64_t chunk,
                                    const Tensor& into, const Variable& normed) const {
  const int64_t c = query_norm_.scale().numel();
  FC_CHECK(z.dim() == 3 && z.size(0) == z.size(1) && z.size(2) == c && pair_mask.dim() == 2 &&
               pair_mask.size(0) == z.size(0) && pair_mask.size(1) == z.size(1),
           "TriangleAttention '", path(), "': z ", z.shape().str(), ", pair_mask ", pair_mask.shape().str(),
           " (expected [N, N, ", c, "] and [N, N])");
  // Ending node: z_ji (AF2 swaps the two residue axes, attends per row, swaps back).
  const Variable zz = starting_ ? z : autograd::transpose(z, 0, 1);
  const Tensor mask = starting_ ? pair_mask : transposed_mask(pair_mask);
  const int64_t n = z.size(0);
  check_normalised_input("TriangleAttention '" + path() + "'", normed, z, chunk, n);
  if (chunk <= 0 || chunk >= n || autograd::grad_enabled()) {
    // LN acts on each (i, j) vector alone, so the ending node normalises z as it lies: its bias
    // swaps the axes of the small [H, N, N] result, and its attention runs along z's first axis
    // on the projections as they lie (column_attention): no transposed copy of the input or of
    // the update. Unchunked, the bias's projection joins q, k, v and the gate in one projection run
    // (nn::Attention::InputBias): the LN output has one consumer, whose dx is one sum of products
    // (in bf16 for a 16-bit z: BackwardCtx::sole_consumer_of_narrow_output). The starting node's
    // rows chunked under autograd make the bias once, beside the chunks' projections.
    const Variable ln = normed.defined() ? normed : query_norm_.forward_for_gemm(z);
    const bool swapped = !starting_;
    const nn::Attention::InputBias bias{&feat_2d_, [swapped](const Variable& b) { return pair_bias_layout(b, swapped); }};
    if (starting_ && chunk > 0 && chunk < n)
      return row_attention(attention_, ln, pair_bias(feat_2d_, ln), mask, chunk, into);  // [N, N, c_z]
    if (starting_) return row_attention(attention_, ln, bias, mask, into);                // [N, N, c_z]
    const Variable o = column_attention(attention_, ln, bias, mask);                // [N, N, c_z]
    if (!into.defined()) return o;
    add_into(into, o.value());
    return Variable(into);
  }
  // Chunked inference without a pair-sized LN(z): LN is recomputed per chunk of rows, once for the
  // pair bias (b[h, i, j] = Σ_c LN(z)_ijc w_ch, written chunk by chunk) and once for the attention.
  // The ending node's output chunks go straight into z's orientation (columns of the result), so
  // no transposed pair-sized copy is made for the residual add.
  auto z_ln = [&](int64_t s, int64_t len) { return query_norm_.forward_for_gemm(autograd::narrow(zz, 0, s, len)); };
  const Tensor bias = pair_bias_chunked(feat_2d_, z_ln, n, chunk);  // [1, H, N, N]
  return run_chunked(
      n, chunk,
      [&](int64_t s, int64_t len) {
        const Variable o = row_attention(attention_, z_ln(s, len), Variable(bias), mask.narrow(0, s, len), 0);
        return starting_ ? o : autograd::transpose(o, 0, 1);  // [len, N, c] / [N, len, c]
      },
      starting_ ? 0 : 1, into);
}

void TriangleAttention::add_af2_params(Af2ParamTable& t, const std::string& key, int64_t idx) const {
  require_finalized(scope().params, path());
  add_layer_norm_af2_params(query_norm_, t, key + "/query_norm", idx);
  t.add(key + "//feat_2d_weights", feat_2d_.weight().value(), idx);  // [c_z, H]
  add_attention_af2_params(attention_, t, key + "/attention", idx);
}

}  // namespace foldcore::af2
