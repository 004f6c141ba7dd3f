#include "models/alphafold/heads/heads.h"

#include "kernels/elementwise.h"

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "models/alphafold/model/af2_util.h"
#include "models/alphafold/evoformer/evoformer_util.h"
#include "models/alphafold/parallel/pair_rows.h"
#include "data_pipeline/structure/residue_constants.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;

nn::LinearOptions opts(nn::Init init, ops::Activation act = ops::Activation::none) {
  nn::LinearOptions o;
  o.init = init;
  o.act = act;
  return o;
}

void check_last(const Variable& x, int dims, int64_t c, const char* head) {
  FC_CHECK(x.defined() && x.dim() == dims && x.size(-1) == c, head, ": input ",
           shape_of(x), " must be ", dims, "-D with last dim ", c);
}

// Rows [i0, i0 + r) of pair logits (a block [r, N, bins]) into the [N, N, bins] host array
// `whole`, allocated at the first block in the block's dtype.
void take_rows(Tensor& whole, int64_t i0, const Tensor& block) {
  if (!whole.defined())
    whole = Tensor::empty({block.size(1), block.size(1), block.size(2)}, block.dtype(), Device::cpu());
  whole.narrow(0, i0, block.size(0)).copy_(block);
}

// A block of the PAE head's logits rows: kept (take_rows) or streamed into PAE and pTM.
void take_pae_rows(PairHeadOutputs& out, bool keep_logits, int64_t i0, const Tensor& block) {
  if (keep_logits)
    take_rows(out.tm_logits, i0, block);
  else
    out.pae->add_rows(i0, block);
}

}  // namespace

// ---------------------------------------------------------------- distogram (1.9.8)
DistogramHead::DistogramHead(nn::Scope scope, int64_t c_z, const HeadsConfig& config)
    : Module(std::move(scope)),
      half_logits_(child_scope("half_logits"), c_z, config.distogram_bins, opts(nn::Init::final)) {
  register_child(half_logits_);
}

Variable DistogramHead::forward(const Variable& pair) const {
  check_last(pair, 3, half_logits_.in_features(), "DistogramHead");
  FC_CHECK(pair.size(0) == pair.size(1), "DistogramHead: pair ", pair.shape().str(), " must be [N, N, c_z]");
  const Variable half = half_logits_.forward(pair);  // [N, N, bins]
  // Inference: the transposed operand is read through its strides (ops::add allows a strided b),
  // so no transposed [N, N, bins] copy exists; the same sums.
  if (!ag::grad_enabled()) {
    const Tensor h = half.value(), out = Tensor::empty(h.shape(), h.dtype(), h.device());
    ops::add(h, h.transpose(0, 1), out);
    return Variable(out);
  }
  return ag::add(half, ag::contiguous(ag::transpose(half, 0, 1)));
}

Tensor DistogramHead::forward_rows(const Tensor& pair, int64_t i0, int64_t rows) const {
  FC_CHECK(!ag::grad_enabled(), "DistogramHead::forward_rows is for inference (no autograd)");
  check_last(Variable(pair), 3, half_logits_.in_features(), "DistogramHead");
  FC_CHECK(pair.size(0) == pair.size(1), "DistogramHead: pair ", pair.shape().str(), " must be [N, N, c_z]");
  FC_CHECK(i0 >= 0 && rows >= 1 && i0 + rows <= pair.size(0), "DistogramHead::forward_rows: rows ", i0, "..",
           i0 + rows, " outside the pair ", pair.shape().str());
  const Tensor a = half_logits_.forward(Variable(pair.narrow(0, i0, rows))).value();  // half[i0.., :]  [R, N, B]
  const Tensor b = half_logits_.forward(Variable(pair.narrow(1, i0, rows).contiguous())).value();  // half[:, i0..]
  const Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  ops::add(a, b.transpose(0, 1), out);  // b read through its strides, as forward's transposed operand
  return out;
}

