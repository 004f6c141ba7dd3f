// Model parallelism in the Evoformer (model_parallel.h): DAP and BP-2 forward passes of the
// blocks and stacks, and of the modules' DAP forms. The backward passes come from autograd: every
// communication is an autograd function whose backward is its dual collective.
//
// DAP layout (P ranks, rank r; FastFold): the MSA m [S, N, c_m] stays split along its rows (S) and
// the pair z [N, N, c_z] along its rows (i); each rank holds chunk r. What a module needs in
// another layout is switched there and its update switched back, so the residual streams never
// move: the LayerNorm that starts such a module runs on the rows and its output (read only by
// GEMMs) is what moves, in the wire dtype (dap_wire_dtype: bf16 under autocast, which every
// consumer rounds it to anyway). Per block:
//   row attention        m rows; the pair bias [1, H, N, N] is computed from the local pair rows
//                        and gathered whole (all-gather)
//   column attention     LN(m) rows → columns (all-to-all), the attention on the columns, its
//                        update columns → rows (all-to-all), added on the rows
//   MSA transition       m rows
//   outer product mean   projections on the rows; the left one rows → columns (all-to-all), the
//                        right one gathered whole (all-gather) → the update's pair rows
//   tri. mult. outgoing  pair rows; the right edge gathered whole
//   tri. mult. incoming  pair columns (LN(z) switched there, the update switched back); the edge
//                        indexed by the output row gathered whole
//   tri. att. starting   pair rows; the pair bias gathered whole
//   tri. att. ending     pair columns (LN(z) switched there, the update switched back); the pair
//                        bias gathered whole
//   pair transition      pair rows
// Every residual add happens on the rows. Where the dropout mask's shared axis is the split one
// (the row-wise masks), each rank's mask is the one process's whole mask; the column-wise masks
// (column attention, ending node) are cut to the rank's rows by their index base (rows_dropout),
// so each rank draws its rows of the one process's mask. Communication per block: 2 MSA-sized
// all-to-alls of c_m channels and 1 of the outer product mean's c (chunked inference: 2, its right
// projection switched too instead of gathered), 4 pair-sized ones, all-gathers of 3 pair biases
// (H channels) and of 3 projections (c channels).
#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <set>
#include <tuple>

#include "autograd/grad_mode.h"
#include "autograd/recompute.h"
#include "core/profile.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/alphafold_trunk.h"
#include "models/alphafold/evoformer/evoformer.h"
#include "models/alphafold/parallel/pair_rows.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;
constexpr int kRowWise = -3, kColumnWise = -2;

// The pair bias rows b[h, i, j] = Σ_c z_ln[i, j, c] w[c, h] of a [k, N, c_z] slab → [1, H, k, N].
Variable bias_rows(const nn::Linear& feat_2d, const Variable& z_ln) {
  return ag::unsqueeze(ag::contiguous(ag::permute(feat_2d.forward(z_ln), {2, 0, 1})), 0);
}

// Chunk r of g.size() along `axis` of a mask (plain tensor, whole on every rank), f32 contiguous.
Tensor mask_chunk(const Tensor& mask, int axis, const ParallelGroup& g) {
  const int64_t k = mask.size(axis) / g.size();
  return mask.narrow(axis, g.rank() * k, k).to(DType::f32).contiguous();
}

// A dropout's generator advanced as if it had drawn a mask: a BP rank skipping the other
// branch's dropouts keeps its generator in step with the rank that draws them (and with one
// process), so later replicated dropouts draw the same masks on both ranks.
void skip_dropout(const nn::Dropout& d) {
  const ag::DropoutSpec s = d.spec();
  if (s.gen != nullptr && s.p > 0.f) s.gen->reserve();
}

int64_t round_up(int64_t n, int64_t p) { return (n + p - 1) / p * p; }

// t in the wire dtype when that is narrower (inference's pieces of a ring: what the switch
// returned in t's dtype goes round in the dtype its GEMMs read).
Tensor to_wire(const Tensor& t) {
  const std::optional<DType> w = dap_wire_dtype();
  return w && dtype_size(*w) < dtype_size(t.dtype()) ? t.to(*w) : t;
}


}  // namespace

// ---------------------------------------------------------------- modules (DAP)

