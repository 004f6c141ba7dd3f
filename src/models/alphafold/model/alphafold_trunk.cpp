#include "models/alphafold/model/alphafold_trunk.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "autograd/functions.h"
#include "core/error.h"
#include "core/profile.h"
#include "kernels/elementwise.h"
#include "models/alphafold/evoformer/embedders.h"
#include "models/alphafold/evoformer/evoformer.h"
#include "models/alphafold/evoformer/template.h"
#include "models/alphafold/parallel/pair_rows.h"

namespace foldcore::af2 {

namespace ag = autograd;
using nn::Variable;

Tensor pair_mask_from_seq_mask(const Tensor& seq_mask) {
  // m_i · m_j on the mask's device (no copy to the host, which waited for the device's queue in
  // every recycling iteration): row i filled with m_i, then times m_j; the fp32 products as before.
  const int64_t n = seq_mask.size(0);
  const Tensor m = seq_mask.to(DType::f32).contiguous();
  Tensor out = Tensor::empty({n, n}, DType::f32, m.device());
  out.copy_(m.view({n, 1}).expand({n, n}));
  ops::mul(out, m.view({1, n}), out);
  return out;
}

EmbeddingsAndEvoformer::EmbeddingsAndEvoformer(nn::Scope scope, const Af2Config& config)
    : nn::Module(scope), config_(config) {
  validate_af2_config(config_);
  input_embedder_ = std::make_unique<InputEmbedder>(child_scope("input_embedder"), config_);
  recycling_embedder_ = std::make_unique<RecyclingEmbedder>(child_scope("recycling_embedder"), config_);
  register_child(*input_embedder_);
  register_child(*recycling_embedder_);
  if (config_.templates.enabled) {
    template_embedder_ =
        std::make_unique<TemplateEmbedder>(child_scope("template_embedding"), config_.c_z, config_.templates);
    register_child(*template_embedder_);
    if (config_.templates.embed_torsion_angles) {
      template_angle_embedder_ = std::make_unique<TemplateAngleEmbedder>(child_scope("template_angles"), config_.c_m);
      register_child(*template_angle_embedder_);
    }
  }
  extra_msa_embedder_ = std::make_unique<ExtraMsaEmbedder>(child_scope("extra_msa_embedder"), config_);
  extra_msa_stack_ = std::make_unique<EvoformerStack>(child_scope("extra_msa_stack"), config_.extra_msa,
                                                      config_.num_extra_msa_blocks);
  evoformer_ = std::make_unique<EvoformerStack>(child_scope("evoformer_iteration"), config_.evoformer,
                                                config_.num_evoformer_blocks);
  single_activations_ = std::make_unique<nn::Linear>(child_scope("single_activations"), config_.c_m, config_.c_s);
  extra_msa_stack_->set_recompute_blocks(config_.recompute_blocks);
  evoformer_->set_recompute_blocks(config_.recompute_blocks);
  // auto: none until the trainer's first step has measured what a kept block holds (keep_blocks.h).
  evoformer_->set_recompute_keep_blocks(std::max<int64_t>(config_.recompute_keep_blocks, 0));
  extra_msa_stack_->set_recompute_keep_blocks(std::max<int64_t>(config_.recompute_keep_extra_msa_blocks, 0));
  if (template_embedder_) template_embedder_->set_recompute_blocks(config_.recompute_blocks);
  register_child(*extra_msa_embedder_);
  register_child(*extra_msa_stack_);
  register_child(*evoformer_);
  register_child(*single_activations_);
}

void EmbeddingsAndEvoformer::set_recompute_keep_blocks(int64_t blocks) {
  evoformer_->set_recompute_keep_blocks(blocks);
  config_.recompute_keep_blocks = blocks;
}

void EmbeddingsAndEvoformer::set_recompute_keep_extra_msa_blocks(int64_t blocks) {
  extra_msa_stack_->set_recompute_keep_blocks(blocks);
  config_.recompute_keep_extra_msa_blocks = blocks;
}

EmbeddingsAndEvoformer::~EmbeddingsAndEvoformer() = default;

void EmbeddingsAndEvoformer::add_af2_params(Af2ParamTable& table, const std::string& key_prefix) const {
  const std::string ev = key_prefix + "evoformer";
  input_embedder_->add_af2_params(table, ev);
  recycling_embedder_->add_af2_params(table, ev);
  if (template_embedder_) template_embedder_->add_af2_params(table, ev);
  if (template_angle_embedder_) template_angle_embedder_->add_af2_params(table, ev);
  extra_msa_embedder_->add_af2_params(table, ev);
  extra_msa_stack_->add_af2_params(table, ev + "/extra_msa_stack");
  evoformer_->add_af2_params(table, ev + "/evoformer_iteration");
  table.add(ev + "/single_activations//weights", single_activations_->weight().value());
  table.add(ev + "/single_activations//bias", single_activations_->bias().value());
}

DType EmbeddingsAndEvoformer::stream_dtype(bool training) const {
  if (ag::autocast_dtype() != DType::bf16) return DType::f32;
  // Training: DAP's collectives move LayerNorm outputs, edges and updates, never the streams, so
  // they run on bf16 streams as on fp32 ones; branch parallelism exchanges the branches' stream
  // results, in fp32.
  if (training) return config_.bf16_training_streams && !evoformer_->branch_parallel() ? DType::bf16 : DType::f32;
  const bool parallel = evoformer_->model_parallel().dap_size() > 1 || evoformer_->branch_parallel() ||
                        extra_msa_stack_->model_parallel().dap_size() > 1;
  return !parallel && !ag::grad_enabled() ? DType::bf16 : DType::f32;
}

TrunkOutput EmbeddingsAndEvoformer::forward(const Af2Batch& batch, Af2RecycleState prev, DType stream_dtype,
                                            bool split_pair) const {
  const Af2Config& c = config_;
  FC_CHECK(stream_dtype == DType::f32 || (stream_dtype == DType::bf16 && ag::autocast_dtype() == DType::bf16),
           "EmbeddingsAndEvoformer: ", dtype_name(stream_dtype), " streams need f32, or bf16 under bf16 autocast");
  const ParallelGroup* split = split_pair ? evoformer_->model_parallel().dap.get() : nullptr;
  FC_CHECK(!split_pair || (split != nullptr && split->size() > 1 && !ag::grad_enabled() && stream_dtype == DType::f32),
           "EmbeddingsAndEvoformer: a split pair needs inference (no grad) under DAP with fp32 streams");
  FC_CHECK(!prev.z_split || split != nullptr, "EmbeddingsAndEvoformer: a split recycled pair needs split_pair");
  const int64_t n = batch.num_res(), s = batch.num_msa();
  const Device dev = batch.aatype.device();
  FC_CHECK(batch.target_feat.size(1) == c.target_feat_dim && batch.msa_feat.size(2) == c.msa_feat_dim,
           "AlphaFold: target_feat/msa_feat widths ", batch.target_feat.size(1), "/", batch.msa_feat.size(2),
           " do not match the model's ", c.target_feat_dim, "/", c.msa_feat_dim);
  const Tensor mask_2d = pair_mask_from_seq_mask(batch.seq_mask);

  // Alg. 3/4 input embedding; Alg. 32 recycling (zeros on the first iteration: the empty
  // distogram of all-zero positions leaves prev_pos_linear's bias, LN(0) its offset).
  const Tensor prev_m1 = prev.m1.defined() ? prev.m1 : Tensor::zeros({n, c.c_m}, DType::f32, dev);
  const Tensor prev_x = prev.x.defined() ? prev.x : Tensor::zeros({n, 37, 3}, DType::f32, dev);
  const Tensor prev_pb = pseudo_beta(batch.aatype, prev_x);
  Variable m, z;
  std::optional<profile::Scope> stage;
  stage.emplace("embedding", dev);
  // Alg. 2 lines 7-8: template torsion-angle features become MSA rows below the S clusters, masked
  // by the ψ torsion mask (whether that template residue's backbone exists).
  Tensor msa_mask = batch.msa_mask;
  Variable angle_rows;  // [T, N, c_m]
  if (template_angle_embedder_ && batch.has_templates()) {
    angle_rows = template_angle_embedder_->forward(Variable(
        template_angle_feat(batch.template_aatype, batch.template_torsion_angles_sin_cos,
                            batch.template_alt_torsion_angles_sin_cos, batch.template_torsion_angles_mask)));
    msa_mask = ag::concat({Variable(msa_mask), Variable(template_msa_mask(batch.template_torsion_angles_mask))}, 0)
                   .value();
  }
  // Inference: the MSA stream's rows [i0, i0 + len) of the S clusters and the T template rows
  // ([len, N, c_m]): the embedding of those clusters' features (with the recycled first row on
  // row 0) and the template rows, so the stream is made by row blocks into its own storage (one
  // process) or this rank's rows (DAP): no whole embedding beside it, no concatenated copy.
  const auto msa_stream_rows = [&](int64_t i0, int64_t len) {
    Tensor out = Tensor::empty({len, n, c.c_m}, stream_dtype, dev);
    if (i0 < s) {
      const int64_t rows = std::min(len, s - i0);
      Variable e = input_embedder_->msa(Variable(batch.target_feat), Variable(batch.msa_feat.narrow(0, i0, rows)));
      if (i0 == 0) e = recycling_embedder_->apply_msa(e, Variable(prev_m1));
      out.narrow(0, 0, rows).copy_(e.value());
    }
    if (i0 + len > s) {
      const int64_t t0 = std::max(i0, s);
      out.narrow(0, t0 - i0, i0 + len - t0).copy_(angle_rows.value().narrow(0, t0 - s, i0 + len - t0));
    }
    return out;
  };
  const int64_t msa_rows_all = msa_mask.size(0), msa_step = c.chunk_size > 0 ? c.chunk_size : msa_rows_all;
  if (split != nullptr) {
    // This rank's rows only, by chunks (all of them at once unchunked), as the chunked path below
    // makes them, into this rank's [rows, padded N, c_z] (zeros in the padding).
    const PairRows pr = PairRows::of(*split, n);
    const Tensor rz = prev.z;
    FC_CHECK(!rz.defined() || rz.shape() == (prev.z_split ? Shape({pr.rows(), pr.padded(), c.c_z})
                                                           : Shape({n, n, c.c_z})),
             "EmbeddingsAndEvoformer: recycled pair ", rz.shape().str(), prev.z_split ? " (split)" : "",
             " does not match N = ", n, " over ", pr.size, " ranks");
    const Variable tf(batch.target_feat);
    z = Variable(make_split_rows(
        pr, pr.padded(), c.c_z, DType::f32, dev, c.chunk_size > 0 ? c.chunk_size : std::max<int64_t>(1, pr.real_rows()),
        [&](int64_t r0, int64_t len) {
          Variable prev_rows;
          if (rz.defined())
            prev_rows = Variable(prev.z_split ? rz.narrow(0, r0 - pr.row0(), len).narrow(1, 0, n).contiguous()
                                              : rz.narrow(0, r0, len));
          return ag::bias_dropout_residual(input_embedder_->pair_rows(tf, batch.residue_index, r0, len), Variable(),
                                           recycling_embedder_->pair_update_of_rows(prev_rows, prev_pb, r0, len), {},
                                           true)
              .value();  // [len, N, c_z]
        }));
    // This rank's rows of the MSA stream, padded as the pair (pair_rows.h on S + T rows).
    const PairRows mr = PairRows::of(*split, msa_rows_all);
    m = Variable(make_split_rows(mr, pr.padded(), c.c_m, stream_dtype, dev,
                                 std::max<int64_t>(1, std::min(msa_step, mr.rows())), msa_stream_rows));
  } else if (!ag::grad_enabled() && c.chunk_size > 0) {
    // Chunked inference: z is built row chunk by row chunk, each chunk's embedding plus recycling
    // update (the same ops in the same order as below, so fp32 results are equal) written into
    // the one [N, N, c_z] stream. Temporaries are O(chunk·N·c_z); the whole path held the
    // embedded pair, the zero/previous pair, its LayerNorm and the distogram projection at once
    // (4 pairs: the model's peak before).
    const Variable tf(batch.target_feat), prev_z = prev.z.defined() ? Variable(prev.z) : Variable();
    Tensor stream;
    for (int64_t r0 = 0; r0 < n; r0 += c.chunk_size) {
      const int64_t rows = std::min(c.chunk_size, n - r0);
      const Variable zc = ag::bias_dropout_residual(input_embedder_->pair_rows(tf, batch.residue_index, r0, rows),
                                                    Variable(),
                                                    recycling_embedder_->pair_update_rows(prev_z, prev_pb, r0, rows),
                                                    {}, true);  // [rows, N, c_z]
      if (!stream.defined()) stream = Tensor::empty({n, n, c.c_z}, stream_dtype, dev);
      stream.narrow(0, r0, rows).copy_(zc.value());
    }
    z = Variable(stream);
    m = Variable(make_split_rows(PairRows{msa_rows_all, 1, 0}, n, c.c_m, stream_dtype, dev, msa_step, msa_stream_rows));
  } else {  // scoped: the zero state of the first iteration (pair-sized) dies before the stacks run
    MsaPair mz =
        input_embedder_->forward(Variable(batch.target_feat), Variable(batch.msa_feat), batch.residue_index);
    const Tensor prev_z = prev.z.defined() ? prev.z : Tensor::zeros({n, n, c.c_z}, DType::f32, dev);
    mz = recycling_embedder_->apply(mz, Variable(prev_m1), Variable(prev_z), prev_pb);
    m = ag::cast(mz.msa, stream_dtype);
    z = ag::cast(mz.pair, stream_dtype);
    if (angle_rows.defined()) m = ag::concat({m, ag::cast(angle_rows, m.dtype())}, 0);  // bf16 autocast: m f32
  }
  angle_rows = Variable();

  prev = {};  // read: the previous pair (a caller's moved-in state) dies here

  // Alg. 16/17: the template pair stack and pointwise attention, added to the pair.
  stage.reset();
  stage.emplace("templates", dev);
  if (template_embedder_ && batch.has_templates()) {
    const TemplateInputs templates{batch.template_aatype,          batch.template_all_atom_positions,
                                   batch.template_all_atom_mask,   batch.template_pseudo_beta,
                                   batch.template_pseudo_beta_mask, batch.template_mask};
    // z + t. In no-grad mode the embedding is added into z itself (z is the trunk's own here; a
    // bf16 stream stays bf16) one template at a time: no pair-sized update, no [T, N, N, c_t].
    // Under DAP with the pair whole (training and its recycling iterations), each rank runs the
    // templates on its rows of the pair, and the pair is gathered back whole.
    const ParallelGroup* dap = evoformer_->model_parallel().dap.get();
    const TemplatePasses passes = template_two_passes_requested(c) ? TemplatePasses::two : TemplatePasses::one;
    if (split == nullptr && dap != nullptr && dap->size() > 1) {
      z = template_embedder_->forward_dap(z, templates, mask_2d, c.chunk_size, *dap, passes);
    } else if (ag::grad_enabled()) {
      z = ag::bias_dropout_residual(template_embedder_->forward(z, templates, mask_2d, c.chunk_size), Variable(), z,
                                    {}, false);
    } else {
      if (split != nullptr) {
        // A split pair stays split: each template's stack runs split by rows too.
        template_embedder_->add_into_split(own_stream(z, true), templates, mask_2d, c.chunk_size, *split, passes);
      } else {
        const Tensor zs = own_stream(z, true);
        template_embedder_->add_into(z, templates, mask_2d, c.chunk_size, zs, passes);
      }
    }
  }

  // 1.7.2 + Alg. 18: the extra MSA, which only updates the pair.
  stage.reset();
  stage.emplace("extra_msa", dev);
  if (split != nullptr) {
    // This rank's rows of the extra MSA only (PairRows's arithmetic on its E rows; zeros in the
    // padding), embedded from their features: no rank holds the whole [E, N, c_e] stream or its
    // features, and the stack does not gather it back (only the pair leaves it).
    const PairRows er = PairRows::of(*split, batch.extra_msa.size(0));
    Tensor rows = make_split_rows(er, PairRows::of(*split, n).padded(), c.c_e, stream_dtype, dev,
                                  std::max<int64_t>(1, er.real_rows()), [&](int64_t i0, int64_t len) {
                                    const auto mine = [&](const Tensor& t) { return t.narrow(0, i0, len); };
                                    return extra_msa_embedder_
                                        ->forward(Variable(extra_msa_feat(mine(batch.extra_msa),
                                                                          mine(batch.extra_has_deletion),
                                                                          mine(batch.extra_deletion_value))))
                                        .value();
                                  });
    z = extra_msa_stack_
            ->forward_split(Variable(std::move(rows)), std::move(z), batch.extra_msa_mask, mask_2d, c.chunk_size)
            .second;
  } else {
    // Training keeps the embedder's dtype: under bf16 autocast a bf16 extra-MSA stream (as OpenFold's
    // autocast leaves it), the largest activations of a training step at half the bytes.
    const Variable embedded = extra_msa_embedder_->forward(
        Variable(extra_msa_feat(batch.extra_msa, batch.extra_has_deletion, batch.extra_deletion_value)));
    const Variable e = ag::grad_enabled() ? embedded : ag::cast(embedded, stream_dtype);
    z = extra_msa_stack_->forward(e, std::move(z), batch.extra_msa_mask, mask_2d, c.chunk_size).second;
  }

  // Alg. 6: the Evoformer; Alg. 2 line 12: the single representation from the first MSA row.
  stage.reset();
  stage.emplace("evoformer", dev);
  std::tie(m, z) = split != nullptr
                       ? evoformer_->forward_split(std::move(m), std::move(z), msa_mask, mask_2d, c.chunk_size)
                       : evoformer_->forward(std::move(m), std::move(z), msa_mask, mask_2d, c.chunk_size);
  stage.reset();
  TrunkOutput out;
  if (split != nullptr) {
    // The first MSA row is the first row of rank 0's rows: broadcast over the group.
    Tensor m1 = split->rank() == 0 ? m.value().narrow(0, 0, 1).narrow(1, 0, n).reshape({n, c.c_m}).contiguous()
                                   : Tensor::empty({n, c.c_m}, m.dtype(), dev);
    split->broadcast_async(m1, 0)->wait();
    out.m1 = Variable(std::move(m1));
    out.msa = std::move(m);  // this rank's rows, the template rows included (TrunkOutput)
  } else {
    out.m1 = ag::reshape(ag::contiguous(ag::narrow(m, 0, 0, 1)), {n, c.c_m});
    // Without the template rows (a view in inference: no MSA-sized copy; a copy with autograd).
    out.msa = m.size(0) == s ? std::move(m) : ag::grad_enabled() ? ag::contiguous(ag::narrow(m, 0, 0, s))
                                                                 : ag::narrow(m, 0, 0, s);
  }
  out.single = single_activations_->forward(out.m1);
  out.pair = std::move(z);
  out.pair_split = split;
  out.msa_rows = msa_rows_all;
  return out;
}

void EmbeddingsAndEvoformer::set_model_parallel(const ModelParallel& mp) {
  extra_msa_stack_->set_model_parallel(mp);
  evoformer_->set_model_parallel(mp);
}

std::vector<const EvoformerStack*> EmbeddingsAndEvoformer::stacks() const {
  return {extra_msa_stack_.get(), evoformer_.get()};
}

}  // namespace foldcore::af2
