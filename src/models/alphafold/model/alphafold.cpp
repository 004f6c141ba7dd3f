#include "models/alphafold/model/alphafold.h"

#include <optional>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/profile.h"
#include "models/alphafold/evoformer/evoformer.h"
#include "models/alphafold/heads/confidence.h"
#include "models/alphafold/heads/heads.h"
#include "models/alphafold/parallel/pair_rows.h"
#include "models/alphafold/structure/structure_module.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;

Tensor to_device(const Tensor& t, Device d) { return t.defined() ? t.to(d) : t; }

Af2Batch batch_to(const Af2Batch& b, Device d) {
  Af2Batch o = b;
  for (Tensor* t : {&o.aatype, &o.residue_index, &o.seq_mask, &o.target_feat, &o.msa_feat, &o.msa_mask, &o.extra_msa,
                    &o.extra_msa_mask, &o.extra_has_deletion, &o.extra_deletion_value, &o.template_aatype,
                    &o.template_all_atom_positions, &o.template_all_atom_mask, &o.template_mask,
                    &o.template_pseudo_beta, &o.template_pseudo_beta_mask, &o.template_torsion_angles_sin_cos,
                    &o.template_alt_torsion_angles_sin_cos, &o.template_torsion_angles_mask, &o.atom14_atom_exists,
                    &o.atom37_atom_exists, &o.residx_atom14_to_atom37, &o.residx_atom37_to_atom14, &o.bert_mask,
                    &o.true_msa})
    *t = to_device(*t, d);
  return o;
}

// A CPU tensor that owns its whole storage (outputs outlive the iteration's buffers). A host
// tensor that already is its whole storage is shared, not cloned: at long N the pair-sized
// outputs would otherwise exist twice or three times (pair, recycle_z, the recycled state).
// Sharing is safe: the in-place residual adds skip storage with more than one owner.
Tensor host(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).contiguous();
  return h.offset() == 0 && h.nbytes() == h.storage()->bytes() ? h : h.clone();
}
Tensor host(const Variable& v) { return host(v.value()); }

}  // namespace

AlphaFold::AlphaFold(nn::Scope scope, const Af2Config& config)
    : nn::Module(scope), config_(config), trunk_(child_scope("evoformer"), config_) {
  register_child(trunk_);
  structure_module_ = std::make_unique<StructureModule>(child_scope("structure_module"), config_.structure);
  heads_ = std::make_unique<Af2Heads>(child_scope("heads"), config_);
  register_child(*structure_module_);
  register_child(*heads_);
}

AlphaFold::~AlphaFold() = default;

void AlphaFold::set_model_parallel(const ModelParallel& mp) {
  mp_ = mp;
  trunk_.set_model_parallel(mp);
}

int64_t AlphaFold::max_kept_block_bytes() const { return trunk_.stacks().back()->max_kept_block_bytes(); }
int64_t AlphaFold::max_kept_extra_msa_block_bytes() const {
  return trunk_.stacks().front()->max_kept_block_bytes();
}

void AlphaFold::add_af2_params(Af2ParamTable& table, const std::string& key_prefix) const {
  trunk_.add_af2_params(table, key_prefix);
  structure_module_->add_af2_params(table, key_prefix + "structure_module");
  heads_->add_af2_params(table, key_prefix);
}