Variable MsaRowAttentionWithPairBias::forward_dap(const Variable& m_rows, const Variable& z_rows,
                                                  const Tensor& msa_mask_rows, const ParallelGroup& g,
                                                  int64_t chunk) const {
  // The bias rows are gathered while the query norm and the q, k, v, gate projections run.
  PendingVariable bias = g.gather_async(bias_rows(feat_2d_, feat_2d_norm_.forward(z_rows)), 2);  // [1, H, N, N]
  return row_attention(attention_, m_rows, [&bias] { return bias.get(); }, msa_mask_rows, chunk, Tensor(),
                       &query_norm_);
}

Variable TriangleAttention::forward_dap(const Variable& z_rows, const Tensor& pair_mask, const ParallelGroup& g,
                                        int64_t chunk) const {
  if (starting_) {
    const Variable z_ln = query_norm_.forward(z_rows);
    const Tensor mask = mask_chunk(pair_mask, 0, g);
    PendingVariable bias = g.gather_async(bias_rows(feat_2d_, z_ln), 2);  // [1, H, N, N], during the projections
    return row_attention(attention_, z_ln, [&bias] { return bias.get(); }, mask, chunk);
  }
  // Ending node: the rows of zᵀ, i.e. the columns of LN(z), [N/P, N, c] (switched there).
  Variable zz = ag::transpose(g.switch_axis(query_norm_.forward(z_rows), 0, 1, dap_wire_dtype()), 0, 1);
  const Tensor mask = mask_chunk(pair_mask.transpose(0, 1), 0, g);
  PendingVariable bias = g.gather_async(bias_rows(feat_2d_, zz), 2);  // [1, H, N, N], during the projections
  Variable o = row_attention(attention_, zz, [&bias] { return bias.get(); }, mask, chunk);
  zz = Variable();  // inference: the input and the attention's output die before the switch back
  const Variable oc = ag::contiguous(ag::transpose(o, 0, 1));  // [N, N/P, c]
  o = Variable();
  return g.switch_axis(oc, 1, 0);  // the rows [N/P, N, c]
}

Variable TriangleMultiplication::forward_dap(const Variable& z_rows, const Tensor& pair_mask, const ParallelGroup& g,
                                             int64_t chunk) const {
  // Outgoing t[c,i,j] = Σ_k a[c,i,k] b[c,j,k]: rows i here, b whole. Incoming t[c,i,j] =
  // Σ_k b[c,k,i] a[c,k,j]: columns j here (a's columns), b whole.
  // The normalised input: rows [k, N, c] | columns [N, k, c] (made on the rows, switched there).
  Variable x = layer_norm_input_.forward(z_rows);
  if (!outgoing_) x = g.switch_axis(x, 0, 1, dap_wire_dtype());
  const Variable mask3(mask_chunk(pair_mask, outgoing_ ? 0 : 1, g).unsqueeze(-1));
  const Shape zz_shape = x.shape();
  // A gated, masked edge of zz, channel-major ([c, k, N] | [c, N, k]), made by chunks of zz's
  // first axis (no-grad with chunk > 0): its projections exist for one chunk at a time.
  const auto edge = [&](const nn::Linear& gate_linear, const nn::Linear& projection) {
    return run_chunked(zz_shape[0], chunk, [&](int64_t i0, int64_t len) {
      const Variable xs = ag::narrow(x, 0, i0, len);
      const std::vector<Variable> gp = nn::project(xs, {&gate_linear, &projection});  // one cast of xs, one GEMM
      return ag::contiguous(ag::permute(ag::mul(ag::sigmoid_gate(gp[0], gp[1]), ag::narrow(mask3, 0, i0, len)), {2, 0, 1}));
    }, 1);
  };
  if (!ag::grad_enabled() && chunk > 0) {
    const Tensor u = forward_dap_ring(x, edge, g, chunk);  // its edges and pieces die with it
    x = Variable();                                        // and the normalised input here
    return outgoing_ ? Variable(u) : g.switch_axis(Variable(u), 1, 0);
  }
  // b first: gathered whole as [c, N, N] (the only pair-sized tensor here) while a is computed.
  PendingVariable b_all = g.gather_async(edge(right_gate_, right_projection_), outgoing_ ? 1 : 2, dap_wire_dtype());
  const Variable ac = edge(left_gate_, left_projection_);
  const Variable bc = b_all.get();
  // The update by chunks of zz's first axis (the output rows i; chunk 0: at once): t, its
  // LayerNorm, the projection and the gate exist for one chunk at a time.
  const Variable u = run_chunked(zz_shape[0], chunk, [&](int64_t i0, int64_t len) {
    const Variable t = outgoing_ ? ag::matmul(ag::narrow(ac, 1, i0, len), bc, false, true)   // [c, len, N]
                                 : ag::matmul(ag::narrow(bc, 2, i0, len), ac, true, false);  // [c, len, k]
    return gated_update(t, ag::narrow(x, 0, i0, len));
  });
  return outgoing_ ? u : g.switch_axis(u, 1, 0);
}

