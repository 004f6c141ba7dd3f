// The template embedding under DAP (model_parallel.h): with the pair split by rows
// (pair_rows.h), each template's pair stack runs split the same way — its blocks as the Evoformer
// block's pair track (evoformer_parallel.cpp: rows for the starting node and the triangle
// multiplications, columns for the ending node, the edges and biases gathered), in the template
// block's order — and the pointwise attention, which reads one pair entry at a time, runs on the
// rank's rows as they are. No rank holds a whole pair-sized tensor: per template, its rows of t
// [N'/P, N', c_t] and the modules' pieces. Training (TemplateEmbedder::forward_dap) runs the same
// on the rows scattered from the whole pair, with autograd (the collectives' duals backward), and
// gathers the result back whole; the template parameters' gradients are then this rank's part.
#include <algorithm>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "core/profile.h"
#include "models/alphafold/evoformer/evoformer_util.h"
#include "models/alphafold/evoformer/template.h"
#include "models/alphafold/model/af2_util.h"
#include "models/alphafold/parallel/model_parallel.h"
#include "models/alphafold/parallel/pair_rows.h"

namespace foldcore::af2 {

namespace ag = autograd;

Variable TemplatePairBlock::forward_dap(Variable t, const Tensor& pair_mask, const ParallelGroup& g, int64_t chunk,
                                        bool own_input) const {
  FC_CHECK(t.defined() && t.dim() == 3 && t.size(0) * g.size() == t.size(1) && pair_mask.dim() == 2 &&
               pair_mask.size(0) == t.size(1) && pair_mask.size(1) == t.size(1),
           "TemplatePairBlock '", path(), "' (DAP ", g.size(), "): t rows ", t.shape().str(), ", pair_mask ",
           pair_mask.shape().str(), " (expected [N'/P, N', c_t] and the padded [N', N'])");
  t = stream_residual(t, tri_att_start_.forward_dap(t, pair_mask, g, chunk), tri_att_start_dropout_.spec(), own_input);
  t = stream_residual(t, tri_att_end_.forward_dap(t, pair_mask, g, chunk),
                      rows_dropout(tri_att_end_dropout_.spec(), g, t.shape()), true);
  t = stream_residual(t, tri_mul_out_.forward_dap(t, pair_mask, g, chunk), tri_mul_out_dropout_.spec(), true);
  t = stream_residual(t, tri_mul_in_.forward_dap(t, pair_mask, g, chunk), tri_mul_in_dropout_.spec(), true);
  return stream_residual(t, transition_forward(pair_transition_, t, chunk), {}, true);
}

Variable SingleTemplateEmbedding::forward_rows_dap(const std::function<Tensor(int64_t, int64_t)>& feat_rows,
                                                   int64_t n, const Tensor& pair_mask, const ParallelGroup& g,
                                                   int64_t chunk) const {
  FC_CHECK(pair_mask.defined() && pair_mask.dim() == 2 && pair_mask.size(0) == n && pair_mask.size(1) == n,
           "SingleTemplateEmbedding (DAP): pair_mask ", pair_mask.defined() ? pair_mask.shape().str() : "undefined",
           " must be [", n, ", ", n, "]");
  const PairRows pr = PairRows::of(g, n);
  const int64_t c_f = embedding2d_.in_features();
  const auto features = [&](int64_t i0, int64_t len) {
    const Tensor f = feat_rows(i0, len);
    FC_CHECK(f.defined() && f.dim() == 3 && f.size(0) == len && f.size(1) == n && f.size(2) == c_f,
             "SingleTemplateEmbedding (DAP): feature rows ", f.defined() ? f.shape().str() : "undefined",
             " (expected [", len, ", ", n, ", ", c_f, "])");
    return f;
  };
  const Tensor pm = pad_mask_2d(pair_mask, pr.padded(), pr.padded());
  if (ag::grad_enabled()) {
    // Training: embedding2d of the rank's real rows at once, padded with zeros (whose gradients
    // are dropped), then the blocks in forward()'s recomputation segments.
    Variable t = pr.real_rows() > 0
                     ? embedding2d_.forward(Variable(features(pr.row0(), pr.real_rows())))
                     : Variable(Tensor::zeros({0, n, embedding2d_.out_features()},
                                              ag::autocast_dtype().value_or(DType::f32), pair_mask.device()));
    t = pad_rows_cols(t, pr.rows(), pr.padded());
    t = blocks_with_grad(std::move(t), [pm, &g, chunk](const TemplatePairBlock& b, const Variable& s) {
      return b.forward_dap(s, pm, g, chunk, false);
    });
    return output_layer_norm_.forward(t);
  }
  // Inference: embedding2d of this rank's residues by row chunks into its rows of the padded pair
  // (zeros in the padding), in embedding2d's output dtype (its GEMM's: the autocast dtype when one
  // is set; the same on every rank, which the collectives need).
  Tensor t = make_split_rows(pr, pr.padded(), embedding2d_.out_features(), ag::autocast_dtype().value_or(DType::f32),
                             pair_mask.device(), chunk > 0 ? chunk : std::max<int64_t>(1, pr.real_rows()),
                             [&](int64_t i0, int64_t len) {
                               return embedding2d_.forward(Variable(features(i0, len))).value();
                             });
  Variable tv(std::move(t));
  for (const auto& block : blocks_) tv = block->forward_dap(std::move(tv), pm, g, chunk, true);
  // The output LayerNorm row chunk by row chunk, written back into the rows.
  const Tensor ts = own_stream(tv, true);
  const int64_t ln_step = chunk > 0 ? chunk : std::max<int64_t>(1, ts.size(0));
  for (int64_t r0 = 0; r0 < ts.size(0); r0 += ln_step) {
    Tensor slice = ts.narrow(0, r0, std::min(ln_step, ts.size(0) - r0));
    slice.copy_(output_layer_norm_.forward(Variable(slice)).value());
  }
  return tv;
}

void TemplateEmbedder::add_into_split(const Tensor& z_rows, const TemplateInputs& in, const Tensor& pair_mask,
                                      int64_t chunk, const ParallelGroup& g, TemplatePasses passes) const {
  FC_CHECK(pair_mask.defined() && pair_mask.dim() == 2 && pair_mask.size(0) == pair_mask.size(1),
           "TemplateEmbedder::add_into_split: pair_mask ", pair_mask.defined() ? pair_mask.shape().str() : "undefined",
           " must be [N, N]");
  const int64_t n = pair_mask.size(0);
  const PairRows pr = PairRows::of(g, n);
  FC_CHECK(z_rows.defined() && z_rows.dim() == 3 && z_rows.size(0) == pr.rows() && z_rows.size(1) == pr.padded(),
           "TemplateEmbedder::add_into_split: z rows ", z_rows.defined() ? z_rows.shape().str() : "undefined",
           " are not [", pr.rows(), ", ", pr.padded(), ", c_z] (N = ", n, " over ", pr.size, " ranks)");
  const Variable z(z_rows);
  std::vector<float> mask;
  const std::vector<int64_t> present = present_templates("add_into_split", z, n, in, mask);
  if (present.empty()) return;
  // Template k's pair stack output, this rank's rows [N'/P, N', c_t].
  auto stack = [&](int64_t k) {
    const profile::Scope stage("pair_stack", z_rows.device());
    const TemplatePairFeatRows feat = template_feat(in, k, z_rows.device());
    return single_.forward_rows_dap([&](int64_t r0, int64_t len) { return feat.rows(r0, len).to(z_rows.dtype()); },
                                    n, pair_mask, g, chunk);
  };
  add_templates(z, present, mask, stack, chunk, z_rows, passes);
}

Variable TemplateEmbedder::forward_dap(const Variable& z, const TemplateInputs& in, const Tensor& pair_mask,
                                      int64_t chunk, const ParallelGroup& g, TemplatePasses passes) const {
  FC_CHECK(z.defined() && z.dim() == 3 && z.size(0) == z.size(1) && pair_mask.defined() &&
               pair_mask.shape() == Shape({z.size(0), z.size(0)}),
           "TemplateEmbedder::forward_dap: z ", z.defined() ? z.shape().str() : "undefined", " and pair_mask ",
           pair_mask.defined() ? pair_mask.shape().str() : "undefined", " must be [N, N, c_z] and [N, N]");
  const int64_t n = z.size(0);
  FC_CHECK(in.aatype.defined() && in.aatype.dim() == 2 && in.aatype.size(1) == n && in.template_mask.defined() &&
               in.template_mask.numel() == in.aatype.size(0) && in.all_atom_positions.defined() &&
               in.all_atom_mask.defined(),
           "TemplateEmbedder::forward_dap: template aatype ", in.aatype.defined() ? in.aatype.shape().str() : "undefined",
           " and template_mask ", in.template_mask.defined() ? in.template_mask.shape().str() : "undefined",
           " for N = ", n, ": expected [T, N], [T] and all atom inputs");
  const std::vector<float> mask = host_floats(in.template_mask);
  double mask_sum = 0;
  for (float v : mask) mask_sum += v;
  // No (unmasked) template: forward()'s zero update (no stack runs, no dropout is drawn), and
  // nothing to scatter or gather.
  if (in.aatype.size(0) == 0 || mask_sum <= 0) return z;
  const PairRows pr = PairRows::of(g, n);
  // This rank's rows of the padded pair (its rows of z: the scatter's backward gathers their
  // gradients whole, as every rank holds z whole).
  Variable z_rows = g.scatter(pad_rows_cols(z, pr.padded(), pr.padded()), 0);
  Variable rows_out;
  if (!ag::grad_enabled()) {
    add_into_split(own_stream(z_rows, true), in, pair_mask, chunk, g, passes);
    rows_out = z_rows;
  } else {
    // As forward(): every present template's stack on this rank's rows, and the pointwise attention.
    const Variable update = embed_present_slots(z_rows, mask, chunk, [&](int64_t k) {
      const TemplatePairFeatRows feat = template_feat(in, k, z.device());
      return single_.forward_rows_dap([&](int64_t r0, int64_t len) { return feat.rows(r0, len).to(z.dtype()); }, n,
                                      pair_mask, g, chunk);
    });
    rows_out = ag::bias_dropout_residual(update, Variable(), z_rows, {}, false);
  }
  z_rows = Variable();
  return gather_rows_whole(g, rows_out, n, n);  // backward: this rank's rows of the gradient
}

}  // namespace foldcore::af2