Af2Outputs AlphaFold::iteration(const Af2Batch& batch, Af2RecycleState prev, Af2RecycleState* next,
                                bool outputs, bool representations, bool pair_logits) const {
  const Af2Config& c = config_;
  const Device dev = batch.aatype.device();
  std::optional<profile::Scope> stage;
  stage.emplace("trunk", dev);
  // Inference under DAP: the pair stays split by rows through the structure module and the heads
  // and into the next iteration (pair_rows.h); only the host outputs hold it whole.
  const bool split = mp_.dap_size() > 1 && !ag::grad_enabled();
  TrunkOutput trunk = trunk_.forward(batch, std::move(prev), trunk_.stream_dtype(/*training=*/false), split);
  const int64_t n = batch.num_res();
  const ParallelGroup* g = trunk.pair_split;
  auto pair_to_host = [&](const Tensor& z) { return g != nullptr ? gather_split_rows_to_host(*g, z, n, n) : host(z); };

  // Alg. 20: the structure module.
  stage.reset();
  stage.emplace("structure_module", dev);
  StructureModuleInputs sin{trunk.single, trunk.pair, batch.aatype, batch.seq_mask, batch.residx_atom37_to_atom14,
                            batch.atom37_atom_exists, g};
  const StructureModuleOutputs sm = structure_module_->forward(sin);
  stage.reset();
  if (next != nullptr) {
    next->m1 = trunk.m1.value();
    next->z = trunk.pair.value();
    next->x = sm.final_atom_positions;
    next->z_split = g != nullptr;
  }
  if (!outputs) {
    FC_CHECK(next != nullptr, "AlphaFold::iteration: outputs = false needs a state to hand on");
    return {};
  }

  // Heads and confidence.
  // The pair-sized heads by blocks of rows: the device holds one block of logits, whatever N.
  stage.emplace("heads", dev);
  // Split (DAP), the masked-MSA head runs on this rank's MSA rows below.
  const HeadOutputs ho =
      heads_->forward(HeadInputs{g != nullptr ? Variable() : trunk.msa, trunk.pair, trunk.single, sm.single}, false);
  const auto msa_to_host = [&](const Tensor& rows) {  // [S, N, c] of the split MSA's (or its logits') rows
    return gather_split_rows_to_host(*g, rows, trunk.msa_rows, n).narrow(0, 0, batch.num_msa()).contiguous();
  };
  const Tensor masked_msa_logits = g != nullptr ? msa_to_host(heads_->masked_msa().forward(trunk.msa).value())
                                                : host(ho.masked_msa_logits);
  const PairHeadOutputs pho = g != nullptr ? heads_->pair_heads_split(trunk.pair.value(), n, *g, pair_logits)
                                           : heads_->pair_heads_by_rows(trunk.pair.value(), pair_logits);
  stage.reset();
  if (!representations) {  // the confidence metrics below then run without the pair alive
    trunk.msa = Variable();
    trunk.pair = Variable();
    sin.pair = Variable();
  }

  const profile::Scope host_outputs("outputs", dev);  // copies to the host, pLDDT, PAE, pTM
  Af2Outputs out;
  out.reserve(24);  // (also keeps GCC 12's -Warray-bounds false positive on the first emplace away)
  out.emplace_back("final_atom_positions", host(sm.final_atom_positions));
  out.emplace_back("final_atom_mask", host(sm.final_atom_mask));
  const Tensor lddt_logits = host(ho.lddt_logits);
  out.emplace_back("plddt", compute_plddt(lddt_logits));
  out.emplace_back("lddt_logits", lddt_logits);
  if (pair_logits) out.emplace_back("distogram_logits", pho.distogram_logits);
  out.emplace_back("masked_msa_logits", masked_msa_logits);
  out.emplace_back("experimentally_resolved_logits", host(ho.experimentally_resolved_logits));
  if (representations) {
    out.emplace_back("msa", g != nullptr ? msa_to_host(trunk.msa.value()) : host(trunk.msa));
    out.emplace_back("pair", pair_to_host(trunk.pair.value()));
    out.emplace_back("single", host(trunk.single));
  }
  out.emplace_back("sm_frames", host(sm.frames));
  out.emplace_back("sm_sidechain_frames", host(sm.sidechain_frames));
  out.emplace_back("sm_positions", host(sm.positions));
  out.emplace_back("sm_angles", host(sm.angles));
  out.emplace_back("sm_unnormalized_angles", host(sm.unnormalized_angles));
  out.emplace_back("sm_states", host(sm.states));
  out.emplace_back("sm_single", host(sm.single));
  if (c.heads.ptm) {
    // With the logits kept, PAE, pTM and the probabilities come from the host copy in one pass,
    // after the pair is gone; otherwise the blocks were streamed (no probabilities).
    std::shared_ptr<PaeStream> stream = pho.pae;
    if (pair_logits) {
      stream = std::make_shared<PaeStream>(pho.tm_logits.size(0), pho.tm_logits.size(2), c.heads.pae_max_error_bin);
      stream->add_rows(0, pho.tm_logits);
      out.emplace_back("tm_logits", pho.tm_logits);
    }
    const PredictedAlignedError pae = stream->result();
    out.emplace_back("predicted_aligned_error", pae.predicted_aligned_error);
    out.emplace_back("max_predicted_aligned_error",
                     Tensor::from_vector({pae.max_predicted_aligned_error}, Shape{}, DType::f32));
    if (pair_logits) out.emplace_back("aligned_confidence_probs", pae.aligned_confidence_probs);
    // AF2 predicted_tm_score with residue weights all ones.
    out.emplace_back("ptm_score", Tensor::from_vector({stream->ptm()}, Shape{}, DType::f32));
  }
  return out;
}