Variable TriangleMultiplication::gated_update(const Variable& t, const Variable& x) const {
  // t [c, len, N] is the matmul's contiguous output: its LayerNorm reads it channel-major.
  return ag::sigmoid_gate(gating_linear_.forward(x),
                          output_projection_.forward(center_layer_norm_.forward_channel_major(t)));
}

Tensor TriangleMultiplication::forward_dap_ring(
    const Variable& x,
    const std::function<Variable(const nn::Linear&, const nn::Linear&)>& edge, const ParallelGroup& g,
    int64_t chunk) const {
  // Outgoing: this rank has rows i of a and of the output, all columns j; the output's columns j
  // of block q need rank q's rows of b. Incoming: this rank has columns j of a and of the output,
  // all rows i; the output's rows i of block q need rank q's columns of b. Either way block q of
  // the output reads rank q's chunk of b only, and each piece of `chunk` rows (outgoing) or
  // columns (incoming) of that chunk makes its own part of block q: the pieces are broadcast in
  // turn, every rank's in rank order, the next one while the current one's products run, so a rank
  // holds its own chunk and two pieces of [c, chunk, N] in flight instead of all P chunks (or two
  // whole ones).
  const Tensor b_local = to_wire(edge(right_gate_, right_projection_).value());  // [c, k, N] | [c, N, k]
  const Tensor ac = edge(left_gate_, left_projection_).value();         // [c, k, N] | [c, N, k]
  const int piece_axis = outgoing_ ? 1 : 2;
  const int64_t k = b_local.size(piece_axis), piece = std::min(chunk, k);
  // Outgoing: a piece's columns against this rank's rows by row blocks of chunk·⌈k / piece⌉ (the
  // products [c, rows, piece] as large as the [c, chunk, k] of one whole chunk's row block).
  const int64_t row_block = std::min(x.size(0), chunk * ((k + piece - 1) / piece));
  Tensor u;  // the update, x's shape: [k, N, c_z] | [N, k, c_z] (in the first piece's dtype)
  for_each_ring_piece(g, b_local, piece_axis, piece, [&](int q, int64_t j0, const Tensor& current) {
    const Variable b_piece(current);
    const int64_t len = current.size(piece_axis), first = q * k + j0;  // the piece's output columns | rows
    if (outgoing_) {
      for (int64_t i0 = 0; i0 < x.size(0); i0 += row_block) {
        const int64_t rows = std::min(row_block, x.size(0) - i0);
        const Variable t = ag::matmul(ag::narrow(Variable(ac), 1, i0, rows), b_piece, false, true);  // [c, rows, len]
        const Tensor y = gated_update(t, ag::narrow(ag::narrow(x, 0, i0, rows), 1, first, len)).value();
        if (!u.defined()) u = Tensor::empty(x.shape(), y.dtype(), y.device());
        u.narrow(0, i0, rows).narrow(1, first, len).copy_(y);
      }
    } else {
      const Variable t = ag::matmul(b_piece, Variable(ac), true, false);  // [c, len, k]: output rows first..
      const Tensor y = gated_update(t, ag::narrow(x, 0, first, len)).value();
      if (!u.defined()) u = Tensor::empty(x.shape(), y.dtype(), y.device());
      u.narrow(0, first, len).copy_(y);
    }
  });
  return u;
}

