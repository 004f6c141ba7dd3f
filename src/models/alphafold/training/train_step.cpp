#include "models/alphafold/training/train_step.h"

#include <charconv>
#include <optional>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/param_cast_cache.h"
#include "core/error.h"
#include "core/profile.h"
#include "kernels/optim.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/evoformer/evoformer_util.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/params/alphafold_params.h"
#include "models/alphafold/model/features.h"
#include "models/alphafold/heads/heads.h"
#include "models/alphafold/structure/structure_module.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;

Tensor host(const Variable& v) { return host_f32(v.value()); }

// The backward roots and their incoming gradients (d loss / d output), built side by side.
struct Roots {
  std::vector<Variable> vars;
  std::vector<Tensor> grads;
  void add(const Variable& v, const Tensor& g) {
    if (!v.defined() || !v.requires_grad()) return;  // an output with no path to a parameter
    vars.push_back(v);
    grads.push_back(g.contiguous().to(v.dtype()).to(v.device()));
  }
};

// Where a parameter's gradient lives: its value is a view of the flat value buffer, its gradient
// the same span of the flat gradient buffer.
Tensor grad_of(const ag::ParamStore& ps, const Tensor& value) {
  const Tensor& values = ps.values();
  FC_CHECK(value.storage() == values.storage(), "train_step: a parameter is not a view of the parameter store");
  return ps.grads().narrow(0, value.offset() - values.offset(), value.numel()).reshape(value.shape());
}