Tensor DistogramHead::forward_split(const Tensor& rows, const ParallelGroup& g) const {
  FC_CHECK(!ag::grad_enabled(), "DistogramHead::forward_split is for inference (no autograd)");
  check_last(Variable(rows), 3, half_logits_.in_features(), "DistogramHead");
  FC_CHECK(rows.size(0) * g.size() == rows.size(1), "DistogramHead::forward_split: rows ", rows.shape().str(),
           " are not one rank's rows of a pair split over ", g.size(), " ranks");
  const Tensor half = half_logits_.forward(Variable(rows)).value();  // half[own rows, :]  [R, N, B]
  const Tensor cols = g.switch_axis(Variable(half), 0, 1).value();   // half[:, own rows]  [N, R, B]
  const Tensor out = Tensor::empty(half.shape(), half.dtype(), half.device());
  ops::add(half, cols.transpose(0, 1), out);  // as forward_rows: the transposed operand through its strides
  return out;
}

void DistogramHead::add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index) const {
  require_finalized(scope().params, path());
  add_linear_af2_params(half_logits_, table, join(key_prefix, "half_logits"), stack_index);
}

// ---------------------------------------------------------------- masked MSA (1.9.9)
MaskedMsaHead::MaskedMsaHead(nn::Scope scope, int64_t c_m, const HeadsConfig& config)
    : Module(std::move(scope)), logits_(child_scope("logits"), c_m, config.masked_msa_outputs, opts(nn::Init::final)) {
  register_child(logits_);
}

Variable MaskedMsaHead::forward(const Variable& msa) const {
  check_last(msa, 3, logits_.in_features(), "MaskedMsaHead");
  return logits_.forward(msa);  // [S, N, 23]
}

void MaskedMsaHead::add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index) const {
  require_finalized(scope().params, path());
  add_linear_af2_params(logits_, table, join(key_prefix, "logits"), stack_index);
}

// ---------------------------------------------------------------- pLDDT (Alg. 29)
PredictedLddtHead::PredictedLddtHead(nn::Scope scope, int64_t c_s, const HeadsConfig& config)
    : Module(std::move(scope)),
      input_layer_norm_(child_scope("input_layer_norm"), c_s),
      act_0_(child_scope("act_0"), c_s, config.lddt_channels, opts(nn::Init::relu, ops::Activation::relu)),
      act_1_(child_scope("act_1"), config.lddt_channels, config.lddt_channels,
             opts(nn::Init::relu, ops::Activation::relu)),
      logits_(child_scope("logits"), config.lddt_channels, config.lddt_bins, opts(nn::Init::final)) {
  register_child(input_layer_norm_);
  register_child(act_0_);
  register_child(act_1_);
  register_child(logits_);
}

Variable PredictedLddtHead::forward(const Variable& sm_single) const {
  check_last(sm_single, 2, act_0_.in_features(), "PredictedLddtHead");
  const Variable h = input_layer_norm_.forward(sm_single);  // [N, c_s]
  return logits_.forward(act_1_.forward(act_0_.forward(h)));  // relus fused: [N, 128] → [N, 50]
}

void PredictedLddtHead::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                       int64_t stack_index) const {
  require_finalized(scope().params, path());
  add_layer_norm_af2_params(input_layer_norm_, table, join(key_prefix, "input_layer_norm"), stack_index);
  add_linear_af2_params(act_0_, table, join(key_prefix, "act_0"), stack_index);
  add_linear_af2_params(act_1_, table, join(key_prefix, "act_1"), stack_index);
  add_linear_af2_params(logits_, table, join(key_prefix, "logits"), stack_index);
}

// ---------------------------------------------------------------- experimentally resolved (1.9.10)
ExperimentallyResolvedHead::ExperimentallyResolvedHead(nn::Scope scope, int64_t c_s)
    : Module(std::move(scope)), logits_(child_scope("logits"), c_s, data::rc::kAtomTypeNum, opts(nn::Init::final)) {
  register_child(logits_);
}