Variable OuterProductMean::forward_dap(const Variable& m_rows, const Tensor& msa_mask, const ParallelGroup& g,
                                       int64_t chunk) const {
  const int64_t s = msa_mask.size(0), n = msa_mask.size(1), p = g.size();
  FC_CHECK(m_rows.dim() == 3 && m_rows.size(0) * p == s && m_rows.size(1) == n && n % p == 0, "OuterProductMean '",
           path(), "' (DAP): m rows ", m_rows.shape().str(), ", msa_mask ", msa_mask.shape().str(), ", ", p, " ranks");
  const int64_t k = n / p;
  const Tensor mask_rows = mask_chunk(msa_mask, 0, g), mask_cols = mask_chunk(msa_mask, 1, g);
  const Tensor mask = msa_mask.to(DType::f32).contiguous();
  // 1 / (1e-3 + Σ_s mask_si mask_sj) for this rank's rows i: [k, N, 1].
  const auto inverse_norm = [&] { return OuterProductMean::inverse_norm(mask_cols.contiguous(), mask).view({k, n, 1}); };
  if (!ag::grad_enabled() && chunk > 0) {
    // Inference by pieces (the triangle multiplication's ring): the update's columns j of block q
    // read rank q's columns of the right projection only, so its pieces of `chunk` columns are
    // broadcast in turn and each makes its columns of the update, by row blocks as large as one
    // whole row chunk's outer products: a rank holds its own right projection and two pieces
    // [S, chunk, c] instead of the gathered [S, N, c] (with a deep extra MSA, more than the
    // rank's pair rows).
    // The projections of this rank's rows [S/P, N, c], switched to its columns [S, k, c].
    // Both rounded to the wire dtype before they move (the switch would round them anyway), so
    // they also arrive in it: no fp32 copy of either beside the rounded one.
    auto [a_rows, b_rows] = projections(m_rows, mask_rows, chunk);
    const Variable a = g.switch_axis(Variable(to_wire(a_rows.value())), 0, 1, dap_wire_dtype());
    a_rows = Variable();
    const Tensor b_local = g.switch_axis(Variable(to_wire(b_rows.value())), 0, 1, dap_wire_dtype()).value();
    b_rows = Variable();
    const Tensor inv_norm = inverse_norm();
    const int64_t piece = std::min(chunk, k), row_block = std::min(k, chunk * ((n + piece - 1) / piece));
    Tensor u;  // [k, N, c_z], in the output projection's dtype
    for_each_ring_piece(g, b_local, 1, piece, [&](int q, int64_t j0, const Tensor& current) {
      const int64_t len = current.size(1), first = q * k + j0;  // the piece's columns of the update
      const Variable piece_b(current);  // [S, len, c]
      for (int64_t i0 = 0; i0 < k; i0 += row_block) {
        const int64_t rows = std::min(row_block, k - i0);
        const Tensor y = ag::mul(project_outer(ag::narrow(a, 1, i0, rows), piece_b),
                                 Variable(inv_norm.narrow(0, i0, rows).narrow(1, first, len).contiguous()))
                             .value();  // [rows, len, c_z]
        if (!u.defined()) u = Tensor::empty({k, n, y.size(2)}, y.dtype(), y.device());
        u.narrow(0, i0, rows).narrow(1, first, len).copy_(y);
      }
    });
    return Variable(u);
  }
  // The projections on the rows; the right one gathered whole while the left one is switched to
  // the columns and the normalisation computed.
  const Variable mask3(mask_rows.unsqueeze(-1));
  const Variable x = layer_norm_input_.forward(m_rows);
  PendingVariable b_all = g.gather_async(ag::mul(right_.forward(x), mask3), 0, dap_wire_dtype());  // [S, N, c]
  const Variable a = g.switch_axis(ag::mul(left_.forward(x), mask3), 0, 1, dap_wire_dtype());      // [S, k, c]
  const Tensor inv_norm = inverse_norm();
  const Variable b = b_all.get();  // [S, N, c]
  // The update's rows by chunks (chunk 0: at once): the [len, N, c, c] outer products exist for one
  // chunk at a time.
  return run_chunked(k, chunk, [&](int64_t i0, int64_t len) {
    return ag::mul(project_outer(ag::narrow(a, 1, i0, len), b),
                   Variable(inv_norm.narrow(0, i0, len)));  // [len, N, c_z]
  });
}

// ---------------------------------------------------------------- block