// The shortest decimal that reads back as the same double (0.3, not 0.29999999999999999).
std::string num(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace

TrainStepResult af2_train_step(const AlphaFold& model, ag::ParamStore& params, const Af2ParamTable& table,
                               const std::map<std::string, std::vector<int64_t>>& official_shapes,
                               const Af2Features& features, const std::map<std::string, Tensor>& last_slice,
                               const Af2LossConfig& config, Device device, DType precision, bool report_grads,
                               ModelParallelGradReducer* model_parallel_grads) {
  FC_CHECK(precision == DType::f32 || precision == DType::bf16, "train_step: precision ", dtype_name(precision),
           " (fp32 or bf16)");
  params.zero_grad();
  ag::EnableGradGuard grad_on;
  // The masks derived from the features (attention biases, transposed and bf16 masks, the outer
  // product mean's normaliser) made once for the forward and the recomputed blocks' reruns.
  const DerivedMaskScope derived_masks;
  // Under bf16 autocast each parameter is cast once for the step's forward, recomputed segments and
  // backward (the parameters do not change before the optimizer runs, after this function).
  // Under bf16 the whole flat parameter buffer is cast at once (one kernel; each parameter's cast is
  // a view of it).
  const ag::ParamCastScope param_casts(precision == DType::bf16 ? params.values() : Tensor(), DType::bf16);
  Af2GraphOutputs g;
  std::optional<profile::Scope> stage;
  stage.emplace("forward", device);
  {
    std::optional<ag::AutocastGuard> autocast;
    if (precision == DType::bf16) autocast.emplace(DType::bf16);
    g = model.forward_train(features, device);
  }
  stage.reset();
  // The structure's outputs and the small heads' logits to the host, every loss term and its
  // gradient there; the pairwise heads' and the masked MSA's losses where their logits are.
  stage.emplace("loss", device);
  const StructureModuleOutputs& sm = *g.structure;
  const HeadOutputs& ho = *g.heads;
  const int64_t layers = static_cast<int64_t>(sm.frames_vars.size());

  // What the loss reads (suppl. 1.9): per-layer frames and angles, the last layer's side-chain
  // frames and atom14 positions, the final atoms (pLDDT target only), the heads' logits.
  Af2LossOutputs o;
  o.sm_frames = sm.frames;
  o.sm_angles = sm.angles;
  o.sm_unnormalized_angles = sm.unnormalized_angles;
  o.sidechain_frames = sm.sidechain_frames.select(0, layers - 1).contiguous();
  o.atom14_positions = sm.positions.select(0, layers - 1).contiguous();
  o.final_atom_positions = sm.final_atom_positions;
  // The pairwise heads' logits (and the masked MSA's) stay on a CUDA device: their losses run there
  // (losses_heads.h), and only one float per row comes back.
  auto on_device = [&](const Variable& v) { return device.is_cpu() ? host(v) : v.value(); };
  o.distogram_logits = on_device(ho.distogram_logits);
  o.masked_msa_logits = on_device(ho.masked_msa_logits);
  o.lddt_logits = host(ho.lddt_logits);
  o.experimentally_resolved_logits = host(ho.experimentally_resolved_logits);
  if (ho.tm_logits.defined()) o.tm_logits = on_device(ho.tm_logits);
  TrainStepResult result;
  result.weights = config.weights;
  result.loss = af2_loss(o, Af2LossBatch::from_arrays(last_slice), config);
  const Af2LossOutputs& d = result.loss.grads;

  // Backward of `loss`: each output's gradient enters at its graph handle. frames [L, N, 7] =
  // (quaternion, position_scale·translation in internal units); side-chain frames [N, 8, 4, 4] =
  // [R t; 0 1] (the bottom row is constant).
  const float scale = model.config().structure.position_scale;
  Roots roots;
  for (int64_t l = 0; l < layers; ++l) {
    const Tensor f = d.sm_frames.select(0, l);  // [N, 7]
    roots.add(sm.frames_vars[static_cast<size_t>(l)].quat, f.narrow(-1, 0, 4));
    Tensor gt = f.narrow(-1, 4, 3).contiguous().clone();
    for (int64_t k = 0; k < gt.numel(); ++k) gt.data<float>()[k] *= scale;
    roots.add(sm.frames_vars[static_cast<size_t>(l)].trans, gt);
    roots.add(sm.angles_vars[static_cast<size_t>(l)], d.sm_angles.select(0, l));
    roots.add(sm.unnormalized_angles_vars[static_cast<size_t>(l)], d.sm_unnormalized_angles.select(0, l));
  }
  const RigidVar& groups = sm.sidechain_frames_vars.back();
  roots.add(groups.rot, d.sidechain_frames.narrow(-2, 0, 3).narrow(-1, 0, 3));
  roots.add(groups.trans, d.sidechain_frames.narrow(-2, 0, 3).select(-1, 3));
  roots.add(sm.positions_vars.back(), d.atom14_positions);
  roots.add(ho.distogram_logits, d.distogram_logits);
  roots.add(ho.masked_msa_logits, d.masked_msa_logits);
  roots.add(ho.lddt_logits, d.lddt_logits);
  roots.add(ho.experimentally_resolved_logits, d.experimentally_resolved_logits);
  if (ho.tm_logits.defined()) roots.add(ho.tm_logits, d.tm_logits);
  FC_CHECK(!roots.vars.empty(), "train_step: no model output depends on a parameter");
  stage.reset();
  stage.emplace("backward", device);
  ag::backward(roots.vars, roots.grads);
  // Model parallelism (DAP / BP): the split stacks' partial gradients summed over their groups.
  if (model_parallel_grads != nullptr)
    model_parallel_grads->finish();  // the sums the backward started, and the rest
  else
    reduce_model_parallel_grads(model);
  stage.reset();
  if (!report_grads) {
    result.grad_norm = ops::global_grad_norm(params.grads());
    return result;
  }
  stage.emplace("grads_out", device);  // the flat gradient buffer → official keys on the host

  // The flat gradient buffer → official keys and layout (stacked arrays: block b at [b, …]).
  std::map<std::string, std::vector<const Af2ParamEntry*>> by_key;
  for (const Af2ParamEntry& e : table.entries()) by_key[e.key].push_back(&e);
  double sq = 0;
  for (const auto& [key, shape] : official_shapes) {
    const auto it = by_key.find(key);
    FC_CHECK(it != by_key.end(), "train_step: parameter '", key, "' of the parameter file has no model parameter");
    Shape s;
    for (int64_t v : shape) s.push_back(v);
    Tensor out = Tensor::zeros(s, DType::f32);
    for (const Af2ParamEntry* e : it->second) {
      Tensor dst = e->stack_index >= 0 ? out.select(0, e->stack_index) : out;
      FC_CHECK(dst.numel() == e->target.numel(), "train_step: parameter '", key, "' ", shape_str(shape),
               " does not fit the model's ", e->target.shape().str());
      dst.copy_(host_f32(grad_of(params, e->target)).reshape(dst.shape()));
    }
    for (float v : out.to_vector()) sq += static_cast<double>(v) * v;
    result.grads.emplace_back(key, out);
  }
  result.grad_norm = std::sqrt(sq);
  return result;
}

DType train_precision(const std::string& name, const std::string& what) {
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  FC_THROW(what, ": precision '", name, "' (expected fp32 or bf16)");
}

TrainStepResult run_train_step(const TrainStepOptions& o) {
  // Everything that can fail on bad input is read and checked before the model is built.
  const DType precision = train_precision(o.precision, "train_step");
  Af2Config config = infer_af2_config(o.params_path);
  config.structure.stop_rotation_gradient = o.stop_rotation_gradient;
  config.recompute_blocks = o.recompute_blocks;
  config.recompute_keep_blocks = o.recompute_keep_blocks;
  Af2LossConfig loss_config;
  loss_config.weights = o.weights ? *o.weights : LossWeights::stage(o.stage, config.heads.ptm);
  const Af2Features features = Af2Features::read_npz(o.batch_path);
  // Labels and the loss's features: every array of the batch at the last recycling slice.
  std::map<std::string, Tensor> last_slice;
  {
    const data::NpzReader npz(o.batch_path);
    for (const std::string& name : npz.names()) {
      const Tensor t = npz.read(name).to_tensor();
      FC_CHECK(t.dim() >= 1 && t.size(-1) == features.num_iterations(), o.batch_path, ": array '", name, "' ",
               t.shape().str(), " does not end in the recycling axis of ", features.num_iterations(), " iterations");
      last_slice[name] = t.select(-1, features.num_iterations() - 1).contiguous();
    }
  }
  for (const std::string& key : Af2LossBatch::keys())
    FC_CHECK(last_slice.count(key), o.batch_path, ": label or feature '", key, "' is missing (a training batch needs it)");
  std::map<std::string, std::vector<int64_t>> shapes;
  std::vector<std::string> param_names;  // the file's order
  {
    const data::NpzReader npz(o.params_path);
    param_names = npz.names();
    for (const std::string& name : param_names) shapes[name] = npz.read(name).shape;
  }
  log::info("train_step: ", config.preset, ", ", features.iteration(0).num_res(), " residues, ",
            features.num_iterations(), " iterations, stage ", o.stage);

  ag::ParamStore params(o.device);
  Generator init_rng(0);
  AlphaFold model(nn::Scope{&params, &init_rng, nullptr, ""}, config);
  model.train(false);  // dropout off: a deterministic step
  params.finalize();
  model.set_model_parallel(o.model_parallel);
  Af2ParamTable table;
  model.add_af2_params(table);
  load_af2_params(table, o.params_path);
  // Report in the parameter file's order.
  TrainStepResult r =
      af2_train_step(model, params, table, shapes, features, last_slice, loss_config, o.device, precision);
  std::map<std::string, Tensor> by_name(r.grads.begin(), r.grads.end());
  r.grads.clear();
  for (const std::string& name : param_names) r.grads.emplace_back(name, by_name.at(name));
  return r;
}

void write_train_step(const TrainStepResult& result, const std::string& grads_path, const std::string& losses_path) {
  const LossWeights& weights = result.weights;
  std::vector<std::pair<std::string, data::NpyArray>> arrays;
  for (const auto& [name, t] : result.grads) arrays.emplace_back(name, data::NpyArray::from_tensor(t));
  std::ostringstream js;
  js << "{\n \"terms\": {\n";
  for (const auto& [name, v] : result.loss.terms) js << "  " << json_string(name) << ": " << num(v) << ",\n";
  js << "  \"unscaled_loss\": " << num(result.loss.unscaled_loss) << ",\n  \"loss\": " << num(result.loss.loss)
     << "\n },\n";
  js << " \"weights\": {\"distogram\": " << num(weights.distogram)
     << ", \"experimentally_resolved\": " << num(weights.experimentally_resolved) << ", \"fape\": " << num(weights.fape)
     << ", \"masked_msa\": " << num(weights.masked_msa) << ", \"plddt_loss\": " << num(weights.plddt)
     << ", \"supervised_chi\": " << num(weights.supervised_chi) << ", \"tm\": " << num(weights.tm)
     << ", \"violation\": " << num(weights.violation) << "},\n";
  js << " \"scale\": " << num(result.loss.scale) << ",\n \"grad_norm\": " << num(result.grad_norm) << "\n}\n";
  // Both files under temporary names first; renamed only when both are complete.
  const std::string losses_tmp = losses_path + ".tmp";
  {
    std::ofstream f(losses_tmp, std::ios::trunc);
    FC_CHECK(f.good(), "cannot write ", losses_tmp);
    f << js.str();
    f.close();
    FC_CHECK(f.good(), "writing ", losses_tmp, " failed");
  }
  try {
    data::write_npz(grads_path, arrays);  // atomic itself
  } catch (...) {
    std::remove(losses_tmp.c_str());
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(losses_tmp, losses_path, ec);
  FC_CHECK(!ec, "cannot rename ", losses_tmp, " to ", losses_path, ": ", ec.message());
}

}  // namespace foldcore::af2
