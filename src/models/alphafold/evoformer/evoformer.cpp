#include "models/alphafold/evoformer/evoformer.h"

#include <algorithm>
#include <tuple>

#include "autograd/grad_mode.h"
#include "autograd/recompute.h"
#include "core/allocator.h"
#include "core/profile.h"

namespace foldcore::af2 {
namespace {

constexpr int kRowWise = -3, kColumnWise = -2;  // AF2 shared dropout: mask shared over rows / columns

bool identity(const autograd::DropoutSpec& d) { return d.p == 0.f || d.gen == nullptr; }

}  // namespace

EvoformerBlock::EvoformerBlock(nn::Scope scope, const EvoformerBlockConfig& c)
    : Module(std::move(scope)),
      cfg_(c),
      row_att_(child_scope("msa_row_attention_with_pair_bias"), c.c_m, c.c_z, c.msa_row),
      col_att_(c.global_column_attention
                   ? nullptr
                   : std::make_unique<MsaColumnAttention>(child_scope("msa_column_attention"), c.c_m, c.msa_column)),
      col_glob_(c.global_column_attention ? std::make_unique<MsaColumnGlobalAttention>(
                                                child_scope("msa_column_global_attention"), c.c_m, c.msa_column)
                                          : nullptr),
      msa_transition_(child_scope("msa_transition"), c.c_m, c.msa_transition_factor),
      opm_(child_scope("outer_product_mean"), c.c_m, c.opm_channels, c.c_z),
      tri_mul_out_(child_scope("triangle_multiplication_outgoing"), c.c_z, c.tri_mul_channels, true),
      tri_mul_in_(child_scope("triangle_multiplication_incoming"), c.c_z, c.tri_mul_channels, false),
      tri_att_start_(child_scope("triangle_attention_starting_node"), c.c_z, c.tri_att, true),
      tri_att_end_(child_scope("triangle_attention_ending_node"), c.c_z, c.tri_att, false),
      pair_transition_(child_scope("pair_transition"), c.c_z, c.pair_transition_factor),
      row_att_dropout_(child_scope("msa_row_attention_dropout"), c.msa_row.dropout, {kRowWise}),
      col_att_dropout_(child_scope("msa_column_attention_dropout"), c.msa_column.dropout, {kColumnWise}),
      tri_mul_out_dropout_(child_scope("triangle_multiplication_outgoing_dropout"), c.tri_mul_dropout, {kRowWise}),
      tri_mul_in_dropout_(child_scope("triangle_multiplication_incoming_dropout"), c.tri_mul_dropout, {kRowWise}),
      tri_att_start_dropout_(child_scope("triangle_attention_starting_node_dropout"), c.tri_att.dropout,
                             {kRowWise}),
      tri_att_end_dropout_(child_scope("triangle_attention_ending_node_dropout"), c.tri_att.dropout,
                           {kColumnWise}) {
  register_child(row_att_);
  if (col_att_) register_child(*col_att_);
  if (col_glob_) register_child(*col_glob_);
  for (nn::Module* m : std::initializer_list<nn::Module*>{
           &msa_transition_, &opm_, &tri_mul_out_, &tri_mul_in_, &tri_att_start_, &tri_att_end_, &pair_transition_,
           &row_att_dropout_, &col_att_dropout_, &tri_mul_out_dropout_, &tri_mul_in_dropout_, &tri_att_start_dropout_,
           &tri_att_end_dropout_})
    register_child(*m);
}

Variable EvoformerBlock::msa_column_update(const Variable& m, const Tensor& msa_mask, int64_t chunk,
                                           const Tensor& into) const {
  return col_att_ ? col_att_->forward(m, msa_mask, chunk, into) : col_glob_->forward(m, msa_mask, chunk, into);
}

std::pair<Variable, Variable> EvoformerBlock::forward(const Variable& m, const Variable& z, const Tensor& msa_mask,
                                                      const Tensor& pair_mask, int64_t chunk) const {
  return forward_impl(m, z, msa_mask, pair_mask, chunk, false);
}

std::pair<Variable, Variable> EvoformerBlock::forward_impl(Variable m, Variable z, const Tensor& msa_mask,
                                                           const Tensor& pair_mask, int64_t chunk,
                                                           bool own_inputs) const {
  FC_CHECK(m.dim() == 3 && z.dim() == 3 && m.size(2) == cfg_.c_m && z.size(2) == cfg_.c_z &&
               z.size(0) == m.size(1) && z.size(1) == m.size(1),
           "EvoformerBlock '", path(), "': m ", m.shape().str(), ", z ", z.shape().str(), " (expected [S, N, ",
           cfg_.c_m, "] and [N, N, ", cfg_.c_z, "])");
  const autograd::DropoutSpec none;  // AlphaFold applies no dropout to the transitions and the OPM
  if (!autograd::grad_enabled() && chunk > 0 && dropout_is_identity())
    return forward_into(std::move(m), std::move(z), msa_mask, pair_mask, chunk, own_inputs);
  // Each update is computed (reading the old stream) before its residual add, whose result then
  // replaces the stream's handle. Each module with its residual add is a FOLDCORE_PROFILE stage,
  // as in forward_into (training: the forward and, inside the backward, the recomputed forward).
  const Device dev = z.device();
  const auto stage = [&](const char* name, const auto& run) {
    const profile::Scope s(name, dev);
    run();
  };
  // In training (grad mode, or a recomputed block's first, no-grad forward: dropout on) each residual
  // add also makes the next module's input LayerNorm of its result in the same pass
  // (stream_residual_norm: the LayerNorm reads the stream while the add writes it), which that
  // module takes as its normalised input: the same values and gradients, one pass over the stream
  // fewer. m_ln / z_ln hold it from one add to the next module (undefined: the module normalises).
  const bool fuse = residual_norm_fused() && (autograd::grad_enabled() || (chunk <= 0 && !dropout_is_identity()));
  Variable m_ln, z_ln;
  const auto add = [&](Variable& s, const Variable& update, const autograd::DropoutSpec& d, bool own,
                       const nn::LayerNorm* next, Variable& ln) {
    if (fuse && next != nullptr) {
      std::tie(s, ln) = stream_residual_norm(s, update, d, own, *next);
    } else {
      s = stream_residual(s, update, d, own);
      ln = Variable();
    }
  };
  // MSA track (the row attention reads z as its bias before the pair track may overwrite it).
  stage("msa_row_attention", [&] {
    add(m, row_att_.forward(m, z, msa_mask, chunk), row_att_dropout_.spec(), own_inputs,
        col_att_ ? &col_att_->query_norm() : nullptr, m_ln);
  });
  stage("msa_column_attention", [&] {
    const Variable u = m_ln.defined() ? col_att_->forward_normalized(m_ln, msa_mask, chunk)
                                      : msa_column_update(m, msa_mask, chunk);
    add(m, u, col_att_dropout_.spec(), true, &msa_transition_.norm(), m_ln);
  });
  stage("msa_transition", [&] {
    add(m, transition_forward(msa_transition_, m, chunk, Tensor(), m_ln), none, true,
        cfg_.parallel ? nullptr : &opm_.input_norm(), m_ln);
  });
  // Pair track. AlphaFold: the outer product mean first; Parallel Evoformer: last (below), so the
  // pair stack reads only the block's input pair.
  bool z_owned = own_inputs;
  if (!cfg_.parallel) {
    stage("outer_product_mean", [&] {
      add(z, opm_.forward(m, msa_mask, chunk, Tensor(), m_ln), none, own_inputs, &tri_mul_out_.input_norm(), z_ln);
      m_ln = Variable();
    });
    z_owned = true;
  }
  stage("triangle_multiplication_outgoing", [&] {
    add(z, tri_mul_out_.forward(z, pair_mask, chunk, Tensor(), z_ln), tri_mul_out_dropout_.spec(), z_owned,
        &tri_mul_in_.input_norm(), z_ln);
  });
  stage("triangle_multiplication_incoming", [&] {
    add(z, tri_mul_in_.forward(z, pair_mask, chunk, Tensor(), z_ln), tri_mul_in_dropout_.spec(), true,
        &tri_att_start_.input_norm(), z_ln);
  });
  stage("triangle_attention_starting_node", [&] {
    add(z, tri_att_start_.forward(z, pair_mask, chunk, Tensor(), z_ln), tri_att_start_dropout_.spec(), true,
        &tri_att_end_.input_norm(), z_ln);
  });
  stage("triangle_attention_ending_node", [&] {
    add(z, tri_att_end_.forward(z, pair_mask, chunk, Tensor(), z_ln), tri_att_end_dropout_.spec(), true,
        &pair_transition_.norm(), z_ln);
  });
  stage("pair_transition", [&] {
    add(z, transition_forward(pair_transition_, z, chunk, Tensor(), z_ln), none, true, nullptr, z_ln);
  });
  if (cfg_.parallel)
    stage("outer_product_mean", [&] { z = stream_residual(z, opm_.forward(m, msa_mask, chunk), none, true); });
  return {std::move(m), std::move(z)};
}

bool EvoformerBlock::dropout_is_identity() const {
  for (const nn::Dropout* d : {&row_att_dropout_, &col_att_dropout_, &tri_mul_out_dropout_, &tri_mul_in_dropout_,
                               &tri_att_start_dropout_, &tri_att_end_dropout_})
    if (!identity(d->spec())) return false;
  return true;
}

std::pair<Variable, Variable> EvoformerBlock::forward_into(Variable m, Variable z, const Tensor& msa_mask,
                                                           const Tensor& pair_mask, int64_t chunk,
                                                           bool own_inputs) const {
  // Each module adds its update into the stream chunk by chunk (its `into`), in AlphaFold's order;
  // the sums are the residual adds of forward_impl (fp32: the same bits). The MSA row attention
  // reads z (its bias) before the pair track changes it; the outer product mean reads the final m.
  // Each module is a FOLDCORE_PROFILE stage (block/<module>: where a long prediction's time goes).
  const Device dev = z.device();
  const auto stage = [&](const char* name, const auto& run) {
    const profile::Scope s(name, dev);
    run();
  };
  const Tensor ms = own_stream(m, own_inputs);
  stage("msa_row_attention", [&] { row_att_.forward(m, z, msa_mask, chunk, ms); });
  stage("msa_column_attention", [&] { msa_column_update(m, msa_mask, chunk, ms); });
  stage("msa_transition", [&] { transition_forward(msa_transition_, m, chunk, ms); });
  const Tensor zs = own_stream(z, own_inputs);
  const auto outer_product_mean = [&] { opm_.forward(m, msa_mask, chunk, zs); };
  if (!cfg_.parallel) stage("outer_product_mean", outer_product_mean);
  stage("triangle_multiplication_outgoing", [&] { tri_mul_out_.forward(z, pair_mask, chunk, zs); });
  stage("triangle_multiplication_incoming", [&] { tri_mul_in_.forward(z, pair_mask, chunk, zs); });
  stage("triangle_attention_starting_node", [&] { tri_att_start_.forward(z, pair_mask, chunk, zs); });
  stage("triangle_attention_ending_node", [&] { tri_att_end_.forward(z, pair_mask, chunk, zs); });
  stage("pair_transition", [&] { transition_forward(pair_transition_, z, chunk, zs); });
  if (cfg_.parallel) stage("outer_product_mean", outer_product_mean);
  return {std::move(m), std::move(z)};
}

void EvoformerBlock::add_af2_params(Af2ParamTable& t, const std::string& key, int64_t idx) const {
  require_finalized(scope().params, path());
  row_att_.add_af2_params(t, key + "/msa_row_attention_with_pair_bias", idx);
  if (col_att_) col_att_->add_af2_params(t, key + "/msa_column_attention", idx);
  if (col_glob_) col_glob_->add_af2_params(t, key + "/msa_column_global_attention", idx);
  add_transition_af2_params(msa_transition_, t, key + "/msa_transition", idx);
  opm_.add_af2_params(t, key + "/outer_product_mean", idx);
  tri_mul_out_.add_af2_params(t, key + "/triangle_multiplication_outgoing", idx);
  tri_mul_in_.add_af2_params(t, key + "/triangle_multiplication_incoming", idx);
  tri_att_start_.add_af2_params(t, key + "/triangle_attention_starting_node", idx);
  tri_att_end_.add_af2_params(t, key + "/triangle_attention_ending_node", idx);
  add_transition_af2_params(pair_transition_, t, key + "/pair_transition", idx);
}

EvoformerStack::EvoformerStack(nn::Scope scope, const EvoformerBlockConfig& config, int64_t num_blocks)
    : Module(std::move(scope)) {
  FC_CHECK(num_blocks >= 0, "EvoformerStack '", path(), "': ", num_blocks, " blocks");
  for (int64_t i = 0; i < num_blocks; ++i) {
    blocks_.push_back(std::make_unique<EvoformerBlock>(child_scope("block_" + std::to_string(i)), config));
    register_child(*blocks_.back());
  }
}

std::pair<Variable, Variable> EvoformerStack::forward(Variable m, Variable z, const Tensor& msa_mask,
                                                      const Tensor& pair_mask, int64_t chunk) const {
  if (mp_.dap_size() > 1) return forward_dap(std::move(m), std::move(z), msa_mask, pair_mask, chunk, false);
  if (branch_parallel()) return forward_bp(std::move(m), std::move(z), msa_mask, pair_mask, chunk);
  // (m, z) are the stack's own: moved in by the caller or copies of the caller's handles. Every
  // residual add may try to work in place (in no-grad mode); autograd's owner check refuses it
  // while the caller still holds the same storage, so a caller's tensor is never overwritten.
  return run_blocks(std::move(m), std::move(z), [this, msa_mask, pair_mask, chunk](size_t b, Variable bm, Variable bz,
                                                                                   bool own) {
    return blocks_[b]->forward_impl(std::move(bm), std::move(bz), msa_mask, pair_mask, chunk, own);
  });
}

std::pair<Variable, Variable> EvoformerStack::run_blocks(Variable m, Variable z, const BlockFn& one) const {
  const size_t k = static_cast<size_t>(recompute_blocks_);
  const bool recompute = k > 0 && autograd::grad_enabled();
  // Blocks [0, n_rec) run in recomputation segments; the rest (the last recompute_keep_blocks_
  // ones, or all without recomputation) directly, keeping their activations in grad mode.
  const size_t n_rec =
      recompute ? blocks_.size() - std::min(blocks_.size(), static_cast<size_t>(recompute_keep_blocks_)) : 0;
  if (recompute) {
    std::vector<Generator*> gens;
    if (scope().rng != nullptr) gens.push_back(scope().rng);
    for (size_t b0 = 0; b0 < n_rec; b0 += k) {
      const size_t b1 = std::min(n_rec, b0 + k);
      // Captures by value: the segment runs again in the backward, after this call returned.
      const autograd::SegmentFn segment = [one, b0, b1](const std::vector<Variable>& in) {
        Variable sm = in[0], sz = in[1];
        for (size_t b = b0; b < b1; ++b)  // the segment's inputs are saved for the backward: never in place
          std::tie(sm, sz) = one(b, std::move(sm), std::move(sz), b > b0);
        return std::vector<Variable>{std::move(sm), std::move(sz)};
      };
      std::vector<Variable> out = autograd::recompute(segment, {m, z}, gens);
      m = std::move(out[0]);
      z = std::move(out[1]);
    }
  }
  // In grad mode these blocks keep their activations: what each leaves allocated is measured.
  Allocator* const alloc =
      autograd::grad_enabled() && n_rec < blocks_.size() ? &default_allocator(m.value().device()) : nullptr;
  for (size_t b = n_rec; b < blocks_.size(); ++b) {
    const size_t before = alloc ? alloc->stats().current : 0;
    std::tie(m, z) = one(b, std::move(m), std::move(z), true);
    if (alloc) {
      const size_t after = alloc->stats().current;
      if (after > before) max_kept_block_bytes_ = std::max(max_kept_block_bytes_, static_cast<int64_t>(after - before));
    }
  }
  return {std::move(m), std::move(z)};
}

void EvoformerStack::set_recompute_blocks(int64_t blocks) {
  FC_CHECK(blocks >= 0, "EvoformerStack '", path(), "': recompute_blocks ", blocks, " (must be >= 0)");
  recompute_blocks_ = blocks;
}

void EvoformerStack::set_recompute_keep_blocks(int64_t blocks) {
  FC_CHECK(blocks >= 0, "EvoformerStack '", path(), "': recompute_keep_blocks ", blocks, " (must be >= 0)");
  recompute_keep_blocks_ = blocks;
}

void EvoformerStack::add_af2_params(Af2ParamTable& t, const std::string& key) const {
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i]->add_af2_params(t, key, static_cast<int64_t>(i));
}

}  // namespace foldcore::af2