std::pair<Variable, Variable> EvoformerBlock::forward_dap(Variable m, Variable z, const Tensor& msa_mask,
                                                          const Tensor& pair_mask, const ParallelGroup& g,
                                                          int64_t chunk, bool own_inputs) const {
  const int p = g.size();
  FC_CHECK(m.dim() == 3 && z.dim() == 3 && m.size(2) == cfg_.c_m && z.size(2) == cfg_.c_z &&
               msa_mask.size(0) == m.size(0) * p && msa_mask.size(1) == z.size(1) && z.size(0) * p == z.size(1),
           "EvoformerBlock '", path(), "' (DAP ", p, "): m rows ", m.shape().str(), ", z rows ", z.shape().str(),
           ", msa_mask ", msa_mask.shape().str());
  const ag::DropoutSpec none;
  // Each module with its residual add is a FOLDCORE_PROFILE stage, as in the one-process forward.
  const auto stage = [dev = z.device()](const char* name, const auto& run) {
    const profile::Scope s(name, dev);
    run();
  };
  // MSA track.
  stage("msa_row_attention", [&] {
    m = stream_residual(m, row_att_.forward_dap(m, z, mask_chunk(msa_mask, 0, g), g, chunk), row_att_dropout_.spec(),
                        own_inputs);
  });
  stage("msa_column_attention", [&] { m = msa_column_residual_dap(std::move(m), msa_mask, g, chunk); });
  stage("msa_transition", [&] { m = stream_residual(m, transition_forward(msa_transition_, m, chunk), none, true); });
  // Pair track.
  bool z_owned = own_inputs;
  if (!cfg_.parallel) {
    stage("outer_product_mean",
          [&] { z = stream_residual(z, opm_.forward_dap(m, msa_mask, g, chunk), none, own_inputs); });
    z_owned = true;
  }
  stage("triangle_multiplication_outgoing", [&] {
    z = stream_residual(z, tri_mul_out_.forward_dap(z, pair_mask, g, chunk), tri_mul_out_dropout_.spec(), z_owned);
  });
  stage("triangle_multiplication_incoming", [&] {
    z = stream_residual(z, tri_mul_in_.forward_dap(z, pair_mask, g, chunk), tri_mul_in_dropout_.spec(), true);
  });
  stage("triangle_attention_starting_node", [&] {
    z = stream_residual(z, tri_att_start_.forward_dap(z, pair_mask, g, chunk), tri_att_start_dropout_.spec(), true);
  });
  stage("triangle_attention_ending_node", [&] {
    z = stream_residual(z, tri_att_end_.forward_dap(z, pair_mask, g, chunk),
                        rows_dropout(tri_att_end_dropout_.spec(), g, z.shape()), true);
  });
  stage("pair_transition", [&] { z = stream_residual(z, transition_forward(pair_transition_, z, chunk), none, true); });
  if (cfg_.parallel)
    stage("outer_product_mean", [&] { z = stream_residual(z, opm_.forward_dap(m, msa_mask, g, chunk), none, true); });
  return {std::move(m), std::move(z)};
}

Variable EvoformerBlock::msa_column_residual_dap(Variable m, const Tensor& msa_mask, const ParallelGroup& g,
                                                int64_t chunk) const {
  const nn::LayerNorm& norm = col_att_ ? col_att_->query_norm() : col_glob_->query_norm();
  const auto update = [&](const Variable& x, const Tensor& mask, int64_t c) {
    return col_att_ ? col_att_->forward_normalized(x, mask, c) : col_glob_->forward_normalized(x, mask, c);
  };
  const ag::DropoutSpec d = rows_dropout(col_att_dropout_.spec(), g, m.shape());
  const Tensor mask_cols = mask_chunk(msa_mask, 1, g);  // [S, N/P]
  if (ag::grad_enabled() || chunk <= 0 || (d.p > 0.f && d.gen != nullptr)) {
    const Variable x = g.switch_axis(norm.forward(m), 0, 1, dap_wire_dtype());  // LN(m) columns [S, N/P, c_m]
    const Variable u = update(x, mask_cols, chunk);
    return stream_residual(m, g.switch_axis(ag::contiguous(u), 1, 0), d, true);  // the update's rows
  }
  // Inference by pieces of `chunk` of this rank's columns: every rank's columns j0.. of its chunk
  // leave this rank's rows as [S/P, P·len, c] (rank-major) and arrive as this rank's [S, len, c].
  const Tensor mt = own_stream(m, true);
  const int p = g.size();
  const int64_t rows = mt.size(0), k = mt.size(1) / p, c = mt.size(2);
  for (int64_t j0 = 0; j0 < k; j0 += chunk) {
    const int64_t len = std::min(chunk, k - j0);
    Tensor t = Tensor::empty({rows, p * len, c}, mt.dtype(), mt.device());
    for (int q = 0; q < p; ++q) t.narrow(1, q * len, len).copy_(mt.narrow(1, q * k + j0, len));
    const Variable x = g.switch_axis(norm.forward(Variable(t)), 0, 1, dap_wire_dtype());
    t = Tensor();
    const Tensor back = g.switch_axis(ag::contiguous(update(x, mask_cols.narrow(1, j0, len), 0)), 1, 0).value();
    for (int q = 0; q < p; ++q) add_into(mt.narrow(1, q * k + j0, len), back.narrow(1, q * len, len));
  }
  return m;
}

