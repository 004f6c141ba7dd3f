#include "models/alphafold/losses/losses_total.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "core/profile.h"
#include "kernels/elementwise.h"
#include "models/alphafold/losses/losses_common.h"

namespace foldcore::af2 {
namespace {

// out += s·g elementwise (f32 tensors of equal shape; on a CUDA device where a head loss left its
// gradient there).
void accumulate(Tensor& out, const Tensor& g, double s) {
  if (!g.device().is_cpu()) {
    if (!out.defined()) {
      out = Tensor::empty(g.shape(), DType::f32, g.device());
      ops::scale(g, static_cast<float>(s), out);
    } else {
      FC_CHECK(out.device() == g.device(), "AlphaFold loss: gradients of one output on ", out.device().str(),
               " and ", g.device().str());
      ops::axpby(1.f, out, static_cast<float>(s), g, out);
    }
    return;
  }
  if (!out.defined()) out = Tensor::zeros(g.shape(), DType::f32);
  float* o = out.data<float>();
  const float* v = g.data<float>();
  for (int64_t k = 0; k < g.numel(); ++k) o[k] += static_cast<float>(s * v[k]);
}

}  // namespace

std::vector<std::pair<std::string, Tensor*>> Af2LossOutputs::named() {
  return {{"sm_frames", &sm_frames},
          {"sm_angles", &sm_angles},
          {"sm_unnormalized_angles", &sm_unnormalized_angles},
          {"sidechain_frames", &sidechain_frames},
          {"atom14_positions", &atom14_positions},
          {"final_atom_positions", &final_atom_positions},
          {"distogram_logits", &distogram_logits},
          {"masked_msa_logits", &masked_msa_logits},
          {"lddt_logits", &lddt_logits},
          {"experimentally_resolved_logits", &experimentally_resolved_logits},
          {"tm_logits", &tm_logits}};
}

std::vector<std::pair<std::string, const Tensor*>> Af2LossOutputs::named() const {
  std::vector<std::pair<std::string, const Tensor*>> out;
  for (const auto& [name, t] : const_cast<Af2LossOutputs*>(this)->named()) out.emplace_back(name, t);
  return out;
}

LossWeights LossWeights::initial(bool ptm) {
  LossWeights w;
  w.tm = ptm ? 0.1 : 0.0;
  return w;
}

LossWeights LossWeights::finetune(bool ptm) {
  LossWeights w = initial(ptm);
  w.experimentally_resolved = 0.01;
  w.violation = 1.0;
  return w;
}

LossWeights LossWeights::stage(const std::string& name, bool ptm) {
  if (name == "initial") return initial(ptm);
  if (name == "finetune") return finetune(ptm);
  FC_THROW("unknown AlphaFold training stage '", name, "' (expected initial or finetune)");
}

const std::vector<std::string>& Af2LossBatch::keys() {
  static const std::vector<std::string> k = {
      "aatype", "residue_index", "seq_mask", "seq_length", "resolution", "use_clamped_fape", "pseudo_beta",
      "pseudo_beta_mask", "true_msa", "bert_mask", "all_atom_positions", "all_atom_mask", "atom37_atom_exists",
      "atom14_atom_exists", "atom14_gt_positions", "atom14_alt_gt_positions", "atom14_gt_exists",
      "atom14_alt_gt_exists", "atom14_atom_is_ambiguous", "rigidgroups_gt_frames", "rigidgroups_alt_gt_frames",
      "rigidgroups_gt_exists", "backbone_rigid_tensor", "backbone_rigid_mask", "chi_angles_sin_cos", "chi_mask"};
  return k;
}

Af2LossBatch Af2LossBatch::from_arrays(const std::map<std::string, Tensor>& arrays) {
  auto get = [&](const std::string& name) {
    const auto it = arrays.find(name);
    FC_CHECK(it != arrays.end(), "AlphaFold loss batch: missing array '", name, "'");
    return it->second;
  };
  Af2LossBatch b;
  Tensor* fields[] = {&b.aatype,
                      &b.residue_index,
                      &b.seq_mask,
                      &b.seq_length,
                      &b.resolution,
                      &b.use_clamped_fape,
                      &b.pseudo_beta,
                      &b.pseudo_beta_mask,
                      &b.true_msa,
                      &b.bert_mask,
                      &b.all_atom_positions,
                      &b.all_atom_mask,
                      &b.atom37_atom_exists,
                      &b.atom14_atom_exists,
                      &b.atom14_gt_positions,
                      &b.atom14_alt_gt_positions,
                      &b.atom14_gt_exists,
                      &b.atom14_alt_gt_exists,
                      &b.atom14_atom_is_ambiguous,
                      &b.rigidgroups_gt_frames,
                      &b.rigidgroups_alt_gt_frames,
                      &b.rigidgroups_gt_exists,
                      &b.backbone_rigid_tensor,
                      &b.backbone_rigid_mask,
                      &b.chi_angles_sin_cos,
                      &b.chi_mask};
  static_assert(sizeof(fields) / sizeof(fields[0]) == 26);
  for (size_t k = 0; k < keys().size(); ++k) *fields[k] = get(keys()[k]);
  return b;
}

Af2Loss af2_loss(const Af2LossOutputs& o, const Af2LossBatch& b, const Af2LossConfig& config) {
  const LossWeights& w = config.weights;
  loss_detail::check_shape(b.aatype, "aatype", {-1});
  const int64_t n = b.aatype.size(0);
  const double resolution = loss_detail::host_scalar(b.resolution, "resolution");
  Af2Loss r;
  // OpenFold: seq_len = mean(seq_length), crop_len = aatype.shape[-1].
  FC_CHECK(b.seq_length.defined() && b.seq_length.numel() > 0, "AlphaFold loss input 'seq_length' is missing or empty");
  const std::vector<float> seq_length = b.seq_length.to_vector();
  double mean_len = 0;
  for (double v : seq_length) mean_len += v / static_cast<double>(seq_length.size());
  r.scale = std::sqrt(std::min(mean_len, static_cast<double>(n)));

  // Each term: its value, and a callback that adds its gradients scaled by s = weight·scale.
  auto add_term = [&](const std::string& name, double weight, double value, auto&& add_grads) {
    if (!std::isfinite(value)) {
      log::warn("AlphaFold loss: ", name, " is ", value, "; counted as 0");
      r.skipped.push_back(name);
      value = 0;
      weight = 0;
    }
    r.terms[name] = value;
    r.unscaled_loss += weight * value;
    if (weight != 0) add_grads(weight * r.scale);
  };

  // FAPE: backbone over all layers + side chains on the renamed truth (final layer).
  FC_CHECK(o.sm_frames.defined() && o.sm_frames.dim() >= 3 && o.sm_frames.size(1) == n,
           "AlphaFold loss input 'sm frames' must be [L, N, 7] or [L, N, 4, 4] with N = ", n);
  const Tensor final_frames = o.sm_frames.select(0, o.sm_frames.size(0) - 1).contiguous();
  std::optional<profile::Scope> stage;  // FOLDCORE_PROFILE: one stage per term ("loss/fape", …)
  stage.emplace("fape", Device::cpu());
  const auto bb = backbone_fape_loss(o.sm_frames, b.backbone_rigid_tensor, b.backbone_rigid_mask,
                                     loss_detail::host_scalar(b.use_clamped_fape, "use_clamped_fape"), config.fape);
  r.renamed = compute_renamed_ground_truth(o.atom14_positions, b.atom14_gt_positions, b.atom14_alt_gt_positions,
                                           b.atom14_gt_exists, b.atom14_alt_gt_exists, b.atom14_atom_is_ambiguous);
  const auto sc = sidechain_fape_loss(o.sidechain_frames, o.atom14_positions, b.rigidgroups_gt_frames,
                                      b.rigidgroups_alt_gt_frames, b.rigidgroups_gt_exists, r.renamed, config.fape);
  add_term("fape", w.fape, config.fape.backbone_weight * bb.value + config.fape.sidechain_weight * sc.value,
           [&](double s) {
             accumulate(r.grads.sm_frames, bb.grad_frames, s * config.fape.backbone_weight);
             accumulate(r.grads.sidechain_frames, sc.grad_frames, s * config.fape.sidechain_weight);
             accumulate(r.grads.atom14_positions, sc.grad_positions, s * config.fape.sidechain_weight);
           });

  stage.reset();
  stage.emplace("supervised_chi", Device::cpu());
  const auto chi = supervised_chi_loss(o.sm_angles, o.sm_unnormalized_angles, b.aatype, b.seq_mask, b.chi_mask,
                                       b.chi_angles_sin_cos, config.supervised_chi);
  add_term("supervised_chi", w.supervised_chi, chi.value, [&](double s) {
    accumulate(r.grads.sm_angles, chi.grad_angles, s);
    accumulate(r.grads.sm_unnormalized_angles, chi.grad_unnormalized_angles, s);
  });

  stage.reset();
  stage.emplace("distogram", o.distogram_logits.device());
  const auto dist = distogram_loss(o.distogram_logits, b.pseudo_beta, b.pseudo_beta_mask, config.distogram);
  add_term("distogram", w.distogram, dist.value,
           [&](double s) { accumulate(r.grads.distogram_logits, dist.grad_logits, s); });

  stage.reset();
  stage.emplace("masked_msa", o.masked_msa_logits.device());
  const auto msa = masked_msa_loss(o.masked_msa_logits, b.true_msa, b.bert_mask, config.masked_msa_eps);
  add_term("masked_msa", w.masked_msa, msa.value,
           [&](double s) { accumulate(r.grads.masked_msa_logits, msa.grad_logits, s); });

  stage.reset();
  stage.emplace("plddt", Device::cpu());
  const auto plddt = plddt_loss(o.lddt_logits, o.final_atom_positions, b.all_atom_positions, b.all_atom_mask,
                                resolution, config.plddt);
  add_term("plddt_loss", w.plddt, plddt.value,
           [&](double s) { accumulate(r.grads.lddt_logits, plddt.grad_logits, s); });

  stage.reset();
  stage.emplace("experimentally_resolved", Device::cpu());
  const auto er = experimentally_resolved_loss(o.experimentally_resolved_logits, b.atom37_atom_exists,
                                               b.all_atom_mask, resolution, config.experimentally_resolved);
  add_term("experimentally_resolved", w.experimentally_resolved, er.value,
           [&](double s) { accumulate(r.grads.experimentally_resolved_logits, er.grad_logits, s); });

  stage.reset();
  stage.emplace("violation", Device::cpu());
  r.violation = violation_loss(o.atom14_positions, b.atom14_atom_exists, b.residue_index, b.aatype, config.violation);
  add_term("violation", w.violation, r.violation.value,
           [&](double s) { accumulate(r.grads.atom14_positions, r.violation.grad_positions, s); });

  stage.reset();
  if (o.tm_logits.defined()) {
    stage.emplace("tm", o.tm_logits.device());
    const auto tm = tm_loss(o.tm_logits, final_frames, b.backbone_rigid_tensor, b.backbone_rigid_mask, resolution,
                            config.tm);
    add_term("tm", w.tm, tm.value, [&](double s) { accumulate(r.grads.tm_logits, tm.grad_logits, s); });
  } else {
    FC_CHECK(w.tm == 0, "AlphaFold loss: tm weight ", w.tm, " but no tm logits (a model without the PAE head)");
  }
  stage.reset();
  r.loss = r.unscaled_loss * r.scale;

  // Every output the loss reads gets a gradient tensor (zeros where its terms have weight 0).
  const auto outs = o.named();
  const auto grads = r.grads.named();
  for (size_t k = 0; k < outs.size(); ++k)
    if (!grads[k].second->defined() && outs[k].second->defined())
      *grads[k].second = Tensor::zeros(outs[k].second->shape(), DType::f32);
  return r;
}

}  // namespace foldcore::af2