Variable ExperimentallyResolvedHead::forward(const Variable& single) const {
  check_last(single, 2, logits_.in_features(), "ExperimentallyResolvedHead");
  return logits_.forward(single);  // [N, 37]
}

void ExperimentallyResolvedHead::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                                int64_t stack_index) const {
  require_finalized(scope().params, path());
  add_linear_af2_params(logits_, table, join(key_prefix, "logits"), stack_index);
}

// ---------------------------------------------------------------- predicted aligned error (1.9.7)
PredictedAlignedErrorHead::PredictedAlignedErrorHead(nn::Scope scope, int64_t c_z, const HeadsConfig& config)
    : Module(std::move(scope)), logits_(child_scope("logits"), c_z, config.pae_bins, opts(nn::Init::lecun)) {
  register_child(logits_);
}

Variable PredictedAlignedErrorHead::forward(const Variable& pair) const {
  check_last(pair, 3, logits_.in_features(), "PredictedAlignedErrorHead");
  return logits_.forward(pair);  // [N, N, 64]
}

void PredictedAlignedErrorHead::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                               int64_t stack_index) const {
  require_finalized(scope().params, path());
  add_linear_af2_params(logits_, table, join(key_prefix, "logits"), stack_index);
}

// ---------------------------------------------------------------- all heads
Af2Heads::Af2Heads(nn::Scope scope, const Af2Config& config)
    : Module(std::move(scope)),
      distogram_(child_scope("distogram_head"), config.c_z, config.heads),
      masked_msa_(child_scope("masked_msa_head"), config.c_m, config.heads),
      predicted_lddt_(child_scope("predicted_lddt_head"), config.structure.c_s, config.heads),
      experimentally_resolved_(child_scope("experimentally_resolved_head"), config.c_s),
      pae_(config.heads.ptm ? std::make_unique<PredictedAlignedErrorHead>(
                                  child_scope("predicted_aligned_error_head"), config.c_z, config.heads)
                            : nullptr),
      pae_max_error_bin_(config.heads.pae_max_error_bin) {
  register_child(distogram_);
  register_child(masked_msa_);
  register_child(predicted_lddt_);
  register_child(experimentally_resolved_);
  if (pae_) register_child(*pae_);
}

HeadOutputs Af2Heads::forward(const HeadInputs& in, bool pair_heads) const {
  HeadOutputs out;
  if (pair_heads) out.distogram_logits = distogram_.forward(in.pair);
  if (in.msa.defined()) out.masked_msa_logits = masked_msa_.forward(in.msa);
  out.lddt_logits = predicted_lddt_.forward(in.sm_single);
  out.experimentally_resolved_logits = experimentally_resolved_.forward(in.single);
  if (pae_ && pair_heads) out.tm_logits = pae_->forward(in.pair);
  return out;
}

PairHeadOutputs Af2Heads::pair_heads_by_rows(const Tensor& pair, bool keep_logits, int64_t block_values) const {
  FC_CHECK(!ag::grad_enabled(), "Af2Heads::pair_heads_by_rows is for inference (no autograd)");
  FC_CHECK(pair.defined() && pair.dim() == 3 && pair.size(0) == pair.size(1), "Af2Heads: pair ",
           pair.defined() ? pair.shape().str() : std::string("undefined"), " must be [N, N, c_z]");
  FC_CHECK(block_values >= 1, "Af2Heads::pair_heads_by_rows: block_values must be >= 1, got ", block_values);
  const int64_t n = pair.size(0);
  const int64_t bins = std::max(distogram_.bins(), pae_ ? pae_->bins() : int64_t{0});
  const int64_t rows = std::clamp<int64_t>(block_values / (n * bins), 1, n);
  PairHeadOutputs out;
  if (pae_ && !keep_logits)
    out.pae = std::make_shared<PaeStream>(n, pae_->bins(), pae_max_error_bin_, Tensor(), /*keep_probs=*/false);
  if (!keep_logits && !pae_) return out;
  for (int64_t i0 = 0; i0 < n; i0 += rows) {
    const int64_t r = std::min(rows, n - i0);
    if (keep_logits) take_rows(out.distogram_logits, i0, distogram_.forward_rows(pair, i0, r));
    if (pae_) take_pae_rows(out, keep_logits, i0, pae_->forward(Variable(pair.narrow(0, i0, r))).value());
  }
  return out;
}