std::pair<Variable, Variable> EvoformerBlock::forward_bp(const Variable& m, const Variable& z, const Tensor& msa_mask,
                                                         const Tensor& pair_mask, const ParallelGroup& g,
                                                         int64_t chunk, bool last) const {
  FC_CHECK(cfg_.parallel && g.size() == 2, "EvoformerBlock '", path(), "': branch parallelism needs the Parallel ",
           "Evoformer and 2 ranks (", g.size(), ")");
  const ag::DropoutSpec none;
  const nn::Dropout* msa_drops[] = {&row_att_dropout_, &col_att_dropout_};
  const nn::Dropout* pair_drops[] = {&tri_mul_out_dropout_, &tri_mul_in_dropout_, &tri_att_start_dropout_,
                                     &tri_att_end_dropout_};
  // The dropouts are drawn in one process's order: the MSA branch's, then the pair branch's.
  Variable m_new, opm, z_pair;
  if (g.rank() == 0) {  // MSA branch and the outer product mean of its result
    m_new = stream_residual(m, row_att_.forward(m, z, msa_mask, chunk), row_att_dropout_.spec(), false);
    m_new = stream_residual(m_new, msa_column_update(m_new, msa_mask, chunk), col_att_dropout_.spec(), true);
    m_new = stream_residual(m_new, transition_forward(msa_transition_, m_new, chunk), none, true);
    opm = opm_.forward(m_new, msa_mask, chunk);
    for (const nn::Dropout* d : pair_drops) skip_dropout(*d);
  } else {  // pair branch
    for (const nn::Dropout* d : msa_drops) skip_dropout(*d);
    z_pair = stream_residual(z, tri_mul_out_.forward(z, pair_mask, chunk), tri_mul_out_dropout_.spec(), false);
    z_pair = stream_residual(z_pair, tri_mul_in_.forward(z_pair, pair_mask, chunk), tri_mul_in_dropout_.spec(), true);
    z_pair = stream_residual(z_pair, tri_att_start_.forward(z_pair, pair_mask, chunk), tri_att_start_dropout_.spec(), true);
    z_pair = stream_residual(z_pair, tri_att_end_.forward(z_pair, pair_mask, chunk), tri_att_end_dropout_.spec(), true);
    z_pair = stream_residual(z_pair, transition_forward(pair_transition_, z_pair, chunk), none, true);
  }
  std::vector<Variable> out =
      g.exchange({m_new, opm, z_pair}, {0, 0, 1}, {m.shape(), z.shape(), z.shape()}, /*sum_grads=*/!last);
  return {std::move(out[0]), stream_residual(out[2], out[1], none, true)};
}

// ---------------------------------------------------------------- stack

bool EvoformerStack::branch_parallel() const {
  return mp_.bp_size() > 1 && !blocks_.empty() && blocks_.front()->config().parallel;
}

std::vector<Variable> EvoformerBlock::pair_branch_parameters() const {
  std::vector<Variable> out;
  for (const nn::Module* m : std::initializer_list<const nn::Module*>{&tri_mul_out_, &tri_mul_in_, &tri_att_start_,
                                                                      &tri_att_end_, &pair_transition_})
    for (const auto& [name, v] : m->named_parameters()) out.push_back(v);
  return out;
}