Af2GraphOutputs AlphaFold::forward_graph(const Af2Batch& batch, const Af2RecycleState& prev,
                                         Af2RecycleState* next, bool heads) const {
  const Device dev = batch.aatype.device();
  std::optional<profile::Scope> stage;
  stage.emplace("trunk", dev);
  TrunkOutput trunk = trunk_.forward(batch, prev, trunk_.stream_dtype(/*training=*/true));
  stage.reset();
  stage.emplace("structure_module", dev);
  // Training under bf16 autocast: the structure module runs in fp32 (autocast off, its inputs cast
  // up), as AlphaFold2 training keeps the geometry, IPA and the FAPE inputs in fp32.
  std::shared_ptr<StructureModuleOutputs> sm;
  if (ag::autocast_dtype()) {
    ag::AutocastGuard fp32(DType::f32);
    StructureModuleInputs sin{ag::cast(trunk.single, DType::f32), ag::cast(trunk.pair, DType::f32), batch.aatype,
                              batch.seq_mask, batch.residx_atom37_to_atom14, batch.atom37_atom_exists};
    sm = std::make_shared<StructureModuleOutputs>(structure_module_->forward(sin));
  } else {
    StructureModuleInputs sin{trunk.single, trunk.pair, batch.aatype, batch.seq_mask, batch.residx_atom37_to_atom14,
                              batch.atom37_atom_exists};
    sm = std::make_shared<StructureModuleOutputs>(structure_module_->forward(sin));
  }
  stage.reset();
  std::shared_ptr<HeadOutputs> ho;
  if (heads) {
    stage.emplace("heads", dev);
    ho = std::make_shared<HeadOutputs>(heads_->forward(HeadInputs{trunk.msa, trunk.pair, trunk.single, sm->single}));
    stage.reset();
  }
  if (next != nullptr) {  // values only: the recycled state carries no graph (AF2 stop_gradient); fp32
    next->m1 = trunk.m1.value().to(DType::f32);
    next->z = trunk.pair.value().to(DType::f32);
    next->x = sm->final_atom_positions;
  }
  return {std::move(sm), std::move(ho)};
}

Af2GraphOutputs AlphaFold::forward_train(const Af2Features& features, Device device) const {
  const int64_t iterations = features.num_iterations();
  FC_CHECK(iterations >= 1, "AlphaFold::forward_train: ", features.path(), " has no recycling iterations");
  Af2RecycleState state;
  for (int64_t r = 0; r + 1 < iterations; ++r) {
    ag::NoGradGuard no_grad;
    Af2RecycleState next;
    forward_graph(batch_to(features.iteration(r), device), state, &next, /*heads=*/false);  // only `next` is used
    state = std::move(next);
  }
  return forward_graph(batch_to(features.iteration(iterations - 1), device), state);
}

Af2Outputs AlphaFold::predict(const Af2Features& features, int64_t num_recycles, Device device,
                              const std::function<void(int64_t, int64_t)>& on_iteration,
                              const Af2PredictKeep& keep) const {
  FC_CHECK(num_recycles >= 0 && num_recycles < features.num_iterations(), "AlphaFold::predict: ", num_recycles,
           " recycles need ", num_recycles + 1, " feature iterations, ", features.path(), " holds ",
           features.num_iterations());
  ag::NoGradGuard no_grad;
  std::optional<ag::AutocastGuard> autocast;
  if (config_.precision == "bf16") autocast.emplace(DType::bf16);
  Af2RecycleState state;
  std::vector<Tensor> rec_m1, rec_z, rec_x;
  Af2Outputs out;
  for (int64_t r = 0; r <= num_recycles; ++r) {
    if (on_iteration) on_iteration(r, num_recycles + 1);
    const Af2Batch batch = batch_to(features.iteration(r), device);
    Af2RecycleState next;
    // Only the last iteration's outputs are kept: the earlier ones skip the heads, the confidence
    // metrics and the copies to the host (on a GPU at N = 1,000 the pair alone is 0.5 GB over PCIe).
    // The last iteration hands nothing on unless its state is kept.
    const bool last = r == num_recycles;
    out = iteration(batch, std::move(state), last && !keep.recycle_states ? nullptr : &next, last,
                    keep.representations, keep.pair_logits);
    if (keep.recycle_states) {
      rec_m1.push_back(host(next.m1));
      rec_z.push_back(next.z_split ? gather_split_rows_to_host(*mp_.dap, next.z, batch.num_res(), batch.num_res()) : host(next.z));
      rec_x.push_back(host(next.x));
    }
    state = std::move(next);  // the previous state dies here
  }
  out.emplace_back("num_recycles", Tensor::from_vector_i64({num_recycles}, Shape{}));
  if (!keep.recycle_states) return out;
  auto stack = [](const std::vector<Tensor>& ts) {
    if (ts.size() == 1) return ts[0].unsqueeze(0);  // a view: no second copy of the pair
    std::vector<Variable> vs;
    for (const Tensor& t : ts) vs.push_back(Variable(t.unsqueeze(0)));
    return ag::concat(vs, 0).value();
  };
  out.emplace_back("recycle_m1", stack(rec_m1));
  out.emplace_back("recycle_z", stack(rec_z));
  out.emplace_back("recycle_x", stack(rec_x));
  return out;
}

}  // namespace foldcore::af2