PairHeadOutputs Af2Heads::pair_heads_split(const Tensor& rows, int64_t n, const ParallelGroup& g, bool keep_logits,
                                           int64_t block_values) const {
  FC_CHECK(!ag::grad_enabled(), "Af2Heads::pair_heads_split is for inference (no autograd)");
  const PairRows pr = PairRows::of(g, n);
  FC_CHECK(rows.defined() && rows.dim() == 3 && rows.size(0) == pr.rows() && rows.size(1) == pr.padded(),
           "Af2Heads: pair rows ", rows.defined() ? rows.shape().str() : std::string("undefined"), " must be [",
           pr.rows(), ", ", pr.padded(), ", c_z] (N = ", n, " over ", pr.size, " ranks)");
  FC_CHECK(block_values >= 1, "Af2Heads::pair_heads_split: block_values must be >= 1, got ", block_values);
  const int64_t bins = std::max(distogram_.bins(), pae_ ? pae_->bins() : int64_t{0});
  const int64_t block = std::clamp<int64_t>(block_values / (n * bins), 1, n);
  // This rank's rows [i0, i0 + r) of a [rows, padded N, ·] tensor, the real columns only.
  auto own = [&](const Tensor& t, int64_t i0, int64_t r) { return t.narrow(0, i0 - pr.row0(), r).narrow(1, 0, n); };
  PairHeadOutputs out;
  if (pae_ && !keep_logits)
    out.pae = std::make_shared<PaeStream>(n, pae_->bins(), pae_max_error_bin_, Tensor(), /*keep_probs=*/false);
  if (keep_logits) {
    const Tensor logits = distogram_.forward_split(rows, g);  // [R, padded N, bins]
    for_each_split_row_block(
        g, n, block, {n, distogram_.bins()}, logits.dtype(), rows.device(),
        [&](int64_t i0, int64_t r) { return own(logits, i0, r); },
        [&](int64_t i0, const Tensor& b) { take_rows(out.distogram_logits, i0, b); });
  }
  if (!pae_) return out;
  // The blocks' dtype, which the receiving ranks need before a block arrives: the head's (one
  // linear layer's) output dtype, its GEMM's (the autocast dtype when one is set).
  const DType pae_dtype = ag::autocast_dtype().value_or(rows.dtype());
  for_each_split_row_block(
      g, n, block, {n, pae_->bins()}, pae_dtype, rows.device(),
      [&](int64_t i0, int64_t r) { return pae_->forward(Variable(own(rows, i0, r).contiguous())).value(); },
      [&](int64_t i0, const Tensor& b) { take_pae_rows(out, keep_logits, i0, b); });
  return out;
}

void Af2Heads::add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index) const {
  require_finalized(scope().params, path());
  distogram_.add_af2_params(table, join(key_prefix, "distogram_head"), stack_index);
  masked_msa_.add_af2_params(table, join(key_prefix, "masked_msa_head"), stack_index);
  predicted_lddt_.add_af2_params(table, join(key_prefix, "predicted_lddt_head"), stack_index);
  experimentally_resolved_.add_af2_params(table, join(key_prefix, "experimentally_resolved_head"), stack_index);
  if (pae_) pae_->add_af2_params(table, join(key_prefix, "predicted_aligned_error_head"), stack_index);
}

}  // namespace foldcore::af2