std::vector<Variable> EvoformerStack::other_branch_parameters() const {
  std::vector<Variable> out;
  if (!branch_parallel()) return out;
  for (const auto& block : blocks_) {
    const std::vector<Variable> pair = block->pair_branch_parameters();
    if (mp_.bp->rank() == 0) {  // runs the MSA branch
      out.insert(out.end(), pair.begin(), pair.end());
      continue;
    }
    std::set<const autograd::VariableImpl*> in_pair;
    for (const Variable& v : pair) in_pair.insert(v.impl().get());
    for (const auto& [name, v] : block->named_parameters())
      if (!in_pair.count(v.impl().get())) out.push_back(v);
  }
  return out;
}

std::pair<Variable, Variable> EvoformerStack::forward_split(Variable m_rows, Variable z_rows, const Tensor& msa_mask,
                                                            const Tensor& pair_mask, int64_t chunk) const {
  FC_CHECK(mp_.dap_size() > 1 && !ag::grad_enabled(), "EvoformerStack '", path(),
           "': forward_split is for inference under DAP (a group of ", mp_.dap_size(), " ranks, grad mode ",
           ag::grad_enabled() ? "on" : "off", ")");
  return forward_dap(std::move(m_rows), std::move(z_rows), msa_mask, pair_mask, chunk, true);
}

std::pair<Variable, Variable> EvoformerStack::forward_dap(Variable m, Variable z, const Tensor& msa_mask,
                                                          const Tensor& pair_mask, int64_t chunk,
                                                          bool split) const {
  const ParallelGroup& g = *mp_.dap;
  const int64_t p = g.size(), s = msa_mask.size(0), n = pair_mask.size(0);
  const int64_t sp = round_up(s, p), np = round_up(n, p);
  FC_CHECK(m.dim() == 3 && z.dim() == 3 && m.size(0) == (split ? sp / p : s) && m.size(1) == (split ? np : n) &&
               z.size(0) == (split ? np / p : n) && z.size(1) == (split ? np : n) && msa_mask.dim() == 2 &&
               msa_mask.size(1) == n && pair_mask.dim() == 2 && pair_mask.size(1) == n,
           "EvoformerStack '", path(), "' (DAP", split ? ", split" : "", "): m ", m.shape().str(), ", z ",
           z.shape().str(), ", msa_mask ", msa_mask.shape().str(), ", pair_mask ", pair_mask.shape().str());
  // Sizes not divisible by the group: padded with masked MSA rows and residues (every module
  // masks them out of what the real positions see: attention keys, outer product and triangle
  // edges), cut off at the end. Split (inference), the MSA and the pair come in as this rank's
  // rows of the padded tensors (pair_rows.h) and go out so.
  const Tensor mm = pad_mask_2d(msa_mask, sp, np), pm = pad_mask_2d(pair_mask, np, np);
  Variable mr = split ? std::move(m) : g.scatter(pad_rows_cols(m, sp, np), 0);
  Variable zr = split ? std::move(z) : g.scatter(pad_rows_cols(z, np, np), 0);
  m = Variable();
  z = Variable();
  if (branch_parallel()) {
    // DAP × BP-2: each BP rank runs one branch of every block, split over its DAP group; the BP
    // partners (same DAP index) hold the same chunks and exchange their branch results' chunks.
    // The branches' gradients for the replicated chunks are partial: summed at the entry.
    std::vector<Variable> in = mp_.bp->sum_grads({std::move(mr), std::move(zr)});
    const size_t last = blocks_.size() - 1;
    std::tie(mr, zr) = run_blocks(std::move(in[0]), std::move(in[1]), [this, mm, pm, chunk, last](
                                                                          size_t b, Variable bm, Variable bz, bool) {
      return forward_block_dap_bp(*blocks_[b], std::move(bm), std::move(bz), mm, pm, chunk, b == last);
    });
  } else {
    std::tie(mr, zr) = run_blocks(std::move(mr), std::move(zr), [this, mm, pm, chunk](size_t b, Variable bm, Variable bz,
                                                                                      bool own) {
      return blocks_[b]->forward_dap(std::move(bm), std::move(bz), mm, pm, *mp_.dap, chunk, own);
    });
  }
  if (split) return {std::move(mr), std::move(zr)};
  return {gather_rows_whole(g, mr, s, n), gather_rows_whole(g, zr, n, n)};
}

std::pair<Variable, Variable> EvoformerStack::forward_block_dap_bp(const EvoformerBlock& b, Variable m, Variable z,
                                                                   const Tensor& msa_mask, const Tensor& pair_mask,
                                                                   int64_t chunk, bool last) const {
  const ParallelGroup &g = *mp_.dap, &bpg = *mp_.bp;
  FC_CHECK(b.cfg_.parallel && bpg.size() == 2, "EvoformerBlock '", b.path(), "': branch parallelism needs the ",
           "Parallel Evoformer and 2 ranks (", bpg.size(), ")");
  const ag::DropoutSpec none;
  const nn::Dropout* msa_drops[] = {&b.row_att_dropout_, &b.col_att_dropout_};
  const nn::Dropout* pair_drops[] = {&b.tri_mul_out_dropout_, &b.tri_mul_in_dropout_, &b.tri_att_start_dropout_,
                                     &b.tri_att_end_dropout_};
  const Shape m_shape = m.shape(), z_shape = z.shape();
  // forward_bp's branches with forward_dap's split modules; the dropouts in one process's order.
  Variable m_new, opm, z_pair;
  if (bpg.rank() == 0) {  // MSA branch (rows → columns → rows) and the outer product mean (pair rows)
    m_new = stream_residual(m, b.row_att_.forward_dap(m, z, mask_chunk(msa_mask, 0, g), g, chunk),
                     b.row_att_dropout_.spec(), false);
    m_new = b.msa_column_residual_dap(std::move(m_new), msa_mask, g, chunk);
    m_new = stream_residual(m_new, transition_forward(b.msa_transition_, m_new, chunk), none, true);
    opm = b.opm_.forward_dap(m_new, msa_mask, g, chunk);
    for (const nn::Dropout* d : pair_drops) skip_dropout(*d);
  } else {  // pair branch on the pair rows (the ending node on its columns)
    for (const nn::Dropout* d : msa_drops) skip_dropout(*d);
    z_pair = stream_residual(z, b.tri_mul_out_.forward_dap(z, pair_mask, g, chunk), b.tri_mul_out_dropout_.spec(), false);
    z_pair = stream_residual(z_pair, b.tri_mul_in_.forward_dap(z_pair, pair_mask, g, chunk), b.tri_mul_in_dropout_.spec(), true);
    z_pair = stream_residual(z_pair, b.tri_att_start_.forward_dap(z_pair, pair_mask, g, chunk),
                      b.tri_att_start_dropout_.spec(), true);
    z_pair = stream_residual(z_pair, b.tri_att_end_.forward_dap(z_pair, pair_mask, g, chunk),
                             rows_dropout(b.tri_att_end_dropout_.spec(), g, z_pair.shape()), true);
    z_pair = stream_residual(z_pair, transition_forward(b.pair_transition_, z_pair, chunk), none, true);
  }
  m = Variable();
  z = Variable();
  std::vector<Variable> out =
      bpg.exchange({m_new, opm, z_pair}, {0, 0, 1}, {m_shape, z_shape, z_shape}, /*sum_grads=*/!last);
  return {std::move(out[0]), stream_residual(out[2], out[1], none, true)};
}

std::pair<Variable, Variable> EvoformerStack::forward_bp(Variable m, Variable z, const Tensor& msa_mask,
                                                         const Tensor& pair_mask, int64_t chunk) const {
  const ParallelGroup& g = *mp_.bp;
  // The branches' gradients for the replicated inputs are partial: summed at the entry.
  std::vector<Variable> in = g.sum_grads({std::move(m), std::move(z)});
  const size_t last = blocks_.size() - 1;
  return run_blocks(std::move(in[0]), std::move(in[1]), [this, msa_mask, pair_mask, chunk, last](
                                                            size_t b, Variable bm, Variable bz, bool) {
    return blocks_[b]->forward_bp(bm, bz, msa_mask, pair_mask, *mp_.bp, chunk, b == last);
  });
}

}  // namespace foldcore::af2
